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
        r"^control: (?:t|final)=(\d+) s task (\d) \((\d+) us\): .* \| keel: (?:jobs=(\d+) misses=(\d+) overruns=(\d+) worst_response_ns=(\d+) worst_lateness_ns=\d+|error \w+)$",
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
                keel: n(4).map(|jobs| KeelStats {
                    jobs,
                    misses: n(5).unwrap(),
                    overruns: n(6).unwrap(),
                    worst_response_ns: n(7).unwrap(),
                }),
            })
        })
        .collect()
}

/// Task `task` of VM `vm` met every deadline at every report from `from_second` on: Keel
/// counted no miss and no overrun, a job per period (within two: the launch is 5 ms after
/// the start of the count, and a report may race a release), every response within the period.
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
        let expected = r.second * 1_000_000 / r.period_us;
        if k.misses != 0 || k.overruns != 0 || k.jobs.abs_diff(expected) > 2 {
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

/// The services' refusals and life cycle (configs/tests/tasks-services.toml).
fn services() -> Result<()> {
    let mut session = boot("tasks-services")?;
    let wait = Duration::from_secs(300);
    let outcome = session
        .wait_for(r"^\[a\] control: done after 4 s$", wait)
        .and_then(|_| session.wait_for(r"^\[b\] control: done after 4 s$", wait))
        .and_then(|_| session.wait_for(r"^\[mgr-no\] manage: done$", wait))
        .and_then(|_| session.wait_for(r"^\[mgr-yes\] manage: done$", wait));
    let ended = session.kill();
    outcome.map_err(|m| with_console_tail(m, &ended))?;
    let expect =
        |pattern: &str| expect_line(&ended, pattern).map_err(|m| with_console_tail(m, &ended));
    // Beyond the grant: refused with its code, and the running tasks unaffected.
    expect(r"^\[a\] control: extra task \(1000 us, 500 us\) refused: NotSchedulable \(-18\)$")?;
    // Deleted mid-run: no job after the delete, its handle gone, the index reused.
    let deleted = Regex::new(
        r"^control: task 2 deleted: Ok\(\(\)\); jobs (\d+) then (\d+) 100 ms later; stats now Err\(NoSuchTask\)$",
    )
    .unwrap();
    let a = lines_of(&ended, "a");
    let (before, after) = a
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
    for task in 0..3 {
        check_task_held(&ended, "a", task, 1)?;
    }
    // The overrunning task is throttled and counted each period; the others hold.
    let b = reports(&ended, "b");
    let overrun = b
        .iter()
        .rev()
        .filter(|r| r.task == 1)
        .find_map(|r| r.keel)
        .ok_or("vm 'b' never reported its task 1")?;
    if overrun.jobs < 100 || overrun.overruns + 2 < overrun.jobs {
        return Err(format!(
            "vm 'b' task 1 (overrunning): {} jobs but {} overruns",
            overrun.jobs, overrun.overruns
        ));
    }
    check_task_held(&ended, "b", 0, 1)?;
    // Managers: refused outright without the grant's consent, allowed with it.
    for call in [
        "stats 0x0: error NotAllowed \\(-3\\)",
        "launch 0x0: Err\\(NotAllowed\\)",
        "delete 0x2: Err\\(NotAllowed\\)",
    ] {
        expect(&format!(r"^\[mgr-no\] manage: {call}$"))?;
    }
    expect(r"^\[mgr-yes\] manage: stats 0x100: jobs=\d+ misses=0$")?;
    expect(r"^\[mgr-yes\] manage: launch 0x100: Err\(AlreadyLaunched\)$")?;
    expect(r"^\[mgr-yes\] manage: delete 0x102: Ok\(\(\)\)$")?;
    expect(r"^\[mgr-yes\] manage: stats 0x102 after delete: Err\(NoSuchTask\)$")?;
    expect(r"^\[b\] control: final=4 s task 2 \(20000 us\): .* \| keel: error NoSuchTask$")?;
    Ok(())
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
            name: "tasks: refusals (beyond the grant, not a manager), an overrun throttled, a delete mid-run and reuse".into(),
            run: Box::new(services),
        },
    ]
}
