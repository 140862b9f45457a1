//! The EL2 physical timer (CNTHP_*), Keel's own, and the counter.

use super::regs::{read_sysreg, write_sysreg};

/// Counter frequency in Hz.
pub fn frequency() -> u64 {
    read_sysreg!("cntfrq_el0")
}

/// The physical counter (CNTPCT_EL0): ticks since the machine powered on.
pub fn now() -> u64 {
    read_sysreg!("cntpct_el0")
}

/// Arms the EL2 physical timer to fire when the counter reaches `at`.
pub fn arm_hyp_timer_at(at: u64) {
    // SAFETY: CNTHP_* is Keel's own timer; programming it only schedules an interrupt.
    unsafe {
        write_sysreg!("cnthp_cval_el2", at);
        write_sysreg!("cnthp_ctl_el2", 1u64);
    }
}

/// Disarms the EL2 physical timer.
pub fn disarm_hyp_timer() {
    // SAFETY: as in `arm_hyp_timer_at`.
    unsafe { write_sysreg!("cnthp_ctl_el2", 0u64) };
}

/// Converts counter ticks to nanoseconds: `ticks * 10^9 / frequency` (modulo 2^64), in 64-bit
/// arithmetic and exact: whole seconds of ticks, then the rest of a second, whose product
/// with 10^9 fits as the frequency (CNTFRQ_EL0) has 32 bits.
pub fn ticks_to_ns(ticks: u64) -> u64 {
    const NS_PER_SECOND: u64 = 1_000_000_000;
    let frequency = frequency().max(1);
    (ticks / frequency)
        .wrapping_mul(NS_PER_SECOND)
        .wrapping_add(ticks % frequency * NS_PER_SECOND / frequency)
}
