//! `cargo xtask`: Keel's host tools. `run` boots a configuration in QEMU, `test` runs every
//! test, `bench` prints the benchmarks, `fuzz` runs the core's fuzz targets, `build` compiles a
//! configuration into an image, `trace` traces a run, `soak` runs the long restart and
//! stress runs, `docs` builds the book. The command line
//! is declared in `cli.rs`.
#![forbid(unsafe_code)]

mod baseline;
mod bench;
mod build_lock;
mod cli;
mod console_bench;
mod debian;
mod devices_bench;
mod docs;
mod dtb;
mod exec_trace;
mod fuzz;
mod http;
mod image;
mod ipc_bench;
mod layers;
mod lines;
mod llc;
mod llc_bench;
mod plots;
mod process;
mod progress;
mod qemu;
mod scenarios;
mod sched_bench;
mod setup;
mod soak;
mod tasks_bench;
mod test_command;
mod trace;
mod vms_bench;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;

use cli::{Bench, Cli, Command};

/// Errors are messages for the user.
pub type Result<T> = std::result::Result<T, String>;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Announces a step (on stderr, above any progress bar).
pub fn step(what: &str) {
    progress::err(&format!("xtask: {what}"));
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run { config, board } => run(config, board.as_deref()),
        Command::Test(args) => return test_command::run(&args),
        Command::Bench(args) => setup::ensure_tools().and_then(|()| bench(args.which)),
        Command::Fuzz(args) => setup::ensure_tools().and_then(|()| {
            let (target, seconds) = args.target_and_seconds();
            fuzz::run(target, seconds, args.replay.as_deref())
        }),
        Command::Build { config } => setup::ensure_tools().and_then(|()| build(&config)),
        Command::Trace { config, seconds } => {
            setup::ensure_tools().and_then(|()| trace::command(&config, seconds).map(|_| ()))
        }
        Command::Soak(args) => setup::ensure_tools().and_then(|()| soak::run(&args)),
        Command::Docs => docs::build().map(|html| step(&format!("book: {}", html.display()))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            progress::err(&format!("error: {message}"));
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
        Some(Bench::Tasks { restart_only }) => tasks_bench::run(restart_only),
        Some(Bench::Devices) => devices_bench::run(),
        Some(Bench::Llc { no_linux }) => llc_bench::run(!no_linux),
        Some(Bench::Masked {
            config,
            until,
            path,
        }) => image::build_guests()
            .and_then(|()| tasks_bench::masked_stretches(&config, until.as_deref(), path)),
        Some(Bench::Messages) => ipc_bench::run_all(),
        Some(Bench::Rootfs) => scenarios::rootfs_bench(),
        Some(Bench::Vms) => vms_bench::run(),
        Some(Bench::Trace) => image::build_guests().and_then(|()| baseline::trace_cost()),
        Some(Bench::Baseline { update }) => baseline::run(update),
        Some(Bench::Console { only }) => console_bench::run(only.as_deref()),
    }
}

fn build(config: &Path) -> Result<()> {
    image::build_guests()?;
    image::build_system(config).map(|_| ())
}

fn run(config: Option<PathBuf>, board: Option<&str>) -> Result<()> {
    let board = match board {
        None => None,
        Some(name) => {
            let board = keel_core::board::board(name).ok_or_else(|| {
                let known: Vec<&str> = keel_core::board::BOARDS.iter().map(|b| b.name).collect();
                format!("unknown board '{name}' (Keel knows {})", known.join(", "))
            })?;
            if !board.emulated {
                return Err(format!(
                    "QEMU has no model of board {name}: `cargo xtask build` builds Keel for it"
                ));
            }
            Some(board)
        }
    };
    setup::ensure_tools()?;
    let board_demo =
        board.map(|b| workspace().join(format!("configs/boards/{}-demo.toml", b.name)));
    // The board's own demo is written for it; any other configuration is moved there.
    let (config, moved) = match (config, board_demo.filter(|path| path.is_file())) {
        (Some(config), _) => (config, board),
        (None, Some(own)) => (own, None),
        (None, None) => (workspace().join("configs/demo.toml"), board),
    };
    image::build_guests()?;
    let image = match moved {
        Some(board) => image::with_board(board, || image::build_system(&config))?,
        None => image::build_system(&config)?,
    };
    let machine = image::machine(&image, false)?;
    // A network card: a file to fetch from the host, as the README's demo lines do.
    let server = if machine.user_network {
        let (server, line) = http::demo_file()?;
        step(&line);
        Some(server)
    } else {
        None
    };
    step("booting in QEMU: Ctrl-A then 0-9 focuses a VM's console, n the next one, x powers off");
    let outcome = machine.run_interactive();
    drop(server);
    outcome
}
