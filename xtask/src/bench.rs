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
        initrd: None,
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
    linux()
}

/// What one Linux run of the initramfs's `bench` test measured.
#[derive(Default)]
struct LinuxFigures {
    /// Kernel uptime when the first step began (seconds): the boot to /init and its set-up.
    boot: f64,
    /// Duration of each step, by name, from its BEGIN/END markers (seconds, 10 ms resolution).
    steps: BTreeMap<String, f64>,
    /// cyclictest min/avg/max (µs) after each cyclictest step, by step name.
    latencies: BTreeMap<String, [u64; 3]>,
}

fn parse_linux(lines: &[String], prefix: &str) -> Result<LinuxFigures> {
    let step = Regex::new(r"^KEEL-STEP (\S+) (BEGIN|END) ([\d.]+)").unwrap();
    let latency = Regex::new(r"^# (Min|Avg|Max) Latencies: (\d+)").unwrap();
    let mut figures = LinuxFigures::default();
    let mut begun: BTreeMap<String, f64> = BTreeMap::new();
    let mut last_step = String::new();
    let mut done = false;
    for line in lines {
        let Some(text) = line.strip_prefix(prefix) else {
            continue;
        };
        if text.starts_with("KEEL-INIT-END status=0") {
            done = true;
        }
        if let Some(c) = step.captures(text) {
            let (name, time) = (c[1].to_string(), c[3].parse::<f64>().unwrap_or(0.0));
            if &c[2] == "BEGIN" {
                if begun.is_empty() {
                    figures.boot = time;
                }
                begun.insert(name.clone(), time);
            } else if let Some(start) = begun.get(&name) {
                figures.steps.insert(name.clone(), time - start);
            }
            last_step = name;
        } else if let Some(c) = latency.captures(text) {
            let slot = match &c[1] {
                "Min" => 0,
                "Avg" => 1,
                _ => 2,
            };
            figures.latencies.entry(last_step.clone()).or_default()[slot] =
                c[2].parse().unwrap_or(0);
        }
    }
    if !done {
        return Err(format!(
            "the Linux benchmark did not finish{}",
            if prefix.is_empty() { "" } else { " under Keel" }
        ));
    }
    Ok(figures)
}

/// Debian's cloud kernel and initramfs running BENCHMARKING.md's commands, natively and under
/// Keel on the same QEMU (`-icount shift=0,sleep=off`, one CPU for the guest).
fn linux() -> Result<()> {
    let keel = build_system(&workspace().join("configs/bench-linux.toml"))?;
    let vm = &keel.system.vms[0];
    let initrd = vm
        .initrd
        .as_ref()
        .ok_or("configs/bench-linux.toml has no initrd")?;
    let native = Machine {
        kernel: vm.image_path.clone(),
        cpus: 1,
        virtualization: false,
        icount: true,
        append: Some(vm.cmdline.clone()),
        dtb: None,
        initrd: Some(initrd.path.clone()),
    };
    let native = native
        .spawn(&output_dir().join("logs/bench-linux-native.log"))?
        .finish(Duration::from_secs(900));
    let native = parse_linux(&native.lines, "")?;
    let mut machine = Machine::keel(&keel.path, keel.system.pcpus);
    machine.icount = true;
    let under_keel = machine
        .spawn(&output_dir().join("logs/bench-linux-keel.log"))?
        .finish(Duration::from_secs(900));
    let keel_start = Regex::new(r"^\[keel\] vm 'linux' \(id 0\) starts at ([\d.]+) s$").unwrap();
    let before_guest = under_keel
        .lines
        .iter()
        .find_map(|line| keel_start.captures(line)?[1].parse::<f64>().ok())
        .ok_or("Keel did not say when the Linux VM started")?;
    let mut under_keel = parse_linux(&under_keel.lines, "[linux] ")?;
    // The kernel's uptime starts with the kernel: add the time Keel took before it.
    under_keel.boot += before_guest;

    println!();
    println!("Debian 6.1 cloud kernel + initramfs, 1 CPU, -icount shift=0,sleep=off (seconds of virtual time, 10 ms resolution)");
    println!(
        "{:<34} {:>12} {:>12} {:>12}",
        "measure", "native", "Keel", "Keel/native"
    );
    let row = |name: &str, native: f64, keel: f64| {
        let ratio = if native > 0.0 {
            format!("{:.3}", keel / native)
        } else {
            "-".into()
        };
        println!("{name:<34} {native:>12.2} {keel:>12.2} {ratio:>12}");
    };
    row(
        "power-on to /init's first step",
        native.boot,
        under_keel.boot,
    );
    for (name, &seconds) in &native.steps {
        if !native.latencies.contains_key(name) {
            row(
                name,
                seconds,
                under_keel.steps.get(name).copied().unwrap_or(0.0),
            );
        }
    }
    for (name, [min, avg, max]) in &native.latencies {
        let keel = under_keel.latencies.get(name).copied().unwrap_or_default();
        println!(
            "{:<34} {:>12} {:>12} {:>12}",
            format!("{name} min/avg/max (µs)"),
            format!("{min}/{avg}/{max}"),
            format!("{}/{}/{}", keel[0], keel[1], keel[2]),
            if *avg > 0 {
                format!("avg {:.2}", keel[1] as f64 / *avg as f64)
            } else {
                "-".into()
            }
        );
    }
    println!("Boot: the kernel's uptime at /init's first step, plus under Keel the time from power-on to the VM's first instruction (Keel's own line); natively QEMU starts the kernel at power-on.");
    Ok(())
}
