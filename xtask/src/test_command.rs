//! `cargo xtask test`: the standards checks, cargo's own tests, then the QEMU scenarios, a few
//! at a time (`--jobs`, 2 by default: each scenario is one QEMU, single-threaded under icount,
//! and this machine has 2 cores); ends with `N passed, N failed`.
//!
//! What scenarios running at once share, and how: builds take turns (`build_lock.rs`: cargo's
//! output, `target/keel/<name>/`, the Debian cache), and a configuration name stands for one
//! image in a run ([`image::one_image_per_name`]); each QEMU has its own log file (a second
//! QEMU on the same log is refused, `qemu.rs`), its own console pipes and user network, and
//! each HTTP server its own loopback port (`http.rs`). Each scenario's line is printed when it
//! ends, whole.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Instant;

use crate::cli::TestArgs;
use crate::progress::{self, Progress};
use crate::scenarios::{self, Scenario};
use crate::{image, layers, lines, process, setup, step, workspace, Result};

/// The crates built for `aarch64-unknown-none-softfloat` (the hypervisor and the guests): the
/// workspace's default members are the host crates.
const AARCH64_CRATES: [&str; 5] = ["keel", "keel-guest", "test-guest", "hostile", "rt-control"];

/// Tallies checks for the closing `N passed, N failed` line, and names each that failed, so
/// the end of the log (all a CI page may show) says which.
#[derive(Default)]
struct Tally {
    passed: u32,
    failed: u32,
    /// One line for each failure: what failed and, where short, why.
    failures: Vec<String>,
}

impl Tally {
    /// Runs one standards check (formatting, lints): it passes when `command` exits 0; when it
    /// fails, its own output (which names each file and line) is shown.
    fn check(&mut self, name: &str, command: &mut Command) {
        step(&format!("{name}: {}", process::command_line(command)));
        match command.current_dir(workspace()).output() {
            Ok(output) if output.status.success() => {
                self.passed += 1;
                progress::out(&format!("check {name} ... ok"));
            }
            Ok(output) => {
                progress::out_text(&String::from_utf8_lossy(&output.stdout));
                progress::err_text(&String::from_utf8_lossy(&output.stderr));
                progress::out(&format!("check {name} ... FAILED ({})", output.status));
                self.fail(format!("check {name} ({})", output.status));
            }
            Err(error) => {
                progress::out(&format!("check {name} ... FAILED: cannot start: {error}"));
                self.fail(format!("check {name}: cannot start: {error}"));
            }
        }
    }

    /// Counts a check xtask makes itself: `result` is a summary when it passes, the problems
    /// found (one a line, each naming its file and line) when it fails.
    fn outcome(&mut self, name: &str, result: Result<String>) {
        match result {
            Ok(summary) => {
                self.passed += 1;
                step(&format!("{name}: {summary}"));
                progress::out(&format!("check {name} ... ok"));
            }
            Err(problems) => {
                progress::out(&problems);
                progress::out(&format!("check {name} ... FAILED"));
                let first = problems.lines().next().unwrap_or_default();
                self.fail(format!("check {name}: {first}"));
            }
        }
    }

    /// Counts one scenario that ended, and its line: `scenario NAME ... ok (N s)`, or
    /// `... FAILED (N s)` and the message on the next line; `number` (`[12/57] `) before it.
    fn scenario(&mut self, number: &str, ended: &Ended) -> String {
        let (name, seconds) = (&ended.name, ended.seconds);
        match &ended.outcome {
            Ok(()) => {
                self.passed += 1;
                format!("{number}scenario {name} ... ok ({seconds:.1} s)")
            }
            Err(message) => {
                self.fail(format!("scenario {name}: {message}"));
                format!("{number}scenario {name} ... FAILED ({seconds:.1} s)\n    {message}")
            }
        }
    }

    /// Counts one failure, named by `line`.
    fn fail(&mut self, line: String) {
        self.failed += 1;
        self.failures.push(line);
    }

    /// The closing lines: each failure again (its first line), then `N passed, N failed`.
    fn summary(&self) -> String {
        let mut text = String::new();
        if !self.failures.is_empty() {
            text.push_str("what failed:\n");
            for failure in &self.failures {
                let first = failure.lines().next().unwrap_or_default();
                text.push_str(&format!("  {first}\n"));
            }
        }
        text + &format!("{} passed, {} failed", self.passed, self.failed)
    }
}

/// Runs the standards checks (`cargo fmt`, `cargo clippy` for the host and the aarch64
/// crates and for the Linux command's target, the hypervisor's module layers, where Keel's
/// lines may go unlimited), cargo's own tests, then the QEMU scenarios; ends with the
/// failures named and `N passed, N failed`. With a filter, runs only the scenarios whose name
/// contains it (for working on one), and builds cargo's tests without running them; with
/// `--list`, prints the names of the scenarios it would run and runs nothing.
pub fn run(args: &TestArgs) -> ExitCode {
    let filter = args.filter.as_deref();
    let chosen: Vec<Scenario> = scenarios::all()
        .into_iter()
        .filter(|scenario| filter.is_none_or(|text| scenario.name.contains(text)))
        .collect();
    if args.list {
        // Stops quietly where the reader does (`| head`).
        let mut stdout = std::io::stdout().lock();
        for scenario in &chosen {
            if writeln!(stdout, "{}", scenario.name).is_err() {
                break;
            }
        }
        return ExitCode::SUCCESS;
    }
    let mut tally = Tally::default();
    if let Err(message) = setup::ensure_tools() {
        progress::err(&format!("error: {message}"));
        return ExitCode::FAILURE;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    tally.check(
        "formatting",
        Command::new(&cargo).args(["fmt", "--all", "--check"]),
    );
    tally.check(
        "clippy (host crates)",
        Command::new(&cargo).args(["clippy", "--quiet", "--all-targets", "--", "-D", "warnings"]),
    );
    tally.check(
        "clippy (aarch64 crates)",
        Command::new(&cargo)
            .args(["clippy", "--quiet", "--target", setup::TARGET])
            .args(AARCH64_CRATES.iter().flat_map(|name| ["-p", name]))
            .args(["--", "-D", "warnings"]),
    );
    tally.check(
        "clippy (Keel for a board with a GICv2 and a Cadence UART)",
        Command::new(&cargo)
            .args(["clippy", "--quiet", "--target", setup::TARGET, "-p", "keel"])
            .args(["--", "-D", "warnings"])
            .env("KEEL_GIC", "2")
            .env("KEEL_UART", "cadence"),
    );
    tally.check(
        "clippy (the Linux command, aarch64)",
        Command::new(&cargo)
            .args(["clippy", "--quiet", "--target", setup::LINUX_TARGET])
            .args(["-p", "keel-ctl", "--", "-D", "warnings"]),
    );
    step("module layers of hypervisor/src (xtask/src/layers.rs)");
    tally.outcome("module layers", layers::check_workspace());
    step("module cycles of core/src (xtask/src/layers.rs)");
    tally.outcome("core module cycles", layers::check_core_workspace());
    step("Keel's lines: every one a guest can cause limited (xtask/src/lines.rs)");
    tally.outcome("Keel's unlimited lines", lines::check_workspace());
    host_tests(&cargo, filter.is_some(), &mut tally);
    step("building the guests");
    if let Err(message) = image::build_guests() {
        progress::out(&format!("building the guests failed: {message}"));
        tally.fail(format!("building the guests: {message}"));
        progress::out(&tally.summary());
        return ExitCode::FAILURE;
    }
    crate::docs::run_checks(filter, |name, outcome| tally.outcome(name, outcome));
    image::one_image_per_name();
    run_scenarios(chosen, args.jobs as usize, &mut tally);
    progress::out(&tally.summary());
    if tally.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `cargo test` (built only, with `build_only`), its tests counted in `tally`.
fn host_tests(cargo: &str, build_only: bool, tally: &mut Tally) {
    step("host tests: cargo test");
    let output = Command::new(cargo)
        .args(["test", "--quiet"])
        .args(build_only.then_some("--no-run"))
        .current_dir(workspace())
        .output();
    let summary = regex::Regex::new(r"test result: \w+\. (\d+) passed; (\d+) failed").unwrap();
    match output {
        Ok(output) => {
            let stdout = String::from_utf8_lossy(&output.stdout);
            progress::out_text(&stdout);
            progress::err_text(&String::from_utf8_lossy(&output.stderr));
            let mut failed = 0;
            for c in summary.captures_iter(&stdout) {
                tally.passed += c[1].parse::<u32>().unwrap();
                failed += c[2].parse::<u32>().unwrap();
            }
            let named = failed_host_tests(&stdout);
            for name in named.iter().take(failed as usize) {
                tally.fail(format!("host test {name}"));
            }
            for _ in named.len()..failed as usize {
                tally.fail("a host test (see cargo's output above)".into());
            }
            if !output.status.success() && failed == 0 {
                progress::out("cargo test failed to build or run");
                tally.fail("cargo test failed to build or run".into());
            }
        }
        Err(error) => {
            progress::out(&format!("cargo test could not start: {error}"));
            tally.fail(format!("cargo test could not start: {error}"));
        }
    }
}

/// The tests cargo's output says failed, in its order: with `--quiet` it names each in the
/// heading of its captured output (`---- NAME stdout ----`).
fn failed_host_tests(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix("---- ")?.strip_suffix(" stdout ----"))
        .collect()
}

/// A scenario that ended: its name, what it found, and the real time it took (waiting for the
/// build lock included).
struct Ended {
    name: String,
    outcome: Result<()>,
    seconds: f32,
}

/// Runs `scenarios` on `jobs` threads, each taking the next scenario of the list when it is
/// free, and prints each one's line as it ends (numbered `[12/57]` on a terminal, as CI's log
/// has had them without), under a bar of how many have ended and which are running.
fn run_scenarios(scenarios: Vec<Scenario>, jobs: usize, tally: &mut Tally) {
    let total = scenarios.len();
    let next = AtomicUsize::new(0);
    let running: Mutex<BTreeMap<usize, String>> = Mutex::new(BTreeMap::new());
    let bar = Progress::bar(total as u64, "scenarios");
    let show_running = |running: &BTreeMap<usize, String>| {
        let names: Vec<&str> = running.values().map(String::as_str).collect();
        bar.set_message(names.join(" | "));
    };
    let numbered = std::io::stdout().is_terminal();
    let (sender, ended) = mpsc::channel::<Ended>();
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, total.max(1)) {
            let sender = sender.clone();
            let (next, scenarios, running, show_running) =
                (&next, &scenarios, &running, &show_running);
            scope.spawn(move || loop {
                let index = next.fetch_add(1, Ordering::SeqCst);
                let Some(scenario) = scenarios.get(index) else {
                    break;
                };
                {
                    let mut running = running.lock().unwrap();
                    running.insert(index, scenario.name.clone());
                    show_running(&running);
                }
                let started = Instant::now();
                let outcome = (scenario.run)();
                let ended = Ended {
                    name: scenario.name.clone(),
                    outcome,
                    seconds: started.elapsed().as_secs_f32(),
                };
                running.lock().unwrap().remove(&index);
                if sender.send(ended).is_err() {
                    break;
                }
            });
        }
        drop(sender);
        for (count, ended) in (1..).zip(ended.iter()) {
            let number = if numbered {
                format!("[{count}/{total}] ")
            } else {
                String::new()
            };
            progress::out(&tally.scenario(&number, &ended));
            bar.inc();
            show_running(&running.lock().unwrap());
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn scenario_lines_are_as_ci_reads_them() {
        let mut tally = Tally::default();
        let ok = Ended {
            name: "two VMs".into(),
            outcome: Ok(()),
            seconds: 3.25,
        };
        assert_eq!(tally.scenario("", &ok), "scenario two VMs ... ok (3.2 s)");
        let failed = Ended {
            name: "reset".into(),
            outcome: Err("vm 'rt-a' booted 1 times".into()),
            seconds: 12.0,
        };
        assert_eq!(
            tally.scenario("[2/57] ", &failed),
            "[2/57] scenario reset ... FAILED (12.0 s)\n    vm 'rt-a' booted 1 times"
        );
        assert_eq!(
            tally.summary(),
            "what failed:\n  scenario reset: vm 'rt-a' booted 1 times\n1 passed, 1 failed"
        );
        let clean = Tally {
            passed: 3,
            ..Tally::default()
        };
        assert_eq!(clean.summary(), "3 passed, 0 failed");
    }

    #[test]
    fn failed_host_tests_are_named() {
        let stdout = "running 3 tests\n.FF\nfailures:\n\n---- c::d stdout ----\nboom\n\n\
                      ---- e stdout ----\nbang\n\nfailures:\n    c::d\n    e\n";
        assert_eq!(failed_host_tests(stdout), ["c::d", "e"]);
    }

    #[test]
    fn scenarios_run_jobs_at_a_time_and_each_is_counted() {
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let scenarios: Vec<Scenario> = (0..7)
            .map(|i| {
                let (inside, most) = (inside.clone(), most.clone());
                Scenario {
                    name: format!("scenario {i}"),
                    run: Box::new(move || {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(40));
                        inside.fetch_sub(1, Ordering::SeqCst);
                        if i == 3 {
                            Err("the fourth fails".into())
                        } else {
                            Ok(())
                        }
                    }),
                }
            })
            .collect();
        let mut tally = Tally::default();
        run_scenarios(scenarios, 2, &mut tally);
        assert_eq!((tally.passed, tally.failed), (6, 1));
        assert_eq!(most.load(Ordering::SeqCst), 2);
        let mut tally = Tally::default();
        run_scenarios(Vec::new(), 2, &mut tally);
        assert_eq!((tally.passed, tally.failed), (0, 0));
    }
}
