//! The Xen on ARM paper's table II (../shared/seeds/002_*): pipe and UNIX-socket bandwidth
//! with n = 1, 2, 3 and 4 Linux VMs running it at once, the aggregate (the sum of the VMs'
//! figures) beside the paper's. Each VM is Debian's cloud kernel and initramfs running
//! keel-lat's bandwidths (`keel.test=bandwidth`), first each on a pCPU of its own, then all on
//! one pCPU shared by round robin (10 ms quantum), as the paper's domains shared its one core.
//! Every VM measures in the same windows of the counter (200 ms of pipe, then 200 ms of UNIX
//! socket, from a start all of them have booted by), so the aggregate is of VMs running at
//! once. Under `-icount shift=0,sleep=off` QEMU runs every pCPU in one instruction stream:
//! n busy pCPUs share one core's worth of instructions, so "own pCPUs" measures Keel's cost
//! of keeping n VMs apart on that core, not a parallel speed-up.

use std::time::Duration;

use crate::bench::{parse_linux, LinuxFigures};
use crate::sched_bench::boot_generated;
use crate::Result;

/// The paper's aggregate bandwidths (MB/s) for n = 1..4: pipe, then UNIX socket.
const PAPER: [[f64; 4]; 2] = [[37.28, 37.20, 36.80, 36.84], [32.15, 35.31, 38.32, 35.51]];

/// When the VMs of a run of `vms` start measuring (milliseconds of the counter), all of them
/// booted by then: under icount the pCPUs share QEMU's one instruction stream, so `vms` boots
/// take about `vms` times one boot (about 1 s) whether their pCPUs are shared or not.
fn start_ms(vms: usize) -> usize {
    2_000 + 2_000 * vms
}

/// A system of `vms` Linux VMs, each on its own pCPU (`shared`: false) or all on pCPU 1.
fn config(name: &str, vms: usize, shared: bool) -> String {
    let mut text = format!(
        "[system]\nname = \"{name}\"\nram = {{ base = 0x4000_0000, size = \"1G\" }}\n\
         hypervisor = {{ base = 0x4000_0000, size = \"64M\" }}\npcpus = {}\n",
        if shared { 2 } else { vms + 1 }
    );
    if shared {
        text.push_str("\n[[pcpu]]\nid = 1\npolicy = \"round-robin\"\nquantum = \"10ms\"\n");
    }
    for vm in 0..vms {
        text.push_str(&format!(
            "\n[[vm]]\nname = \"linux{vm}\"\nimage = {{ debian = \"cloud-arm64\" }}\n\
             initrd = {{ debian = \"cloud-arm64\" }}\n\
             memory = {{ base = {:#x}, size = \"224M\" }}\npcpus = [{}]\n\
             devices = [\"console\"]\n\
             cmdline = \"console=ttyAMA0 keel.test=bandwidth keel.bw-start={}\"\n",
            0x4400_0000u64 + vm as u64 * 0xe00_0000,
            if shared { 1 } else { vm + 1 },
            start_ms(vms)
        ));
    }
    text
}

/// The aggregate pipe and UNIX-socket bandwidths (MB/s) of `vms` VMs run at once.
fn aggregate(vms: usize, shared: bool) -> Result<[f64; 2]> {
    let name = format!(
        "bench-vms-{vms}-{}",
        if shared { "shared" } else { "own-pcpus" }
    );
    let (session, _) = boot_generated(&name, &config(&name, vms, shared))?;
    let ended = session.finish(Duration::from_secs(1800));
    let mut sum = [0.0; 2];
    for vm in 0..vms {
        let figures: LinuxFigures = parse_linux(
            &ended.lines,
            &format!("[linux{vm}] "),
            &format!("as VM linux{vm} of {name}"),
        )?;
        for (total, key) in sum.iter_mut().zip(["bw:pipe", "bw:unix-socket"]) {
            *total += figures
                .lmbench
                .get(key)
                .ok_or(format!("VM linux{vm} of {name} printed no {key} figure"))?
                .in_paper_units();
        }
    }
    Ok(sum)
}

/// Runs the eight systems and prints the table.
pub fn run() -> Result<()> {
    let mut rows = Vec::new();
    for shared in [false, true] {
        let mut row = Vec::new();
        for vms in 1..=4 {
            row.push(aggregate(vms, shared)?);
        }
        rows.push((shared, row));
    }
    println!();
    println!("Aggregate bandwidth (MB/s) of n Debian Linux VMs running keel-lat's pipe and UNIX-socket bandwidths at once, -icount shift=0,sleep=off;");
    println!("beside the Xen on ARM paper's table II (n domains on one ARM926 core)");
    println!(
        "{:<34} {:>10} {:>10} {:>10} {:>10}",
        "measure", "n = 1", "n = 2", "n = 3", "n = 4"
    );
    for (kind, (measure, paper)) in ["bw_pipe", "bw_unix"].into_iter().zip(PAPER).enumerate() {
        for (shared, row) in &rows {
            let placement = if *shared {
                "one shared pCPU"
            } else {
                "own pCPUs"
            };
            print!("{:<34}", format!("{measure} Keel, {placement}"));
            for figures in row {
                print!(" {:>10.1}", figures[kind]);
            }
            println!();
        }
        print!("{:<34}", format!("{measure} paper (Xen on ARM)"));
        for figure in paper {
            print!(" {figure:>10.2}");
        }
        println!();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated systems place the VMs as the table says: own pCPUs 1..n, or all on a
    /// round-robin pCPU 1; memories apart.
    #[test]
    fn configurations_place_the_vms() {
        let own = config("x", 4, false);
        assert!(own.contains("pcpus = 5"));
        assert!(own.contains("pcpus = [4]") && !own.contains("round-robin"));
        let shared = config("x", 3, true);
        assert!(shared.contains("pcpus = 2") && shared.contains("round-robin"));
        assert_eq!(shared.matches("pcpus = [1]").count(), 3);
        assert!(shared.contains("base = 0x60000000, size = \"224M\""));
    }
}
