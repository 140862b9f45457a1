//! Micro-benchmarks in instructions: the test guest's `bench` mode under Keel and natively
//! on the same QEMU, both with `-icount shift=0,sleep=off` (one instruction per nanosecond,
//! PMCCNTR_EL0 counting every instruction, at EL2 too).

use std::collections::BTreeMap;
use std::time::Duration;

use regex::Regex;

use crate::image::{build_guests, build_system, guest_image, output_dir};
use crate::qemu::Machine;
use crate::{workspace, Result};

type Figures = BTreeMap<String, (u64, u64, u64)>;

fn parse(lines: &[String], prefix: &str) -> Result<Figures> {
    let regex = Regex::new(r"bench: (\S+) min=(\d+) avg=(\d+) max=(\d+)$").unwrap();
    let mut figures = Figures::new();
    let mut done = false;
    for line in lines {
        let Some(rest) = line.strip_prefix(prefix) else {
            continue;
        };
        if rest == "bench: done" {
            done = true;
        }
        if let Some(c) = regex.captures(rest) {
            figures.insert(
                c[1].to_string(),
                (
                    c[2].parse().unwrap(),
                    c[3].parse().unwrap(),
                    c[4].parse().unwrap(),
                ),
            );
        }
    }
    if !done {
        return Err(format!(
            "the benchmark guest did not finish (no 'bench: done'{})",
            if prefix.is_empty() { "" } else { " under Keel" }
        ));
    }
    Ok(figures)
}

/// Runs the benchmarks and prints the table.
pub fn run() -> Result<()> {
    build_guests()?;
    let keel = build_system(&workspace().join("configs/bench.toml"))?;
    let mut machine = Machine::keel(&keel.path, keel.system.pcpus);
    machine.icount = true;
    let under_keel = machine
        .spawn(&output_dir().join("logs/bench-keel.log"))?
        .finish(Duration::from_secs(300));
    let under_keel = parse(&under_keel.lines, "[bench] ")?;

    let native = Machine {
        kernel: guest_image("test-guest").unwrap(),
        cpus: 1,
        virtualization: false,
        icount: true,
        append: Some("keel.native keel.mode=bench".into()),
        dtb: None,
    };
    let native = native
        .spawn(&output_dir().join("logs/bench-native.log"))?
        .finish(Duration::from_secs(300));
    let native = parse(&native.lines, "")?;

    println!();
    println!("Keel micro-benchmarks: QEMU 'virt' cortex-a72, -icount shift=0,sleep=off; instructions, min / avg / max of each run");
    println!(
        "{:<28} {:>22} {:>22} {:>16}",
        "figure", "native EL1", "Keel VM", "Keel extra (avg)"
    );
    for (name, &(min, avg, max)) in &under_keel {
        let native_text = native
            .get(name)
            .map_or("n/a".to_string(), |(a, b, c)| format!("{a} / {b} / {c}"));
        let extra = native
            .get(name)
            .map_or(avg.to_string(), |&(_, native_avg, _)| {
                (avg as i64 - native_avg as i64).to_string()
            });
        println!(
            "{:<28} {:>22} {:>22} {:>16}",
            name,
            native_text,
            format!("{min} / {avg} / {max}"),
            extra
        );
    }
    let size = std::fs::metadata(&keel.path)
        .map_err(|e| e.to_string())?
        .len();
    let guest = std::fs::metadata(guest_image("test-guest").unwrap())
        .map_err(|e| e.to_string())?
        .len();
    println!(
        "{:<28} {:>22} {:>22}",
        "Keel image (bytes)",
        "-",
        format!("{} (+{guest} guest)", size - guest)
    );
    println!("icount does not model stage-2 walks or TLB misses: these are instruction counts, lower bounds on time.");
    Ok(())
}
