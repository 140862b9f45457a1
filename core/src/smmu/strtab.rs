//! Keel's two-level stream table (IHI 0070 3.3.2): every 16-bit stream ID covered, level-2
//! arrays of STEs only where the configuration gives streams to a VM.
//!
//! `STRTAB_BASE_CFG.FMT` = two-level, `LOG2SIZE` = [`STREAM_BITS`] (16), `SPLIT` = [`SPLIT`]
//! (8): the level-1 table is [`LEVEL1_ENTRIES`] descriptors of 8 bytes (2 KiB), one per block
//! of [`LEVEL2_ENTRIES`] streams; a descriptor either points at a level-2 array of 256 STEs
//! (16 KiB, aligned to its size) or has `Span` = 0, and then every stream of its block is out
//! of range (`C_BAD_STREAMID`, recorded as an event). A PCI host bridge's `iommu-map` names
//! all 65,536 requester IDs (bus, device, function), so a VM given the bridge owns every
//! block; the arrays of blocks that one VM owns entirely are identical, so they are one array,
//! shared by those blocks' descriptors. Only a block split between VMs (or between a VM and
//! no one) needs an array of its own. The memory is bounded by the arrays the hypervisor
//! reserves (`ARRAYS`): [`arrays_needed`] tells the configuration compiler what a system
//! needs, and [`StreamLayout::plan`] refuses a system that needs more.
//!
//! [`StreamLayout`] is the plan: which array each block's descriptor points at and which VM
//! owns each entry of each array; [`StreamLayout::fill`] writes the level-1 table and the
//! arrays from it, and [`StreamLayout::entries_of`] names the STEs a VM's cut-off rewrites.

use super::ste::{validate, Ste, StreamAssignment, StreamConfig, StreamTableError};
use super::Field;
use crate::table::{at, at_mut};

/// Stream ID bits the table covers (`STRTAB_BASE_CFG.LOG2SIZE`): 16, all of
/// [`MAX_STREAMS`](crate::system::MAX_STREAMS).
pub const STREAM_BITS: u32 = crate::system::MAX_STREAMS.trailing_zeros();
/// Stream ID bits a level-2 array resolves (`STRTAB_BASE_CFG.SPLIT`).
pub const SPLIT: u32 = 8;
/// Descriptors of the level-1 table: one per block of [`LEVEL2_ENTRIES`] streams.
pub const LEVEL1_ENTRIES: usize = 1 << (STREAM_BITS - SPLIT);
/// STEs of a level-2 array.
pub const LEVEL2_ENTRIES: usize = 1 << SPLIT;
/// A level-1 descriptor's `Span[4:0]`: 0 invalid (no array), else the array holds
/// `2^(Span - 1)` STEs.
pub const SPAN: Field = Field::new(0, 5);
/// A level-1 descriptor's `L2Ptr[55:6]`: the array's physical address.
pub const L2PTR: Field = Field::new(6, 50);
/// The Span of a descriptor whose array holds [`LEVEL2_ENTRIES`] STEs.
pub const SPAN_FULL: u64 = SPLIT as u64 + 1;
/// A level-2 array of STEs, as the SMMU reads it.
pub type Level2 = [Ste; LEVEL2_ENTRIES];

/// A level-1 descriptor: pointing at the array at physical address `array` (aligned to its
/// 16 KiB), or invalid (`None`: its block's streams are out of range).
pub const fn level1_descriptor(array: Option<u64>) -> u64 {
    match array {
        Some(phys) => SPAN.put(SPAN_FULL) | (phys & L2PTR.mask()),
        None => 0,
    }
}

/// "No one": a block without an array, an entry of no VM. The plan stores an array or a VM
/// as its index plus one, so that an empty plan is all zero (a static in `.bss`, not `.data`).
const NONE: u8 = 0;

/// Index `index` as the plan stores it.
const fn stored(index: usize) -> u8 {
    index as u8 + 1
}

/// The index the plan stores as `value`, unless it is [`NONE`].
fn index_of(value: u8) -> Option<usize> {
    usize::from(value).checked_sub(1)
}

/// What a block of streams needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    /// No stream of it is assigned: no array.
    Empty,
    /// One VM owns every stream of it: that VM's shared array.
    Whole(usize),
    /// Split: an array of its own.
    Split,
}

/// The streams of block `block` (its first and last stream ID).
const fn block_streams(block: usize) -> (u32, u32) {
    let first = (block as u32) << SPLIT;
    (first, first + (LEVEL2_ENTRIES as u32 - 1))
}

/// What block `block` needs, given `assignments` that [`validate`] accepted (no two VMs
/// share a stream).
fn block_kind(assignments: &[StreamAssignment], block: usize) -> Block {
    let (low, high) = block_streams(block);
    let mut kind = Block::Empty;
    for assignment in assignments {
        if assignment.first <= low && high <= assignment.last {
            return Block::Whole(assignment.vm);
        }
        if assignment.first <= high && low <= assignment.last {
            kind = Block::Split;
        }
    }
    kind
}

/// Level-2 arrays the streams of `assignments` need: one per VM that owns a whole block, one
/// per block split between owners. Assignments are taken as [`validate`] would accept them
/// (the configuration compiler refuses the others first).
pub fn arrays_needed(assignments: &[StreamAssignment]) -> usize {
    let mut whole_vms = 0u64;
    let mut split = 0;
    for block in 0..LEVEL1_ENTRIES {
        match block_kind(assignments, block) {
            Block::Empty => {}
            Block::Whole(vm) => whole_vms |= 1 << (vm % 64),
            Block::Split => split += 1,
        }
    }
    whole_vms.count_ones() as usize + split
}

/// The plan of a two-level stream table with at most `ARRAYS` level-2 arrays: each block's
/// array, and each array entry's owner. About 1.3 KiB with four arrays, no pointer in it: a
/// static of the hypervisor, all zero ([`Self::EMPTY`]) until planned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamLayout<const ARRAYS: usize> {
    /// Each block's array ([`stored`]), or [`NONE`].
    blocks: [u8; LEVEL1_ENTRIES],
    /// Each array's entries' VMs ([`stored`]; [`NONE`]: aborts, no one's).
    owners: [[u8; LEVEL2_ENTRIES]; ARRAYS],
    /// Each array's VM ([`stored`]) if it is a VM's shared array of whole blocks, else
    /// [`NONE`].
    whole: [u8; ARRAYS],
    /// Arrays in use (the first ones).
    used: usize,
}

impl<const ARRAYS: usize> StreamLayout<ARRAYS> {
    /// No stream covered: every descriptor invalid.
    pub const EMPTY: Self = Self {
        blocks: [NONE; LEVEL1_ENTRIES],
        owners: [[NONE; LEVEL2_ENTRIES]; ARRAYS],
        whole: [NONE; ARRAYS],
        used: 0,
    };

    /// Plans the table for `assignments` (VM indices below `vms`, at most 255). Refused as
    /// [`validate`] refuses (two VMs given one stream, a stream beyond 16 bits, an empty range,
    /// a VM without a context descriptor), or when the streams need more than `ARRAYS` arrays;
    /// the plan is then [`Self::EMPTY`].
    pub fn plan(
        &mut self,
        assignments: &[StreamAssignment],
        vms: usize,
    ) -> Result<(), StreamTableError> {
        *self = Self::EMPTY;
        validate(1 << STREAM_BITS, assignments, vms.min(u8::MAX as usize))?;
        let needed = arrays_needed(assignments);
        if needed > ARRAYS {
            return Err(StreamTableError::TooManyArrays {
                needed,
                arrays: ARRAYS,
            });
        }
        for block in 0..LEVEL1_ENTRIES {
            let array = match block_kind(assignments, block) {
                Block::Empty => continue,
                Block::Whole(vm) => match at(&self.whole, ..self.used)
                    .iter()
                    .position(|&owner| index_of(owner) == Some(vm))
                {
                    Some(shared) => shared,
                    None => {
                        let array = self.take_array();
                        *at_mut(&mut self.whole, array) = stored(vm);
                        *at_mut(&mut self.owners, array) = [stored(vm); LEVEL2_ENTRIES];
                        array
                    }
                },
                Block::Split => {
                    let array = self.take_array();
                    let (low, high) = block_streams(block);
                    for assignment in assignments {
                        let first = assignment.first.max(low);
                        let last = assignment.last.min(high);
                        if first <= last {
                            let entries = (first - low) as usize..=(last - low) as usize;
                            at_mut(at_mut(&mut self.owners, array), entries)
                                .fill(stored(assignment.vm));
                        }
                    }
                    array
                }
            };
            *at_mut(&mut self.blocks, block) = stored(array);
        }
        Ok(())
    }

    /// The next free array (there is one: [`arrays_needed`] was checked).
    fn take_array(&mut self) -> usize {
        let array = self.used;
        self.used += 1;
        array
    }

    /// Arrays the plan uses (the first ones).
    pub fn arrays_used(&self) -> usize {
        self.used
    }

    /// Where stream `stream`'s STE is: its array and its index there; `None` for a stream
    /// of a block without an array (the SMMU reports it out of range).
    pub fn entry(&self, stream: u32) -> Option<(usize, usize)> {
        let block = (stream >> SPLIT) as usize;
        let array = index_of(*self.blocks.get(block)?)?;
        Some((array, stream as usize % LEVEL2_ENTRIES))
    }

    /// The VM that owns stream `stream`, if any.
    pub fn owner(&self, stream: u32) -> Option<usize> {
        let (array, index) = self.entry(stream)?;
        index_of(*at(at(&self.owners, array), index))
    }

    /// Each STE VM `vm` owns, as `(array, index)`, each once (a shared array's entries once,
    /// however many blocks point at it): at most `ARRAYS` x 256.
    pub fn entries_of(&self, vm: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.entries_of_among(vm, 0..self.positions())
    }

    /// The STEs of the arrays in use, counted one after another (array by array): what
    /// [`Self::entries_of_among`] takes ranges of.
    pub fn positions(&self) -> usize {
        self.used * LEVEL2_ENTRIES
    }

    /// [`Self::entries_of`] among `positions` only (of [`Self::positions`]): a caller that
    /// rewrites a VM's STEs in bounded steps looks at a bounded number of entries in each,
    /// whatever the VM owns of them.
    pub fn entries_of_among(
        &self,
        vm: usize,
        positions: core::ops::Range<usize>,
    ) -> impl Iterator<Item = (usize, usize)> + '_ {
        let end = positions.end.min(self.positions());
        (positions.start.min(end)..end)
            .map(|position| (position / LEVEL2_ENTRIES, position % LEVEL2_ENTRIES))
            .filter(move |&(array, index)| {
                index_of(*at(at(&self.owners, array), index)) == Some(vm)
            })
    }

    /// Writes the planned table: `level1`'s descriptors pointing at `arrays` (at physical
    /// address `arrays_phys`, one after another, each aligned to its size), every entry of
    /// a VM translating through its CD at `contexts[vm]`, every other entry aborting.
    pub fn fill(
        &self,
        level1: &mut [u64; LEVEL1_ENTRIES],
        arrays: &mut [Level2; ARRAYS],
        arrays_phys: u64,
        contexts: &[u64],
    ) {
        let array_size = core::mem::size_of::<Level2>() as u64;
        for (descriptor, &array) in level1.iter_mut().zip(&self.blocks) {
            *descriptor = level1_descriptor(
                index_of(array).map(|array| arrays_phys + array as u64 * array_size),
            );
        }
        for (entries, owners) in arrays.iter_mut().zip(&self.owners) {
            for (ste, &owner) in entries.iter_mut().zip(owners) {
                *ste = match index_of(owner).and_then(|vm| contexts.get(vm)) {
                    Some(&context) => StreamConfig::Stage1 { context }.encode(),
                    None => StreamConfig::Abort.encode(),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARRAYS: usize = 4;
    const ARRAYS_PHYS: u64 = 0x4100_0000;
    const CONTEXTS: [u64; 3] = [0x4000_0000, 0x4000_0040, 0x4000_0080];

    fn assign(first: u32, last: u32, vm: usize) -> StreamAssignment {
        StreamAssignment { first, last, vm }
    }

    /// The planned and filled table.
    struct Filled {
        layout: Box<StreamLayout<ARRAYS>>,
        level1: Box<[u64; LEVEL1_ENTRIES]>,
        arrays: Box<[Level2; ARRAYS]>,
    }

    fn filled(assignments: &[StreamAssignment]) -> Result<Filled, StreamTableError> {
        let mut layout = Box::new(StreamLayout::<ARRAYS>::EMPTY);
        layout.plan(assignments, CONTEXTS.len())?;
        let mut level1 = Box::new([0xdead; LEVEL1_ENTRIES]);
        let mut arrays = Box::new([[[0xdead; 8]; LEVEL2_ENTRIES]; ARRAYS]);
        layout.fill(&mut level1, &mut arrays, ARRAYS_PHYS, &CONTEXTS);
        Ok(Filled {
            layout,
            level1,
            arrays,
        })
    }

    /// What the SMMU finds for `stream`, walking the table as IHI 0070 3.3.2 says (SPLIT 8):
    /// `None` for C_BAD_STREAMID (an invalid descriptor), else the STE's configuration.
    fn walk(table: &Filled, stream: u32) -> Option<StreamConfig> {
        assert!(stream < 1 << STREAM_BITS);
        let descriptor = table.level1[(stream >> SPLIT) as usize];
        let span = SPAN.get(descriptor);
        if span == 0 {
            return None;
        }
        assert_eq!(span, 9, "2^(9-1) = 256 STEs");
        let l2 = descriptor & L2PTR.mask();
        let size = core::mem::size_of::<Level2>() as u64;
        assert_eq!(size, 16384);
        assert_eq!(l2 % size, 0, "an array aligned to its size");
        let array = ((l2 - ARRAYS_PHYS) / size) as usize;
        let ste = &table.arrays[array][(stream & 0xff) as usize];
        Some(StreamConfig::decode(ste).expect("an STE Keel writes"))
    }

    fn vm_of(config: StreamConfig) -> Option<usize> {
        match config {
            StreamConfig::Stage1 { context } => CONTEXTS.iter().position(|&c| c == context),
            _ => None,
        }
    }

    #[test]
    fn an_empty_plan_is_all_zero() {
        let empty = StreamLayout::<ARRAYS>::EMPTY;
        assert!(empty.blocks.iter().all(|&b| b == 0));
        assert!(empty.owners.iter().flatten().all(|&o| o == 0));
        assert!(empty.whole.iter().all(|&w| w == 0) && empty.used == 0);
    }

    #[test]
    fn descriptors_put_span_and_pointer_where_the_spec_says() {
        assert_eq!(level1_descriptor(None), 0);
        assert_eq!(level1_descriptor(Some(0x4100_4000)), 0x4100_4000 | 9);
        assert_eq!(LEVEL1_ENTRIES * 8, 2048, "the level-1 table: 2 KiB");
    }

    #[test]
    fn a_bridge_given_whole_covers_every_stream_with_one_shared_array() {
        // QEMU virt's bridge: iommu-map <0 &smmu 0 0x10000>, given to VM 1.
        let table = filled(&[assign(0, 0xffff, 1)]).unwrap();
        assert_eq!(table.layout.arrays_used(), 1);
        for stream in [0, 8, 0xff, 0x100, 0x108, 0x1234, 0xffff] {
            assert_eq!(walk(&table, stream).and_then(vm_of), Some(1), "{stream}");
            assert_eq!(table.layout.owner(stream), Some(1));
        }
        assert!(table
            .level1
            .iter()
            .all(|&d| d == level1_descriptor(Some(ARRAYS_PHYS))));
        assert_eq!(table.layout.entries_of(1).count(), LEVEL2_ENTRIES);
        assert_eq!(table.layout.entries_of(0).count(), 0);
    }

    #[test]
    fn split_blocks_get_arrays_of_their_own_and_unassigned_blocks_none() {
        // VM 0: a platform device's stream 8; VM 2: buses 1 to 3 (streams 0x100-0x3ff) and
        // half of bus 4; VM 1: the rest of bus 4 and one stream of bus 0x80.
        let assignments = [
            assign(8, 8, 0),
            assign(0x100, 0x3ff, 2),
            assign(0x400, 0x47f, 2),
            assign(0x480, 0x4ff, 1),
            assign(0x8005, 0x8005, 1),
        ];
        let table = filled(&assignments).unwrap();
        // Block 0 (split: stream 8 and no one), VM 2's shared array, block 4, block 0x80.
        assert_eq!(table.layout.arrays_used(), 4);
        assert_eq!(arrays_needed(&assignments), 4);
        for stream in 0..=0xffffu32 {
            let expected = match stream {
                8 => Some(Some(0)),
                0..=0xff | 0x8000..=0x80ff if stream != 0x8005 => Some(None),
                0x100..=0x47f => Some(Some(2)),
                0x480..=0x4ff | 0x8005 => Some(Some(1)),
                _ => None,
            };
            let found = walk(&table, stream).map(vm_of);
            assert_eq!(found, expected, "stream {stream:#x}");
            assert_eq!(
                table.layout.owner(stream),
                expected.flatten(),
                "{stream:#x}"
            );
            if expected == Some(None) {
                assert_eq!(walk(&table, stream), Some(StreamConfig::Abort));
            }
        }
        // Blocks 1-3 share VM 2's array.
        assert_eq!(table.level1[1], table.level1[3]);
        assert_ne!(table.level1[1], table.level1[4]);
        let vm2: Vec<_> = table.layout.entries_of(2).collect();
        assert_eq!(
            vm2.len(),
            256 + 128,
            "its shared array once, and half of block 4"
        );
        let vm1 = table.layout.entries_of(1).count();
        assert_eq!(vm1, 128 + 1);
        assert_eq!(table.layout.entries_of(0).collect::<Vec<_>>(), [(0, 8)]);
    }

    #[test]
    fn more_arrays_than_reserved_are_refused_and_the_plan_left_empty() {
        // Five split blocks.
        let assignments: Vec<_> = (0..5)
            .map(|block| assign(block << 8, block << 8, 0))
            .collect();
        assert_eq!(arrays_needed(&assignments), 5);
        let mut layout = Box::new(StreamLayout::<ARRAYS>::EMPTY);
        layout.plan(&[assign(0, 0xffff, 0)], 1).unwrap();
        assert_eq!(
            layout.plan(&assignments, 1),
            Err(StreamTableError::TooManyArrays {
                needed: 5,
                arrays: 4
            })
        );
        assert_eq!(*layout, StreamLayout::EMPTY);
        assert_eq!(layout.owner(0), None);
        assert_eq!(
            StreamTableError::TooManyArrays {
                needed: 5,
                arrays: 4
            }
            .to_string(),
            "the streams need 5 level-2 stream table arrays, and Keel has 4"
        );
    }

    #[test]
    fn refusals_leave_no_stream_covered() {
        let cases = [
            (
                vec![assign(0, 9, 0), assign(9, 12, 1)],
                StreamTableError::Overlap {
                    stream: 9,
                    vm: 0,
                    other_vm: 1,
                },
            ),
            (
                vec![assign(0x100, 0x1ff, 1), assign(0, 0xffff, 0)],
                StreamTableError::Overlap {
                    stream: 0x100,
                    vm: 1,
                    other_vm: 0,
                },
            ),
            (
                vec![assign(0xffff, 0x10000, 0)],
                StreamTableError::OutOfTable {
                    stream: 0x10000,
                    entries: 0x10000,
                },
            ),
            (
                vec![assign(3, 2, 0)],
                StreamTableError::EmptyRange { first: 3, last: 2 },
            ),
            (vec![assign(3, 3, 3)], StreamTableError::NoContext { vm: 3 }),
        ];
        for (assignments, error) in cases {
            assert_eq!(filled(&assignments).err(), Some(error));
            let mut layout = Box::new(StreamLayout::<ARRAYS>::EMPTY);
            assert!(layout.plan(&assignments, CONTEXTS.len()).is_err());
            assert!((0..=0xffff).all(|stream| layout.entry(stream).is_none()));
        }
    }

    #[test]
    fn one_vms_ranges_over_the_same_block_share_its_array() {
        // The same VM twice over one block (a device and the bridge's window onto it): allowed.
        let table = filled(&[assign(0x10, 0x1f, 0), assign(0x18, 0x2f, 0)]).unwrap();
        assert_eq!(table.layout.arrays_used(), 1);
        assert_eq!(table.layout.entries_of(0).count(), 0x20);
        // In steps of any size, the same entries in the same order, and nothing beyond.
        let whole: Vec<_> = table.layout.entries_of(0).collect();
        for step in [1, 7, 32, LEVEL2_ENTRIES] {
            let stepped: Vec<_> = (0..table.layout.positions())
                .step_by(step)
                .flat_map(|first| table.layout.entries_of_among(0, first..first + step))
                .collect();
            assert_eq!(stepped, whole, "steps of {step}");
        }
        let beyond = table.layout.positions();
        assert_eq!(
            table.layout.entries_of_among(0, beyond..beyond + 9).count(),
            0
        );
        assert_eq!(walk(&table, 0x2f).and_then(vm_of), Some(0));
        assert_eq!(walk(&table, 0x30), Some(StreamConfig::Abort));
        assert_eq!(walk(&table, 0x100), None);
    }
}
