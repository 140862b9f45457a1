//! The EL1 virtual timer of the Generic Timer (Arm ARM D11.2): counter, frequency, comparator.
//!
//! Its interrupt is the PPI `layout::VTIMER_INTID` (27), level-sensitive: it stays asserted
//! while the timer is enabled, unmasked and CNTVCT_EL0 >= CNTV_CVAL_EL0.

use core::arch::asm;
use core::sync::atomic::{AtomicBool, Ordering};

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

/// Sleeps (WFI, so that Keel gives the pCPU away) until the counter reaches `at`, woken by
/// the virtual timer; interrupts stay masked in PSTATE and the timer's is taken by polling.
/// The first call sets up the distributor, vCPU 0's private interrupts and this CPU's
/// interface for the timer's interrupt, on whichever GIC the device tree names.
///
/// The GIC's version is looked at once, first: on a GICv3 the rest runs the GICv3 driver's
/// instructions alone, as before there was a choice (benchmarks sleep here before their
/// samples).
pub fn sleep_until(at: u64) {
    if crate::gic::version() == crate::gic::Version::V2 {
        return sleep_until_gicv2(at);
    }
    if !TIMER_INTERRUPT_READY.swap(true, Ordering::Relaxed) {
        init_timer_interrupt();
    }
    set_deadline(at);
    enable();
    while counter() < at {
        crate::cpu::wait_for_interrupt();
    }
    // The timer's condition holds until it is disabled: only then is its interrupt taken
    // (acknowledged while still asserted, it would be pending again at once).
    disable();
    while let Some(intid) = crate::gicv3::acknowledge() {
        crate::gicv3::end_of_interrupt(intid);
    }
}

/// [`sleep_until`] on a GICv2 (out of line, so that the GICv3 path stays as it was).
#[inline(never)]
fn sleep_until_gicv2(at: u64) {
    if !TIMER_INTERRUPT_READY.swap(true, Ordering::Relaxed) {
        init_timer_interrupt();
    }
    set_deadline(at);
    enable();
    while counter() < at {
        crate::cpu::wait_for_interrupt();
    }
    disable();
    while let Some(interrupt) = crate::gic::acknowledge() {
        crate::gic::end_of_interrupt(interrupt);
    }
}

/// Whether [`init_timer_interrupt`] ran.
static TIMER_INTERRUPT_READY: AtomicBool = AtomicBool::new(false);

/// Enables the distributor, vCPU 0's private interrupts and this CPU's interface, and the
/// timer's interrupt there.
#[inline(never)]
fn init_timer_interrupt() {
    use crate::gic::{init_cpu_interface, PrivateInterrupts, DISTRIBUTOR};
    if let Some(interrupts) = PrivateInterrupts::for_cpu(0) {
        DISTRIBUTOR.enable();
        interrupts.wake();
        init_cpu_interface();
        interrupts.enable(keel_core::abi::layout::VTIMER_INTID, 0x80);
    }
}
