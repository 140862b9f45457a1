//! Per-pCPU EL2 configuration for running a guest vCPU: traps, stage 2, identity, timers,
//! and the guest's EL1 state at power-on.

use super::pmu;
use super::regs::{cnthctl, cptr, hcr, mdcr, pmcr, read_sysreg, write_sysreg, SCTLR_EL1_RESET};

/// Sets EL2 up to run vCPU `vcpu` of the VM with VMID `vmid` on this (pinned) pCPU, with its
/// EL1 state as at power-on. `own_pmu`: the VM owns this pCPU's PMU, which is reset to a clean
/// state ([`reset_pmu`]); else the PMU is trapped.
pub fn prepare(vmid: u16, stage2_root: u64, vcpu: usize, trap_wfi: bool, own_pmu: bool) {
    configure_pcpu(own_pmu, false);
    if own_pmu {
        reset_pmu();
    }
    // SAFETY: these registers configure how this pCPU runs its (only) guest vCPU.
    unsafe {
        write_sysreg!("hcr_el2", hcr_value(trap_wfi));
        write_sysreg!("vmpidr_el2", vmpidr(vcpu));
    }
    reset_el1_state();
    // SAFETY: the EL1 state is now the documented entry state; synchronize before entry.
    unsafe { core::arch::asm!("isb", options(nostack)) };
    super::stage2::install(vmid, stage2_root);
    super::gic::reset_virtual_interface();
}

/// The MPIDR vCPU `vcpu` reads (VMPIDR_EL2): affinity 0.0.0.vcpu, U = 0, bit 31 RES1.
pub fn vmpidr(vcpu: usize) -> u64 {
    (1u64 << 31) | vcpu as u64
}

/// HCR_EL2 for a guest: stage 2 on, interrupts and SErrors to EL2, the traps Keel needs, and
/// WFI trapped if `trap_wfi`.
pub fn hcr_value(trap_wfi: bool) -> u64 {
    let mut hcr_value = hcr::VM
        | hcr::SWIO
        | hcr::FMO
        | hcr::IMO
        | hcr::AMO
        | hcr::FB
        | hcr::BSU_INNER
        | hcr::TSC
        | hcr::TIDCP
        | hcr::TACR
        | hcr::TSW
        | hcr::TID3
        | hcr::RW;
    if trap_wfi {
        hcr_value |= hcr::TWI;
    }
    // Pointer authentication runs natively where the CPU has it (ID_AA64ISAR1_EL1.APA/API).
    if read_sysreg!("id_aa64isar1_el1") & 0xff0 != 0 {
        hcr_value |= hcr::APK | hcr::API;
    }
    hcr_value
}

/// The EL2 settings of a pCPU that do not depend on which vCPU runs: debug, PMU and
/// profiling traps, FP/SIMD/SVE and activity-monitor traps, timer access, CNTVOFF, VPIDR and
/// the implementation-defined register grants. `shared`: the pCPU switches vCPUs, so SVE is
/// trapped (its state is not switched) and FP/SIMD is switched lazily ([`set_fp_trap`]).
pub fn configure_pcpu(own_pmu: bool, shared: bool) {
    let mdcr_value = mdcr_value(own_pmu);
    // On a pinned pCPU FP/SIMD and SVE (where present) run untrapped: the vCPU is the pCPU's
    // only context and Keel itself never uses them. The activity monitors trap (the ID
    // registers hide them).
    let pfr0 = read_sysreg!("id_aa64pfr0_el1");
    let has_sve = (pfr0 >> 32) & 0xf != 0;
    let has_amu = (pfr0 >> 44) & 0xf != 0;
    let cptr_value = cptr::RES1
        | if has_amu { cptr::TAM } else { 0 }
        | if has_sve && !shared { 0 } else { cptr::TZ };
    let midr = read_sysreg!("midr_el1");
    // SAFETY: these registers configure how this pCPU runs guests; none gives a guest more
    // than its own VM.
    unsafe {
        write_sysreg!("mdcr_el2", mdcr_value);
        write_sysreg!("cptr_el2", cptr_value);
        write_sysreg!("cnthctl_el2", cnthctl::EL1PCTEN);
        write_sysreg!("cntvoff_el2", 0u64);
        write_sysreg!("vpidr_el2", midr);
    }
    deny_implementation_defined_registers(midr);
}

/// MDCR_EL2 for a guest: debug registers trapped; the PMU and the statistical profiler trapped
/// unless the VM owns the PMU (`own_pmu`). On a shared pCPU each owning vCPU's PMU registers
/// are switched with it ([`super::pmu::PmuState`]), its counters stopped while it is out.
pub fn mdcr_value(own_pmu: bool) -> u64 {
    // A VM that owns the PMU gets every counter (HPMN = all); otherwise the PMU and the
    // statistical profiler trap, as do debug registers (read as zero, see trap.rs).
    // Each trap bit is set only where its feature exists (elsewhere the bit is RES0).
    let dfr0 = read_sysreg!("id_aa64dfr0_el1");
    let has_pmu = pmu::present();
    let has_spe = (dfr0 >> 32) & 0xf != 0;
    // MDCR_EL2.HPMN: every counter stays the guest's (PMCR_EL0.N), where there is a PMU.
    let counters = if has_pmu { pmu::event_counters() } else { 0 };
    let pmu_traps = if own_pmu || !has_pmu {
        0
    } else {
        mdcr::TPM | mdcr::TPMCR
    };
    let spe_traps = if has_spe { mdcr::TPMS } else { 0 };
    mdcr::TDA | mdcr::TDOSA | mdcr::TDRA | spe_traps | pmu_traps | counters
}

/// Traps (or untraps) FP/SIMD at EL2 (CPTR_EL2.TFP): set when a vCPU that does not own the
/// pCPU's FP/SIMD registers runs, so its first FP/SIMD instruction switches them.
/// Written every time: as cheap as testing the bit first (a switch between a vCPU that owns
/// the unit and one that does not changes it every time). No barrier: the guest entry's ERET
/// synchronizes it, and Keel's own FP/SIMD use (the scheduler's FP trap handler) puts an ISB first.
pub fn set_fp_trap(trapped: bool) {
    let value = read_sysreg!("cptr_el2") & !cptr::TFP | if trapped { cptr::TFP } else { 0 };
    // SAFETY: only the FP/SIMD trap changes; Keel itself uses FP/SIMD only in `fp_trap`.
    unsafe {
        write_sysreg!("cptr_el2", value);
    }
}

/// Writes every EL1 (and EL0) register a guest can read to its documented entry state
/// (docs/src/guest-abi.md, "Entry state"): nothing a previous run of the vCPU, or Keel, left
/// there survives a start, CPU_ON or reset. The general-purpose registers are set by the entry itself.
fn reset_el1_state() {
    // SAFETY: the registers written are the guest's EL1/EL0 context, which this pCPU does not
    // run yet: MMU and caches off, no vector table, timers stopped, nothing in the thread or
    // fault registers. None of them affects EL2.
    unsafe {
        write_sysreg!("sctlr_el1", SCTLR_EL1_RESET);
        write_sysreg!("vbar_el1", 0u64);
        write_sysreg!("tcr_el1", 0u64);
        write_sysreg!("ttbr0_el1", 0u64);
        write_sysreg!("ttbr1_el1", 0u64);
        write_sysreg!("mair_el1", 0u64);
        write_sysreg!("amair_el1", 0u64);
        write_sysreg!("contextidr_el1", 0u64);
        write_sysreg!("cpacr_el1", 0u64);
        write_sysreg!("csselr_el1", 0u64);
        write_sysreg!("mdscr_el1", 0u64);
        write_sysreg!("sp_el0", 0u64);
        write_sysreg!("sp_el1", 0u64);
        write_sysreg!("elr_el1", 0u64);
        write_sysreg!("spsr_el1", 0u64);
        write_sysreg!("esr_el1", 0u64);
        write_sysreg!("far_el1", 0u64);
        write_sysreg!("afsr0_el1", 0u64);
        write_sysreg!("afsr1_el1", 0u64);
        write_sysreg!("par_el1", 0u64);
        write_sysreg!("tpidr_el0", 0u64);
        write_sysreg!("tpidrro_el0", 0u64);
        write_sysreg!("tpidr_el1", 0u64);
        write_sysreg!("cntkctl_el1", 0u64);
        write_sysreg!("cntv_ctl_el0", 0u64);
        write_sysreg!("cntv_cval_el0", 0u64);
    }
    super::cpu::zero_fp_simd();
}

/// Gives the VM that owns this pCPU's PMU a clean one at each vCPU start (boot, CPU_ON,
/// SYSTEM_RESET), as the book's entry state promises: nothing counted or configured by the
/// vCPU's earlier run survives (Arm ARM D13, the PMU registers). Counters, their interrupts
/// and overflow flags off; PMCR_EL0 with E = 0 and both resets written (P, C); no counter
/// selected, no EL0 access; every event counter's type and value (n < PMCR_EL0.N), the cycle
/// counter's filter and value zero.
fn reset_pmu() {
    if !pmu::present() {
        return;
    }
    /// Every counter's bit in PMCNTENCLR, PMINTENCLR and PMOVSCLR (C is bit 31; bits of
    /// counters that do not exist are RAZ/WI).
    const ALL_COUNTERS: u64 = 0xffff_ffff;
    let counters = pmu::event_counters();
    // SAFETY: the PMU is the guest's alone (pinned pCPU, MDCR_EL2.HPMN = N) and Keel never
    // counts with it; the guest does not run until its entry. Clearing the enables first
    // stops every counter before the others are written.
    unsafe {
        write_sysreg!("pmcntenclr_el0", ALL_COUNTERS);
        write_sysreg!("pmintenclr_el1", ALL_COUNTERS);
        write_sysreg!("pmovsclr_el0", ALL_COUNTERS);
        write_sysreg!("pmcr_el0", pmcr::P | pmcr::C);
        for counter in 0..counters {
            // PMSELR_EL0 selects the counter PMXEVTYPER/PMXEVCNTR reach; the ISB makes the
            // selection visible to them.
            write_sysreg!("pmselr_el0", counter);
            core::arch::asm!("isb", options(nostack));
            write_sysreg!("pmxevtyper_el0", 0u64);
            write_sysreg!("pmxevcntr_el0", 0u64);
        }
        write_sysreg!("pmselr_el0", 0u64);
        write_sysreg!("pmuserenr_el0", 0u64);
        write_sysreg!("pmccfiltr_el0", 0u64);
        write_sysreg!("pmccntr_el0", 0u64);
        core::arch::asm!("isb", options(nostack));
    }
}

/// Whether the running guest's virtual timer asserts its interrupt: enabled, unmasked and
/// its condition met (CNTV_CTL_EL0 ENABLE, IMASK, ISTATUS).
pub fn virtual_timer_expired() -> bool {
    read_sysreg!("cntv_ctl_el0") & 0b111 == 0b101
}

/// Stops the guest's virtual timer on this pCPU (CNTV_CTL_EL0 = 0): a vCPU that is not running
/// has no timer that may fire here.
pub fn stop_virtual_timer() {
    // SAFETY: disables the EL1 virtual timer of the vCPU leaving this pCPU; nothing at EL2
    // depends on it.
    unsafe {
        write_sysreg!("cntv_ctl_el0", 0u64);
        core::arch::asm!("isb", options(nostack));
    }
}

/// Cortex-A53, A57 and A72 (MIDR_EL1 implementer Arm, these part numbers) let EL1 reach their
/// implementation-defined CPU and L2 control registers (CPUACTLR_EL1, CPUECTLR_EL1,
/// L2CTLR_EL1, L2ECTLR_EL1, L2ACTLR_EL1) only where ACTLR_EL2 grants it (bits 0, 1, 4, 5, 6;
/// each core's TRM, "Auxiliary Control Register, EL2"). Firmware may have granted it; Keel
/// takes it back, a defence that does not rest on HCR_EL2.TIDCP alone (which QEMU 7.2 does
/// not implement). On other cores ACTLR_EL2's layout is unknown and it is left alone.
fn deny_implementation_defined_registers(midr: u64) {
    const IMPLEMENTER_ARM: u64 = 0x41;
    const PARTS: [u64; 3] = [0xd03, 0xd07, 0xd08];
    let implementer = (midr >> 24) & 0xff;
    let part = (midr >> 4) & 0xfff;
    if implementer == IMPLEMENTER_ARM && PARTS.contains(&part) {
        // SAFETY: on these cores ACTLR_EL2 holds only the lower-EL access grants cleared here.
        unsafe { write_sysreg!("actlr_el2", 0u64) };
    }
}
