//! The image header and first instructions: arm64 Image header, stack, BSS, vectors, then Rust.
//!
//! The header follows the Linux arm64 boot protocol (Documentation/arch/arm64/booting.rst,
//! "Call the kernel image"): both QEMU's `-kernel` loader and Keel place the image at
//! RAM base + `text_offset` and enter its first instruction at EL1 with the MMU off and
//! x0 = the device tree's address. Before the guest's entry point, the boot code reads the
//! device tree's GIC ([`crate::gic`]).

use core::sync::atomic::{AtomicUsize, Ordering};

/// `text_offset` of the header: the image sits 2 MiB above the RAM base (see `link.ld`).
pub const TEXT_OFFSET: u64 = 0x20_0000;
/// Header flags (booting.rst): bit 0 = 0 little-endian, bits 1-2 = 1 for 4 KiB pages, bit 3 = 0
/// "place the image as close as possible to the base of DRAM" (it is linked at a fixed address).
pub const HEADER_FLAGS: u64 = 0b0010;
/// The header magic, "ARM\x64" read little-endian.
pub const HEADER_MAGIC: u32 = 0x644D_5241;
/// SCTLR_EL1 at entry (Arm ARM D17.2.118): RES1 bits 29, 28, 23, 22, 20, 11, plus I (bit 12)
/// and SA (bit 3); M (MMU), C (data cache) and A (alignment check) off.
pub const SCTLR_EL1_AT_ENTRY: u64 = 0x30D0_1808;

// The header is 64 bytes: code0 branches over it. `__keel_guest_main` is defined by the
// guest's `entry!`, `__keel_guest_vectors` by `exceptions`; the other `__keel_*` symbols
// come from `link.ld`.
core::arch::global_asm!(
    crate::entry_check::entry_check_macros!(),
    ".section .text.head, \"ax\"",
    ".global _start",
    "_start:",
    "    b       2f",                 // code0: branch to the real entry
    "    .long   0",                  // code1
    "    .quad   {text_offset}",      // text_offset
    "    .quad   __keel_image_size",  // image_size, BSS and stack included
    "    .quad   {flags}",            // flags
    "    .quad   0, 0, 0",            // res2..res4
    "    .long   {magic}",            // magic
    "    .long   0",                  // res5 (PE/COFF offset: none)
    "2:  KEEL_CHECK_ENTRY 6f",
    "6:  msr     daifset, #0xf",
    "    mov     x19, x0",            // the device tree address survives in a callee-saved register
    "    msr     spsel, #1",
    "    movz    x1, #{sctlr_low}",
    "    movk    x1, #{sctlr_high}, lsl #16",
    "    msr     sctlr_el1, x1",
    "    isb",
    "    adrp    x1, __keel_stack_top",
    "    add     x1, x1, :lo12:__keel_stack_top",
    "    mov     sp, x1",
    "    adrp    x1, __keel_bss_start",
    "    add     x1, x1, :lo12:__keel_bss_start",
    "    adrp    x2, __keel_bss_end",
    "    add     x2, x2, :lo12:__keel_bss_end",
    // .bss zeroed 64 bytes a round while 64 are left, then 8 at a time: a guest's large
    // tables (its latency histograms) take its boot a few microseconds, not tens.
    "3:  add     x3, x1, #64",
    "    cmp     x3, x2",
    "    b.hi    6f",
    "    stp     xzr, xzr, [x1]",
    "    stp     xzr, xzr, [x1, #16]",
    "    stp     xzr, xzr, [x1, #32]",
    "    stp     xzr, xzr, [x1, #48]",
    "    mov     x1, x3",
    "    b       3b",
    "6:  cmp     x1, x2",
    "    b.hs    4f",
    "    str     xzr, [x1], #8",
    "    b       6b",
    "4:  adrp    x1, __keel_guest_vectors",
    "    add     x1, x1, :lo12:__keel_guest_vectors",
    "    msr     vbar_el1, x1",
    "    isb",
    "    mov     x0, x19",
    "    bl      {select_gic}",
    "    mov     x0, x19",
    "    bl      __keel_guest_main",
    "5:  wfe",
    "    b       5b",
    // The CPU_ON entry (`psci::cpu_on`): x0 = the top of the stack this vCPU is to use.
    ".section .text.keel_secondary_entry, \"ax\"",
    ".global keel_secondary_entry",
    "keel_secondary_entry:",
    "    KEEL_CHECK_ENTRY 6f",
    "6:  msr     daifset, #0xf",
    "    msr     spsel, #1",
    "    movz    x1, #{sctlr_low}",
    "    movk    x1, #{sctlr_high}, lsl #16",
    "    msr     sctlr_el1, x1",
    "    mov     sp, x0",
    "    adrp    x1, __keel_guest_vectors",
    "    add     x1, x1, :lo12:__keel_guest_vectors",
    "    msr     vbar_el1, x1",
    "    isb",
    "    bl      {secondary}",
    "7:  wfe",
    "    b       7b",
    text_offset = const TEXT_OFFSET,
    flags = const HEADER_FLAGS,
    magic = const HEADER_MAGIC,
    sctlr_low = const SCTLR_EL1_AT_ENTRY & 0xFFFF,
    sctlr_high = const SCTLR_EL1_AT_ENTRY >> 16,
    secondary = sym secondary_main,
    select_gic = sym crate::gic::select_from_boot_device_tree,
    entry_sctlr_low = const crate::entry_check::KEEL_SCTLR_EL1_AT_ENTRY & 0xFFFF,
    entry_sctlr_high = const crate::entry_check::KEEL_SCTLR_EL1_AT_ENTRY >> 16,
);

unsafe extern "C" {
    /// The CPU_ON entry point (see [`crate::psci::cpu_on`]); not to be called from Rust.
    pub fn keel_secondary_entry();
}

/// The function vCPUs started with [`crate::psci::cpu_on`] run (a `fn(usize) -> !` as
/// `usize`), or 0 for none: such a vCPU then parks.
static SECONDARY_MAIN: AtomicUsize = AtomicUsize::new(0);

/// Sets the function a vCPU started with [`crate::psci::cpu_on`] runs, with IRQs masked, on the
/// stack given to `cpu_on` (whose top it receives), with the SDK's vectors installed.
pub fn set_secondary_main(main: fn(usize) -> !) {
    SECONDARY_MAIN.store(main as usize, Ordering::Release);
}

/// Called by the CPU_ON entry with the stack top.
extern "C" fn secondary_main(stack_top: usize) -> ! {
    crate::exceptions::install_gicv2_vectors_if_needed();
    let main = SECONDARY_MAIN.load(Ordering::Acquire);
    if main == 0 {
        loop {
            crate::cpu::wait_for_interrupt();
        }
    }
    // SAFETY: only `set_secondary_main` stores a non-zero value, and it stores a `fn(usize) -> !`.
    let main = unsafe { core::mem::transmute::<usize, fn(usize) -> !>(main) };
    main(stack_top)
}

/// Names the guest's Rust entry point, `fn(device_tree_address: usize) -> !`.
///
/// The boot code calls it with IRQs masked, the stack set, BSS zeroed, the device tree's GIC
/// selected ([`crate::gic`]) and the SDK's exception vectors for it installed.
#[macro_export]
macro_rules! entry {
    ($main:path) => {
        /// The guest's entry point as the SDK's boot code calls it.
        #[unsafe(no_mangle)]
        extern "C" fn __keel_guest_main(device_tree_address: usize) -> ! {
            let main: fn(usize) -> ! = $main;
            main(device_tree_address)
        }
    };
}
