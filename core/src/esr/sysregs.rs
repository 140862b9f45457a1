//! Encodings of the system registers and instructions a hypervisor traps or reports, with their names.
//!
//! Sources: Arm ARM D19 and the GICv3 specification, 12.2.

use super::SysReg;

macro_rules! sysregs {
    ($($(#[$doc:meta])* $name:ident = ($op0:expr, $op1:expr, $crn:expr, $crm:expr, $op2:expr), $text:literal;)*) => {
        $($(#[$doc])* pub const $name: SysReg = SysReg::new($op0, $op1, $crn, $crm, $op2);)*
        /// Every register above, packed ([`SysReg::packed`]), for [`SysReg::name`]; its name
        /// is the same entry of [`NAMES`].
        pub(super) static ENCODINGS: [u16; COUNT] = [$($name.packed()),*];
        /// The names of [`ENCODINGS`], one after the other (a table of 101 encodings with
        /// a `&str` each took 3.6 KB of Keel's image, these two take 1.6 KB).
        pub(super) static NAMES: Names<COUNT, { text_len(&[$($text),*]) }> = Names::new(&[$($text),*]);
        /// How many registers are named.
        pub(super) const COUNT: usize = [$($text),*].len();
    };
}

/// Names as one run of bytes, with where each ends: [`ENCODINGS`]'s, and the exception
/// classes' descriptions. A `&str` is 16 bytes of the image beside its text; an end, two.
pub(super) struct Names<const N: usize, const LEN: usize> {
    text: [u8; LEN],
    ends: [u16; N],
}

impl<const N: usize, const LEN: usize> Names<N, LEN> {
    pub(super) const fn new(names: &[&str; N]) -> Self {
        let mut text = [0; LEN];
        let mut ends = [0; N];
        let (mut i, mut at) = (0, 0);
        while i < N {
            let name = names[i].as_bytes();
            let mut j = 0;
            while j < name.len() {
                text[at] = name[j];
                at += 1;
                j += 1;
            }
            ends[i] = at as u16;
            i += 1;
        }
        Self { text, ends }
    }

    /// Name number `index`.
    pub(super) fn get(&self, index: usize) -> Option<&str> {
        let end = usize::from(*self.ends.get(index)?);
        let start = match index {
            0 => 0,
            _ => usize::from(self.ends[index - 1]),
        };
        core::str::from_utf8(self.text.get(start..end)?).ok()
    }
}

/// The length of all of `names` together.
pub(super) const fn text_len(names: &[&str]) -> usize {
    let (mut i, mut len) = (0, 0);
    while i < names.len() {
        len += names[i].len();
        i += 1;
    }
    len
}

sysregs! {
    /// GICv3 SGI generation, group 1 (GICv3 12.2.22).
    ICC_SGI1R_EL1 = (3, 0, 12, 11, 5), "ICC_SGI1R_EL1";
    /// GICv3 SGI generation, alias group 1 (GICv3 12.2.1).
    ICC_ASGI1R_EL1 = (3, 0, 12, 11, 6), "ICC_ASGI1R_EL1";
    /// GICv3 SGI generation, group 0 (GICv3 12.2.21).
    ICC_SGI0R_EL1 = (3, 0, 12, 11, 7), "ICC_SGI0R_EL1";
    /// GICv3 interrupt priority mask.
    ICC_PMR_EL1 = (3, 0, 4, 6, 0), "ICC_PMR_EL1";
    /// GICv3 group 1 acknowledge.
    ICC_IAR1_EL1 = (3, 0, 12, 12, 0), "ICC_IAR1_EL1";
    /// GICv3 group 1 end of interrupt.
    ICC_EOIR1_EL1 = (3, 0, 12, 12, 1), "ICC_EOIR1_EL1";
    /// GICv3 deactivate interrupt.
    ICC_DIR_EL1 = (3, 0, 12, 11, 1), "ICC_DIR_EL1";
    /// GICv3 running priority.
    ICC_RPR_EL1 = (3, 0, 12, 11, 3), "ICC_RPR_EL1";
    /// GICv3 control.
    ICC_CTLR_EL1 = (3, 0, 12, 12, 4), "ICC_CTLR_EL1";
    /// GICv3 system register enable.
    ICC_SRE_EL1 = (3, 0, 12, 12, 5), "ICC_SRE_EL1";
    /// GICv3 group 0 enable.
    ICC_IGRPEN0_EL1 = (3, 0, 12, 12, 6), "ICC_IGRPEN0_EL1";
    /// GICv3 group 1 enable.
    ICC_IGRPEN1_EL1 = (3, 0, 12, 12, 7), "ICC_IGRPEN1_EL1";
    /// EL1 physical timer control (Arm ARM D19.8).
    CNTP_CTL_EL0 = (3, 3, 14, 2, 1), "CNTP_CTL_EL0";
    /// EL1 physical timer compare value.
    CNTP_CVAL_EL0 = (3, 3, 14, 2, 2), "CNTP_CVAL_EL0";
    /// EL1 physical timer value.
    CNTP_TVAL_EL0 = (3, 3, 14, 2, 0), "CNTP_TVAL_EL0";
    /// Virtual timer control.
    CNTV_CTL_EL0 = (3, 3, 14, 3, 1), "CNTV_CTL_EL0";
    /// Virtual timer compare value.
    CNTV_CVAL_EL0 = (3, 3, 14, 3, 2), "CNTV_CVAL_EL0";
    /// Virtual timer value.
    CNTV_TVAL_EL0 = (3, 3, 14, 3, 0), "CNTV_TVAL_EL0";
    /// Physical count.
    CNTPCT_EL0 = (3, 3, 14, 0, 1), "CNTPCT_EL0";
    /// Virtual count.
    CNTVCT_EL0 = (3, 3, 14, 0, 2), "CNTVCT_EL0";
    /// Counter frequency.
    CNTFRQ_EL0 = (3, 3, 14, 0, 0), "CNTFRQ_EL0";
    /// EL1 timer access control.
    CNTKCTL_EL1 = (3, 0, 14, 1, 0), "CNTKCTL_EL1";
    /// Implementation-defined auxiliary control (trapped by HCR_EL2.TACR).
    ACTLR_EL1 = (3, 0, 1, 0, 1), "ACTLR_EL1";
    /// System control, EL1.
    SCTLR_EL1 = (3, 0, 1, 0, 0), "SCTLR_EL1";
    /// Architectural feature access control, EL1.
    CPACR_EL1 = (3, 0, 1, 0, 2), "CPACR_EL1";
    /// Translation table base 0, EL1.
    TTBR0_EL1 = (3, 0, 2, 0, 0), "TTBR0_EL1";
    /// Translation table base 1, EL1.
    TTBR1_EL1 = (3, 0, 2, 0, 1), "TTBR1_EL1";
    /// Translation control, EL1.
    TCR_EL1 = (3, 0, 2, 0, 2), "TCR_EL1";
    /// Auxiliary fault status 0, EL1.
    AFSR0_EL1 = (3, 0, 5, 1, 0), "AFSR0_EL1";
    /// Auxiliary fault status 1, EL1.
    AFSR1_EL1 = (3, 0, 5, 1, 1), "AFSR1_EL1";
    /// Exception syndrome, EL1.
    ESR_EL1 = (3, 0, 5, 2, 0), "ESR_EL1";
    /// Fault address, EL1.
    FAR_EL1 = (3, 0, 6, 0, 0), "FAR_EL1";
    /// Memory attribute indirection, EL1.
    MAIR_EL1 = (3, 0, 10, 2, 0), "MAIR_EL1";
    /// Auxiliary memory attribute indirection, EL1.
    AMAIR_EL1 = (3, 0, 10, 3, 0), "AMAIR_EL1";
    /// Vector base, EL1.
    VBAR_EL1 = (3, 0, 12, 0, 0), "VBAR_EL1";
    /// Context ID, EL1.
    CONTEXTIDR_EL1 = (3, 0, 13, 0, 1), "CONTEXTIDR_EL1";
    /// Main ID.
    MIDR_EL1 = (3, 0, 0, 0, 0), "MIDR_EL1";
    /// Multiprocessor affinity.
    MPIDR_EL1 = (3, 0, 0, 0, 5), "MPIDR_EL1";
    /// Revision ID.
    REVIDR_EL1 = (3, 0, 0, 0, 6), "REVIDR_EL1";
    /// Cache size ID.
    CCSIDR_EL1 = (3, 1, 0, 0, 0), "CCSIDR_EL1";
    /// Cache level ID.
    CLIDR_EL1 = (3, 1, 0, 0, 1), "CLIDR_EL1";
    /// Auxiliary ID.
    AIDR_EL1 = (3, 1, 0, 0, 7), "AIDR_EL1";
    /// Cache size selection.
    CSSELR_EL1 = (3, 2, 0, 0, 0), "CSSELR_EL1";
    /// Cache type.
    CTR_EL0 = (3, 3, 0, 0, 1), "CTR_EL0";
    /// Data cache zero ID.
    DCZID_EL0 = (3, 3, 0, 0, 7), "DCZID_EL0";
    /// AArch64 processor feature 0 (Arm ARM D19.2; trapped by HCR_EL2.TID3).
    ID_AA64PFR0_EL1 = (3, 0, 0, 4, 0), "ID_AA64PFR0_EL1";
    /// AArch64 processor feature 1.
    ID_AA64PFR1_EL1 = (3, 0, 0, 4, 1), "ID_AA64PFR1_EL1";
    /// SVE feature ID 0.
    ID_AA64ZFR0_EL1 = (3, 0, 0, 4, 4), "ID_AA64ZFR0_EL1";
    /// SME feature ID 0.
    ID_AA64SMFR0_EL1 = (3, 0, 0, 4, 5), "ID_AA64SMFR0_EL1";
    /// AArch64 debug feature 0.
    ID_AA64DFR0_EL1 = (3, 0, 0, 5, 0), "ID_AA64DFR0_EL1";
    /// AArch64 debug feature 1.
    ID_AA64DFR1_EL1 = (3, 0, 0, 5, 1), "ID_AA64DFR1_EL1";
    /// AArch64 auxiliary feature 0.
    ID_AA64AFR0_EL1 = (3, 0, 0, 5, 4), "ID_AA64AFR0_EL1";
    /// AArch64 auxiliary feature 1.
    ID_AA64AFR1_EL1 = (3, 0, 0, 5, 5), "ID_AA64AFR1_EL1";
    /// AArch64 instruction set attribute 0.
    ID_AA64ISAR0_EL1 = (3, 0, 0, 6, 0), "ID_AA64ISAR0_EL1";
    /// AArch64 instruction set attribute 1.
    ID_AA64ISAR1_EL1 = (3, 0, 0, 6, 1), "ID_AA64ISAR1_EL1";
    /// AArch64 instruction set attribute 2.
    ID_AA64ISAR2_EL1 = (3, 0, 0, 6, 2), "ID_AA64ISAR2_EL1";
    /// AArch64 memory model feature 0.
    ID_AA64MMFR0_EL1 = (3, 0, 0, 7, 0), "ID_AA64MMFR0_EL1";
    /// AArch64 memory model feature 1.
    ID_AA64MMFR1_EL1 = (3, 0, 0, 7, 1), "ID_AA64MMFR1_EL1";
    /// AArch64 memory model feature 2.
    ID_AA64MMFR2_EL1 = (3, 0, 0, 7, 2), "ID_AA64MMFR2_EL1";
    /// AArch64 memory model feature 3.
    ID_AA64MMFR3_EL1 = (3, 0, 0, 7, 3), "ID_AA64MMFR3_EL1";
    /// AArch32 processor feature 0.
    ID_PFR0_EL1 = (3, 0, 0, 1, 0), "ID_PFR0_EL1";
    /// AArch32 processor feature 1.
    ID_PFR1_EL1 = (3, 0, 0, 1, 1), "ID_PFR1_EL1";
    /// AArch32 debug feature 0.
    ID_DFR0_EL1 = (3, 0, 0, 1, 2), "ID_DFR0_EL1";
    /// AArch32 memory model feature 0.
    ID_MMFR0_EL1 = (3, 0, 0, 1, 4), "ID_MMFR0_EL1";
    /// AArch32 instruction set attribute 0.
    ID_ISAR0_EL1 = (3, 0, 0, 2, 0), "ID_ISAR0_EL1";
    /// AArch32 media and VFP feature 0.
    MVFR0_EL1 = (3, 0, 0, 3, 0), "MVFR0_EL1";
    /// AArch32 media and VFP feature 1.
    MVFR1_EL1 = (3, 0, 0, 3, 1), "MVFR1_EL1";
    /// AArch32 media and VFP feature 2.
    MVFR2_EL1 = (3, 0, 0, 3, 2), "MVFR2_EL1";
    /// Monitor debug system control (Arm ARM D19.3; trapped by MDCR_EL2.TDA).
    MDSCR_EL1 = (2, 0, 0, 2, 2), "MDSCR_EL1";
    /// Monitor DCC interrupt enable.
    MDCCINT_EL1 = (2, 0, 0, 2, 0), "MDCCINT_EL1";
    /// Monitor DCC status.
    MDCCSR_EL0 = (2, 3, 0, 1, 0), "MDCCSR_EL0";
    /// Debug data transfer, half-duplex.
    DBGDTR_EL0 = (2, 3, 0, 4, 0), "DBGDTR_EL0";
    /// Debug data transfer, receive (MRS) or transmit (MSR): one encoding, two names.
    DBGDTRRX_EL0 = (2, 3, 0, 5, 0), "DBGDTRRX_EL0";
    /// Monitor debug ROM address.
    MDRAR_EL1 = (2, 0, 1, 0, 0), "MDRAR_EL1";
    /// OS lock access (trapped by MDCR_EL2.TDOSA).
    OSLAR_EL1 = (2, 0, 1, 0, 4), "OSLAR_EL1";
    /// OS lock status.
    OSLSR_EL1 = (2, 0, 1, 1, 4), "OSLSR_EL1";
    /// OS double lock.
    OSDLR_EL1 = (2, 0, 1, 3, 4), "OSDLR_EL1";
    /// Debug power control.
    DBGPRCR_EL1 = (2, 0, 1, 4, 4), "DBGPRCR_EL1";
    /// Debug claim tag set.
    DBGCLAIMSET_EL1 = (2, 0, 7, 8, 6), "DBGCLAIMSET_EL1";
    /// Debug claim tag clear.
    DBGCLAIMCLR_EL1 = (2, 0, 7, 9, 6), "DBGCLAIMCLR_EL1";
    /// Debug authentication status.
    DBGAUTHSTATUS_EL1 = (2, 0, 7, 14, 6), "DBGAUTHSTATUS_EL1";
    /// Performance monitors control (Arm ARM D19.4; trapped by MDCR_EL2.TPM).
    PMCR_EL0 = (3, 3, 9, 12, 0), "PMCR_EL0";
    /// Performance monitors count enable set.
    PMCNTENSET_EL0 = (3, 3, 9, 12, 1), "PMCNTENSET_EL0";
    /// Performance monitors count enable clear.
    PMCNTENCLR_EL0 = (3, 3, 9, 12, 2), "PMCNTENCLR_EL0";
    /// Performance monitors overflow flag status clear.
    PMOVSCLR_EL0 = (3, 3, 9, 12, 3), "PMOVSCLR_EL0";
    /// Performance monitors software increment.
    PMSWINC_EL0 = (3, 3, 9, 12, 4), "PMSWINC_EL0";
    /// Performance monitors event counter selection.
    PMSELR_EL0 = (3, 3, 9, 12, 5), "PMSELR_EL0";
    /// Performance monitors common event ID 0.
    PMCEID0_EL0 = (3, 3, 9, 12, 6), "PMCEID0_EL0";
    /// Performance monitors common event ID 1.
    PMCEID1_EL0 = (3, 3, 9, 12, 7), "PMCEID1_EL0";
    /// Performance monitors cycle count.
    PMCCNTR_EL0 = (3, 3, 9, 13, 0), "PMCCNTR_EL0";
    /// Performance monitors selected event type.
    PMXEVTYPER_EL0 = (3, 3, 9, 13, 1), "PMXEVTYPER_EL0";
    /// Performance monitors selected event count.
    PMXEVCNTR_EL0 = (3, 3, 9, 13, 2), "PMXEVCNTR_EL0";
    /// Performance monitors user enable.
    PMUSERENR_EL0 = (3, 3, 9, 14, 0), "PMUSERENR_EL0";
    /// Performance monitors interrupt enable set.
    PMINTENSET_EL1 = (3, 0, 9, 14, 1), "PMINTENSET_EL1";
    /// Performance monitors interrupt enable clear.
    PMINTENCLR_EL1 = (3, 0, 9, 14, 2), "PMINTENCLR_EL1";
    /// Performance monitors overflow flag status set.
    PMOVSSET_EL0 = (3, 3, 9, 14, 3), "PMOVSSET_EL0";
    /// Performance monitors cycle count filter.
    PMCCFILTR_EL0 = (3, 3, 14, 15, 7), "PMCCFILTR_EL0";
    /// Data cache invalidate by set/way (Arm ARM C5.3; trapped by HCR_EL2.TSW).
    DC_ISW = (1, 0, 7, 6, 2), "DC ISW";
    /// Data cache clean by set/way.
    DC_CSW = (1, 0, 7, 10, 2), "DC CSW";
    /// Data cache clean and invalidate by set/way.
    DC_CISW = (1, 0, 7, 14, 2), "DC CISW";
}
