//! `cargo xtask fuzz [TARGET] [SECONDS]`: runs the core's fuzz targets (`keel_core::fuzz`) on
//! mutated inputs for a given time each, on the stable toolchain, and reports executions and
//! crashes. A crashing input is saved under `target/keel/fuzz/crashes/` before the process
//! aborts; replay it with `cargo xtask fuzz TARGET --replay FILE` and make it a regression test.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use keel_core::fuzz::{self, Target, TARGETS};

use crate::image::output_dir;
use crate::qemu::Machine;
use crate::{step, workspace, Result};

/// The input running now, saved by the panic hook if the target panics.
static CURRENT: Mutex<(Vec<u8>, &str)> = Mutex::new((Vec::new(), ""));

fn fuzz_dir() -> PathBuf {
    output_dir().join("fuzz")
}

/// The seeds the core does not carry: QEMU virt's own device tree (what Keel parses at boot)
/// and the configuration fixtures.
fn external_seeds() -> Result<(Vec<u8>, Vec<Vec<u8>>)> {
    let dtb = fuzz_dir().join("virt.dtb");
    if !dtb.exists() {
        std::fs::create_dir_all(fuzz_dir()).map_err(|e| e.to_string())?;
        Machine::keel(&workspace().join("README.md"), 4).dump_device_tree(&dtb)?;
    }
    let device_tree = std::fs::read(&dtb).map_err(|e| format!("{}: {e}", dtb.display()))?;
    let fixtures = workspace().join("core/tests/fixtures");
    let mut configs = Vec::new();
    for entry in std::fs::read_dir(&fixtures).map_err(|e| format!("{}: {e}", fixtures.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "toml") {
            configs.push(std::fs::read(&path).map_err(|e| e.to_string())?);
        }
    }
    Ok((device_tree, configs))
}

fn install_crash_saver() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if let Ok(current) = CURRENT.try_lock() {
            let (input, target) = &*current;
            let dir = fuzz_dir().join("crashes");
            let _ = std::fs::create_dir_all(&dir);
            let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
            let path = dir.join(format!("{target}-{hash:016x}"));
            let _ = std::fs::write(&path, input);
            eprintln!(
                "xtask fuzz: {target} crashed; input saved to {}",
                path.display()
            );
        }
        default(info);
    }));
}

/// Runs the chosen targets (all if `name` is None) for `seconds` each, or replays the input in
/// file `replay` through them.
pub fn run(name: Option<&str>, seconds: u64, replay: Option<&Path>) -> Result<()> {
    let targets: Vec<&Target> = TARGETS
        .iter()
        .filter(|t| name.is_none_or(|n| t.name == n))
        .collect();
    if targets.is_empty() {
        let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
        return Err(format!(
            "no fuzz target '{}': the targets are {}",
            name.unwrap_or_default(),
            names.join(", ")
        ));
    }
    if let Some(file) = replay {
        let input = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
        for target in &targets {
            (target.run)(&input);
        }
        step("the input ran without a crash");
        return Ok(());
    }
    let (device_tree, configs) = external_seeds()?;
    install_crash_saver();
    println!(
        "{:<14} {:>14} {:>10} {:>8}",
        "target", "executions", "per second", "crashes"
    );
    for target in targets {
        let seeds = fuzz::seeds(target.name, &device_tree, &configs);
        let started = Instant::now();
        let deadline = started + Duration::from_secs(seconds);
        let rng_seed = started.elapsed().as_nanos() as u64 ^ std::process::id() as u64;
        let executions = fuzz::fuzz(
            target,
            &seeds,
            rng_seed,
            // Look at the clock every 1024 runs only.
            |n| n % 1024 != 0 || Instant::now() < deadline,
            |input| {
                let mut current = CURRENT.lock().unwrap();
                current.0.clear();
                current.0.extend_from_slice(input);
                current.1 = target.name;
            },
        );
        let rate = executions as f64 / started.elapsed().as_secs_f64();
        // A crash aborts the process (the hook above saves the input first), so reaching
        // here means none.
        println!("{:<14} {executions:>14} {rate:>10.0} {:>8}", target.name, 0);
    }
    Ok(())
}
