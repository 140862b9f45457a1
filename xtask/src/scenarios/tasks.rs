//! Scenarios of real-time tasks created by a partition and scheduled by Keel (the sample
//! partition `rt-control`): deadlines next to a loaded or resetting Linux on the same pCPU,
//! refusals, overruns, deletion and reuse, and who may manage whose tasks. Judged by what
//! Keel counted (KEEL_TASK_STATS, printed by the partition once a second).

use std::time::Duration;

use regex::Regex;

use super::{boot, expect_line, lines_of, with_console_tail, Scenario};
use crate::qemu::Ended;
use crate::Result;

/// One line of the partition's report about one task.
#[derive(Debug, Clone)]
struct TaskReport {
    second: u64,
    task: usize,
    period_us: u64,
    /// When Keel's statistics were read, from the tasks' common first release.
    at_us: u64,
    /// Keel's statistics; `None` when KEEL_TASK_STATS answered an error (a deleted task).
    keel: Option<KeelStats>,
}

#[derive(Debug, Clone, Copy)]
struct KeelStats {
    jobs: u64,
    misses: u64,
    overruns: u64,
    worst_response_ns: u64,
}

fn reports(ended: &Ended, vm: &str) -> Vec<TaskReport> {
    let pattern = Regex::new(
        r"^control: (?:t|final)=(\d+) s task (\d) \((\d+) us\): at_us=(\d+) .* \| keel: (?:jobs=(\d+) misses=(\d+) overruns=(\d+) worst_response_ns=(\d+) worst_lateness_ns=\d+|error \w+)$",
    )
    .unwrap();
    lines_of(ended, vm)
        .into_iter()
        .filter_map(|line| {
            let c = pattern.captures(line)?;
            let n = |i: usize| c.get(i).map(|m| m.as_str().parse::<u64>().unwrap());
            Some(TaskReport {
                second: n(1)?,
                task: n(2)? as usize,
                period_us: n(3)?,
                at_us: n(4)?,
                keel: n(5).map(|jobs| KeelStats {
                    jobs,
                    misses: n(6).unwrap(),
                    overruns: n(7).unwrap(),
                    worst_response_ns: n(8).unwrap(),
                }),
            })
        })
        .collect()
}

/// Task `task` of VM `vm` met every deadline at every report from `from_second` on: Keel
/// counted no miss and no overrun, a job per period, every response within the period.
fn check_task_held(ended: &Ended, vm: &str, task: usize, from_second: u64) -> Result<u64> {
    let mine: Vec<TaskReport> = reports(ended, vm)
        .into_iter()
        .filter(|r| r.task == task && r.second >= from_second)
        .collect();
    let last = mine
        .last()
        .ok_or_else(|| format!("vm '{vm}' never reported task {task} from {from_second} s on"))?;
    for r in &mine {
        let Some(k) = r.keel else {
            return Err(format!(
                "vm '{vm}' task {task} at {} s: no statistics",
                r.second
            ));
        };
        // Released at 0, P, 2P, ... from the common first release, up to when they were read
        // (one more if a release fell between reading the clock and the statistics).
        let expected = r.at_us / r.period_us + 1;
        if k.misses != 0 || k.overruns != 0 || k.jobs < expected || k.jobs > expected + 1 {
            return Err(format!(
                "vm '{vm}' task {task} at {} s: {} jobs (expected {expected}), {} deadline misses, {} overruns",
                r.second, k.jobs, k.misses, k.overruns
            ));
        }
        if k.worst_response_ns > r.period_us * 1_000 {
            return Err(format!(
                "vm '{vm}' task {task} at {} s: worst response {} ns beyond its period",
                r.second, k.worst_response_ns
            ));
        }
    }
    Ok(last.second)
}

/// The sample partition's three tasks share pCPU 1 (EDF) with a Debian Linux that boots and
/// runs `stress-ng --cpu 1` for 10 s: no miss, no overrun, over at least 10 s that include
/// the whole stress-ng run.
fn beside_loaded_linux() -> Result<()> {
    let mut session = boot("tasks-linux")?;
    let wait = Duration::from_secs(900);
    let outcome = session
        .wait_for(r"^\[keel\] vm 'linux' \(id 0\) powered off$", wait)
        .and_then(|_| session.wait_for(r"^\[control\] control: t=\d+ s task 2 ", wait));
    let ended = session.kill();
    outcome.map_err(|m| with_console_tail(m, &ended))?;
    expect_line(
        &ended,
        r"^\[linux\] stress-ng: info: .* successful run completed",
    )?;
    expect_line(&ended, r"^\[linux\] KEEL-STEP load END .* status=0$")?;
    let mut seconds = 0;
    for task in 0..3 {
        seconds = check_task_held(&ended, "control", task, 1)?;
    }
    if seconds < 10 {
        return Err(format!("the tasks ran only {seconds} s next to Linux"));
    }
    Ok(())
}

/// A Debian Linux on the tasks' pCPU resets itself twice (its 27 MB image reloaded in bounded
/// steps, in its own time): no task misses a deadline.
fn beside_resetting_linux() -> Result<()> {
    let mut session = boot("tasks-reset")?;
    let wait = Duration::from_secs(900);
    let outcome = session
        .wait_for_count(r"^\[keel\] vm 'linux' \(id 0\) resets$", 2, wait)
        .and_then(|_| session.wait_for(r"^\[keel\] vm 'linux' \(id 0\) starts at ", wait))
        .and_then(|_| session.wait_for(r"^\[control\] control: t=\d+ s task 2 ", wait));
    let ended = session.kill();
    outcome.map_err(|m| with_console_tail(m, &ended))?;
    for task in 0..3 {
        check_task_held(&ended, "control", task, 1)?;
    }
    Ok(())
}

/// Boots `name` until each of `done` (console patterns) has been seen.
fn run_until(name: &str, done: &[&str]) -> Result<Ended> {
    let mut session = boot(name)?;
    let wait = Duration::from_secs(300);
    let mut outcome = Ok(());
    for pattern in done {
        outcome = outcome.and_then(|_| session.wait_for(pattern, wait).map(|_| ()));
    }
    let ended = session.kill();
    outcome.map_err(|m| with_console_tail(m, &ended))?;
    Ok(ended)
}

/// Refusals and life cycle on an EDF pCPU (configs/tests/tasks-services-a.toml): a fourth
/// task beyond the grant is refused as not schedulable and the running ones hold; a task
/// deleted mid-run does no further job and its index is reused; a VM that is not a manager
/// gets "not allowed" for every call.
fn refusals_and_reuse() -> Result<()> {
    let ended = run_until(
        "tasks-services-a",
        &[
            r"^\[a\] control: done after 4 s$",
            r"^\[mgr-no\] manage: done$",
        ],
    )?;
    let expect =
        |pattern: &str| expect_line(&ended, pattern).map_err(|m| with_console_tail(m, &ended));
    expect(r"^\[a\] control: extra task \(1000 us, 500 us\) refused: NotSchedulable \(-18\)$")?;
    let deleted = Regex::new(
        r"^control: task 2 deleted: Ok\(\(\)\); jobs (\d+) then (\d+) 100 ms later; stats now Err\(NoSuchTask\)$",
    )
    .unwrap();
    let (before, after) = lines_of(&ended, "a")
        .iter()
        .find_map(|l| {
            deleted
                .captures(l)
                .map(|c| (c[1].to_string(), c[2].to_string()))
        })
        .ok_or_else(|| with_console_tail("vm 'a' did not report deleting task 2".into(), &ended))?;
    if before != after {
        return Err(format!(
            "task 2 of vm 'a' ran on after its delete: {before} jobs, then {after}"
        ));
    }
    expect(r"^\[a\] control: task 2 created again: handle 0x2 \(was 0x2\), launch Ok\(\(\)\)$")?;
    check_task_held(&ended, "a", 0, 1)?;
    check_task_held(&ended, "a", 1, 1)?;
    // Task 2 held until its delete at 2 s, and as a new task (fresh statistics, released
    // from its relaunch on) after it.
    let task2: Vec<TaskReport> = reports(&ended, "a")
        .into_iter()
        .filter(|r| r.task == 2)
        .collect();
    let (old, new): (Vec<_>, Vec<_>) = task2.iter().partition(|r| r.second < 2);
    let held = |r: &&TaskReport| r.keel.is_some_and(|k| k.misses == 0 && k.overruns == 0);
    let jobs: Vec<u64> = new.iter().filter_map(|r| r.keel.map(|k| k.jobs)).collect();
    if old.is_empty()
        || new.len() < 2
        || !task2.iter().all(|r| held(&r))
        || jobs.windows(2).any(|w| w[1] < w[0])
        || jobs.last().is_none_or(|&j| j < 90)
    {
        return Err(format!(
            "vm 'a' task 2 before and after its re-creation: {task2:?}"
        ));
    }
    for call in [
        r"stats 0x0: error NotAllowed \(-3\)",
        r"launch 0x0: Err\(NotAllowed\)",
        r"delete 0x2: Err\(NotAllowed\)",
    ] {
        expect(&format!(r"^\[mgr-no\] manage: {call}$"))?;
    }
    Ok(())
}

/// An overrunning task on a fixed-priority pCPU (configs/tests/tasks-services-b.toml) is
/// throttled and counted each period while the task above it holds; a manager VM may read,
/// is refused a second launch, and deletes a task, which is then gone.
fn overrun_and_manager() -> Result<()> {
    let ended = run_until(
        "tasks-services-b",
        &[
            r"^\[b\] control: done after 4 s$",
            r"^\[mgr-yes\] manage: done$",
        ],
    )?;
    let expect =
        |pattern: &str| expect_line(&ended, pattern).map_err(|m| with_console_tail(m, &ended));
    let overrun = reports(&ended, "b")
        .into_iter()
        .rev()
        .filter(|r| r.task == 1)
        .find_map(|r| r.keel)
        .ok_or("vm 'b' never reported its task 1")?;
    // Its jobs need three budgets: throttled in two periods of three (the third ends the
    // job just within the budget), each job missing its deadline.
    if overrun.jobs < 100
        || overrun.overruns * 2 < overrun.jobs
        || overrun.misses * 2 < overrun.jobs
    {
        return Err(format!(
            "vm 'b' task 1 (overrunning): {} jobs but {} overruns and {} misses",
            overrun.jobs, overrun.overruns, overrun.misses
        ));
    }
    // Above it (task 0) and below it (task 2, until the manager deletes it) nothing misses.
    check_task_held(&ended, "b", 0, 1)?;
    let below: Vec<KeelStats> = reports(&ended, "b")
        .into_iter()
        .filter(|r| r.task == 2)
        .filter_map(|r| r.keel)
        .collect();
    if below.is_empty() || below.iter().any(|k| k.misses != 0 || k.overruns != 0) {
        return Err(format!(
            "vm 'b' task 2, below the overrunning one: {below:?}"
        ));
    }
    expect(r"^\[mgr-yes\] manage: stats 0x0: jobs=\d+ misses=0$")?;
    expect(r"^\[mgr-yes\] manage: launch 0x0: Err\(AlreadyLaunched\)$")?;
    expect(r"^\[mgr-yes\] manage: delete 0x2: Ok\(\(\)\)$")?;
    expect(r"^\[mgr-yes\] manage: stats 0x2 after delete: Err\(NoSuchTask\)$")?;
    expect(r"^\[b\] control: final=4 s task 2 \(20000 us\): .* \| keel: error NoSuchTask$")?;
    Ok(())
}

/// The C sample partition (guests/c-control, on keel.h alone; configs/tests/tasks-c.toml) on
/// an EDF pCPU of its own: each second, for each of its three tasks, Keel counted no miss, no
/// overrun, a job per period (within 2%) and every response within the period, and the task's
/// own count agrees; after 3 s it powers off and QEMU exits cleanly.
fn c_partition() -> Result<()> {
    const SECONDS: u64 = 3;
    const PERIODS_US: [u64; 3] = [1_000, 5_000, 20_000];
    let ended = super::boot_to_end("tasks-c")?;
    let tail = |message: String| with_console_tail(message, &ended);
    expect_line(&ended, r"^\[c-control\] c-control: done after 3 s$").map_err(tail)?;
    let pattern = Regex::new(
        r"^c-control: t=(\d+) s task (\d) \((\d+) us\): at_us=\d+ jobs=(\d+) .*\| keel: jobs=(\d+) misses=(\d+) overruns=(\d+) worst_response_ns=(\d+) ",
    )
    .unwrap();
    let mut seen = 0;
    for line in lines_of(&ended, "c-control") {
        let Some(c) = pattern.captures(line) else {
            continue;
        };
        let n = |i: usize| c[i].parse::<u64>().unwrap();
        let (second, task, period_us) = (n(1), n(2) as usize, n(3));
        let (own_jobs, jobs, misses, overruns, worst_response_ns) = (n(4), n(5), n(6), n(7), n(8));
        let expected = second * 1_000_000 / period_us;
        if PERIODS_US.get(task) != Some(&period_us)
            || misses != 0
            || overruns != 0
            || jobs.abs_diff(expected) > expected / 50 + 1
            || jobs.abs_diff(own_jobs) > 1
            || worst_response_ns > period_us * 1_000
        {
            return Err(tail(format!(
                "vm 'c-control' task {task} ({period_us} us) at {second} s: Keel counted {jobs} jobs \
                 (expected {expected} within 2%), {misses} deadline misses, {overruns} overruns, \
                 worst response {worst_response_ns} ns; the task counted {own_jobs} jobs"
            )));
        }
        seen += 1;
    }
    if seen != SECONDS as usize * PERIODS_US.len() {
        return Err(tail(format!(
            "vm 'c-control' reported its tasks {seen} times, expected {}",
            SECONDS as usize * PERIODS_US.len()
        )));
    }
    super::expect_clean_exit(&ended)
}

/// Issue 38 (configs/tests/tasks-reuse.toml): a task's index reused after a task launched
/// with its first release at `u64::MAX`, sent a message and deleted: in each of five rounds
/// the far task's send is queued (1) and its delete answers Ok, and the new task created in
/// the same index (the same handle as every task before it) is launched (Ok), runs a job each
/// of its three periods by its own count and Keel's, with no miss or overrun, and its first
/// poll finds its queue empty.
fn reuse_after_far_launch() -> Result<()> {
    const ROUNDS: usize = 5;
    let ended = super::boot_to_end("tasks-reuse")?;
    let tail = |message: String| with_console_tail(message, &ended);
    expect_line(&ended, r"^\[reuse\] task-reuse: done$").map_err(tail)?;
    let first = Regex::new(r"^task-reuse: first handle=(0x[0-9a-f]+) jobs=(\d+)$").unwrap();
    let far = Regex::new(
        r"^task-reuse: round (\d+) far handle=(0x[0-9a-f]+) launch=Ok\(\(\)\) send=Ok\(1\) delete=Ok\(\(\)\)$",
    )
    .unwrap();
    let new = Regex::new(
        r"^task-reuse: round (\d+) new handle=(0x[0-9a-f]+) launch=Ok\(\(\)\) jobs=(\d+) first-poll=(\w+) keel-jobs=(\d+) misses=(\d+) overruns=(\d+)$",
    )
    .unwrap();
    let lines = lines_of(&ended, "reuse");
    let (handle, first_jobs) = lines
        .iter()
        .find_map(|l| {
            first
                .captures(l)
                .map(|c| (c[1].to_string(), c[2].parse::<u64>().unwrap()))
        })
        .ok_or_else(|| tail("vm 'reuse' did not report its first task".into()))?;
    if first_jobs == 0 {
        return Err(tail("the first (polling) task never ran".into()));
    }
    let fars: Vec<String> = lines
        .iter()
        .filter_map(|l| far.captures(l).map(|c| c[2].to_string()))
        .collect();
    if fars.len() != ROUNDS || fars.iter().any(|h| *h != handle) {
        return Err(tail(format!(
            "vm 'reuse': {} of {ROUNDS} far tasks launched, sent 1 message and deleted in index {handle}: {fars:?}",
            fars.len()
        )));
    }
    let mut rounds = 0;
    for line in &lines {
        let Some(c) = new.captures(line) else {
            continue;
        };
        let n = |i: usize| c[i].parse::<u64>().unwrap();
        let (round, jobs, poll, keel_jobs, misses, overruns) =
            (n(1), n(3), &c[4], n(5), n(6), n(7));
        if c[2] != handle
            || jobs != 3
            || keel_jobs != 3
            || misses != 0
            || overruns != 0
            || poll != "empty"
        {
            return Err(tail(format!(
                "vm 'reuse' round {round}: the new task (handle {}, expected {handle}) ran {jobs} jobs \
                 by its count and {keel_jobs} by Keel's (expected 3 in three periods), {misses} misses, \
                 {overruns} overruns, its first poll found {poll} (expected empty)",
                &c[2]
            )));
        }
        rounds += 1;
    }
    if rounds != ROUNDS {
        return Err(tail(format!(
            "vm 'reuse' reported {rounds} new tasks, expected {ROUNDS}"
        )));
    }
    super::expect_clean_exit(&ended)
}

/// The scenarios of real-time tasks.
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "tasks: the sample partition's three tasks hold every deadline next to Linux under stress-ng on their pCPU".into(),
            run: Box::new(beside_loaded_linux),
        },
        Scenario {
            name: "tasks: Linux resetting itself (27 MB reload) on the tasks' pCPU makes no task miss".into(),
            run: Box::new(beside_resetting_linux),
        },
        Scenario {
            name: "tasks: refusals (beyond the grant, not a manager) and a delete mid-run with reuse; the others hold".into(),
            run: Box::new(refusals_and_reuse),
        },
        Scenario {
            name: "tasks: an overrunning task is throttled and counted while the others hold; a manager VM acts".into(),
            run: Box::new(overrun_and_manager),
        },
        Scenario {
            name: "tasks: reuse: a task created in the index of one launched at u64::MAX, sent a message and deleted runs its jobs and finds its queue empty, five times".into(),
            run: Box::new(reuse_after_far_launch),
        },
        Scenario {
            name: "tasks: c-control, the C partition on keel.h, holds its three tasks' deadlines on an EDF pCPU and powers off".into(),
            run: Box::new(c_partition),
        },
    ]
}
