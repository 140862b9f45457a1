//! The EL1 exception vector table and the Rust side of it: one IRQ handler, fatal everything else.
//!
//! Table layout (Arm ARM D1.10.2): 16 entries of 0x80 bytes, 2 KiB aligned; the SDK runs on
//! SP_EL1, so only "current EL with SP_ELx" synchronous (0x200) and IRQ (0x280) are expected.
//! The IRQ path saves the caller-saved registers (x0..x18, x29, x30), calls [`handle_irq`],
//! restores them and returns. Handlers run with IRQs masked and must not take a synchronous
//! exception (that one is fatal anyway), so ELR_EL1/SPSR_EL1 need no saving.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::fatal::fatal_exception;
use crate::gicv3::{self, IntId};

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

/// Called by the IRQ vector: acknowledges one interrupt, runs the handler, ends it.
extern "C" fn handle_irq() {
    let Some(intid) = gicv3::acknowledge() else {
        return;
    };
    let handler = IRQ_HANDLER.load(Ordering::Acquire);
    if handler != 0 {
        // SAFETY: only `set_irq_handler` stores a non-zero value, and it stores a `fn(IntId)`.
        let handler = unsafe { core::mem::transmute::<usize, fn(IntId)>(handler) };
        handler(intid);
    }
    gicv3::end_of_interrupt(intid);
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
/// cycle counter, so only a guest that has the PMU may call this).
#[cfg(feature = "irq-entry-stamp")]
pub fn stamp_irq_entries() {
    // SAFETY: the stamping table differs from the installed one only in its IRQ vector's
    // first instructions, which save and restore what they use.
    unsafe {
        core::arch::asm!(
            "adrp {table}, __keel_guest_stamping_vectors",
            "add {table}, {table}, :lo12:__keel_guest_stamping_vectors",
            "msr vbar_el1, {table}",
            "isb",
            table = out(reg) _,
            options(nomem, nostack, preserves_flags),
        )
    };
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
    // A vector table; with `stamp` 1, its IRQ vector stamps IRQ_ENTRY_STAMP first.
    ".macro keel_guest_vector_table name, stamp",
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
    "    b       __keel_guest_irq",
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
    ".section .text.keel_vectors, \"ax\"",
    "    keel_guest_vector_table __keel_guest_vectors, 0",
    ".if {stamp}",
    "    keel_guest_vector_table __keel_guest_stamping_vectors, 1",
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
    "    bl      {irq}",
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
    stamp = const STAMP_IRQ_ENTRY,
    irq_stamp = sym IRQ_ENTRY_STAMP,
    synchronous = sym handle_synchronous,
    unexpected = sym handle_unexpected,
    irq = sym handle_irq,
);
