//! System register encodings, their names, and trapped MSR/MRS accesses (Arm ARM C5.3).

use super::sysregs;

/// A system register or system instruction encoding (Arm ARM C5.3, "A64 System
/// instruction class encoding overview"): `S<op0>_<op1>_C<crn>_C<crm>_<op2>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SysReg {
    /// op0, 2 bits: 1 for system instructions, 2 for debug, 3 for other registers.
    pub op0: u8,
    /// op1, 3 bits.
    pub op1: u8,
    /// CRn, 4 bits.
    pub crn: u8,
    /// CRm, 4 bits.
    pub crm: u8,
    /// op2, 3 bits.
    pub op2: u8,
}

/// One named debug register per CRm value: `DBGBVR<n>_EL1` and friends (Arm ARM D19.3).
#[rustfmt::skip]
const DEBUG_REGISTERS: [[&str; 16]; 4] = [
    [
        "DBGBVR0_EL1", "DBGBVR1_EL1", "DBGBVR2_EL1", "DBGBVR3_EL1", "DBGBVR4_EL1", "DBGBVR5_EL1",
        "DBGBVR6_EL1", "DBGBVR7_EL1", "DBGBVR8_EL1", "DBGBVR9_EL1", "DBGBVR10_EL1",
        "DBGBVR11_EL1", "DBGBVR12_EL1", "DBGBVR13_EL1", "DBGBVR14_EL1", "DBGBVR15_EL1",
    ],
    [
        "DBGBCR0_EL1", "DBGBCR1_EL1", "DBGBCR2_EL1", "DBGBCR3_EL1", "DBGBCR4_EL1", "DBGBCR5_EL1",
        "DBGBCR6_EL1", "DBGBCR7_EL1", "DBGBCR8_EL1", "DBGBCR9_EL1", "DBGBCR10_EL1",
        "DBGBCR11_EL1", "DBGBCR12_EL1", "DBGBCR13_EL1", "DBGBCR14_EL1", "DBGBCR15_EL1",
    ],
    [
        "DBGWVR0_EL1", "DBGWVR1_EL1", "DBGWVR2_EL1", "DBGWVR3_EL1", "DBGWVR4_EL1", "DBGWVR5_EL1",
        "DBGWVR6_EL1", "DBGWVR7_EL1", "DBGWVR8_EL1", "DBGWVR9_EL1", "DBGWVR10_EL1",
        "DBGWVR11_EL1", "DBGWVR12_EL1", "DBGWVR13_EL1", "DBGWVR14_EL1", "DBGWVR15_EL1",
    ],
    [
        "DBGWCR0_EL1", "DBGWCR1_EL1", "DBGWCR2_EL1", "DBGWCR3_EL1", "DBGWCR4_EL1", "DBGWCR5_EL1",
        "DBGWCR6_EL1", "DBGWCR7_EL1", "DBGWCR8_EL1", "DBGWCR9_EL1", "DBGWCR10_EL1",
        "DBGWCR11_EL1", "DBGWCR12_EL1", "DBGWCR13_EL1", "DBGWCR14_EL1", "DBGWCR15_EL1",
    ],
];

impl SysReg {
    /// The encoding `S<op0>_<op1>_C<crn>_C<crm>_<op2>`.
    pub const fn new(op0: u8, op1: u8, crn: u8, crm: u8, op2: u8) -> Self {
        Self {
            op0,
            op1,
            crn,
            crm,
            op2,
        }
    }

    /// The architectural name, if this encoding is one [`sysregs`] knows, or a debug
    /// breakpoint/watchpoint register (op0 = 2, op1 = 0, CRn = 0, op2 = 4..=7).
    pub fn name(&self) -> Option<&'static str> {
        if (self.op0, self.op1, self.crn) == (2, 0, 0) && (4..=7).contains(&self.op2) {
            let kind = DEBUG_REGISTERS.get(usize::from(self.op2 - 4))?;
            return kind.get(usize::from(self.crm)).copied();
        }
        sysregs::NAMED
            .iter()
            .find(|(reg, _)| reg == self)
            .map(|&(_, name)| name)
    }
}

impl crate::text::Show for SysReg {
    fn show(&self, out: &mut dyn crate::text::Out) {
        match self.name() {
            Some(name) => out.put(name),
            None => crate::text!(
                out, "S", self.op0, "_", self.op1, "_C", self.crn, "_C", self.crm, "_", self.op2
            ),
        }
    }
}

impl core::fmt::Display for SysReg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        crate::text::fmt(self, f)
    }
}

/// A trapped MSR, MRS or system instruction, EC 0x18 (Arm ARM D17.2.37).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SysRegAccess {
    /// The register or instruction encoding.
    pub reg: SysReg,
    /// Rt, bits \[9:5\]: the general-purpose register, 31 meaning xzr.
    pub register: u8,
    /// Direction, bit \[0\]: `true` for MRS (read), `false` for MSR or a system instruction.
    pub read: bool,
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::esr::tests::{oracle_field, xorshift, IL};
    use crate::esr::Esr;
    use aarch64_esr_decoder::decode;
    use std::format;
    use std::string::{String, ToString};
    use std::vec::Vec;

    /// The oracle's rendering of a trapped system register access, e.g. `MRS x3, NAME`.
    fn oracle_sysreg_text(value: u64) -> String {
        let fields = decode(value).unwrap();
        let iss = fields.iter().find(|f| f.name == "ISS").unwrap();
        iss.description.clone().unwrap()
    }

    #[test]
    fn sysreg_write_of_agrees_with_the_full_decode() {
        let mut random = xorshift(0x0bad_cafe_f00d_1234);
        let sgi1r = sysregs::ICC_SGI1R_EL1;
        let iss_of = |reg: SysReg, rt: u64, read: u64| {
            u64::from(reg.op0) << 20
                | u64::from(reg.op2) << 17
                | u64::from(reg.op1) << 14
                | u64::from(reg.crn) << 10
                | rt << 5
                | u64::from(reg.crm) << 1
                | read
        };
        for round in 0..20_000u64 {
            let noise = random();
            let value = match round % 4 {
                // Anything at all.
                0 => noise,
                // A system register trap of any register.
                1 => 0x18 << 26 | noise & 0x3ff_ffff,
                // SGI1R itself, read or written, any Rt, IL, RES0 bits and upper half.
                2 => {
                    noise & !0xffff_ffff
                        | 0x18 << 26
                        | noise & (IL | 0x7 << 22)
                        | iss_of(sgi1r, noise >> 40 & 31, noise >> 50 & 1)
                }
                // SGI1R's encoding under another class.
                _ => (noise & 0x3f) << 26 | iss_of(sgi1r, noise >> 40 & 31, 0),
            };
            let esr = Esr(value);
            let expected = esr
                .sysreg()
                .filter(|access| access.reg == sgi1r && !access.read)
                .map(|access| access.register);
            assert_eq!(esr.sysreg_write_of(sgi1r), expected, "{value:#x}");
        }
    }

    #[test]
    fn sysreg_accesses_match_oracle() {
        let mut random = xorshift(0x1234_5678_9abc_def1);
        for _ in 0..3000 {
            let iss = random() & 0x3f_ffff; // bits [24:22] are RES0
            let value = 0x18 << 26 | IL | iss;
            let access = Esr(value).sysreg().unwrap();
            let fields = decode(value).unwrap();
            let field = |name| oracle_field(&fields, name).unwrap();
            let reg = access.reg;
            assert_eq!(
                [reg.op0, reg.op1, reg.crn, reg.crm, reg.op2, access.register],
                ["Op0", "Op1", "CRn", "CRm", "Op2", "Rt"].map(|n| field(n) as u8)
            );
            assert_eq!(access.read, field("Direction") == 1);
        }
    }

    /// Every name given here is the oracle's name for that encoding, where it has one.
    #[test]
    fn sysreg_names_match_oracle() {
        let mut named = 0;
        let mut confirmed = 0;
        for op0 in 1..4u8 {
            for op1 in 0..8u8 {
                for crn in 0..16u8 {
                    for crm in 0..16u8 {
                        for op2 in 0..8u8 {
                            let reg = SysReg::new(op0, op1, crn, crm, op2);
                            let Some(name) = reg.name() else { continue };
                            named += 1;
                            let iss = u64::from(op0) << 20
                                | u64::from(op2) << 17
                                | u64::from(op1) << 14
                                | u64::from(crn) << 10
                                | 3 << 5
                                | u64::from(crm) << 1
                                | 1;
                            let text = oracle_sysreg_text(0x18 << 26 | IL | iss);
                            let theirs = text.strip_prefix("MRS x3, ").unwrap();
                            if theirs != "unknown" {
                                assert_eq!(name, theirs, "{reg:?}");
                                confirmed += 1;
                            }
                            assert_eq!(reg.to_string(), name);
                        }
                    }
                }
            }
        }
        assert_eq!(named, sysregs::NAMED.len() + 64);
        assert!(confirmed > 80, "only {confirmed} names confirmed");
    }

    #[test]
    fn sysreg_names() {
        assert_eq!(SysReg::new(2, 0, 0, 7, 4).name(), Some("DBGBVR7_EL1"));
        assert_eq!(SysReg::new(2, 0, 0, 15, 5).name(), Some("DBGBCR15_EL1"));
        assert_eq!(SysReg::new(2, 0, 0, 0, 6).name(), Some("DBGWVR0_EL1"));
        assert_eq!(SysReg::new(2, 0, 0, 3, 7).to_string(), "DBGWCR3_EL1");
        assert_eq!(sysregs::OSLAR_EL1.name(), Some("OSLAR_EL1"));
        assert_eq!(SysReg::new(3, 0, 15, 0, 0).name(), None);
        assert_eq!(SysReg::new(3, 0, 15, 0, 0).to_string(), "S3_0_C15_C0_0");
        let mut names: Vec<_> = sysregs::NAMED.iter().map(|(_, name)| *name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), sysregs::NAMED.len(), "duplicate names");
        let mut encodings: Vec<_> = sysregs::NAMED.iter().map(|(reg, _)| *reg).collect();
        encodings.sort_unstable_by_key(|r| (r.op0, r.op1, r.crn, r.crm, r.op2));
        encodings.dedup();
        assert_eq!(encodings.len(), sysregs::NAMED.len(), "duplicate encodings");
        assert_eq!(format!("{}", Esr(0x5a00_0000).class()), "HVC");
    }
}
