//! Keel's windows on coloured VMs' RAM: EL2 stage-1 tables (Arm ARM D8, 4 KiB granule, the
//! same 39-bit walk as stage 2) that map each coloured VM's frames, scattered over physical
//! memory, at consecutive addresses of Keel's own address space.
//!
//! Keel reaches guest memory as one byte slice per access (loading an image, copying a
//! message). A coloured VM's guest pages are frames of its colours ([`crate::colour`]), so
//! consecutive guest pages are not consecutive physical pages. Keel's window puts them back in
//! guest order: window address `start + offset` is the VM's guest address `ipa + offset`. The
//! arch layer hooks the windows' level-1 entries into Keel's EL2 table.

use crate::colour::Colours;
use crate::placement::Place;
use crate::translation::{Table, Tables, WalkError};

/// Where the windows start in Keel's address space: the upper half of the 39-bit space (the
/// lower holds the identity map of the physical space Keel uses).
pub const WINDOWS_START: u64 = 1 << 38;

/// Bytes of Keel's address space the windows may take.
pub const WINDOWS_SIZE: u64 = 1 << 38;

/// A leaf of Keel's stage 1 for guest RAM: AttrIndx 1 (MAIR_EL2's normal write-back memory),
/// read/write at EL2 (AP 00), inner shareable, accessed, never executable.
const LEAF: u64 = (1 << 2) | (0b11 << 8) | (1 << 10) | (1 << 54);

/// Why a window could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowError {
    /// The windows would leave their part of Keel's address space.
    OutOfRoom,
    /// The table pool is exhausted.
    OutOfTables,
    /// A size that is not whole pages, an empty colour set, or a frame beyond the output
    /// address space.
    BadMemory,
}

impl crate::text::Show for WindowError {
    fn show(&self, out: &mut dyn crate::text::Out) {
        out.put(match self {
            WindowError::OutOfRoom => "the coloured VMs' windows exceed Keel's address space",
            WindowError::OutOfTables => "window table pool exhausted",
            WindowError::BadMemory => "coloured memory that cannot be mapped",
        })
    }
}

impl From<WalkError> for WindowError {
    fn from(error: WalkError) -> Self {
        match error {
            WalkError::OutOfTables => WindowError::OutOfTables,
            WalkError::OutOfRange | WalkError::Unaligned | WalkError::AlreadyMapped => {
                WindowError::BadMemory
            }
        }
    }
}

/// The windows of all coloured VMs, built in a pool of tables; the first table is a level-1
/// table whose entries from [`WINDOWS_START`] on are to be copied into Keel's own.
pub struct Windows<'a> {
    tables: Tables<'a>,
    next: u64,
}

impl<'a> Windows<'a> {
    /// Starts with no window, in `tables`, whose first table is at physical address
    /// `place` and the rest follow contiguously, or placed in Keel's coloured memory
    /// ([`crate::placement::Place`]).
    pub fn new(tables: &'a mut [Table], place: impl Into<Place>) -> Result<Self, WindowError> {
        Ok(Self {
            tables: Tables::new(tables, place)?,
            next: WINDOWS_START,
        })
    }

    /// Maps `size` bytes of memory coloured `colours` from physical `base` at the next free
    /// window (each window starts on a GiB, so that none shares a level-1 entry with another);
    /// returns the window's start.
    pub fn add(&mut self, base: u64, size: u64, colours: &Colours) -> Result<u64, WindowError> {
        let start = self.next;
        let end = start
            .checked_add(size.next_multiple_of(1 << 30))
            .ok_or(WindowError::OutOfRoom)?;
        if end > WINDOWS_START + WINDOWS_SIZE {
            return Err(WindowError::OutOfRoom);
        }
        self.tables.map_coloured(start, base, size, colours, LEAF)?;
        self.next = end;
        Ok(start)
    }

    /// The level-1 table: its entries from index `WINDOWS_START >> 30` on describe the windows.
    pub fn root(&self) -> &Table {
        self.tables.root()
    }

    /// Walks the tables like the MMU would: the physical address window address `address` maps
    /// to, if any.
    pub fn translate(&self, address: u64) -> Option<u64> {
        self.tables.translate(address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translation::ENTRIES;

    #[test]
    fn a_window_puts_a_coloured_vms_frames_in_guest_order() {
        let size = 2 << 20;
        let a = Colours::parse("0-1", 16).unwrap();
        let b = Colours::parse("8-15", 16).unwrap();
        let mut pool = vec![[0; ENTRIES]; 1 + 2 * Colours::page_tables(size)];
        let mut windows = Windows::new(&mut pool, 0x10_0000).unwrap();
        let first = windows.add(0x4000_0000, size, &a).unwrap();
        let second = windows.add(0x4000_0000, size, &b).unwrap();
        assert_eq!((first, second), (WINDOWS_START, WINDOWS_START + (1 << 30)));
        for page in 0..size / 4096 {
            let at = page * 4096 + 0x10;
            assert_eq!(
                windows.translate(first + at),
                a.frame(0x4000_0000, page).map(|frame| frame + 0x10)
            );
            assert_eq!(
                windows.translate(second + at),
                b.frame(0x4000_0000, page).map(|frame| frame + 0x10)
            );
        }
        assert_eq!(windows.translate(first + size), None);
        let root = windows.root();
        assert!(root[..(WINDOWS_START >> 30) as usize]
            .iter()
            .all(|&e| e == 0));
        assert_ne!(root[(WINDOWS_START >> 30) as usize], 0);
    }

    #[test]
    fn windows_beyond_the_space_or_the_pool_are_refused() {
        let colours = Colours::parse("0", 16).unwrap();
        let mut pool = vec![[0; ENTRIES]; 3];
        let mut windows = Windows::new(&mut pool, 0x10_0000).unwrap();
        assert_eq!(
            windows.add(0, WINDOWS_SIZE + 4096, &colours),
            Err(WindowError::OutOfRoom)
        );
        assert_eq!(
            windows.add(0, 4 << 20, &colours),
            Err(WindowError::OutOfTables)
        );
    }
}
