//! The benchmarks' plots, made from a short run: a yield ping-pong's switch costs and two
//! seconds of the 1 kHz partition's tick lateness, printed as histograms by the guests, read
//! back and drawn as PNG and SVG, whose files are then checked (a PNG, well-formed SVG
//! showing the plot's labels).

use regex::Regex;

use super::{lines_of, Scenario};
use crate::plots::{self, Panel};
use crate::sched_bench::{distribution, run_config, run_switch_pair};
use crate::Result;

/// Yields the ping-pong times one by one (`PINGPONG_YIELDS` of the test guest).
const TIMED_YIELDS: u64 = 1000;

pub(super) fn all() -> Vec<Scenario> {
    vec![Scenario {
        name: "benchmark plots: a yield ping-pong's switches and 2 s of tick lateness drawn as histograms, PNG and SVG written whole".into(),
        run: Box::new(benchmark_plots),
    }]
}

/// The 1 kHz partition alone on pCPU 1 for 2 s, its lateness histogram printed at the end.
const TICKS: &str =
    "[system]\nname = \"plots-ticks\"\nram = { base = 0x4000_0000, size = \"1G\" }\n\
    hypervisor = { base = 0x4000_0000, size = \"32M\" }\npcpus = 2\n\n\
    [[vm]]\nname = \"rt\"\nimage = { guest = \"test-guest\" }\n\
    memory = { base = 0x6800_0000, size = \"16M\" }\npcpus = [1]\ndevices = [\"console\"]\n\
    cmdline = \"keel.mode=ticks keel.histogram keel.off=2\"\n";

fn benchmark_plots() -> Result<()> {
    let switches = run_switch_pair(false)?;
    let switch_costs = distribution(&switches, "vm0", "switch-pair")?;
    if switch_costs.total() != TIMED_YIELDS {
        return Err(format!(
            "the switch histogram holds {} yields, the ping-pong timed {TIMED_YIELDS}",
            switch_costs.total()
        ));
    }
    let ticks = run_config("plots-ticks", TICKS)?;
    let lateness = distribution(&ticks, "rt", "tick-lateness")?;
    // The last report's tick count; the histogram, printed after it, may hold a few more.
    let report = Regex::new(r"^tick: s=2 ticks=(\d+) ").unwrap();
    let counted: u64 = lines_of(&ticks, "rt")
        .into_iter()
        .find_map(|line| report.captures(line).map(|c| c[1].parse().unwrap()))
        .ok_or("vm 'rt' printed no 'tick: s=2' report")?;
    if !(counted..=counted + 10).contains(&lateness.total()) {
        return Err(format!(
            "the lateness histogram holds {} ticks, the report at 2 s counted {counted}",
            lateness.total()
        ));
    }
    let title = "Scenario plot: switch costs and tick lateness";
    let plot = plots::histograms(
        &plots::directory().join("scenario"),
        "switches-and-ticks",
        title,
        2,
        &[
            Panel {
                title: "two vCPU switches (yield ping-pong)".into(),
                distribution: &switch_costs,
            },
            Panel {
                title: "1 kHz tick lateness, alone, 2 s".into(),
                distribution: &lateness,
            },
        ],
    )?;
    for label in [
        title.to_string(),
        "1 kHz tick lateness, alone, 2 s".to_string(),
        format!("ns ({})", plots::summary(&switch_costs)),
    ] {
        plots::check(&plot, &label)?;
    }
    println!(
        "    switches: {}; ticks: {}; plot {}",
        plots::summary(&switch_costs),
        plots::summary(&lateness),
        plot.svg.display()
    );
    Ok(())
}
