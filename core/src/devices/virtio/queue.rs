//! A split virtqueue (virtio 1.2 section 2.7) walked from the device's side, bounded whatever
//! the guest wrote in its rings.
//!
//! The driver owns three areas in its memory: the descriptor table (2.7.5), the driver area
//! or available ring (2.7.6) and the device area or used ring (2.7.8). The device keeps its
//! own two indices (the next available entry to take, the next used entry to give) and trusts
//! nothing it reads: every index is checked against the queue size, every chain is followed
//! at most a queue size of descriptors, every address goes through [`GuestMemory`], which
//! refuses what is not the VM's. A broken rule breaks the queue (the device then needs a
//! reset, 2.1.2) instead of being guessed around.
//!
//! Each chain is walked twice: once whole to check it, then to move its bytes, so a chain
//! that breaks a rule moves nothing. One call does bounded work: it takes at most the
//! entries available when it starts (at most a queue size of them), starts a chain only
//! while fewer than twice the queue size of descriptors were visited (the chains a driver
//! makes available at once share no descriptor, so they fit), hence visits at most four
//! times the queue size in all, and moves at most its byte budget, [`CHUNK`] bytes per
//! guest-memory access.

use super::memory::{offset_address, read_bytes, GuestMemory, MemoryError};
use crate::addr::GuestPhysAddr;

/// Largest queue size the device offers (QueueNumMax).
pub const MAX_QUEUE_SIZE: u16 = 64;

/// Most bytes of a buffer the device reads with one guest-memory access.
pub const CHUNK: usize = 256;

/// Most guest-memory accesses one call makes: [`SplitQueue::drain_readable`] with a budget
/// of `budget` bytes, or [`SplitQueue::fill_writable`] with `budget` 0 (it writes each
/// descriptor's part in one access). That is the available index; per chain (at most a queue
/// size) its head and two used-ring writes; per descriptor visited (at most four times the
/// queue size, half of them to copy) the descriptor and, when copying, one access shorter
/// than a chunk; the full chunks of the budget; one access cut short by the budget or sink.
pub const fn max_accesses(budget: usize) -> usize {
    let size = MAX_QUEUE_SIZE as usize;
    1 + 3 * size + 4 * size + 2 * size + budget / CHUNK + 1
}

/// Descriptor flags (2.7.5): the chain continues at `next`.
const DESCRIPTOR_NEXT: u16 = 1;
/// The device writes this buffer (otherwise it reads it).
const DESCRIPTOR_WRITE: u16 = 2;
/// The buffer is a table of descriptors (VIRTIO_F_INDIRECT_DESC, which Keel does not offer).
const DESCRIPTOR_INDIRECT: u16 = 4;
/// Available ring flag (2.7.6): the driver asks for no used buffer notification.
const AVAILABLE_NO_INTERRUPT: u16 = 1;

/// Bytes of one descriptor: address (le64), length (le32), flags (le16), next (le16).
const DESCRIPTOR_SIZE: u64 = 16;
/// Bytes of one available ring entry: a chain's head descriptor (le16).
const AVAILABLE_ENTRY_SIZE: u64 = 2;
/// Bytes of one used ring element: head (le32), bytes written (le32).
const USED_ELEMENT_SIZE: u64 = 8;
/// Bytes before the entries of either ring: flags (le16) and index (le16).
const RING_HEADER_SIZE: u64 = 4;
/// Where the index sits in either ring's header.
const RING_INDEX_OFFSET: u64 = 2;

/// Alignments of the three areas (2.7, table "Virtqueue Part Alignment").
const DESCRIPTOR_TABLE_ALIGN: u64 = 16;
const DRIVER_AREA_ALIGN: u64 = 2;
const DEVICE_AREA_ALIGN: u64 = 4;

/// Why a queue stopped: the driver broke a rule of the split ring. The device sets
/// DEVICE_NEEDS_RESET and touches the queue no more until the driver resets it.
///
/// Its tags start at 1, so that `None` of an `Option<QueueError>` (a transport without an
/// error) takes tag 0 and a transport in its reset state is all zero bytes (.bss).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum QueueError {
    /// The available index ran more than a queue size ahead of the entries the device took.
    AvailableIndexJump {
        /// The available ring's index as read.
        available: u16,
        /// The next entry the device would take.
        taken: u16,
    } = 1,
    /// A descriptor index (a chain's head or a `next`) beyond the descriptor table.
    DescriptorOutOfRange {
        /// The index.
        index: u16,
    } = 2,
    /// A chain longer than the queue: its `next` fields loop (2.7.5.3.1: no chain is longer
    /// than the queue size).
    ChainTooLong {
        /// The chain's head descriptor.
        head: u16,
    } = 3,
    /// A buffer the device may write in a chain it only reads (transmit), or one it may only
    /// read in a chain it writes (receive).
    WrongDirection {
        /// The descriptor.
        index: u16,
    } = 4,
    /// An indirect descriptor, though VIRTIO_F_INDIRECT_DESC was not offered.
    IndirectDescriptor {
        /// The descriptor.
        index: u16,
    } = 5,
    /// A ring, descriptor or buffer outside the VM's memory.
    Memory(MemoryError) = 6,
}

impl From<MemoryError> for QueueError {
    fn from(error: MemoryError) -> Self {
        QueueError::Memory(error)
    }
}

impl core::fmt::Display for QueueError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            QueueError::AvailableIndexJump { available, taken } => write!(
                f,
                "available index {available} is more than a queue ahead of {taken}"
            ),
            QueueError::DescriptorOutOfRange { index } => {
                write!(f, "descriptor {index} is beyond the descriptor table")
            }
            QueueError::ChainTooLong { head } => {
                write!(
                    f,
                    "the chain from descriptor {head} is longer than the queue"
                )
            }
            QueueError::WrongDirection { index } => {
                write!(
                    f,
                    "descriptor {index} has the wrong direction for its queue"
                )
            }
            QueueError::IndirectDescriptor { index } => {
                write!(f, "descriptor {index} is indirect, which was not offered")
            }
            QueueError::Memory(error) => write!(f, "{error}"),
        }
    }
}

/// What one call did to a queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfer {
    /// Bytes moved (out of the driver's buffers, or into them).
    pub bytes: usize,
    /// Chains given back in the used ring.
    pub used: u16,
    /// Whether the driver wants a used buffer notification for them (some were used and
    /// the available ring's flags do not ask for none).
    pub notify: bool,
    /// The rule the driver broke, if it broke one: the queue is broken from now on.
    pub error: Option<QueueError>,
}

/// One descriptor as read from the table.
struct Descriptor {
    addr: GuestPhysAddr,
    len: u32,
    flags: u16,
    next: u16,
}

/// Whether a walk goes on to the next descriptor.
enum Flow {
    Continue,
    Stop,
}

/// One split virtqueue's device-side state: what the driver configured (through the MMIO
/// registers) and the device's own indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitQueue {
    /// Queue size the driver chose (QueueNum); checked when the queue is enabled.
    pub size: u16,
    /// Guest-physical address of the descriptor table.
    pub descriptor_table: GuestPhysAddr,
    /// Guest-physical address of the driver area (available ring).
    pub driver_area: GuestPhysAddr,
    /// Guest-physical address of the device area (used ring).
    pub device_area: GuestPhysAddr,
    ready: bool,
    broken: bool,
    next_available: u16,
    next_used: u16,
    /// Bytes of the first available chain already read out (a chain the sink could not take
    /// whole stays available, and the next call goes on from here).
    head_progress: u64,
}

impl Default for SplitQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl SplitQueue {
    /// A queue in its reset state: not ready, nothing configured.
    pub const fn new() -> Self {
        Self {
            size: 0,
            descriptor_table: GuestPhysAddr(0),
            driver_area: GuestPhysAddr(0),
            device_area: GuestPhysAddr(0),
            ready: false,
            broken: false,
            next_available: 0,
            next_used: 0,
            head_progress: 0,
        }
    }

    /// Whether the driver enabled the queue (QueueReady).
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// Whether the driver broke a rule of the queue, which is then left alone until reset.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// The driver enables the queue: accepted if its size is a power of two no larger than
    /// [`MAX_QUEUE_SIZE`] (2.7: a split queue's size is a power of two) and its three areas
    /// are aligned as 2.7 requires; otherwise the queue stays disabled. Both indices start
    /// at 0 (2.7.6, 2.7.8).
    pub fn enable(&mut self) -> bool {
        let usable = self.size.is_power_of_two()
            && self.size <= MAX_QUEUE_SIZE
            && self
                .descriptor_table
                .0
                .is_multiple_of(DESCRIPTOR_TABLE_ALIGN)
            && self.driver_area.0.is_multiple_of(DRIVER_AREA_ALIGN)
            && self.device_area.0.is_multiple_of(DEVICE_AREA_ALIGN);
        if usable {
            self.ready = true;
            self.next_available = 0;
            self.next_used = 0;
            self.head_progress = 0;
        }
        usable
    }

    /// The driver disables the queue.
    pub fn disable(&mut self) {
        self.ready = false;
    }

    /// Reads the driver's buffers of available device-readable chains, in order, into `sink`
    /// (which takes as many leading bytes as it can and says how many), at most `budget`
    /// bytes in all. A chain goes into the used ring once the sink took all of it; one it
    /// could not take whole stays available, and the next call goes on where this one
    /// stopped. Nothing is skipped or dropped.
    pub fn drain_readable<M: GuestMemory>(
        &mut self,
        memory: &mut M,
        budget: usize,
        sink: &mut impl FnMut(&[u8]) -> usize,
    ) -> Transfer {
        let mut transfer = Transfer::default();
        if !self.ready || self.broken {
            return transfer;
        }
        let result = self.drain_readable_chains(memory, budget, sink, &mut transfer);
        self.finish(result, transfer)
    }

    fn drain_readable_chains<M: GuestMemory>(
        &mut self,
        memory: &mut M,
        budget: usize,
        sink: &mut impl FnMut(&[u8]) -> usize,
        transfer: &mut Transfer,
    ) -> Result<(), QueueError> {
        let (pending, no_interrupt) = self.pending(memory)?;
        let mut visits = 0;
        let mut buffer = [0u8; CHUNK];
        for _ in 0..pending {
            if transfer.bytes == budget || visits >= 2 * self.size {
                break;
            }
            let head = self.head(memory)?;
            self.walk(memory, head, false, &mut visits, |_, _| Ok(Flow::Continue))?;
            // Position in the chain's bytes: where the current descriptor's buffer starts,
            // and how far the sink has taken them (in this call or before).
            let mut descriptor_start = 0u64;
            let mut progress = self.head_progress;
            let walked = self.walk(memory, head, false, &mut visits, |memory, descriptor| {
                let end = descriptor_start + u64::from(descriptor.len);
                while progress < end {
                    let left = (end - progress).min(CHUNK as u64) as usize;
                    let count = left.min(budget - transfer.bytes);
                    if count == 0 {
                        return Ok(Flow::Stop);
                    }
                    let ipa = offset_address(descriptor.addr, progress - descriptor_start, count)?;
                    memory.read(ipa, &mut buffer[..count])?;
                    let taken = sink(&buffer[..count]).min(count);
                    progress += taken as u64;
                    transfer.bytes += taken;
                    if taken < count {
                        return Ok(Flow::Stop);
                    }
                }
                descriptor_start = end;
                Ok(Flow::Continue)
            });
            self.head_progress = progress;
            match walked? {
                Flow::Stop => break,
                Flow::Continue => self.put_used(memory, head, 0, transfer)?,
            }
        }
        transfer.notify = transfer.used > 0 && !no_interrupt;
        Ok(())
    }

    /// Writes `bytes` into the driver's buffers of available device-writable chains, in
    /// order, filling each chain as far as the bytes go; returns (in the transfer) how many
    /// it took. Every chain written to goes into the used ring with its count, even one not
    /// filled (2.7.8: the used length is the bytes written). The caller keeps the rest and
    /// bounds the call by the length of `bytes`.
    pub fn fill_writable<M: GuestMemory>(&mut self, memory: &mut M, bytes: &[u8]) -> Transfer {
        let mut transfer = Transfer::default();
        if !self.ready || self.broken {
            return transfer;
        }
        // A used element counts its bytes in 32 bits.
        let bytes = &bytes[..bytes.len().min(u32::MAX as usize)];
        let result = self.fill_writable_chains(memory, bytes, &mut transfer);
        self.finish(result, transfer)
    }

    fn fill_writable_chains<M: GuestMemory>(
        &mut self,
        memory: &mut M,
        bytes: &[u8],
        transfer: &mut Transfer,
    ) -> Result<(), QueueError> {
        let (pending, no_interrupt) = self.pending(memory)?;
        let mut visits = 0;
        for _ in 0..pending {
            if transfer.bytes == bytes.len() || visits >= 2 * self.size {
                break;
            }
            let head = self.head(memory)?;
            self.walk(memory, head, true, &mut visits, |_, _| Ok(Flow::Continue))?;
            let chain_start = transfer.bytes;
            self.walk(memory, head, true, &mut visits, |memory, descriptor| {
                let count = (descriptor.len as usize).min(bytes.len() - transfer.bytes);
                if count > 0 {
                    memory.write(descriptor.addr, &bytes[transfer.bytes..][..count])?;
                    transfer.bytes += count;
                }
                Ok(if transfer.bytes == bytes.len() {
                    Flow::Stop
                } else {
                    Flow::Continue
                })
            })?;
            let written = (transfer.bytes - chain_start) as u32;
            self.put_used(memory, head, written, transfer)?;
        }
        transfer.notify = transfer.used > 0 && !no_interrupt;
        Ok(())
    }

    /// Ends a call: an error breaks the queue and is reported with what was done before it.
    fn finish(&mut self, result: Result<(), QueueError>, mut transfer: Transfer) -> Transfer {
        if let Err(error) = result {
            self.broken = true;
            transfer.error = Some(error);
            transfer.notify = transfer.used > 0;
        }
        transfer
    }

    /// How many entries the driver made available since the device last took one, and
    /// whether it asks for no used buffer notification (2.7.6, 2.7.7).
    fn pending(&self, memory: &impl GuestMemory) -> Result<(u16, bool), QueueError> {
        let [flags_low, flags_high, index_low, index_high] = read_bytes(memory, self.driver_area)?;
        let flags = u16::from_le_bytes([flags_low, flags_high]);
        let available = u16::from_le_bytes([index_low, index_high]);
        // Both indices run free and wrap at 2^16 (2.7.6).
        let pending = available.wrapping_sub(self.next_available);
        if pending > self.size {
            return Err(QueueError::AvailableIndexJump {
                available,
                taken: self.next_available,
            });
        }
        Ok((pending, flags & AVAILABLE_NO_INTERRUPT != 0))
    }

    /// The head descriptor of the next available chain.
    fn head(&self, memory: &impl GuestMemory) -> Result<u16, QueueError> {
        let slot = u64::from(self.next_available % self.size);
        let offset = RING_HEADER_SIZE + slot * AVAILABLE_ENTRY_SIZE;
        let ipa = offset_address(self.driver_area, offset, AVAILABLE_ENTRY_SIZE as usize)?;
        Ok(u16::from_le_bytes(read_bytes(memory, ipa)?))
    }

    /// Reads descriptor `index` of the table.
    fn descriptor(&self, memory: &impl GuestMemory, index: u16) -> Result<Descriptor, QueueError> {
        if index >= self.size {
            return Err(QueueError::DescriptorOutOfRange { index });
        }
        let offset = u64::from(index) * DESCRIPTOR_SIZE;
        let ipa = offset_address(self.descriptor_table, offset, DESCRIPTOR_SIZE as usize)?;
        let bytes: [u8; DESCRIPTOR_SIZE as usize] = read_bytes(memory, ipa)?;
        let field = |range: core::ops::Range<usize>| {
            bytes[range]
                .iter()
                .rev()
                .fold(0u64, |value, &byte| value << 8 | u64::from(byte))
        };
        Ok(Descriptor {
            addr: GuestPhysAddr(field(0..8)),
            len: field(8..12) as u32,
            flags: field(12..14) as u16,
            next: field(14..16) as u16,
        })
    }

    /// Follows the chain from `head`, handing each descriptor to `visit` until it says stop
    /// or the chain ends; checks every index, the direction of every buffer (`writable`:
    /// the device writes them all) and the chain's length, counting descriptors in `visits`.
    fn walk<M: GuestMemory>(
        &self,
        memory: &mut M,
        head: u16,
        writable: bool,
        visits: &mut u16,
        mut visit: impl FnMut(&mut M, &Descriptor) -> Result<Flow, QueueError>,
    ) -> Result<Flow, QueueError> {
        let mut index = head;
        for _ in 0..self.size {
            *visits += 1;
            let descriptor = self.descriptor(memory, index)?;
            if descriptor.flags & DESCRIPTOR_INDIRECT != 0 {
                return Err(QueueError::IndirectDescriptor { index });
            }
            if (descriptor.flags & DESCRIPTOR_WRITE != 0) != writable {
                return Err(QueueError::WrongDirection { index });
            }
            if let Flow::Stop = visit(memory, &descriptor)? {
                return Ok(Flow::Stop);
            }
            if descriptor.flags & DESCRIPTOR_NEXT == 0 {
                return Ok(Flow::Continue);
            }
            index = descriptor.next;
        }
        Err(QueueError::ChainTooLong { head })
    }

    /// Gives the chain from `head` back in the used ring with `written` bytes: the element,
    /// then the index that publishes it (2.7.8), and takes the available entry.
    fn put_used(
        &mut self,
        memory: &mut impl GuestMemory,
        head: u16,
        written: u32,
        transfer: &mut Transfer,
    ) -> Result<(), QueueError> {
        let slot = u64::from(self.next_used % self.size);
        let offset = RING_HEADER_SIZE + slot * USED_ELEMENT_SIZE;
        let ipa = offset_address(self.device_area, offset, USED_ELEMENT_SIZE as usize)?;
        let mut element = [0u8; USED_ELEMENT_SIZE as usize];
        element[..4].copy_from_slice(&u32::from(head).to_le_bytes());
        element[4..].copy_from_slice(&written.to_le_bytes());
        memory.write(ipa, &element)?;
        let next_used = self.next_used.wrapping_add(1);
        let ipa = offset_address(self.device_area, RING_INDEX_OFFSET, 2)?;
        memory.write(ipa, &next_used.to_le_bytes())?;
        self.next_used = next_used;
        self.next_available = self.next_available.wrapping_add(1);
        self.head_progress = 0;
        transfer.used += 1;
        Ok(())
    }
}
