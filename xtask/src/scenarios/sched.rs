//! Scenarios of shared pCPUs: vCPUs of several VMs on one pCPU under each policy, judged by
//! what Keel's scheduler counted (KEEL_SCHED_STATS, printed by the test guest's `job` mode)
//! and by the time each vCPU saw (its `share` mode). All run under icount with only the
//! shared pCPU busy, so every figure repeats exactly.

use std::time::Duration;

use regex::Regex;

use super::{
    boot, check_tick_counts, check_ticks, expect_line, lines_of, tick_lateness, with_console_tail,
    Scenario,
};
use crate::qemu::Ended;
use crate::Result;

/// The worst tick lateness the Gandalf scenario accepts, in µs. Derivation, at one
/// instruction per ns: the EL2 timer's interrupt at the tick's deadline (about 300
/// instructions), one switch from Linux to the partition (about 1,300: half of the 2,611 of
/// `cargo xtask bench sched`'s pair), the partition's own timer interrupt (140), plus the Keel
/// handler that was running when the deadline passed: Linux's longest traps on that pCPU (a
/// console line written out, a vGIC write with its list-register sync) take a few thousand
/// instructions. 20 µs is four times that sum. Measured: 3 µs.
pub(super) const GANDALF_LATENESS_BOUND_US: u64 = 20;

/// One `[job]` report of the test guest.
#[derive(Debug)]
pub(super) struct JobReport {
    pub(super) second: u64,
    pub(super) jobs: u64,
    pub(super) misses: u64,
    pub(super) overruns: u64,
    pub(super) worst_response_us: u64,
}

pub(super) fn job_reports(ended: &Ended, vm: &str) -> Vec<JobReport> {
    let pattern = Regex::new(
        r"^\[job\] s=(\d+) jobs=(\d+) misses=(\d+) overruns=(\d+) worst_response_us=(\d+)$",
    )
    .unwrap();
    lines_of(ended, vm)
        .into_iter()
        .filter_map(|line| {
            let c = pattern.captures(line)?;
            let n = |i: usize| c[i].parse::<u64>().unwrap();
            Some(JobReport {
                second: n(1),
                jobs: n(2),
                misses: n(3),
                overruns: n(4),
                worst_response_us: n(5),
            })
        })
        .collect()
}

/// `(ran_us, elapsed_us)` of each `[share]` report of VM `vm`.
fn share_reports(ended: &Ended, vm: &str) -> Vec<(u64, u64)> {
    let pattern = Regex::new(r"^\[share\] ran_us=(\d+) elapsed_us=(\d+)$").unwrap();
    lines_of(ended, vm)
        .into_iter()
        .filter_map(|line| {
            let c = pattern.captures(line)?;
            Some((c[1].parse().unwrap(), c[2].parse().unwrap()))
        })
        .collect()
}

/// Checks a real-time `job` VM: at least `min_reports` reports, a job released every
/// `period_us` since it started (within one), no deadline miss, no overrun, every response
/// within the period.
pub(super) fn check_jobs(
    ended: &Ended,
    vm: &str,
    period_us: u64,
    min_reports: usize,
) -> Result<()> {
    let reports = job_reports(ended, vm);
    if reports.len() < min_reports {
        return Err(format!(
            "vm '{vm}' reported its jobs {} times",
            reports.len()
        ));
    }
    for r in &reports {
        let expected = r.second * 1_000_000 / period_us;
        if r.jobs.abs_diff(expected) > 1 || r.misses != 0 || r.overruns != 0 {
            return Err(format!(
                "vm '{vm}' at {} s: {} jobs (expected {expected}), {} deadline misses, {} overruns",
                r.second, r.jobs, r.misses, r.overruns
            ));
        }
        if r.worst_response_us > period_us {
            return Err(format!(
                "vm '{vm}' at {} s: worst response {} us exceeds its period {period_us} us",
                r.second, r.worst_response_us
            ));
        }
    }
    Ok(())
}

/// Boots configuration `name`, whose VM 0 is a Debian Linux running `keel.test=stress`, until
/// Linux has powered off and `partition` has matched `count` lines in all; checks that Linux
/// completed stress-ng and its whole run.
fn beside_linux(name: &str, partition: &str, count: usize) -> Result<Ended> {
    let mut session = boot(name)?;
    let wait = Duration::from_secs(600);
    let outcome = session
        .wait_for(r"^\[keel\] vm 'linux' \(id 0\) powered off$", wait)
        .and_then(|_| session.wait_for_count(partition, count, wait));
    let ended = session.kill();
    outcome.map_err(|m| with_console_tail(m, &ended))?;
    expect_line(
        &ended,
        r"^\[linux\] stress-ng: info: .* successful run completed",
    )?;
    expect_line(&ended, r"^\[linux\] KEEL-INIT-END status=0$")?;
    Ok(ended)
}

/// Reports of each VM that [`round_robin`] requires.
const REPORTS: usize = 3;

/// Two best-effort VMs round robin on one pCPU (1 ms quantum): at every report each has run
/// within one quantum of the other, and together they had at least 99% of the time.
fn round_robin() -> Result<()> {
    let mut session = boot("shared-rr")?;
    let wait = Duration::from_secs(120);
    let outcome = session
        .wait_for_count(r"^\[be-a\] \[share\]", REPORTS, wait)
        .and_then(|_| session.wait_for_count(r"^\[be-b\] \[share\]", REPORTS, wait));
    let ended = session.kill();
    outcome.map_err(|m| with_console_tail(m, &ended))?;
    let (a, b) = (share_reports(&ended, "be-a"), share_reports(&ended, "be-b"));
    // Each VM's reports are required: compared in pairs, a VM that never reported would leave
    // nothing to compare.
    for (vm, reports) in [("be-a", &a), ("be-b", &b)] {
        if reports.len() < REPORTS {
            return Err(with_console_tail(
                format!(
                    "vm '{vm}' reported its share {} times, not {REPORTS}",
                    reports.len()
                ),
                &ended,
            ));
        }
    }
    for (&(ran_a, elapsed), &(ran_b, _)) in a.iter().zip(&b).take(REPORTS) {
        if ran_a.abs_diff(ran_b) > 1000 {
            return Err(format!(
                "after {elapsed} us: be-a ran {ran_a} us, be-b {ran_b} us: more than one quantum apart"
            ));
        }
        if (ran_a + ran_b) * 100 < elapsed * 99 {
            return Err(format!(
                "after {elapsed} us the two VMs ran only {ran_a} + {ran_b} us"
            ));
        }
    }
    Ok(())
}

/// A VM ticking at 1 kHz on its virtual timer beside a hog that never traps, round robin on
/// one pCPU: every tick is taken and each second reported without a gap, although while it
/// sleeps nothing but its own timer deadline can take the pCPU back from the hog.
fn round_robin_sleeper() -> Result<()> {
    let mut session = boot("shared-rr-sleeper")?;
    let outcome = session.wait_for_count(r"^\[ticker\] tick: ", 3, Duration::from_secs(120));
    let ended = session.kill();
    outcome.map_err(|m| with_console_tail(m, &ended))?;
    check_ticks(&ended, "ticker", 3).map(|_| ())
}

/// Lazy FP/SIMD: two VMs yield to each other on one round-robin pCPU, each keeping its own
/// value in D0 across its first 1,000 yields (the benchmark's FP ping-pong, whose timed rounds
/// come after): both find D0 as they left it after every one, so neither saw the other's
/// registers nor lost its own.
fn lazy_fp() -> Result<()> {
    let ended = crate::sched_bench::run_switch_pair(true)?;
    let report = Regex::new(r"^fp: (\d+) yields checked, (\d+) with D0 changed$").unwrap();
    for vm in ["vm0", "vm1"] {
        let counts = lines_of(&ended, vm).into_iter().find_map(|line| {
            let c = report.captures(line)?;
            Some((c[1].parse::<u64>().ok()?, c[2].parse::<u64>().ok()?))
        });
        match counts {
            Some((yields, 0)) if yields > 0 => {}
            Some((yields, changed)) => {
                return Err(format!(
                    "vm '{vm}': D0 changed across {changed} of its {yields} yields"
                ))
            }
            None => {
                return Err(with_console_tail(
                    format!("vm '{vm}' printed no FP report"),
                    &ended,
                ))
            }
        }
    }
    Ok(())
}

/// Three real-time vCPUs (1 ms / 300 µs, 5 ms / 1 ms, 20 ms / 4 ms) and a best-effort
/// Debian Linux on one pCPU under EDF: no deadline miss, no overrun, every job's response
/// within its period, and Linux boots and completes stress-ng and cyclictest.
fn m5150() -> Result<()> {
    let ended = beside_linux("m5150", r"^\[rt-20ms\] \[job\]", 3)?;
    check_jobs(&ended, "rt-1ms", 1_000, 3)?;
    check_jobs(&ended, "rt-5ms", 5_000, 3)?;
    check_jobs(&ended, "rt-20ms", 20_000, 3)
}

/// A real-time vCPU that never waits is throttled at its budget each period (an overrun per
/// period, and a deadline miss, since its job never completes); the other real-time vCPUs
/// keep every deadline and the best-effort vCPU still runs.
fn throttle() -> Result<()> {
    let mut session = boot("throttle")?;
    let wait = Duration::from_secs(120);
    let outcome = session
        .wait_for_count(r"^\[rt-20ms\] \[job\]", 3, wait)
        .and_then(|_| session.wait_for_count(r"^\[hog\] \[job\]", 3, wait))
        .and_then(|_| session.wait_for_count(r"^\[be\] \[share\]", 3, wait));
    let ended = session.kill();
    outcome.map_err(|m| with_console_tail(m, &ended))?;
    // The hog's reports are required: with none, nothing would show it throttled.
    let hog = job_reports(&ended, "hog");
    if hog.len() < 3 {
        return Err(with_console_tail(
            format!("the hog reported its jobs {} times, not 3", hog.len()),
            &ended,
        ));
    }
    for r in hog {
        let periods = r.second * 200;
        if r.jobs.abs_diff(periods) > 1 || r.overruns + 1 < r.jobs || r.misses + 1 < r.jobs {
            return Err(format!(
                "hog at {} s: {} jobs, {} overruns, {} misses: expected one of each per 5 ms period",
                r.second, r.jobs, r.overruns, r.misses
            ));
        }
    }
    check_jobs(&ended, "rt-1ms", 1_000, 3)?;
    check_jobs(&ended, "rt-20ms", 20_000, 3)?;
    let be = share_reports(&ended, "be");
    if be.len() < 3 || be.windows(2).any(|w| w[1].0 <= w[0].0) {
        return Err(format!("the best-effort vCPU did not progress: {be:?}"));
    }
    Ok(())
}

/// The real-time test partition (1 kHz, priority 10, 500 µs per 1 ms) above a Debian Linux
/// VM on one pCPU: every tick delivered through Linux's boot and stress-ng, the worst
/// lateness within [`GANDALF_LATENESS_BOUND_US`], and Linux completes its run.
fn gandalf() -> Result<()> {
    let ended = beside_linux("gandalf", r"^\[rt\] tick: ", 1)?;
    check_tick_counts(&ended, "rt", 5)?;
    let late = tick_lateness(&ended, "rt");
    if late > GANDALF_LATENESS_BOUND_US {
        return Err(format!(
            "the partition's worst tick lateness was {late} us, above the {GANDALF_LATENESS_BOUND_US} us bound"
        ));
    }
    Ok(())
}

/// The scenarios of shared pCPUs.
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "round robin: two VMs on one pCPU each get their share within one quantum".into(),
            run: Box::new(round_robin),
        },
        Scenario {
            name: "round robin: a VM sleeping on its timer beside a hog that never traps keeps every tick"
                .into(),
            run: Box::new(round_robin_sleeper),
        },
        Scenario {
            name: "lazy FP/SIMD: two VMs switching on one pCPU each keep their own FP registers"
                .into(),
            run: Box::new(lazy_fp),
        },
        Scenario {
            name:
                "EDF (M5150): three real-time vCPUs and Debian Linux on one pCPU, no deadline miss"
                    .into(),
            run: Box::new(m5150),
        },
        Scenario {
            name: "EDF: a vCPU that never waits is throttled at its budget; the others hold".into(),
            run: Box::new(throttle),
        },
        Scenario {
            name: "fixed priority (Gandalf): the 1 kHz partition above Debian Linux on one pCPU"
                .into(),
            run: Box::new(gandalf),
        },
    ]
}
