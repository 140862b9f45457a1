//! Micro-benchmarks in instructions: the test guest's `bench` mode under Keel and natively
//! on the same QEMU, both with `-icount shift=0,sleep=off` (one instruction per nanosecond,
//! PMCCNTR_EL0 counting every instruction, at EL2 too).

use std::collections::BTreeMap;
use std::time::Duration;

use regex::Regex;

use crate::image::{build_guests, build_system, guest_image, output_dir};
use crate::qemu::Machine;
use crate::{workspace, Result};

pub(crate) type Figures = BTreeMap<String, (u64, u64, u64)>;

pub(crate) fn parse(lines: &[String], prefix: &str) -> Result<Figures> {
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

/// The micro-benchmarks under Keel (`configs/bench.toml`, the guests built): each figure's
/// `(min, avg, max)` instructions, and the size of Keel's image with its guest (bytes).
pub(crate) fn under_keel() -> Result<(Figures, u64)> {
    let keel = build_system(&workspace().join("configs/bench.toml"))?;
    let ended = Machine::keel_icount(&keel)
        .spawn(&output_dir().join(format!("logs/{}-keel.log", keel.system.name)))?
        .finish(Duration::from_secs(300));
    let figures = parse(&ended.lines, "[bench] ")?;
    let size = std::fs::metadata(&keel.path)
        .map_err(|e| format!("{}: {e}", keel.path.display()))?
        .len();
    Ok((figures, size))
}

/// Runs the micro-benchmarks, then (unless `micro_only`) the Linux benchmarks.
pub fn run(micro_only: bool) -> Result<()> {
    build_guests()?;
    let (under_keel, size) = under_keel()?;

    let native = Machine {
        board: &keel_core::board::QEMU_VIRT,
        kernel: guest_image("test-guest").unwrap(),
        cpus: 1,
        cpu: crate::qemu::REFERENCE_CPU,
        virtualization: false,
        icount: true,
        icount_sleep: false,
        icount_shift: 0,
        append: Some("keel.native keel.mode=bench".into()),
        dtb: None,
        initrd: None,
        modules: Vec::new(),
        exec_log: None,
        iommu: false,
        disk: None,
        user_network: false,
        edu: false,
        edu_behind_root_port: false,
        qmp: None,
        no_shutdown: false,
        llc: None,
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
    let guest = std::fs::metadata(guest_image("test-guest").unwrap())
        .map_err(|e| e.to_string())?
        .len();
    println!(
        "{:<28} {:>22} {:>22}",
        "Keel image (bytes)",
        "-",
        format!("{} (+{guest} guest)", size - guest)
    );
    for name in crate::baseline::OTHER_BOARDS {
        let board = keel_core::board::board(name).ok_or("an unknown board")?;
        let (figures, size) = crate::image::with_board(board, crate::bench::under_keel)?;
        println!();
        println!(
            "Keel micro-benchmarks on board {name} ({}, {}; the bench system moved there), -icount shift=0,sleep=off; instructions, min / avg / max",
            board.gic.name(),
            board.uart.name()
        );
        println!("{:<28} {:>22}", "figure", "Keel VM");
        for (figure, &(min, avg, max)) in &figures {
            println!("{figure:<28} {:>22}", format!("{min} / {avg} / {max}"));
        }
        println!(
            "{:<28} {:>22}",
            "Keel image (bytes)",
            format!("{} (+{guest} guest)", size - guest)
        );
    }
    println!("icount does not model stage-2 walks or TLB misses: these are instruction counts, lower bounds on time.");
    if micro_only {
        return Ok(());
    }
    linux()
}

/// What one Linux run of the initramfs's `bench` test measured.
#[derive(Default)]
pub(crate) struct LinuxFigures {
    /// Kernel uptime when the first step began (seconds): the boot to /init and its set-up.
    boot: f64,
    /// Duration of each step, by name, from its BEGIN/END markers (seconds, 10 ms resolution).
    steps: BTreeMap<String, f64>,
    /// cyclictest min/avg/max (µs) after each cyclictest step, by step name.
    latencies: BTreeMap<String, [u64; 3]>,
    /// keel-lat's figures (`guests/linux-lat/lat.c`), by its name: a latency in nanoseconds
    /// per operation, or a bandwidth in bytes per second.
    pub(crate) lmbench: BTreeMap<String, Lmbench>,
}

/// One keel-lat figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Lmbench {
    /// Nanoseconds per operation.
    Latency(u64),
    /// Bytes per second.
    Bandwidth(u64),
}

impl Lmbench {
    /// In the paper's units: µs for a latency, MB/s for a bandwidth.
    pub(crate) fn in_paper_units(self) -> f64 {
        match self {
            Lmbench::Latency(ns) => ns as f64 / 1e3,
            Lmbench::Bandwidth(bytes) => bytes as f64 / 1e6,
        }
    }
}

/// The Xen on ARM paper's table I (../shared/seeds/002_*: lmbench on an ARM926 at 266 MHz,
/// native and paravirtualized Linux 2.6): keel-lat's name, the paper's row, native, Xen on ARM.
const PAPER_TABLE_I: [(&str, &str, f64, f64); 11] = [
    ("null-syscall", "null syscall (µs)", 1.13, 2.83),
    ("read-syscall", "read syscall (µs)", 2.60, 4.94),
    ("write-syscall", "write syscall (µs)", 2.25, 4.16),
    ("pipe", "lat_pipe (µs)", 135.13, 234.42),
    ("unix-socket", "lat_unix (µs)", 251.41, 431.85),
    ("sysv-semaphore", "SysV semaphore (µs)", 45.974, 81.42),
    ("signal-handler", "signal handler (µs)", 11.23, 20.43),
    ("fork+exit", "fork+exit (µs)", 2891.75, 10021.0),
    ("fork+execve", "fork+execve (µs)", 3109.25, 10524.0),
    ("bw:pipe", "bw_pipe (MB/s)", 42.79, 38.21),
    ("bw:unix-socket", "bw_unix (MB/s)", 44.52, 39.18),
];

/// The figures of one Linux run, read from the console lines that begin with `prefix`; `run`
/// says which run it was in the error ("natively", "under Keel", "under Xen").
pub(crate) fn parse_linux(lines: &[String], prefix: &str, run: &str) -> Result<LinuxFigures> {
    let step = Regex::new(r"^KEEL-STEP (\S+) (BEGIN|END) ([\d.]+)").unwrap();
    let latency = Regex::new(r"^# (Min|Avg|Max) Latencies: (\d+)").unwrap();
    let lmbench = Regex::new(r"^KEEL-(LAT|BW) (\S+) (\d+)$").unwrap();
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
        } else if let Some(c) = lmbench.captures(text) {
            let value = c[3].parse().unwrap_or(0);
            let (name, figure) = if &c[1] == "LAT" {
                (c[2].to_string(), Lmbench::Latency(value))
            } else {
                (format!("bw:{}", &c[2]), Lmbench::Bandwidth(value))
            };
            figures.lmbench.insert(name, figure);
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
        let last = lines
            .iter()
            .rev()
            .find(|line| !line.trim().is_empty())
            .map_or("none".to_string(), |line| format!("{line:?}"));
        return Err(format!(
            "the Linux benchmark did not finish {run} (no 'KEEL-INIT-END status=0'; last console line: {last})"
        ));
    }
    Ok(figures)
}

/// Debian's cloud kernel and initramfs running BENCHMARKING.md's commands natively, under Keel
/// and as dom0 of Debian's Xen 4.17, on the same QEMU (`-icount shift=0,sleep=off`, one CPU for
/// the guest). A failed Xen run is reported under the table, which keeps its other columns.
fn linux() -> Result<()> {
    let keel = build_system(&workspace().join("configs/bench-linux.toml"))?;
    let vm = &keel.system.vms[0];
    let initrd = vm
        .initrd
        .as_ref()
        .ok_or("configs/bench-linux.toml has no initrd")?;
    let native = Machine::native_linux(&vm.image_path, 1, &vm.cmdline, &initrd.path);
    let native = native
        .spawn(&output_dir().join("logs/bench-linux-native.log"))?
        .finish(Duration::from_secs(900));
    let native = parse_linux(&native.lines, "", "natively")?;
    let under_keel = Machine::keel_icount(&keel)
        .spawn(&output_dir().join("logs/bench-linux-keel.log"))?
        .finish(Duration::from_secs(900));
    let keel_start = Regex::new(r"^\[keel\] vm 'linux' \(id 0\) starts at ([\d.]+) s$").unwrap();
    let before_guest = under_keel
        .lines
        .iter()
        .find_map(|line| keel_start.captures(line)?[1].parse::<f64>().ok())
        .ok_or("Keel did not say when the Linux VM started")?;
    let mut under_keel = parse_linux(&under_keel.lines, "[linux] ", "under Keel")?;
    // The kernel's uptime starts with the kernel: add the time Keel took before it.
    under_keel.boot += before_guest;
    let under_xen = linux_under_xen(vm.size, &vm.image_path, &initrd.path, &vm.cmdline);

    println!();
    println!("Debian 6.1 cloud kernel + initramfs, 1 CPU, -icount shift=0,sleep=off (seconds of virtual time, 10 ms resolution)");
    println!("Xen: Debian's Xen 4.17 (default settings), the same kernel and initramfs as dom0");
    println!(
        "{:<34} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "measure", "native", "Keel", "Xen", "Keel/native", "Xen/native"
    );
    let xen = under_xen.as_ref().ok();
    let ratio = |native: f64, other: f64| {
        if native > 0.0 {
            format!("{:.3}", other / native)
        } else {
            "-".into()
        }
    };
    let row = |name: &str, native: f64, keel: f64, xen: Option<f64>| {
        println!(
            "{name:<34} {native:>12.2} {keel:>12.2} {:>12} {:>12} {:>12}",
            xen.map_or("-".into(), |xen| format!("{xen:.2}")),
            ratio(native, keel),
            xen.map_or("-".into(), |xen| ratio(native, xen)),
        );
    };
    row(
        "power-on to /init's first step",
        native.boot,
        under_keel.boot,
        xen.map(|xen| xen.boot),
    );
    for (name, &seconds) in &native.steps {
        if !native.latencies.contains_key(name) {
            row(
                name,
                seconds,
                under_keel.steps.get(name).copied().unwrap_or(0.0),
                xen.map(|xen| xen.steps.get(name).copied().unwrap_or(0.0)),
            );
        }
    }
    let latency = |figures: [u64; 3]| format!("{}/{}/{}", figures[0], figures[1], figures[2]);
    let avg_ratio = |native: u64, other: u64| {
        if native > 0 {
            format!("avg {:.2}", other as f64 / native as f64)
        } else {
            "-".into()
        }
    };
    for (name, &figures) in &native.latencies {
        let keel = under_keel.latencies.get(name).copied().unwrap_or_default();
        let xen = xen.map(|xen| xen.latencies.get(name).copied().unwrap_or_default());
        println!(
            "{:<34} {:>12} {:>12} {:>12} {:>12} {:>12}",
            format!("{name} min/avg/max (µs)"),
            latency(figures),
            latency(keel),
            xen.map_or("-".into(), latency),
            avg_ratio(figures[1], keel[1]),
            xen.map_or("-".into(), |xen| avg_ratio(figures[1], xen[1])),
        );
    }
    lmbench_table(&native, &under_keel, xen);
    println!("Boot: the kernel's uptime at /init's first step, plus the hypervisor's time from power-on to starting the guest (Keel: its 'starts at' line; Xen: its timestamp when it frees its init memory, just before dom0 runs); natively QEMU starts the kernel at power-on.");
    if let Err(error) = under_xen {
        println!("Xen run FAILED, so its columns are empty: {error}");
    }
    Ok(())
}

/// keel-lat's figures natively, under Keel and under Xen, beside the paper's table I.
fn lmbench_table(native: &LinuxFigures, keel: &LinuxFigures, xen: Option<&LinuxFigures>) {
    println!();
    println!("lmbench-style (keel-lat, guests/linux-lat/lat.c), the guest's own clock; beside the Xen on ARM paper's table I (ARM926, 266 MHz)");
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>8} {:>8} {:>10} {:>10} {:>8}",
        "measure",
        "native",
        "Keel",
        "Xen",
        "Keel/nat",
        "Xen/nat",
        "paper nat",
        "paper Xen",
        "ratio"
    );
    for (name, row, paper_native, paper_xen) in PAPER_TABLE_I {
        let value = |figures: &LinuxFigures| figures.lmbench.get(name).map(|f| f.in_paper_units());
        let shown = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
        let ratio = |v: Option<f64>, base: Option<f64>| match (v, base) {
            (Some(v), Some(base)) if base > 0.0 => format!("{:.3}", v / base),
            _ => "-".to_string(),
        };
        let (n, k, x) = (value(native), value(keel), xen.and_then(value));
        println!(
            "{row:<22} {:>10} {:>10} {:>10} {:>8} {:>8} {paper_native:>10.2} {paper_xen:>10.2} {:>8.3}",
            shown(n),
            shown(k),
            shown(x),
            ratio(k, n),
            ratio(x, n),
            paper_xen / paper_native
        );
    }
}

/// The kernel and initramfs as dom0 of Debian's Xen 4.17 with its default settings (one CPU,
/// dom0 given the Keel VM's `memory` bytes, console on QEMU's PL011). Dom0 writes its console
/// through Xen (`hvc0`), which passes the hardware domain's lines on without a prefix; the other
/// words of `cmdline` are the native run's.
fn linux_under_xen(
    memory: u64,
    kernel: &std::path::Path,
    initrd: &std::path::Path,
    cmdline: &str,
) -> Result<LinuxFigures> {
    let xen = crate::debian::xen(&output_dir().join("debian"))
        .map_err(|e| format!("fetching Xen: {e}"))?;
    let bootargs = crate::debian::dom0_bootargs(cmdline);
    // Timestamps on Xen's own lines (console only) say when it starts dom0.
    let xen_cmdline = format!(
        "dom0_mem={}M console=dtuart console_timestamps=boot",
        memory >> 20
    );
    let mut machine = Machine::xen(&xen, &xen_cmdline, kernel, &bootargs, initrd)?;
    machine.icount = true;
    let log = output_dir().join("logs/bench-linux-xen.log");
    let ended = machine.spawn(&log)?.finish(Duration::from_secs(900));
    let mut figures = parse_linux(&ended.lines, "", "under Xen")
        .map_err(|e| format!("{e}; log: {}", log.display()))?;
    // Xen frees its init memory just before it starts dom0: count its time until then.
    let freed = Regex::new(r"^\(XEN\) \[\s*([\d.]+)\] Freed \d+kB init memory").unwrap();
    figures.boot += ended
        .lines
        .iter()
        .find_map(|line| freed.captures(line)?[1].parse::<f64>().ok())
        .ok_or_else(|| format!("Xen did not say when dom0 started; log: {}", log.display()))?;
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_figures_from_markers_and_a_run_that_did_not_finish() {
        let lines: Vec<String> = [
            "(XEN) d0v0: a hypervisor line",
            "KEEL-STEP cyclictest BEGIN 1.05",
            "KEEL-STEP cyclictest END 3.12 status=0",
            "# Min Latencies: 00004",
            "# Avg Latencies: 00005",
            "# Max Latencies: 00017",
            "KEEL-LAT null-syscall 312",
            "KEEL-BW pipe 123456789",
            "KEEL-STEP dd BEGIN 6.62",
            "KEEL-STEP dd END 6.81 status=0",
        ]
        .map(String::from)
        .to_vec();
        let error = parse_linux(&lines, "", "under Xen").err().unwrap();
        assert!(error.contains("did not finish under Xen"), "{error}");
        assert!(error.contains("KEEL-STEP dd END 6.81"), "{error}");
        let mut lines = lines;
        lines.push("KEEL-INIT-END status=0".into());
        let figures = parse_linux(&lines, "", "natively").unwrap();
        assert_eq!(figures.boot, 1.05);
        assert!((figures.steps["dd"] - 0.19).abs() < 1e-9);
        assert_eq!(figures.latencies["cyclictest"], [4, 5, 17]);
        assert_eq!(figures.lmbench["null-syscall"], Lmbench::Latency(312));
        assert_eq!(figures.lmbench["bw:pipe"], Lmbench::Bandwidth(123_456_789));
        assert!((figures.lmbench["bw:pipe"].in_paper_units() - 123.456789).abs() < 1e-9);
    }
}
