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

/// Converts counter ticks to nanoseconds.
pub fn ticks_to_ns(ticks: u64) -> u64 {
    (u128::from(ticks) * 1_000_000_000 / u128::from(frequency().max(1))) as u64
}
