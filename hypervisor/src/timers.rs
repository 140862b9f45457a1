//! Each pCPU's timer queue on its EL2 physical timer (CNTHP): one deadline per kind of event,
//! the timer always armed for the earliest. Only the pCPU itself reads or writes its queue
//! (the atomics make the table `Sync`; every access is Relaxed).

use core::sync::atomic::{AtomicU64, Ordering};

use crate::arch::boot::MAX_CPUS;
use crate::arch::{cpu, timer};

/// What a deadline is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Deadline {
    /// The console's partial-line flush and UART drain.
    Console = 0,
    /// The scheduler's next decision: a budget's end, a release, a quantum's end.
    Schedule = 1,
    /// The earliest virtual-timer deadline of the vCPUs here that are not running, or the
    /// end of a wait for a message of one of them.
    VirtualTimers = 2,
    /// A pinned vCPU waiting in KEEL_MSG_RECV: the end of its wait (its pCPU sleeps until then
    /// or an interrupt).
    MessageWait = 3,
}

const KINDS: usize = 4;
const NONE: u64 = u64::MAX;

struct Queue {
    at: [AtomicU64; KINDS],
}

static QUEUES: [Queue; MAX_CPUS] = [const {
    Queue {
        at: [const { AtomicU64::new(NONE) }; KINDS],
    }
}; MAX_CPUS];

fn this_queue() -> &'static Queue {
    &QUEUES[cpu::index()]
}

/// Sets this pCPU's `kind` deadline to counter value `at` (replacing the previous one).
pub fn set(kind: Deadline, at: u64) {
    this_queue().at[kind as usize].store(at, Ordering::Relaxed);
    program();
}

/// Sets (or clears, with `None`) several of this pCPU's deadlines, then arms the timer once.
pub fn set_all(deadlines: &[(Deadline, Option<u64>)]) {
    let queue = this_queue();
    for &(kind, at) in deadlines {
        queue.at[kind as usize].store(at.unwrap_or(NONE), Ordering::Relaxed);
    }
    program();
}

/// The EL2 timer fired: clears and returns the deadlines that are due at `now` (bit n =
/// [`Deadline`] n), and re-arms the timer for the rest.
pub fn take_due(now: u64) -> u32 {
    let mut due = 0;
    for (kind, at) in this_queue().at.iter().enumerate() {
        if at.load(Ordering::Relaxed) <= now {
            at.store(NONE, Ordering::Relaxed);
            due |= 1 << kind;
        }
    }
    program();
    due
}

/// Whether `kind` is among the deadlines [`take_due`] returned.
pub fn is_due(due: u32, kind: Deadline) -> bool {
    due & (1 << kind as usize) != 0
}

fn program() {
    let earliest = this_queue()
        .at
        .iter()
        .map(|at| at.load(Ordering::Relaxed))
        .min()
        .unwrap_or(NONE);
    if earliest == NONE {
        timer::disarm_hyp_timer();
    } else {
        timer::arm_hyp_timer_at(earliest);
    }
}
