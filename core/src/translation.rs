//! VMSAv8-64 translation tables as plain data: the walk stage 2 and the SMMU's stage 1 share.
//!
//! Arm ARM D8, 4 KiB granule, a 39-bit input space translated from a single level-1 table,
//! as [`crate::stage2`] and [`crate::smmu`] both use it. Stage-1 and stage-2 tables differ
//! only in a leaf's attribute bits: the valid, table/page and address bits of every
//! descriptor, and the whole of a table descriptor, are the same (D8.3). Each builder gives
//! [`Tables::map`] the attribute bits of its leaves; the walk, the choice of 1 GiB / 2 MiB
//! blocks or 4 KiB pages and the table pool are here.

use crate::placement::Place;
use crate::table::{at, at_mut};

/// Entries per table (4 KiB granule).
pub const ENTRIES: usize = 512;
/// A translation table.
pub type Table = [u64; ENTRIES];
/// Size of the input address space covered (39 bits).
pub const INPUT_LIMIT: u64 = 1 << crate::system::IPA_BITS;

/// Bytes in a page (and a table).
pub(crate) const PAGE: u64 = 1 << 12;
/// Bit 0: the descriptor is valid.
pub(crate) const VALID: u64 = 1 << 0;
/// Bit 1: table (levels 1-2) or page (level 3) descriptor; clear for a block.
pub(crate) const TABLE_OR_PAGE: u64 = 1 << 1;
/// Output address bits [47:12] of a descriptor.
pub(crate) const ADDRESS_MASK: u64 = 0x0000_ffff_ffff_f000;

/// Why a mapping could not be made (each builder gives these its own error and message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WalkError {
    /// Address or size is not 4 KiB aligned.
    Unaligned,
    /// The range leaves the 39-bit input space, or the output address space.
    OutOfRange,
    /// The table pool is exhausted.
    OutOfTables,
    /// Part of the range is already mapped.
    AlreadyMapped,
}

/// Translation tables allocated from a pool of tables placed at `place`; the first table is
/// the level-1 root.
pub(crate) struct Tables<'a> {
    tables: &'a mut [Table],
    place: Place,
    used: usize,
}

impl<'a> Tables<'a> {
    /// Starts an empty translation (everything faults) in `tables`, placed at `place` (a
    /// physical address: the pool is contiguous there).
    pub(crate) fn new(tables: &'a mut [Table], place: impl Into<Place>) -> Result<Self, WalkError> {
        let root = tables.first_mut().ok_or(WalkError::OutOfTables)?;
        *root = [0; ENTRIES];
        Ok(Self {
            tables,
            place: place.into(),
            used: 1,
        })
    }

    /// Physical address of the level-1 root table.
    pub(crate) fn root_phys(&self) -> u64 {
        self.place.table_phys(0)
    }

    /// The level-1 root table.
    pub(crate) fn root(&self) -> &Table {
        at(self.tables, 0)
    }

    /// Number of tables used so far.
    pub(crate) fn tables_used(&self) -> usize {
        self.used
    }

    /// Maps `[input, input + size)` to `[phys, phys + size)` with leaves carrying
    /// `attributes` (every bit of a leaf but the valid, table/page and address bits).
    pub(crate) fn map(
        &mut self,
        input: u64,
        phys: u64,
        size: u64,
        attributes: u64,
    ) -> Result<(), WalkError> {
        if !input.is_multiple_of(PAGE) || !phys.is_multiple_of(PAGE) || !size.is_multiple_of(PAGE) {
            return Err(WalkError::Unaligned);
        }
        let end = input.checked_add(size).ok_or(WalkError::OutOfRange)?;
        if end > INPUT_LIMIT
            || phys
                .checked_add(size)
                .is_none_or(|e| e > ADDRESS_MASK + PAGE)
        {
            return Err(WalkError::OutOfRange);
        }
        let (mut input, mut phys, mut left) = (input, phys, size);
        while left > 0 {
            let level = [1usize, 2, 3]
                .into_iter()
                .find(|&level| {
                    let block = level_size(level);
                    input % block == 0 && phys % block == 0 && left >= block
                })
                .unwrap_or(3);
            self.map_one(input, phys, level, attributes)?;
            let step = level_size(level);
            input += step;
            phys += step;
            left -= step;
        }
        Ok(())
    }

    /// Maps `size` bytes from `input` page by page to the frames of `colours` from `base` on
    /// (page `i` to [`Colours::frame`]`(base, i)`), with leaves carrying `attributes`.
    pub(crate) fn map_coloured(
        &mut self,
        input: u64,
        base: u64,
        size: u64,
        colours: &crate::colour::Colours,
        attributes: u64,
    ) -> Result<(), WalkError> {
        if !size.is_multiple_of(PAGE) {
            return Err(WalkError::Unaligned);
        }
        for page in 0..size / PAGE {
            let frame = colours.frame(base, page).ok_or(WalkError::OutOfRange)?;
            self.map(input + page * PAGE, frame, PAGE, attributes)?;
        }
        Ok(())
    }

    fn map_one(
        &mut self,
        input: u64,
        phys: u64,
        level: usize,
        attributes: u64,
    ) -> Result<(), WalkError> {
        let mut table = 0;
        for walk_level in 1..level {
            let index = table_index(input, walk_level);
            let entry = at(self.tables, table)[index];
            table = if entry & VALID == 0 {
                let next = self.allocate()?;
                at_mut(self.tables, table)[index] = self.table_phys(next) | TABLE_OR_PAGE | VALID;
                next
            } else if entry & TABLE_OR_PAGE != 0 {
                self.table_of(entry)?
            } else {
                return Err(WalkError::AlreadyMapped);
            };
        }
        let index = table_index(input, level);
        if at(self.tables, table)[index] & VALID != 0 {
            return Err(WalkError::AlreadyMapped);
        }
        let kind_bit = if level == 3 { TABLE_OR_PAGE } else { 0 };
        at_mut(self.tables, table)[index] = (phys & ADDRESS_MASK) | attributes | kind_bit | VALID;
        Ok(())
    }

    /// Walks the tables like the MMU would: the leaf descriptor that maps `input` and the
    /// level it was found at, if any.
    pub(crate) fn leaf(&self, input: u64) -> Option<(u64, usize)> {
        let mut table = 0;
        for level in 1..=3 {
            let entry = at(self.tables, table)[table_index(input, level)];
            if entry & VALID == 0 {
                return None;
            }
            if level == 3 || entry & TABLE_OR_PAGE == 0 {
                return Some((entry, level));
            }
            table = self.table_of(entry).ok()?;
        }
        None
    }

    /// The physical address `input` maps to, if any.
    pub(crate) fn translate(&self, input: u64) -> Option<u64> {
        let (entry, level) = self.leaf(input)?;
        let offset = input & (level_size(level) - 1);
        Some((entry & ADDRESS_MASK & !(level_size(level) - 1)) + offset)
    }

    fn allocate(&mut self) -> Result<usize, WalkError> {
        let index = self.used;
        let table = self.tables.get_mut(index).ok_or(WalkError::OutOfTables)?;
        *table = [0; ENTRIES];
        self.used += 1;
        Ok(index)
    }

    fn table_phys(&self, index: usize) -> u64 {
        self.place.table_phys(index)
    }

    fn table_of(&self, entry: u64) -> Result<usize, WalkError> {
        self.place
            .table_index(entry & ADDRESS_MASK, self.used)
            .ok_or(WalkError::OutOfRange)
    }
}

/// Bytes covered by one entry at `level` (1: 1 GiB, 2: 2 MiB, 3: 4 KiB).
pub(crate) const fn level_size(level: usize) -> u64 {
    1 << (12 + 9 * (3 - level))
}

/// The index of `input`'s entry in its table at `level`.
pub(crate) fn table_index(input: u64, level: usize) -> usize {
    ((input >> (12 + 9 * (3 - level))) & 0x1ff) as usize
}
