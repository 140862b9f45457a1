//! Keel's pools of translation tables for the VMs (`keel_core::table_pools`): every VM's
//! stage 2, and the SMMU's stage 1 of every VM whose devices master DMA. Each pool is sized by
//! the configuration compiler (`STAGE2_TABLES`, `SMMU_TABLES`) from the VMs' shares, and cut
//! here into the same shares, in VM order; so Keel carries the tables its VMs take (a coloured
//! VM's page tables included), not an allowance for every VM it could have.
//!
//! Ownership: the primary pCPU takes each VM's slices at boot, before any other pCPU runs,
//! each once; afterwards only the MMUs and the SMMU read them.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

use keel_core::stage2::{Stage2, Table, ENTRIES};
use keel_core::system::MAX_VMS;
use keel_core::table_pools::TablePool;

use crate::arch::mmu;
use crate::config::{SMMU_TABLES, STAGE2_TABLES, SYSTEM};

/// A pool of `N` tables cut into one slice per VM that takes some of it, each handed out
/// once. (All zero, so that it lies in .bss, not in Keel's image: which pool it is, the
/// caller says.)
#[repr(C, align(4096))]
struct Slices<const N: usize> {
    tables: UnsafeCell<[Table; N]>,
    taken: [AtomicBool; MAX_VMS],
}

// SAFETY: each VM's slice is handed out at most once (`taken`) to the primary pCPU while it
// builds that VM; afterwards only the MMUs and the SMMU read it.
unsafe impl<const N: usize> Sync for Slices<N> {}

impl<const N: usize> Slices<N> {
    const fn new() -> Self {
        Self {
            tables: UnsafeCell::new([[0; ENTRIES]; N]),
            taken: [const { AtomicBool::new(false) }; MAX_VMS],
        }
    }

    /// VM `id`'s slice of this pool, `pool`, once; None for a VM that takes none of it, or a
    /// second time.
    #[expect(
        clippy::mut_from_ref,
        reason = "the tables are behind an UnsafeCell, and `taken` hands each slice out once"
    )]
    fn take(&'static self, pool: TablePool, id: usize) -> Option<&'static mut [Table]> {
        let range = pool.slice(SYSTEM.vms.iter().map(|vm| vm.table_needs()), id)?;
        if range.end > N || self.taken.get(id)?.swap(true, Ordering::AcqRel) {
            return None;
        }
        // SAFETY: the range lies inside the pool (checked above); the slices handed out are
        // disjoint (`TablePool::slice` puts each VM's after those before it) and `taken`
        // hands each out once, so this is the only reference to these tables.
        Some(unsafe {
            core::slice::from_raw_parts_mut(
                self.tables.get().cast::<Table>().add(range.start),
                range.len(),
            )
        })
    }
}

static STAGE2: Slices<STAGE2_TABLES> = Slices::new();
static SMMU: Slices<SMMU_TABLES> = Slices::new();

/// Tables for VM `id`'s stage 2, handed out once.
pub fn stage2(id: usize) -> Option<Stage2<'static>> {
    let tables = STAGE2.take(TablePool::Stage2, id)?;
    let place = mmu::place(tables.as_ptr() as u64);
    Stage2::new(tables, place).ok()
}

/// Tables for the SMMU's stage 1 of VM `id`'s devices, handed out once; None for a VM whose
/// devices master no DMA.
pub fn smmu(id: usize) -> Option<&'static mut [Table]> {
    SMMU.take(TablePool::Smmu, id)
}
