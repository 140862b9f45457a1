//! `cargo xtask`: Keel's host tools. `run` boots a configuration in QEMU, `test` runs every
//! test, `bench` prints the micro-benchmarks, `build` compiles a configuration into an image.
#![forbid(unsafe_code)]

mod baseline;
mod bench;
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

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

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

const USAGE: &str = "usage: cargo xtask <command>
  run [CONFIG]     build CONFIG (default configs/demo.toml) and boot it in QEMU, console on this terminal
                   (Ctrl-A then 0-9 focus a VM, n next VM, x power off)
  test [TEXT]      run every test: host unit tests, then QEMU scenarios (with TEXT: only the
                   scenarios whose name contains it)
  bench [micro]    print the micro-benchmarks (instructions, QEMU icount), Keel vs native, then the
                   Linux benchmarks (native, Keel, Xen) unless `micro`
  bench sched [--no-linux]  the shared-pCPU benchmarks: vCPU switch cost, lazy FP, the M5150 overhead table (--no-linux: without the Linux boots)
  bench tasks      real-time task services, the sample partition's jitter, masked stretches, lateness through resets
  bench devices    a passthrough interrupt (QEMU's edu behind the SMMU): native, Keel pinned, Keel shared
  bench masked CONFIG [REGEX] [--path]  boot CONFIG under icount until QEMU ends (or a console
                   line matches REGEX) and print each pCPU's longest stretch with interrupts
                   masked at EL2 (--path: function by function)
  bench messages   messages between VMs: send, receive and delivery of 20-100 byte messages, beside the M5150 paper
  bench rootfs     Debian's kernel with its root on virtio-blk-pci and virtio-net-pci on QEMU user
                   networking, natively, in a Keel VM given the PCI bridge behind the SMMU and
                   as Xen's dom0: a 64 MiB dd, a 50 MB HTTP fetch and image saving, timed
  bench vms        pipe and UNIX-socket bandwidth of 1-4 Linux VMs at once (own pCPUs, then one shared), beside the Xen on ARM paper
  bench baseline [--update]  the figures the test command holds (xtask/baseline.toml) beside their
                   baseline; with --update, written as the new baseline
  fuzz [TARGET] [SECONDS]  run the core's fuzz targets (all, or TARGET) SECONDS each (default 10);
                   `fuzz TARGET --replay FILE` runs one saved input
  build CONFIG     compile CONFIG and build its image under target/keel/<name>/keel.bin";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("run") => run(args.get(1).map(PathBuf::from)),
        Some("test") => return test(args.get(1).map(String::as_str)),
        Some("bench") if args.get(1).is_some_and(|a| a == "sched") => setup::ensure_tools()
            .and_then(|()| sched_bench::run(args.get(2).is_none_or(|a| a != "--no-linux"))),
        Some("bench") if args.get(1).is_some_and(|a| a == "messages") => {
            setup::ensure_tools().and_then(|()| ipc_bench::run_all())
        }
        Some("bench") if args.get(1).is_some_and(|a| a == "tasks") => {
            setup::ensure_tools().and_then(|()| tasks_bench::run())
        }
        Some("bench") if args.get(1).is_some_and(|a| a == "rootfs") => {
            setup::ensure_tools().and_then(|()| scenarios::rootfs_bench())
        }
        Some("bench") if args.get(1).is_some_and(|a| a == "vms") => {
            setup::ensure_tools().and_then(|()| vms_bench::run())
        }
        Some("bench") if args.get(1).is_some_and(|a| a == "masked") => match args.get(2) {
            Some(config) => setup::ensure_tools()
                .and_then(|()| image::build_guests())
                .and_then(|()| {
                    let until = args[3..].iter().find(|a| *a != "--path");
                    let path = args[3..].iter().any(|a| a == "--path");
                    tasks_bench::masked_stretches(
                        Path::new(config),
                        until.map(String::as_str),
                        path,
                    )
                }),
            None => Err(USAGE.into()),
        },
        Some("bench") if args.get(1).is_some_and(|a| a == "devices") => {
            setup::ensure_tools().and_then(|()| devices_bench::run())
        }
        Some("bench") if args.get(1).is_some_and(|a| a == "baseline") => setup::ensure_tools()
            .and_then(|()| baseline::run(args.get(2).is_some_and(|a| a == "--update"))),
        Some("bench") => setup::ensure_tools()
            .and_then(|()| bench::run(args.get(1).is_some_and(|a| a == "micro"))),
        Some("fuzz") => setup::ensure_tools().and_then(|()| fuzz::run(&args[1..])),
        Some("build") => match args.get(1) {
            Some(config) => setup::ensure_tools().and_then(|()| build(Path::new(config))),
            None => Err(USAGE.into()),
        },
        _ => Err(USAGE.into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
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
    fn check(&mut self, name: &str, command: &mut Command) {
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
/// (for working on one).
fn test(filter: Option<&str>) -> ExitCode {
    let mut tally = Tally::default();
    if let Err(message) = setup::ensure_tools() {
        eprintln!("error: {message}");
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
    step("module layers of hypervisor/src (xtask/src/layers.rs)");
    tally.outcome("module layers", layers::check_workspace());
    step("module cycles of core/src (xtask/src/layers.rs)");
    tally.outcome("core module cycles", layers::check_core_workspace());
    step("host tests: cargo test");
    let output = Command::new(&cargo)
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
    let chosen = scenarios::all()
        .into_iter()
        .filter(|scenario| filter.is_none_or(|text| scenario.name.contains(text)));
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
