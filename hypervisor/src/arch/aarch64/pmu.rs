//! The PMU of a vCPU whose VM owns it (`pmu = true`) on a shared pCPU: saved, with its counters
//! stopped, when the vCPU leaves the pCPU and restored when it comes back, so that each owner
//! sees only what it wrote and counts only while it is loaded (Arm ARM D13, "The Performance
//! Monitors Extension"; the registers in D23.6). Xen's vPMU switches it the same way.
//!
//! While a vCPU that does not own the PMU runs, MDCR_EL2.TPM/TPMCR trap every PMU register
//! (its VM is stopped if it touches one) and every counter is stopped: it pays nothing here.
//!
//! EL2 counting: Keel does not set MDCR_EL2.HPMD (which needs PMUv3p1; the reference CPU,
//! cortex-a72, has PMUv3). An owner's own filters (PMCCFILTR_EL0.NSH, PMEVTYPER<n>_EL0.NSH)
//! decide whether Keel's work while that vCPU is loaded is counted, as on a pinned pCPU: Keel's
//! benchmarks count it on purpose. That work is the vCPU's own traps and, until a switch, the
//! arrival of interrupts for others; the others' execution is never counted.

use super::regs::{pmcr, read_sysreg, write_sysreg};

/// The event counters a PMU can have (PMCR_EL0.N is at most 31).
const MAX_EVENT_COUNTERS: usize = 31;

/// Every counter's bit in PMCNTENSET/CLR, PMINTENSET/CLR and PMOVSSET/CLR (the cycle counter
/// is bit 31; bits of counters that do not exist are RAZ/WI).
const ALL_COUNTERS: u64 = 0xffff_ffff;

/// Whether this pCPU has a PMUv3 (ID_AA64DFR0_EL1.PMUVer neither 0 nor IMPLEMENTATION DEFINED).
pub fn present() -> bool {
    !matches!((read_sysreg!("id_aa64dfr0_el1") >> 8) & 0xf, 0 | 0xf)
}

/// The number of event counters of this pCPU's PMU (PMCR_EL0.N, as EL2 reads it).
pub fn event_counters() -> u64 {
    (read_sysreg!("pmcr_el0") >> pmcr::N_SHIFT) & pmcr::N_MASK
}

/// A vCPU's PMU registers while it is switched out. All zero is the state of a vCPU's start:
/// counters disabled and zero, PMCR_EL0.E = 0, every other setting zero (as
/// `guest::reset_pmu` leaves a pinned pCPU's PMU).
#[derive(Clone, Copy, Debug)]
pub struct PmuState {
    /// PMCR_EL0's settings bits (E, D, X, DP, LC, LP); P and C are write-only resets.
    control: u64,
    selected: u64,
    user_enable: u64,
    cycle_filter: u64,
    counting: u64,
    interrupts: u64,
    overflows: u64,
    cycles: u64,
    event_types: [u64; MAX_EVENT_COUNTERS],
    event_counts: [u64; MAX_EVENT_COUNTERS],
}

impl PmuState {
    /// A vCPU's start: everything zero.
    pub const RESET: Self = Self {
        control: 0,
        selected: 0,
        user_enable: 0,
        cycle_filter: 0,
        counting: 0,
        interrupts: 0,
        overflows: 0,
        cycles: 0,
        event_types: [0; MAX_EVENT_COUNTERS],
        event_counts: [0; MAX_EVENT_COUNTERS],
    };

    /// Stops every counter and its overflow interrupt: the PMU of a vCPU that leaves the pCPU
    /// (saved or not) counts nothing of what runs next.
    pub fn stop() {
        if !present() {
            return;
        }
        // SAFETY: disables the counters and overflow interrupts of the PMU the leaving vCPU
        // owned; Keel never counts with it, and the owner's settings are saved (or discarded,
        // for a vCPU that stops) by the caller.
        unsafe {
            write_sysreg!("pmcntenclr_el0", ALL_COUNTERS);
            write_sysreg!("pmintenclr_el1", ALL_COUNTERS);
            core::arch::asm!("isb", options(nostack));
        }
    }

    /// Saves the PMU of the vCPU leaving this pCPU, stopping its counters first (so the saved
    /// values are final) and leaving them stopped, their interrupts and overflow flags off.
    pub fn save(&mut self) {
        if !present() {
            return;
        }
        self.counting = read_sysreg!("pmcntenset_el0");
        self.interrupts = read_sysreg!("pmintenset_el1");
        Self::stop();
        self.overflows = read_sysreg!("pmovsset_el0");
        self.control = read_sysreg!("pmcr_el0") & pmcr::SETTINGS;
        self.selected = read_sysreg!("pmselr_el0");
        self.user_enable = read_sysreg!("pmuserenr_el0");
        self.cycle_filter = read_sysreg!("pmccfiltr_el0");
        self.cycles = read_sysreg!("pmccntr_el0");
        let counters = (event_counters() as usize).min(MAX_EVENT_COUNTERS);
        for counter in 0..counters {
            select(counter);
            self.event_types[counter] = read_sysreg!("pmxevtyper_el0");
            self.event_counts[counter] = read_sysreg!("pmxevcntr_el0");
        }
        // SAFETY: clears the overflow flags (saved above) so that no overflow of the leaving
        // vCPU's is left on the pCPU.
        unsafe { write_sysreg!("pmovsclr_el0", ALL_COUNTERS) };
    }

    /// Loads this PMU state onto the pCPU for the vCPU about to run: every setting and value
    /// first, PMSELR_EL0 after the event counters it selects, the counters' enables last.
    pub fn restore(&self) {
        if !present() {
            return;
        }
        let counters = (event_counters() as usize).min(MAX_EVENT_COUNTERS);
        // SAFETY: the incoming vCPU's own PMU state, as it left it (or clean at its start);
        // every counter is stopped while it is written, and the guest does not run until the
        // eret. Keel never counts with the PMU.
        unsafe {
            write_sysreg!("pmcntenclr_el0", ALL_COUNTERS);
            write_sysreg!("pmintenclr_el1", ALL_COUNTERS);
            write_sysreg!("pmovsclr_el0", ALL_COUNTERS);
            write_sysreg!("pmcr_el0", self.control);
            for counter in 0..counters {
                select(counter);
                write_sysreg!("pmxevtyper_el0", self.event_types[counter]);
                write_sysreg!("pmxevcntr_el0", self.event_counts[counter]);
            }
            write_sysreg!("pmselr_el0", self.selected);
            write_sysreg!("pmuserenr_el0", self.user_enable);
            write_sysreg!("pmccfiltr_el0", self.cycle_filter);
            write_sysreg!("pmccntr_el0", self.cycles);
            write_sysreg!("pmovsset_el0", self.overflows);
            write_sysreg!("pmintenset_el1", self.interrupts);
            write_sysreg!("pmcntenset_el0", self.counting);
            core::arch::asm!("isb", options(nostack));
        }
    }
}

/// Selects event counter `counter` for PMXEVTYPER_EL0 and PMXEVCNTR_EL0; the ISB makes the
/// selection visible to them.
fn select(counter: usize) {
    // SAFETY: PMSELR_EL0 only chooses which counter the PMXEV* registers reach; the caller
    // restores the vCPU's own selection.
    unsafe {
        write_sysreg!("pmselr_el0", counter as u64);
        core::arch::asm!("isb", options(nostack));
    }
}
