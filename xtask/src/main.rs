//! `cargo xtask`: Keel's host tools. `run` boots a configuration in QEMU, `test` runs every
//! test, `bench` prints the benchmarks, `fuzz` runs the core's fuzz targets, `build` compiles a
//! configuration into an image. The command line is declared in `cli.rs`.
#![forbid(unsafe_code)]

mod baseline;
mod bench;
mod cli;
mod debian;
mod devices_bench;
mod dtb;
mod exec_trace;
mod fuzz;
mod http;
mod image;
mod ipc_bench;
mod layers;
mod process;
mod qemu;
mod scenarios;
mod sched_bench;
mod setup;
mod tasks_bench;
mod vms_bench;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;

use cli::{Bench, Cli, Command, TestArgs};

/// The crates built for `aarch64-unknown-none-softfloat` (the hypervisor and the guests): the
/// workspace's default members are the host crates.
const AARCH64_CRATES: [&str; 5] = ["keel", "keel-guest", "test-guest", "hostile", "rt-control"];

/// Errors are messages for the user.
pub type Result<T> = std::result::Result<T, String>;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Announces a step.
pub fn step(what: &str) {
    eprintln!("xtask: {what}");
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run { config } => run(config),
        Command::Test(args) => return test(&args),
        Command::Bench(args) => setup::ensure_tools().and_then(|()| bench(args.which)),
        Command::Fuzz(args) => setup::ensure_tools().and_then(|()| {
            let (target, seconds) = args.target_and_seconds();
            fuzz::run(target, seconds, args.replay.as_deref())
        }),
        Command::Build { config } => setup::ensure_tools().and_then(|()| build(&config)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo xtask bench [WHICH]`: every benchmark set but the others, or one.
fn bench(which: Option<Bench>) -> Result<()> {
    match which {
        None => bench::run(false),
        Some(Bench::Micro) => bench::run(true),
        Some(Bench::Sched { no_linux }) => sched_bench::run(!no_linux),
        Some(Bench::Tasks) => tasks_bench::run(),
        Some(Bench::Devices) => devices_bench::run(),
        Some(Bench::Masked {
            config,
            until,
            path,
        }) => image::build_guests()
            .and_then(|()| tasks_bench::masked_stretches(&config, until.as_deref(), path)),
        Some(Bench::Messages) => ipc_bench::run_all(),
        Some(Bench::Rootfs) => scenarios::rootfs_bench(),
        Some(Bench::Vms) => vms_bench::run(),
        Some(Bench::Baseline { update }) => baseline::run(update),
    }
}

fn build(config: &Path) -> Result<()> {
    image::build_guests()?;
    image::build_system(config).map(|_| ())
}

fn run(config: Option<PathBuf>) -> Result<()> {
    setup::ensure_tools()?;
    let config = config.unwrap_or_else(|| workspace().join("configs/demo.toml"));
    image::build_guests()?;
    let image = image::build_system(&config)?;
    let machine = image::machine(&image, false)?;
    // A network card: a file to fetch from the host, as the README's demo lines do.
    let server = if machine.user_network {
        let server = http::FileServer::start(1_000_000)?;
        step(&format!(
            "serving a 1,000,000-byte file at {} (SHA-256 {})",
            server.guest_url(),
            server.sha256
        ));
        Some(server)
    } else {
        None
    };
    step("booting in QEMU: Ctrl-A then 0-9 focuses a VM's console, n the next one, x powers off");
    let outcome = machine.run_interactive();
    drop(server);
    outcome
}

/// Tallies checks for the closing `N passed, N failed` line.
#[derive(Default)]
struct Tally {
    passed: u32,
    failed: u32,
}

impl Tally {
    /// Runs one standards check (formatting, lints): it passes when `command` exits 0; when it
    /// fails, its own output (which names each file and line) is shown.
    fn check(&mut self, name: &str, command: &mut std::process::Command) {
        step(&format!("{name}: {}", process::command_line(command)));
        match command.current_dir(workspace()).output() {
            Ok(output) if output.status.success() => {
                self.passed += 1;
                println!("check {name} ... ok");
            }
            Ok(output) => {
                self.failed += 1;
                print!("{}", String::from_utf8_lossy(&output.stdout));
                eprint!("{}", String::from_utf8_lossy(&output.stderr));
                println!("check {name} ... FAILED ({})", output.status);
            }
            Err(error) => {
                self.failed += 1;
                println!("check {name} ... FAILED: cannot start: {error}");
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
                println!("check {name} ... ok");
            }
            Err(problems) => {
                self.failed += 1;
                println!("{problems}");
                println!("check {name} ... FAILED");
            }
        }
    }
}

/// Runs the standards checks (`cargo fmt`, `cargo clippy` for the host and the aarch64
/// crates, the hypervisor's module layers), cargo's own tests, then the QEMU scenarios; ends
/// with `N passed, N failed`. With a `filter`, runs only the scenarios whose name contains it
/// (for working on one); with `--list`, prints the names of the scenarios it would run and runs
/// nothing.
fn test(args: &TestArgs) -> ExitCode {
    let filter = args.filter.as_deref();
    let chosen: Vec<scenarios::Scenario> = scenarios::all()
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
        eprintln!("error: {message}");
        return ExitCode::FAILURE;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    tally.check(
        "formatting",
        std::process::Command::new(&cargo).args(["fmt", "--all", "--check"]),
    );
    tally.check(
        "clippy (host crates)",
        std::process::Command::new(&cargo).args([
            "clippy",
            "--quiet",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    );
    tally.check(
        "clippy (aarch64 crates)",
        std::process::Command::new(&cargo)
            .args(["clippy", "--quiet", "--target", setup::TARGET])
            .args(AARCH64_CRATES.iter().flat_map(|name| ["-p", name]))
            .args(["--", "-D", "warnings"]),
    );
    step("module layers of hypervisor/src (xtask/src/layers.rs)");
    tally.outcome("module layers", layers::check_workspace());
    step("module cycles of core/src (xtask/src/layers.rs)");
    tally.outcome("core module cycles", layers::check_core_workspace());
    step("host tests: cargo test");
    let output = std::process::Command::new(&cargo)
        .args(["test", "--quiet"])
        .args(filter.map(|_| "--no-run"))
        .current_dir(workspace())
        .output();
    let summary = regex::Regex::new(r"test result: \w+\. (\d+) passed; (\d+) failed").unwrap();
    match output {
        Ok(output) => {
            let stdout = String::from_utf8_lossy(&output.stdout);
            print!("{stdout}");
            eprint!("{}", String::from_utf8_lossy(&output.stderr));
            let mut failed = 0;
            for c in summary.captures_iter(&stdout) {
                tally.passed += c[1].parse::<u32>().unwrap();
                failed += c[2].parse::<u32>().unwrap();
            }
            if !output.status.success() && failed == 0 {
                failed += 1;
                println!("cargo test failed to build or run");
            }
            tally.failed += failed;
        }
        Err(error) => {
            tally.failed += 1;
            println!("cargo test could not start: {error}");
        }
    }
    step("building the guests");
    if let Err(message) = image::build_guests() {
        println!("building the guests failed: {message}");
        println!("{} passed, {} failed", tally.passed, tally.failed + 1);
        return ExitCode::FAILURE;
    }
    for scenario in chosen {
        let started = Instant::now();
        let outcome = (scenario.run)();
        let seconds = started.elapsed().as_secs_f32();
        match outcome {
            Ok(()) => {
                tally.passed += 1;
                println!("scenario {} ... ok ({seconds:.1} s)", scenario.name);
            }
            Err(message) => {
                tally.failed += 1;
                println!(
                    "scenario {} ... FAILED ({seconds:.1} s)\n    {message}",
                    scenario.name
                );
            }
        }
    }
    println!("{} passed, {} failed", tally.passed, tally.failed);
    if tally.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
