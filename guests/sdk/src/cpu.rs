//! The running CPU: interrupt masking, `wfi`, identity (MPIDR_EL1) and barriers.

use core::arch::asm;

/// DAIF.I (Arm ARM C5.2.2): IRQs masked.
const DAIF_IRQ_MASKED: u64 = 1 << 7;

/// Unmasks IRQs at EL1 (`msr daifclr, #2`).
pub fn enable_irqs() {
    // SAFETY: only changes PSTATE.I; the SDK's IRQ vector preserves the interrupted context.
    // Not `nomem`: it orders memory accesses around the point where handlers may run.
    unsafe { asm!("msr daifclr, #2", options(nostack, preserves_flags)) }
}

/// Masks IRQs at EL1 (`msr daifset, #2`).
pub fn disable_irqs() {
    // SAFETY: only changes PSTATE.I. Not `nomem`, so it orders accesses like a lock would.
    unsafe { asm!("msr daifset, #2", options(nostack, preserves_flags)) }
}

/// Runs `f` with IRQs masked, then restores the previous mask (so it nests).
pub fn with_irqs_masked<R>(f: impl FnOnce() -> R) -> R {
    let daif: u64;
    // SAFETY: reads DAIF, then masks IRQs; no memory is touched.
    unsafe {
        asm!("mrs {}, daif", "msr daifset, #2", out(reg) daif, options(nostack, preserves_flags))
    };
    let result = f();
    if daif & DAIF_IRQ_MASKED == 0 {
        enable_irqs();
    }
    result
}

/// Waits for an interrupt (`wfi`); returns after one is pending, taken or not.
pub fn wait_for_interrupt() {
    // SAFETY: `wfi` only suspends execution; not `nomem`, so handlers' stores are re-read after.
    unsafe { asm!("wfi", options(nostack, preserves_flags)) }
}

/// Instruction synchronization barrier.
pub fn isb() {
    // SAFETY: a barrier has no other effect.
    unsafe { asm!("isb", options(nostack, preserves_flags)) }
}

/// Data synchronization barrier (`dsb sy`): every earlier memory access completes first.
pub fn data_synchronization_barrier() {
    // SAFETY: a barrier has no other effect.
    unsafe { asm!("dsb sy", options(nostack, preserves_flags)) }
}

/// MPIDR_EL1 (Arm ARM D17.2.101): this CPU's affinity.
pub fn mpidr() -> u64 {
    let value: u64;
    // SAFETY: reads an ID register.
    unsafe { asm!("mrs {}, mpidr_el1", out(reg) value, options(nomem, nostack, preserves_flags)) };
    value
}

/// This CPU's affinity fields Aff3.Aff2.Aff1.Aff0 in the layout of GICD_IROUTER<n>
/// (Aff3 at bits 39:32, Aff2..Aff0 at bits 23:0; GICv3 spec 12.9.22).
pub fn affinity_for_irouter() -> u64 {
    const AFF3: u64 = 0xFF << 32;
    const AFF2_AFF1_AFF0: u64 = 0x00FF_FFFF;
    mpidr() & (AFF3 | AFF2_AFF1_AFF0)
}

/// A spin-wait hint (`yield`). Under QEMU's single-threaded round-robin emulation it also ends
/// this CPU's turn, so that a spinning CPU does not hold back the others for a whole time
/// slice; on hardware it is a hint to a multithreaded core.
pub fn spin_hint() {
    // SAFETY: `yield` has no architectural effect.
    unsafe { asm!("yield", options(nomem, nostack, preserves_flags)) }
}

/// Whether an IRQ is pending at this CPU, masked or not (ISR_EL1.I, Arm ARM D17.2.86): under
/// a hypervisor, that a virtual interrupt sits pending in a list register.
pub fn irq_pending() -> bool {
    let isr: u64;
    // SAFETY: reads a status register. No memory is touched.
    unsafe { asm!("mrs {}, isr_el1", out(reg) isr, options(nomem, nostack, preserves_flags)) };
    isr & (1 << 7) != 0
}
