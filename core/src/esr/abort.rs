//! Data and instruction abort syndromes and the names of their fault status codes (Arm ARM D17.2.37).

/// The name of a data or instruction fault status code, DFSC/IFSC (Arm ARM D17.2.37,
/// "DFSC, bits \[5:0\]"), e.g. `translation fault level 1`: a kind and, for most codes, the
/// translation table level (a kind and a level rather than a string per code: a table of 44
/// names was about 2 KB of Keel's image).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultStatus {
    /// What kind of fault, e.g. `"translation fault"`.
    pub kind: &'static str,
    /// The level of the translation table walk it happened at, -1 to 3, if it has one.
    pub level: Option<i8>,
}

/// A kind of fault a status code names.
#[derive(Clone, Copy)]
enum Kind {
    AddressSize,
    Translation,
    AccessFlag,
    Permission,
    External,
    TagCheck,
    ExternalWalk,
    Parity,
    ParityWalk,
    Alignment,
    GranuleWalk,
    Granule,
    TlbConflict,
    UnsupportedAtomic,
    Lockdown,
    UnsupportedExclusive,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::AddressSize => "address size fault",
            Kind::Translation => "translation fault",
            Kind::AccessFlag => "access flag fault",
            Kind::Permission => "permission fault",
            Kind::External => "synchronous external abort",
            Kind::TagCheck => "synchronous tag check fault",
            Kind::ExternalWalk => "synchronous external abort on table walk",
            Kind::Parity => "synchronous parity or ECC error",
            Kind::ParityWalk => "synchronous parity or ECC error on table walk",
            Kind::Alignment => "alignment fault",
            Kind::GranuleWalk => "granule protection fault on table walk",
            Kind::Granule => "granule protection fault",
            Kind::TlbConflict => "TLB conflict abort",
            Kind::UnsupportedAtomic => "unsupported atomic hardware update fault",
            Kind::Lockdown => "implementation defined fault (lockdown)",
            Kind::UnsupportedExclusive => {
                "implementation defined fault (unsupported exclusive or atomic access)"
            }
        }
    }
}

/// Where a code's translation table level comes from.
#[derive(Clone, Copy)]
enum Level {
    /// It has none.
    None,
    /// Levels 0 to 3: the code's two low bits.
    LowBits,
    /// Level -1 (a code of its own).
    MinusOne,
}

/// The codes that name a fault, as `(first, last, kind, level)` ranges (a table of a few
/// bytes per range rather than a branch per code); any other code is reserved.
const CODES: [(u8, u8, Kind, Level); 21] = [
    (0x00, 0x03, Kind::AddressSize, Level::LowBits),
    (0x04, 0x07, Kind::Translation, Level::LowBits),
    (0x08, 0x0b, Kind::AccessFlag, Level::LowBits),
    (0x0c, 0x0f, Kind::Permission, Level::LowBits),
    (0x10, 0x10, Kind::External, Level::None),
    (0x11, 0x11, Kind::TagCheck, Level::None),
    (0x13, 0x13, Kind::ExternalWalk, Level::MinusOne),
    (0x14, 0x17, Kind::ExternalWalk, Level::LowBits),
    (0x18, 0x18, Kind::Parity, Level::None),
    (0x1b, 0x1b, Kind::ParityWalk, Level::MinusOne),
    (0x1c, 0x1f, Kind::ParityWalk, Level::LowBits),
    (0x21, 0x21, Kind::Alignment, Level::None),
    (0x23, 0x23, Kind::GranuleWalk, Level::MinusOne),
    (0x24, 0x27, Kind::GranuleWalk, Level::LowBits),
    (0x28, 0x28, Kind::Granule, Level::None),
    (0x29, 0x29, Kind::AddressSize, Level::MinusOne),
    (0x2b, 0x2b, Kind::Translation, Level::MinusOne),
    (0x30, 0x30, Kind::TlbConflict, Level::None),
    (0x31, 0x31, Kind::UnsupportedAtomic, Level::None),
    (0x34, 0x34, Kind::Lockdown, Level::None),
    (0x35, 0x35, Kind::UnsupportedExclusive, Level::None),
];

/// The [`FaultStatus`] of DFSC/IFSC `code`.
pub fn fault_status_name(code: u8) -> FaultStatus {
    let found = CODES
        .iter()
        .find(|&&(first, last, ..)| (first..=last).contains(&code));
    let Some(&(_, _, kind, level)) = found else {
        return FaultStatus {
            kind: "reserved fault status code",
            level: None,
        };
    };
    let level = match level {
        Level::None => None,
        Level::LowBits => Some((code & 3) as i8),
        Level::MinusOne => Some(-1),
    };
    FaultStatus {
        kind: kind.name(),
        level,
    }
}

impl crate::text::Show for FaultStatus {
    fn show(&self, out: &mut dyn crate::text::Out) {
        out.put(self.kind);
        match self.level {
            Some(level) if level < 0 => out.put(" level -1"),
            Some(level) => crate::text!(out, " level ", level as u8),
            None => {}
        }
    }
}

impl core::fmt::Display for FaultStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        crate::text::fmt(self, f)
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
    pub fn fault_status_name(&self) -> FaultStatus {
        fault_status_name(self.fault_status)
    }

    /// Whether the DFSC is a permission fault, at any level (0b0011LL).
    pub fn is_permission_fault(&self) -> bool {
        self.fault_status & 0x3c == 0x0c
    }

    /// For a permission fault on the instruction's own data access, whether that access was a
    /// write; `None` for any other abort. It holds with or without an instruction syndrome
    /// (STP, pre- and post-indexed stores, a 16-byte `STR Q`, STXR and the atomics give none):
    /// only ISS\[23:14\] depend on ISV, and WnR (bit \[6\]) is valid for every data abort (Arm
    /// ARM D17.2.37, "ISS encoding for an exception from a Data Abort"). An atomic that reads
    /// and writes reports a write unless a read of the location would itself have faulted, so
    /// through a read-only mapping it is a write too. Left out, as their WnR does not say what
    /// the instruction did: a fault on a stage-1 table walk (S1PTW) and a cache maintenance or
    /// address translation instruction (CM, whose WnR is always 1).
    pub fn permission_fault_write(&self) -> Option<bool> {
        (self.is_permission_fault() && !self.s1ptw && !self.cache_maintenance).then_some(self.write)
    }

    /// The access's bytes as a mask of a register's low bits: `access_size` bytes (a size
    /// outside 1..=8, which no syndrome gives, counts as 8).
    #[inline(always)]
    pub fn access_mask(&self) -> u64 {
        u64::MAX >> (64 - 8 * u32::from(self.access_size.clamp(1, 8)))
    }

    /// The value a load with this syndrome leaves in its transfer register, `device` being what
    /// the device returned (only its low `access_size` bytes count): zero-extended, or with SSE
    /// sign-extended to the register's width (SF: X or W register, whose upper half is then
    /// clear).
    #[inline(always)]
    pub fn loaded_value(&self, device: u64) -> u64 {
        let mask = self.access_mask();
        let value = device & mask;
        // The access's top bit, set: its bytes extend with ones (to 64 bits, or to 32 for a W
        // register); a 64-bit access has nothing to extend.
        if self.sign_extend && value & !(mask >> 1) != 0 {
            let extended = value | !mask;
            if self.sixty_four || mask == u64::MAX {
                extended
            } else {
                extended & 0xffff_ffff
            }
        } else {
            value
        }
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
    pub fn fault_status_name(&self) -> FaultStatus {
        fault_status_name(self.fault_status)
    }
}

#[cfg(test)]
mod tests {
    /// Reference for [`DataAbort::loaded_value`]: LDR/LDRB/LDRH (zero-extend) and
    /// LDRSB/LDRSH/LDRSW (sign-extend to W or X), written out per size.
    fn loaded_reference(size: u8, sign: bool, sixty_four: bool, device: u64) -> u64 {
        let wide: i64 = match (size, sign) {
            (1, true) => i64::from(device as u8 as i8),
            (2, true) => i64::from(device as u16 as i16),
            (4, true) => i64::from(device as u32 as i32),
            (1, false) => i64::from(device as u8),
            (2, false) => i64::from(device as u16),
            (4, false) => i64::from(device as u32),
            _ => device as i64,
        };
        if sixty_four || size == 8 {
            wide as u64
        } else {
            wide as u64 & 0xffff_ffff
        }
    }

    #[test]
    fn loads_are_extended_as_the_instruction_says() {
        let values = [
            0,
            0x7f,
            0x80,
            0xff,
            0x7fff,
            0x8000,
            0xffff_ffff,
            0x8000_0000,
            0x1234_5678_9abc_def0,
            0xffff_ffff_ffff_ff80,
            u64::MAX,
        ];
        for size in [1u8, 2, 4, 8] {
            for sign in [false, true] {
                for sixty_four in [false, true] {
                    let abort = DataAbort {
                        isv: true,
                        access_size: size,
                        sign_extend: sign,
                        register: 0,
                        sixty_four,
                        acquire_release: false,
                        far_not_valid: false,
                        external_abort: false,
                        cache_maintenance: false,
                        s1ptw: false,
                        write: false,
                        fault_status: 0,
                    };
                    for &device in &values {
                        assert_eq!(
                            abort.loaded_value(device),
                            loaded_reference(size, sign, sixty_four, device),
                            "size {size}, SSE {sign}, SF {sixty_four}, device {device:#x}"
                        );
                    }
                }
            }
        }
    }

    extern crate std;

    use super::*;
    use crate::esr::tests::{oracle_field, xorshift, IL};
    use crate::esr::Esr;
    use aarch64_esr_decoder::{decode, DecodeError};
    use std::string::ToString;

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
                        abort.fault_status_name().to_string(),
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
            let dfsc = fields
                .iter()
                .find(|f| f.name == "ISS")
                .and_then(|iss| iss.subfields.iter().find(|f| f.name == "DFSC"))
                .and_then(|dfsc| dfsc.description.clone())
                .unwrap_or_default();
            assert_eq!(
                abort.is_permission_fault(),
                dfsc.to_lowercase().starts_with("permission fault"),
                "{dfsc}"
            );
            assert_eq!(
                Esr(value).il(),
                fields.iter().any(|f| f.name == "IL" && f.value == 1)
            );
            compared += 1;
        }
        assert!(compared > 1000);
    }

    /// ESR_EL2 of a data abort from EL1 (EC 0x24, IL) with `iss`.
    fn lower_data_abort(iss: u64) -> DataAbort {
        Esr(0x24 << 26 | IL | iss).data_abort().unwrap()
    }

    const WNR: u64 = 1 << 6;
    const CM: u64 = 1 << 8;
    const S1PTW: u64 = 1 << 7;
    const ISV_4_BYTE_STORE: u64 = 1 << 24 | 2 << 22 | 1 << 16;

    #[test]
    fn a_permission_fault_without_syndrome_tells_a_write_from_a_read() {
        for level in 0..4 {
            let permission = 0x0c | level;
            // STP, STR with writeback, STR Q, STXR, SWP into a read-only page: ISV = 0, WnR = 1.
            let store = lower_data_abort(WNR | permission);
            assert!(!store.isv);
            assert!(store.is_permission_fault());
            assert_eq!(store.permission_fault_write(), Some(true), "level {level}");
            // LDP from a page that may not be read.
            let load = lower_data_abort(permission);
            assert_eq!(load.permission_fault_write(), Some(false), "level {level}");
        }
        // What QEMU (cortex-a72 and a76) gives for STP, STR with writeback, STR Q, STXR and
        // SWP into a read-only channel window: EC 0x24, IL, ISV 0, WnR, permission fault level 3.
        let seen = Esr(0x9200_004f).data_abort().unwrap();
        assert_eq!(
            (seen.isv, seen.permission_fault_write()),
            (false, Some(true))
        );
        // With a syndrome the answer is the same.
        let store = lower_data_abort(ISV_4_BYTE_STORE | WNR | 0x0f);
        assert_eq!(store.permission_fault_write(), Some(true));
    }

    #[test]
    fn only_the_instructions_own_permission_faults_say_write() {
        // Translation, access flag, address size and alignment faults: no answer.
        for fault_status in [0x07, 0x0b, 0x03, 0x21, 0x10] {
            let abort = lower_data_abort(WNR | fault_status);
            assert!(!abort.is_permission_fault(), "{fault_status:#x}");
            assert_eq!(abort.permission_fault_write(), None, "{fault_status:#x}");
        }
        // A stage-1 table walk's access, or cache maintenance (WnR always 1): no answer.
        assert_eq!(
            lower_data_abort(S1PTW | WNR | 0x0f).permission_fault_write(),
            None
        );
        assert_eq!(
            lower_data_abort(CM | WNR | 0x0f).permission_fault_write(),
            None
        );
    }

    /// The fault status names agree with the oracle on which codes exist and at which level.
    #[test]
    fn fault_status_names_match_oracle() {
        for code in 0..64u8 {
            let mine = fault_status_name(code).to_string().to_lowercase();
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
}
