//! Keel's own memory, coloured (`[system] hypervisor_colours`): where its image and data lie
//! in physical memory, and the EL2 stage-1 map (Arm ARM D8, 4 KiB granule, 39-bit walk) that
//! keeps them at the addresses Keel is linked for.
//!
//! Keel is loaded in one physical range and linked for it. A coloured Keel copies its image,
//! data and stacks at boot into the 4 KiB frames of its colours in the upper half of its
//! region, and maps its linked range onto them page by page ([`keel_map`]): the addresses it
//! uses do not change, the physical memory behind them does. What a device or a tool reads by
//! physical address (a translation table, a queue) is then found with [`KeelMap::phys`]; a
//! pool of tables in Keel's image is no longer physically contiguous, so its tables are placed
//! one by one ([`Place`]).
//!
//! An uncoloured Keel has [`KeelMap::IDENTITY`]: every address is its own physical address.

use crate::colour::{Colours, FRAME};
use crate::translation::{Table, Tables, WalkError};
use crate::window::WindowError;

/// Where Keel's coloured range lies: its linked range `[start, start + size)` is the frames of
/// `colours` from `frames` on (page `i` at [`Colours::frame`]`(frames, i)`); every other
/// address is its own physical address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeelMap {
    /// Start of the coloured range, as Keel is linked (4 KiB aligned).
    pub start: u64,
    /// Bytes of the coloured range (whole pages).
    pub size: u64,
    /// The physical base its frames are counted from (aligned to a period of the colours).
    pub frames: u64,
    /// Keel's colours.
    pub colours: Colours,
}

impl KeelMap {
    /// An uncoloured Keel: each address is its physical address.
    pub const IDENTITY: KeelMap = KeelMap {
        start: 0,
        size: 0,
        frames: 0,
        colours: Colours::NONE,
    };

    /// The base of the frames of a Keel coloured `colours` in its region
    /// `[region, region + region_size)`: the first address of the region's upper half aligned
    /// to a period of the colours.
    pub fn frames_base(region: u64, region_size: u64, colours: &Colours) -> u64 {
        (region + region_size / 2).next_multiple_of(colours.period_bytes().max(FRAME))
    }

    /// The physical address of Keel's address `address`.
    #[inline]
    pub fn phys(&self, address: u64) -> u64 {
        let offset = address.wrapping_sub(self.start);
        if offset >= self.size {
            return address;
        }
        match self.colours.frame(self.frames, offset / FRAME) {
            Some(frame) => frame + offset % FRAME,
            None => address,
        }
    }

    /// Keel's address of physical address `phys` ([`Self::phys`] undone): a frame of the
    /// coloured range back at its linked address, any other address as it is.
    pub fn address(&self, phys: u64) -> u64 {
        let count = u64::from(self.colours.count);
        if !self.colours.is_coloured() || phys < self.frames || count == 0 {
            return phys;
        }
        let frame = (phys - self.frames) / FRAME;
        let colour = frame % count;
        if self.colours.mask >> colour & 1 == 0 {
            return phys;
        }
        let below = (self.colours.mask & ((1u64 << colour) - 1)).count_ones();
        let page = frame / count * u64::from(self.colours.len()) + u64::from(below);
        if page >= self.size / FRAME {
            return phys;
        }
        self.start + page * FRAME + phys % FRAME
    }

    /// The physical range the coloured range's frames span from [`Self::frames`].
    pub fn span(&self) -> Option<u64> {
        self.colours.span(self.size)
    }
}

/// Where a pool of translation tables lies: its first table at Keel's address `address`, the
/// rest after it, each table at the physical address `map` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// The pool's address in Keel's address space.
    pub address: u64,
    /// How Keel's addresses map to physical ones.
    pub map: KeelMap,
}

impl Place {
    /// A pool at Keel's address `address`, with Keel's memory as `map` places it.
    pub fn new(address: u64, map: KeelMap) -> Self {
        Self { address, map }
    }

    /// The physical address of the pool's table `index`.
    pub(crate) fn table_phys(&self, index: usize) -> u64 {
        self.map.phys(self.address + index as u64 * FRAME)
    }

    /// The index of the pool's table at physical address `phys`, if it is one of the first
    /// `used`.
    pub(crate) fn table_index(&self, phys: u64, used: usize) -> Option<usize> {
        let offset = self.map.address(phys).checked_sub(self.address)?;
        let index = usize::try_from(offset / FRAME).ok()?;
        (offset.is_multiple_of(FRAME) && index < used).then_some(index)
    }
}

/// A pool that is physically contiguous at `pool_phys` (Keel's address the same).
impl From<u64> for Place {
    fn from(pool_phys: u64) -> Self {
        Self::new(pool_phys, KeelMap::IDENTITY)
    }
}

/// A leaf of Keel's map for RAM: AttrIndx 1 (MAIR_EL2's normal write-back memory), read/write
/// at EL2, inner shareable, accessed, executable (Keel's code is in it).
pub const RAM_LEAF: u64 = (1 << 2) | (0b11 << 8) | (1 << 10);
/// A leaf of Keel's map for devices: AttrIndx 0 (Device-nGnRnE), accessed, never executable.
pub const DEVICE_LEAF: u64 = (1 << 10) | (1 << 54);

/// Builds Keel's EL2 map in `tables` (at `place`): the first `gibs` GiB of the physical space
/// mapped to themselves, each GiB that holds some of RAM `[ram, ram + ram_size)` as normal
/// memory and every other as device memory, except Keel's coloured range, which `image` maps
/// to its frames. Returns the tables; their root is what TTBR0_EL2 takes.
pub fn keel_map<'a>(
    tables: &'a mut [Table],
    place: Place,
    (ram, ram_size): (u64, u64),
    gibs: u64,
    image: &KeelMap,
) -> Result<KeelTables<'a>, WindowError> {
    const GIB: u64 = 1 << 30;
    let mut map = Tables::new(tables, place)?;
    let ram_end = ram.saturating_add(ram_size);
    let (image_start, image_end) = (image.start, image.start + image.size);
    for gib in 0..gibs {
        let (start, end) = (gib * GIB, (gib + 1) * GIB);
        if !(start < ram_end && ram < end) {
            map.map(start, start, GIB, DEVICE_LEAF)?;
            continue;
        }
        if image_end <= start || end <= image_start || image.size == 0 {
            map.map(start, start, GIB, RAM_LEAF)?;
            continue;
        }
        let (before, after) = (image_start.max(start), image_end.min(end));
        map.map(start, start, before - start, RAM_LEAF)?;
        map.map(after, after, end - after, RAM_LEAF)?;
        let offset = before - image_start;
        for page in offset / FRAME..(after - image_start) / FRAME {
            let frame = image
                .colours
                .frame(image.frames, page)
                .ok_or(WalkError::OutOfRange)?;
            map.map(image_start + page * FRAME, frame, FRAME, RAM_LEAF)?;
        }
    }
    Ok(KeelTables(map))
}

/// Keel's EL2 map, as [`keel_map`] built it.
pub struct KeelTables<'a>(Tables<'a>);

impl KeelTables<'_> {
    /// Physical address of the level-1 root table, for TTBR0_EL2.
    pub fn root_phys(&self) -> u64 {
        self.0.root_phys()
    }

    /// Walks the tables like the MMU would: the physical address `address` maps to, if any.
    pub fn translate(&self, address: u64) -> Option<u64> {
        self.0.translate(address)
    }
}

/// The tables [`keel_map`] takes for Keel's coloured range of at most `size` bytes: the root,
/// and the level-2 and level-3 tables of its pages.
pub fn keel_map_tables(size: u64) -> usize {
    1 + Colours::page_tables(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translation::ENTRIES;

    fn keel(colours: &str) -> KeelMap {
        let colours = Colours::parse(colours, 16).unwrap();
        KeelMap {
            start: 0x4020_0000,
            size: 0x10_0000,
            frames: KeelMap::frames_base(0x4000_0000, 32 << 20, &colours),
            colours,
        }
    }

    #[test]
    fn keel_s_pages_are_frames_of_its_colours_in_its_region_s_upper_half() {
        let map = keel("15");
        assert_eq!(map.frames, 0x4100_0000);
        for page in 0..map.size / FRAME {
            let phys = map.phys(map.start + page * FRAME + 0x123);
            assert_eq!((phys >> 12) % 16, 15, "page {page}");
            assert!((0x4100_0000..0x4200_0000).contains(&phys));
            assert_eq!(map.address(phys), map.start + page * FRAME + 0x123);
        }
        assert_eq!(map.phys(map.start - 1), map.start - 1);
        assert_eq!(map.phys(map.start + map.size), map.start + map.size);
        // Frames of other colours, and the frames past the range, are not Keel's pages.
        assert_eq!(map.address(0x4100_0000), 0x4100_0000);
        let past = map.colours.frame(map.frames, map.size / FRAME).unwrap();
        assert_eq!(map.address(past), past);
    }

    #[test]
    fn the_identity_map_changes_nothing() {
        for address in [0, 0x4000_0000, u64::MAX] {
            assert_eq!(KeelMap::IDENTITY.phys(address), address);
            assert_eq!(KeelMap::IDENTITY.address(address), address);
        }
    }

    #[test]
    fn a_pool_in_coloured_memory_finds_its_tables_one_by_one() {
        let map = keel("3,9");
        let place = Place::new(map.start + 0x4000, map);
        for index in 0..8 {
            let phys = place.table_phys(index);
            assert!(phys.is_multiple_of(FRAME) && [3, 9].contains(&((phys >> 12) % 16)));
            assert_eq!(place.table_index(phys, 8), Some(index));
        }
        assert_eq!(place.table_index(place.table_phys(8), 8), None);
        assert_eq!(Place::from(0x1000).table_phys(2), 0x3000);
    }

    #[test]
    fn keel_s_map_puts_its_range_on_its_frames_and_everything_else_on_itself() {
        let map = keel("14-15");
        let mut pool = vec![[0; ENTRIES]; keel_map_tables(32 << 20) + 1];
        let place = Place::new(map.start + 0x8000, map);
        let tables = keel_map(&mut pool, place, (0x4000_0000, 1 << 30), 16, &map).unwrap();
        assert_eq!(tables.root_phys(), map.phys(map.start + 0x8000));
        for address in [
            0x0900_0000,
            0x4000_0000,
            0x401f_f000,
            0x4030_0000,
            0x7fff_f000,
        ] {
            assert_eq!(tables.translate(address), Some(address), "{address:#x}");
        }
        for page in 0..map.size / FRAME {
            let address = map.start + page * FRAME;
            assert_eq!(tables.translate(address + 8), Some(map.phys(address) + 8));
        }
        let (device, _) = tables.0.leaf(0x0900_0000).unwrap();
        let (ram, _) = tables.0.leaf(map.start).unwrap();
        assert_eq!(device & (1 << 54 | 0b111 << 2), 1 << 54);
        assert_eq!(ram & (1 << 54 | 0b111 << 2), 1 << 2);
        assert_eq!(tables.translate(16 << 30), None);
    }
}
