//! `control.bench`: the cost of each task service, in cycles of the PMU cycle counter (the VM
//! owns the PMU; under QEMU's icount a cycle is an instruction), with the null hypercall
//! beside them. Prints `bench: <name> min=<n> avg=<n> max=<n>` lines, then `bench: done`.
//!
//! - `task-create`, `task-launch` (a release in the future: no switch), `task-delete` (a
//!   launched task that is not running): the hypercall's round trip from this vCPU;
//! - `task-wait`: from a task's KEEL_TASK_WAIT to the first instruction of the next task
//!   released at the same time (the job's end, the scheduler, one switch);
//! - `hvc-null`: KEEL_VERSION's round trip, the reference of the ratios.

use core::sync::atomic::{AtomicU64, Ordering};

use keel_guest::pmu;
use keel_guest::task::{self, TaskSpec, TaskStart};
use keel_guest::{keel_version, println, system_off, timer};

use crate::Clock;

const ROUNDS: usize = 64;

/// min / avg / max of `samples`.
fn print(name: &str, samples: &[u64]) {
    let min = samples.iter().copied().min().unwrap_or(0);
    let max = samples.iter().copied().max().unwrap_or(0);
    let avg = samples.iter().sum::<u64>() / samples.len().max(1) as u64;
    println!("bench: {name} min={min} avg={avg} max={max}");
}

fn spec(pcpu: u8, period_us: u64, priority: u8) -> TaskSpec {
    TaskSpec {
        period_ns: period_us * 1_000,
        budget_ns: 50_000,
        deadline_ns: 0,
        pcpu,
        priority,
    }
}

/// The virtual counter when task "first" entered KEEL_TASK_WAIT, and the samples of
/// task "second"'s first instruction after it (counter ticks: each task has a PMU of its own,
/// stopped while the other runs, so the pair is timed with the counter the two share).
static WAIT_START: AtomicU64 = AtomicU64::new(0);
static WAIT_SAMPLES: [AtomicU64; ROUNDS] = [const { AtomicU64::new(0) }; ROUNDS];
static WAIT_ROUND: AtomicU64 = AtomicU64::new(0);

/// Released with `second`, earlier deadline (or higher priority): runs first, stamps, waits.
fn first(_: u64) -> ! {
    loop {
        WAIT_START.store(timer::counter(), Ordering::Relaxed);
        let _ = task::wait_next_period();
    }
}

/// Runs when `first` has waited: records the cost.
fn second(_: u64) -> ! {
    loop {
        let now = timer::counter();
        let round = WAIT_ROUND.fetch_add(1, Ordering::Relaxed) as usize;
        if let Some(sample) = WAIT_SAMPLES.get(round) {
            sample.store(
                now.wrapping_sub(WAIT_START.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
        }
        let _ = task::wait_next_period();
    }
}

static FIRST: TaskStart = TaskStart {
    main: first,
    arg: 0,
};
static SECOND: TaskStart = TaskStart {
    main: second,
    arg: 0,
};
static IDLE: TaskStart = TaskStart {
    main: first,
    arg: 0,
};

/// Runs the benchmarks on pCPU `pcpu`.
pub fn run(pcpu: u8) -> ! {
    pmu::enable_cycle_counter();
    let clock = Clock::new();
    let stack = |index: usize| crate::control::stack_top(index);
    let mut null = [0u64; ROUNDS];
    for sample in &mut null {
        let start = pmu::cycle_counter();
        let _ = keel_version();
        *sample = pmu::cycle_counter() - start;
    }
    let (mut create, mut launch, mut delete) = ([0u64; ROUNDS], [0u64; ROUNDS], [0u64; ROUNDS]);
    for round in 0..ROUNDS {
        let start = pmu::cycle_counter();
        let created = task::create(&IDLE, stack(0), spec(pcpu, 10_000, 50));
        create[round] = pmu::cycle_counter() - start;
        let Ok(created) = created else {
            println!("bench: task-create refused: {created:?}");
            system_off();
        };
        let far = timer::counter() + clock.us(1_000_000);
        let start = pmu::cycle_counter();
        let _ = task::launch(created, far);
        launch[round] = pmu::cycle_counter() - start;
        let start = pmu::cycle_counter();
        let _ = task::delete(created);
        delete[round] = pmu::cycle_counter() - start;
    }
    // Two tasks released together: `first` (shorter period: earlier deadline, higher
    // priority) runs its empty job and waits; `second` runs next.
    let release = timer::counter() + clock.us(2_000);
    let a = task::create(&FIRST, stack(1), spec(pcpu, 1_000, 60));
    let b = task::create(&SECOND, stack(2), spec(pcpu, 2_000, 55));
    if let (Ok(a), Ok(b)) = (a, b) {
        let _ = task::launch(a, release);
        let _ = task::launch(b, release);
    } else {
        println!("bench: task-wait: tasks refused: {a:?} {b:?}");
        system_off();
    }
    crate::sleep_until(release + clock.us(2_000 * (ROUNDS as u64 + 2)));
    // Ticks to nanoseconds, which are instructions under `-icount shift=0` (16 per tick of
    // QEMU's 62.5 MHz counter: this figure's resolution).
    let per_second = timer::frequency().max(1);
    let wait: [u64; ROUNDS] = core::array::from_fn(|i| {
        WAIT_SAMPLES[i].load(Ordering::Relaxed) * 1_000_000_000 / per_second
    });
    print("hvc-null", &null);
    print("task-create", &create);
    print("task-launch", &launch);
    print("task-delete", &delete);
    print("task-wait", &wait);
    println!("bench: done");
    system_off();
}
