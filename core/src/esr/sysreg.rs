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

/// The debug breakpoint and watchpoint registers by op2 - 4, each numbered by CRm:
/// `DBGBVR<n>_EL1` and friends (Arm ARM D19.3).
const DEBUG_REGISTERS: [&str; 4] = ["DBGBVR", "DBGBCR", "DBGWVR", "DBGWCR"];

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

    /// The encoding in 16 bits: op0 (2 bits), op1 (3), CRn (4), CRm (4), op2 (3).
    pub const fn packed(&self) -> u16 {
        (self.op0 as u16 & 3) << 14
            | (self.op1 as u16 & 7) << 11
            | (self.crn as u16 & 15) << 7
            | (self.crm as u16 & 15) << 3
            | (self.op2 as u16 & 7)
    }

    /// The architectural name, if this encoding is one [`sysregs`] knows (the debug
    /// breakpoint and watchpoint registers are [`SysReg::debug_register`]).
    pub fn name(&self) -> Option<&'static str> {
        let packed = self.packed();
        let index = sysregs::ENCODINGS.iter().position(|&reg| reg == packed)?;
        sysregs::NAMES.get(index)
    }

    /// A debug breakpoint or watchpoint register (op0 = 2, op1 = 0, CRn = 0, op2 = 4..=7):
    /// its kind (`"DBGBVR"` and so on) and number (CRm).
    pub fn debug_register(&self) -> Option<(&'static str, u8)> {
        if (self.op0, self.op1, self.crn) != (2, 0, 0) {
            return None;
        }
        let kind = DEBUG_REGISTERS.get(usize::from(self.op2).checked_sub(4)?)?;
        Some((kind, self.crm))
    }
}

impl crate::text::Show for SysReg {
    fn show(&self, out: &mut dyn crate::text::Out) {
        if let Some(name) = self.name() {
            out.put(name);
        } else if let Some((kind, number)) = self.debug_register() {
            crate::text!(out, kind, number, "_EL1");
        } else {
            // A loop, not one `text!`: the five fields share one call site in the image.
            let fields = [
                ("S", self.op0),
                ("_", self.op1),
                ("_C", self.crn),
                ("_C", self.crm),
                ("_", self.op2),
            ];
            for (prefix, field) in fields {
                crate::text!(out, prefix, field);
            }
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
                            let name = match (reg.name(), reg.debug_register()) {
                                (Some(name), None) => name.to_string(),
                                (None, Some(_)) => reg.to_string(),
                                (None, None) => continue,
                                (Some(_), Some(_)) => panic!("{reg:?} named twice"),
                            };
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
        assert_eq!(named, sysregs::COUNT + 64);
        assert!(confirmed > 80, "only {confirmed} names confirmed");
    }

    #[test]
    fn sysreg_names() {
        assert_eq!(SysReg::new(2, 0, 0, 7, 4).to_string(), "DBGBVR7_EL1");
        assert_eq!(SysReg::new(2, 0, 0, 15, 5).to_string(), "DBGBCR15_EL1");
        assert_eq!(SysReg::new(2, 0, 0, 0, 6).to_string(), "DBGWVR0_EL1");
        assert_eq!(SysReg::new(2, 0, 0, 0, 3).to_string(), "S2_0_C0_C0_3");
        assert_eq!(SysReg::new(2, 0, 0, 3, 7).to_string(), "DBGWCR3_EL1");
        assert_eq!(sysregs::OSLAR_EL1.name(), Some("OSLAR_EL1"));
        assert_eq!(SysReg::new(3, 0, 15, 0, 0).name(), None);
        assert_eq!(SysReg::new(3, 0, 15, 0, 0).to_string(), "S3_0_C15_C0_0");
        assert_eq!(sysregs::NAMES.get(0), Some("ICC_SGI1R_EL1"));
        assert_eq!(sysregs::NAMES.get(sysregs::COUNT - 1), Some("DC CISW"));
        assert_eq!(sysregs::NAMES.get(sysregs::COUNT), None);
        let mut names: Vec<_> = (0..sysregs::COUNT)
            .map(|i| sysregs::NAMES.get(i).unwrap())
            .collect();
        assert!(names.iter().all(|name| !name.is_empty()));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), sysregs::COUNT, "duplicate names");
        let mut encodings = sysregs::ENCODINGS.to_vec();
        encodings.sort_unstable();
        encodings.dedup();
        assert_eq!(encodings.len(), sysregs::COUNT, "duplicate encodings");
        assert_eq!(format!("{}", Esr(0x5a00_0000).class()), "HVC");
    }
}
