//! Keel's trace: the record format of its per-pCPU rings, shared by the hypervisor (which
//! writes them), the tools that read them out of a stopped machine's memory (`cargo xtask
//! trace`), and a manager VM that copies them with KEEL_TRACE_READ.
//!
//! A ring is a [`Header`] of [`HEADER_BYTES`] followed by a power-of-two number of 16-byte
//! records. Only its own pCPU writes it, with interrupts masked at EL2 (so never reentered):
//! record `n` (counting from 0 since boot) goes to slot `n % capacity`, and the header's
//! `head` is then `n + 1`. A full ring overwrites its oldest records: it is a flight
//! recorder, and a reader is told how many it lost (`head - capacity` when `head` is above
//! the capacity) rather than the writer ever stopping or waiting.
//!
//! A record is two little-endian words: the system counter when it was written, then the
//! event: its [`Kind`] in bits 0-7, the VM in 8-15 ([`NO_VM`] for none), the vCPU in 16-23,
//! a kind's detail in 24-31 and its argument in 32-63.

/// Bytes of a ring's header.
pub const HEADER_BYTES: usize = 64;
/// Bytes of one record.
pub const RECORD_BYTES: usize = 16;
/// The header's first word: "KEELTRC1".
pub const MAGIC: u64 = u64::from_le_bytes(*b"KEELTRC1");
/// The VM field of an event that concerns no VM (a physical interrupt taken at idle).
pub const NO_VM: u8 = 0xff;
/// The detail of an [`Kind::Exit`] for a physical interrupt taken while a guest ran (an
/// exception class has 6 bits, so no class is this).
pub const EXIT_IRQ: u8 = 0xff;
/// [`Kind::Inject`]'s detail: hardware-linked to the physical interrupt.
pub const INJECT_HARDWARE: u8 = 1;
/// [`Kind::Inject`]'s detail: listed again in the register of the same interrupt, which the
/// guest finished (its EOI).
pub const INJECT_AFTER_EOI: u8 = 2;
/// Smallest and largest ring a configuration may ask for, per pCPU (records and header).
pub const MIN_RING_BYTES: u64 = 4 << 10;
pub const MAX_RING_BYTES: u64 = 64 << 20;

/// What happened. The numbering is the format's: new kinds are added at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A guest exit: detail is the exception class (ESR_EL2.EC), or [`EXIT_IRQ`] for a
    /// physical interrupt; the argument the hypercall's function id (HVC), the syndrome's ISS
    /// (system register), the faulting guest-physical page number (data and instruction
    /// aborts: IPA >> 12), or the interrupt's INTID.
    Exit = 1,
    /// Keel is done with the exit and returns to a guest (or switches: see `SwitchIn`).
    ExitEnd = 2,
    /// A physical interrupt acknowledged at EL2 (but the first of an exit, which the exit's
    /// record names): the argument is its INTID.
    PhysIrq = 3,
    /// A virtual interrupt written into a list register for the vCPU: the argument is its
    /// INTID; the detail has [`INJECT_HARDWARE`] if it is linked to a physical one, and
    /// [`INJECT_AFTER_EOI`] if the same register held the same interrupt, which the guest
    /// finished (the virtual timer's fast path: that EOI has no record of its own).
    Inject = 4,
    /// A list register found finished (the guest's EOI) and taken back: the argument is its
    /// INTID.
    Eoi = 5,
    /// The vCPU is loaded on this pCPU and runs next.
    SwitchIn = 6,
    /// The running vCPU leaves this pCPU: detail is a [`SwitchReason`], the argument the
    /// budget it has left in counter ticks as the scheduler last charged it (`u32::MAX`: no
    /// reservation). Durations in arguments are counter ticks (the header's frequency).
    SwitchOut = 7,
    /// The scheduler decided: the vCPU it picked (VM [`NO_VM`]: none, the pCPU idles) and, in
    /// the argument, counter ticks until it decides again (`u32::MAX`: no deadline).
    Decide = 8,
    /// Jobs of the vCPU were released since the scheduler last decided (the detail: how many,
    /// 1 but for jobs skipped while nothing decided; the same for the three kinds below); the
    /// argument is its budget then, in counter ticks.
    JobRelease = 9,
    /// Jobs of the vCPU completed (it blocked): the argument is the last one's response time
    /// in counter ticks.
    JobComplete = 10,
    /// Jobs of the vCPU missed their deadline.
    JobMiss = 11,
    /// The vCPU used up its budget while runnable and is throttled until its next window.
    BudgetExhausted = 12,
    /// A message sent (KEEL_MSG_SEND): the argument is the destination VM in bits 16-31 and
    /// the length in bytes in 0-15.
    MessageSend = 13,
    /// A message received (KEEL_MSG_RECV): the argument is its length in bytes.
    MessageReceive = 14,
    /// A channel's doorbell rung (KEEL_CHANNEL_NOTIFY): the argument is the channel.
    Doorbell = 15,
    /// The VM started (built and its first vCPU released).
    VmStart = 16,
    /// The VM stopped: detail is a [`StopReason`].
    VmStop = 17,
    /// The VM was reset (SYSTEM_RESET): its image is reloaded.
    VmReset = 18,
    /// A guest's KEEL_TRACE_MARK: the argument is its value.
    Mark = 19,
}

impl Kind {
    /// Every kind, in numbering order.
    pub const ALL: [Kind; 19] = [
        Kind::Exit,
        Kind::ExitEnd,
        Kind::PhysIrq,
        Kind::Inject,
        Kind::Eoi,
        Kind::SwitchIn,
        Kind::SwitchOut,
        Kind::Decide,
        Kind::JobRelease,
        Kind::JobComplete,
        Kind::JobMiss,
        Kind::BudgetExhausted,
        Kind::MessageSend,
        Kind::MessageReceive,
        Kind::Doorbell,
        Kind::VmStart,
        Kind::VmStop,
        Kind::VmReset,
        Kind::Mark,
    ];

    /// The kind numbered `value`.
    pub fn from_u8(value: u8) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|kind| *kind as u8 == value)
    }

    /// Its name, as tools show it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Exit => "exit",
            Kind::ExitEnd => "exit-end",
            Kind::PhysIrq => "physical-irq",
            Kind::Inject => "inject",
            Kind::Eoi => "eoi",
            Kind::SwitchIn => "switch-in",
            Kind::SwitchOut => "switch-out",
            Kind::Decide => "decide",
            Kind::JobRelease => "job-release",
            Kind::JobComplete => "job-complete",
            Kind::JobMiss => "job-miss",
            Kind::BudgetExhausted => "budget-exhausted",
            Kind::MessageSend => "message-send",
            Kind::MessageReceive => "message-receive",
            Kind::Doorbell => "doorbell",
            Kind::VmStart => "vm-start",
            Kind::VmStop => "vm-stop",
            Kind::VmReset => "vm-reset",
            Kind::Mark => "mark",
        }
    }
}

/// Why a vCPU left its pCPU (the detail of [`Kind::SwitchOut`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum SwitchReason {
    /// The scheduler chose another vCPU (a release, a wake, a budget or quantum's end).
    Preempted = 0,
    /// KEEL_YIELD or KEEL_TASK_WAIT: it gave the pCPU away.
    Yielded = 1,
    /// WFI, CPU_SUSPEND or KEEL_MSG_RECV with nothing to take: it waits.
    Waiting = 2,
    /// It stopped (CPU_OFF, its VM ended or reset).
    Stopped = 3,
}

impl SwitchReason {
    /// The reason numbered `value`.
    pub fn from_u8(value: u8) -> Option<SwitchReason> {
        [
            SwitchReason::Preempted,
            SwitchReason::Yielded,
            SwitchReason::Waiting,
            SwitchReason::Stopped,
        ]
        .into_iter()
        .find(|reason| *reason as u8 == value)
    }

    /// Its name, as tools show it.
    pub fn name(self) -> &'static str {
        match self {
            SwitchReason::Preempted => "preempted",
            SwitchReason::Yielded => "yielded",
            SwitchReason::Waiting => "waiting",
            SwitchReason::Stopped => "stopped",
        }
    }
}

/// Why a VM stopped (the detail of [`Kind::VmStop`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum StopReason {
    /// A fault or a forbidden access: Keel stopped it.
    Fault = 0,
    /// The guest powered off (SYSTEM_OFF).
    PowerOff = 1,
}

/// One event, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The system counter when it was written.
    pub time: u64,
    pub kind: Kind,
    /// The VM ([`NO_VM`]: none).
    pub vm: u8,
    pub vcpu: u8,
    pub detail: u8,
    pub arg: u32,
}

/// The event word (a record's second) of a kind and its fields.
#[inline(always)]
pub const fn word(kind: Kind, vm: u8, vcpu: u8, detail: u8, arg: u32) -> u64 {
    kind as u64
        | (vm as u64) << 8
        | (vcpu as u64) << 16
        | (detail as u64) << 24
        | (arg as u64) << 32
}

impl Event {
    /// The record's two words.
    pub fn encode(&self) -> [u64; 2] {
        [
            self.time,
            word(self.kind, self.vm, self.vcpu, self.detail, self.arg),
        ]
    }

    /// The event of a record, or `None` if its kind is unknown (a slot never written is all
    /// zeros, kind 0).
    pub fn decode(time: u64, word: u64) -> Option<Event> {
        Some(Event {
            time,
            kind: Kind::from_u8(word as u8)?,
            vm: (word >> 8) as u8,
            vcpu: (word >> 16) as u8,
            detail: (word >> 24) as u8,
            arg: (word >> 32) as u32,
        })
    }
}

/// A ring's header, as the hypervisor lays it out (eight little-endian words).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The pCPU whose ring it is.
    pub pcpu: u32,
    /// Records the ring holds (a power of two).
    pub capacity: u32,
    /// Records written since boot.
    pub head: u64,
    /// The system counter's frequency (CNTFRQ_EL0), in Hz.
    pub frequency: u64,
}

impl Header {
    /// The header's words: magic, pCPU and capacity, head, frequency, then zeros.
    pub fn encode(&self) -> [u64; 8] {
        [
            MAGIC,
            u64::from(self.pcpu) | u64::from(self.capacity) << 32,
            self.head,
            self.frequency,
            0,
            0,
            0,
            0,
        ]
    }
}

/// What is wrong with a ring's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// Fewer bytes than a header.
    Short { len: usize },
    /// The first word is not [`MAGIC`].
    BadMagic { found: u64 },
    /// The capacity is zero or not a power of two.
    BadCapacity { capacity: u32 },
    /// The bytes end before the records the header announces.
    Truncated { needed: usize, len: usize },
    /// A record that should hold an event has an unknown kind.
    BadRecord { index: u64, kind: u8 },
    /// A record's time is before the one written before it.
    TimeBackwards { index: u64 },
}

impl core::fmt::Display for RingError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            RingError::Short { len } => {
                write!(f, "{len} bytes, fewer than a ring header ({HEADER_BYTES})")
            }
            RingError::BadMagic { found } => {
                write!(f, "no trace ring here (first word {found:#018x})")
            }
            RingError::BadCapacity { capacity } => {
                write!(f, "capacity {capacity} is not a power of two")
            }
            RingError::Truncated { needed, len } => {
                write!(f, "the ring needs {needed} bytes, {len} given")
            }
            RingError::BadRecord { index, kind } => {
                write!(f, "record {index} has the unknown kind {kind}")
            }
            RingError::TimeBackwards { index } => {
                write!(f, "record {index} is earlier than the record before it")
            }
        }
    }
}

/// A ring read out: its header, how many of its oldest records were overwritten before it
/// was read, and the rest in the order they were written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingView<'a> {
    pub header: Header,
    pub lost: u64,
    records: &'a [u8],
    first: u64,
}

impl RingView<'_> {
    /// The events, oldest first.
    pub fn events(&self) -> impl Iterator<Item = Event> + '_ {
        let capacity = u64::from(self.header.capacity);
        (self.first..self.header.head).filter_map(move |index| {
            let (time, word) = record_at(self.records, (index % capacity) as usize);
            Event::decode(time, word)
        })
    }
}

fn le_word(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

fn record_at(records: &[u8], slot: usize) -> (u64, u64) {
    let at = slot * RECORD_BYTES;
    (le_word(records, at), le_word(records, at + 8))
}

/// Reads a ring from its bytes (header then records, as in the hypervisor's memory), checking
/// that every record since the oldest kept holds an event and that their times never go back.
pub fn read_ring(bytes: &[u8]) -> Result<RingView<'_>, RingError> {
    if bytes.len() < HEADER_BYTES {
        return Err(RingError::Short { len: bytes.len() });
    }
    let magic = le_word(bytes, 0);
    if magic != MAGIC {
        return Err(RingError::BadMagic { found: magic });
    }
    let shape = le_word(bytes, 8);
    let header = Header {
        pcpu: shape as u32,
        capacity: (shape >> 32) as u32,
        head: le_word(bytes, 16),
        frequency: le_word(bytes, 24),
    };
    if !header.capacity.is_power_of_two() {
        return Err(RingError::BadCapacity {
            capacity: header.capacity,
        });
    }
    let needed = HEADER_BYTES + header.capacity as usize * RECORD_BYTES;
    if bytes.len() < needed {
        return Err(RingError::Truncated {
            needed,
            len: bytes.len(),
        });
    }
    let records = &bytes[HEADER_BYTES..needed];
    let capacity = u64::from(header.capacity);
    let first = header.head.saturating_sub(capacity);
    let mut last_time = 0;
    for index in first..header.head {
        let (time, word) = record_at(records, (index % capacity) as usize);
        if Kind::from_u8(word as u8).is_none() {
            return Err(RingError::BadRecord {
                index,
                kind: word as u8,
            });
        }
        if time < last_time {
            return Err(RingError::TimeBackwards { index });
        }
        last_time = time;
    }
    Ok(RingView {
        header,
        lost: first,
        records,
        first,
    })
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    /// A ring of `capacity` records after `events` were written to it, as the hypervisor
    /// writes: slot `n % capacity`, then the head.
    fn ring(capacity: u32, events: &[Event]) -> Vec<u8> {
        let mut words = Header {
            pcpu: 3,
            capacity,
            head: events.len() as u64,
            frequency: 62_500_000,
        }
        .encode()
        .to_vec();
        words.resize(8 + 2 * capacity as usize, 0);
        for (n, event) in events.iter().enumerate() {
            let slot = 8 + 2 * (n % capacity as usize);
            let [time, word] = event.encode();
            words[slot] = time;
            words[slot + 1] = word;
        }
        words.iter().flat_map(|word| word.to_le_bytes()).collect()
    }

    fn event(time: u64, kind: Kind, arg: u32) -> Event {
        Event {
            time,
            kind,
            vm: 1,
            vcpu: 2,
            detail: 0x15,
            arg,
        }
    }

    #[test]
    fn every_kind_round_trips_through_its_record() {
        for (n, kind) in Kind::ALL.iter().enumerate() {
            assert_eq!(*kind as usize, n + 1, "kinds are numbered in order");
            assert_eq!(Kind::from_u8(*kind as u8), Some(*kind));
            let event = Event {
                time: 0x1234_5678_9abc,
                kind: *kind,
                vm: NO_VM,
                vcpu: 7,
                detail: 200,
                arg: 0xc600_0031,
            };
            let [time, word] = event.encode();
            assert_eq!(Event::decode(time, word), Some(event));
        }
        assert_eq!(Kind::from_u8(0), None, "a slot never written is no event");
        assert_eq!(Kind::from_u8(20), None);
    }

    #[test]
    fn a_ring_not_yet_full_gives_its_events_in_order() {
        let events: Vec<Event> = (0..5)
            .map(|n| event(100 + n, Kind::Inject, n as u32))
            .collect();
        let bytes = ring(8, &events);
        let view = read_ring(&bytes).unwrap();
        assert_eq!(view.lost, 0);
        assert_eq!(view.header.pcpu, 3);
        assert_eq!(view.header.frequency, 62_500_000);
        assert_eq!(view.events().collect::<Vec<_>>(), events);
    }

    #[test]
    fn a_ring_that_wrapped_keeps_the_newest_and_counts_the_lost() {
        let events: Vec<Event> = (0..21)
            .map(|n| event(100 + n, Kind::Exit, n as u32))
            .collect();
        let bytes = ring(8, &events);
        let view = read_ring(&bytes).unwrap();
        assert_eq!(view.lost, 13);
        assert_eq!(view.events().collect::<Vec<_>>(), events[13..]);
    }

    #[test]
    fn malformed_rings_are_refused_with_what_is_wrong() {
        let good = ring(8, &[event(5, Kind::Mark, 1), event(9, Kind::Mark, 2)]);
        assert_eq!(read_ring(&good[..40]), Err(RingError::Short { len: 40 }));
        let mut bad = good.clone();
        bad[0] ^= 1;
        assert!(matches!(read_ring(&bad), Err(RingError::BadMagic { .. })));
        let mut bad = good.clone();
        bad[12] = 6; // capacity 6
        assert_eq!(read_ring(&bad), Err(RingError::BadCapacity { capacity: 6 }));
        assert_eq!(
            read_ring(&good[..good.len() - 1]),
            Err(RingError::Truncated {
                needed: good.len(),
                len: good.len() - 1
            })
        );
        let mut bad = good.clone();
        bad[HEADER_BYTES + RECORD_BYTES + 8] = 99; // record 1's kind
        assert_eq!(
            read_ring(&bad),
            Err(RingError::BadRecord { index: 1, kind: 99 })
        );
        let backwards = ring(8, &[event(9, Kind::Mark, 1), event(5, Kind::Mark, 2)]);
        assert_eq!(
            read_ring(&backwards),
            Err(RingError::TimeBackwards { index: 1 })
        );
        assert_eq!(
            std::format!("{}", RingError::BadCapacity { capacity: 6 }),
            "capacity 6 is not a power of two"
        );
    }
}
