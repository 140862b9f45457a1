//! Stage-2 translation tables (Arm ARM D8, VMSAv8-64, 4 KiB granule) built as plain data.
//!
//! The layout matches `VTCR_EL2.T0SZ = 25` (39-bit IPA space) with `SL0 = 1`: translation
//! starts at a single level-1 table. Blocks of 1 GiB (level 1) and 2 MiB (level 2) are used
//! where address and size are aligned, 4 KiB pages (level 3) elsewhere. The builder only
//! fills arrays; the arch layer installs the root in `VTTBR_EL2`.

use crate::placement::Place;
#[cfg(test)]
use crate::translation::table_index;
pub use crate::translation::{Table, ENTRIES};
use crate::translation::{Tables, WalkError};

/// Size of the IPA space covered (39 bits).
pub const IPA_LIMIT: u64 = crate::translation::INPUT_LIMIT;

/// Stage-2 MemAttr[3:0] (D8.6.5): Normal, outer and inner write-back cacheable.
const MEMATTR_NORMAL_WB: u64 = 0b1111 << 2;
/// Stage-2 MemAttr[3:0]: Device-nGnRE.
const MEMATTR_DEVICE: u64 = 0b0001 << 2;
/// S2AP[1:0] = 0b11: read/write.
const S2AP_RW: u64 = 0b11 << 6;
/// S2AP[1:0] = 0b01: read-only (a write is a stage-2 permission fault).
const S2AP_RO: u64 = 0b01 << 6;
/// S2AP[1:0], both bits.
#[cfg(test)]
const S2AP_MASK: u64 = 0b11 << 6;
/// SH[1:0] = 0b11: inner shareable.
const SH_INNER: u64 = 0b11 << 8;
/// Access flag.
const AF: u64 = 1 << 10;
/// XN[1:0] = 0b10: not executable at EL1 or EL0.
const XN: u64 = 0b10 << 53;

/// What kind of memory a mapping is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// Guest RAM: normal write-back, read/write/execute.
    Normal,
    /// Passthrough device registers: Device-nGnRE, read/write, never executable.
    Device,
    /// A read-only window on shared memory (a channel member with `access = "ro"`): normal
    /// write-back, readable, never executable; a write is a stage-2 permission fault.
    NormalReadOnly,
}

impl MemoryKind {
    fn attributes(self) -> u64 {
        match self {
            MemoryKind::Normal => MEMATTR_NORMAL_WB | S2AP_RW | SH_INNER | AF,
            MemoryKind::Device => MEMATTR_DEVICE | S2AP_RW | AF | XN,
            MemoryKind::NormalReadOnly => MEMATTR_NORMAL_WB | S2AP_RO | SH_INNER | AF | XN,
        }
    }
}

/// Why a mapping could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage2Error {
    /// Address or size is not 4 KiB aligned.
    Unaligned,
    /// The range leaves the 39-bit IPA space.
    OutOfRange,
    /// The table pool is exhausted.
    OutOfTables,
    /// Part of the range is already mapped.
    AlreadyMapped,
}

impl crate::text::Show for Stage2Error {
    fn show(&self, out: &mut dyn crate::text::Out) {
        out.put(match self {
            Stage2Error::Unaligned => "address or size is not 4 KiB aligned",
            Stage2Error::OutOfRange => "range leaves the 39-bit guest-physical space",
            Stage2Error::OutOfTables => "stage-2 table pool exhausted",
            Stage2Error::AlreadyMapped => "range is already mapped",
        })
    }
}

impl core::fmt::Display for Stage2Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        crate::text::fmt(self, f)
    }
}

impl From<WalkError> for Stage2Error {
    fn from(error: WalkError) -> Self {
        match error {
            WalkError::Unaligned => Stage2Error::Unaligned,
            WalkError::OutOfRange => Stage2Error::OutOfRange,
            WalkError::OutOfTables => Stage2Error::OutOfTables,
            WalkError::AlreadyMapped => Stage2Error::AlreadyMapped,
        }
    }
}

/// A VM's stage-2 tables, allocated from a pool of tables placed at `place`.
pub struct Stage2<'a>(Tables<'a>);

impl<'a> Stage2<'a> {
    /// Starts an empty translation (everything faults) in `tables`, whose first table is at
    /// physical address `place` and the rest follow contiguously, or placed in Keel's
    /// coloured memory ([`crate::placement::Place`]).
    pub fn new(tables: &'a mut [Table], place: impl Into<Place>) -> Result<Self, Stage2Error> {
        Ok(Self(Tables::new(tables, place)?))
    }

    /// Physical address of the level-1 root table, for `VTTBR_EL2.BADDR`.
    pub fn root_phys(&self) -> u64 {
        self.0.root_phys()
    }

    /// Number of tables used so far.
    pub fn tables_used(&self) -> usize {
        self.0.tables_used()
    }

    /// Maps `[ipa, ipa + size)` to `[phys, phys + size)`.
    pub fn map(
        &mut self,
        ipa: u64,
        phys: u64,
        size: u64,
        kind: MemoryKind,
    ) -> Result<(), Stage2Error> {
        Ok(self.0.map(ipa, phys, size, kind.attributes())?)
    }

    /// Maps `size` bytes from `ipa` page by page to the frames of `colours` from `base` on: a
    /// coloured VM's RAM ([`crate::colour`]).
    pub fn map_coloured(
        &mut self,
        ipa: u64,
        base: u64,
        size: u64,
        colours: &crate::colour::Colours,
    ) -> Result<(), Stage2Error> {
        Ok(self
            .0
            .map_coloured(ipa, base, size, colours, MemoryKind::Normal.attributes())?)
    }

    /// Walks the tables like the MMU would: the physical address `ipa` maps to, if any.
    pub fn translate(&self, ipa: u64) -> Option<u64> {
        self.0.translate(ipa)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize) -> Vec<Table> {
        vec![[0; ENTRIES]; n]
    }

    #[test]
    fn two_mib_aligned_memory_uses_blocks() {
        let mut tables = pool(4);
        let mut s2 = Stage2::new(&mut tables, 0x4100_0000).unwrap();
        s2.map(0x4000_0000, 0x5000_0000, 16 << 20, MemoryKind::Normal)
            .unwrap();
        assert_eq!(s2.tables_used(), 2, "root + one level-2 table");
        assert_eq!(s2.translate(0x4000_0000), Some(0x5000_0000));
        assert_eq!(s2.translate(0x40ff_ffff), Some(0x50ff_ffff));
        assert_eq!(s2.translate(0x4100_0000), None);
        assert_eq!(s2.translate(0x3fff_ffff), None);
    }

    #[test]
    fn unaligned_edges_use_pages() {
        let mut tables = pool(8);
        let mut s2 = Stage2::new(&mut tables, 0x4100_0000).unwrap();
        s2.map(0x4000_1000, 0x5000_1000, 0x20_2000, MemoryKind::Normal)
            .unwrap();
        assert_eq!(s2.translate(0x4000_0fff), None);
        assert_eq!(s2.translate(0x4000_1000), Some(0x5000_1000));
        assert_eq!(s2.translate(0x4020_2fff), Some(0x5020_2fff));
        assert_eq!(s2.translate(0x4020_3000), None);
    }

    #[test]
    fn coloured_memory_is_mapped_to_its_colours_frames_only() {
        let colours = crate::colour::Colours::parse("4-7", 16).unwrap();
        let size = 4 << 20;
        let mut tables = pool(crate::colour::Colours::page_tables(size) + 1);
        let mut s2 = Stage2::new(&mut tables, 0x1000).unwrap();
        s2.map_coloured(0x4000_0000, 0x8000_0000, size, &colours)
            .unwrap();
        for page in 0..size / 0x1000 {
            let frame = s2.translate(0x4000_0000 + page * 0x1000 + 0x123).unwrap() - 0x123;
            assert_eq!(Some(frame), colours.frame(0x8000_0000, page));
            assert!((4..8).contains(&((frame >> 12) % 16)), "{frame:#x}");
        }
        assert_eq!(s2.translate(0x4000_0000 + size), None);
        assert!(s2.tables_used() <= crate::colour::Colours::page_tables(size) + 1);
        let none = crate::colour::Colours { mask: 0, count: 16 };
        assert_eq!(
            s2.map_coloured(0x6000_0000, 0, 0x1000, &none),
            Err(Stage2Error::OutOfRange)
        );
    }

    #[test]
    fn one_gib_block() {
        let mut tables = pool(2);
        let mut s2 = Stage2::new(&mut tables, 0x1000).unwrap();
        s2.map(0x4000_0000, 0x8000_0000, 1 << 30, MemoryKind::Normal)
            .unwrap();
        assert_eq!(s2.tables_used(), 1);
        assert_eq!(s2.translate(0x7fff_fff0), Some(0xbfff_fff0));
    }

    #[test]
    fn descriptors_carry_normal_and_device_attributes() {
        let mut tables = pool(4);
        {
            let mut s2 = Stage2::new(&mut tables, 0x1000).unwrap();
            s2.map(0x4000_0000, 0x4000_0000, 2 << 20, MemoryKind::Normal)
                .unwrap();
            s2.map(0x0900_0000, 0x0900_0000, 0x1000, MemoryKind::Device)
                .unwrap();
        }
        let l2 = tables[1];
        let normal = l2[0];
        assert_eq!(normal & 0b11, 0b01, "level-2 block");
        assert_eq!(normal & (0xf << 2), 0xf << 2);
        assert_ne!(normal & AF, 0);
        let device_l3 = tables[3][0];
        assert_eq!(device_l3 & 0b11, 0b11, "level-3 page");
        assert_eq!(device_l3 & (0xf << 2), 0b0001 << 2);
        assert_ne!(device_l3 & XN, 0);
        assert_eq!(normal & S2AP_MASK, S2AP_RW);
        assert_eq!(normal & XN, 0);
    }

    #[test]
    fn read_only_windows_are_normal_memory_readable_only_and_never_executable() {
        let mut tables = pool(4);
        {
            let mut s2 = Stage2::new(&mut tables, 0x1000).unwrap();
            s2.map(
                0x7000_0000,
                0x5f00_0000,
                0x1_0000,
                MemoryKind::NormalReadOnly,
            )
            .unwrap();
            s2.map(
                0x7020_0000,
                0x5f00_0000,
                2 << 20,
                MemoryKind::NormalReadOnly,
            )
            .unwrap();
            assert_eq!(s2.translate(0x7000_fffc), Some(0x5f00_fffc));
            assert_eq!(s2.translate(0x7001_0000), None);
            assert_eq!(s2.translate(0x7020_1234), Some(0x5f00_1234));
        }
        let page = tables[2][0];
        let block = tables[1][table_index(0x7020_0000, 2)];
        assert_eq!(page & 0b11, 0b11, "level-3 page");
        assert_eq!(block & 0b11, 0b01, "level-2 block");
        for descriptor in [page, block] {
            assert_eq!(descriptor & (0xf << 2), MEMATTR_NORMAL_WB);
            assert_eq!(descriptor & S2AP_MASK, S2AP_RO);
            assert_eq!(descriptor & SH_INNER, SH_INNER);
            assert_ne!(descriptor & AF, 0);
            assert_ne!(descriptor & XN, 0);
        }
    }

    #[test]
    fn errors() {
        let mut tables = pool(2);
        let mut s2 = Stage2::new(&mut tables, 0x1000).unwrap();
        assert_eq!(
            s2.map(0x10, 0, 0x1000, MemoryKind::Normal),
            Err(Stage2Error::Unaligned)
        );
        assert_eq!(
            s2.map(IPA_LIMIT - 0x1000, 0, 0x2000, MemoryKind::Normal),
            Err(Stage2Error::OutOfRange)
        );
        s2.map(0x4000_0000, 0x4000_0000, 2 << 20, MemoryKind::Normal)
            .unwrap();
        assert_eq!(
            s2.map(0x4000_0000, 0x4000_0000, 0x1000, MemoryKind::Normal),
            Err(Stage2Error::AlreadyMapped)
        );
        assert_eq!(
            s2.map(0x8000_0000, 0x4000_0000, 0x1000, MemoryKind::Normal),
            Err(Stage2Error::OutOfTables)
        );
    }
}
