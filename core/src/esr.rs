//! Decoding of ESR_EL2 exception syndromes (Arm ARM DDI 0487, D17.2.37 ESR_ELx) into typed traps.
//!
//! The hypervisor reads ESR_EL2 on every synchronous exception from a guest and hands
//! the raw value to [`Esr`]; everything here is pure bit decoding, tested on the host
//! against the `aarch64-esr-decoder` crate.

use core::fmt;

/// A raw ESR_EL2 value (Arm ARM D17.2.37).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Esr(pub u64);

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
    (0x16, ExceptionClass::Hvc64, "HVC"),
    (0x17, ExceptionClass::Smc64, "SMC"),
    (0x18, ExceptionClass::SysReg64, "trapped system register access"),
    (0x19, ExceptionClass::SveAccess, "trapped SVE access"),
    (0x1a, ExceptionClass::Eret, "trapped ERET"),
    (0x1c, ExceptionClass::PointerAuthFailure, "pointer authentication failure"),
    (0x20, ExceptionClass::InstructionAbortLower, "instruction abort from lower EL"),
    (0x21, ExceptionClass::InstructionAbortSame, "instruction abort from same EL"),
    (0x22, ExceptionClass::PcAlignment, "PC alignment fault"),
    (0x24, ExceptionClass::DataAbortLower, "data abort from lower EL"),
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
            class => CLASSES
                .iter()
                .find(|(_, named, _)| *named == class)
                .map_or(0, |&(code, _, _)| code),
        }
    }

    /// A short human description, e.g. `"data abort from lower EL"`.
    pub fn description(&self) -> &'static str {
        match *self {
            Self::Other(_) => "reserved exception class",
            class => CLASSES
                .iter()
                .find(|(_, named, _)| *named == class)
                .map_or("reserved exception class", |&(_, _, text)| text),
        }
    }
}

impl fmt::Display for ExceptionClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Other(ec) => write!(f, "reserved exception class {ec:#04x}"),
            class => f.write_str(class.description()),
        }
    }
}

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
    pub fn ec(&self) -> u8 {
        bits(self.0, 26, 6) as u8
    }

    /// The decoded exception class.
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
    pub fn iss(&self) -> u32 {
        bits(self.0, 0, 25) as u32
    }

    /// ESR_ELx.ISS2, bits \[55:32\] (FEAT_LS64 and later extensions).
    pub fn iss2(&self) -> u32 {
        bits(self.0, 32, 24) as u32
    }

    /// The data abort syndrome for EC 0x24/0x25 (Arm ARM D17.2.37, "ISS encoding for an
    /// exception from a Data Abort").
    pub fn data_abort(&self) -> Option<DataAbort> {
        if !matches!(
            self.class(),
            ExceptionClass::DataAbortLower | ExceptionClass::DataAbortSame
        ) {
            return None;
        }
        let iss = u64::from(self.iss());
        Some(DataAbort {
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
        })
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

/// Writes a general-purpose register name, `x0`..`x30` or `xzr` for 31.
fn write_register(f: &mut fmt::Formatter<'_>, register: u8) -> fmt::Result {
    if register == 31 {
        f.write_str("xzr")
    } else {
        write!(f, "x{register}")
    }
}

impl fmt::Display for Esr {
    /// A short description, e.g. `data abort from lower EL: write, 4 bytes, x1,
    /// translation fault level 2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let class = self.class();
        if let Some(abort) = self.data_abort() {
            write!(
                f,
                "{class}: {}, ",
                if abort.write { "write" } else { "read" }
            )?;
            if abort.isv {
                write!(f, "{} bytes, ", abort.access_size)?;
                write_register(f, abort.register)?;
                f.write_str(", ")?;
            } else {
                f.write_str("no syndrome, ")?;
            }
            f.write_str(abort.fault_status_name())?;
            if abort.s1ptw {
                f.write_str(", on stage-1 table walk")?;
            }
            Ok(())
        } else if let Some(abort) = self.instruction_abort() {
            write!(f, "{class}: {}", abort.fault_status_name())?;
            if abort.s1ptw {
                f.write_str(", on stage-1 table walk")?;
            }
            Ok(())
        } else if let Some(access) = self.sysreg() {
            if access.read {
                f.write_str("trapped MRS ")?;
                write_register(f, access.register)?;
                write!(f, ", {}", access.reg)
            } else {
                write!(f, "trapped MSR {}, ", access.reg)?;
                write_register(f, access.register)
            }
        } else if let Some(imm) = self.hvc_imm().or(self.smc_imm()) {
            write!(f, "{class} #{imm:#x}")
        } else if let Some(wfe) = self.wfx() {
            let timeout = if bit(self.0, 1) { "T" } else { "" };
            write!(f, "trapped {}{timeout}", if wfe { "WFE" } else { "WFI" })
        } else {
            write!(f, "{class} (ISS {:#x})", self.iss())
        }
    }
}

/// The name of a data or instruction fault status code, DFSC/IFSC (Arm ARM D17.2.37,
/// "DFSC, bits \[5:0\]"), e.g. `"translation fault level 1"`.
pub fn fault_status_name(code: u8) -> &'static str {
    match code {
        0x00 => "address size fault level 0",
        0x01 => "address size fault level 1",
        0x02 => "address size fault level 2",
        0x03 => "address size fault level 3",
        0x04 => "translation fault level 0",
        0x05 => "translation fault level 1",
        0x06 => "translation fault level 2",
        0x07 => "translation fault level 3",
        0x08 => "access flag fault level 0",
        0x09 => "access flag fault level 1",
        0x0a => "access flag fault level 2",
        0x0b => "access flag fault level 3",
        0x0c => "permission fault level 0",
        0x0d => "permission fault level 1",
        0x0e => "permission fault level 2",
        0x0f => "permission fault level 3",
        0x10 => "synchronous external abort",
        0x11 => "synchronous tag check fault",
        0x13 => "synchronous external abort on table walk level -1",
        0x14 => "synchronous external abort on table walk level 0",
        0x15 => "synchronous external abort on table walk level 1",
        0x16 => "synchronous external abort on table walk level 2",
        0x17 => "synchronous external abort on table walk level 3",
        0x18 => "synchronous parity or ECC error",
        0x1b => "synchronous parity or ECC error on table walk level -1",
        0x1c => "synchronous parity or ECC error on table walk level 0",
        0x1d => "synchronous parity or ECC error on table walk level 1",
        0x1e => "synchronous parity or ECC error on table walk level 2",
        0x1f => "synchronous parity or ECC error on table walk level 3",
        0x21 => "alignment fault",
        0x23 => "granule protection fault on table walk level -1",
        0x24 => "granule protection fault on table walk level 0",
        0x25 => "granule protection fault on table walk level 1",
        0x26 => "granule protection fault on table walk level 2",
        0x27 => "granule protection fault on table walk level 3",
        0x28 => "granule protection fault",
        0x29 => "address size fault level -1",
        0x2b => "translation fault level -1",
        0x30 => "TLB conflict abort",
        0x31 => "unsupported atomic hardware update fault",
        0x34 => "implementation defined fault (lockdown)",
        0x35 => "implementation defined fault (unsupported exclusive or atomic access)",
        _ => "reserved fault status code",
    }
}

/// The ISS of a data abort, EC 0x24/0x25 (Arm ARM D17.2.37, "ISS encoding for an
/// exception from a Data Abort"). `access_size`, `sign_extend`, `register`,
/// `sixty_four` and `acquire_release` are meaningful only when `isv` is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataAbort {
    /// ISV, bit \[24\]: bits \[23:14\] hold a valid instruction syndrome.
    pub isv: bool,
    /// SAS, bits \[23:22\], as bytes: 1, 2, 4 or 8.
    pub access_size: u8,
    /// SSE, bit \[21\]: the loaded value must be sign-extended.
    pub sign_extend: bool,
    /// SRT, bits \[20:16\]: the transfer register, 31 meaning xzr/wzr.
    pub register: u8,
    /// SF, bit \[15\]: the transfer register is 64 bits wide (Xn rather than Wn).
    pub sixty_four: bool,
    /// AR, bit \[14\]: acquire/release semantics.
    pub acquire_release: bool,
    /// FnV, bit \[10\]: FAR_EL2 is not valid.
    pub far_not_valid: bool,
    /// EA, bit \[9\]: external abort type (implementation defined).
    pub external_abort: bool,
    /// CM, bit \[8\]: the fault came from a cache maintenance or address translation instruction.
    pub cache_maintenance: bool,
    /// S1PTW, bit \[7\]: stage-2 fault on a stage-1 translation table walk.
    pub s1ptw: bool,
    /// WnR, bit \[6\]: the access was a write.
    pub write: bool,
    /// DFSC, bits \[5:0\]: the data fault status code.
    pub fault_status: u8,
}

impl DataAbort {
    /// The DFSC's name, e.g. `"translation fault level 1"` (see [`fault_status_name`]).
    pub fn fault_status_name(&self) -> &'static str {
        fault_status_name(self.fault_status)
    }
}

/// The ISS of an instruction abort, EC 0x20/0x21 (Arm ARM D17.2.37, "ISS encoding for an
/// exception from an Instruction Abort").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InstructionAbort {
    /// FnV, bit \[10\]: FAR_EL2 is not valid.
    pub far_not_valid: bool,
    /// EA, bit \[9\]: external abort type (implementation defined).
    pub external_abort: bool,
    /// S1PTW, bit \[7\]: stage-2 fault on a stage-1 translation table walk.
    pub s1ptw: bool,
    /// IFSC, bits \[5:0\]: the instruction fault status code.
    pub fault_status: u8,
}

impl InstructionAbort {
    /// The IFSC's name (see [`fault_status_name`]).
    pub fn fault_status_name(&self) -> &'static str {
        fault_status_name(self.fault_status)
    }
}

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

impl fmt::Display for SysReg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(
                f,
                "S{}_{}_C{}_C{}_{}",
                self.op0, self.op1, self.crn, self.crm, self.op2
            ),
        }
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

/// Encodings of the system registers and instructions a hypervisor traps or reports
/// (Arm ARM D19 and the GICv3 specification, 12.2), with their names.
pub mod sysregs {
    use super::SysReg;

    macro_rules! sysregs {
        ($($(#[$doc:meta])* $name:ident = ($op0:expr, $op1:expr, $crn:expr, $crm:expr, $op2:expr), $text:expr;)*) => {
            $($(#[$doc])* pub const $name: SysReg = SysReg::new($op0, $op1, $crn, $crm, $op2);)*
            /// Every register above with its name, for [`SysReg::name`].
            pub(super) const NAMED: &[(SysReg, &str)] = &[$(($name, $text)),*];
        };
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
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use aarch64_esr_decoder::{decode, DecodeError, FieldInfo};
    use std::format;
    use std::string::{String, ToString};
    use std::vec::Vec;

    /// The value of `ISS.<name>` in the oracle's decoding.
    fn oracle_field(fields: &[FieldInfo], name: &str) -> Option<u64> {
        let iss = fields.iter().find(|f| f.name == "ISS")?;
        iss.subfields
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.value)
    }

    /// Deterministic xorshift64 stream.
    fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    const IL: u64 = 1 << 25;

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
            e.data_abort().unwrap().fault_status_name(),
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

    #[test]
    fn data_aborts_match_oracle() {
        let mut random = xorshift(0x2545_f491_4f6c_dd1d);
        let mut compared = 0;
        for _ in 0..5000 {
            let ec = if random().is_multiple_of(2) {
                0x24
            } else {
                0x25
            };
            let mut iss = random() & 0x1ff_ffff;
            if iss & (1 << 24) == 0 {
                iss &= !(0x3ff << 14); // RES0 without ISV
            }
            let value = ec << 26 | (random() & IL) | iss;
            let abort = Esr(value).data_abort().unwrap();
            let fields = match decode(value) {
                Ok(fields) => fields,
                Err(DecodeError::InvalidFsc { fsc }) => {
                    assert_eq!(
                        abort.fault_status_name(),
                        "reserved fault status code",
                        "{fsc:#x}"
                    );
                    continue;
                }
                Err(_) => continue,
            };
            let field = |name| oracle_field(&fields, name).unwrap();
            assert_eq!(abort.isv, field("ISV") == 1);
            if abort.isv {
                assert_eq!(u64::from(abort.access_size), 1 << field("SAS"));
                assert_eq!(abort.sign_extend, field("SSE") == 1);
                assert_eq!(u64::from(abort.register), field("SRT"));
                assert_eq!(abort.sixty_four, field("SF") == 1);
                assert_eq!(abort.acquire_release, field("AR") == 1);
            }
            assert_eq!(abort.far_not_valid, field("FnV") == 1);
            assert_eq!(abort.external_abort, field("EA") == 1);
            assert_eq!(abort.cache_maintenance, field("CM") == 1);
            assert_eq!(abort.s1ptw, field("S1PTW") == 1);
            assert_eq!(abort.write, field("WnR") == 1);
            assert_eq!(u64::from(abort.fault_status), field("DFSC"));
            assert_eq!(
                Esr(value).il(),
                fields.iter().any(|f| f.name == "IL" && f.value == 1)
            );
            compared += 1;
        }
        assert!(compared > 1000);
    }

    /// The fault status names agree with the oracle on which codes exist and at which level.
    #[test]
    fn fault_status_names_match_oracle() {
        for code in 0..64u8 {
            let mine = fault_status_name(code).to_lowercase();
            let value = 0x24 << 26 | u64::from(code);
            match decode(value) {
                Err(DecodeError::InvalidFsc { .. }) => {
                    assert_eq!(mine, "reserved fault status code", "DFSC {code:#x}");
                }
                Ok(fields) => {
                    let iss = fields.iter().find(|f| f.name == "ISS").unwrap();
                    let dfsc = iss.subfields.iter().find(|f| f.name == "DFSC").unwrap();
                    let theirs = dfsc.description.clone().unwrap().to_lowercase();
                    let level = |text: &str| {
                        text.split("level ")
                            .nth(1)
                            .and_then(|l| l.split_whitespace().next())
                            .map(|l| l.trim_end_matches('.').to_string())
                    };
                    assert_eq!(
                        level(&mine),
                        level(&theirs),
                        "DFSC {code:#x}: {mine} / {theirs}"
                    );
                    let first_word = mine.split(' ').next().unwrap();
                    assert!(
                        theirs.starts_with(first_word),
                        "DFSC {code:#x}: {mine} / {theirs}"
                    );
                }
                Err(error) => panic!("DFSC {code:#x}: {error}"),
            }
        }
    }

    /// The oracle's rendering of a trapped system register access, e.g. `MRS x3, NAME`.
    fn oracle_sysreg_text(value: u64) -> String {
        let fields = decode(value).unwrap();
        let iss = fields.iter().find(|f| f.name == "ISS").unwrap();
        iss.description.clone().unwrap()
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
