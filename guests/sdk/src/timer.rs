//! The EL1 virtual timer of the Generic Timer (Arm ARM D11.2): counter, frequency, comparator.
//!
//! Its interrupt is the PPI `layout::VTIMER_INTID` (27), level-sensitive: it stays asserted
//! while the timer is enabled, unmasked and CNTVCT_EL0 >= CNTV_CVAL_EL0.

use core::arch::asm;

/// CNTV_CTL_EL0.ENABLE.
const CTL_ENABLE: u64 = 1 << 0;
/// CNTV_CTL_EL0.IMASK: interrupt masked.
const CTL_INTERRUPT_MASK: u64 = 1 << 1;

/// CNTFRQ_EL0: counter ticks per second.
pub fn frequency() -> u64 {
    let value: u64;
    // SAFETY: reads a system register.
    unsafe { asm!("mrs {}, cntfrq_el0", out(reg) value, options(nomem, nostack, preserves_flags)) };
    value
}

/// CNTVCT_EL0: the virtual count, read after an `isb` so it is not taken early.
pub fn counter() -> u64 {
    let value: u64;
    // SAFETY: reads a system register.
    unsafe {
        asm!("isb", "mrs {}, cntvct_el0", out(reg) value, options(nomem, nostack, preserves_flags))
    };
    value
}

/// Sets CNTV_CVAL_EL0: the timer condition holds once CNTVCT_EL0 >= `deadline`.
pub fn set_deadline(deadline: u64) {
    // SAFETY: writes this CPU's timer comparator; at worst an interrupt is raised.
    unsafe {
        asm!("msr cntv_cval_el0, {}", in(reg) deadline, options(nomem, nostack, preserves_flags))
    };
}

/// Enables the timer with its interrupt unmasked.
pub fn enable() {
    write_control(CTL_ENABLE);
}

/// Enables the timer with its interrupt masked at the timer (it stops asserting).
pub fn mask() {
    write_control(CTL_ENABLE | CTL_INTERRUPT_MASK);
}

/// Disables the timer.
pub fn disable() {
    write_control(0);
}

fn write_control(value: u64) {
    // SAFETY: writes this CPU's timer control; at worst an interrupt is raised or dropped.
    unsafe {
        asm!("msr cntv_ctl_el0, {}", "isb", in(reg) value, options(nomem, nostack, preserves_flags))
    };
}
