//! The EL1 exception vector table and the Rust side of it: one IRQ handler, fatal everything else.
//!
//! Table layout (Arm ARM D1.10.2): 16 entries of 0x80 bytes, 2 KiB aligned; the SDK runs on
//! SP_EL1, so only "current EL with SP_ELx" synchronous (0x200) and IRQ (0x280) are expected.
//! The IRQ path saves the caller-saved registers (x0..x18, x29, x30), calls the handler of the
//! GIC in use ([`handle_irq_gicv3`] or [`handle_irq_gicv2`]), restores them and returns.
//! Handlers run with IRQs masked and must not take a synchronous exception (that one is fatal
//! anyway), so ELR_EL1/SPSR_EL1 need no saving.
//!
//! Each GIC version has a vector table of its own, which differ only in the handler their IRQ
//! path calls: the version is chosen once, by the table installed (at boot, and at each vCPU's
//! and task's start), not at each interrupt, so that the GICv3 path is the same instructions
//! as before there was a choice.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::fatal::fatal_exception;
use crate::gic::{self, IntId, Version, SPURIOUS_INTID_FIRST};
use crate::mmio::MmioFrame;
use crate::{gicv2, gicv3};

/// Sets VBAR_EL1 to the SDK's vector table `$table` (a symbol of the `global_asm!` below).
///
/// # Safety
/// `$table` must be one of the SDK's vector tables.
macro_rules! install_table {
    ($table:ident) => {
        core::arch::asm!(
            concat!("adrp {table}, ", stringify!($table)),
            concat!("add {table}, {table}, :lo12:", stringify!($table)),
            "msr vbar_el1, {table}",
            "isb",
            table = out(reg) _,
            options(nomem, nostack, preserves_flags),
        )
    };
}

/// What the IRQ vector records in its first instructions, before anything else runs, once
/// [`stamp_irq_entries`] (feature `irq-entry-stamp`) installed the stamping vector table: the
/// cycle counter and the interrupted code's x9.
///
/// A latency benchmark spins storing PMCCNTR_EL0 to x9; the difference between the two
/// fields is then the interrupt's delivery latency in instructions.
#[repr(C)]
#[derive(Debug)]
pub struct IrqEntryStamp {
    /// PMCCNTR_EL0 read by the vector's second instruction.
    pub cycle_counter: AtomicU64,
    /// The interrupted code's x9.
    pub interrupted_x9: AtomicU64,
}

/// The stamp of the latest IRQ (stays zero without the `irq-entry-stamp` feature).
pub static IRQ_ENTRY_STAMP: IrqEntryStamp = IrqEntryStamp {
    cycle_counter: AtomicU64::new(0),
    interrupted_x9: AtomicU64::new(0),
};

/// The registered IRQ handler, a `fn(IntId)` as `usize`, or 0 for none.
static IRQ_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Registers the function called, with IRQs masked, for each acknowledged interrupt; the SDK
/// signals its end of interrupt after the function returns.
pub fn set_irq_handler(handler: fn(IntId)) {
    IRQ_HANDLER.store(handler as usize, Ordering::Release);
}

/// Runs the registered handler, if any, for `intid`.
#[inline(always)]
fn run_irq_handler(intid: IntId) {
    let handler = IRQ_HANDLER.load(Ordering::Acquire);
    if handler != 0 {
        // SAFETY: only `set_irq_handler` stores a non-zero value, and it stores a `fn(IntId)`.
        let handler = unsafe { core::mem::transmute::<usize, fn(IntId)>(handler) };
        handler(intid);
    }
}

/// Called by the GICv3 tables' IRQ vector: acknowledges one interrupt (ICC_IAR1_EL1), runs
/// the handler, ends it (ICC_EOIR1_EL1).
extern "C" fn handle_irq_gicv3() {
    let Some(intid) = gicv3::acknowledge() else {
        return;
    };
    run_irq_handler(intid);
    gicv3::end_of_interrupt(intid);
}

/// Called by the GICv2 tables' IRQ vector: acknowledges one interrupt (GICC_IAR), runs the
/// handler, ends it (GICC_EOIR, with the SGI source the acknowledge read).
extern "C" fn handle_irq_gicv2() {
    // SAFETY: the CPU interface the device tree names (this table is installed only when a
    // GICv2 is selected).
    let cpu_interface =
        gicv2::CpuInterface::new(unsafe { MmioFrame::new(gic::gicv2_cpu_interface_base()) });
    let acknowledged = cpu_interface.acknowledge();
    let intid = acknowledged & gicv2::IAR_INTERRUPT_ID;
    if intid >= SPURIOUS_INTID_FIRST {
        return;
    }
    run_irq_handler(intid);
    cpu_interface.end_of_interrupt(acknowledged);
}

/// Installs on this CPU the vector table of the GIC in use (the plain one: a benchmark
/// that wants the stamping one asks for it with `stamp_irq_entries` afterwards). The boot code
/// calls it once the device tree's GIC is selected, and each vCPU and task entry when it runs
/// on a GICv2 (their assembly installs the GICv3 table first).
pub(crate) fn install_vectors() {
    match gic::version() {
        // SAFETY: the table is the SDK's, with the GICv3 IRQ path.
        Version::V3 => unsafe { install_table!(__keel_guest_vectors) },
        // SAFETY: the table is the SDK's, with the GICv2 IRQ path.
        Version::V2 => unsafe { install_table!(__keel_guest_vectors_gicv2) },
    }
}

/// Installs on this CPU a GICv2 vector table if the GIC in use is a GICv2; nothing on a GICv3,
/// whose table the entry's assembly already installed.
pub(crate) fn install_gicv2_vectors_if_needed() {
    if gic::version() == Version::V2 {
        install_vectors();
    }
}

/// Called by the synchronous vector with ESR_EL1, ELR_EL1 and FAR_EL1.
extern "C" fn handle_synchronous(esr: u64, elr: u64, far: u64) -> ! {
    fatal_exception("synchronous", esr, elr, far)
}

/// Names of the 16 vectors, by index (offset / 0x80).
const VECTOR_NAMES: [&str; 16] = [
    "synchronous from EL1t",
    "IRQ from EL1t",
    "FIQ from EL1t",
    "SError from EL1t",
    "synchronous",
    "IRQ",
    "FIQ",
    "SError",
    "synchronous from lower EL (AArch64)",
    "IRQ from lower EL (AArch64)",
    "FIQ from lower EL (AArch64)",
    "SError from lower EL (AArch64)",
    "synchronous from lower EL (AArch32)",
    "IRQ from lower EL (AArch32)",
    "FIQ from lower EL (AArch32)",
    "SError from lower EL (AArch32)",
];

/// Called by every vector the SDK does not expect, with ESR_EL1, ELR_EL1, FAR_EL1 and the
/// vector's index.
extern "C" fn handle_unexpected(esr: u64, elr: u64, far: u64, vector: u64) -> ! {
    let name = VECTOR_NAMES
        .get(vector as usize)
        .copied()
        .unwrap_or("unknown vector");
    fatal_exception(name, esr, elr, far)
}

/// Switches to the vector table whose IRQ vector stamps [`IRQ_ENTRY_STAMP`] (it reads the PMU
/// cycle counter, so only a guest that has the PMU may call this), for the GIC in use.
#[cfg(feature = "irq-entry-stamp")]
pub fn stamp_irq_entries() {
    match gic::version() {
        // SAFETY: the stamping table differs from the installed one only in its IRQ vector's
        // first instructions, which save and restore what they use.
        Version::V3 => unsafe { install_table!(__keel_guest_stamping_vectors) },
        // SAFETY: as above, with the GICv2 IRQ path.
        Version::V2 => unsafe { install_table!(__keel_guest_stamping_vectors_gicv2) },
    }
}

/// Whether the stamping vector table is assembled (assembler `.if` operand).
const STAMP_IRQ_ENTRY: u32 = cfg!(feature = "irq-entry-stamp") as u32;

core::arch::global_asm!(
    // An unexpected vector: x3 = its index, then the common path.
    ".macro keel_guest_unexpected_vector index",
    "    .balign 0x80",
    "    mov     x3, #\\index",
    "    b       __keel_guest_unexpected",
    ".endm",
    "",
    // A vector table whose IRQ vector branches to `irq`; with `stamp` 1, it stamps
    // IRQ_ENTRY_STAMP first.
    ".macro keel_guest_vector_table name, stamp, irq",
    ".balign 0x800",
    ".global \\name",
    "\\name:",
    // Current EL with SP_EL0.
    "    keel_guest_unexpected_vector 0",
    "    keel_guest_unexpected_vector 1",
    "    keel_guest_unexpected_vector 2",
    "    keel_guest_unexpected_vector 3",
    // Current EL with SP_ELx: synchronous.
    "    .balign 0x80",
    "    mrs     x0, esr_el1",
    "    mrs     x1, elr_el1",
    "    mrs     x2, far_el1",
    "    b       {synchronous}",
    // Current EL with SP_ELx: IRQ.
    "    .balign 0x80",
    ".if \\stamp",
    "    stp     x0, x1, [sp, #-16]!",
    "    mrs     x0, pmccntr_el0",
    "    adrp    x1, {irq_stamp}",
    "    add     x1, x1, :lo12:{irq_stamp}",
    "    stp     x0, x9, [x1]",
    "    ldp     x0, x1, [sp], #16",
    ".endif",
    "    b       \\irq",
    "    keel_guest_unexpected_vector 6",
    "    keel_guest_unexpected_vector 7",
    // Lower EL, AArch64 and AArch32: the SDK runs nothing at EL0.
    "    keel_guest_unexpected_vector 8",
    "    keel_guest_unexpected_vector 9",
    "    keel_guest_unexpected_vector 10",
    "    keel_guest_unexpected_vector 11",
    "    keel_guest_unexpected_vector 12",
    "    keel_guest_unexpected_vector 13",
    "    keel_guest_unexpected_vector 14",
    "    keel_guest_unexpected_vector 15",
    ".endm",
    "",
    // The IRQ path around the handler: the caller-saved registers saved, then restored.
    ".macro keel_guest_irq_save",
    "    sub     sp, sp, #176",
    "    stp     x0, x1, [sp, #0]",
    "    stp     x2, x3, [sp, #16]",
    "    stp     x4, x5, [sp, #32]",
    "    stp     x6, x7, [sp, #48]",
    "    stp     x8, x9, [sp, #64]",
    "    stp     x10, x11, [sp, #80]",
    "    stp     x12, x13, [sp, #96]",
    "    stp     x14, x15, [sp, #112]",
    "    stp     x16, x17, [sp, #128]",
    "    stp     x18, x29, [sp, #144]",
    "    str     x30, [sp, #160]",
    ".endm",
    ".macro keel_guest_irq_restore_and_return",
    "    ldr     x30, [sp, #160]",
    "    ldp     x18, x29, [sp, #144]",
    "    ldp     x16, x17, [sp, #128]",
    "    ldp     x14, x15, [sp, #112]",
    "    ldp     x12, x13, [sp, #96]",
    "    ldp     x10, x11, [sp, #80]",
    "    ldp     x8, x9, [sp, #64]",
    "    ldp     x6, x7, [sp, #48]",
    "    ldp     x4, x5, [sp, #32]",
    "    ldp     x2, x3, [sp, #16]",
    "    ldp     x0, x1, [sp, #0]",
    "    add     sp, sp, #176",
    "    eret",
    ".endm",
    "",
    ".section .text.keel_vectors, \"ax\"",
    "    keel_guest_vector_table __keel_guest_vectors, 0, __keel_guest_irq",
    ".if {stamp}",
    "    keel_guest_vector_table __keel_guest_stamping_vectors, 1, __keel_guest_irq",
    ".endif",
    "    keel_guest_vector_table __keel_guest_vectors_gicv2, 0, __keel_guest_irq_gicv2",
    ".if {stamp}",
    "    keel_guest_vector_table __keel_guest_stamping_vectors_gicv2, 1, __keel_guest_irq_gicv2",
    ".endif",
    ".purgem keel_guest_vector_table",
    ".purgem keel_guest_unexpected_vector",
    "",
    "__keel_guest_unexpected:",
    "    mrs     x0, esr_el1",
    "    mrs     x1, elr_el1",
    "    mrs     x2, far_el1",
    "    b       {unexpected}",
    "",
    "__keel_guest_irq:",
    "    keel_guest_irq_save",
    "    bl      {irq_gicv3}",
    "    keel_guest_irq_restore_and_return",
    "",
    "__keel_guest_irq_gicv2:",
    "    keel_guest_irq_save",
    "    bl      {irq_gicv2}",
    "    keel_guest_irq_restore_and_return",
    ".purgem keel_guest_irq_save",
    ".purgem keel_guest_irq_restore_and_return",
    stamp = const STAMP_IRQ_ENTRY,
    irq_stamp = sym IRQ_ENTRY_STAMP,
    synchronous = sym handle_synchronous,
    unexpected = sym handle_unexpected,
    irq_gicv3 = sym handle_irq_gicv3,
    irq_gicv2 = sym handle_irq_gicv2,
);
