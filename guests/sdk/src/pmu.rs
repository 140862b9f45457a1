//! The PMU cycle counter PMCCNTR_EL0 (Arm ARM D13), the benchmarks' clock.
//!
//! Under QEMU with `-icount shift=0` it advances exactly once per instruction, at every
//! exception level if PMCCFILTR_EL0.NSH is set (so a hypervisor's instructions count too).

use core::arch::asm;

/// PMCR_EL0.E: enable the counters.
const PMCR_ENABLE: u64 = 1 << 0;
/// PMCR_EL0.LC: the cycle counter overflows at 64 bits.
const PMCR_LONG_CYCLE_COUNTER: u64 = 1 << 6;
/// PMCCFILTR_EL0.NSH: count at EL2 too.
const CCFILTR_COUNT_EL2: u64 = 1 << 27;
/// PMCNTENSET_EL0.C: enable the cycle counter.
const CNTENSET_CYCLE_COUNTER: u64 = 1 << 31;

/// Starts the cycle counter, counting at EL1, EL0 and EL2.
pub fn enable_cycle_counter() {
    // SAFETY: configures this CPU's PMU; no memory is touched.
    unsafe {
        asm!(
            "msr pmccfiltr_el0, {filter}",
            "mrs {tmp}, pmcr_el0",
            "orr {tmp}, {tmp}, {pmcr}",
            "msr pmcr_el0, {tmp}",
            "msr pmcntenset_el0, {enable}",
            "isb",
            filter = in(reg) CCFILTR_COUNT_EL2,
            tmp = out(reg) _,
            pmcr = in(reg) PMCR_ENABLE | PMCR_LONG_CYCLE_COUNTER,
            enable = in(reg) CNTENSET_CYCLE_COUNTER,
            options(nomem, nostack, preserves_flags),
        )
    };
}

/// PMCCNTR_EL0, read after an `isb`.
pub fn cycle_counter() -> u64 {
    let value: u64;
    // SAFETY: reads a system register.
    unsafe {
        asm!("isb", "mrs {}, pmccntr_el0", out(reg) value, options(nomem, nostack, preserves_flags))
    };
    value
}
