//! Keel's own EL2 stage-1 translation: an identity map with 1 GiB blocks (Arm ARM D8) of the
//! first [`MAPPED_GIBS`] GiB of the physical space.
//!
//! Each GiB that holds some of the board's RAM (the configuration's `[system] ram`, which the
//! compiler checked against the board's device tree) is normal write-back memory; every other
//! one is Device-nGnRnE and never executable: the board's devices (QEMU virt's below 1 GiB,
//! the ZynqMP's from 3.5 GiB up).
//!
//! A coloured Keel (`[system] hypervisor_colours`) switches to another map once at boot
//! ([`switch_to_coloured`]): its linked range on the frames of its colours
//! (`keel_core::keel_map`), everything else as before. [`phys`] gives the physical address of
//! anything of Keel's that a device or the MMU reads.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use keel_core::colour::Colours;
use keel_core::placement::{KeelMap, Place};

use super::regs::write_sysreg;

/// GiB of the physical space mapped.
pub const MAPPED_GIBS: u64 = 16;

#[repr(C, align(4096))]
struct Level1Table(UnsafeCell<[u64; 512]>);

// SAFETY: the table is written only by the primary pCPU, in `build` before the MMU reads it and
// in `attach` before any other pCPU runs; afterwards it is only read (by the MMUs).
unsafe impl Sync for Level1Table {}

static EL2_TABLE: Level1Table = Level1Table(UnsafeCell::new([0; 512]));

/// Keel's coloured range ([`KeelMap`]'s fields; all zero for an uncoloured Keel), written once
/// by [`switch_to_coloured`] before any other pCPU runs.
static KEEL_START: AtomicU64 = AtomicU64::new(0);
static KEEL_SIZE: AtomicU64 = AtomicU64::new(0);
static KEEL_HOLE: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
static KEEL_FRAMES: AtomicU64 = AtomicU64::new(0);
static KEEL_MASK: AtomicU64 = AtomicU64::new(0);
static KEEL_COUNT: AtomicU32 = AtomicU32::new(0);
/// The coloured map's root: its physical address and Keel's (0: the identity map's).
static ROOT_PHYS: AtomicU64 = AtomicU64::new(0);
static ROOT: AtomicU64 = AtomicU64::new(0);

const VALID_BLOCK: u64 = 0b01;
const ATTR_DEVICE: u64 = 0 << 2;
const ATTR_NORMAL: u64 = 1 << 2;
const INNER_SHAREABLE: u64 = 0b11 << 8;
const ACCESS_FLAG: u64 = 1 << 10;
const EXECUTE_NEVER: u64 = 1 << 54;
/// MAIR_EL2: attribute 0 Device-nGnRnE, attribute 1 Normal write-back read/write-allocate.
const MAIR: u64 = 0xff << 8;
/// TCR_EL2: T0SZ = 25 (39-bit VA), inner/outer write-back, inner shareable, 4 KiB granule,
/// PS = 40 bits, RES1 bits 23 and 31.
const TCR: u64 = 25 | (1 << 8) | (1 << 10) | (3 << 12) | (2 << 16) | (1 << 23) | (1 << 31);
/// SCTLR_EL2: MMU, data cache, alignment checks of SP, instruction cache, on top of RES1 bits.
const SCTLR: u64 = 0x30c5_0830 | (1 << 0) | (1 << 2) | (1 << 3) | (1 << 12);

/// Fills the identity map for the board's RAM at `ram_base` of `ram_size` bytes. Runs once,
/// on the primary pCPU, with the MMU off.
pub fn build(ram_base: u64, ram_size: u64) {
    // SAFETY: per the Sync justification, nothing else accesses the table now.
    let table = unsafe { &mut *EL2_TABLE.0.get() };
    let ram_end = ram_base.saturating_add(ram_size);
    for (gib, entry) in (0..MAPPED_GIBS).zip(table.iter_mut()) {
        let start = gib << 30;
        let ram = start < ram_end && ram_base < start + (1 << 30);
        *entry = start
            | VALID_BLOCK
            | ACCESS_FLAG
            | if ram {
                ATTR_NORMAL | INNER_SHAREABLE
            } else {
                ATTR_DEVICE | EXECUTE_NEVER
            };
    }
}

/// Hooks the level-1 entries of `root` from index `first` on that are valid (tables of Keel's
/// windows on coloured VMs' RAM, `keel_core::window`) into Keel's table. On the primary pCPU,
/// after [`enable`] and before any other pCPU runs; the entries replaced were invalid, so no
/// translation of them can be cached, but the TLB is cleaned anyway.
pub fn attach(root: &[u64; 512], first: usize) {
    let coloured = ROOT.load(Ordering::Relaxed) as *mut [u64; 512];
    let table = if coloured.is_null() {
        EL2_TABLE.0.get()
    } else {
        coloured
    };
    // SAFETY: per the Sync justification (of the coloured root's pool too), no other pCPU runs
    // yet; this pCPU's MMU reads the table, and an invalid entry becoming valid needs no
    // break-before-make.
    let table = unsafe { &mut *table };
    for (entry, &new) in table.iter_mut().zip(root).skip(first) {
        if new & VALID_BLOCK != 0 {
            *entry = new;
        }
    }
    // SAFETY: barriers and TLB maintenance only: the table writes are seen by the walker
    // before any access through the windows.
    unsafe {
        core::arch::asm!(
            "dsb ishst",
            "tlbi alle2",
            "dsb ish",
            "isb",
            options(nostack)
        );
    }
}

/// Turns the EL2 MMU and caches on for this pCPU using the table from [`build`], or a coloured
/// Keel's map once [`switch_to_coloured`] made it.
pub fn enable() {
    super::cpu::dsb_sy();
    let root = match ROOT_PHYS.load(Ordering::Relaxed) {
        0 => EL2_TABLE.0.get() as u64,
        coloured => coloured,
    };
    // SAFETY: the table maps everything Keel touches at the addresses it is linked for, with
    // the attributes it expects, so execution continues at the same addresses after
    // SCTLR_EL2.M is set.
    unsafe {
        write_sysreg!("mair_el2", MAIR);
        write_sysreg!("tcr_el2", TCR);
        write_sysreg!("ttbr0_el2", root);
        core::arch::asm!("isb", "tlbi alle2", "dsb nsh", "isb", options(nostack));
        write_sysreg!("sctlr_el2", SCTLR);
        core::arch::asm!("isb", options(nostack));
    }
}

/// The MMU registers a secondary pCPU of a coloured Keel writes before its first access to
/// memory (`boot`): MAIR_EL2, TCR_EL2 and SCTLR_EL2 as [`enable`] writes them.
pub const SECONDARY_MAIR: u64 = MAIR;
/// See [`SECONDARY_MAIR`].
pub const SECONDARY_TCR: u64 = TCR;
/// See [`SECONDARY_MAIR`].
pub const SECONDARY_SCTLR: u64 = SCTLR;

/// How Keel's addresses map to physical ones: [`KeelMap::IDENTITY`] for an uncoloured Keel.
pub fn keel_map() -> KeelMap {
    KeelMap {
        start: KEEL_START.load(Ordering::Relaxed),
        size: KEEL_SIZE.load(Ordering::Relaxed),
        hole: (
            KEEL_HOLE[0].load(Ordering::Relaxed),
            KEEL_HOLE[1].load(Ordering::Relaxed),
        ),
        frames: KEEL_FRAMES.load(Ordering::Relaxed),
        colours: Colours {
            mask: KEEL_MASK.load(Ordering::Relaxed),
            count: KEEL_COUNT.load(Ordering::Relaxed),
        },
    }
}

/// The physical address of Keel's address `address` (itself, but in a coloured Keel's range).
pub fn phys(address: u64) -> u64 {
    keel_map().phys(address)
}

/// Where a pool of tables at Keel's address `address` lies: each table's physical address.
pub fn place(address: u64) -> Place {
    Place::new(address, keel_map())
}

/// The coloured map's root, physical (0 for an uncoloured Keel): what a secondary pCPU loads
/// into TTBR0_EL2 before its first access to memory.
pub fn coloured_root() -> u64 {
    ROOT_PHYS.load(Ordering::Relaxed)
}

/// Copies Keel's coloured range to its frames (`map`; its hole's pages stay, not copied) and
/// switches this pCPU to Keel's coloured map, whose root `root` (Keel's address) is at
/// `root_phys`; records both for [`phys`], [`attach`] and the secondary pCPUs.
///
/// # Safety
/// Only this pCPU runs, with interrupts masked and its MMU on with [`build`]'s identity map;
/// `root` is a complete map of everything Keel touches, its range on its frames as `map`
/// says (`keel_core::keel_map::keel_map`), and those frames hold nothing else.
pub unsafe fn switch_to_coloured(map: &KeelMap, root: u64, root_phys: u64) {
    // Recorded before the copy, so that the copy holds them too.
    KEEL_START.store(map.start, Ordering::Relaxed);
    KEEL_SIZE.store(map.size, Ordering::Relaxed);
    KEEL_HOLE[0].store(map.hole.0, Ordering::Relaxed);
    KEEL_HOLE[1].store(map.hole.1, Ordering::Relaxed);
    KEEL_FRAMES.store(map.frames, Ordering::Relaxed);
    KEEL_MASK.store(map.colours.mask, Ordering::Relaxed);
    KEEL_COUNT.store(map.colours.count, Ordering::Relaxed);
    ROOT.store(root, Ordering::Relaxed);
    ROOT_PHYS.store(root_phys, Ordering::Relaxed);
    super::cpu::dsb_sy();
    // SAFETY: per the caller, nothing else runs and the frames are free. The copy uses
    // registers only, so the range copied (this pCPU's stack included) is the state Keel
    // continues from: the first store after it goes through the new map. Each line copied is
    // cleaned to the point of unification and the instruction cache invalidated before the
    // new map's code runs.
    unsafe {
        core::arch::asm!(
            "mov    x6, {frames}",          // the period's first frame
            "0:",
            "mov    x7, #0",                // its colour
            "1:",
            "lsr    x8, {mask}, x7",
            "tbz    x8, #0, 3f",
            "add    x9, x6, x7, lsl #12",   // a frame of Keel's colours
            "cmp    {src}, {hole}",         // the hole's pages are not copied
            "csel   {src}, {hole_end}, {src}, eq",
            "mov    x10, #4096",
            "2:",
            "ldp    x11, x12, [{src}], #16",
            "ldp    x13, x14, [{src}], #16",
            "ldp    x15, x16, [{src}], #16",
            "ldp    x17, x8, [{src}], #16",
            "stp    x11, x12, [x9]",
            "stp    x13, x14, [x9, #16]",
            "stp    x15, x16, [x9, #32]",
            "stp    x17, x8, [x9, #48]",
            "dc     cvau, x9",
            "add    x9, x9, #64",
            "subs   x10, x10, #64",
            "b.ne   2b",
            "subs   {pages}, {pages}, #1",
            "b.eq   4f",
            "3:",
            "add    x7, x7, #1",
            "cmp    x7, {count}",
            "b.lo   1b",
            "add    x6, x6, {count}, lsl #12",
            "b      0b",
            "4:",
            "dsb    ish",
            "msr    ttbr0_el2, {root}",
            "isb",
            "tlbi   alle2",
            "dsb    ish",
            "ic     ialluis",
            "dsb    ish",
            "isb",
            src = inout(reg) map.start => _,
            pages = inout(reg) map.coloured_size() / 4096 => _,
            hole = in(reg) map.hole.0,
            hole_end = in(reg) map.hole.1,
            frames = in(reg) map.frames,
            mask = in(reg) map.colours.mask,
            count = in(reg) u64::from(map.colours.count),
            root = in(reg) root_phys,
            out("x6") _, out("x7") _, out("x8") _, out("x9") _, out("x10") _,
            out("x11") _, out("x12") _, out("x13") _, out("x14") _, out("x15") _,
            out("x16") _, out("x17") _,
            options(nostack)
        );
    }
}
