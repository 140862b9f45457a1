//! Event records (IHI 0070 7.3) decoded for Keel's diagnostic line: any 32 bytes, no panic.
//!
//! A record is four little-endian doublewords. Every record has the event number in bits
//! `[7:0]`, SSV in bit 11, the SubstreamID in `[31:12]` and the StreamID in `[63:32]` of doubleword
//! 0. Records about a transaction (F_UUT, F_TRANSL_FORBIDDEN, F_WALK_EABT, the translation
//! faults, F_TLB_CONFLICT) have PnU, InD and RnW (1 = read) in bits 33, 34 and 35 of
//! doubleword 1, and with F_BAD_ATS_TREQ and E_PAGE_REQUEST the input address in doubleword 2;
//! S2 (bit 39) and CLASS (`[41:40]`) of doubleword 1 say which stage and access faulted, and a
//! stage-2 fault's IPA is in doubleword 3 `[55:12]`. The fetch faults (F_STE_FETCH, F_CD_FETCH,
//! F_WALK_EABT, F_VMS_FETCH) give the address fetched in doubleword 3 `[55:3]`.

use super::Field;
use crate::text::{Fill, Hex, Out, Show};

/// An event record: four doublewords.
pub type Record = [u64; 4];

/// Doubleword 0: the event number.
pub const NUMBER: Field = Field::new(0, 8);
/// Doubleword 0: SSV, the SubstreamID is valid.
pub const SSV: u64 = 1 << 11;
/// Doubleword 0: `SubstreamID[31:12]`.
pub const SUBSTREAM_ID: Field = Field::new(12, 20);
/// Doubleword 0: `StreamID[63:32]`.
pub const STREAM_ID: Field = Field::new(32, 32);
/// Doubleword 1: PnU (bit 33), a privileged transaction.
pub const PNU: u64 = 1 << 33;
/// Doubleword 1: InD (bit 34), an instruction fetch.
pub const IND: u64 = 1 << 34;
/// Doubleword 1: RnW (bit 35), a read (0: a write).
pub const RNW: u64 = 1 << 35;
/// Doubleword 1: S2 (bit 39), the fault is stage 2's.
pub const S2: u64 = 1 << 39;
/// Doubleword 1: `CLASS[41:40]`, what was being accessed: 0b00 CD, 0b01 stage-1 table, 0b10 the
/// input address.
pub const CLASS: Field = Field::new(40, 2);
/// Doubleword 3: `IPA[55:12]` of a stage-2 fault.
pub const IPA: Field = Field::new(12, 44);
/// Doubleword 3: `FetchAddr[55:3]` of a fetch fault.
pub const FETCH_ADDRESS: Field = Field::new(3, 53);
/// E_PAGE_REQUEST's doubleword 2: `InputAddr[63:12]`.
pub const PAGE_ADDRESS: Field = Field::new(12, 52);

/// The event types (IHI 0070 7.3.2 to 7.3.20).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// F_UUT (0x01): unsupported upstream transaction.
    UnsupportedTransaction,
    /// C_BAD_STREAMID (0x02): stream ID beyond the stream table, or of a two-level table's
    /// block without a level-2 array (its descriptor's Span 0).
    BadStreamId,
    /// F_STE_FETCH (0x03): fetching the STE aborted.
    SteFetch,
    /// C_BAD_STE (0x04): the STE is invalid (V = 0 or an illegal configuration).
    BadSte,
    /// F_BAD_ATS_TREQ (0x05): an ATS translation request the STE does not allow.
    BadAtsRequest,
    /// F_STREAM_DISABLED (0x06): a transaction without substream where none is allowed.
    StreamDisabled,
    /// F_TRANSL_FORBIDDEN (0x07): an ATS-translated transaction the STE does not allow.
    TranslationForbidden,
    /// C_BAD_SUBSTREAMID (0x08): substream ID out of range or not allowed.
    BadSubstreamId,
    /// F_CD_FETCH (0x09): fetching the CD aborted.
    CdFetch,
    /// C_BAD_CD (0x0A): the CD is invalid.
    BadCd,
    /// F_WALK_EABT (0x0B): a translation table walk aborted.
    WalkAbort,
    /// F_TRANSLATION (0x10): no translation for the address.
    Translation,
    /// F_ADDR_SIZE (0x11): an address beyond the output size.
    AddressSize,
    /// F_ACCESS (0x12): access flag clear.
    Access,
    /// F_PERMISSION (0x13): the access is not permitted.
    Permission,
    /// F_TLB_CONFLICT (0x20): conflicting TLB entries.
    TlbConflict,
    /// F_CFG_CONFLICT (0x21): conflicting configuration cache entries.
    ConfigConflict,
    /// E_PAGE_REQUEST (0x24): a device's hint that it will access pages.
    PageRequest,
    /// F_VMS_FETCH (0x25): fetching the VMS aborted.
    VmsFetch,
    /// Any other event number (reserved or IMPLEMENTATION DEFINED).
    Unknown(u8),
}

impl EventKind {
    /// The kind of event number `number`.
    pub const fn from_number(number: u8) -> Self {
        match number {
            0x01 => EventKind::UnsupportedTransaction,
            0x02 => EventKind::BadStreamId,
            0x03 => EventKind::SteFetch,
            0x04 => EventKind::BadSte,
            0x05 => EventKind::BadAtsRequest,
            0x06 => EventKind::StreamDisabled,
            0x07 => EventKind::TranslationForbidden,
            0x08 => EventKind::BadSubstreamId,
            0x09 => EventKind::CdFetch,
            0x0a => EventKind::BadCd,
            0x0b => EventKind::WalkAbort,
            0x10 => EventKind::Translation,
            0x11 => EventKind::AddressSize,
            0x12 => EventKind::Access,
            0x13 => EventKind::Permission,
            0x20 => EventKind::TlbConflict,
            0x21 => EventKind::ConfigConflict,
            0x24 => EventKind::PageRequest,
            0x25 => EventKind::VmsFetch,
            other => EventKind::Unknown(other),
        }
    }

    /// The event number.
    pub const fn number(self) -> u8 {
        match self {
            EventKind::UnsupportedTransaction => 0x01,
            EventKind::BadStreamId => 0x02,
            EventKind::SteFetch => 0x03,
            EventKind::BadSte => 0x04,
            EventKind::BadAtsRequest => 0x05,
            EventKind::StreamDisabled => 0x06,
            EventKind::TranslationForbidden => 0x07,
            EventKind::BadSubstreamId => 0x08,
            EventKind::CdFetch => 0x09,
            EventKind::BadCd => 0x0a,
            EventKind::WalkAbort => 0x0b,
            EventKind::Translation => 0x10,
            EventKind::AddressSize => 0x11,
            EventKind::Access => 0x12,
            EventKind::Permission => 0x13,
            EventKind::TlbConflict => 0x20,
            EventKind::ConfigConflict => 0x21,
            EventKind::PageRequest => 0x24,
            EventKind::VmsFetch => 0x25,
            EventKind::Unknown(number) => number,
        }
    }

    /// The kind's name in Keel's diagnostic line ("translation fault"...).
    pub const fn name(self) -> &'static str {
        match self {
            EventKind::UnsupportedTransaction => "unsupported transaction",
            EventKind::BadStreamId => "stream ID out of range",
            EventKind::SteFetch => "stream table entry fetch aborted",
            EventKind::BadSte => "invalid stream table entry",
            EventKind::BadAtsRequest => "ATS translation request refused",
            EventKind::StreamDisabled => "stream disabled",
            EventKind::TranslationForbidden => "ATS-translated transaction forbidden",
            EventKind::BadSubstreamId => "substream ID refused",
            EventKind::CdFetch => "context descriptor fetch aborted",
            EventKind::BadCd => "invalid context descriptor",
            EventKind::WalkAbort => "translation table walk aborted",
            EventKind::Translation => "translation fault",
            EventKind::AddressSize => "address size fault",
            EventKind::Access => "access flag fault",
            EventKind::Permission => "permission fault",
            EventKind::TlbConflict => "TLB conflict",
            EventKind::ConfigConflict => "configuration cache conflict",
            EventKind::PageRequest => "page request",
            EventKind::VmsFetch => "VMS fetch aborted",
            EventKind::Unknown(_) => "unknown event",
        }
    }

    /// Whether the record carries the transaction's PnU, InD and RnW.
    const fn has_access(self) -> bool {
        matches!(
            self,
            EventKind::UnsupportedTransaction
                | EventKind::TranslationForbidden
                | EventKind::WalkAbort
                | EventKind::Translation
                | EventKind::AddressSize
                | EventKind::Access
                | EventKind::Permission
                | EventKind::TlbConflict
        )
    }

    /// Whether the record carries S2, CLASS and (for a stage-2 fault) the IPA.
    const fn has_stage(self) -> bool {
        matches!(
            self,
            EventKind::WalkAbort
                | EventKind::Translation
                | EventKind::AddressSize
                | EventKind::Access
                | EventKind::Permission
                | EventKind::TlbConflict
        )
    }

    /// Whether the record carries a fetch address in doubleword 3.
    const fn has_fetch_address(self) -> bool {
        matches!(
            self,
            EventKind::SteFetch | EventKind::CdFetch | EventKind::WalkAbort | EventKind::VmsFetch
        )
    }
}

/// The access of a transaction that caused an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// A read (RnW = 1); else a write.
    pub read: bool,
    /// Privileged (PnU, after the STE's override).
    pub privileged: bool,
    /// An instruction fetch (InD).
    pub instruction: bool,
}

/// A decoded event record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The event type.
    pub kind: EventKind,
    /// The stream of the transaction (for every type; 0 where the record has none).
    pub stream_id: u32,
    /// The substream, if the transaction had one (SSV).
    pub substream_id: Option<u32>,
    /// The transaction's access, for the types that record it.
    pub access: Option<Access>,
    /// The address the device presented (InputAddr), for the types that record it.
    pub input_address: Option<u64>,
    /// For translation faults: whether stage 2 faulted (S2) ...
    pub stage2: bool,
    /// ... and the access that did (CLASS: 0 CD fetch, 1 stage-1 table walk, 2 the input).
    pub class: u8,
    /// The IPA of a stage-2 fault.
    pub ipa: Option<u64>,
    /// The address of the structure or descriptor whose fetch aborted.
    pub fetch_address: Option<u64>,
}

impl Event {
    /// Decodes a record; any values decode (an unknown type as [`EventKind::Unknown`]).
    pub const fn decode(record: &Record) -> Self {
        let [word0, word1, word2, word3] = *record;
        let kind = EventKind::from_number(NUMBER.get(word0) as u8);
        let stage = kind.has_stage();
        let stage2 = stage && word1 & S2 != 0;
        Self {
            kind,
            stream_id: STREAM_ID.get(word0) as u32,
            substream_id: if word0 & SSV != 0 || matches!(kind, EventKind::BadSubstreamId) {
                Some(SUBSTREAM_ID.get(word0) as u32)
            } else {
                None
            },
            access: if kind.has_access() {
                Some(Access {
                    read: word1 & RNW != 0,
                    privileged: word1 & PNU != 0,
                    instruction: word1 & IND != 0,
                })
            } else {
                None
            },
            input_address: match kind {
                EventKind::PageRequest => Some(word2 & PAGE_ADDRESS.mask()),
                _ if kind.has_access() || matches!(kind, EventKind::BadAtsRequest) => Some(word2),
                _ => None,
            },
            stage2,
            class: if stage { CLASS.get(word1) as u8 } else { 0 },
            ipa: if stage2 {
                Some(word3 & IPA.mask())
            } else {
                None
            },
            fetch_address: if kind.has_fetch_address() {
                Some(word3 & FETCH_ADDRESS.mask())
            } else {
                None
            },
        }
    }

    /// Decodes a record as the 32 bytes the SMMU wrote (little-endian).
    pub fn from_bytes(bytes: &[u8; 32]) -> Self {
        let mut record = [0; 4];
        for (word, chunk) in record.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut le = [0; 8];
            le.copy_from_slice(chunk);
            *word = u64::from_le_bytes(le);
        }
        Self::decode(&record)
    }
}

/// `translation fault: stream 8, read at 0x40100000`: the kind's name, the stream, and what
/// the record says of the access and addresses.
impl Show for Event {
    fn show(&self, out: &mut dyn Out) {
        out.put(self.kind.name());
        if let EventKind::Unknown(number) = self.kind {
            Fill(" {}", &[&Hex(u64::from(number), 2)]).show(out);
        }
        Fill(": stream {}", &[&self.stream_id]).show(out);
        if let Some(substream) = self.substream_id {
            Fill(" substream {}", &[&substream]).show(out);
        }
        match (self.access, self.input_address) {
            (Some(access), Some(address)) => {
                let verb = match (access.read, access.instruction) {
                    (_, true) => "fetch",
                    (true, false) => "read",
                    (false, false) => "write",
                };
                Fill(", {} at {}", &[&verb, &Hex(address, 0)]).show(out)
            }
            (None, Some(address)) => Fill(", at {}", &[&Hex(address, 0)]).show(out),
            _ => {}
        }
        if let Some(ipa) = self.ipa {
            Fill(", stage 2 at IPA {}", &[&Hex(ipa, 0)]).show(out);
        }
        if let Some(fetch) = self.fetch_address {
            Fill(", fetching {}", &[&Hex(fetch, 0)]).show(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::text::tests::shown;

    /// The record QEMU 7.2 wrote for edu (stream 8) reading IOVA 0x4010_0000 through an empty
    /// stage 1, as 32-bit words: `0x10 0x8 0 0x8 | 0x40100000 0` (research file, section 2).
    fn qemu_translation_fault() -> Record {
        let words: [u32; 8] = [0x10, 0x8, 0, 0x8, 0x4010_0000, 0, 0, 0];
        let mut record = [0; 4];
        for (i, word) in record.iter_mut().enumerate() {
            *word = u64::from(words[2 * i]) | u64::from(words[2 * i + 1]) << 32;
        }
        record
    }

    #[test]
    fn qemus_translation_fault() {
        let event = Event::decode(&qemu_translation_fault());
        assert_eq!(
            event,
            Event {
                kind: EventKind::Translation,
                stream_id: 8,
                substream_id: None,
                access: Some(Access {
                    read: true,
                    privileged: false,
                    instruction: false,
                }),
                input_address: Some(0x4010_0000),
                stage2: false,
                class: 0,
                ipa: None,
                fetch_address: None,
            }
        );
        assert_eq!(
            shown(&event),
            "translation fault: stream 8, read at 0x40100000"
        );
        let bytes: Vec<u8> = qemu_translation_fault()
            .iter()
            .flat_map(|word| word.to_le_bytes())
            .collect();
        assert_eq!(Event::from_bytes(&bytes.try_into().unwrap()), event);
    }

    #[test]
    fn fields_come_from_the_specs_bits() {
        // A stage-2 permission fault on a write, CLASS = IN, with a substream.
        let record = [
            0x13 | SSV | 5 << 12 | 24 << 32,
            PNU | S2 | 0b10 << 40,
            0xffff_0000_1234_5000,
            0x0000_00ab_cdef_1000 | 0xfff,
        ];
        let event = Event::decode(&record);
        assert_eq!(event.kind, EventKind::Permission);
        assert_eq!(event.substream_id, Some(5));
        assert_eq!(
            event.access,
            Some(Access {
                read: false,
                privileged: true,
                instruction: false
            })
        );
        assert_eq!(event.input_address, Some(0xffff_0000_1234_5000));
        assert!(event.stage2);
        assert_eq!(event.class, 0b10);
        assert_eq!(event.ipa, Some(0x0000_00ab_cdef_1000));
        assert_eq!(
            shown(&event),
            "permission fault: stream 24 substream 5, write at 0xffff000012345000, \
             stage 2 at IPA 0xabcdef1000"
        );
        // C_BAD_STE: a stream and nothing else, whatever the other words hold.
        let bad = Event::decode(&[0x04 | 16 << 32, u64::MAX, u64::MAX, u64::MAX]);
        assert_eq!(bad.kind, EventKind::BadSte);
        assert_eq!(bad.stream_id, 16);
        assert_eq!(
            (bad.access, bad.input_address, bad.ipa, bad.fetch_address),
            (None, None, None, None)
        );
        assert_eq!(shown(&bad), "invalid stream table entry: stream 16");
        // F_STE_FETCH: the fetch address.
        let fetch = Event::decode(&[0x03, 0, 0, 0x4100_0207]);
        assert_eq!(fetch.fetch_address, Some(0x4100_0200));
        // An unknown number.
        let unknown = Event::decode(&[0xe3, 0, 0, 0]);
        assert_eq!(unknown.kind, EventKind::Unknown(0xe3));
        assert_eq!(shown(&unknown), "unknown event 0xe3: stream 0");
    }

    #[test]
    fn every_number_round_trips_and_has_a_name() {
        let mut known = 0;
        for number in 0..=255u8 {
            let kind = EventKind::from_number(number);
            assert_eq!(kind.number(), number);
            assert!(!kind.name().is_empty());
            if !matches!(kind, EventKind::Unknown(_)) {
                known += 1;
            }
        }
        assert_eq!(known, 19);
        assert_eq!(EventKind::Translation.name(), "translation fault");
    }

    #[test]
    fn arbitrary_records_decode_without_panicking() {
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            let mut bytes = [0u8; 32];
            for byte in &mut bytes {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *byte = state as u8;
            }
            // Mostly known event numbers, so that every layout is exercised.
            bytes[0] =
                [0x01, 0x05, 0x08, 0x0b, 0x10, 0x13, 0x24, 0x25, bytes[0]][bytes[1] as usize % 9];
            let event = Event::from_bytes(&bytes);
            assert_eq!(event.kind.number(), bytes[0]);
            let _ = shown(&event);
        }
    }
}
