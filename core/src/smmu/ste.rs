//! Stream table entries (IHI 0070 5.2), the streams given to VMs and the checks of them (the
//! table that holds the entries is [`super::strtab`]'s).
//!
//! An STE is 64 bytes, eight little-endian doublewords. Keel writes three kinds: abort (every
//! stream of a level-2 array that no VM owns, and a VM's streams while it is cut off:
//! transactions are terminated without an event), bypass (not used for VMs), and stage-1
//! translation through the VM's one context descriptor. Field positions below are bits of their doubleword; the spec numbers STE bits
//! from 0 to 511, so doubleword 1's bit `b` is the spec's bit `64 + b`.

use super::Field;
use crate::text::{Fill, Out, Show};

/// An STE: eight doublewords.
pub type Ste = [u64; 8];

/// Doubleword 0: V, the entry is valid (V = 0 gives C_BAD_STE).
pub const V: u64 = 1 << 0;
/// Doubleword 0: `Config[3:1]`.
pub const CONFIG: Field = Field::new(1, 3);
/// Config: abort, no event.
pub const CONFIG_ABORT: u64 = 0b000;
/// Config: bypass both stages.
pub const CONFIG_BYPASS: u64 = 0b100;
/// Config: stage-1 translation, stage 2 bypassed.
pub const CONFIG_STAGE1: u64 = 0b101;
/// Doubleword 0: `S1Fmt[5:4]`, the CD table's format (ignored with S1CDMax = 0).
pub const S1FMT: Field = Field::new(4, 2);
/// S1Fmt: linear CD table.
pub const S1FMT_LINEAR: u64 = 0b00;
/// Doubleword 0: `S1ContextPtr[55:6]`, the CD's physical address.
pub const S1_CONTEXT_PTR: Field = Field::new(6, 50);
/// Doubleword 0: `S1CDMax[63:59]`, log2 of the number of CDs (0: one CD, no substreams).
pub const S1CDMAX: Field = Field::new(59, 5);
/// Doubleword 1: `S1DSS[1:0]` (bits 65:64), the default substream (ignored with S1CDMax = 0).
pub const S1DSS: Field = Field::new(0, 2);
/// Doubleword 1: `S1CIR[3:2]` (bits 67:66), inner cacheability of CD and stage-1 table reads.
pub const S1CIR: Field = Field::new(2, 2);
/// Doubleword 1: `S1COR[5:4]` (bits 69:68), their outer cacheability.
pub const S1COR: Field = Field::new(4, 2);
/// Doubleword 1: `S1CSH[7:6]` (bits 71:70), their shareability.
pub const S1CSH: Field = Field::new(6, 2);
/// S1CIR/S1COR: write-back, read- and write-allocate.
pub const CACHE_WB: u64 = 0b01;
/// S1CSH: inner shareable.
pub const SHARE_INNER: u64 = 0b11;
/// Doubleword 1: S1STALLD (bit 91), stalls disallowed (QEMU 7.2 wants 0 with no stall model).
pub const S1STALLD: u64 = 1 << 27;
/// Doubleword 1: `STRW[31:30]` (bits 95:94), StreamWorld: 0b00 NS-EL1.
pub const STRW: Field = Field::new(30, 2);
/// Doubleword 1: `SHCFG[45:44]` (bits 109:108), shareability override (bypass).
pub const SHCFG: Field = Field::new(44, 2);
/// SHCFG: use the incoming shareability.
pub const SHCFG_INCOMING: u64 = 0b01;
/// Doubleword 1: `PRIVCFG[49:48]` (bits 113:112): 0b00 uses the incoming privilege.
pub const PRIVCFG: Field = Field::new(48, 2);

/// What an STE does with its stream's transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamConfig {
    /// Terminate every transaction with an abort, recording no event (V = 1, Config = 0b000).
    Abort,
    /// Pass every transaction through untranslated (Config = 0b100).
    Bypass,
    /// Translate by stage 1 through the one CD at physical address `context` (Config =
    /// 0b101, S1CDMax = 0, S1Fmt linear; CD and table reads write-back inner shareable).
    Stage1 {
        /// The CD's physical address (64-byte aligned).
        context: u64,
    },
}

impl StreamConfig {
    /// The STE.
    pub const fn encode(self) -> Ste {
        let mut ste = [0; 8];
        match self {
            StreamConfig::Abort => ste[0] = V | CONFIG.put(CONFIG_ABORT),
            StreamConfig::Bypass => {
                ste[0] = V | CONFIG.put(CONFIG_BYPASS);
                ste[1] = SHCFG.put(SHCFG_INCOMING);
            }
            StreamConfig::Stage1 { context } => {
                ste[0] = V
                    | CONFIG.put(CONFIG_STAGE1)
                    | S1FMT.put(S1FMT_LINEAR)
                    | (context & S1_CONTEXT_PTR.mask())
                    | S1CDMAX.put(0);
                ste[1] = S1CIR.put(CACHE_WB)
                    | S1COR.put(CACHE_WB)
                    | S1CSH.put(SHARE_INNER)
                    | STRW.put(0b00)
                    | SHCFG.put(SHCFG_INCOMING);
            }
        }
        ste
    }

    /// What `ste` does, if it is one of the entries Keel writes: `None` for an invalid entry
    /// (V = 0), stage-2 configurations, and stage 1 with substreams.
    pub const fn decode(ste: &Ste) -> Option<Self> {
        if ste[0] & V == 0 {
            return None;
        }
        match CONFIG.get(ste[0]) {
            CONFIG_ABORT => Some(StreamConfig::Abort),
            CONFIG_BYPASS => Some(StreamConfig::Bypass),
            CONFIG_STAGE1 if S1CDMAX.get(ste[0]) == 0 => Some(StreamConfig::Stage1 {
                context: ste[0] & S1_CONTEXT_PTR.mask(),
            }),
            _ => None,
        }
    }
}

/// Streams `first..=last` belong to VM `vm` (its devices' DMA translates through its CD).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamAssignment {
    /// The first stream ID.
    pub first: u32,
    /// The last stream ID (inclusive).
    pub last: u32,
    /// The VM, an index into the CD addresses the table is filled with.
    pub vm: usize,
}

/// Why a stream table could not be filled; each variant's message is its [`Show`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamTableError {
    /// "stream S is assigned to VM a and to VM b"
    Overlap {
        /// The lowest stream ID both assignments name.
        stream: u32,
        /// The VM of the earlier assignment.
        vm: usize,
        /// The VM of the later one.
        other_vm: usize,
    },
    /// "stream S is beyond the stream table's N entries"
    OutOfTable {
        /// The assignment's last stream ID.
        stream: u32,
        /// The table's entries.
        entries: usize,
    },
    /// "stream range F-L is empty": its first ID is above its last.
    EmptyRange {
        /// The first stream ID.
        first: u32,
        /// The last stream ID.
        last: u32,
    },
    /// "VM v has no context descriptor"
    NoContext {
        /// The VM.
        vm: usize,
    },
    /// "the streams need N level-2 stream table arrays, and Keel has M"
    TooManyArrays {
        /// Arrays the streams need ([`super::strtab::arrays_needed`]).
        needed: usize,
        /// Arrays Keel reserves.
        arrays: usize,
    },
}

impl Show for StreamTableError {
    fn show(&self, out: &mut dyn Out) {
        match *self {
            StreamTableError::Overlap {
                stream,
                vm,
                other_vm,
            } => Fill(
                "stream {} is assigned to VM {} and to VM {}",
                &[&stream, &vm, &other_vm],
            )
            .show(out),
            StreamTableError::OutOfTable { stream, entries } => Fill(
                "stream {} is beyond the stream table's {} entries",
                &[&stream, &entries],
            )
            .show(out),
            StreamTableError::EmptyRange { first, last } => {
                Fill("stream range {}-{} is empty", &[&first, &last]).show(out)
            }
            StreamTableError::NoContext { vm } => {
                Fill("VM {} has no context descriptor", &[&vm]).show(out)
            }
            StreamTableError::TooManyArrays { needed, arrays } => Fill(
                "the streams need {} level-2 stream table arrays, and Keel has {}",
                &[&needed, &arrays],
            )
            .show(out),
        }
    }
}

impl core::fmt::Display for StreamTableError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        crate::text::fmt(self, f)
    }
}

/// Checks `assignments` against a table of `entries` streams and the `vms` CDs there are:
/// two VMs given one stream, a stream beyond the table, an empty range and a VM without a CD
/// are refused.
pub(super) fn validate(
    entries: usize,
    assignments: &[StreamAssignment],
    vms: usize,
) -> Result<(), StreamTableError> {
    for (index, assignment) in assignments.iter().enumerate() {
        let StreamAssignment { first, last, vm } = *assignment;
        if first > last {
            return Err(StreamTableError::EmptyRange { first, last });
        }
        if last as usize >= entries {
            return Err(StreamTableError::OutOfTable {
                stream: last,
                entries,
            });
        }
        if vm >= vms {
            return Err(StreamTableError::NoContext { vm });
        }
        let earlier = assignments.get(..index).unwrap_or_default();
        if let Some(other) = earlier
            .iter()
            .find(|other| other.vm != vm && other.first <= last && first <= other.last)
        {
            return Err(StreamTableError::Overlap {
                stream: first.max(other.first),
                vm: other.vm,
                other_vm: vm,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_put_their_fields_where_the_spec_says() {
        assert_eq!(StreamConfig::Abort.encode(), [1, 0, 0, 0, 0, 0, 0, 0]);
        let bypass = StreamConfig::Bypass.encode();
        assert_eq!(bypass[0], 0b1001);
        assert_eq!(bypass[1], 1 << 44, "SHCFG = incoming");
        let stage1 = StreamConfig::Stage1 {
            context: 0x4123_4540,
        }
        .encode();
        assert_eq!(stage1[0], 0x4123_4540 | 0b101 << 1 | 1);
        assert_eq!(stage1[0] >> 59, 0, "S1CDMax = 0");
        // S1CIR = S1COR = WB (0b01), S1CSH = inner (0b11), STRW = NS-EL1, S1STALLD = 0.
        assert_eq!(stage1[1] & 0xff, 0b11_01_01_00);
        assert_eq!(stage1[1] & (S1STALLD | STRW.mask() | PRIVCFG.mask()), 0);
        assert_eq!(stage1[2..], [0; 6]);
    }

    #[test]
    fn entries_decode_back() {
        for config in [
            StreamConfig::Abort,
            StreamConfig::Bypass,
            StreamConfig::Stage1 { context: 0x40 },
            StreamConfig::Stage1 {
                context: 0xfff_ffff_ffc0,
            },
        ] {
            assert_eq!(StreamConfig::decode(&config.encode()), Some(config));
        }
        assert_eq!(StreamConfig::decode(&[0; 8]), None, "V = 0");
        assert_eq!(StreamConfig::decode(&[0b1101, 0, 0, 0, 0, 0, 0, 0]), None);
        let mut substreams = StreamConfig::Stage1 { context: 0x40 }.encode();
        substreams[0] |= S1CDMAX.put(3);
        assert_eq!(StreamConfig::decode(&substreams), None);
    }
}
