//! `cargo xtask soak`: the long runs outside the test command, each printing its figures. A
//! bare-metal VM restarted by a bare-metal manager (1,000 times), Debian Linux restarted by
//! one (100 times, each once its shell answers), both with the 1 kHz real-time partition on
//! the same pCPU; and Debian Linux under stress-ng for an hour next to the sample real-time
//! partition's three tasks. The configurations are `configs/soak/*.toml`.
//!
//! Everything runs under `-icount shift=0,sleep=off`: the times are virtual (1 instruction =
//! 1 ns) and the same on a loaded machine, so a miss is Keel's and not the host's. Each QEMU
//! has a deadline in real time, every wait ends by it, and QEMU is killed (by its PID) when its
//! run ends or fails.

use std::time::{Duration, Instant};

use regex::Regex;

use crate::cli::{SoakArgs, SoakPart};
use crate::progress::{self, Progress};
use crate::qemu::{Ended, Session};
use crate::scenarios::{lines_of, tick_reports, with_console_tail};
use crate::{workspace, Result};

/// Real seconds a soak may take per second of virtual time before QEMU is killed: Linux
/// under stress-ng takes about 7 seconds of one host core per virtual second, which this
/// machine (2 cores, shared, niced) gave at 6 to 13 real seconds per virtual second.
const REAL_PER_VIRTUAL: u64 = 30;

/// Longest wait for one restart's line, or for one report of the sample partition (real time).
const STEP: Duration = Duration::from_secs(300);

/// Longest wait for Linux's shell after a boot or a restart (real time).
const LINUX_BOOT: Duration = Duration::from_secs(900);

/// Runs the parts of the soak that `args` selects, each printing its figures.
pub fn run(args: &SoakArgs) -> Result<()> {
    crate::image::build_guests()?;
    progress::out(
        &format!(
            "Soak: QEMU 'virt' cortex-a72, -icount shift={},sleep=off (1 instruction = {} ns); times are virtual",
            args.shift,
            1u32 << args.shift
        ),
    );
    let wanted = |part: SoakPart| args.only.is_none_or(|only| only == part);
    let mut failures = Vec::new();
    let mut note = |part: &str, outcome: Result<()>| {
        if let Err(message) = outcome {
            progress::out(&format!("  FAILED: {message}"));
            failures.push(part.to_string());
        }
    };
    if wanted(SoakPart::BareMetal) {
        note("bare-metal", bare_metal(args.restarts, args.shift));
    }
    if wanted(SoakPart::Linux) {
        note("linux", linux(args.linux_restarts, args.shift));
    }
    if wanted(SoakPart::Stress) {
        note("stress", stress(args.minutes, args.shift));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("soak failed: {}", failures.join(", ")))
    }
}

/// `configs/soak/<name>.toml`.
fn config_text(name: &str) -> Result<String> {
    let path = workspace()
        .join("configs/soak")
        .join(format!("{name}.toml"));
    std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
}

/// `text` with its one `keel.restarts=N` made `keel.restarts=<restarts>`.
fn with_restarts(text: &str, restarts: u64) -> Result<String> {
    let token = Regex::new(r"keel\.restarts=\d+").unwrap();
    match token.find_iter(text).count() {
        1 => Ok(token
            .replace(text, format!("keel.restarts={restarts}").as_str())
            .into_owned()),
        n => Err(format!(
            "the configuration has {n} keel.restarts= tokens, expected one"
        )),
    }
}

/// The `keel.running=<ms>` of configuration `text`: how long its manager lets the VM run
/// between two restarts.
fn running_ms(text: &str) -> Result<u64> {
    Regex::new(r"keel\.running=(\d+)")
        .unwrap()
        .captures(text)
        .map(|c| c[1].parse().unwrap())
        .ok_or("the configuration's manager has no keel.running=<ms>".into())
}

/// A soak's QEMU and its deadline.
struct Run {
    session: Session,
    started: Instant,
    deadline: Instant,
    budget: Duration,
}

impl Run {
    /// Builds configuration `text` as `target/keel/<name>.toml` and boots it under icount (2^`shift`
    /// ns per instruction), its console logged as `target/keel/logs/<name>.log`; it may run
    /// `budget` (real time).
    fn start(name: &str, text: &str, budget: Duration, shift: u8) -> Result<Self> {
        let (session, _) = crate::sched_bench::boot_generated_at(name, text, shift)?;
        let started = Instant::now();
        Ok(Self {
            session,
            started,
            deadline: started + budget,
            budget,
        })
    }

    /// At most `step`, and never past the deadline.
    fn left(&self, step: Duration) -> Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(format!(
                "the run's deadline ({} s) passed",
                self.budget.as_secs()
            ))
        } else {
            Ok(step.min(left))
        }
    }

    /// Waits until `count` console lines in all have matched `pattern`.
    fn wait_count(&mut self, pattern: &str, count: usize, step: Duration) -> Result<String> {
        let left = self.left(step)?;
        self.session.wait_for_count(pattern, count, left)
    }

    /// Waits for a line after the first `mark` read that matches `pattern`.
    fn wait_after(&mut self, mark: usize, pattern: &str, step: Duration) -> Result<String> {
        let left = self.left(step)?;
        self.session.wait_for_after(mark, pattern, left)
    }

    /// Types `line` and a newline, in pieces that the emulated PL011's 32-byte receive FIFO
    /// takes whole.
    fn type_line(&mut self, line: &str) -> Result<()> {
        for piece in format!("{line}\n").as_bytes().chunks(16) {
            self.session.send(piece)?;
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Kills QEMU (by its PID) and gives its console, with how long it ran; a failure of
    /// `outcome` comes back with the console's last lines.
    fn end<T>(self, outcome: Result<T>) -> Result<(T, Ended, Duration)> {
        let took = self.started.elapsed();
        let ended = self.session.kill();
        match outcome {
            Ok(value) => Ok((value, ended, took)),
            Err(message) => Err(with_console_tail(message, &ended)),
        }
    }
}

/// A bar on a terminal, and a line on stderr at each tenth of the work (a log has no bar).
struct Advance {
    bar: Progress,
    what: &'static str,
    total: u64,
    done: u64,
}

impl Advance {
    fn new(total: u64, what: &'static str) -> Self {
        Self {
            bar: Progress::bar(total, &format!("soak: {what}")),
            what,
            total,
            done: 0,
        }
    }

    fn inc(&mut self) {
        self.bar.inc();
        self.done += 1;
        if (self.done * 10 / self.total.max(1)) > ((self.done - 1) * 10 / self.total.max(1)) {
            progress::err(&format!(
                "xtask: soak: {} {} of {}",
                self.what, self.done, self.total
            ));
        }
    }
}

/// Minimum, average and maximum of some values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stats {
    min: u64,
    avg: u64,
    max: u64,
}

impl Stats {
    fn of(values: &[u64]) -> Option<Self> {
        Some(Self {
            min: *values.iter().min()?,
            avg: values.iter().sum::<u64>() / values.len() as u64,
            max: *values.iter().max()?,
        })
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} / {} / {}", self.min, self.avg, self.max)
    }
}

/// `values` in ten groups of consecutive ones (fewer when there are fewer than ten values;
/// of 100 each for 1,000): (first, last) numbered from 1, and their figures.
fn groups(values: &[u64]) -> Vec<(usize, usize, Stats)> {
    let size = values.len().div_ceil(10).max(1);
    values
        .chunks(size)
        .enumerate()
        .filter_map(|(i, chunk)| Some((i * size + 1, i * size + chunk.len(), Stats::of(chunk)?)))
        .collect()
}

/// The manager's restart times (`manager: restart vm=<id> <i>: running after <us> us`), in
/// order: they must be numbered 1, 2, ...
fn restart_times(lines: &[&str]) -> Result<Vec<u64>> {
    let pattern = Regex::new(r"^manager: restart vm=\d+ (\d+): running after (\d+) us$").unwrap();
    let mut times = Vec::new();
    for captures in lines.iter().filter_map(|line| pattern.captures(line)) {
        let number: usize = captures[1].parse().unwrap();
        if number != times.len() + 1 {
            return Err(format!(
                "the manager's restart {number} follows restart {}",
                times.len()
            ));
        }
        times.push(captures[2].parse().unwrap());
    }
    Ok(times)
}

/// The times of Keel's `vm '<vm>' (id N) reloaded: B bytes in S steps over T us` lines (Keel
/// leaves some out when a VM restarts more than twice a second: see `ratelimit`), in us.
fn reload_times(ended: &Ended, vm: &str) -> Vec<u64> {
    let pattern = Regex::new(&format!(
        r"^\[keel\] vm '{vm}' \(id \d+\) reloaded: \d+ bytes in \d+ steps over (\d+) us"
    ))
    .unwrap();
    ended
        .lines
        .iter()
        .filter_map(|line| pattern.captures(line))
        .map(|c| c[1].parse().unwrap())
        .collect()
}

/// What the 1 kHz partition reported over a run.
#[derive(Debug, PartialEq, Eq)]
struct Ticks {
    seconds: u64,
    ticks: u64,
    expected: u64,
    /// Worst tick lateness of any second, in us (`late_max_us`).
    worst_late_us: u64,
}

/// VM `vm`'s tick reports checked: every second from 1 on, each within one tick of the virtual
/// counter.
fn ticks(ended: &Ended, vm: &str) -> Result<Ticks> {
    let reports = tick_reports(ended, vm);
    let mut last_second = 0;
    for report in &reports {
        if report.second != last_second + 1 {
            return Err(format!(
                "vm '{vm}': the tick report of second {} follows second {last_second}: a gap",
                report.second
            ));
        }
        if report.ticks.abs_diff(report.expected) > 1 {
            return Err(format!(
                "vm '{vm}': second {}: {} ticks, the virtual counter says {}",
                report.second, report.ticks, report.expected
            ));
        }
        last_second = report.second;
    }
    let last = reports
        .last()
        .ok_or(format!("vm '{vm}' reported no ticks"))?;
    Ok(Ticks {
        seconds: last.second,
        ticks: last.ticks,
        expected: last.expected,
        worst_late_us: reports.iter().map(|r| r.late_us).max().unwrap_or(0),
    })
}

/// The manager's figures of one restart run, checked: every restart done, timed and noticed,
/// Keel's resource counters unchanged.
#[derive(Debug)]
struct Restarts {
    times_us: Vec<u64>,
    at_boot: String,
    after_last: String,
    noticed: u64,
}

fn restarts(ended: &Ended, manager: &str, restarts: u64) -> Result<Restarts> {
    let lines = lines_of(ended, manager);
    let times_us = restart_times(&lines)?;
    if times_us.len() as u64 != restarts {
        return Err(format!(
            "the manager timed {} restarts, expected {restarts}",
            times_us.len()
        ));
    }
    let counters = |prefix: &str| {
        lines
            .iter()
            .rev()
            .find_map(|line| line.strip_prefix(prefix))
            .map(str::to_string)
            .ok_or(format!("the manager printed no '{prefix}' line"))
    };
    let at_boot = counters("manager: resources vm=0 at boot: ")?;
    let after_last = counters(&format!("manager: resources vm=0 restart {restarts}: "))?;
    let unchanged = format!("manager: resources unchanged after {restarts} restarts");
    if !lines.contains(&unchanged.as_str()) {
        return Err(format!(
            "Keel's resource counters changed across the restarts (at boot: {at_boot}; see the log)"
        ));
    }
    let noticed: u64 = counters("manager: notices vm=0: ")?
        .strip_suffix(" restarts")
        .and_then(|n| n.parse().ok())
        .ok_or("the manager's notices line is malformed")?;
    if noticed != restarts {
        return Err(format!(
            "Keel sent {noticed} restart notices for {restarts} restarts"
        ));
    }
    Ok(Restarts {
        times_us,
        at_boot,
        after_last,
        noticed,
    })
}

/// Prints the figures common to both restart runs.
fn print_restarts(
    figures: &Restarts,
    reloads: &[u64],
    ticks: &Ticks,
    lateness: (u64, u64, u64),
    rt: &str,
) {
    let restarts = figures.times_us.len();
    progress::out(&format!(
        "  restarts: {restarts} done, each timed and noticed ({} notices)",
        figures.noticed
    ));
    progress::out("  restart time, KEEL_VM_RESTART until KEEL_VM_STATUS says running (us, min / avg / max; polled every 50 us):");
    for (first, last, stats) in groups(&figures.times_us) {
        progress::out(&format!("    restarts {first:>4}-{last:<4} {stats}"));
    }
    let size = restarts.div_ceil(10).max(1);
    let first_last = |values: &[u64]| {
        let first = Stats::of(&values[..size.min(values.len())]);
        let last = Stats::of(&values[values.len().saturating_sub(size)..]);
        match (first, last) {
            (Some(first), Some(last)) => format!("first {size}: {first}, last {size}: {last}"),
            _ => "none".into(),
        }
    };
    progress::out(&format!(
        "  Keel's reload as it reported it ({} lines; us, min / avg / max): {}",
        reloads.len(),
        first_last(reloads)
    ));
    progress::out(&format!(
        "  vm '{rt}', 1 kHz on the same pCPU: {} s reported, {} ticks, the counter says {}: {} missed; worst lateness of a second {} us; lateness (ns, min / avg of seconds / max): {} / {} / {}",
        ticks.seconds,
        ticks.ticks,
        ticks.expected,
        ticks.expected.saturating_sub(ticks.ticks),
        ticks.worst_late_us,
        lateness.0,
        lateness.1,
        lateness.2
    ));
    progress::out(&format!(
        "  Keel's counters at boot:             {}",
        figures.at_boot
    ));
    progress::out(&format!(
        "  Keel's counters after restart {restarts:<6} {} (unchanged at every restart)",
        figures.after_last
    ));
}

/// Part 1: the sample partition restarted `count` times by a bare-metal manager, the 1 kHz
/// partition beside it.
fn bare_metal(count: u64, shift: u8) -> Result<()> {
    let text = with_restarts(&config_text("bare-metal")?, count)?;
    let running = running_ms(&text)?;
    progress::out("");
    progress::out(&format!(
        "Bare-metal: 'mgr' restarts the sample partition 'control' {count} times, {running} ms of its running apart; 'rt' ticks at 1 kHz on the same EDF pCPU (configs/soak/bare-metal.toml)"
    ));
    // Each restart's running and its reload (about 5 ms).
    let virtual_seconds = 10 + count * (running + 100) / 1000;
    let mut run = Run::start(
        "soak-bare-metal",
        &text,
        Duration::from_secs(600 + virtual_seconds * REAL_PER_VIRTUAL),
        shift,
    )?;
    let mut bar = Advance::new(count, "bare-metal restarts");
    let restart_line = r"^\[mgr\] manager: restart vm=0 \d+: running after \d+ us$";
    let mut steps = || -> Result<()> {
        for done in 1..=count {
            run.wait_count(restart_line, done as usize, STEP)?;
            bar.inc();
        }
        run.wait_count(r"^\[keel\] vm 'mgr' \(id 1\) powered off$", 1, STEP)?;
        // A last report of the 1 kHz partition after the manager's end.
        let mark = run.session.lines_read();
        run.wait_after(mark, r"^\[rt\] tick: ", STEP)?;
        Ok(())
    };
    let outcome = steps();
    drop(bar);
    let ((), ended, took) = run.end(outcome)?;
    let check = || -> Result<()> {
        let figures = restarts(&ended, "mgr", count)?;
        let reloads = reload_times(&ended, "control");
        let ticks = ticks(&ended, "rt")?;
        let lateness = crate::sched_bench::lateness(&ended, "rt")?;
        let control = task_reports(&ended, "control");
        let missed: Vec<&TaskReport> = control
            .iter()
            .filter(|r| r.misses != 0 || r.overruns != 0)
            .collect();
        progress::out(&format!(
            "  ran {} s of virtual time in {}",
            ticks.seconds,
            minutes_and_seconds(took)
        ));
        print_restarts(&figures, &reloads, &ticks, lateness, "rt");
        progress::out(&format!(
            "  the restarted partition's own tasks: {} reports after its boots, {} with a miss or overrun",
            control.len(),
            missed.len()
        ));
        if let Some(report) = missed.first() {
            return Err(format!(
                "vm 'control' task {} at {} s: {} misses, {} overruns",
                report.task, report.second, report.misses, report.overruns
            ));
        }
        if ticks.expected != ticks.ticks {
            return Err(format!(
                "vm 'rt' missed {} ticks",
                ticks.expected.saturating_sub(ticks.ticks)
            ));
        }
        Ok(())
    };
    check().map_err(|m| with_console_tail(m, &ended))
}

/// The id Keel gave VM `vm` (its `vm '<vm>' (id N): ...` line at boot).
fn vm_id(run: &mut Run, vm: &str) -> Result<u8> {
    let line = run.wait_count(&format!(r"^\[keel\] vm '{vm}' \(id \d+\): "), 1, STEP)?;
    Regex::new(r"\(id (\d+)\)")
        .unwrap()
        .captures(&line)
        .and_then(|c| c[1].parse().ok())
        .ok_or(format!("no id in '{line}'"))
}

/// Linux's own time from its start to its init (`[ t] Run /init as init process`) at each
/// boot, in ms.
fn init_times(ended: &Ended) -> Vec<u64> {
    let pattern = Regex::new(r"^\[\s*(\d+)\.(\d{6})\] Run /init as init process$").unwrap();
    lines_of(ended, "linux")
        .into_iter()
        .filter_map(|line| pattern.captures(line))
        .map(|c| c[1].parse::<u64>().unwrap() * 1000 + c[2].parse::<u64>().unwrap() / 1000)
        .collect()
}

/// Part 2: Debian Linux restarted `count` times by a bare-metal manager, each time once its
/// shell answers, the 1 kHz partition above it on the same pCPU.
fn linux(count: u64, shift: u8) -> Result<()> {
    let text = with_restarts(&config_text("linux")?, count)?;
    progress::out("");
    progress::out(&format!(
        "Linux: 'mgr' restarts Debian Linux {count} times, each once its shell has answered a command; 'rt' ticks at 1 kHz above it on the same fixed-priority pCPU (configs/soak/linux.toml)"
    ));
    // About 1.5 s of Linux's boot, and what the host takes to type, per incarnation.
    let virtual_seconds = 30 + count * 10;
    let mut run = Run::start(
        "soak-linux",
        &text,
        Duration::from_secs(1200 + virtual_seconds * REAL_PER_VIRTUAL),
        shift,
    )?;
    let mut bar = Advance::new(count, "Linux restarts");
    let mut steps = || -> Result<()> {
        let manager = vm_id(&mut run, "mgr")?;
        let linux = vm_id(&mut run, "linux")?;
        let focus = |vm: u8| [0x01, b'0' + vm];
        for incarnation in 0..=count {
            run.wait_count(
                r"^\[linux\] KEEL-INIT-END shell$",
                incarnation as usize + 1,
                LINUX_BOOT,
            )?;
            run.type_line(&format!("echo soak-{incarnation}-$((6 * 7))"))?;
            run.wait_count(&format!(r"^\[linux\] soak-{incarnation}-42$"), 1, STEP)?;
            // The manager's key: it reads Keel's counters of Linux, then restarts it (or, the
            // last time, ends).
            let mut keys = focus(manager).to_vec();
            keys.push(b'r');
            keys.extend(focus(linux));
            run.session.send(&keys)?;
            if incarnation < count {
                run.wait_count(
                    r"^\[mgr\] manager: restart vm=0 \d+: running after \d+ us$",
                    incarnation as usize + 1,
                    STEP,
                )?;
                bar.inc();
            }
        }
        run.wait_count(
            &format!(r"^\[keel\] vm 'mgr' \(id {manager}\) powered off$"),
            1,
            STEP,
        )?;
        let mark = run.session.lines_read();
        run.wait_after(mark, r"^\[rt\] tick: ", STEP)?;
        Ok(())
    };
    let outcome = steps();
    drop(bar);
    let ((), ended, took) = run.end(outcome)?;
    let check = || -> Result<()> {
        let figures = restarts(&ended, "mgr", count)?;
        let reloads = reload_times(&ended, "linux");
        let ticks = ticks(&ended, "rt")?;
        let lateness = crate::sched_bench::lateness(&ended, "rt")?;
        let init = init_times(&ended);
        progress::out(&format!(
            "  ran {} s of virtual time in {}",
            ticks.seconds,
            minutes_and_seconds(took)
        ));
        print_restarts(&figures, &reloads, &ticks, lateness, "rt");
        if init.len() as u64 != count + 1 {
            return Err(format!(
                "Linux reached its init {} times in {} boots",
                init.len(),
                count + 1
            ));
        }
        progress::out("  Linux's own time from its start to its init, by its printk clock (ms, min / avg / max):");
        for (first, last, stats) in groups(&init) {
            progress::out(&format!("    boots {first:>4}-{last:<4} {stats}"));
        }
        // Each restart until running, then the next boot until its init.
        let to_init: Vec<u64> = figures
            .times_us
            .iter()
            .zip(&init[1..])
            .map(|(us, init_ms)| us / 1000 + init_ms)
            .collect();
        progress::out("  restart to Linux's init: the two above added (ms, min / avg / max):");
        for (first, last, stats) in groups(&to_init) {
            progress::out(&format!("    restarts {first:>4}-{last:<4} {stats}"));
        }
        if ticks.expected != ticks.ticks {
            return Err(format!(
                "vm 'rt' missed {} ticks",
                ticks.expected.saturating_sub(ticks.ticks)
            ));
        }
        Ok(())
    };
    check().map_err(|m| with_console_tail(m, &ended))
}

/// One line of the sample partition's report about one task (`control: t=N s task I ...`):
/// its own figures and Keel's (KEEL_TASK_STATS).
#[derive(Clone, Debug, PartialEq, Eq)]
struct TaskReport {
    second: u64,
    task: usize,
    period_us: u64,
    jobs: u64,
    jitter_max_ns: u64,
    response_max_ns: u64,
    misses: u64,
    overruns: u64,
    worst_response_ns: u64,
    worst_lateness_ns: u64,
}

/// VM `vm`'s task reports with Keel's statistics, in order.
fn task_reports(ended: &Ended, vm: &str) -> Vec<TaskReport> {
    let pattern = Regex::new(
        r"^control: t=(\d+) s task (\d) \((\d+) us\): at_us=\d+ jobs=\d+ jitter_ns=\d+/(\d+) response_ns=\d+/\d+/(\d+) \| keel: jobs=(\d+) misses=(\d+) overruns=(\d+) worst_response_ns=(\d+) worst_lateness_ns=(\d+)$",
    )
    .unwrap();
    lines_of(ended, vm)
        .into_iter()
        .filter_map(|line| {
            let c = pattern.captures(line)?;
            let n = |i: usize| c[i].parse::<u64>().unwrap();
            Some(TaskReport {
                second: n(1),
                task: n(2) as usize,
                period_us: n(3),
                jitter_max_ns: n(4),
                response_max_ns: n(5),
                jobs: n(6),
                misses: n(7),
                overruns: n(8),
                worst_response_ns: n(9),
                worst_lateness_ns: n(10),
            })
        })
        .collect()
}

/// The stress-ng run the host types at Linux's shell: a CPU hog, a memory hog and 10 kHz
/// POSIX timers, for `seconds`; then its exit status in a line of its own.
fn stress_command(seconds: u64) -> String {
    format!(
        "cd /tmp && stress-ng --cpu 1 --vm 1 --vm-bytes 64M --timer 1 --timer-freq 10000 \
         --timeout {seconds}s --metrics-brief; echo soak-stress-end-$?"
    )
}

/// Part 3: Debian Linux under stress-ng for `minutes` of virtual time next to the sample
/// partition's three tasks on the same EDF pCPU.
fn stress(minutes: u64, shift: u8) -> Result<()> {
    let text = config_text("stress")?;
    let seconds = minutes * 60;
    progress::out("");
    progress::out(&format!(
        "Stress: Debian Linux runs stress-ng (CPU, memory, 10 kHz timers) for {minutes} min beside the sample partition's three tasks on the same EDF pCPU (configs/soak/stress.toml)"
    ));
    let mut run = Run::start(
        "soak-stress",
        &text,
        Duration::from_secs(1200 + (seconds + 30) * REAL_PER_VIRTUAL),
        shift,
    )?;
    let report = r"^\[control\] control: t=(\d+) s task 2 ";
    let end = r"^\[linux\] soak-stress-end-(\d+)$";
    let mut steps = || -> Result<(u64, u64)> {
        run.wait_count(r"^\[linux\] KEEL-INIT-END shell$", 1, LINUX_BOOT)?;
        run.type_line(&stress_command(seconds))?;
        run.wait_count(r"^\[linux\] stress-ng: info: .* dispatching hogs", 1, STEP)?;
        let second = |line: &str| -> u64 {
            Regex::new(report)
                .unwrap()
                .captures(line)
                .map_or(0, |c| c[1].parse().unwrap())
        };
        let mut mark = run.session.lines_read();
        let first = second(&run.wait_after(mark, report, STEP)?);
        let mut bar = Advance::new(seconds, "virtual seconds of stress-ng");
        loop {
            mark = run.session.lines_read();
            let line = run.wait_after(mark, &format!("{report}|{end}"), STEP)?;
            if line.starts_with("[linux] ") {
                break;
            }
            bar.inc();
        }
        drop(bar);
        // The partition's report after the end.
        mark = run.session.lines_read();
        let last = second(&run.wait_after(mark, report, STEP)?);
        Ok((first, last))
    };
    let outcome = steps();
    let ((first, last), ended, took) = run.end(outcome)?;
    let check = || -> Result<()> {
        expect(
            &ended,
            r"^\[linux\] stress-ng: info: .* successful run completed in",
        )?;
        expect(&ended, r"^\[linux\] soak-stress-end-0$")?;
        let reports = task_reports(&ended, "control");
        progress::out(&format!(
            "  ran {last} s of virtual time in {} (the tasks' reports from {first} s to {last} s cover stress-ng's run)",
            minutes_and_seconds(took)
        ));
        if last.saturating_sub(first) < seconds {
            return Err(format!(
                "the tasks reported over {} s of stress-ng, expected {seconds} s",
                last.saturating_sub(first)
            ));
        }
        // stress-ng's own account: each stressor's work, and its verdict.
        for line in lines_of(&ended, "linux").into_iter().filter(|l| {
            l.starts_with("stress-ng: metrc: ") || l.contains("successful run completed")
        }) {
            progress::out(&format!("  {line}"));
        }
        progress::out("  per task, over the whole run (Linux's boot and stress-ng's run): Keel's jobs, misses, overruns, worst response and worst release lateness (KEEL_TASK_STATS); the task's own worst release jitter and response:");
        for task in 0..3 {
            let mine: Vec<&TaskReport> = reports.iter().filter(|r| r.task == task).collect();
            let last = mine
                .last()
                .ok_or(format!("vm 'control' never reported task {task}"))?;
            let bad = mine.iter().find(|r| r.misses != 0 || r.overruns != 0);
            progress::out(&format!(
                "    task {task} ({:>5} us): {} jobs, {} misses, {} overruns, worst response {} ns, worst lateness {} ns; own jitter {} ns, response {} ns",
                last.period_us,
                last.jobs,
                last.misses,
                last.overruns,
                last.worst_response_ns,
                last.worst_lateness_ns,
                last.jitter_max_ns,
                last.response_max_ns
            ));
            if let Some(r) = bad {
                return Err(format!(
                    "vm 'control' task {task} at {} s: {} misses, {} overruns",
                    r.second, r.misses, r.overruns
                ));
            }
        }
        Ok(())
    };
    check().map_err(|m| with_console_tail(m, &ended))
}

fn expect(ended: &Ended, pattern: &str) -> Result<()> {
    let regex = Regex::new(pattern).unwrap();
    if ended.lines.iter().any(|l| regex.is_match(l)) {
        Ok(())
    } else {
        Err(format!("no console line matched /{pattern}/"))
    }
}

/// `12 min 5 s`.
fn minutes_and_seconds(duration: Duration) -> String {
    let seconds = duration.as_secs();
    format!("{} min {} s (real time)", seconds / 60, seconds % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(lines: &[&str]) -> Ended {
        Ended {
            lines: lines.iter().map(|l| l.to_string()).collect(),
            exit_code: None,
            stderr: String::new(),
        }
    }

    #[test]
    fn the_restart_count_is_rewritten_once_or_refused() {
        let text = "cmdline = \"keel.mode=manager keel.restarts=1000 keel.running=1200\"";
        assert_eq!(
            with_restarts(text, 50).unwrap(),
            "cmdline = \"keel.mode=manager keel.restarts=50 keel.running=1200\""
        );
        assert!(with_restarts("cmdline = \"x\"", 5)
            .unwrap_err()
            .contains("0 keel.restarts= tokens"));
        assert!(with_restarts("keel.restarts=1 keel.restarts=2", 5)
            .unwrap_err()
            .contains("2 keel.restarts= tokens"));
    }

    #[test]
    fn the_running_time_is_read_from_the_configuration() {
        assert_eq!(
            running_ms("cmdline = \"keel.restarts=5 keel.running=1200\"").unwrap(),
            1200
        );
        assert!(running_ms("cmdline = \"keel.restarts=5\"")
            .unwrap_err()
            .contains("no keel.running"));
    }

    #[test]
    fn groups_are_ten_of_consecutive_values_with_their_figures() {
        let values: Vec<u64> = (1..=1000).collect();
        let of_1000 = groups(&values);
        assert_eq!(of_1000.len(), 10);
        assert_eq!(
            of_1000[0],
            (
                1,
                100,
                Stats {
                    min: 1,
                    avg: 50,
                    max: 100
                }
            )
        );
        assert_eq!(of_1000[9].0..=of_1000[9].1, 901..=1000);
        // Fewer values than ten: one per group; 25: groups of 3, the last of 1.
        assert_eq!(groups(&[7, 9]).len(), 2);
        let of_25: Vec<u64> = (0..25).collect();
        let last = *groups(&of_25).last().unwrap();
        assert_eq!((last.0, last.1), (25, 25));
        assert!(groups(&[]).is_empty());
    }

    #[test]
    fn restart_times_must_be_numbered_in_order() {
        let lines = [
            "manager: resources vm=0 at boot: messages=0",
            "manager: restart vm=0 1: running after 5154 us",
            "manager: restart vm=0 2: running after 5104 us",
        ];
        assert_eq!(restart_times(&lines).unwrap(), [5154, 5104]);
        let skipped = [
            "manager: restart vm=0 1: running after 5154 us",
            "manager: restart vm=0 3: running after 5104 us",
        ];
        assert_eq!(
            restart_times(&skipped).unwrap_err(),
            "the manager's restart 3 follows restart 1"
        );
    }

    #[test]
    fn restarts_are_checked_for_their_count_counters_and_notices() {
        let run = |notices: &str, unchanged: &str| {
            ended(&[
                "[mgr] manager: resources vm=0 at boot: messages=0 tasks=3",
                "[mgr] manager: restart vm=0 1: running after 5154 us",
                "[mgr] manager: resources vm=0 restart 1: messages=0 tasks=3",
                "[mgr] manager: restart vm=0 2: running after 5104 us",
                "[mgr] manager: resources vm=0 restart 2: messages=0 tasks=3",
                unchanged,
                notices,
            ])
        };
        let good = run(
            "[mgr] manager: notices vm=0: 2 restarts",
            "[mgr] manager: resources unchanged after 2 restarts",
        );
        let figures = restarts(&good, "mgr", 2).unwrap();
        assert_eq!(figures.times_us, [5154, 5104]);
        assert_eq!(figures.at_boot, "messages=0 tasks=3");
        assert_eq!(figures.after_last, "messages=0 tasks=3");
        assert!(restarts(&good, "mgr", 3)
            .unwrap_err()
            .contains("timed 2 restarts, expected 3"));
        let changed = run(
            "[mgr] manager: notices vm=0: 2 restarts",
            "[mgr] manager: resources changed",
        );
        assert!(restarts(&changed, "mgr", 2)
            .unwrap_err()
            .contains("counters changed"));
        let unnoticed = run(
            "[mgr] manager: notices vm=0: 1 restarts",
            "[mgr] manager: resources unchanged after 2 restarts",
        );
        assert_eq!(
            restarts(&unnoticed, "mgr", 2).unwrap_err(),
            "Keel sent 1 restart notices for 2 restarts"
        );
    }

    #[test]
    fn ticks_are_checked_second_by_second() {
        let good = ended(&[
            "[rt] tick: s=1 ticks=1000 expected=1000 late_max_us=1",
            "[keel] vm 'control' (id 0) reloaded: 16818459 bytes in 4114 steps over 5040 us",
            "[rt] tick: s=2 ticks=2000 expected=2000 late_max_us=3",
        ]);
        assert_eq!(
            ticks(&good, "rt").unwrap(),
            Ticks {
                seconds: 2,
                ticks: 2000,
                expected: 2000,
                worst_late_us: 3
            }
        );
        assert_eq!(reload_times(&good, "control"), [5040]);
        let gap = ended(&[
            "[rt] tick: s=1 ticks=1000 expected=1000 late_max_us=1",
            "[rt] tick: s=3 ticks=3000 expected=3000 late_max_us=1",
        ]);
        assert!(ticks(&gap, "rt").unwrap_err().contains("a gap"));
        let missed = ended(&["[rt] tick: s=1 ticks=997 expected=1000 late_max_us=1"]);
        assert!(ticks(&missed, "rt")
            .unwrap_err()
            .contains("997 ticks, the virtual counter says 1000"));
        assert!(ticks(&ended(&[]), "rt").is_err());
    }

    #[test]
    fn task_reports_and_init_times_are_read() {
        let run = ended(&[
            "[control] control: t=3 s task 1 (5000 us): at_us=3000100 jobs=601 jitter_ns=1000/2000 response_ns=500000/600000/700000 | keel: jobs=601 misses=0 overruns=0 worst_response_ns=710000 worst_lateness_ns=2100",
            "[control] control: t=3 s task 2 (20000 us): at_us=3000100 jobs=151 jitter_ns=1/2 response_ns=3/4/5 | keel: error NotSupported",
            "[linux] [    1.467043] Run /init as init process",
            "[linux] [   12.000999] Run /init as init process",
        ]);
        assert_eq!(
            task_reports(&run, "control"),
            [TaskReport {
                second: 3,
                task: 1,
                period_us: 5000,
                jobs: 601,
                jitter_max_ns: 2000,
                response_max_ns: 700000,
                misses: 0,
                overruns: 0,
                worst_response_ns: 710000,
                worst_lateness_ns: 2100,
            }]
        );
        assert_eq!(init_times(&run), [1467, 12000]);
    }

    #[test]
    fn the_stress_command_reports_its_status_apart_from_its_echo() {
        let command = stress_command(300);
        assert!(command.contains("--timeout 300s"));
        // The shell's echo of the typed line cannot match the end pattern: `$?` is not a digit.
        let end = Regex::new(r"^\[linux\] soak-stress-end-(\d+)$").unwrap();
        assert!(!end.is_match(&format!("[linux] ~ # {command}")));
        assert!(end.is_match("[linux] soak-stress-end-0"));
    }
}
