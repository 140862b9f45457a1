//! Keel's own EL2 stage-1 translation: an identity map with 1 GiB blocks (Arm ARM D8) of the
//! first [`MAPPED_GIBS`] GiB of the physical space.
//!
//! Each GiB that holds some of the board's RAM (the configuration's `[system] ram`, which the
//! compiler checked against the board's device tree) is normal write-back memory; every other
//! one is Device-nGnRnE and never executable: the board's devices (QEMU virt's below 1 GiB,
//! the ZynqMP's from 3.5 GiB up).

use core::cell::UnsafeCell;

use super::regs::write_sysreg;

/// GiB of the physical space mapped.
pub const MAPPED_GIBS: u64 = 16;

#[repr(C, align(4096))]
struct Level1Table(UnsafeCell<[u64; 512]>);

// SAFETY: the table is written only by the primary pCPU, in `build` before the MMU reads it and
// in `attach` before any other pCPU runs; afterwards it is only read (by the MMUs).
unsafe impl Sync for Level1Table {}

static EL2_TABLE: Level1Table = Level1Table(UnsafeCell::new([0; 512]));

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
    // SAFETY: per the Sync justification, no other pCPU runs yet; this pCPU's MMU reads the
    // table, and an invalid entry becoming valid needs no break-before-make.
    let table = unsafe { &mut *EL2_TABLE.0.get() };
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

/// Turns the EL2 MMU and caches on for this pCPU using the table from [`build`].
pub fn enable() {
    super::cpu::dsb_sy();
    // SAFETY: the table identity-maps everything Keel touches with the attributes it expects,
    // so execution continues at the same addresses after SCTLR_EL2.M is set.
    unsafe {
        write_sysreg!("mair_el2", MAIR);
        write_sysreg!("tcr_el2", TCR);
        write_sysreg!("ttbr0_el2", EL2_TABLE.0.get() as u64);
        core::arch::asm!("isb", "tlbi alle2", "dsb nsh", "isb", options(nostack));
        write_sysreg!("sctlr_el2", SCTLR);
        core::arch::asm!("isb", options(nostack));
    }
}
