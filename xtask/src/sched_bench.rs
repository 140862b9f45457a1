//! Benchmarks of shared pCPUs, with the papers' figures beside them: the cost of two vCPU
//! switches (yield ping-pong, Gandalf's measure), the lazy FP/SIMD switch, and the M5150
//! experiment (a CPU-bound workload natively and as 1-8 VMs on one pCPU at 1, 5 and 10 ms
//! quanta). Everything runs under `-icount shift=0,sleep=off`: one instruction per ns.

use std::time::Duration;

use keel_core::histogram::{Collector, Distribution};
use regex::Regex;

use crate::image::{build_guests, build_system, guest_image, output_dir, SystemImage};
use crate::plots::{Panel, Series};
use crate::qemu::{Ended, Machine, Session};
use crate::Result;

/// Rounds of the workload: about 0.25 s of virtual time natively, 25 quanta of 10 ms.
const WORK_ITERATIONS: u64 = 50_000_000;
/// When every VM starts its workload (counter milliseconds): all have booted by then, so the
/// time from here to the last VM's end is n workloads and the scheduler's cost alone.
const WORK_START_MS: u64 = 100;

/// A configuration with `vms` test-guest VMs on pCPU 1 under `policy`, each with `cmdline`
/// (the first with `first_cmdline`, and the PMU if `pmu_first`).
fn shared_config(
    name: &str,
    policy: &str,
    vms: usize,
    first_cmdline: &str,
    cmdline: &str,
    pmu_first: bool,
) -> String {
    let mut text = format!(
        "[system]\nname = \"{name}\"\nram = {{ base = 0x4000_0000, size = \"1G\" }}\n\
         hypervisor = {{ base = 0x4000_0000, size = \"32M\" }}\npcpus = 2\n\n\
         [[pcpu]]\nid = 1\n{policy}\n"
    );
    for vm in 0..vms {
        text.push_str(&format!(
            "\n[[vm]]\nname = \"vm{vm}\"\nimage = {{ guest = \"test-guest\" }}\n\
             memory = {{ base = {:#x}, size = \"16M\" }}\npcpus = [1]\ndevices = [\"console\"]\n\
             pmu = {}\ncmdline = \"{}\"\n",
            0x5000_0000u64 + vm as u64 * 0x100_0000,
            pmu_first && vm == 0,
            if vm == 0 { first_cmdline } else { cmdline }
        ));
    }
    text
}

/// Writes a generated configuration as `<name>.toml`, builds it and boots it under icount,
/// its console logged as `logs/<name>.log`.
pub(crate) fn boot_generated(name: &str, text: &str) -> Result<(Session, SystemImage)> {
    boot_generated_at(name, text, 0)
}

/// [`boot_generated`] with each instruction taking 2^`shift` ns of virtual time.
pub(crate) fn boot_generated_at(
    name: &str,
    text: &str,
    shift: u8,
) -> Result<(Session, SystemImage)> {
    let path = output_dir().join(format!("{name}.toml"));
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    let image = build_system(&path)?;
    let machine = Machine {
        icount_shift: shift,
        ..Machine::keel_icount(&image)
    };
    let session = machine.spawn(&output_dir().join(format!("logs/{name}.log")))?;
    Ok((session, image))
}

/// Boots a generated configuration until QEMU ends.
pub(crate) fn run_config(name: &str, text: &str) -> Result<Ended> {
    Ok(boot_generated(name, text)?
        .0
        .finish(Duration::from_secs(600)))
}

/// `(min, avg, max)` of the `bench: <figure>` line of `ended`.
pub(crate) fn figure(ended: &Ended, figure: &str) -> Result<(u64, u64, u64)> {
    let pattern = Regex::new(&format!(r"bench: {figure} min=(\d+) avg=(\d+) max=(\d+)$")).unwrap();
    ended
        .lines
        .iter()
        .find_map(|l| pattern.captures(l))
        .map(|c| {
            (
                c[1].parse().unwrap(),
                c[2].parse().unwrap(),
                c[3].parse().unwrap(),
            )
        })
        .ok_or(format!("no 'bench: {figure}' line"))
}

/// `(start, end)` counter values of every `[work]` line.
fn work_spans(ended: &Ended) -> Vec<(u64, u64)> {
    let pattern = Regex::new(r"\[work\] start=(\d+) end=(\d+)").unwrap();
    ended
        .lines
        .iter()
        .filter_map(|l| pattern.captures(l))
        .map(|c| (c[1].parse().unwrap(), c[2].parse().unwrap()))
        .collect()
}

/// `(min, avg, max)` in ns over every `lateness:` report of VM `vm` (avg: of the reports' averages).
pub(crate) fn lateness(ended: &Ended, vm: &str) -> Result<(u64, u64, u64)> {
    let pattern = Regex::new(&format!(
        r"^\[{vm}\] lateness: s=\d+ min_ns=(\d+) avg_ns=(\d+) max_ns=(\d+)$"
    ))
    .unwrap();
    let reports: Vec<[u64; 3]> = ended
        .lines
        .iter()
        .filter_map(|l| pattern.captures(l))
        .map(|c| [1, 2, 3].map(|i| c[i].parse().unwrap()))
        .collect();
    if reports.is_empty() {
        return Err(format!("vm '{vm}' reported no lateness"));
    }
    Ok((
        reports.iter().map(|r| r[0]).min().unwrap_or(0),
        reports.iter().map(|r| r[1]).sum::<u64>() / reports.len() as u64,
        reports.iter().map(|r| r[2]).max().unwrap_or(0),
    ))
}

/// The last complete histogram `name` that VM `vm` printed (`hist:` lines, see
/// `keel_core::histogram`).
pub(crate) fn distribution(ended: &Ended, vm: &str, name: &str) -> Result<Distribution> {
    let prefix = format!("[{vm}] ");
    let mut collector = Collector::new();
    for line in ended.lines.iter().filter_map(|l| l.strip_prefix(&prefix)) {
        collector
            .feed(line)
            .map_err(|e| format!("vm '{vm}': {e}"))?;
    }
    collector
        .get(name)
        .cloned()
        .ok_or(format!("vm '{vm}' printed no complete '{name}' histogram"))
}

/// Seconds between `KEEL-STEP <step> BEGIN t` and `END t` in `lines`.
fn step_seconds(ended: &Ended, step: &str) -> Result<f64> {
    let pattern = Regex::new(&format!(r"KEEL-STEP {step} (BEGIN|END) ([\d.]+)")).unwrap();
    let mut begin = None;
    for line in &ended.lines {
        if let Some(c) = pattern.captures(line) {
            let t: f64 = c[2].parse().unwrap_or(0.0);
            match &c[1] {
                "BEGIN" => begin = Some(t),
                _ => {
                    return begin
                        .map(|b| t - b)
                        .ok_or(format!("{step} ended before it began"))
                }
            }
        }
    }
    Err(format!("no 'KEEL-STEP {step}' begin and end"))
}

/// Boots a generated configuration whose VM 0 is Linux, until Linux powers off.
pub(crate) fn run_until_linux_off(name: &str, text: &str) -> Result<(Ended, SystemImage)> {
    let (mut session, image) = boot_generated(name, text)?;
    let outcome = session.wait_for(
        r"^\[keel\] vm 'linux' \(id 0\) powered off$",
        Duration::from_secs(900),
    );
    let ended = session.kill();
    outcome?;
    Ok((ended, image))
}

pub(crate) const LINUX_VM: &str =
    "\n[[vm]]\nname = \"linux\"\nimage = { debian = \"cloud-arm64\" }\n\
    initrd = { debian = \"cloud-arm64\" }\nmemory = { base = 0x4800_0000, size = \"512M\" }\n\
    pcpus = [1]\ndevices = [\"console\"]\n";

/// The 1 kHz partition's tick lateness alone on a pinned pCPU, then on one pCPU with Debian
/// Linux running `stress-ng --cpu 1` below it (fixed priority); Linux's matrixprod time next
/// to a real-time vCPU taking a quarter of the pCPU (EDF), against native / (1 - U).
fn linux_sharing() -> Result<()> {
    let header = |name: &str, policy: &str| {
        format!(
            "[system]\nname = \"{name}\"\nram = {{ base = 0x4000_0000, size = \"1G\" }}\n\
             hypervisor = {{ base = 0x4000_0000, size = \"64M\" }}\npcpus = 2\n{policy}"
        )
    };
    let rt = |schedule: &str, cmdline: &str| {
        format!(
            "\n[[vm]]\nname = \"rt\"\nimage = {{ guest = \"test-guest\" }}\n\
             memory = {{ base = 0x6800_0000, size = \"16M\" }}\npcpus = [1]\ndevices = [\"console\"]\n\
             {schedule}cmdline = \"{cmdline}\"\n"
        )
    };
    let alone_run = run_config(
        "bench-rt-alone",
        &(header("bench-rt-alone", "")
            + &rt(
                "",
                "keel.mode=ticks keel.lateness keel.histogram keel.off=5",
            )),
    )?;
    let alone = lateness(&alone_run, "rt")?;

    let shared_name = "bench-rt-linux";
    let text = header(
        shared_name,
        "\n[[pcpu]]\nid = 1\npolicy = \"fixed-priority\"\n",
    ) + LINUX_VM
        + "schedule = [{ priority = 1 }]\ncmdline = \"console=ttyAMA0 keel.test=load\"\n"
        + &rt(
            "schedule = [{ priority = 10, period = \"1ms\", budget = \"500us\" }]\n",
            "keel.mode=ticks keel.lateness keel.histogram",
        );
    let (shared, _) = run_until_linux_off(shared_name, &text)?;
    let with_linux = lateness(&shared, "rt")?;
    println!();
    println!("1 kHz partition's tick lateness (ns, from the timer's deadline to its handler; min / avg of each second's average / max):");
    println!(
        "  alone on a pinned pCPU:                         {} / {} / {}",
        alone.0, alone.1, alone.2
    );
    println!(
        "  above Debian Linux (stress-ng --cpu 1), one pCPU: {} / {} / {}",
        with_linux.0, with_linux.1, with_linux.2
    );
    let alone_distribution = distribution(&alone_run, "rt", "tick-lateness")?;
    let shared_distribution = distribution(&shared, "rt", "tick-lateness")?;
    crate::plots::publish_histograms(
        "tick-lateness-linux",
        "1 kHz partition's tick lateness (timer deadline to its handler)",
        2,
        &[
            Panel {
                title: "alone on a pinned pCPU, 5 s".into(),
                distribution: &alone_distribution,
            },
            Panel {
                title: "above Debian Linux (boot, stress-ng --cpu 1), one pCPU".into(),
                distribution: &shared_distribution,
            },
        ],
    )?;

    let throughput_name = "bench-linux-throughput";
    let text = header(throughput_name, "\n[[pcpu]]\nid = 1\npolicy = \"edf\"\n")
        + LINUX_VM
        + "cmdline = \"console=ttyAMA0 keel.test=matrixprod\"\n"
        + &rt(
            "schedule = [{ period = \"1ms\", budget = \"300us\" }]\n",
            "keel.mode=job keel.work=250 keel.report=1",
        );
    let (under_keel, image) = run_until_linux_off(throughput_name, &text)?;
    let linux = &image.system.vms[0];
    let shared_seconds = step_seconds(&under_keel, "matrixprod")?;
    let native = Machine {
        board: &keel_core::board::QEMU_VIRT,
        kernel: linux.image_path.clone(),
        cpus: 1,
        cpu: crate::qemu::REFERENCE_CPU,
        virtualization: false,
        icount: true,
        icount_sleep: false,
        icount_shift: 0,
        append: Some("console=ttyAMA0 keel.test=matrixprod".into()),
        dtb: None,
        initrd: linux.initrd.as_ref().map(|i| i.path.clone()),
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
    }
    .spawn(&output_dir().join("logs/bench-linux-matrixprod-native.log"))?
    .finish(Duration::from_secs(900));
    let native_seconds = step_seconds(&native, "matrixprod")?;
    let utilisation = 0.25;
    println!(
        "Linux matrixprod (stress-ng --cpu-ops 20) next to a real-time vCPU using U = {utilisation} of its pCPU (EDF, 250 us of work per 1 ms): {shared_seconds:.2} s; native {native_seconds:.2} s, native / (1 - U) = {:.2} s",
        native_seconds / (1.0 - utilisation)
    );
    Ok(())
}

/// Two vCPU switches: `(min, avg, max)` instructions of a yield ping-pong between two VMs
/// round robin on one pCPU, with FP/SIMD used by both if `fp` (the guests built).
pub(crate) fn switch_pair(fp: bool) -> Result<(u64, u64, u64)> {
    let ended = run_switch_pair(fp)?;
    figure(&ended, if fp { "switch-pair-fp" } else { "switch-pair" })
}

/// Runs [`switch_pair`]'s ping-pong to its end.
pub(crate) fn run_switch_pair(fp: bool) -> Result<Ended> {
    let (name, fp) = if fp {
        ("switch-pair-fp", " keel.fp")
    } else {
        ("switch-pair", "")
    };
    let config = shared_config(
        &format!("bench-{name}"),
        "policy = \"round-robin\"\nquantum = \"10ms\"",
        2,
        &format!("keel.mode=pingpong keel.pingpong=measure{fp}"),
        &format!("keel.mode=pingpong keel.pingpong=partner{fp}"),
        // Timed with the virtual counter: no PMU, whose switching would be measured too.
        false,
    );
    run_config(&format!("bench-{name}"), &config)
}

/// Runs the scheduling benchmarks and prints their table; `with_linux: false`
/// (`--no-linux`) leaves out the four Linux boots (the switches and the M5150 table alone,
/// a few minutes).
pub fn run(with_linux: bool) -> Result<()> {
    build_guests()?;
    let runs = [run_switch_pair(false)?, run_switch_pair(true)?];
    let switches = [
        figure(&runs[0], "switch-pair")?,
        figure(&runs[1], "switch-pair-fp")?,
    ];
    println!();
    println!("Scheduling on a shared pCPU: QEMU 'virt' cortex-a72, -icount shift=0,sleep=off (1 instruction = 1 ns)");
    println!(
        "two vCPU switches (yield ping-pong between two VMs, round robin): min {} / avg {} / max {} instructions; Gandalf: 1.02 us (about 2,860 cycles)",
        switches[0].0, switches[0].1, switches[0].2
    );
    println!(
        "the same with FP/SIMD used by both VMs: avg {} instructions: the lazy FP/SIMD switch costs {} instructions per switch (its first FP instruction)",
        switches[1].1,
        switches[1].1.saturating_sub(switches[0].1) / 2
    );
    let plain = distribution(&runs[0], "vm0", "switch-pair")?;
    let fp = distribution(&runs[1], "vm0", "switch-pair-fp")?;
    crate::plots::publish_histograms(
        "switch-cost",
        "Two vCPU switches: yields between two VMs on one pCPU, each timed alone",
        2,
        &[
            Panel {
                title: "neither VM uses FP/SIMD".into(),
                distribution: &plain,
            },
            Panel {
                title: "both VMs use FP/SIMD (lazy switch)".into(),
                distribution: &fp,
            },
        ],
    )?;

    let native = Machine {
        board: &keel_core::board::QEMU_VIRT,
        kernel: guest_image("test-guest").ok_or("no test-guest image")?,
        cpus: 1,
        cpu: crate::qemu::REFERENCE_CPU,
        virtualization: false,
        icount: true,
        icount_sleep: false,
        icount_shift: 0,
        append: Some(format!(
            "keel.native keel.mode=work keel.iterations={WORK_ITERATIONS} keel.start={WORK_START_MS}"
        )),
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
    }
    .spawn(&output_dir().join("logs/bench-work-native.log"))?
    .finish(Duration::from_secs(600));
    let (start, end) = *work_spans(&native)
        .first()
        .ok_or("the native workload printed no [work] line")?;
    let single = end - start;
    println!();
    println!(
        "M5150 experiment: a CPU-bound workload ({WORK_ITERATIONS} rounds of xorshift, {:.0} ms natively) run by n VMs on one pCPU, round robin;",
        single as f64 * 1000.0 / 62_500_000.0
    );
    println!("overhead = (time for all n) / (n x native) - 1. Paper (M5150): 1.74 % at 1 ms, 0.34 % at 5 ms, 0.17 % at 10 ms, flat to 8 VMs");
    println!(
        "{:<10} {:>10} {:>10} {:>10} {:>10}",
        "quantum", "1 VM", "2 VMs", "4 VMs", "8 VMs"
    );
    let mut series = Vec::new();
    for (quantum, paper) in [(1, 1.74), (5, 0.34), (10, 0.17)] {
        let mut row = format!("{:<10}", format!("{quantum} ms"));
        let mut points = Vec::new();
        for vms in [1, 2, 4, 8] {
            let name = format!("bench-m5150-{quantum}ms-{vms}");
            // Results printed after every VM is done (a quarter more than the work takes
            // natively, and 20 ms), not while the others still work.
            let print_ms = WORK_START_MS + vms as u64 * single * 5 / 4 / 62_500 + 20;
            let cmdline = format!(
                "keel.mode=work keel.iterations={WORK_ITERATIONS} keel.start={WORK_START_MS} keel.print={print_ms}"
            );
            let config = shared_config(
                &name,
                &format!("policy = \"round-robin\"\nquantum = \"{quantum}ms\""),
                vms,
                &cmdline,
                &cmdline,
                false,
            );
            let ended = run_config(&name, &config)?;
            let spans = work_spans(&ended);
            if spans.len() != vms {
                return Err(format!("{name}: {} of {vms} VMs finished", spans.len()));
            }
            // The work begins at WORK_START_MS for all of them (the first to run starts then).
            let first = spans.iter().map(|s| s.0).min().unwrap_or(0);
            let last = spans.iter().map(|s| s.1).max().unwrap_or(0);
            let overhead = (last - first) as f64 / (vms as u64 * single) as f64 - 1.0;
            row.push_str(&format!(" {:>9.3}%", overhead * 100.0));
            // One VM has no other to switch to: nothing to draw on the plot's log scale.
            if vms > 1 {
                points.push((vms as f64, overhead * 100.0));
            }
        }
        println!("{row}");
        series.push(Series {
            label: format!("Keel, {quantum} ms quantum"),
            points,
            reference: Some((format!("M5150 paper, {quantum} ms"), paper)),
        });
    }
    let plot = crate::plots::lines(
        &crate::plots::directory(),
        "m5150-overhead",
        "Scheduling overhead of n VMs sharing one pCPU (round robin), M5150 experiment",
        ("VMs sharing the pCPU", "overhead (%, log scale)"),
        &series,
    )?;
    println!("  plot: {} and .png", plot.svg.display());
    if with_linux {
        linux_sharing()?;
    }
    Ok(())
}
