//! Keel's pools of translation tables, sized by the configuration: one for every VM's stage 2,
//! one for the SMMU's stage 1 of every VM whose devices master DMA. A VM's share of a pool is
//! an allowance for its map (RAM and flash in blocks, channel windows, device registers) and,
//! for a coloured VM, the page tables its RAM takes mapped page by page. The configuration
//! compiler sums the shares into each pool's size ([`TablePool::size`]); Keel cuts each pool at
//! boot into the VMs' slices, in VM order, with the same arithmetic ([`TablePool::slice`]), so
//! a Keel carries the tables its VMs need and no more.

use core::ops::Range;

use crate::colour::Colours;

/// Stage-2 tables of a VM's map besides a coloured VM's page tables: its memory in 2 MiB and
/// 1 GiB blocks, its channels' windows and its devices' registers (a map that needs more is
/// refused at boot with the builder's error, naming the VM).
pub const STAGE2_ALLOWANCE: usize = 32;

/// SMMU stage-1 tables of a VM's devices besides a coloured VM's page tables: a level-1 table
/// and a few level-2 tables for memory mapped in 2 MiB blocks.
pub const SMMU_ALLOWANCE: usize = 4;

/// What a VM takes of the pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableNeeds {
    /// Its RAM's size if it is coloured (mapped page by page), else None.
    pub coloured: Option<u64>,
    /// Whether some device of its masters DMA (has streams behind the SMMU).
    pub dma: bool,
}

/// One of Keel's pools of translation tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TablePool {
    /// Every VM's stage 2.
    Stage2,
    /// The SMMU's stage 1 of the VMs whose devices master DMA.
    Smmu,
}

impl TablePool {
    /// A VM's share of this pool (0: it takes none of it).
    pub const fn share(self, needs: TableNeeds) -> usize {
        let pages = match needs.coloured {
            Some(size) => Colours::page_tables(size),
            None => 0,
        };
        match self {
            TablePool::Stage2 => STAGE2_ALLOWANCE + pages,
            TablePool::Smmu if needs.dma => SMMU_ALLOWANCE + pages,
            TablePool::Smmu => 0,
        }
    }

    /// The pool's size in tables: the shares of `vms`.
    pub fn size(self, vms: impl IntoIterator<Item = TableNeeds>) -> usize {
        vms.into_iter().map(|needs| self.share(needs)).sum()
    }

    /// VM `id`'s slice of the pool, of `vms` in order: its share, after the shares of the VMs
    /// before it. None for no such VM, or a VM that takes none of this pool.
    pub fn slice(
        self,
        vms: impl IntoIterator<Item = TableNeeds>,
        id: usize,
    ) -> Option<Range<usize>> {
        let mut start = 0;
        for (index, needs) in vms.into_iter().enumerate() {
            let share = self.share(needs);
            if index == id {
                return (share > 0).then_some(start..start + share);
            }
            start += share;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: TableNeeds = TableNeeds {
        coloured: None,
        dma: false,
    };
    const DMA: TableNeeds = TableNeeds {
        coloured: None,
        dma: true,
    };
    /// 16 MiB coloured: 8 level-3 tables, a level-2 and a level-1 table, and one more of each
    /// for a range that does not start on a boundary.
    const COLOURED_DMA: TableNeeds = TableNeeds {
        coloured: Some(16 << 20),
        dma: true,
    };

    #[test]
    fn shares_are_the_allowance_and_a_coloured_vms_page_tables() {
        assert_eq!(Colours::page_tables(16 << 20), 11);
        assert_eq!(TablePool::Stage2.share(PLAIN), 32);
        assert_eq!(TablePool::Stage2.share(COLOURED_DMA), 43);
        assert_eq!(TablePool::Smmu.share(PLAIN), 0);
        assert_eq!(TablePool::Smmu.share(DMA), 4);
        assert_eq!(TablePool::Smmu.share(COLOURED_DMA), 15);
        let coloured_without_dma = TableNeeds {
            dma: false,
            ..COLOURED_DMA
        };
        assert_eq!(TablePool::Smmu.share(coloured_without_dma), 0);
    }

    #[test]
    fn slices_follow_each_other_in_vm_order_and_fill_the_pool() {
        let vms = [PLAIN, COLOURED_DMA, DMA, PLAIN];
        assert_eq!(TablePool::Stage2.size(vms), 32 + 43 + 32 + 32);
        assert_eq!(TablePool::Stage2.slice(vms, 0), Some(0..32));
        assert_eq!(TablePool::Stage2.slice(vms, 1), Some(32..75));
        assert_eq!(TablePool::Stage2.slice(vms, 3), Some(107..139));
        assert_eq!(TablePool::Smmu.size(vms), 15 + 4);
        assert_eq!(TablePool::Smmu.slice(vms, 0), None);
        assert_eq!(TablePool::Smmu.slice(vms, 1), Some(0..15));
        assert_eq!(TablePool::Smmu.slice(vms, 2), Some(15..19));
        assert_eq!(TablePool::Smmu.slice(vms, 3), None);
        assert_eq!(TablePool::Stage2.slice(vms, 4), None);
        assert_eq!(TablePool::Stage2.size([]), 0);
    }
}
