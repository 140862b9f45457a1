//! The stage-1 context descriptor (IHI 0070 5.4) and the stage-1 tables of a VM's devices.
//!
//! QEMU 7.2's SMMUv3 has no stage 2, so a VM's devices translate through a stage-1 table that
//! maps the VM's IPA space to PA exactly as the VM's stage 2 does: the same 39-bit input
//! (T0SZ = 25), 4 KiB granule, walk from one level-1 table, and the same walk code
//! (`crate::translation`), with stage-1 leaves. The guest never sees these tables; a device
//! it drives reaches exactly the memory its CPUs reach.
//!
//! A CD is 64 bytes, eight little-endian doublewords; field positions below are bits of their
//! doubleword (the spec numbers CD bits from 0 to 511: doubleword 1's bit `b` is `64 + b`).

use super::regs::AddressSize;
use super::Field;
use crate::placement::Place;
use crate::stage2::MemoryKind;
use crate::text::{Out, Show};
use crate::translation::{Table, Tables, WalkError};

/// A CD: eight doublewords.
pub type Cd = [u64; 8];

/// Doubleword 0: `T0SZ[5:0]`, the TTB0 region's size as `64 - bits`.
pub const T0SZ: Field = Field::new(0, 6);
/// Doubleword 0: `TG0[7:6]`, the TTB0 granule: 0b00 = 4 KiB.
pub const TG0: Field = Field::new(6, 2);
/// TG0: 4 KiB.
pub const TG0_4K: u64 = 0b00;
/// Doubleword 0: `IR0[9:8]`, inner cacheability of TTB0 table walks.
pub const IR0: Field = Field::new(8, 2);
/// Doubleword 0: `OR0[11:10]`, outer cacheability of TTB0 table walks.
pub const OR0: Field = Field::new(10, 2);
/// IR0/OR0: write-back, read- and write-allocate.
pub const CACHE_WB: u64 = 0b01;
/// Doubleword 0: `SH0[13:12]`, shareability of TTB0 table walks.
pub const SH0: Field = Field::new(12, 2);
/// SH0: inner shareable.
pub const SHARE_INNER: u64 = 0b11;
/// Doubleword 0: EPD0 (bit 14), no TTB0 walks.
pub const EPD0: u64 = 1 << 14;
/// Doubleword 0: ENDI (bit 15), big-endian tables.
pub const ENDI: u64 = 1 << 15;
/// Doubleword 0: EPD1 (bit 30), no TTB1 walks (Keel's stage 1 has one region).
pub const EPD1: u64 = 1 << 30;
/// Doubleword 0: V (bit 31), the CD is valid.
pub const V: u64 = 1 << 31;
/// Doubleword 0: `IPS[34:32]`, the output address size ([`AddressSize`]).
pub const IPS: Field = Field::new(32, 3);
/// Doubleword 0: AA64 (bit 41), VMSAv8-64 tables.
pub const AA64: u64 = 1 << 41;
/// Doubleword 0: S (bit 44), stall faulting transactions (0: terminate).
pub const S: u64 = 1 << 44;
/// Doubleword 0: R (bit 45), record translation, permission, access and address-size faults
/// as events.
pub const R: u64 = 1 << 45;
/// Doubleword 0: A (bit 46), abort terminated transactions (required when
/// `SMMU_IDR0.TERM_MODEL = 1`, as in QEMU 7.2).
pub const A: u64 = 1 << 46;
/// Doubleword 0: ASET (bit 47), the ASID is the SMMU's own, not shared with a PE (broadcast
/// TLB invalidations leave it alone).
pub const ASET: u64 = 1 << 47;
/// Doubleword 0: `ASID[63:48]`.
pub const ASID: Field = Field::new(48, 16);
/// Doubleword 1: `TTB0[55:4]`, the level-1 table's physical address.
pub const TTB0: Field = Field::new(4, 52);
/// Doubleword 3: MAIR0, the memory attributes AttrIndx selects.
pub const MAIR_DOUBLEWORD: usize = 3;

/// The input space Keel's stage 1 translates: 39 bits, as its stage 2.
pub const INPUT_BITS: u32 = crate::system::IPA_BITS;
/// MAIR attribute 0: Normal, inner and outer write-back non-transient, read/write-allocate.
pub const MAIR_NORMAL_WB: u64 = 0xff;
/// MAIR attribute 1: Device-nGnRE.
pub const MAIR_DEVICE_NGNRE: u64 = 0x04;
/// The CD's MAIR: attribute 0 Normal write-back, attribute 1 Device-nGnRE.
pub const MAIR: u64 = MAIR_NORMAL_WB | MAIR_DEVICE_NGNRE << 8;

/// A stage-1 leaf: `AttrIndx[4:2]`, the MAIR attribute.
pub const ATTR_INDX: Field = Field::new(2, 3);
/// AttrIndx of normal memory.
pub const ATTR_NORMAL: u64 = 0;
/// AttrIndx of device memory.
pub const ATTR_DEVICE: u64 = 1;
/// A stage-1 leaf: `AP[2:1]` at bits `[7:6]`.
pub const AP: Field = Field::new(6, 2);
/// AP = 0b01: read/write at any privilege. `AP[1]` (EL0 access) is set because a device's
/// transaction is usually unprivileged (PCIe without a PASID privilege bit), and an EL1-only
/// page (0b00) would deny it; only SMMUs with `SMMU_IDR1.ATTR_PERMS_OVR` can force
/// transactions privileged (STE.PRIVCFG). QEMU 7.2 checks `AP[2]` only.
pub const AP_READ_WRITE: u64 = 0b01;
/// AP = 0b11: read-only at any privilege (a write is a permission fault).
pub const AP_READ_ONLY: u64 = 0b11;
/// A stage-1 leaf: `SH[9:8]`, shareability.
pub const SH: Field = Field::new(8, 2);
/// SH: inner shareable.
pub const SH_INNER: u64 = 0b11;
/// A stage-1 leaf: the access flag (set: no access flag fault).
pub const AF: u64 = 1 << 10;
/// A stage-1 leaf: nG (0: global, the ASID not part of the match).
pub const NG: u64 = 1 << 11;
/// A stage-1 leaf: PXN, never executable privileged.
pub const PXN: u64 = 1 << 53;
/// A stage-1 leaf: UXN, never executable unprivileged.
pub const UXN: u64 = 1 << 54;

/// The stage-1 leaf attribute bits of `kind`: never executable, access flag set, global.
const fn leaf_attributes(kind: MemoryKind) -> u64 {
    let common = AF | PXN | UXN;
    match kind {
        MemoryKind::Normal => {
            common | ATTR_INDX.put(ATTR_NORMAL) | AP.put(AP_READ_WRITE) | SH.put(SH_INNER)
        }
        MemoryKind::Device => common | ATTR_INDX.put(ATTR_DEVICE) | AP.put(AP_READ_WRITE),
        MemoryKind::NormalReadOnly => {
            common | ATTR_INDX.put(ATTR_NORMAL) | AP.put(AP_READ_ONLY) | SH.put(SH_INNER)
        }
    }
}

/// A VM's devices' stage-1 context: its ASID, its tables and the output size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextDescriptor {
    /// The ASID tagging the SMMU's TLB entries (8 bits unless `Features::asid16`).
    pub asid: u16,
    /// The physical address of the level-1 table ([`Stage1::root_phys`]).
    pub ttb0: u64,
    /// The output address size (IPS): the SMMU's `Features::output_size`.
    pub output_size: AddressSize,
}

impl ContextDescriptor {
    /// The CD: valid, AArch64 tables, a 39-bit TTB0 region (T0SZ = 25) of 4 KiB granule walked
    /// write-back inner shareable, TTB1 disabled, faults recorded (R) and terminated with an
    /// abort (A, no stall), Keel's [`MAIR`].
    pub const fn encode(&self) -> Cd {
        let mut cd = [0; 8];
        cd[0] = T0SZ.put(64 - INPUT_BITS as u64)
            | TG0.put(TG0_4K)
            | IR0.put(CACHE_WB)
            | OR0.put(CACHE_WB)
            | SH0.put(SHARE_INNER)
            | EPD1
            | V
            | IPS.put(self.output_size.field())
            | AA64
            | R
            | A
            | ASET
            | ASID.put(self.asid as u64);
        cd[1] = self.ttb0 & TTB0.mask();
        cd[MAIR_DOUBLEWORD] = MAIR;
        cd
    }

    /// The context `cd` describes, if it is one [`Self::encode`] makes (for the driver's
    /// self-check): `None` otherwise.
    pub fn decode(cd: &Cd) -> Option<Self> {
        let context = Self {
            asid: ASID.get(cd[0]) as u16,
            ttb0: cd[1] & TTB0.mask(),
            output_size: AddressSize::from_field(IPS.get(cd[0])),
        };
        (context.encode() == *cd).then_some(context)
    }
}

/// Why a stage-1 mapping could not be made; each variant's message is its [`Show`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage1Error {
    /// "address or size is not 4 KiB aligned"
    Unaligned,
    /// "range leaves the 39-bit device address space"
    OutOfRange,
    /// "SMMU stage-1 table pool exhausted"
    OutOfTables,
    /// "range is already mapped for the VM's devices"
    AlreadyMapped,
}

impl From<WalkError> for Stage1Error {
    fn from(error: WalkError) -> Self {
        match error {
            WalkError::Unaligned => Stage1Error::Unaligned,
            WalkError::OutOfRange => Stage1Error::OutOfRange,
            WalkError::OutOfTables => Stage1Error::OutOfTables,
            WalkError::AlreadyMapped => Stage1Error::AlreadyMapped,
        }
    }
}

impl Show for Stage1Error {
    fn show(&self, out: &mut dyn Out) {
        out.put(match self {
            Stage1Error::Unaligned => "address or size is not 4 KiB aligned",
            Stage1Error::OutOfRange => "range leaves the 39-bit device address space",
            Stage1Error::OutOfTables => "SMMU stage-1 table pool exhausted",
            Stage1Error::AlreadyMapped => "range is already mapped for the VM's devices",
        })
    }
}

impl core::fmt::Display for Stage1Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        crate::text::fmt(self, f)
    }
}

/// A VM's devices' stage-1 tables, allocated from a pool of tables placed at `place`.
pub struct Stage1<'a>(Tables<'a>);

impl<'a> Stage1<'a> {
    /// Starts an empty translation (every access a translation fault) in `tables`, whose
    /// first table is at physical address `place` and the rest follow contiguously, or placed
    /// in Keel's coloured memory ([`crate::placement::Place`]).
    pub fn new(tables: &'a mut [Table], place: impl Into<Place>) -> Result<Self, Stage1Error> {
        Ok(Self(Tables::new(tables, place)?))
    }

    /// Physical address of the level-1 root table, for [`ContextDescriptor::ttb0`].
    pub fn root_phys(&self) -> u64 {
        self.0.root_phys()
    }

    /// Number of tables used so far.
    pub fn tables_used(&self) -> usize {
        self.0.tables_used()
    }

    /// Maps device addresses `[ipa, ipa + size)` to `[phys, phys + size)`, as the VM's stage 2
    /// maps them: normal memory write-back (AttrIndx 0), device memory Device-nGnRE (AttrIndx
    /// 1), a read-only kind read-only; never executable.
    pub fn map(
        &mut self,
        ipa: u64,
        phys: u64,
        size: u64,
        kind: MemoryKind,
    ) -> Result<(), Stage1Error> {
        Ok(self.0.map(ipa, phys, size, leaf_attributes(kind))?)
    }

    /// Maps `size` bytes of device addresses from `ipa` page by page to the frames of
    /// `colours` from `base` on, normal memory: a coloured VM's RAM ([`crate::colour`]), as
    /// its stage 2 maps it.
    pub fn map_coloured(
        &mut self,
        ipa: u64,
        base: u64,
        size: u64,
        colours: &crate::colour::Colours,
    ) -> Result<(), Stage1Error> {
        let attributes = leaf_attributes(MemoryKind::Normal);
        Ok(self.0.map_coloured(ipa, base, size, colours, attributes)?)
    }

    /// The physical address `ipa` maps to, if any.
    pub fn translate(&self, ipa: u64) -> Option<u64> {
        self.0.translate(ipa)
    }

    /// The leaf descriptor that maps `ipa`, if any (for the driver's self-check and tests).
    pub fn descriptor(&self, ipa: u64) -> Option<u64> {
        self.0.leaf(ipa).map(|(entry, _)| entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translation::ENTRIES;

    /// An access a device makes.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Access {
        Read,
        Write,
    }

    /// What the SMMU would do with `access` at `input` through the CD `cd` and the tables of
    /// `pool` (at `pool_phys`): the physical address and AttrIndx, or the fault. Written from
    /// the architecture, apart from the builder's walk: an unprivileged data access.
    fn smmu_walk(
        cd: &Cd,
        pool: &[Table],
        pool_phys: u64,
        input: u64,
        access: Access,
    ) -> Result<(u64, u64), &'static str> {
        assert_ne!(cd[0] & V, 0);
        assert_ne!(cd[0] & AA64, 0);
        assert_eq!(TG0.get(cd[0]), TG0_4K);
        let bits = 64 - T0SZ.get(cd[0]);
        if input >> bits != 0 {
            return Err("translation fault (outside T0SZ)");
        }
        // 4 KiB granule: level 0 covers bits 47:39, so a 39-bit input starts at level 1.
        assert_eq!(bits, 39);
        let mut table = TTB0.get(cd[1]) << 4;
        for level in 1..=3u32 {
            let shift = 12 + 9 * (3 - level);
            let index = ((input >> shift) & 0x1ff) as usize;
            let pool_index = ((table - pool_phys) / 4096) as usize;
            let entry = pool[pool_index][index];
            if entry & 1 == 0 {
                return Err("translation fault");
            }
            let address = entry & 0x0000_ffff_ffff_f000;
            if level == 3 || entry & 0b10 == 0 {
                assert!(
                    level != 3 || entry & 0b10 != 0,
                    "a level-3 block is reserved"
                );
                if entry & AF == 0 {
                    return Err("access fault");
                }
                let ap = AP.get(entry);
                if ap & 0b01 == 0 {
                    return Err("permission fault (unprivileged)");
                }
                if access == Access::Write && ap & 0b10 != 0 {
                    return Err("permission fault (read-only)");
                }
                let size = 1u64 << shift;
                return Ok((
                    (address & !(size - 1)) | (input & (size - 1)),
                    ATTR_INDX.get(entry),
                ));
            }
            table = address;
        }
        unreachable!()
    }

    fn pool(n: usize) -> Vec<Table> {
        vec![[0; ENTRIES]; n]
    }

    #[test]
    fn the_cd_puts_its_fields_where_the_spec_says() {
        let context = ContextDescriptor {
            asid: 0x1234,
            ttb0: 0x4500_0000,
            output_size: AddressSize::Bits44,
        };
        let cd = context.encode();
        assert_eq!(cd[0] & 0x3f, 25, "T0SZ");
        assert_eq!(cd[0] >> 6 & 0b11, 0b00, "TG0 = 4K");
        assert_eq!(cd[0] >> 8 & 0b11, 0b01, "IR0 = WB");
        assert_eq!(cd[0] >> 10 & 0b11, 0b01, "OR0 = WB");
        assert_eq!(cd[0] >> 12 & 0b11, 0b11, "SH0 = inner");
        assert_eq!(cd[0] >> 14 & 1, 0, "EPD0");
        assert_eq!(cd[0] >> 30 & 1, 1, "EPD1");
        assert_eq!(cd[0] >> 31 & 1, 1, "V");
        assert_eq!(cd[0] >> 32 & 0b111, 0b100, "IPS = 44 bits");
        assert_eq!(cd[0] >> 41 & 1, 1, "AA64");
        assert_eq!(cd[0] >> 44 & 1, 0, "S");
        assert_eq!(cd[0] >> 45 & 1, 1, "R");
        assert_eq!(cd[0] >> 46 & 1, 1, "A");
        assert_eq!(cd[0] >> 48, 0x1234, "ASID");
        assert_eq!(cd[1], 0x4500_0000, "TTB0");
        assert_eq!(cd[3], 0x04ff, "MAIR: Device-nGnRE, Normal WB");
        assert_eq!([cd[2], cd[4], cd[5], cd[6], cd[7]], [0; 5]);
        assert_eq!(ContextDescriptor::decode(&cd), Some(context));
        let mut invalid = cd;
        invalid[0] &= !V;
        assert_eq!(ContextDescriptor::decode(&invalid), None);
        assert_eq!(ContextDescriptor::decode(&[0; 8]), None);
    }

    #[test]
    fn the_smmu_walks_blocks_and_pages_to_the_vms_physical_memory() {
        let pool_phys = 0x4800_0000;
        let mut tables = pool(8);
        let root = {
            let mut s1 = Stage1::new(&mut tables, pool_phys).unwrap();
            // 1 GiB block, 2 MiB blocks, and pages at unaligned edges.
            s1.map(0x8000_0000, 0x1_0000_0000, 1 << 30, MemoryKind::Normal)
                .unwrap();
            s1.map(0x4000_0000, 0x5000_0000, 4 << 20, MemoryKind::Normal)
                .unwrap();
            s1.map(0x4060_1000, 0x5060_1000, 0x2000, MemoryKind::Normal)
                .unwrap();
            s1.map(0x1000_0000, 0x1000_0000, 0x1000, MemoryKind::Device)
                .unwrap();
            s1.map(0x7000_0000, 0x5f00_0000, 0x1000, MemoryKind::NormalReadOnly)
                .unwrap();
            assert_eq!(s1.translate(0xbfff_fffc), Some(0x1_3fff_fffc));
            assert_eq!(s1.translate(0x4060_2abc), Some(0x5060_2abc));
            assert_eq!(s1.translate(0x4060_3000), None);
            s1.root_phys()
        };
        let cd = ContextDescriptor {
            asid: 1,
            ttb0: root,
            output_size: AddressSize::Bits44,
        }
        .encode();
        let walk = |input, access| smmu_walk(&cd, &tables, pool_phys, input, access);
        assert_eq!(walk(0x8000_0000, Access::Read), Ok((0x1_0000_0000, 0)));
        assert_eq!(walk(0xbfff_fff8, Access::Write), Ok((0x1_3fff_fff8, 0)));
        assert_eq!(walk(0x4010_0000, Access::Read), Ok((0x5010_0000, 0)));
        assert_eq!(walk(0x403f_ffff, Access::Write), Ok((0x503f_ffff, 0)));
        assert_eq!(walk(0x4060_1004, Access::Read), Ok((0x5060_1004, 0)));
        assert_eq!(walk(0x4060_0000, Access::Read), Err("translation fault"));
        assert_eq!(walk(0x1000_0010, Access::Write), Ok((0x1000_0010, 1)));
        assert_eq!(walk(0x7000_0008, Access::Read), Ok((0x5f00_0008, 0)));
        assert_eq!(
            walk(0x7000_0008, Access::Write),
            Err("permission fault (read-only)")
        );
        assert_eq!(walk(0, Access::Read), Err("translation fault"));
        assert_eq!(
            walk(1 << 39, Access::Read),
            Err("translation fault (outside T0SZ)")
        );
    }

    #[test]
    fn a_coloured_vms_dma_walks_to_the_frames_of_its_colours_only() {
        let pool_phys = 0x4800_0000;
        let colours = crate::colour::Colours::parse("4-5", 16).unwrap();
        let mut tables = pool(8);
        let size = 1 << 20;
        let root = {
            let mut s1 = Stage1::new(&mut tables, pool_phys).unwrap();
            s1.map_coloured(0x4000_0000, 0x5000_0000, size, &colours)
                .unwrap();
            s1.root_phys()
        };
        let cd = ContextDescriptor {
            asid: 1,
            ttb0: root,
            output_size: AddressSize::Bits44,
        }
        .encode();
        for page in 0..size / 4096 {
            let input = 0x4000_0000 + page * 4096 + 0x40;
            let (phys, attr) = smmu_walk(&cd, &tables, pool_phys, input, Access::Write).unwrap();
            assert_eq!(phys, colours.frame(0x5000_0000, page).unwrap() + 0x40);
            assert_eq!((phys >> 12 & 15, attr), (4 + page % 2, 0));
        }
        assert_eq!(
            smmu_walk(&cd, &tables, pool_phys, 0x4000_0000 + size, Access::Read),
            Err("translation fault")
        );
    }

    #[test]
    fn leaves_carry_normal_device_and_read_only_attributes() {
        let mut tables = pool(6);
        let mut s1 = Stage1::new(&mut tables, 0x1000).unwrap();
        s1.map(0x4000_0000, 0x4000_0000, 2 << 20, MemoryKind::Normal)
            .unwrap();
        s1.map(0x0900_0000, 0x0900_0000, 0x1000, MemoryKind::Device)
            .unwrap();
        s1.map(0x7000_0000, 0x5f00_0000, 0x1000, MemoryKind::NormalReadOnly)
            .unwrap();
        let normal = s1.descriptor(0x4000_0000).unwrap();
        let device = s1.descriptor(0x0900_0000).unwrap();
        let read_only = s1.descriptor(0x7000_0000).unwrap();
        assert_eq!(normal & 0b11, 0b01, "level-2 block");
        assert_eq!(device & 0b11, 0b11, "level-3 page");
        assert_eq!(normal >> 2 & 0b111, 0, "AttrIndx 0: normal");
        assert_eq!(device >> 2 & 0b111, 1, "AttrIndx 1: device");
        assert_eq!(normal >> 6 & 0b11, 0b01, "AP: read/write");
        assert_eq!(device >> 6 & 0b11, 0b01, "AP: read/write");
        assert_eq!(read_only >> 6 & 0b11, 0b11, "AP: read-only");
        assert_eq!(normal >> 8 & 0b11, 0b11, "SH: inner");
        for descriptor in [normal, device, read_only] {
            assert_ne!(descriptor & 1 << 10, 0, "AF");
            assert_eq!(descriptor & 1 << 11, 0, "nG = 0");
            assert_eq!(descriptor >> 53 & 0b11, 0b11, "PXN and UXN");
        }
    }

    #[test]
    fn errors() {
        let mut tables = pool(2);
        let mut s1 = Stage1::new(&mut tables, 0x1000).unwrap();
        assert_eq!(
            s1.map(0x10, 0, 0x1000, MemoryKind::Normal),
            Err(Stage1Error::Unaligned)
        );
        assert_eq!(
            s1.map((1 << 39) - 0x1000, 0, 0x2000, MemoryKind::Normal),
            Err(Stage1Error::OutOfRange)
        );
        s1.map(0x4000_0000, 0x4000_0000, 1 << 30, MemoryKind::Normal)
            .unwrap();
        assert_eq!(
            s1.map(0x4000_0000, 0x4000_0000, 0x1000, MemoryKind::Normal),
            Err(Stage1Error::AlreadyMapped)
        );
        assert_eq!(
            s1.map(0x8000_0000, 0, 0x1000, MemoryKind::Normal),
            Err(Stage1Error::OutOfTables)
        );
        assert_eq!(
            Stage1Error::OutOfTables.to_string(),
            "SMMU stage-1 table pool exhausted"
        );
        assert!(Stage1::new(&mut [], 0).is_err());
    }
}
