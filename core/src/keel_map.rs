//! Keel's own EL2 stage-1 map (Arm ARM D8, 4 KiB granule, 39-bit walk) when it is coloured
//! (`[system] hypervisor_colours`).
//!
//! Keel is loaded in one physical range and linked for it. A coloured Keel copies its image,
//! data and stacks at boot into the 4 KiB frames of its colours in the upper half of its
//! region, and maps its linked range onto them page by page ([`keel_map`]): the addresses it
//! uses do not change, the physical memory behind them does ([`crate::placement`]).

use crate::colour::{Colours, FRAME};
use crate::placement::{KeelMap, Place};
use crate::translation::{Table, Tables};
use crate::window::WindowError;

/// A leaf of Keel's map for RAM: AttrIndx 1 (MAIR_EL2's normal write-back memory), read/write
/// at EL2, inner shareable, accessed, executable (Keel's code is in it).
pub const RAM_LEAF: u64 = (1 << 2) | (0b11 << 8) | (1 << 10);
/// A leaf of Keel's map for devices: AttrIndx 0 (Device-nGnRnE), accessed, never executable.
pub const DEVICE_LEAF: u64 = (1 << 10) | (1 << 54);

/// Builds Keel's EL2 map in `tables` (at `place`): the first `gibs` GiB of the physical space
/// mapped to themselves, each GiB that holds some of RAM `[ram, ram + ram_size)` as normal
/// memory and every other as device memory, except Keel's coloured range, which `image` maps
/// to its frames (but for its hole). Returns the tables; their root is what TTBR0_EL2 takes.
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
        // Page by page: each on its frame, the hole's on themselves.
        for address in (before..after).step_by(FRAME as usize) {
            map.map(address, image.phys(address), FRAME, RAM_LEAF)?;
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
pub const fn keel_map_tables(size: u64) -> usize {
    1 + Colours::page_tables(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translation::ENTRIES;

    #[test]
    fn keel_s_map_puts_its_range_on_its_frames_and_everything_else_on_itself() {
        let map = crate::placement::test_keel("14-15");
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
