//! Coloured memory (`keel_core::colour`): Keel's windows on the coloured VMs' RAM
//! (`keel_core::window`), which give Keel each coloured VM's RAM in guest order (their stage 2
//! and SMMU maps, page by page, take their tables from `tables`); and Keel's own image and
//! data, copied at boot to the frames of its colours (`keel_core::keel_map`). The pools are
//! sized by the configuration compiler (`COLOURED_TABLES`, `KEEL_COLOURS` and `KEEL_REGION`),
//! and empty when nothing is coloured.
//!
//! Ownership: the primary pCPU builds everything here at boot, before any other pCPU runs;
//! afterwards the window starts are only read.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use keel_core::keel_map::{keel_map, keel_map_tables};
use keel_core::placement::{KeelFitError, KeelMap, Place};
use keel_core::stage2::{Table, ENTRIES};
use keel_core::system::{VmDesc, MAX_VMS};
use keel_core::text::{Out, Show};
use keel_core::window::{WindowError, Windows, WINDOWS_START};

use crate::arch::{boot, mmu};
use crate::config::{COLOURED_TABLES, KEEL_COLOURS, KEEL_REGION, SYSTEM};

/// Tables of the windows: a level-1 table, then the coloured VMs' tables.
const WINDOW_TABLES: usize = if COLOURED_TABLES == 0 {
    0
} else {
    1 + COLOURED_TABLES
};

#[repr(C, align(4096))]
struct Pool<const N: usize>(UnsafeCell<[Table; N]>);

// SAFETY: the window pool is written only by the primary pCPU in `build_windows`, and Keel's
// only by it in `colour_keel`, before any other pCPU runs (`BUILT`, `KEEL_COLOURED`);
// afterwards only the MMUs read them.
unsafe impl<const N: usize> Sync for Pool<N> {}

/// Tables of a coloured Keel's own map: its coloured range is at most half its region.
const KEEL_TABLES: usize = if KEEL_COLOURS.is_coloured() {
    keel_map_tables(KEEL_REGION.1 / 2)
} else {
    0
};

static KEEL_POOL: Pool<KEEL_TABLES> = Pool(UnsafeCell::new([[0; ENTRIES]; KEEL_TABLES]));
static KEEL_COLOURED: AtomicBool = AtomicBool::new(false);
static WINDOW_POOL: Pool<WINDOW_TABLES> = Pool(UnsafeCell::new([[0; ENTRIES]; WINDOW_TABLES]));
static BUILT: AtomicBool = AtomicBool::new(false);
/// Each coloured VM's window start in Keel's address space (0: not coloured).
static WINDOW: [AtomicU64; MAX_VMS] = [const { AtomicU64::new(0) }; MAX_VMS];

/// Maps every coloured VM's RAM into Keel's windows and hooks them into Keel's EL2 table. Once,
/// on the primary pCPU, with its MMU on and no other pCPU running.
pub fn build_windows() -> Result<(), WindowError> {
    if COLOURED_TABLES == 0 || BUILT.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    // SAFETY: BUILT makes this the only reference to the window pool ever created.
    let tables: &'static mut [Table; WINDOW_TABLES] = unsafe { &mut *WINDOW_POOL.0.get() };
    let place = mmu::place(tables.as_ptr() as u64);
    let mut windows = Windows::new(tables, place)?;
    for (id, desc) in SYSTEM.vms.iter().enumerate() {
        if desc.colours.is_coloured() {
            let start = windows.add(desc.memory.phys.0, desc.memory.size, &desc.colours)?;
            if let Some(slot) = WINDOW.get(id) {
                slot.store(start, Ordering::Relaxed);
            }
        }
    }
    mmu::attach(windows.root(), (WINDOWS_START >> 30) as usize);
    Ok(())
}

/// Where Keel's window on coloured VM `desc`'s RAM starts: its guest address `memory.ipa + x`
/// is Keel's `start + x`. None for a VM that is not coloured.
#[inline]
pub fn window(desc: &VmDesc) -> Option<u64> {
    let start = WINDOW.get(usize::from(desc.id.0))?.load(Ordering::Relaxed);
    (start != 0).then_some(start)
}

/// Why Keel could not follow its colours (`[system] hypervisor_colours`).
#[derive(Clone, Copy, Debug)]
pub enum KeelColourError {
    /// It does not fit its region.
    Fit(KeelFitError),
    /// Its map could not be built.
    Map(WindowError),
}

impl Show for KeelColourError {
    fn show(&self, out: &mut dyn Out) {
        match self {
            KeelColourError::Fit(error) => error.show(out),
            KeelColourError::Map(error) => error.show(out),
        }
    }
}

/// Copies Keel's image, data and stacks to the frames of its colours and switches to its
/// coloured map, if Keel is coloured; returns the map (None for an uncoloured Keel). Once, on
/// the primary pCPU with its MMU on, interrupts masked and no other pCPU running: everything
/// Keel wrote so far is copied with it.
pub fn colour_keel() -> Result<Option<KeelMap>, KeelColourError> {
    if !KEEL_COLOURS.is_coloured() || KEEL_COLOURED.swap(true, Ordering::AcqRel) {
        return Ok(None);
    }
    let map = KeelMap::coloured(&boot::keel_image(), KEEL_REGION, KEEL_COLOURS)
        .map_err(KeelColourError::Fit)?;
    // SAFETY: KEEL_COLOURED makes this the only reference to Keel's pool ever created.
    let tables: &'static mut [Table; KEEL_TABLES] = unsafe { &mut *KEEL_POOL.0.get() };
    let address = tables.as_ptr() as u64;
    let built = keel_map(
        tables,
        Place::new(address, map),
        (SYSTEM.ram_base.0, SYSTEM.ram_size),
        mmu::MAPPED_GIBS,
        &map,
    )
    .map_err(KeelColourError::Map)?;
    // SAFETY: per this function's contract, only this pCPU runs, with interrupts masked and
    // the identity map on; `built` maps everything the identity map did, Keel's range on the
    // frames `map` names, which lie in the upper half of Keel's own region (checked above),
    // where nothing else is.
    unsafe { mmu::switch_to_coloured(&map, address, built.root_phys()) };
    Ok(Some(map))
}
