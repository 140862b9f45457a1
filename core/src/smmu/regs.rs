//! SMMUv3 registers Keel programs (IHI 0070 chapter 6), the ID registers decoded, errors.
//!
//! Offsets are from the SMMU's base: page 0 holds everything Keel uses but the event queue's
//! PROD and CONS, which live in page 1 (base + 0x1_0000). QEMU 7.2 aliases page 1 onto page 0
//! (`offset &= ~0x10000`), so the page-0 offsets work there too, but not on hardware.

use super::Field;
use crate::text::{Decimal, Fill, Out, Show};

/// SMMU_IDR0: features (stages, table formats, stream table levels).
pub const IDR0: u64 = 0x00;
/// SMMU_IDR1: sizes of stream IDs and queues.
pub const IDR1: u64 = 0x04;
/// SMMU_IDR3: more features (range invalidation, hierarchical-attribute disable).
pub const IDR3: u64 = 0x0c;
/// SMMU_IDR5: output address size and translation granules.
pub const IDR5: u64 = 0x14;
/// SMMU_IIDR: implementer and revision.
pub const IIDR: u64 = 0x18;
/// SMMU_AIDR: architecture revision (SMMUv3.x as `x`).
pub const AIDR: u64 = 0x1c;
/// SMMU_CR0: enables (SMMU, queues).
pub const CR0: u64 = 0x20;
/// SMMU_CR0ACK: the enables in effect (an enable is done when CR0ACK shows it).
pub const CR0ACK: u64 = 0x24;
/// SMMU_CR1: cacheability and shareability of the SMMU's table and queue accesses.
pub const CR1: u64 = 0x28;
/// SMMU_CR2: E2H, invalid stream ID recording, private TLB maintenance.
pub const CR2: u64 = 0x2c;
/// SMMU_GBPA: what transactions do while SMMUEN = 0 (absent in QEMU 7.2: RAZ/WI).
pub const GBPA: u64 = 0x44;
/// SMMU_IRQ_CTRL: wired interrupt enables.
pub const IRQ_CTRL: u64 = 0x50;
/// SMMU_IRQ_CTRLACK: the interrupt enables in effect.
pub const IRQ_CTRLACK: u64 = 0x54;
/// SMMU_GERROR: global errors, each active while its bit differs from GERRORN's.
pub const GERROR: u64 = 0x60;
/// SMMU_GERRORN: written by software to acknowledge global errors (toggles to match GERROR).
pub const GERRORN: u64 = 0x64;
/// SMMU_STRTAB_BASE (64-bit): stream table address.
pub const STRTAB_BASE: u64 = 0x80;
/// SMMU_STRTAB_BASE_CFG: stream table format and size.
pub const STRTAB_BASE_CFG: u64 = 0x88;
/// SMMU_CMDQ_BASE (64-bit): command queue address and size.
pub const CMDQ_BASE: u64 = 0x90;
/// SMMU_CMDQ_PROD: the command queue's producer index (software writes).
pub const CMDQ_PROD: u64 = 0x98;
/// SMMU_CMDQ_CONS: the command queue's consumer index and error code (the SMMU writes).
pub const CMDQ_CONS: u64 = 0x9c;
/// SMMU_EVENTQ_BASE (64-bit): event queue address and size.
pub const EVENTQ_BASE: u64 = 0xa0;
/// Page 1's offset from the base.
pub const PAGE1: u64 = 0x1_0000;
/// SMMU_EVENTQ_PROD, in page 1: the event queue's producer index (the SMMU writes).
pub const EVENTQ_PROD: u64 = PAGE1 + 0xa8;
/// SMMU_EVENTQ_CONS, in page 1: the event queue's consumer index (software writes).
pub const EVENTQ_CONS: u64 = PAGE1 + 0xac;

/// SMMU_IDR0 fields.
pub mod idr0 {
    use super::Field;
    /// S2P: stage-2 translation implemented.
    pub const S2P: u32 = 1 << 0;
    /// S1P: stage-1 translation implemented.
    pub const S1P: u32 = 1 << 1;
    /// `TTF[1:0]`: translation table formats; bit 1 = AArch64 (VMSAv8-64), bit 0 = AArch32 LPAE.
    pub const TTF: Field = Field::new(2, 2);
    /// TTF's AArch64 bit.
    pub const TTF_AARCH64: u64 = 0b10;
    /// COHACC: the SMMU's table and queue accesses are IO-coherent.
    pub const COHACC: u32 = 1 << 4;
    /// HYP: EL2 StreamWorld (STE.STRW = EL2) implemented.
    pub const HYP: u32 = 1 << 9;
    /// ASID16: 16-bit ASIDs.
    pub const ASID16: u32 = 1 << 12;
    /// MSI: message-signalled interrupts.
    pub const MSI: u32 = 1 << 13;
    /// VMID16: 16-bit VMIDs.
    pub const VMID16: u32 = 1 << 18;
    /// `TTENDIAN[1:0]`: 0b00 mixed, 0b10 little-endian only, 0b11 big-endian only.
    pub const TTENDIAN: Field = Field::new(21, 2);
    /// TTENDIAN's big-endian-only value.
    pub const TTENDIAN_BIG_ONLY: u64 = 0b11;
    /// `STALL_MODEL[1:0]`: 0b00 stall and terminate, 0b01 terminate only, 0b10 stall only.
    pub const STALL_MODEL: Field = Field::new(24, 2);
    /// TERM_MODEL: 1 = a terminated transaction always aborts (CD.A must be 1).
    pub const TERM_MODEL: u32 = 1 << 26;
    /// `ST_LEVEL[1:0]`: 0b00 linear stream table only, 0b01 two-level as well.
    pub const ST_LEVEL: Field = Field::new(27, 2);
}

/// SMMU_IDR1 fields.
pub mod idr1 {
    use super::Field;
    /// `SIDSIZE[5:0]`: stream ID bits.
    pub const SIDSIZE: Field = Field::new(0, 6);
    /// `SSIDSIZE[10:6]`: substream ID bits.
    pub const SSIDSIZE: Field = Field::new(6, 5);
    /// `EVENTQS[20:16]`: log2 of the event queue's most entries.
    pub const EVENTQS: Field = Field::new(16, 5);
    /// `CMDQS[25:21]`: log2 of the command queue's most entries.
    pub const CMDQS: Field = Field::new(21, 5);
}

/// SMMU_IDR5 fields.
pub mod idr5 {
    use super::Field;
    /// `OAS[2:0]`: output (physical) address size, encoded as [`super::AddressSize`].
    pub const OAS: Field = Field::new(0, 3);
    /// GRAN4K: 4 KiB translation granule.
    pub const GRAN4K: u32 = 1 << 4;
    /// GRAN16K: 16 KiB translation granule.
    pub const GRAN16K: u32 = 1 << 5;
    /// GRAN64K: 64 KiB translation granule.
    pub const GRAN64K: u32 = 1 << 6;
}

/// SMMU_CR0 (and CR0ACK) bits.
pub mod cr0 {
    /// SMMUEN: translation on (off, every transaction follows GBPA; QEMU 7.2 bypasses).
    pub const SMMUEN: u32 = 1 << 0;
    /// PRIQEN: PRI queue enabled.
    pub const PRIQEN: u32 = 1 << 1;
    /// EVENTQEN: event queue enabled (no event is written while clear).
    pub const EVENTQEN: u32 = 1 << 2;
    /// CMDQEN: command queue enabled.
    pub const CMDQEN: u32 = 1 << 3;
}

/// SMMU_CR1 fields: how the SMMU accesses its tables (STEs, CDs, translation tables) and
/// queues.
pub mod cr1 {
    use super::Field;
    /// `QUEUE_IC[1:0]`: queue inner cacheability ([`CACHE_WB`] ...).
    pub const QUEUE_IC: Field = Field::new(0, 2);
    /// `QUEUE_OC[3:2]`: queue outer cacheability.
    pub const QUEUE_OC: Field = Field::new(2, 2);
    /// `QUEUE_SH[5:4]`: queue shareability ([`SHARE_INNER`] ...).
    pub const QUEUE_SH: Field = Field::new(4, 2);
    /// `TABLE_IC[7:6]`: table inner cacheability.
    pub const TABLE_IC: Field = Field::new(6, 2);
    /// `TABLE_OC[9:8]`: table outer cacheability.
    pub const TABLE_OC: Field = Field::new(8, 2);
    /// `TABLE_SH[11:10]`: table shareability.
    pub const TABLE_SH: Field = Field::new(10, 2);
    /// Cacheability: non-cacheable.
    pub const CACHE_NONE: u64 = 0b00;
    /// Cacheability: write-back cacheable.
    pub const CACHE_WB: u64 = 0b01;
    /// Cacheability: write-through cacheable.
    pub const CACHE_WT: u64 = 0b10;
    /// Shareability: non-shareable.
    pub const SHARE_NONE: u64 = 0b00;
    /// Shareability: outer shareable.
    pub const SHARE_OUTER: u64 = 0b10;
    /// Shareability: inner shareable.
    pub const SHARE_INNER: u64 = 0b11;
    /// Tables and queues write-back cacheable, inner shareable: Keel's RAM as its CPUs map it
    /// (for a coherent SMMU, `SMMU_IDR0.COHACC = 1`).
    pub const WRITE_BACK_INNER: u32 = (QUEUE_IC.put(CACHE_WB)
        | QUEUE_OC.put(CACHE_WB)
        | QUEUE_SH.put(SHARE_INNER)
        | TABLE_IC.put(CACHE_WB)
        | TABLE_OC.put(CACHE_WB)
        | TABLE_SH.put(SHARE_INNER)) as u32;
}

/// SMMU_CR2 bits.
pub mod cr2 {
    /// E2H: EL2 StreamWorld uses E2H (EL2&0) translation.
    pub const E2H: u32 = 1 << 0;
    /// RECINVSID: record C_BAD_STREAMID for a stream ID beyond the stream table.
    pub const RECINVSID: u32 = 1 << 1;
    /// PTM: private TLB maintenance (ignore broadcast TLB invalidations).
    pub const PTM: u32 = 1 << 2;
}

/// SMMU_GBPA bits.
pub mod gbpa {
    /// ABORT: while SMMUEN = 0, abort every transaction instead of passing it through.
    pub const ABORT: u32 = 1 << 20;
    /// UPDATE: set with a new value; the SMMU clears it once the value is in effect.
    pub const UPDATE: u32 = 1 << 31;
}

/// SMMU_IRQ_CTRL (and IRQ_CTRLACK) bits.
pub mod irq_ctrl {
    /// GERROR_IRQEN: the global error interrupt.
    pub const GERROR_IRQEN: u32 = 1 << 0;
    /// PRIQ_IRQEN: the PRI queue interrupt.
    pub const PRIQ_IRQEN: u32 = 1 << 1;
    /// EVENTQ_IRQEN: the event queue interrupt.
    pub const EVENTQ_IRQEN: u32 = 1 << 2;
}

/// SMMU_STRTAB_BASE and SMMU_STRTAB_BASE_CFG fields.
pub mod strtab {
    use super::Field;
    /// `STRTAB_BASE.ADDR[55:6]`: the table's physical address (aligned to its size).
    pub const ADDR: Field = Field::new(6, 50);
    /// STRTAB_BASE.RA: read-allocate hint.
    pub const RA: u64 = 1 << 62;
    /// `STRTAB_BASE_CFG.LOG2SIZE[5:0]`: log2 of the number of stream IDs the table covers.
    pub const LOG2SIZE: Field = Field::new(0, 6);
    /// `STRTAB_BASE_CFG.SPLIT[10:6]`: stream ID bits resolved by level 2 (two-level tables).
    pub const SPLIT: Field = Field::new(6, 5);
    /// `STRTAB_BASE_CFG.FMT[17:16]`: 0b00 linear, 0b01 two-level.
    pub const FMT: Field = Field::new(16, 2);
    /// FMT: linear.
    pub const FMT_LINEAR: u64 = 0b00;
    /// FMT: two-level.
    pub const FMT_TWO_LEVEL: u64 = 0b01;
}

/// SMMU_CMDQ_BASE / SMMU_EVENTQ_BASE fields and the PROD/CONS registers' flag fields.
pub mod queue {
    use super::Field;
    /// `LOG2SIZE[4:0]`: log2 of the number of entries.
    pub const LOG2SIZE: Field = Field::new(0, 5);
    /// `ADDR[55:5]`: the queue's physical address (aligned to its size, at least 32 bytes).
    pub const ADDR: Field = Field::new(5, 51);
    /// Bit 62: read-allocate (CMDQ_BASE.RA) or write-allocate (EVENTQ_BASE.WA) hint.
    pub const ALLOCATE: u64 = 1 << 62;
    /// `CMDQ_CONS.ERR[30:24]`: why command processing stopped ([`crate::smmu::CommandError`]).
    pub const CONS_ERR: Field = Field::new(24, 7);
    /// EVENTQ_PROD.OVFLG: toggled by the SMMU when it loses events to a full queue.
    pub const PROD_OVFLG: u32 = 1 << 31;
    /// EVENTQ_CONS.OVACKFLG: set to PROD.OVFLG's value to acknowledge an overflow.
    pub const CONS_OVACKFLG: u32 = 1 << 31;
}

/// SMMU_STRTAB_BASE's value for a table at `phys` (read-allocate).
pub const fn strtab_base(phys: u64) -> u64 {
    strtab::RA | (phys & strtab::ADDR.mask())
}

/// SMMU_STRTAB_BASE_CFG's value for a linear table of `2^log2size` STEs.
pub const fn strtab_base_cfg_linear(log2size: u32) -> u32 {
    (strtab::FMT.put(strtab::FMT_LINEAR) | strtab::LOG2SIZE.put(log2size as u64)) as u32
}

/// SMMU_STRTAB_BASE_CFG's value for a two-level table over `2^log2size` stream IDs whose
/// level-2 arrays resolve the low `split` bits.
pub const fn strtab_base_cfg_two_level(log2size: u32, split: u32) -> u32 {
    (strtab::FMT.put(strtab::FMT_TWO_LEVEL)
        | strtab::SPLIT.put(split as u64)
        | strtab::LOG2SIZE.put(log2size as u64)) as u32
}

/// SMMU_CMDQ_BASE's or SMMU_EVENTQ_BASE's value for a queue of `2^log2size` entries at
/// `phys` (with the read- or write-allocate hint).
pub const fn queue_base(phys: u64, log2size: u32) -> u64 {
    queue::ALLOCATE | (phys & queue::ADDR.mask()) | queue::LOG2SIZE.put(log2size as u64)
}

/// An address size as SMMU_IDR5.OAS and CD.IPS encode it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AddressSize {
    /// 32 bits (4 GiB), encoding 0b000.
    Bits32,
    /// 36 bits (64 GiB), 0b001.
    Bits36,
    /// 40 bits (1 TiB), 0b010.
    Bits40,
    /// 42 bits (4 TiB), 0b011.
    Bits42,
    /// 44 bits (16 TiB), 0b100.
    Bits44,
    /// 48 bits (256 TiB), 0b101.
    Bits48,
    /// 52 bits (4 PiB), 0b110.
    Bits52,
    /// 56 bits, 0b111 (SMMUv3.4 on; earlier versions treat it as 48 or 52).
    Bits56,
}

impl AddressSize {
    /// The size a 3-bit field encodes (bits beyond 3 ignored).
    pub const fn from_field(value: u64) -> Self {
        match value & 0b111 {
            0 => AddressSize::Bits32,
            1 => AddressSize::Bits36,
            2 => AddressSize::Bits40,
            3 => AddressSize::Bits42,
            4 => AddressSize::Bits44,
            5 => AddressSize::Bits48,
            6 => AddressSize::Bits52,
            _ => AddressSize::Bits56,
        }
    }

    /// The field's encoding.
    pub const fn field(self) -> u64 {
        self as u64
    }

    /// The number of address bits.
    pub const fn bits(self) -> u32 {
        match self {
            AddressSize::Bits32 => 32,
            AddressSize::Bits36 => 36,
            AddressSize::Bits40 => 40,
            AddressSize::Bits42 => 42,
            AddressSize::Bits44 => 44,
            AddressSize::Bits48 => 48,
            AddressSize::Bits52 => 52,
            AddressSize::Bits56 => 56,
        }
    }
}

/// What an SMMU implements, from SMMU_IDR0, IDR1 and IDR5.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// Stage-1 translation (IDR0.S1P).
    pub stage1: bool,
    /// Stage-2 translation (IDR0.S2P; 0 in QEMU 7.2).
    pub stage2: bool,
    /// AArch64 (VMSAv8-64) translation tables (`IDR0.TTF[1]`).
    pub aarch64_tables: bool,
    /// Translation tables only big-endian (IDR0.TTENDIAN = 0b11).
    pub big_endian_only: bool,
    /// IO-coherent table and queue accesses (IDR0.COHACC).
    pub coherent: bool,
    /// Two-level stream tables as well as linear ones (IDR0.ST_LEVEL = 0b01).
    pub two_level_stream_table: bool,
    /// 16-bit ASIDs (IDR0.ASID16), else 8-bit.
    pub asid16: bool,
    /// Message-signalled interrupts (IDR0.MSI).
    pub msi: bool,
    /// Terminated transactions always abort (IDR0.TERM_MODEL): CD.A must be 1.
    pub abort_only: bool,
    /// Stream ID bits (IDR1.SIDSIZE).
    pub stream_id_bits: u32,
    /// log2 of the command queue's most entries (IDR1.CMDQS).
    pub command_queue_log2: u32,
    /// log2 of the event queue's most entries (IDR1.EVENTQS).
    pub event_queue_log2: u32,
    /// Output (physical) address size (IDR5.OAS).
    pub output_size: AddressSize,
    /// The 4 KiB translation granule (IDR5.GRAN4K).
    pub granule_4k: bool,
}

impl Features {
    /// Decodes the three ID registers.
    pub const fn decode(idr0: u32, idr1: u32, idr5: u32) -> Self {
        let idr0_64 = idr0 as u64;
        Self {
            stage1: idr0 & idr0::S1P != 0,
            stage2: idr0 & idr0::S2P != 0,
            aarch64_tables: idr0::TTF.get(idr0_64) & idr0::TTF_AARCH64 != 0,
            big_endian_only: idr0::TTENDIAN.get(idr0_64) == idr0::TTENDIAN_BIG_ONLY,
            coherent: idr0 & idr0::COHACC != 0,
            two_level_stream_table: idr0::ST_LEVEL.get(idr0_64) == 1,
            asid16: idr0 & idr0::ASID16 != 0,
            msi: idr0 & idr0::MSI != 0,
            abort_only: idr0 & idr0::TERM_MODEL != 0,
            stream_id_bits: idr1::SIDSIZE.get(idr1 as u64) as u32,
            command_queue_log2: idr1::CMDQS.get(idr1 as u64) as u32,
            event_queue_log2: idr1::EVENTQS.get(idr1 as u64) as u32,
            output_size: AddressSize::from_field(idr5::OAS.get(idr5 as u64)),
            granule_4k: idr5 & idr5::GRAN4K != 0,
        }
    }
}

/// Why an SMMU cannot serve Keel; each variant's message is its [`Show`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unsupported {
    /// "the SMMU implements neither stage-1 nor stage-2 translation"
    NoTranslation,
    /// "the SMMU has stage-2 translation only, and Keel gives devices stage-1 tables"
    NoStage1,
    /// "the SMMU cannot walk AArch64 translation tables"
    NoAArch64Tables,
    /// "the SMMU walks big-endian translation tables only"
    BigEndianOnly,
    /// "the SMMU's N-bit stream IDs cannot name stream S": a configured stream ID needs more
    /// bits than SMMU_IDR1.SIDSIZE.
    StreamIdsTooNarrow {
        /// SMMU_IDR1.SIDSIZE.
        bits: u32,
        /// The largest stream ID Keel assigns.
        stream: u32,
    },
    /// "the SMMU has no 4 KiB translation granule"
    No4KGranule,
    /// "the SMMU has no two-level stream tables" (SMMU_IDR0.ST_LEVEL = 0b00): Keel's table
    /// covers 16-bit stream IDs in two levels.
    NoTwoLevelStreamTable,
    /// "the SMMU's N-bit physical addresses cannot reach Keel's M-bit ones"
    OutputTooSmall {
        /// SMMU_IDR5.OAS, in bits.
        bits: u32,
        /// The physical address bits Keel's tables and VMs' memory need.
        needed: u32,
    },
}

impl Show for Unsupported {
    fn show(&self, out: &mut dyn Out) {
        match *self {
            Unsupported::NoTranslation => {
                out.put("the SMMU implements neither stage-1 nor stage-2 translation")
            }
            Unsupported::NoStage1 => out.put(
                "the SMMU has stage-2 translation only, and Keel gives devices stage-1 tables",
            ),
            Unsupported::NoAArch64Tables => {
                out.put("the SMMU cannot walk AArch64 translation tables")
            }
            Unsupported::BigEndianOnly => {
                out.put("the SMMU walks big-endian translation tables only")
            }
            Unsupported::StreamIdsTooNarrow { bits, stream } => Fill(
                "the SMMU's {}-bit stream IDs cannot name stream {}",
                &[&bits, &stream],
            )
            .show(out),
            Unsupported::No4KGranule => out.put("the SMMU has no 4 KiB translation granule"),
            Unsupported::NoTwoLevelStreamTable => {
                out.put("the SMMU has no two-level stream tables")
            }
            Unsupported::OutputTooSmall { bits, needed } => Fill(
                "the SMMU's {}-bit physical addresses cannot reach Keel's {}-bit ones",
                &[&bits, &needed],
            )
            .show(out),
        }
    }
}

impl core::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        crate::text::fmt(self, f)
    }
}

/// Whether an SMMU with `features` can translate for Keel: stream IDs up to `max_stream`,
/// physical addresses of `physical_bits` bits (Keel's tables, queues and the VMs' memory).
pub fn check(features: &Features, max_stream: u32, physical_bits: u32) -> Result<(), Unsupported> {
    if !features.stage1 {
        return Err(if features.stage2 {
            Unsupported::NoStage1
        } else {
            Unsupported::NoTranslation
        });
    }
    if !features.aarch64_tables {
        return Err(Unsupported::NoAArch64Tables);
    }
    if features.big_endian_only {
        return Err(Unsupported::BigEndianOnly);
    }
    if !features.granule_4k {
        return Err(Unsupported::No4KGranule);
    }
    if !features.two_level_stream_table {
        return Err(Unsupported::NoTwoLevelStreamTable);
    }
    let stream_bits = u32::BITS - max_stream.leading_zeros();
    if stream_bits > features.stream_id_bits {
        return Err(Unsupported::StreamIdsTooNarrow {
            bits: features.stream_id_bits,
            stream: max_stream,
        });
    }
    if physical_bits > features.output_size.bits() {
        return Err(Unsupported::OutputTooSmall {
            bits: features.output_size.bits(),
            needed: physical_bits,
        });
    }
    Ok(())
}

/// A global error (SMMU_GERROR bit), active while its GERROR and GERRORN bits differ; each
/// variant's message is its [`Show`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlobalError {
    /// CMDQ_ERR (bit 0), "command queue error": command processing stopped, the reason in
    /// CMDQ_CONS.ERR.
    CommandQueue,
    /// EVENTQ_ABT_ERR (bit 2), "event queue write aborted" (QEMU 7.2 also raises it when the
    /// event queue is full).
    EventQueueAbort,
    /// PRIQ_ABT_ERR (bit 3), "PRI queue write aborted".
    PriQueueAbort,
    /// MSI_CMDQ_ABT_ERR (bit 4), "command queue MSI write aborted".
    CommandQueueMsiAbort,
    /// MSI_EVENTQ_ABT_ERR (bit 5), "event queue MSI write aborted".
    EventQueueMsiAbort,
    /// MSI_PRIQ_ABT_ERR (bit 6), "PRI queue MSI write aborted".
    PriQueueMsiAbort,
    /// MSI_GERROR_ABT_ERR (bit 7), "global error MSI write aborted".
    GlobalErrorMsiAbort,
    /// SFM_ERR (bit 8), "service failure mode": the SMMU stopped translating.
    ServiceFailure,
    /// "global error bit N": a bit this module does not know.
    Other(u8),
}

impl GlobalError {
    /// The error of GERROR bit `bit`.
    pub const fn from_bit(bit: u32) -> Self {
        match bit {
            0 => GlobalError::CommandQueue,
            2 => GlobalError::EventQueueAbort,
            3 => GlobalError::PriQueueAbort,
            4 => GlobalError::CommandQueueMsiAbort,
            5 => GlobalError::EventQueueMsiAbort,
            6 => GlobalError::PriQueueMsiAbort,
            7 => GlobalError::GlobalErrorMsiAbort,
            8 => GlobalError::ServiceFailure,
            other => GlobalError::Other(other as u8),
        }
    }

    /// Its GERROR bit.
    pub const fn bit(self) -> u32 {
        match self {
            GlobalError::CommandQueue => 0,
            GlobalError::EventQueueAbort => 2,
            GlobalError::PriQueueAbort => 3,
            GlobalError::CommandQueueMsiAbort => 4,
            GlobalError::EventQueueMsiAbort => 5,
            GlobalError::PriQueueMsiAbort => 6,
            GlobalError::GlobalErrorMsiAbort => 7,
            GlobalError::ServiceFailure => 8,
            GlobalError::Other(bit) => bit as u32,
        }
    }

    /// The errors active in `gerror` against `gerrorn`, lowest bit first.
    pub fn active(gerror: u32, gerrorn: u32) -> impl Iterator<Item = GlobalError> {
        let active = gerror ^ gerrorn;
        (0..u32::BITS)
            .filter(move |bit| active & (1 << bit) != 0)
            .map(GlobalError::from_bit)
    }
}

impl Show for GlobalError {
    fn show(&self, out: &mut dyn Out) {
        out.put(match self {
            GlobalError::CommandQueue => "command queue error",
            GlobalError::EventQueueAbort => "event queue write aborted",
            GlobalError::PriQueueAbort => "PRI queue write aborted",
            GlobalError::CommandQueueMsiAbort => "command queue MSI write aborted",
            GlobalError::EventQueueMsiAbort => "event queue MSI write aborted",
            GlobalError::PriQueueMsiAbort => "PRI queue MSI write aborted",
            GlobalError::GlobalErrorMsiAbort => "global error MSI write aborted",
            GlobalError::ServiceFailure => "service failure mode",
            GlobalError::Other(bit) => {
                out.put("global error bit ");
                Decimal(u64::from(*bit), 0).show(out);
                return;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ID registers of QEMU 7.2's SMMUv3, as read on the reference machine
    /// (docs/research/device-assignment.md section 2).
    const QEMU_IDR0: u32 = 0x0d40_101a;
    const QEMU_IDR1: u32 = 0x0273_0010;
    const QEMU_IDR5: u32 = 0x0000_0074;

    use crate::text::tests::shown;

    #[test]
    fn offsets_are_the_specs() {
        assert_eq!(
            [IDR0, IDR1, IDR5, CR0, CR0ACK, CR1, CR2, GBPA, IRQ_CTRL],
            [0x0, 0x4, 0x14, 0x20, 0x24, 0x28, 0x2c, 0x44, 0x50]
        );
        assert_eq!(
            [GERROR, GERRORN, STRTAB_BASE, STRTAB_BASE_CFG],
            [0x60, 0x64, 0x80, 0x88]
        );
        assert_eq!(
            [CMDQ_BASE, CMDQ_PROD, CMDQ_CONS, EVENTQ_BASE],
            [0x90, 0x98, 0x9c, 0xa0]
        );
        assert_eq!([EVENTQ_PROD, EVENTQ_CONS], [0x100a8, 0x100ac]);
    }

    #[test]
    fn qemus_id_registers_decode_as_measured() {
        let features = Features::decode(QEMU_IDR0, QEMU_IDR1, QEMU_IDR5);
        assert_eq!(
            features,
            Features {
                stage1: true,
                stage2: false,
                aarch64_tables: true,
                big_endian_only: false,
                coherent: true,
                two_level_stream_table: true,
                asid16: true,
                msi: false,
                abort_only: true,
                stream_id_bits: 16,
                command_queue_log2: 19,
                event_queue_log2: 19,
                output_size: AddressSize::Bits44,
                granule_4k: true,
            }
        );
        assert_eq!(check(&features, 24, 40), Ok(()));
        assert_eq!(check(&features, 0xffff, 44), Ok(()));
    }

    #[test]
    fn check_says_why_an_smmu_cannot_serve() {
        let qemu = Features::decode(QEMU_IDR0, QEMU_IDR1, QEMU_IDR5);
        let without = |idr0_clear: u32, idr5_clear: u32| {
            Features::decode(QEMU_IDR0 & !idr0_clear, QEMU_IDR1, QEMU_IDR5 & !idr5_clear)
        };
        assert_eq!(
            check(&without(idr0::S1P, 0), 8, 40),
            Err(Unsupported::NoTranslation)
        );
        let stage2_only = Features {
            stage2: true,
            ..without(idr0::S1P, 0)
        };
        assert_eq!(check(&stage2_only, 8, 40), Err(Unsupported::NoStage1));
        assert_eq!(
            check(&without(0b10 << 2, 0), 8, 40),
            Err(Unsupported::NoAArch64Tables)
        );
        let big = Features::decode(QEMU_IDR0 | 0b11 << 21, QEMU_IDR1, QEMU_IDR5);
        assert_eq!(check(&big, 8, 40), Err(Unsupported::BigEndianOnly));
        assert_eq!(
            check(&without(0, idr5::GRAN4K), 8, 40),
            Err(Unsupported::No4KGranule)
        );
        let linear_only = without(idr0::ST_LEVEL.mask() as u32, 0);
        assert!(qemu.two_level_stream_table && !linear_only.two_level_stream_table);
        assert_eq!(
            check(&linear_only, 8, 40),
            Err(Unsupported::NoTwoLevelStreamTable)
        );
        assert_eq!(
            shown(&Unsupported::NoTwoLevelStreamTable),
            "the SMMU has no two-level stream tables"
        );
        let narrow = Features {
            stream_id_bits: 4,
            ..qemu
        };
        assert_eq!(check(&narrow, 15, 40), Ok(()));
        let error = check(&narrow, 16, 40).unwrap_err();
        assert_eq!(
            error,
            Unsupported::StreamIdsTooNarrow {
                bits: 4,
                stream: 16
            }
        );
        assert_eq!(
            shown(&error),
            "the SMMU's 4-bit stream IDs cannot name stream 16"
        );
        let error = check(&qemu, 8, 48).unwrap_err();
        assert_eq!(
            shown(&error),
            "the SMMU's 44-bit physical addresses cannot reach Keel's 48-bit ones"
        );
        assert_eq!(error.to_string(), shown(&error));
    }

    #[test]
    fn register_values_put_fields_where_the_spec_says() {
        assert_eq!(strtab_base(0x4100_0000), 1 << 62 | 0x4100_0000);
        assert_eq!(strtab_base_cfg_linear(5), 5);
        // FMT = 0b01 (bits 17:16), SPLIT = 8 (bits 10:6), LOG2SIZE = 16.
        assert_eq!(strtab_base_cfg_two_level(16, 8), 1 << 16 | 8 << 6 | 16);
        assert_eq!(queue_base(0x4200_0000, 4), 1 << 62 | 0x4200_0000 | 4);
        // QUEUE_IC/OC = WB (0b01), QUEUE_SH = inner (0b11), the same for tables.
        assert_eq!(cr1::WRITE_BACK_INNER, 0b11_01_01_11_01_01);
        for bits in [32, 36, 40, 42, 44, 48, 52, 56] {
            let size = (0..8)
                .map(AddressSize::from_field)
                .find(|size| size.bits() == bits)
                .unwrap();
            assert_eq!(AddressSize::from_field(size.field()), size);
        }
    }

    #[test]
    fn global_errors_are_the_bits_that_differ() {
        let active: Vec<_> = GlobalError::active(0b1_0000_0101, 0b1_0000_0000).collect();
        assert_eq!(
            active,
            [GlobalError::CommandQueue, GlobalError::EventQueueAbort]
        );
        assert_eq!(GlobalError::active(0x1fd, 0x1fd).count(), 0);
        for bit in 0..32 {
            assert_eq!(GlobalError::from_bit(bit).bit(), bit);
        }
        assert_eq!(
            shown(&GlobalError::EventQueueAbort),
            "event queue write aborted"
        );
        assert_eq!(shown(&GlobalError::Other(9)), "global error bit 9");
    }
}
