//! The command line, `cargo xtask <command>`, declared for clap: its commands, their options
//! and the help text of each (`cargo xtask --help`, `cargo xtask <command> --help`).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Keel's host tools: build a configuration into an image and boot it in QEMU, run every test,
/// print the benchmarks.
#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build CONFIG and boot it in QEMU, the console on this terminal (Ctrl-A then 0-9 focuses
    /// a VM, n the next VM, x powers off)
    Run {
        /// The configuration [default: configs/demo.toml, or the board's own demo,
        /// configs/boards/<BOARD>-demo.toml, if it has one]
        config: Option<PathBuf>,
        /// The board to run it on: qemu-virt (the default), qemu-virt-gicv2 or zcu102; a
        /// configuration written for another board is moved there (its RAM, its regions)
        #[arg(long, value_name = "BOARD")]
        board: Option<String>,
    },
    /// Run every test: the standards checks, the host unit tests, the book's checks, then the QEMU
    /// scenarios; ends with `N passed, N failed`
    Test(TestArgs),
    /// Print the micro-benchmarks (instructions, QEMU icount), Keel vs native, then the Linux
    /// benchmarks (native, Keel, Xen); or one set of benchmarks
    Bench(BenchArgs),
    /// Run the core's fuzz targets (all, or TARGET) SECONDS each, or replay one saved input
    Fuzz(FuzzArgs),
    /// Compile CONFIG and build its image under target/keel/<name>/keel.bin
    Build {
        /// The configuration (a TOML file)
        config: PathBuf,
    },
    /// Boot CONFIG with Keel's trace on under icount for N seconds of virtual time (or until it
    /// powers off) and write
    /// target/keel/trace/<config>.json (Chrome trace events, for ui.perfetto.dev) and its plots
    Trace {
        /// The configuration (a TOML file); without its own `[system] trace`, 4 MiB rings
        config: PathBuf,
        /// Seconds of virtual time to trace
        #[arg(long, value_name = "N", default_value_t = 2.0, value_parser = positive_seconds)]
        seconds: f64,
    },
    /// The long runs outside the test command, under icount (virtual time), each with its
    /// figures: a bare-metal VM restarted by a manager, Debian Linux restarted by one, both
    /// beside a 1 kHz real-time partition; Linux under stress-ng beside the sample partition
    Soak(SoakArgs),
    /// Build the book (docs/, mdBook) into target/book/
    Docs,
}

#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Restarts of the bare-metal VM
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub restarts: u64,
    /// Restarts of Debian Linux, each once its shell answers
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub linux_restarts: u64,
    /// Minutes (virtual time) of stress-ng in Linux beside the sample partition
    #[arg(long, value_name = "M", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub minutes: u64,
    /// Run only this part
    #[arg(long, value_enum, value_name = "PART")]
    pub only: Option<SoakPart>,
    /// Virtual nanoseconds per instruction as a power of two (QEMU's `-icount shift`): 0 is a
    /// 1 GHz core; 2 a 250 MHz one, whose hour of stress-ng takes a quarter of the host's time
    #[arg(long, value_name = "S", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=4))]
    pub shift: u8,
}

/// A part of the soak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SoakPart {
    /// The bare-metal VM's restarts
    BareMetal,
    /// Debian Linux's restarts
    Linux,
    /// Linux under stress-ng beside the sample partition
    Stress,
}

/// A number of seconds above 0.
fn positive_seconds(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && seconds.is_finite() => Ok(seconds),
        _ => Err(format!("'{text}' is not a number of seconds above 0")),
    }
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// Run only the book's checks and the scenarios whose name contains TEXT (the standards
    /// checks run, and the host tests are built but not run)
    #[arg(value_name = "TEXT")]
    pub filter: Option<String>,
    /// Print the names of the scenarios (those TEXT selects), one per line, and run nothing
    #[arg(long)]
    pub list: bool,
    /// How many scenarios run at once (each a QEMU, single-threaded under icount)
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: u32,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub which: Option<Bench>,
}

#[derive(Debug, Subcommand)]
pub enum Bench {
    /// The micro-benchmarks alone (instructions, QEMU icount), Keel vs native
    Micro,
    /// The shared-pCPU benchmarks: vCPU switch cost, lazy FP, the M5150 overhead table
    Sched {
        /// Without the Linux boots
        #[arg(long)]
        no_linux: bool,
    },
    /// Real-time task services, the sample partition's jitter, masked stretches, lateness
    /// through resets
    Tasks {
        /// Only the masked stretches of a Linux restart by its watchdog
        #[arg(long)]
        restart_only: bool,
    },
    /// A passthrough interrupt (QEMU's edu behind the SMMU): native, Keel pinned, Keel shared
    Devices,
    /// Interference through the shared last-level cache (the project's LLC model under QEMU):
    /// a real-time partition's walk alone, beside VMs without colours, and with disjoint colours
    Llc {
        /// Without the Debian Linux neighbour
        #[arg(long)]
        no_linux: bool,
    },
    /// Boot CONFIG under icount until QEMU ends (or a console line matches REGEX) and print each
    /// pCPU's longest stretch with interrupts masked at EL2
    Masked {
        /// The configuration (a TOML file)
        config: PathBuf,
        /// Stop at the first console line that matches this regular expression
        #[arg(value_name = "REGEX", allow_hyphen_values = true)]
        until: Option<String>,
        /// Show each stretch function by function
        #[arg(long)]
        path: bool,
    },
    /// Messages between VMs: send, receive and delivery of 20-100 byte messages, beside the
    /// M5150 paper
    Messages,
    /// Debian's kernel with its root on virtio-blk-pci and virtio-net-pci on QEMU's user
    /// network, natively, in a Keel VM given the PCI bridge behind the SMMU, and under Xen: a
    /// 64 MiB dd of the disk, a 50 MB HTTP fetch and the image-saving benchmark, timed
    Rootfs,
    /// Pipe and UNIX-socket bandwidth of 1-4 Linux VMs at once (own pCPUs, then one shared),
    /// beside the Xen on ARM paper
    Vms,
    /// The figures the test command holds, with Keel's trace off and on (256 KiB rings)
    Trace,
    /// The 1 kHz victim's worst tick lateness on its pinned pCPU alone, beside a VM printing
    /// flat out, a manager storming its VM's restarts, and both; under icount and in real
    /// time, with what Keel's trace shows
    Console {
        /// Only the cases whose configuration's name contains this (alone, printer, storm, both)
        #[arg(value_name = "CASE")]
        only: Option<String>,
    },
    /// The figures the test command holds (xtask/baseline.toml) beside their baseline
    Baseline {
        /// Write the figures measured as the new baseline
        #[arg(long)]
        update: bool,
    },
}

#[derive(Debug, Args)]
pub struct FuzzArgs {
    /// The one target to run [default: all]; a number here is taken as SECONDS (`fuzz 60` runs
    /// every target 60 s)
    pub target: Option<String>,
    /// Seconds per target [default: 10]
    pub seconds: Option<u64>,
    /// Run this saved input through the target (every target without TARGET) instead of fuzzing
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
}

/// Seconds each fuzz target runs when the command line does not say.
const FUZZ_SECONDS: u64 = 10;

impl FuzzArgs {
    /// The target named (None: all) and the seconds per target, a lone number being SECONDS.
    pub fn target_and_seconds(&self) -> (Option<&str>, u64) {
        match (self.target.as_deref(), self.seconds) {
            (Some(target), None) => match target.parse() {
                Ok(seconds) => (None, seconds),
                Err(_) => (Some(target), FUZZ_SECONDS),
            },
            (target, seconds) => (target, seconds.unwrap_or(FUZZ_SECONDS)),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(line: &[&str]) -> Result<Cli, String> {
        Cli::try_parse_from(std::iter::once("xtask").chain(line.iter().copied()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_declaration_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn test_takes_a_filter_list_and_jobs() {
        let Command::Test(args) = parse(&["test"]).unwrap().command else {
            panic!("not test")
        };
        assert_eq!((args.filter, args.list, args.jobs), (None, false, 2));
        let Command::Test(args) = parse(&["test", "rootfs:", "--list", "--jobs", "3"])
            .unwrap()
            .command
        else {
            panic!("not test")
        };
        assert_eq!(
            (args.filter.as_deref(), args.list, args.jobs),
            (Some("rootfs:"), true, 3)
        );
        let error = parse(&["test", "--jobs", "0"]).unwrap_err();
        assert!(error.contains("'--jobs <N>'"), "{error}");
        let error = parse(&["test", "--job", "2"]).unwrap_err();
        assert!(error.contains("unexpected argument '--job'"), "{error}");
    }

    #[test]
    fn bench_alone_or_one_set_with_its_options() {
        let Command::Bench(args) = parse(&["bench"]).unwrap().command else {
            panic!("not bench")
        };
        assert!(args.which.is_none());
        let Command::Bench(args) =
            parse(&["bench", "masked", "c.toml", "--path", "^\\[rt\\] tick"])
                .unwrap()
                .command
        else {
            panic!("not bench")
        };
        let Some(Bench::Masked {
            config,
            until,
            path,
        }) = args.which
        else {
            panic!("not masked")
        };
        assert_eq!(config, PathBuf::from("c.toml"));
        assert_eq!(until.as_deref(), Some("^\\[rt\\] tick"));
        assert!(path);
        let error = parse(&["bench", "masked"]).unwrap_err();
        assert!(error.contains("<CONFIG>"), "{error}");
        let error = parse(&["bench", "sched", "--no-linx"]).unwrap_err();
        assert!(error.contains("'--no-linx'"), "{error}");
        let error = parse(&["bench", "scheduling"]).unwrap_err();
        assert!(error.contains("'scheduling'"), "{error}");
    }

    #[test]
    fn fuzz_target_seconds_and_replay() {
        let fuzz = |line: &[&str]| match parse(line).unwrap().command {
            Command::Fuzz(args) => args,
            other => panic!("not fuzz: {other:?}"),
        };
        let args = fuzz(&["fuzz"]);
        assert_eq!(args.target_and_seconds(), (None, 10));
        let args = fuzz(&["fuzz", "60"]);
        assert_eq!(args.target_and_seconds(), (None, 60));
        let args = fuzz(&["fuzz", "device-tree", "300"]);
        assert_eq!(args.target_and_seconds(), (Some("device-tree"), 300));
        let args = fuzz(&["fuzz", "esr", "--replay", "crash-1"]);
        assert_eq!(args.replay, Some(PathBuf::from("crash-1")));
        let error = parse(&["fuzz", "esr", "ten"]).unwrap_err();
        assert!(
            error.contains("'ten'") && error.contains("[SECONDS]"),
            "{error}"
        );
    }

    #[test]
    fn trace_takes_a_configuration_and_seconds_above_0() {
        let Command::Trace { config, seconds } = parse(&["trace", "g.toml"]).unwrap().command
        else {
            panic!("not trace")
        };
        assert_eq!((config, seconds), (PathBuf::from("g.toml"), 2.0));
        let Command::Trace { seconds, .. } = parse(&["trace", "g.toml", "--seconds", "0.5"])
            .unwrap()
            .command
        else {
            panic!("not trace")
        };
        assert_eq!(seconds, 0.5);
        for bad in ["0", "soon", "inf"] {
            let error = parse(&["trace", "g.toml", "--seconds", bad]).unwrap_err();
            assert!(
                error.contains(&format!("invalid value '{bad}' for '--seconds <N>'")),
                "{error}"
            );
        }
    }

    #[test]
    fn soak_takes_counts_minutes_and_one_part() {
        let soak = |line: &[&str]| match parse(line).unwrap().command {
            Command::Soak(args) => args,
            other => panic!("not soak: {other:?}"),
        };
        let args = soak(&["soak"]);
        assert_eq!(
            (args.restarts, args.linux_restarts, args.minutes, args.only),
            (1000, 100, 60, None)
        );
        let args = soak(&[
            "soak",
            "--restarts",
            "50",
            "--linux-restarts",
            "5",
            "--minutes",
            "5",
            "--only",
            "bare-metal",
        ]);
        assert_eq!(
            (args.restarts, args.linux_restarts, args.minutes, args.only),
            (50, 5, 5, Some(SoakPart::BareMetal))
        );
        let error = parse(&["soak", "--minutes", "0"]).unwrap_err();
        assert!(error.contains("'--minutes <M>'"), "{error}");
        let error = parse(&["soak", "--only", "xen"]).unwrap_err();
        assert!(error.contains("'xen'"), "{error}");
    }

    #[test]
    fn build_needs_a_configuration_and_unknown_commands_are_named() {
        let error = parse(&["build"]).unwrap_err();
        assert!(error.contains("<CONFIG>"), "{error}");
        let error = parse(&["tset"]).unwrap_err();
        assert!(error.contains("unrecognized subcommand 'tset'"), "{error}");
    }
}
