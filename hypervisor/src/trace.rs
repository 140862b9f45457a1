//! Keel's trace: per pCPU, a ring of 16-byte records (`keel_core::trace` has the format and
//! the reader), on when the configuration asks for it (`[system] trace = { size = "256K" }`).
//!
//! The rings are one static table sized by the configuration compiler
//! ([`TRACE_RING_BYTES`], [`TRACE_RINGS`]): without a trace both are 0, [`ON`] is a constant
//! false, and every [`record`] compiles to nothing. Each pCPU writes its own ring only, always
//! with interrupts masked at EL2, so a write is never interrupted by another on the same
//! ring: the record's two words, then the head (release), which a reader on a stopped machine
//! (`cargo xtask trace`, through QEMU's `pmemsave`) or on another pCPU trusts. A full ring
//! overwrites its oldest records, and the reader counts what was lost.

use core::sync::atomic::{AtomicU64, Ordering};

use keel_core::trace::{self, RECORD_BYTES};
pub use keel_core::trace::{
    Kind, StopReason, SwitchReason, EXIT_IRQ, INJECT_AFTER_EOI, INJECT_HARDWARE, NO_VM,
};

use crate::arch::{cpu, timer};
use crate::config::{TRACE_RINGS, TRACE_RING_BYTES};

/// Records in each ring (a power of two, the configuration compiler checks).
const RECORDS: usize = TRACE_RING_BYTES / RECORD_BYTES;

/// Whether this build traces at all.
pub const ON: bool = RECORDS != 0 && TRACE_RINGS != 0;

/// One pCPU's ring, laid out as `keel_core::trace` reads it: the header's eight words, then
/// the records.
#[repr(C, align(64))]
struct Ring {
    header: [AtomicU64; 8],
    records: [[AtomicU64; 2]; RECORDS],
}

/// Every pCPU's ring, all zero (in .bss) until [`init`]; physically contiguous, where Keel was
/// loaded, even when Keel is coloured (the trace tool reads the rings as one range).
#[unsafe(link_section = ".bss_contiguous")]
static RINGS: [Ring; TRACE_RINGS] = [const {
    Ring {
        header: [const { AtomicU64::new(0) }; 8],
        records: [const { [const { AtomicU64::new(0) }; 2] }; RECORDS],
    }
}; TRACE_RINGS];

/// Writes this pCPU's ring header (magic, pCPU, capacity, head 0, counter frequency). Each
/// pCPU calls it once at its bring-up, before it records anything.
pub fn init() {
    if !ON {
        return;
    }
    let pcpu = cpu::index();
    let Some(ring) = RINGS.get(pcpu) else {
        return;
    };
    let header = trace::Header {
        pcpu: pcpu as u32,
        capacity: RECORDS as u32,
        head: 0,
        frequency: timer::frequency(),
    }
    .encode();
    for (word, value) in ring.header.iter().zip(header) {
        word.store(value, Ordering::Relaxed);
    }
}

/// Where the rings are (physically: in `.bss_contiguous`, Keel's address is the physical one),
/// how many and each one's bytes, header included: what a tool reading them from memory needs.
pub fn rings() -> (u64, usize, usize) {
    (
        RINGS.as_ptr() as u64,
        TRACE_RINGS,
        core::mem::size_of::<Ring>(),
    )
}

/// Records an event on this pCPU's ring (nothing without a trace). `vm` and `vcpu` are
/// truncated to their 8-bit fields ([`trace::NO_VM`] for none).
#[inline(always)]
pub fn record(kind: Kind, vm: usize, vcpu: usize, detail: u8, arg: u32) {
    if ON {
        write(trace::word(kind, vm as u8, vcpu as u8, detail, arg));
    }
}

/// Writes one record: the counter and `word` into the slot after the last, then the head.
#[inline(never)]
fn write(word: u64) {
    let Some(ring) = RINGS.get(cpu::index()) else {
        return;
    };
    let head = ring.header[2].load(Ordering::Relaxed);
    // RECORDS is a power of two (the configuration compiler checks), so this is the slot.
    let Some(slot) = ring.records.get(head as usize & RECORDS.wrapping_sub(1)) else {
        return;
    };
    slot[0].store(timer::now(), Ordering::Relaxed);
    slot[1].store(word, Ordering::Relaxed);
    ring.header[2].store(head + 1, Ordering::Release);
}

/// What a copy of a ring's records gave ([`read`]).
pub struct Copied {
    /// Records copied and valid.
    pub count: u64,
    /// The index of the first.
    pub first: u64,
    /// The ring's head when the copy ended.
    pub head: u64,
    /// Where the first is in the buffer, in bytes.
    pub offset: u64,
}

/// Copies records of pCPU `pcpu`'s ring from index `from` on (or the oldest it still holds)
/// into `out`, in the ring's format, at most `limit` of them and as many as fit. Another pCPU
/// may be writing that ring meanwhile: its head is read before and after, and the records
/// it may have overwritten during the copy (the writer reuses a slot `capacity` records
/// later, and may be writing the slot of the head itself) are not counted. `None` without a
/// trace or for a pCPU with no ring.
pub fn read(pcpu: usize, from: u64, out: &mut [u8], limit: usize) -> Option<Copied> {
    if !ON {
        return None;
    }
    let ring = RINGS.get(pcpu)?;
    let capacity = RECORDS as u64;
    let head = ring.header[2].load(Ordering::Acquire);
    let start = from.max(head.saturating_sub(capacity)).min(head);
    let count = ((head - start) as usize)
        .min(out.len() / RECORD_BYTES)
        .min(limit);
    for (n, bytes) in out.chunks_exact_mut(RECORD_BYTES).take(count).enumerate() {
        let index = start + n as u64;
        let slot = ring.records.get(index as usize & RECORDS.wrapping_sub(1))?;
        bytes[..8].copy_from_slice(&slot[0].load(Ordering::Relaxed).to_le_bytes());
        bytes[8..].copy_from_slice(&slot[1].load(Ordering::Relaxed).to_le_bytes());
    }
    let after = ring.header[2].load(Ordering::Acquire);
    let valid_from = (after + 1).saturating_sub(capacity);
    let skipped = valid_from.saturating_sub(start).min(count as u64);
    Some(Copied {
        count: count as u64 - skipped,
        first: start + skipped,
        head: after,
        offset: skipped * RECORD_BYTES as u64,
    })
}
