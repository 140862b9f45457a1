//! What a guest sees of the CPU's features: the ID registers Keel traps (HCR_EL2.TID3) read as
//! the hardware's, with the fields of features Keel does not virtualize set to "not
//! implemented", so a guest never reaches hardware state it does not own.

/// One ID register in the trapped space (`op0 = 3, op1 = 0, CRn = 0`): its CRm and op2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdRegister {
    /// CRm, 1 to 7.
    pub crm: u8,
    /// op2, 0 to 7.
    pub op2: u8,
}

/// ID_DFR0_EL1 (AArch32 debug features).
pub const ID_DFR0_EL1: IdRegister = IdRegister { crm: 1, op2: 2 };
/// ID_AA64PFR0_EL1.
pub const ID_AA64PFR0_EL1: IdRegister = IdRegister { crm: 4, op2: 0 };
/// ID_AA64PFR1_EL1.
pub const ID_AA64PFR1_EL1: IdRegister = IdRegister { crm: 4, op2: 1 };
/// ID_AA64ZFR0_EL1: the SVE features.
pub const ID_AA64ZFR0_EL1: IdRegister = IdRegister { crm: 4, op2: 4 };
/// ID_AA64DFR0_EL1.
pub const ID_AA64DFR0_EL1: IdRegister = IdRegister { crm: 5, op2: 0 };

/// What one VM may use beyond the base the architecture gives every guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestFeatures {
    /// The PMU is the VM's own (its pCPUs run nothing else): its counters are passed through.
    pub pmu: bool,
    /// SVE runs natively: no vCPU of the VM shares a pCPU (where Keel traps SVE with
    /// CPTR_EL2.TZ rather than switch its state).
    pub sve: bool,
}

/// A 4-bit field that reads as zero ("not implemented"), and why.
struct Hidden {
    register: IdRegister,
    shift: u32,
    /// Whether the field stays visible for a VM with these features.
    visible: fn(GuestFeatures) -> bool,
}

const fn hidden(register: IdRegister, shift: u32) -> Hidden {
    Hidden {
        register,
        shift,
        visible: |_| false,
    }
}

const fn pmu_field(register: IdRegister, shift: u32) -> Hidden {
    Hidden {
        register,
        shift,
        visible: |features| features.pmu,
    }
}

const fn sve_field(register: IdRegister, shift: u32) -> Hidden {
    Hidden {
        register,
        shift,
        visible: |features| features.sve,
    }
}

/// The fields Keel hides (Arm ARM D19.2, the ID register descriptions).
const HIDDEN: &[Hidden] = &[
    // Activity monitors (AMU, trapped by CPTR_EL2.TAM) and MPAM.
    hidden(ID_AA64PFR0_EL1, 44),
    hidden(ID_AA64PFR0_EL1, 40),
    // Memory tagging (HCR_EL2.ATA clear), SME (CPTR_EL2.TSM), MPAM fraction, NMI.
    hidden(ID_AA64PFR1_EL1, 8),
    hidden(ID_AA64PFR1_EL1, 24),
    hidden(ID_AA64PFR1_EL1, 16),
    hidden(ID_AA64PFR1_EL1, 36),
    // Trace unit, statistical profiling (MDCR_EL2.TPMS), trace filter, trace buffer, BRBE.
    hidden(ID_AA64DFR0_EL1, 4),
    hidden(ID_AA64DFR0_EL1, 32),
    hidden(ID_AA64DFR0_EL1, 40),
    hidden(ID_AA64DFR0_EL1, 44),
    hidden(ID_AA64DFR0_EL1, 52),
    // The PMU (MDCR_EL2.TPM/TPMCR) and its multi-threaded variant, unless the VM owns it.
    pmu_field(ID_AA64DFR0_EL1, 8),
    pmu_field(ID_AA64DFR0_EL1, 48),
    pmu_field(ID_DFR0_EL1, 24),
    // AArch32 trace model (ID_DFR0_EL1.MMapTrc, CopTrc).
    hidden(ID_DFR0_EL1, 16),
    hidden(ID_DFR0_EL1, 12),
    // SVE and every field of its feature register, for a VM on a shared pCPU.
    sve_field(ID_AA64PFR0_EL1, 32),
    sve_field(ID_AA64ZFR0_EL1, 0),
    sve_field(ID_AA64ZFR0_EL1, 4),
    sve_field(ID_AA64ZFR0_EL1, 8),
    sve_field(ID_AA64ZFR0_EL1, 12),
    sve_field(ID_AA64ZFR0_EL1, 16),
    sve_field(ID_AA64ZFR0_EL1, 20),
    sve_field(ID_AA64ZFR0_EL1, 24),
    sve_field(ID_AA64ZFR0_EL1, 28),
    sve_field(ID_AA64ZFR0_EL1, 32),
    sve_field(ID_AA64ZFR0_EL1, 36),
    sve_field(ID_AA64ZFR0_EL1, 40),
    sve_field(ID_AA64ZFR0_EL1, 44),
    sve_field(ID_AA64ZFR0_EL1, 48),
    sve_field(ID_AA64ZFR0_EL1, 52),
    sve_field(ID_AA64ZFR0_EL1, 56),
    sve_field(ID_AA64ZFR0_EL1, 60),
];

/// What a guest with `features` reads from `register`, whose hardware value is `hardware`.
pub fn guest_view(register: IdRegister, hardware: u64, features: GuestFeatures) -> u64 {
    HIDDEN
        .iter()
        .filter(|field| field.register == register && !(field.visible)(features))
        .fold(hardware, |value, field| value & !(0xf << field.shift))
}

/// Whether `(op0, op1, crn, crm)` is in the ID register space HCR_EL2.TID3 traps.
pub fn is_id_register(op0: u8, op1: u8, crn: u8, crm: u8) -> bool {
    op0 == 3 && op1 == 0 && crn == 0 && (1..=7).contains(&crm)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HIDDEN_PMU: GuestFeatures = GuestFeatures {
        pmu: false,
        sve: true,
    };
    const OWN_PMU: GuestFeatures = GuestFeatures {
        pmu: true,
        sve: true,
    };

    #[test]
    fn sve_is_hidden_from_a_vm_that_shares_a_pcpu() {
        let shared = GuestFeatures {
            pmu: false,
            sve: false,
        };
        let pfr0 = 1 << 32 | 0x1111;
        assert_eq!(guest_view(ID_AA64PFR0_EL1, pfr0, shared), 0x1111);
        assert_eq!(guest_view(ID_AA64PFR0_EL1, pfr0, HIDDEN_PMU), pfr0);
        let zfr0 = 0x0110_1100_0011_0011;
        assert_eq!(guest_view(ID_AA64ZFR0_EL1, zfr0, shared), 0);
        assert_eq!(guest_view(ID_AA64ZFR0_EL1, zfr0, HIDDEN_PMU), zfr0);
    }

    #[test]
    fn the_pmu_is_hidden_unless_the_vm_owns_it() {
        // Cortex-A72's ID_AA64DFR0_EL1 as QEMU reports it: PMUVer 1, DebugVer 6, BRPs 5, WRPs 3.
        let dfr0 = 0x1030_5106;
        assert_eq!(guest_view(ID_AA64DFR0_EL1, dfr0, HIDDEN_PMU), 0x1030_5006);
        assert_eq!(guest_view(ID_AA64DFR0_EL1, dfr0, OWN_PMU), dfr0);
        // AArch32 PerfMon (27:24) likewise; memory-mapped trace (19:16) always goes; the debug
        // models (7:0) stay.
        assert_eq!(guest_view(ID_DFR0_EL1, 0x0301_0066, HIDDEN_PMU), 0x66);
        assert_eq!(guest_view(ID_DFR0_EL1, 0x0301_0066, OWN_PMU), 0x0300_0066);
    }

    #[test]
    fn unvirtualized_features_read_as_absent_and_the_rest_as_hardware() {
        // AMU (47:44), MPAM (43:40), SVE (35:32), GIC (27:24) and EL0-EL3 (15:0): AMU and
        // MPAM go, the rest stays.
        let kept = 1 << 32 | 1 << 24 | 0x1111;
        let pfr0 = 1 << 44 | 1 << 40 | kept;
        assert_eq!(guest_view(ID_AA64PFR0_EL1, pfr0, HIDDEN_PMU), kept);
        // MTE (11:8), SME (27:24), BT (3:0): only BT stays.
        let pfr1 = 0x0100_0201;
        assert_eq!(guest_view(ID_AA64PFR1_EL1, pfr1, OWN_PMU), 0x1);
        // Trace (7:4) and SPE (35:32) go whatever the PMU's owner.
        assert_eq!(
            guest_view(ID_AA64DFR0_EL1, 0x1_0000_0016, OWN_PMU),
            0x0000_0006
        );
        // Registers with nothing hidden pass through.
        let isar0 = IdRegister { crm: 6, op2: 0 };
        assert_eq!(guest_view(isar0, u64::MAX, HIDDEN_PMU), u64::MAX);
    }

    #[test]
    fn the_trapped_space_is_crn_0_crm_1_to_7() {
        assert!(is_id_register(3, 0, 0, 1));
        assert!(is_id_register(3, 0, 0, 7));
        assert!(!is_id_register(3, 0, 0, 0)); // MIDR, MPIDR, REVIDR
        assert!(!is_id_register(3, 1, 0, 0)); // CCSIDR
        assert!(!is_id_register(3, 3, 0, 0)); // CTR_EL0
        assert!(!is_id_register(3, 0, 1, 0)); // SCTLR_EL1
    }
}
