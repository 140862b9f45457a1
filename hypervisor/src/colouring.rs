//! Coloured memory (`keel_core::colour`): coloured VMs' RAM, with the tables of their stage-2
//! maps, page by page, and Keel's windows on their RAM (`keel_core::window`), which give Keel
//! each coloured VM's RAM in guest order; and Keel's own image and data, copied at boot to the
//! frames of its colours (`keel_core::keel_map`). The pools are sized by the configuration
//! compiler (`COLOURED_TABLES`, `KEEL_COLOURS` and `KEEL_REGION`), and empty when nothing is
//! coloured.
//!
//! Ownership: the primary pCPU builds everything here at boot, before any other pCPU runs;
//! afterwards the window starts are only read, and each VM's stage-2 slice is handed out once.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use keel_core::colour::Colours;
use keel_core::keel_map::{keel_map, keel_map_tables};
use keel_core::placement::{KeelFitError, KeelMap, Place};
use keel_core::stage2::{Stage2, Table, ENTRIES};
use keel_core::system::{VmDesc, MAX_VMS};
use keel_core::text::{Out, Show};
use keel_core::window::{WindowError, Windows, WINDOWS_START};

use crate::arch::smmu::TABLES_PER_VM as SMMU_TABLES_PER_VM;
use crate::arch::{boot, mmu, stage2::TABLES_PER_VM};
use crate::config::{COLOURED_TABLES, COLOURED_VMS, KEEL_COLOURS, KEEL_REGION, SYSTEM};

/// Tables of the windows: a level-1 table, then the coloured VMs' tables.
const WINDOW_TABLES: usize = if COLOURED_TABLES == 0 {
    0
} else {
    1 + COLOURED_TABLES
};

/// Tables of the coloured VMs' stage 2: each one's page tables and the usual allowance
/// (`TABLES_PER_VM`) for the rest of its map.
const STAGE2_TABLES: usize = pool_size(TABLES_PER_VM);

/// Tables of the coloured VMs' SMMU stage 1 (their devices' DMA): each one's page tables and
/// the allowance an uncoloured VM has there.
const SMMU_TABLES: usize = pool_size(SMMU_TABLES_PER_VM);

/// A pool holding every coloured VM's page tables and `allowance` more tables each (none when
/// no VM is coloured).
const fn pool_size(allowance: usize) -> usize {
    if COLOURED_TABLES == 0 {
        0
    } else {
        COLOURED_TABLES + allowance * COLOURED_VMS
    }
}

#[repr(C, align(4096))]
struct Pool<const N: usize>(UnsafeCell<[Table; N]>);

// SAFETY: the window pool is written only by the primary pCPU in `build_windows`, before any
// other pCPU runs; each VM's slice of the other pools is handed out at most once (`Slices`) to
// the primary pCPU while it builds that VM. Afterwards only the MMUs and the SMMU read them.
unsafe impl<const N: usize> Sync for Pool<N> {}

/// A pool of tables cut into one slice per coloured VM: its page tables and `ALLOWANCE`
/// more, each VM's after those of the coloured VMs before it; each handed out once.
/// (All zero, so that the pool lies in .bss, not in Keel's image.)
struct Slices<const N: usize, const ALLOWANCE: usize> {
    pool: Pool<N>,
    taken: [AtomicBool; MAX_VMS],
}

impl<const N: usize, const ALLOWANCE: usize> Slices<N, ALLOWANCE> {
    const fn new() -> Self {
        Self {
            pool: Pool(UnsafeCell::new([[0; ENTRIES]; N])),
            taken: [const { AtomicBool::new(false) }; MAX_VMS],
        }
    }

    /// Coloured VM `id`'s slice, once; None for a VM that is not coloured.
    #[expect(
        clippy::mut_from_ref,
        reason = "the tables are behind an UnsafeCell, and `taken` hands each slice out once"
    )]
    fn take(&'static self, id: usize) -> Option<&'static mut [Table]> {
        let desc = SYSTEM.vms.get(id)?;
        if !desc.colours.is_coloured() || self.taken.get(id)?.swap(true, Ordering::AcqRel) {
            return None;
        }
        let share = |desc: &VmDesc| ALLOWANCE + Colours::page_tables(desc.memory.size);
        let start: usize = SYSTEM.vms[..id]
            .iter()
            .filter(|other| other.colours.is_coloured())
            .map(share)
            .sum();
        let len = share(desc);
        if start + len > N {
            return None;
        }
        // SAFETY: the range lies inside the pool (checked above); the slices handed out are
        // disjoint (each VM's starts at the sum of those before it) and `taken` hands each out
        // once, so this is the only reference to these tables.
        Some(unsafe {
            core::slice::from_raw_parts_mut(self.pool.0.get().cast::<Table>().add(start), len)
        })
    }
}

/// Tables of a coloured Keel's own map: its coloured range is at most half its region.
const KEEL_TABLES: usize = if KEEL_COLOURS.is_coloured() {
    keel_map_tables(KEEL_REGION.1 / 2)
} else {
    0
};

static KEEL_POOL: Pool<KEEL_TABLES> = Pool(UnsafeCell::new([[0; ENTRIES]; KEEL_TABLES]));
static KEEL_COLOURED: AtomicBool = AtomicBool::new(false);
static WINDOW_POOL: Pool<WINDOW_TABLES> = Pool(UnsafeCell::new([[0; ENTRIES]; WINDOW_TABLES]));
static STAGE2: Slices<STAGE2_TABLES, TABLES_PER_VM> = Slices::new();
static SMMU: Slices<SMMU_TABLES, SMMU_TABLES_PER_VM> = Slices::new();
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

/// Tables for coloured VM `id`'s stage 2, handed out once; None for a VM that is not coloured.
pub fn stage2_tables(id: usize) -> Option<Stage2<'static>> {
    let tables = STAGE2.take(id)?;
    let place = mmu::place(tables.as_ptr() as u64);
    Stage2::new(tables, place).ok()
}

/// Tables for coloured VM `id`'s SMMU stage 1, handed out once; None for a VM that is not
/// coloured (its tables come from the SMMU driver's own pool).
pub fn smmu_tables(id: usize) -> Option<&'static mut [Table]> {
    SMMU.take(id)
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
