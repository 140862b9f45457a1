//! The raw ESR_EL2 value: its fields, the syndrome decoded per class, and its description.

use core::fmt;

use super::{DataAbort, ExceptionClass, InstructionAbort, SysReg, SysRegAccess};
use crate::text::{Hex, Out, Show};

/// A raw ESR_EL2 value (Arm ARM D17.2.37).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Esr(pub u64);

/// Extracts `width` bits of `value` starting at bit `low`.
const fn bits(value: u64, low: u32, width: u32) -> u64 {
    (value >> low) & ((1 << width) - 1)
}

/// Whether bit `bit` of `value` is set.
const fn bit(value: u64, bit: u32) -> bool {
    (value >> bit) & 1 != 0
}

impl Esr {
    /// ESR_ELx.EC, bits \[31:26\].
    #[inline(always)]
    pub fn ec(&self) -> u8 {
        bits(self.0, 26, 6) as u8
    }

    /// The decoded exception class.
    #[inline(always)]
    pub fn class(&self) -> ExceptionClass {
        ExceptionClass::from_code(self.ec())
    }

    /// ESR_ELx.IL, bit \[25\]: the trapped instruction was 32 bits long (not 16-bit T32).
    pub fn il(&self) -> bool {
        bit(self.0, 25)
    }

    /// The length in bytes of the trapped instruction, for skipping it (2 or 4).
    pub fn instruction_length(&self) -> u64 {
        if self.il() {
            4
        } else {
            2
        }
    }

    /// ESR_ELx.ISS, bits \[24:0\].
    #[inline(always)]
    pub fn iss(&self) -> u32 {
        bits(self.0, 0, 25) as u32
    }

    /// ESR_ELx.ISS2, bits \[55:32\] (FEAT_LS64 and later extensions).
    pub fn iss2(&self) -> u32 {
        bits(self.0, 32, 24) as u32
    }

    /// The data abort syndrome for EC 0x24/0x25 (Arm ARM D17.2.37, "ISS encoding for an
    /// exception from a Data Abort").
    #[inline(always)]
    pub fn data_abort(&self) -> Option<DataAbort> {
        if !matches!(
            self.class(),
            ExceptionClass::DataAbortLower | ExceptionClass::DataAbortSame
        ) {
            return None;
        }
        Some(self.data_abort_syndrome())
    }

    /// The data abort syndrome of an ESR the caller knows is EC 0x24/0x25 (the trap dispatcher,
    /// which tested the class already); for any other class, its ISS read as one.
    #[inline(always)]
    pub fn data_abort_syndrome(&self) -> DataAbort {
        let iss = u64::from(self.iss());
        DataAbort {
            isv: bit(iss, 24),
            access_size: 1 << bits(iss, 22, 2),
            sign_extend: bit(iss, 21),
            register: bits(iss, 16, 5) as u8,
            sixty_four: bit(iss, 15),
            acquire_release: bit(iss, 14),
            far_not_valid: bit(iss, 10),
            external_abort: bit(iss, 9),
            cache_maintenance: bit(iss, 8),
            s1ptw: bit(iss, 7),
            write: bit(iss, 6),
            fault_status: bits(iss, 0, 6) as u8,
        }
    }

    /// The instruction abort syndrome for EC 0x20/0x21 (Arm ARM D17.2.37, "ISS encoding
    /// for an exception from an Instruction Abort").
    pub fn instruction_abort(&self) -> Option<InstructionAbort> {
        if !matches!(
            self.class(),
            ExceptionClass::InstructionAbortLower | ExceptionClass::InstructionAbortSame
        ) {
            return None;
        }
        let iss = u64::from(self.iss());
        Some(InstructionAbort {
            far_not_valid: bit(iss, 10),
            external_abort: bit(iss, 9),
            s1ptw: bit(iss, 7),
            fault_status: bits(iss, 0, 6) as u8,
        })
    }

    /// The trapped MSR/MRS/system instruction for EC 0x18 (Arm ARM D17.2.37, "ISS encoding
    /// for an exception from MSR, MRS, or System instruction execution in AArch64 state").
    #[inline(always)]
    pub fn sysreg(&self) -> Option<SysRegAccess> {
        if self.class() != ExceptionClass::SysReg64 {
            return None;
        }
        let iss = u64::from(self.iss());
        Some(SysRegAccess {
            reg: SysReg {
                op0: bits(iss, 20, 2) as u8,
                op2: bits(iss, 17, 3) as u8,
                op1: bits(iss, 14, 3) as u8,
                crn: bits(iss, 10, 4) as u8,
                crm: bits(iss, 1, 4) as u8,
            },
            register: bits(iss, 5, 5) as u8,
            read: bit(iss, 0),
        })
    }

    /// For a trapped MSR of `reg` (EC 0x18 with Direction 0, a write), its source register Rt;
    /// `None` for any other syndrome. The same fields as [`Esr::sysreg`] compared with one mask,
    /// for the hot traps the dispatcher decides before the full decode.
    #[inline(always)]
    pub fn sysreg_write_of(&self, reg: SysReg) -> Option<u8> {
        const SYSREG64: u64 = 0x18;
        // EC, Op0, Op2, Op1, CRn, CRm and Direction; Rt (bits [9:5]) is the answer.
        let mask: u64 = 0x3f << 26 | 0x3 << 20 | 0x7 << 17 | 0x7 << 14 | 0xf << 10 | 0xf << 1 | 1;
        let value = SYSREG64 << 26
            | u64::from(reg.op0) << 20
            | u64::from(reg.op2) << 17
            | u64::from(reg.op1) << 14
            | u64::from(reg.crn) << 10
            | u64::from(reg.crm) << 1;
        (self.0 & mask == value).then_some(bits(self.0, 5, 5) as u8)
    }

    /// The immediate of an AArch64 HVC, EC 0x16 (Arm ARM D17.2.37, "ISS encoding for an
    /// exception from HVC or SVC instruction execution").
    pub fn hvc_imm(&self) -> Option<u16> {
        (self.class() == ExceptionClass::Hvc64).then_some(bits(self.0, 0, 16) as u16)
    }

    /// The immediate of a trapped AArch64 SMC, EC 0x17 (Arm ARM D17.2.37, "ISS encoding
    /// for an exception from SMC instruction execution in AArch64 state").
    pub fn smc_imm(&self) -> Option<u16> {
        (self.class() == ExceptionClass::Smc64).then_some(bits(self.0, 0, 16) as u16)
    }

    /// For EC 0x01, whether the trapped instruction was WFE or WFET (`true`) rather than
    /// WFI or WFIT (`false`) (Arm ARM D17.2.37, "ISS encoding for an exception from a
    /// WF* instruction", TI bits \[1:0\]).
    pub fn wfx(&self) -> Option<bool> {
        (self.class() == ExceptionClass::WfiWfe).then_some(bit(self.0, 0))
    }
}

/// Shows a general-purpose register name, `x0`..`x30` or `xzr` for 31.
fn show_register(out: &mut dyn Out, register: u8) {
    if register == 31 {
        out.put("xzr");
    } else {
        crate::text!(out, "x", register);
    }
}

impl Show for Esr {
    /// A short description, e.g. `data abort from lower EL: write, 4 bytes, x1,
    /// translation fault level 2`.
    fn show(&self, out: &mut dyn Out) {
        let class = self.class();
        if let Some(abort) = self.data_abort() {
            let direction = if abort.write { "write" } else { "read" };
            crate::text!(out, class, ": ", direction, ", ");
            if abort.isv {
                crate::text!(out, abort.access_size, " bytes, ");
                show_register(out, abort.register);
                out.put(", ");
            } else {
                out.put("no syndrome, ");
            }
            abort.fault_status_name().show(out);
            if abort.s1ptw {
                out.put(", on stage-1 table walk");
            }
        } else if let Some(abort) = self.instruction_abort() {
            crate::text!(out, class, ": ", abort.fault_status_name());
            if abort.s1ptw {
                out.put(", on stage-1 table walk");
            }
        } else if let Some(access) = self.sysreg() {
            if access.read {
                out.put("trapped MRS ");
                show_register(out, access.register);
                crate::text!(out, ", ", access.reg);
            } else {
                crate::text!(out, "trapped MSR ", access.reg, ", ");
                show_register(out, access.register);
            }
        } else if let Some(imm) = self.hvc_imm().or(self.smc_imm()) {
            crate::text!(out, class, " #", Hex(u64::from(imm), 0));
        } else if let Some(wfe) = self.wfx() {
            let timeout = if bit(self.0, 1) { "T" } else { "" };
            crate::text!(out, "trapped ", if wfe { "WFE" } else { "WFI" }, timeout);
        } else {
            crate::text!(out, class, " (ISS ", Hex(u64::from(self.iss()), 0), ")");
        }
    }
}

impl fmt::Display for Esr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::text::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::esr::sysregs;
    use crate::esr::tests::IL;
    use std::string::ToString;

    fn esr(ec: u64, iss: u64) -> Esr {
        Esr(ec << 26 | IL | iss)
    }

    #[test]
    fn decodes_known_data_aborts() {
        // LDR x0, [x?] with ISV from a lower EL: 8 bytes, 64-bit, translation fault level 3.
        let e = Esr(0x93c0_8007);
        assert_eq!(e.class(), ExceptionClass::DataAbortLower);
        assert!(e.il());
        let abort = e.data_abort().unwrap();
        assert_eq!(
            abort,
            DataAbort {
                isv: true,
                access_size: 8,
                sign_extend: false,
                register: 0,
                sixty_four: true,
                acquire_release: false,
                far_not_valid: false,
                external_abort: false,
                cache_maintenance: false,
                s1ptw: false,
                write: false,
                fault_status: 7,
            }
        );
        assert_eq!(
            e.to_string(),
            "data abort from lower EL: read, 8 bytes, x0, translation fault level 3"
        );
        // STR w1, [..]: ISV, SAS = word, SRT = 1, WnR, DFSC = translation fault level 2.
        let e = Esr(0x9381_0046);
        assert_eq!(
            e.to_string(),
            "data abort from lower EL: write, 4 bytes, x1, translation fault level 2"
        );
        assert_eq!(
            e.data_abort().unwrap().fault_status_name().to_string(),
            "translation fault level 2"
        );
        // No syndrome, permission fault on a stage-1 walk.
        let e = esr(0x24, 0x8f);
        assert_eq!(
            e.to_string(),
            "data abort from lower EL: read, no syndrome, permission fault level 3, \
             on stage-1 table walk"
        );
        assert_eq!(Esr(0x5a00_0000).data_abort(), None);
    }

    #[test]
    fn decodes_other_classes() {
        assert_eq!(Esr(0x5a00_1234).hvc_imm(), Some(0x1234));
        assert_eq!(Esr(0x5a00_1234).to_string(), "HVC #0x1234");
        assert_eq!(Esr(0x5e00_0000).smc_imm(), Some(0));
        assert_eq!(Esr(0x5e00_0000).hvc_imm(), None);
        assert_eq!(Esr(0x0600_0000).wfx(), Some(false));
        assert_eq!(Esr(0x0600_0001).wfx(), Some(true));
        assert_eq!(Esr(0x0600_0003).to_string(), "trapped WFET");
        assert_eq!(Esr(0x5a00_0000).wfx(), None);
        // MSR ICC_SGI1R_EL1, x3.
        let e = Esr(0x623a_3076);
        let access = e.sysreg().unwrap();
        assert_eq!(
            access,
            SysRegAccess {
                reg: sysregs::ICC_SGI1R_EL1,
                register: 3,
                read: false
            }
        );
        assert_eq!(e.to_string(), "trapped MSR ICC_SGI1R_EL1, x3");
        // MRS xzr, S3_0_C15_C0_0.
        let e = esr(0x18, 3 << 20 | 15 << 10 | 31 << 5 | 1);
        assert_eq!(e.to_string(), "trapped MRS xzr, S3_0_C15_C0_0");
        assert_eq!(Esr(0xf200_0800).class(), ExceptionClass::Brk);
        assert_eq!(Esr(0xf200_0800).to_string(), "BRK (ISS 0x800)");
        assert_eq!(
            Esr(0x8200_0006).instruction_abort().unwrap().fault_status,
            6
        );
        assert_eq!(
            Esr(0x8200_0006).to_string(),
            "instruction abort from lower EL: translation fault level 2"
        );
        assert_eq!(Esr(0x0200_0000).class(), ExceptionClass::Unknown);
        assert_eq!(Esr(0x0000_0000).instruction_length(), 2);
        assert_eq!(Esr(0xfc00_0000).class(), ExceptionClass::Other(0x3f));
        assert_eq!(
            Esr(0xfc00_0000).to_string(),
            "reserved exception class 0x3f (ISS 0x0)"
        );
        assert_eq!(Esr(0x0012_3456_0000_0000).iss2(), 0x12_3456);
        assert_eq!(Esr(u64::MAX).iss(), 0x1ff_ffff);
    }
}
