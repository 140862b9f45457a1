//! Each pCPU's timer queue on its EL2 physical timer (CNTHP): one deadline per kind of event,
//! the timer armed for the earliest or for an earlier time: a deadline that moves later does
//! not re-arm it (the timer fires early once, finds nothing due and is armed exactly then).
//! Only the pCPU itself reads or writes its queue (the atomics make the table `Sync`; every
//! access is Relaxed).

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
    /// The earliest watchdog of the VMs whose vCPU 0 runs here, or at once for health events
    /// noted here (see `health`).
    Health = 4,
}

const KINDS: usize = 5;
const NONE: u64 = u64::MAX;

struct Queue {
    at: [AtomicU64; KINDS],
    /// What the timer is armed for (`NONE`: disarmed).
    armed: AtomicU64,
}

/// All zero bytes (so not in the image) until [`init`] empties every queue.
static QUEUES: [Queue; MAX_CPUS] = [const {
    Queue {
        at: [const { AtomicU64::new(0) }; KINDS],
        armed: AtomicU64::new(0),
    }
}; MAX_CPUS];

/// Empties every pCPU's queue (no deadline, the timer disarmed). Called once, by pCPU 0 at
/// boot before any deadline is set or any other pCPU starts.
pub fn init() {
    for queue in &QUEUES {
        for at in &queue.at {
            at.store(NONE, Ordering::Relaxed);
        }
        queue.armed.store(NONE, Ordering::Relaxed);
    }
}

#[inline(always)]
fn this_queue() -> &'static Queue {
    cpu::this(&QUEUES)
}

/// Sets this pCPU's `kind` deadline to counter value `at` (replacing the previous one). As
/// in [`set_schedule`], the timer is re-armed only for a deadline earlier than what it is
/// armed for: a later one (or `u64::MAX`, none) leaves it to fire early once.
pub fn set(kind: Deadline, at: u64) {
    let queue = this_queue();
    queue.at[kind as usize].store(at, Ordering::Relaxed);
    if at < queue.armed.load(Ordering::Relaxed) {
        program();
    }
}

/// Moves this pCPU's `kind` deadline to counter value `at` if that is earlier than the one it
/// has (none counts as latest).
pub fn set_earlier(kind: Deadline, at: u64) {
    if at < this_queue().at[kind as usize].load(Ordering::Relaxed) {
        set(kind, at);
    }
}

/// Sets this pCPU's scheduler deadlines ([`Deadline::Schedule`] and
/// [`Deadline::VirtualTimers`]; `None` clears one): the shared pCPU's call after every
/// decision. The timer is re-armed only if the earliest deadline moved before what it is
/// armed for: a round-robin switch moves the quantum's end later every time, and the timer,
/// left armed, fires early once ([`take_due`] finds nothing due and re-arms it exactly).
#[inline(always)]
pub fn set_schedule(schedule: Option<u64>, virtual_timers: Option<u64>) {
    let queue = this_queue();
    let schedule = schedule.unwrap_or(NONE);
    let virtual_timers = virtual_timers.unwrap_or(NONE);
    queue.at[Deadline::Schedule as usize].store(schedule, Ordering::Relaxed);
    queue.at[Deadline::VirtualTimers as usize].store(virtual_timers, Ordering::Relaxed);
    if schedule.min(virtual_timers) < queue.armed.load(Ordering::Relaxed) {
        program();
    }
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

/// Arms the timer for the earliest deadline exactly.
fn program() {
    let queue = this_queue();
    let load = |kind: usize| queue.at[kind].load(Ordering::Relaxed);
    let mut earliest = load(0).min(load(1)).min(load(2).min(load(3)));
    if crate::config::HEALTH {
        earliest = earliest.min(load(4));
    }
    queue.armed.store(earliest, Ordering::Relaxed);
    if earliest == NONE {
        timer::disarm_hyp_timer();
    } else {
        timer::arm_hyp_timer_at(earliest);
    }
}
