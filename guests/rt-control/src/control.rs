//! The control application: three periodic tasks created, launched and watched by vCPU 0.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU64, Ordering};

use keel_guest::bootargs::BootArgs;
use keel_guest::histogram::{Histogram, Line, Printer};
use keel_guest::task::{self, Task, TaskSpec, TaskStart};
use keel_guest::timer;
use keel_guest::{println, system_off};

use crate::{sleep_until, Clock};

/// A task's timing and work, in microseconds.
struct Plan {
    period_us: u64,
    budget_us: u64,
    work_us: u64,
    priority: u8,
}

/// The three control tasks: fast inner loop, middle loop, slow supervisor (U = 0.55).
const PLANS: [Plan; 3] = [
    Plan {
        period_us: 1_000,
        budget_us: 200,
        work_us: 100,
        priority: 30,
    },
    Plan {
        period_us: 5_000,
        budget_us: 1_000,
        work_us: 500,
        priority: 20,
    },
    Plan {
        period_us: 20_000,
        budget_us: 3_000,
        work_us: 2_000,
        priority: 10,
    },
];
const TASKS: usize = PLANS.len();

/// Stack of one task.
const STACK_SIZE: usize = 16 * 1024;
#[repr(C, align(16))]
struct Stack(UnsafeCell<[u8; STACK_SIZE]>);
// SAFETY: each stack is used by one task at a time (its own), never read by anyone else;
// the rest of the program only takes its address.
unsafe impl Sync for Stack {}
static STACKS: [Stack; TASKS + 1] = [const { Stack(UnsafeCell::new([0; STACK_SIZE])) }; TASKS + 1];

pub fn stack_top(index: usize) -> u64 {
    STACKS[index].0.get() as u64 + STACK_SIZE as u64
}

/// What each task records about its jobs (counter ticks), read by vCPU 0.
struct Record {
    jobs: AtomicU64,
    jitter_min: AtomicU64,
    jitter_max: AtomicU64,
    response_min: AtomicU64,
    response_max: AtomicU64,
    response_sum: AtomicU64,
}

static RECORDS: [Record; TASKS + 1] = [const {
    Record {
        jobs: AtomicU64::new(0),
        jitter_min: AtomicU64::new(u64::MAX),
        jitter_max: AtomicU64::new(0),
        response_min: AtomicU64::new(u64::MAX),
        response_max: AtomicU64::new(0),
        response_sum: AtomicU64::new(0),
    }
}; TASKS + 1];

/// Each job's response time and release jitter (counter ticks), by task: recorded by the task
/// after its job, printed by vCPU 0 with `control.histograms`.
static RESPONSES: [Histogram; TASKS + 1] = [const { Histogram::new() }; TASKS + 1];
static JITTERS: [Histogram; TASKS + 1] = [const { Histogram::new() }; TASKS + 1];
/// The names they are printed as.
const RESPONSE_NAMES: [&str; TASKS] = ["task0-response", "task1-response", "task2-response"];
const JITTER_NAMES: [&str; TASKS] = ["task0-jitter", "task1-jitter", "task2-jitter"];

/// The first release of every task (counter value), and each task's loop iterations per job.
static PHASE: AtomicU64 = AtomicU64::new(0);
static ITERATIONS: [AtomicU64; TASKS + 1] = [const { AtomicU64::new(0) }; TASKS + 1];

static STARTS: [TaskStart; TASKS + 1] = [
    TaskStart {
        main: task_main,
        arg: 0,
    },
    TaskStart {
        main: task_main,
        arg: 1,
    },
    TaskStart {
        main: task_main,
        arg: 2,
    },
    TaskStart {
        main: task_main,
        arg: 3,
    },
];

/// `n` iterations of work the compiler cannot remove.
#[inline(never)]
fn work(n: u64) {
    let mut x = 0u64;
    for i in 0..n {
        x = core::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
    }
    core::hint::black_box(x);
}

/// One task's body: a job per release, then KEEL_TASK_WAIT.
fn task_main(index: u64) -> ! {
    let index = index as usize;
    let clock = Clock::new();
    let period = clock.us(PLANS[index.min(TASKS - 1)].period_us);
    let record = &RECORDS[index];
    loop {
        let start = timer::counter();
        // The ideal release of this job: the last one at or before `start`.
        let phase = PHASE.load(Ordering::Relaxed);
        let release = phase + start.saturating_sub(phase) / period * period;
        work(ITERATIONS[index].load(Ordering::Relaxed));
        let end = timer::counter();
        record.jobs.fetch_add(1, Ordering::Relaxed);
        record
            .jitter_min
            .fetch_min(start - release, Ordering::Relaxed);
        record
            .response_min
            .fetch_min(end - release, Ordering::Relaxed);
        record
            .jitter_max
            .fetch_max(start - release, Ordering::Relaxed);
        record
            .response_max
            .fetch_max(end - release, Ordering::Relaxed);
        record
            .response_sum
            .fetch_add(end - release, Ordering::Relaxed);
        RESPONSES[index].record(end - release);
        JITTERS[index].record(start - release);
        if task::wait_next_period().is_err() {
            println!("control: task {index}: KEEL_TASK_WAIT refused");
        }
    }
}

/// Loop iterations per microsecond of this CPU, measured by a task of its own: vCPU 0 may share
/// the pCPU with a best-effort neighbour (Linux) that would stretch its measurement, a task
/// runs undisturbed within its budget. The calibration task is deleted once it has answered.
static PER_US: AtomicU64 = AtomicU64::new(0);

fn calibration(_: u64) -> ! {
    const TRIAL: u64 = 50_000;
    let clock = Clock::new();
    let mut best = u64::MAX;
    for _ in 0..5 {
        let start = timer::counter();
        work(TRIAL);
        best = best.min(timer::counter() - start);
    }
    PER_US.store(
        (TRIAL * clock.us(1) / best.max(1)).max(1),
        Ordering::Release,
    );
    loop {
        let _ = task::wait_next_period();
    }
}

static CALIBRATION: TaskStart = TaskStart {
    main: calibration,
    arg: 0,
};

fn calibrate(clock: &Clock, pcpu: u8) -> u64 {
    let plan = Plan {
        period_us: 20_000,
        budget_us: 10_000,
        work_us: 0,
        priority: 40,
    };
    let calibrator = match task::create(&CALIBRATION, stack_top(TASKS), spec(&plan, pcpu)) {
        Ok(calibrator) => calibrator,
        Err(error) => {
            println!(
                "control: calibration task refused: {error:?} ({})",
                error.code()
            );
            system_off();
        }
    };
    let _ = task::launch(calibrator, 0);
    while PER_US.load(Ordering::Acquire) == 0 {
        sleep_until(timer::counter() + clock.us(1_000));
    }
    let _ = task::delete(calibrator);
    // Its reservation stays counted by Keel's admission until its period (budget window)
    // ends: the tasks created next would not all fit beside it.
    sleep_until(timer::counter() + clock.us(plan.period_us));
    PER_US.load(Ordering::Acquire)
}

fn spec(plan: &Plan, pcpu: u8) -> TaskSpec {
    TaskSpec {
        period_ns: plan.period_us * 1_000,
        budget_ns: plan.budget_us * 1_000,
        deadline_ns: 0,
        pcpu,
        priority: plan.priority,
    }
}

fn number(args: &BootArgs<'_>, key: &str) -> Option<u64> {
    args.value(key).and_then(|v| v.parse().ok())
}

/// vCPU 0 of the partition.
pub fn run(args: &BootArgs<'_>) -> ! {
    let clock = Clock::new();
    let pcpu = number(args, "control.pcpu").unwrap_or(1) as u8;
    let seconds = number(args, "control.seconds");
    let overrun = number(args, "control.overrun").map(|i| i as usize);
    let masked = number(args, "control.masked");
    let histograms = args.has_flag("control.histograms");
    let per_us = calibrate(&clock, pcpu);
    for (index, plan) in PLANS.iter().enumerate() {
        let factor = if overrun == Some(index) {
            3 * plan.budget_us
        } else {
            plan.work_us
        };
        ITERATIONS[index].store(per_us * factor, Ordering::Relaxed);
    }
    let phase = timer::counter() + clock.us(5_000);
    PHASE.store(phase, Ordering::Relaxed);
    let mut tasks = [Task(0); TASKS];
    for (index, plan) in PLANS.iter().enumerate() {
        match task::create(&STARTS[index], stack_top(index), spec(plan, pcpu)) {
            Ok(created) => tasks[index] = created,
            Err(error) => {
                println!(
                    "control: task {index}: create refused: {error:?} ({})",
                    error.code()
                );
                system_off();
            }
        }
        println!(
            "control: task {index} created: handle {:#x}, period {} us, budget {} us, work {} us",
            tasks[index].0, plan.period_us, plan.budget_us, plan.work_us
        );
    }
    for task in tasks {
        if let Err(error) = task::launch(task, phase) {
            println!("control: launch {:#x} refused: {error:?}", task.0);
        }
    }
    println!("control: launched, first release in 5 ms; {per_us} iterations per us");
    if let Some((period, budget)) = args.value("control.extra").and_then(|v| v.split_once(':')) {
        let plan = Plan {
            period_us: period.parse().unwrap_or(0),
            budget_us: budget.parse().unwrap_or(0),
            work_us: 0,
            priority: 40,
        };
        match task::create(&STARTS[TASKS], stack_top(TASKS), spec(&plan, pcpu)) {
            Ok(extra) => println!(
                "control: extra task ({period} us, {budget} us) created: handle {:#x}",
                extra.0
            ),
            Err(error) => println!(
                "control: extra task ({period} us, {budget} us) refused: {error:?} ({})",
                error.code()
            ),
        }
    }
    let delete = args.value("control.delete").and_then(|v| {
        let (index, at) = v.split_once('@')?;
        Some((
            index.parse::<usize>().ok()?.min(TASKS - 1),
            at.parse::<u64>().ok()?,
        ))
    });
    let mut next = phase;
    for second in 1.. {
        next += clock.us(1_000_000);
        sleep_until(next);
        if let Some((index, at)) = delete.filter(|&(_, at)| at == second) {
            let _ = at;
            tasks[index] = delete_and_recreate(&clock, tasks[index], index, pcpu);
        }
        report(&clock, "t", second, &tasks);
        if histograms {
            print_histograms();
        }
        if let Some(pcpu) = masked {
            match task::masked_stretch(pcpu, true) {
                Ok(m) => println!(
                    "control: masked pCPU {pcpu}: s={second} longest_ns={} site={} esr={:#x} elr={:#x}",
                    m.ns,
                    m.site.name(),
                    m.esr,
                    m.elr
                ),
                Err(error) => println!("control: masked pCPU {pcpu}: {error:?}"),
            }
        }
        if seconds == Some(second) {
            report(&clock, "final", second, &tasks);
            println!("control: done after {second} s");
            system_off();
        }
    }
    unreachable!()
}

/// Deletes task `index` (not running now: this vCPU is), checks that it does no more jobs,
/// and creates it again (the same vCPU and slot are reused) with its next release aligned.
fn delete_and_recreate(clock: &Clock, old: Task, index: usize, pcpu: u8) -> Task {
    let before = RECORDS[index].jobs.load(Ordering::Relaxed);
    let deleted = task::delete(old);
    sleep_until(timer::counter() + clock.us(100_000));
    let after = RECORDS[index].jobs.load(Ordering::Relaxed);
    let stats = task::stats(old).map(|s| s.jobs);
    println!(
        "control: task {index} deleted: {deleted:?}; jobs {before} then {after} 100 ms later; stats now {stats:?}"
    );
    let plan = &PLANS[index];
    let period = clock.us(plan.period_us);
    let phase = PHASE.load(Ordering::Relaxed);
    let now = timer::counter();
    let release = phase + (now - phase) / period * period + period;
    match task::create(&STARTS[index], stack_top(index), spec(plan, pcpu)) {
        Ok(task) => {
            let launched = task::launch(task, release);
            println!(
                "control: task {index} created again: handle {:#x} (was {:#x}), launch {launched:?}",
                task.0, old.0
            );
            task
        }
        Err(error) => {
            println!("control: task {index} create again refused: {error:?}");
            old
        }
    }
}

/// Prints each task's response time and release jitter histograms since the start (`hist:
/// task0-response ...`, see [`keel_guest::histogram`]).
fn print_histograms() {
    let mut line = Line::new();
    for index in 0..TASKS {
        for (histogram, name) in [
            (&RESPONSES[index], RESPONSE_NAMES[index]),
            (&JITTERS[index], JITTER_NAMES[index]),
        ] {
            let mut printer = Printer::new(timer::frequency());
            while printer.next_line(histogram, name, &mut line) {
                println!("{}", line.as_str());
            }
        }
    }
}

/// Prints one line per task: its own figures and Keel's.
fn report(clock: &Clock, label: &str, second: u64, tasks: &[Task; TASKS]) {
    for (index, task) in tasks.iter().enumerate() {
        let record = &RECORDS[index];
        let jobs = record.jobs.load(Ordering::Relaxed);
        let mean = record.response_sum.load(Ordering::Relaxed) / jobs.max(1);
        let at = timer::counter().saturating_sub(PHASE.load(Ordering::Relaxed));
        let keel = match task::stats(*task) {
            Ok(s) => {
                let mut line = crate::Line::new();
                let _ = core::fmt::write(
                    &mut line,
                    format_args!(
                        "jobs={} misses={} overruns={} worst_response_ns={} worst_lateness_ns={}",
                        s.jobs,
                        s.deadline_misses,
                        s.overruns,
                        s.worst_response_ns,
                        s.worst_lateness_ns
                    ),
                );
                line
            }
            Err(error) => {
                let mut line = crate::Line::new();
                let _ = core::fmt::write(&mut line, format_args!("error {error:?}"));
                line
            }
        };
        println!(
            "control: {label}={second} s task {index} ({} us): at_us={} jobs={jobs} jitter_ns={}/{} response_ns={}/{}/{} | keel: {}",
            PLANS[index].period_us,
            clock.ns(at) / 1_000,
            clock.ns(record.jitter_min.load(Ordering::Relaxed).min(record.jitter_max.load(Ordering::Relaxed))),
            clock.ns(record.jitter_max.load(Ordering::Relaxed)),
            clock.ns(record.response_min.load(Ordering::Relaxed).min(record.response_max.load(Ordering::Relaxed))),
            clock.ns(mean),
            clock.ns(record.response_max.load(Ordering::Relaxed)),
            keel.as_str()
        );
    }
}
