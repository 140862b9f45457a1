//! A vCPU's context: everything it owns on a pCPU, saved when it leaves the pCPU and restored
//! when it comes back (Arm ARM D1.2 for the EL1 state, GICv3 12.4 for the virtual CPU interface,
//! D11 for the generic timer). Only shared pCPUs switch contexts; a pinned vCPU's state never
//! leaves its pCPU.
//!
//! FP/SIMD is switched lazily: a switch only traps FP/SIMD (CPTR_EL2.TFP); the first FP/SIMD
//! instruction of the incoming vCPU saves the previous owner's registers and loads its own
//! ([`FpState`]). SVE is trapped on shared pCPUs (CPTR_EL2.TZ), so there is no SVE state to keep.
//!
//! The PMU is switched only with the vCPUs of VMs that own it (`pmu = true`, [`PmuState`]):
//! saved with its counters stopped at switch-out, restored at switch-in.

use keel_core::abi::layout::VTIMER_INTID;

use super::pmu::PmuState;
use super::regs::{read_sysreg, write_sysreg};
use super::{gic, stage2};

/// The EL1/EL0 system registers a guest owns, in the order [`El1State::save`] keeps them.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct El1State {
    sctlr: u64,
    vbar: u64,
    tcr: u64,
    ttbr0: u64,
    ttbr1: u64,
    mair: u64,
    amair: u64,
    contextidr: u64,
    cpacr: u64,
    csselr: u64,
    mdscr: u64,
    sp_el0: u64,
    sp_el1: u64,
    elr_el1: u64,
    spsr_el1: u64,
    esr: u64,
    far: u64,
    afsr0: u64,
    afsr1: u64,
    par: u64,
    tpidr_el0: u64,
    tpidrro_el0: u64,
    tpidr_el1: u64,
    cntkctl: u64,
}

impl El1State {
    /// All zero (no vCPU).
    pub const ZERO: Self = Self {
        sctlr: 0,
        ..Self::RESET
    };

    /// The documented entry state (docs/src/guest-abi.md, "Entry state"): everything zero but SCTLR_EL1.
    pub const RESET: Self = Self {
        sctlr: super::regs::SCTLR_EL1_RESET,
        vbar: 0,
        tcr: 0,
        ttbr0: 0,
        ttbr1: 0,
        mair: 0,
        amair: 0,
        contextidr: 0,
        cpacr: 0,
        csselr: 0,
        mdscr: 0,
        sp_el0: 0,
        sp_el1: 0,
        elr_el1: 0,
        spsr_el1: 0,
        esr: 0,
        far: 0,
        afsr0: 0,
        afsr1: 0,
        par: 0,
        tpidr_el0: 0,
        tpidrro_el0: 0,
        tpidr_el1: 0,
        cntkctl: 0,
    };

    /// Puts the state in [`El1State::RESET`] in place (no 192-byte copy from a constant).
    fn reset(&mut self) {
        // SAFETY: `self` is writable, 8-byte aligned, and all its fields are integers.
        unsafe { super::cpu::zero_bytes((self as *mut Self).cast(), core::mem::size_of::<Self>()) }
        self.sctlr = Self::RESET.sctlr;
    }

    /// Reads the state of the vCPU leaving this pCPU, two registers per store.
    fn save(&mut self) {
        // SAFETY: reads EL1/EL0 registers (no side effects) into the 24 fields of `self`, in
        // their declared order (`repr(C)`, 192 bytes, 8-byte aligned).
        unsafe {
            core::arch::asm!(
                "mrs {a}, sctlr_el1", "mrs {b}, vbar_el1", "stp {a}, {b}, [{p}, #0]",
                "mrs {a}, tcr_el1", "mrs {b}, ttbr0_el1", "stp {a}, {b}, [{p}, #16]",
                "mrs {a}, ttbr1_el1", "mrs {b}, mair_el1", "stp {a}, {b}, [{p}, #32]",
                "mrs {a}, amair_el1", "mrs {b}, contextidr_el1", "stp {a}, {b}, [{p}, #48]",
                "mrs {a}, cpacr_el1", "mrs {b}, csselr_el1", "stp {a}, {b}, [{p}, #64]",
                "mrs {a}, mdscr_el1", "mrs {b}, sp_el0", "stp {a}, {b}, [{p}, #80]",
                "mrs {a}, sp_el1", "mrs {b}, elr_el1", "stp {a}, {b}, [{p}, #96]",
                "mrs {a}, spsr_el1", "mrs {b}, esr_el1", "stp {a}, {b}, [{p}, #112]",
                "mrs {a}, far_el1", "mrs {b}, afsr0_el1", "stp {a}, {b}, [{p}, #128]",
                "mrs {a}, afsr1_el1", "mrs {b}, par_el1", "stp {a}, {b}, [{p}, #144]",
                "mrs {a}, tpidr_el0", "mrs {b}, tpidrro_el0", "stp {a}, {b}, [{p}, #160]",
                "mrs {a}, tpidr_el1", "mrs {b}, cntkctl_el1", "stp {a}, {b}, [{p}, #176]",
                p = in(reg) core::ptr::from_mut(self),
                a = out(reg) _,
                b = out(reg) _,
                options(nostack, preserves_flags),
            );
        }
    }

    /// Writes the state of the vCPU about to run on this pCPU, two registers per load.
    fn restore(&self) {
        // SAFETY: these are the incoming vCPU's own EL1/EL0 registers, as it left them (or its
        // entry state), read from the 24 fields of `self` in their declared order; none of
        // them affects EL2, and the guest does not run until the eret.
        unsafe {
            core::arch::asm!(
                "ldp {a}, {b}, [{p}, #0]", "msr sctlr_el1, {a}", "msr vbar_el1, {b}",
                "ldp {a}, {b}, [{p}, #16]", "msr tcr_el1, {a}", "msr ttbr0_el1, {b}",
                "ldp {a}, {b}, [{p}, #32]", "msr ttbr1_el1, {a}", "msr mair_el1, {b}",
                "ldp {a}, {b}, [{p}, #48]", "msr amair_el1, {a}", "msr contextidr_el1, {b}",
                "ldp {a}, {b}, [{p}, #64]", "msr cpacr_el1, {a}", "msr csselr_el1, {b}",
                "ldp {a}, {b}, [{p}, #80]", "msr mdscr_el1, {a}", "msr sp_el0, {b}",
                "ldp {a}, {b}, [{p}, #96]", "msr sp_el1, {a}", "msr elr_el1, {b}",
                "ldp {a}, {b}, [{p}, #112]", "msr spsr_el1, {a}", "msr esr_el1, {b}",
                "ldp {a}, {b}, [{p}, #128]", "msr far_el1, {a}", "msr afsr0_el1, {b}",
                "ldp {a}, {b}, [{p}, #144]", "msr afsr1_el1, {a}", "msr par_el1, {b}",
                "ldp {a}, {b}, [{p}, #160]", "msr tpidr_el0, {a}", "msr tpidrro_el0, {b}",
                "ldp {a}, {b}, [{p}, #176]", "msr tpidr_el1, {a}", "msr cntkctl_el1, {b}",
                p = in(reg) core::ptr::from_ref(self),
                a = out(reg) _,
                b = out(reg) _,
                options(nostack, preserves_flags, readonly),
            );
        }
    }
}

const _: () = assert!(
    core::mem::size_of::<El1State>() == 24 * 8,
    "El1State::save/restore move 24 registers in field order"
);

/// The EL1 virtual timer (CNTV_CTL_EL0, CNTV_CVAL_EL0; CNTVOFF_EL2 is zero for every vCPU).
#[derive(Clone, Copy, Debug, Default)]
pub struct VirtualTimer {
    /// CNTV_CTL_EL0 (ENABLE bit 0, IMASK bit 1).
    pub control: u64,
    /// CNTV_CVAL_EL0: the counter value it fires at.
    pub compare: u64,
    /// Whether its physical interrupt (PPI 27) was active, listed hardware-linked and waiting
    /// for the guest's EOI, when the vCPU left.
    physical_active: bool,
}

impl VirtualTimer {
    /// Whether its interrupt was active (listed, waiting for the guest's EOI) when it left.
    pub fn physical_active(&self) -> bool {
        self.physical_active
    }

    /// Reads the running vCPU's timer settings from this pCPU, leaving the timer running:
    /// [`VcpuContext::save`]'s first step, and what a vCPU set before it gives the pCPU away
    /// to wait, for the timer queue to watch before the switch saves it.
    #[inline(always)]
    pub fn capture(&mut self) {
        self.control = read_sysreg!("cntv_ctl_el0");
        self.compare = read_sysreg!("cntv_cval_el0");
    }

    /// When the timer will assert its interrupt, if it is enabled and unmasked.
    pub fn deadline(&self) -> Option<u64> {
        (self.control & 0b11 == 0b01).then_some(self.compare)
    }
}

/// The virtual CPU interface (GICv3 12.4): list registers, VMCR, active priorities, and the
/// underflow request of ICH_HCR_EL2.
#[derive(Clone, Copy, Debug)]
pub struct VirtualInterface {
    lrs: [u64; 16],
    vmcr: u64,
    hcr: u64,
    ap0r: [u64; 4],
    ap1r: [u64; 4],
    /// Which list registers hold an interrupt Keel put there (bit n = ICH_LR<n>_EL2).
    pub listed: u64,
}

impl VirtualInterface {
    /// All zero (no vCPU).
    pub const ZERO: Self = Self {
        hcr: 0,
        ..Self::RESET
    };

    /// Puts the interface in [`VirtualInterface::RESET`] in place (no copy from a constant).
    fn reset(&mut self) {
        // SAFETY: `self` is writable, 8-byte aligned, and all its fields are integers.
        unsafe { super::cpu::zero_bytes((self as *mut Self).cast(), core::mem::size_of::<Self>()) }
        self.hcr = Self::RESET.hcr;
    }

    /// Nothing listed, interface enabled, no active priority: a vCPU's start.
    pub const RESET: Self = Self {
        lrs: [0; 16],
        vmcr: 0,
        hcr: 1,
        ap0r: [0; 4],
        ap1r: [0; 4],
        listed: 0,
    };

    /// Whether a saved list register holds an interrupt pending for the vCPU.
    pub fn any_pending(&self) -> bool {
        let mut pending = false;
        self.for_each_listed(|_, is_pending| pending |= is_pending);
        pending
    }

    /// Calls `f(intid, pending)` for each saved list register Keel filled.
    pub fn for_each_listed(&self, mut f: impl FnMut(u32, bool)) {
        let mut scan = self.listed;
        while scan != 0 {
            let lr = scan.trailing_zeros() as usize;
            scan &= scan - 1;
            if let Some(&value) = self.lrs.get(lr) {
                f(value as u32, gic::list_register_is_pending(value));
            }
        }
    }
}

/// V0-V31, FPCR and FPSR.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(16))]
pub struct FpState {
    v: [u128; 32],
    fpcr: u64,
    fpsr: u64,
}

impl FpState {
    /// All zero, as at a vCPU's start.
    pub const ZERO: Self = Self {
        v: [0; 32],
        fpcr: 0,
        fpsr: 0,
    };
}

const _: () = assert!(
    core::mem::size_of::<FpState>() == 32 * 16 + 16,
    "keel_fp_save/restore store 528 bytes"
);

core::arch::global_asm!(
    r#"
// x0 = FpState. Keel is built soft-float; the FP/SIMD instructions are enabled here alone.
    .pushsection .text.keel_fp_state, "ax"
    .balign 4
    .arch_extension fp
    .arch_extension simd
    .global keel_fp_save
keel_fp_save:
    stp     q0, q1, [x0, #32 * 0]
    stp     q2, q3, [x0, #32 * 1]
    stp     q4, q5, [x0, #32 * 2]
    stp     q6, q7, [x0, #32 * 3]
    stp     q8, q9, [x0, #32 * 4]
    stp     q10, q11, [x0, #32 * 5]
    stp     q12, q13, [x0, #32 * 6]
    stp     q14, q15, [x0, #32 * 7]
    stp     q16, q17, [x0, #32 * 8]
    stp     q18, q19, [x0, #32 * 9]
    stp     q20, q21, [x0, #32 * 10]
    stp     q22, q23, [x0, #32 * 11]
    stp     q24, q25, [x0, #32 * 12]
    stp     q26, q27, [x0, #32 * 13]
    stp     q28, q29, [x0, #32 * 14]
    stp     q30, q31, [x0, #32 * 15]
    mrs     x1, fpcr
    mrs     x2, fpsr
    add     x3, x0, #512
    stp     x1, x2, [x3]
    ret
    .global keel_fp_restore
keel_fp_restore:
    ldp     q0, q1, [x0, #32 * 0]
    ldp     q2, q3, [x0, #32 * 1]
    ldp     q4, q5, [x0, #32 * 2]
    ldp     q6, q7, [x0, #32 * 3]
    ldp     q8, q9, [x0, #32 * 4]
    ldp     q10, q11, [x0, #32 * 5]
    ldp     q12, q13, [x0, #32 * 6]
    ldp     q14, q15, [x0, #32 * 7]
    ldp     q16, q17, [x0, #32 * 8]
    ldp     q18, q19, [x0, #32 * 9]
    ldp     q20, q21, [x0, #32 * 10]
    ldp     q22, q23, [x0, #32 * 11]
    ldp     q24, q25, [x0, #32 * 12]
    ldp     q26, q27, [x0, #32 * 13]
    ldp     q28, q29, [x0, #32 * 14]
    ldp     q30, q31, [x0, #32 * 15]
    add     x3, x0, #512
    ldp     x1, x2, [x3]
    msr     fpcr, x1
    msr     fpsr, x2
    ret
    .arch_extension nosimd
    .arch_extension nofp
    .popsection
"#
);

unsafe extern "C" {
    fn keel_fp_save(state: *mut FpState);
    fn keel_fp_restore(state: *const FpState);
}

impl FpState {
    /// Saves this pCPU's FP/SIMD registers here. FP/SIMD must be untrapped at EL2.
    pub fn save(&mut self) {
        // SAFETY: writes 528 bytes into `self` (size asserted above, 16-byte aligned); reads only
        // FP/SIMD registers, which Keel never uses; follows the C calling convention.
        unsafe { keel_fp_save(self) }
    }

    /// Loads this pCPU's FP/SIMD registers from here. FP/SIMD must be untrapped at EL2.
    pub fn restore(&self) {
        // SAFETY: reads 528 bytes of `self`; writes only FP/SIMD registers, which belong to the
        // vCPU about to run.
        unsafe { keel_fp_restore(self) }
    }
}

/// Everything a vCPU owns on a shared pCPU.
#[derive(Clone, Debug)]
pub struct VcpuContext {
    /// Where it resumes (ELR_EL2).
    pub pc: u64,
    /// Its PSTATE (SPSR_EL2).
    pub pstate: u64,
    /// EL1/EL0 system registers.
    pub el1: El1State,
    /// Its virtual timer.
    pub timer: VirtualTimer,
    /// Its virtual CPU interface.
    pub interface: VirtualInterface,
    /// VMPIDR_EL2: the MPIDR the vCPU reads.
    pub vmpidr: u64,
    /// HCR_EL2 for its VM.
    pub hcr: u64,
    /// MDCR_EL2 for its VM (whether it owns the PMU).
    pub mdcr: u64,
    /// VMID and stage-2 root (VTTBR_EL2).
    pub vttbr: u64,
    /// FP/SIMD registers, valid while another vCPU (or none) owns the pCPU's FP/SIMD unit
    /// and `fp_saved` is set.
    fp: FpState,
    /// `fp` holds the vCPU's FP/SIMD registers; if not, they are all zero (its start):
    /// [`VcpuContext::fp_restore`] zeroes the unit's instead of loading 528 bytes, and a
    /// start writes none of them. (False in [`VcpuContext::EMPTY`], which stays all zero.)
    fp_saved: bool,
    /// Whether its VM owns the PMU (`pmu = true`): only then is `pmu` switched.
    owns_pmu: bool,
    /// Its PMU registers while it is switched out (a PMU owner's only).
    pmu: PmuState,
}

impl VcpuContext {
    /// An empty context (no vCPU), all zero so that the tables of them live in .bss, not in
    /// Keel's image: [`VcpuContext::reset`] gives a vCPU its entry state.
    pub const EMPTY: Self = Self {
        pc: 0,
        pstate: 0,
        el1: El1State::ZERO,
        timer: VirtualTimer {
            control: 0,
            compare: 0,
            physical_active: false,
        },
        interface: VirtualInterface::ZERO,
        vmpidr: 0,
        hcr: 0,
        mdcr: 0,
        vttbr: 0,
        fp: FpState::ZERO,
        fp_saved: false,
        owns_pmu: false,
        pmu: PmuState::RESET,
    };

    /// The vCPU's power-on state (`traps`: its HCR_EL2 and MDCR_EL2): entry at `pc`, EL1h with
    /// interrupts masked, EL1 registers, timer, interface, FP/SIMD and (`owns_pmu`: its VM owns
    /// the PMU) a clean PMU as the book's entry state says. Its general registers are not
    /// here: the caller sets its frame ([`super::vectors::GuestRegs::zero`], then x0).
    pub fn reset(&mut self, pc: u64, vmpidr: u64, traps: (u64, u64), vttbr: u64, owns_pmu: bool) {
        // Field by field rather than `*self = Self::EMPTY` first: the PMU's 560 bytes are
        // cleared only for a vCPU that owns it (no other reads them), and nothing is written
        // twice. A task create does this with interrupts masked.
        self.pc = pc;
        self.pstate = super::regs::SPSR_EL1H_MASKED;
        self.el1.reset();
        self.timer = VirtualTimer::default();
        self.interface.reset();
        self.vmpidr = vmpidr;
        (self.hcr, self.mdcr) = traps;
        self.vttbr = vttbr;
        self.fp_saved = false;
        self.owns_pmu = owns_pmu;
        if owns_pmu {
            self.pmu = PmuState::RESET;
        }
    }

    /// The vCPU leaves the pCPU without being saved (it stops: CPU_OFF, its VM's end or
    /// reset): the PMU it owned stops counting, so nothing of it runs on with the next vCPU.
    pub fn leave_unsaved(&self) {
        if self.owns_pmu {
            PmuState::stop();
        }
    }

    /// Puts the vCPU's FP/SIMD registers in the pCPU's unit (the vCPU is to own it).
    pub fn fp_restore(&mut self) {
        if self.fp_saved {
            self.fp.restore();
        } else {
            super::cpu::zero_fp_simd();
        }
    }

    /// Keeps the pCPU's FP/SIMD registers as the vCPU's (it owned the unit).
    pub fn fp_save(&mut self) {
        self.fp.save();
        self.fp_saved = true;
    }

    /// Sets the stack pointer the vCPU starts with (SP_EL1: it starts in EL1h).
    pub fn set_stack(&mut self, sp: u64) {
        self.el1.sp_el1 = sp;
    }

    /// Forgets the saved virtual interrupts of a vCPU that stops while switched out: its
    /// interface and timer as at reset (the caller gave its SPIs back to the vGIC).
    pub fn discard_interrupts(&mut self) {
        self.interface.reset();
        self.timer = VirtualTimer::default();
    }

    /// Saves the state of the vCPU leaving this pCPU (its general registers stay in its frame,
    /// where the trap saved them): `listed` the list registers Keel filled for it. Its virtual
    /// timer is stopped and its timer interrupt's physical active state taken off the pCPU (to
    /// be put back by [`VcpuContext::restore`]).
    pub fn save(&mut self, redistributor: Option<&gic::Redistributor>, listed: u64) {
        self.pc = read_sysreg!("elr_el2");
        self.pstate = read_sysreg!("spsr_el2");
        self.el1.save();
        self.timer.capture();
        // SAFETY: stops the leaving vCPU's timer; its settings are saved above.
        unsafe { write_sysreg!("cntv_ctl_el0", 0u64) };
        self.timer.physical_active = redistributor
            .map(|r| r.take_active_private(VTIMER_INTID))
            .unwrap_or(false);
        // Only the list registers Keel filled: every other one is empty (the virtual timer's
        // fast path, irq::relist_timer, refills only a register still in `listed`).
        self.interface.listed = listed;
        gic::save_listed(&mut self.interface.lrs, listed);
        self.interface.vmcr = gic::read_vmcr();
        self.interface.hcr = gic::read_hcr();
        gic::save_active_priorities(&mut self.interface.ap0r, &mut self.interface.ap1r);
        if self.owns_pmu {
            self.pmu.save();
        }
    }

    /// Loads this context onto the pCPU, all but ELR/SPSR, which the entry loads (the general
    /// registers are in the vCPU's frame). `same_vm_other_vcpu`: the previous vCPU on this
    /// pCPU was another vCPU of the same VM (same VMID), whose EL1 TLB entries must not be
    /// used by this one.
    pub fn restore(&self, redistributor: Option<&gic::Redistributor>, same_vm_other_vcpu: bool) {
        self.el1.restore();
        if self.owns_pmu {
            self.pmu.restore();
        }
        // SAFETY: the incoming vCPU's identity, traps and stage-2 root (a complete table built
        // at boot); VMIDs keep VMs apart in the TLB, so only a switch between two vCPUs of one
        // VM needs its EL1 entries dropped.
        unsafe {
            write_sysreg!("vmpidr_el2", self.vmpidr);
            write_sysreg!("hcr_el2", self.hcr);
            write_sysreg!("mdcr_el2", self.mdcr);
            stage2::switch_to(self.vttbr);
            if same_vm_other_vcpu {
                // The TLBI acts on the VMID just written: synchronized first.
                core::arch::asm!("isb", "tlbi vmalle1", "dsb nsh", options(nostack));
            }
            write_sysreg!("cntv_cval_el0", self.timer.compare);
            write_sysreg!("cntv_ctl_el0", self.timer.control);
        }
        if self.timer.physical_active {
            if let Some(redistributor) = redistributor {
                redistributor.set_active_private(VTIMER_INTID);
            }
        }
        // The list registers it had filled are written back; every other one is empty.
        gic::restore_listed(&self.interface.lrs, self.interface.listed);
        gic::restore_active_priorities(&self.interface.ap0r, &self.interface.ap1r);
        gic::write_vmcr_hcr(self.interface.vmcr, self.interface.hcr);
    }
}
