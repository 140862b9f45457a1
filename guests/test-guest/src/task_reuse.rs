//! Task-reuse mode (`keel.mode=task-reuse`, issue 38): the life of a real-time task's index
//! after deletes, on the EDF pCPU this vCPU shares with its tasks. First a polling task is
//! created, launched, sent a message and deleted once it ran; then, `keel.rounds=<n>` times
//! (default 5):
//!
//! 1. a task is created in the same index, launched with its first release at `u64::MAX`,
//!    sent a 16-byte message (queued: 1) and deleted before it ever runs;
//! 2. a new task is created in that index again and launched for now; after three of its
//!    periods (and a little), its first poll must have found its queue empty and it must
//!    have run a job each period, by its own count and Keel's.
//!
//! Each step prints one line a scenario checks:
//!
//! - `task-reuse: first handle=<hex> jobs=<n>` (the polling task, before its delete)
//! - `task-reuse: round <r> far handle=<hex> launch=<result> send=<result> delete=<result>`
//! - `task-reuse: round <r> new handle=<hex> launch=<result> jobs=<n> first-poll=<empty|message|error|none> keel-jobs=<n> misses=<n> overruns=<n>`
//! - `task-reuse: done`, then SYSTEM_OFF.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU64, Ordering};

use keel_guest::bootargs::BootArgs;
use keel_guest::message::{self, MessageError, ReceiveError};
use keel_guest::task::{self, Task, TaskSpec, TaskStart};
use keel_guest::{println, system_off, timer, vm_id};

/// Every task's period and budget (the issue's: 10 ms, 1 ms).
const PERIOD_NS: u64 = 10_000_000;
const BUDGET_NS: u64 = 1_000_000;

/// The one task's stack (one task exists at a time: each is deleted before the next is
/// created, and a delete of a task not running stops it at once).
const STACK_SIZE: usize = 16 * 1024;
#[repr(C, align(16))]
struct Stack(UnsafeCell<[u8; STACK_SIZE]>);
// SAFETY: used only by the task that exists (its own stack), never read by anyone else; the
// rest of the program only takes its address.
unsafe impl Sync for Stack {}
static STACK: Stack = Stack(UnsafeCell::new([0; STACK_SIZE]));

/// Jobs the current task ran (reset by vCPU 0 before each launch, while no task runs).
static JOBS: AtomicU64 = AtomicU64::new(0);
/// What the current task's first poll found: [`NONE`], [`EMPTY`], [`MESSAGE`] or [`ERROR`].
static FIRST_POLL: AtomicU64 = AtomicU64::new(NONE);
const NONE: u64 = 0;
const EMPTY: u64 = 1;
const MESSAGE: u64 = 2;
const ERROR: u64 = 3;

static START: TaskStart = TaskStart {
    main: task_main,
    arg: 0,
};

/// Each job: the first one polls the queue once and records what it found; every job counts
/// itself and waits for the next release.
fn task_main(_: u64) -> ! {
    loop {
        if JOBS.load(Ordering::Relaxed) == 0 {
            let mut buffer = [0u8; 64];
            let found = match message::receive(&mut buffer, 0) {
                Ok(_) => MESSAGE,
                Err(ReceiveError::Refused(MessageError::Empty)) => EMPTY,
                Err(_) => ERROR,
            };
            FIRST_POLL.store(found, Ordering::Relaxed);
        }
        JOBS.fetch_add(1, Ordering::Release);
        let _ = task::wait_next_period();
    }
}

fn poll_name(found: u64) -> &'static str {
    match found {
        EMPTY => "empty",
        MESSAGE => "message",
        ERROR => "error",
        _ => "none",
    }
}

/// Sleeps until the counter reaches `until`, giving the pCPU to the tasks.
fn sleep_until(until: u64) {
    while timer::counter() < until {
        timer::sleep_until(until);
    }
}

fn ticks_of_ns(ns: u64) -> u64 {
    ns * timer::frequency() / 1_000_000_000
}

/// Creates the task, its state reset first (no task runs now); a refusal ends the run with
/// its line (`task-reuse: <step> create refused: <error>`).
fn create(pcpu: u8, step: core::fmt::Arguments<'_>) -> Task {
    JOBS.store(0, Ordering::Relaxed);
    FIRST_POLL.store(NONE, Ordering::Relaxed);
    let spec = TaskSpec {
        period_ns: PERIOD_NS,
        budget_ns: BUDGET_NS,
        deadline_ns: 0,
        pcpu,
        priority: 0,
    };
    match task::create(&START, STACK.0.get() as u64 + STACK_SIZE as u64, spec) {
        Ok(task) => task,
        Err(error) => {
            println!("task-reuse: {step} create refused: {error:?}");
            system_off();
        }
    }
}

/// Runs the mode (see the module's doc).
pub fn run(args: BootArgs<'_>) -> ! {
    let rounds = args
        .value("keel.rounds")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(5);
    let pcpu = args
        .value("keel.pcpu")
        .and_then(|v| v.parse::<u8>().ok())
        .unwrap_or(1);
    let (vm, _) = vm_id();
    // A task's vCPU is the VM's configured ones (one here) plus its index.
    let vcpu_of = |task: Task| 1 + (task.0 & 0xff);
    let first = create(pcpu, format_args!("first"));
    let _ = task::launch(first, 0);
    let _ = message::send(vm, vcpu_of(first), b"to the first one");
    sleep_until(timer::counter() + ticks_of_ns(2 * PERIOD_NS + PERIOD_NS / 2));
    println!(
        "task-reuse: first handle={:#x} jobs={}",
        first.0,
        JOBS.load(Ordering::Acquire)
    );
    let _ = task::delete(first);
    for round in 0..rounds {
        let far = create(pcpu, format_args!("round {round} far"));
        let launch = task::launch(far, u64::MAX);
        let send = message::send(vm, vcpu_of(far), &[0x5a; 16]);
        let delete = task::delete(far);
        println!(
            "task-reuse: round {round} far handle={:#x} launch={launch:?} send={send:?} delete={delete:?}",
            far.0
        );
        let new = create(pcpu, format_args!("round {round} new"));
        let launched = timer::counter();
        let launch = task::launch(new, 0);
        // Three periods and a little: jobs released at 0, 10 and 20 ms, the last one done.
        sleep_until(launched + ticks_of_ns(3 * PERIOD_NS - PERIOD_NS / 2));
        let jobs = JOBS.load(Ordering::Acquire);
        let (keel_jobs, misses, overruns) = match task::stats(new) {
            Ok(s) => (s.jobs, s.deadline_misses, s.overruns),
            Err(_) => (u64::MAX, u64::MAX, u64::MAX),
        };
        println!(
            "task-reuse: round {round} new handle={:#x} launch={launch:?} jobs={jobs} first-poll={} keel-jobs={keel_jobs} misses={misses} overruns={overruns}",
            new.0,
            poll_name(FIRST_POLL.load(Ordering::Acquire))
        );
        let _ = task::delete(new);
    }
    println!("task-reuse: done");
    system_off();
}
