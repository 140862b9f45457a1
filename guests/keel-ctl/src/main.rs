//! `keel`: Keel's management window from Linux's shell (see the library, `keel_ctl`, for the
//! commands and their output). This file maps the window: it finds the window's node in the
//! device tree, maps its page of `/dev/mem` and makes each call with 64-bit loads and stores.

use std::path::Path;
use std::process::ExitCode;

use keel_ctl::command::{self, Command};
use keel_ctl::{devicetree, EXIT_FAILED, EXIT_NO_WINDOW, EXIT_USAGE};

mod devmem;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match command::parse(&args) {
        Ok(command) => command,
        Err(error) => {
            eprintln!("keel: {error}");
            eprint!("{}", command::USAGE);
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if command == Command::Help {
        print!("{}", command::USAGE);
        return ExitCode::SUCCESS;
    }
    let node = match devicetree::find(Path::new(devicetree::TREE)) {
        Ok(node) => node,
        Err(error) => {
            eprintln!("keel: {error}");
            return ExitCode::from(EXIT_NO_WINDOW);
        }
    };
    let mut window = match devmem::DevMem::map(node.base, node.size) {
        Ok(window) => window,
        Err(error) => {
            eprintln!("keel: {error}");
            return ExitCode::from(EXIT_NO_WINDOW);
        }
    };
    let mut stdout = std::io::stdout().lock();
    match keel_ctl::run(&command, &node.managed, &mut window, &mut stdout) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("keel: {failure}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}
