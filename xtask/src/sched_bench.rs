//! Benchmarks of shared pCPUs, with the papers' figures beside them: the cost of two vCPU
//! switches (yield ping-pong, Gandalf's measure), the lazy FP/SIMD switch, and the M5150
//! experiment (a CPU-bound workload natively and as 1-8 VMs on one pCPU at 1, 5 and 10 ms
//! quanta). Everything runs under `-icount shift=0,sleep=off`: one instruction per ns.

use std::time::Duration;

use regex::Regex;

use crate::image::{build_guests, build_system, guest_image, output_dir};
use crate::qemu::{Ended, Machine};
use crate::Result;

/// Rounds of the workload: about 0.3 s of virtual time natively, 30 quanta of 10 ms.
const WORK_ITERATIONS: u64 = 50_000_000;

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

/// Builds and boots a generated configuration under icount until QEMU ends.
fn run_config(name: &str, text: &str) -> Result<Ended> {
    let path = output_dir().join(format!("{name}.toml"));
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    let image = build_system(&path)?;
    let mut machine = Machine::keel(&image.path, image.system.pcpus);
    machine.icount = true;
    Ok(machine
        .spawn(&output_dir().join(format!("logs/{name}.log")))?
        .finish(Duration::from_secs(600)))
}

/// `(min, avg, max)` of the `bench: <figure>` line of `ended`.
fn figure(ended: &Ended, figure: &str) -> Result<(u64, u64, u64)> {
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

/// Runs the scheduling benchmarks and prints their table.
pub fn run() -> Result<()> {
    build_guests()?;
    let round_robin = "policy = \"round-robin\"\nquantum = \"10ms\"";
    let mut switches = Vec::new();
    for (name, fp) in [("switch-pair", ""), ("switch-pair-fp", " keel.fp")] {
        let config = shared_config(
            &format!("bench-{name}"),
            round_robin,
            2,
            &format!("keel.mode=pingpong keel.pingpong=measure{fp}"),
            &format!("keel.mode=pingpong keel.pingpong=partner{fp}"),
            true,
        );
        let ended = run_config(&format!("bench-{name}"), &config)?;
        switches.push(figure(&ended, name)?);
    }
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

    let native = Machine {
        kernel: guest_image("test-guest").ok_or("no test-guest image")?,
        cpus: 1,
        virtualization: false,
        icount: true,
        append: Some(format!(
            "keel.native keel.mode=work keel.iterations={WORK_ITERATIONS}"
        )),
        dtb: None,
        initrd: None,
        modules: Vec::new(),
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
    for quantum in [1, 5, 10] {
        let mut row = format!("{:<10}", format!("{quantum} ms"));
        for vms in [1, 2, 4, 8] {
            let name = format!("bench-m5150-{quantum}ms-{vms}");
            let cmdline = format!("keel.mode=work keel.iterations={WORK_ITERATIONS}");
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
            let first = spans.iter().map(|s| s.0).min().unwrap_or(0);
            let last = spans.iter().map(|s| s.1).max().unwrap_or(0);
            let overhead = (last - first) as f64 / (vms as u64 * single) as f64 - 1.0;
            row.push_str(&format!(" {:>9.3}%", overhead * 100.0));
        }
        println!("{row}");
    }
    Ok(())
}
