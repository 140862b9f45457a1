//! The exception class, ESR_ELx.EC: its variants, codes and descriptions (Arm ARM D17.2.37).

use super::sysregs::{text_len, Names};

/// The exception class, ESR_ELx.EC (Arm ARM D17.2.37, "EC, bits \[31:26\]").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExceptionClass {
    /// 0x00: unknown reason, e.g. an undefined instruction.
    Unknown,
    /// 0x01: trapped WFI, WFE, WFIT or WFET.
    WfiWfe,
    /// 0x03: trapped AArch32 MCR or MRC to coprocessor 15.
    Cp15McrMrc,
    /// 0x04: trapped AArch32 MCRR or MRRC to coprocessor 15.
    Cp15McrrMrrc,
    /// 0x05: trapped AArch32 MCR or MRC to coprocessor 14.
    Cp14McrMrc,
    /// 0x06: trapped AArch32 LDC or STC.
    Cp14LdcStc,
    /// 0x07: trapped access to SVE, Advanced SIMD or floating point (CPTR_EL2).
    FpAccess,
    /// 0x0A: trapped LD64B, ST64B, ST64BV or ST64BV0.
    Ld64b,
    /// 0x0C: trapped AArch32 MRRC to coprocessor 14.
    Cp14Mrrc,
    /// 0x0D: branch target exception.
    BranchTarget,
    /// 0x0E: illegal execution state.
    IllegalState,
    /// 0x11: SVC in AArch32 state.
    Svc32,
    /// 0x12: HVC in AArch32 state.
    Hvc32,
    /// 0x13: SMC in AArch32 state.
    Smc32,
    /// 0x15: SVC in AArch64 state.
    Svc64,
    /// 0x16: HVC in AArch64 state.
    Hvc64,
    /// 0x17: SMC in AArch64 state (trapped by HCR_EL2.TSC).
    Smc64,
    /// 0x18: trapped MSR, MRS or system instruction in AArch64 state.
    SysReg64,
    /// 0x19: trapped access to SVE functionality.
    SveAccess,
    /// 0x1A: trapped ERET, ERETAA or ERETAB.
    Eret,
    /// 0x1C: pointer authentication failure.
    PointerAuthFailure,
    /// 0x20: instruction abort from a lower exception level (a stage-2 fault for a guest).
    InstructionAbortLower,
    /// 0x21: instruction abort taken without a change of exception level.
    InstructionAbortSame,
    /// 0x22: PC alignment fault.
    PcAlignment,
    /// 0x24: data abort from a lower exception level (a stage-2 fault for a guest).
    DataAbortLower,
    /// 0x25: data abort taken without a change of exception level.
    DataAbortSame,
    /// 0x26: SP alignment fault.
    SpAlignment,
    /// 0x28: trapped floating-point exception from AArch32 state.
    FpException32,
    /// 0x2C: trapped floating-point exception from AArch64 state.
    FpException64,
    /// 0x2F: SError exception.
    SError,
    /// 0x30: breakpoint from a lower exception level.
    BreakpointLower,
    /// 0x31: breakpoint taken without a change of exception level.
    BreakpointSame,
    /// 0x32: software step from a lower exception level.
    SoftwareStepLower,
    /// 0x33: software step taken without a change of exception level.
    SoftwareStepSame,
    /// 0x34: watchpoint from a lower exception level.
    WatchpointLower,
    /// 0x35: watchpoint taken without a change of exception level.
    WatchpointSame,
    /// 0x38: BKPT in AArch32 state.
    Bkpt32,
    /// 0x3C: BRK in AArch64 state.
    Brk,
    /// Any other (reserved or not decoded here) EC value.
    Other(u8),
}

/// Every named class with its EC code; the single source for both directions.
#[rustfmt::skip]
const CLASSES: [(u8, ExceptionClass, &str); 38] = [
    (0x00, ExceptionClass::Unknown, "unknown reason"),
    (0x01, ExceptionClass::WfiWfe, "trapped WFI/WFE"),
    (0x03, ExceptionClass::Cp15McrMrc, "trapped AArch32 MCR/MRC (CP15)"),
    (0x04, ExceptionClass::Cp15McrrMrrc, "trapped AArch32 MCRR/MRRC (CP15)"),
    (0x05, ExceptionClass::Cp14McrMrc, "trapped AArch32 MCR/MRC (CP14)"),
    (0x06, ExceptionClass::Cp14LdcStc, "trapped AArch32 LDC/STC"),
    (0x07, ExceptionClass::FpAccess, "trapped SVE/SIMD/FP access"),
    (0x0a, ExceptionClass::Ld64b, "trapped LD64B/ST64B"),
    (0x0c, ExceptionClass::Cp14Mrrc, "trapped AArch32 MRRC (CP14)"),
    (0x0d, ExceptionClass::BranchTarget, "branch target exception"),
    (0x0e, ExceptionClass::IllegalState, "illegal execution state"),
    (0x11, ExceptionClass::Svc32, "SVC (AArch32)"),
    (0x12, ExceptionClass::Hvc32, "HVC (AArch32)"),
    (0x13, ExceptionClass::Smc32, "SMC (AArch32)"),
    (0x15, ExceptionClass::Svc64, "SVC"),
    (ExceptionClass::HVC64, ExceptionClass::Hvc64, "HVC"),
    (0x17, ExceptionClass::Smc64, "SMC"),
    (0x18, ExceptionClass::SysReg64, "trapped system register access"),
    (0x19, ExceptionClass::SveAccess, "trapped SVE access"),
    (0x1a, ExceptionClass::Eret, "trapped ERET"),
    (0x1c, ExceptionClass::PointerAuthFailure, "pointer authentication failure"),
    (0x20, ExceptionClass::InstructionAbortLower, "instruction abort from lower EL"),
    (0x21, ExceptionClass::InstructionAbortSame, "instruction abort from same EL"),
    (0x22, ExceptionClass::PcAlignment, "PC alignment fault"),
    (ExceptionClass::DATA_ABORT_LOWER, ExceptionClass::DataAbortLower, "data abort from lower EL"),
    (0x25, ExceptionClass::DataAbortSame, "data abort from same EL"),
    (0x26, ExceptionClass::SpAlignment, "SP alignment fault"),
    (0x28, ExceptionClass::FpException32, "floating-point exception (AArch32)"),
    (0x2c, ExceptionClass::FpException64, "floating-point exception"),
    (0x2f, ExceptionClass::SError, "SError"),
    (0x30, ExceptionClass::BreakpointLower, "breakpoint from lower EL"),
    (0x31, ExceptionClass::BreakpointSame, "breakpoint from same EL"),
    (0x32, ExceptionClass::SoftwareStepLower, "software step from lower EL"),
    (0x33, ExceptionClass::SoftwareStepSame, "software step from same EL"),
    (0x34, ExceptionClass::WatchpointLower, "watchpoint from lower EL"),
    (0x35, ExceptionClass::WatchpointSame, "watchpoint from same EL"),
    (0x38, ExceptionClass::Bkpt32, "BKPT (AArch32)"),
    (0x3c, ExceptionClass::Brk, "BRK"),
];

/// [`CLASSES`] without their descriptions, which [`DESCRIPTIONS`] holds in the same order.
static CODES: [(u8, ExceptionClass); CLASSES.len()] = {
    let mut table = [(0, ExceptionClass::Unknown); CLASSES.len()];
    let mut entry = 0;
    while entry < CLASSES.len() {
        table[entry] = (CLASSES[entry].0, CLASSES[entry].1);
        entry += 1;
    }
    table
};

/// The descriptions of [`CLASSES`], one after the other (a `&str` each took 912 bytes of
/// Keel's image with the codes).
static DESCRIPTIONS: Names<{ CLASSES.len() }, { text_len(&descriptions()) }> =
    Names::new(&descriptions());

/// The descriptions of [`CLASSES`], in its order.
const fn descriptions() -> [&'static str; CLASSES.len()] {
    let mut texts = [""; CLASSES.len()];
    let mut entry = 0;
    while entry < CLASSES.len() {
        texts[entry] = CLASSES[entry].2;
        entry += 1;
    }
    texts
}

/// [`CLASSES`] indexed by code, with [`ExceptionClass::Other`] for the reserved codes.
const BY_CODE: [ExceptionClass; 64] = {
    let mut table = [ExceptionClass::Other(0); 64];
    let mut code = 0;
    while code < 64 {
        table[code] = ExceptionClass::Other(code as u8);
        code += 1;
    }
    let mut entry = 0;
    while entry < CLASSES.len() {
        table[CLASSES[entry].0 as usize] = CLASSES[entry].1;
        entry += 1;
    }
    table
};

impl ExceptionClass {
    /// The EC of [`ExceptionClass::Hvc64`], for the trap dispatcher's tests on the raw code
    /// (the class table takes it from here, so the two cannot differ).
    pub const HVC64: u8 = 0x16;
    /// The EC of [`ExceptionClass::DataAbortLower`].
    pub const DATA_ABORT_LOWER: u8 = 0x24;

    /// The class of a 6-bit EC value (Arm ARM D17.2.37).
    pub fn from_code(ec: u8) -> Self {
        // A direct table: this runs on every trap, so no search.
        match BY_CODE.get(usize::from(ec)) {
            Some(&class) => class,
            None => Self::Other(ec),
        }
    }

    /// The EC value of this class.
    pub fn code(&self) -> u8 {
        match *self {
            Self::Other(ec) => ec,
            class => CODES
                .iter()
                .find(|(_, named)| *named == class)
                .map_or(0, |&(code, _)| code),
        }
    }

    /// A short human description, e.g. `"data abort from lower EL"`.
    pub fn description(&self) -> &'static str {
        match *self {
            Self::Other(_) => "reserved exception class",
            class => CODES
                .iter()
                .position(|&(_, named)| named == class)
                .and_then(|entry| DESCRIPTIONS.get(entry))
                .unwrap_or("reserved exception class"),
        }
    }
}

impl crate::text::Show for ExceptionClass {
    fn show(&self, out: &mut dyn crate::text::Out) {
        match *self {
            Self::Other(ec) => crate::text!(
                out,
                "reserved exception class ",
                crate::text::Hex(u64::from(ec), 2)
            ),
            class => out.put(class.description()),
        }
    }
}

impl core::fmt::Display for ExceptionClass {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        crate::text::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::esr::tests::IL;
    use crate::esr::Esr;
    use aarch64_esr_decoder::{decode, DecodeError};

    #[test]
    fn classes_round_trip() {
        for code in 0..64u8 {
            let class = ExceptionClass::from_code(code);
            assert_eq!(class.code(), code);
            assert_eq!(Esr(u64::from(code) << 26).ec(), code);
        }
        for class in [
            ExceptionClass::Unknown,
            ExceptionClass::WfiWfe,
            ExceptionClass::FpAccess,
            ExceptionClass::Svc64,
            ExceptionClass::Hvc64,
            ExceptionClass::Smc64,
            ExceptionClass::SysReg64,
            ExceptionClass::InstructionAbortLower,
            ExceptionClass::InstructionAbortSame,
            ExceptionClass::DataAbortLower,
            ExceptionClass::DataAbortSame,
            ExceptionClass::SError,
            ExceptionClass::Brk,
        ] {
            assert_ne!(class.description(), "reserved exception class");
        }
        assert_eq!(ExceptionClass::Hvc64.code(), ExceptionClass::HVC64);
        assert_eq!(
            ExceptionClass::DataAbortLower.code(),
            ExceptionClass::DATA_ABORT_LOWER
        );
    }

    /// Every EC the oracle knows is a named class here, and vice versa apart from the
    /// AArch32 HVC/SMC and ERET classes it omits.
    #[test]
    fn classes_match_oracle() {
        for code in 0..64u64 {
            let named = !matches!(
                ExceptionClass::from_code(code as u8),
                ExceptionClass::Other(_)
            );
            match decode(code << 26 | IL) {
                Err(DecodeError::InvalidEc { .. }) => {
                    assert!(!named || [0x12, 0x13, 0x1a].contains(&code), "EC {code:#x}");
                }
                _ => assert!(named, "EC {code:#x} is known to the oracle"),
            }
        }
    }
}
