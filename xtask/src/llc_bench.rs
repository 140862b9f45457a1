//! `cargo xtask bench llc`: interference through the shared last-level cache, and what colouring
//! does about it, measured with the project's model of the cache (the QEMU plugin of
//! `tools/llc-model`: one 1 MiB, 16-way LLC shared by all pCPUs, LRU; QEMU itself has no
//! cache timing).
//!
//! The real-time partition `rt` (the test guest's walk mode) walks a 256 KiB working set over
//! and over and times each walk. It runs (a) alone, (b) beside other VMs without colours, and
//! (c) beside them with disjoint colours: the others are two VMs walking 1 MiB each
//! (`configs/tests/llc-*.toml`), then Debian Linux running `stress-ng --cache`
//! (`llc-linux-*.toml`); last, the bare-metal neighbours again with Keel coloured too and its
//! own accesses counted with each pCPU's (`llc-keel-coloured.toml`). For each run: the
//! partition's LLC misses per 1,000 accesses, its accesses and misses per walk, its walk in
//! instructions (the fastest: under `-icount` a nanosecond is an instruction, and other
//! vCPUs' turns inflate the rest), and a modelled walk time, the instructions plus the misses
//! times [`MISS_PENALTY_NS`].

use std::time::Duration;

use regex::Regex;

use crate::image::build_system;
use crate::scenarios::colouring::under_llc_model;
use crate::{step, Result};

/// The time a miss costs in the modelled walk time: a DRAM access of an embedded SoC.
pub const MISS_PENALTY_NS: u64 = 100;

/// How long a run may take in real time (a Linux boot under the cache model).
const DEADLINE: Duration = Duration::from_secs(900);

/// One run's figures for the partition.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    /// LLC misses per 1,000 accesses of the partition's pCPU.
    pub misses_per_1000: f64,
    /// Accesses and misses per walk (the pCPU's totals over the walks it made).
    pub accesses_per_walk: f64,
    pub misses_per_walk: f64,
    /// The fastest walk, in nanoseconds (instructions).
    pub walk_ns: u64,
}

impl Run {
    /// The walk's instructions plus its misses at [`MISS_PENALTY_NS`] each.
    pub fn modelled_ns(&self) -> f64 {
        self.walk_ns as f64 + self.misses_per_walk * MISS_PENALTY_NS as f64
    }
}

/// Boots `configs/tests/<name>.toml` under the cache model until the partition says `walk:
/// done`, stops QEMU (so that the model writes its report) and reads the partition's figures.
pub fn measure(name: &str) -> Result<Run> {
    let image = build_system(&crate::scenarios::config(name))?;
    let rt = image
        .system
        .vms
        .iter()
        .find(|vm| vm.name == "rt")
        .ok_or_else(|| format!("configuration '{name}' has no VM 'rt'"))?;
    let pcpu = *rt.pcpus.first().ok_or("vm 'rt' has no pCPU")?;
    let (machine, report) = under_llc_model(&image, name)?;
    let mut session = machine.spawn(&crate::scenarios::log_path(name))?;
    let done = session.wait_for(r"^\[rt\] walk: done$", DEADLINE);
    let ended = session.terminate();
    done.map_err(|message| crate::scenarios::with_console_tail(message, &ended))?;
    let walk = Regex::new(r"^\[rt\] walk: walks=(\d+) bytes=\d+ lines=\d+ ns_min=(\d+) ").unwrap();
    let (mut walks, mut walk_ns) = (1u64, u64::MAX); // the first, uncounted walk
    for captures in ended.lines.iter().filter_map(|line| walk.captures(line)) {
        walks += captures[1].parse::<u64>().unwrap_or(0);
        walk_ns = walk_ns.min(captures[2].parse().unwrap_or(u64::MAX));
    }
    if walk_ns == u64::MAX {
        return Err(format!("{name}: vm 'rt' reported no walk"));
    }
    let text = std::fs::read_to_string(&report)
        .map_err(|e| format!("{name}: the LLC model's report {}: {e}", report.display()))?;
    let line = Regex::new(&format!(
        r"^llc vcpu={pcpu} accesses=(\d+) hits=\d+ misses=(\d+) misses_per_1000=([\d.]+) "
    ))
    .unwrap();
    let captures = text
        .lines()
        .find_map(|l| line.captures(l))
        .ok_or_else(|| format!("{name}: no line of pCPU {pcpu} in {}", report.display()))?;
    let number = |i: usize| captures[i].parse::<f64>().unwrap_or(f64::NAN);
    Ok(Run {
        misses_per_1000: number(3),
        accesses_per_walk: number(1) / walks as f64,
        misses_per_walk: number(2) / walks as f64,
        walk_ns,
    })
}

/// One table row.
fn row(case: &str, run: &Run) -> String {
    format!(
        "| {case} | {:.3} | {:.0} | {:.1} | {} | {:.0} |",
        run.misses_per_1000,
        run.accesses_per_walk,
        run.misses_per_walk,
        run.walk_ns,
        run.modelled_ns()
    )
}

/// Runs the experiment and prints its table: the bare-metal neighbours, and with `linux`, the
/// Debian Linux ones.
pub fn run(linux: bool) -> Result<()> {
    crate::setup::ensure_tools()?;
    crate::image::build_guests()?;
    let mut cases = vec![
        ("alone", "llc-alone"),
        ("beside 2 VMs walking 1 MiB, no colours", "llc-shared"),
        ("beside them, colours 0-7 / 8-15", "llc-coloured"),
    ];
    if linux {
        cases.push((
            "beside Linux's stress-ng --cache, no colours",
            "llc-linux-shared",
        ));
        cases.push(("beside it, colours 0-7 / 8-15", "llc-linux-coloured"));
    }
    cases.push((
        "beside 2 VMs walking 1 MiB, colours 0-7 / 8-13, Keel 14-15 and counted",
        "llc-keel-coloured",
    ));
    let mut rows = Vec::new();
    let mut runs = Vec::new();
    for (case, name) in cases {
        step(&format!("llc: {case} ({name})"));
        let run = measure(name)?;
        rows.push(row(case, &run));
        runs.push(run);
    }
    // The modelled walk of each neighbour's three runs: alone, without colours, coloured.
    let mut series = vec![crate::plots::Series {
        label: "beside 2 VMs walking 1 MiB".into(),
        points: vec![
            (1.0, runs[0].modelled_ns() / 1000.0),
            (2.0, runs[1].modelled_ns() / 1000.0),
            (3.0, runs[2].modelled_ns() / 1000.0),
        ],
        reference: None,
    }];
    if let [alone, _, _, shared, coloured, _] = runs.as_slice() {
        series.push(crate::plots::Series {
            label: "beside Linux's stress-ng --cache".into(),
            points: vec![
                (1.0, alone.modelled_ns() / 1000.0),
                (2.0, shared.modelled_ns() / 1000.0),
                (3.0, coloured.modelled_ns() / 1000.0),
            ],
            reference: None,
        });
    }
    let plot = crate::plots::lines(
        &crate::plots::directory(),
        "llc-colouring",
        "A 256 KiB walk's modelled time (1 MiB 16-way LLC, 100 ns a miss)",
        (
            "1 alone, 2 beside the neighbour, 3 beside it with disjoint colours",
            "modelled walk, us",
        ),
        &series,
    )?;
    step(&crate::plots::check(&plot, "modelled walk")?);
    println!(
        "\nThe partition's 256 KiB walk under a modelled 1 MiB, 16-way LLC shared by all pCPUs \
         (misses cost {MISS_PENALTY_NS} ns in the modelled walk):\n"
    );
    println!("| run | misses / 1,000 accesses | accesses / walk | misses / walk | walk, instructions | modelled walk, ns |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for row in rows {
        println!("{row}");
    }
    Ok(())
}
