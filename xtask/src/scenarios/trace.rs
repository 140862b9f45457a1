//! Scenarios of Keel's trace (`cargo xtask trace`): a run traced under icount, its Chrome
//! trace written and parsed back with serde_json into the format's typed events, and checked
//! against what the system did.

use std::collections::BTreeSet;
use std::path::Path;

use keel_core::abi::layout;
use keel_core::trace::Kind;

use super::Scenario;
use crate::trace::{self as tracing, TraceFile, Traced};
use crate::{step, workspace, Result};

/// Runs `config` traced for `seconds`, writes its JSON and reads it back; checks what holds for
/// any trace: each pCPU's records in time order (the run's reading of the rings,
/// `keel_core::trace::read_ring`, refuses a record earlier than the one before), no ring
/// overwrote records, the file parses as the format's events (every
/// event of it), and on each pCPU the vCPU runs follow one another without overlapping.
fn traced(config: &str, seconds: f64) -> Result<Traced> {
    let path = workspace().join(config);
    let traced = tracing::run(&path, seconds)?;
    for ring in &traced.rings {
        if ring.lost != 0 {
            return Err(format!(
                "pCPU {}'s ring overwrote {} records: the checks need all of them",
                ring.pcpu, ring.lost
            ));
        }
    }
    let (json_path, written) = tracing::write_json(Path::new(config), &traced)?;
    let text =
        std::fs::read_to_string(&json_path).map_err(|e| format!("{}: {e}", json_path.display()))?;
    let file: TraceFile = serde_json::from_str(&text)
        .map_err(|e| format!("{} does not parse as a trace: {e}", json_path.display()))?;
    if file.trace_events != written.trace_events || file.display_time_unit != "ns" {
        return Err(format!(
            "{} reads back different from what was written",
            json_path.display()
        ));
    }
    for ring in &traced.rings {
        let pid = ring.pcpu + 1;
        let mut runs: Vec<(f64, f64, &str)> = file
            .trace_events
            .iter()
            .filter(|e| e.ph == "X" && e.pid == pid && e.tid == 0)
            .map(|e| (e.ts, e.ts + e.dur.unwrap_or(0.0), e.name.as_str()))
            .collect();
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        for pair in runs.windows(2) {
            // The JSON's microseconds are the counter's ticks scaled: allow for rounding.
            if pair[1].0 + 1e-6 < pair[0].1 {
                return Err(format!(
                    "pCPU {}: {} runs from {:.3} µs, before {} ends at {:.3} µs",
                    ring.pcpu, pair[1].2, pair[1].0, pair[0].2, pair[0].1
                ));
            }
        }
    }
    step(&format!(
        "trace {config}: {} events on {} pCPUs, {} trace events in {}",
        traced.rings.iter().map(|r| r.events.len()).sum::<usize>(),
        traced.rings.len(),
        file.trace_events.len(),
        json_path.display()
    ));
    Ok(traced)
}

/// The kinds of event in `traced` that `wanted` has and it lacks.
fn missing(traced: &Traced, wanted: &[Kind]) -> Vec<&'static str> {
    let present: BTreeSet<Kind> = traced
        .rings
        .iter()
        .flat_map(|ring| ring.events.iter().map(|event| event.kind))
        .collect();
    wanted
        .iter()
        .filter(|kind| !present.contains(kind))
        .map(|kind| kind.name())
        .collect()
}

/// The Gandalf arrangement traced for 2 s: Linux's and the partition's runs, exits (the
/// interrupts that took the pCPU from a guest among them), injections, switches, decisions and
/// jobs are all there, and at each of the partition's marks (its tick count, once a second)
/// the timer interrupts listed for it so far are its ticks, or one more (listed, not yet
/// taken); the trace's plots (exits, the partition's response times) are written whole.
fn gandalf() -> Result<()> {
    let traced = traced("configs/tests/gandalf.toml", 2.0)?;
    let wanted = [
        Kind::Exit,
        Kind::ExitEnd,
        Kind::Inject,
        Kind::Eoi,
        Kind::SwitchIn,
        Kind::SwitchOut,
        Kind::Decide,
        Kind::JobRelease,
        Kind::JobComplete,
        Kind::VmStart,
        Kind::Mark,
    ];
    let lacking = missing(&traced, &wanted);
    if !lacking.is_empty() {
        return Err(format!("no {} events in the trace", lacking.join(", ")));
    }
    let rt = traced
        .vms
        .iter()
        .position(|name| name == "rt")
        .ok_or("no VM 'rt'")? as u8;
    let mut marks = 0;
    for ring in &traced.rings {
        let mut listed: u64 = 0;
        for event in ring.events.iter().filter(|event| event.vm == rt) {
            match event.kind {
                Kind::Inject if event.arg == layout::VTIMER_INTID => listed += 1,
                Kind::Mark => {
                    marks += 1;
                    let ticks = u64::from(event.arg);
                    if listed != ticks && listed != ticks + 1 {
                        return Err(format!(
                            "at the partition's mark of {ticks} ticks, {listed} timer interrupts were listed for it"
                        ));
                    }
                    step(&format!(
                        "trace gandalf: the partition's mark says {ticks} ticks, {listed} timer interrupts listed"
                    ));
                }
                _ => {}
            }
        }
    }
    if marks == 0 {
        return Err("the partition made no mark in 2 s".into());
    }
    // The trace's plots: every pCPU's exits, and the partition's job response times.
    let plots = tracing::plots(&traced, &crate::plots::directory(), "trace-gandalf")?;
    let [exits, responses] = plots.as_slice() else {
        return Err(format!("{} plots of the trace, expected 2", plots.len()));
    };
    for (plot, label) in [
        (exits, "pCPU 1: exit to its end"),
        (responses, "rt.vcpu0: job response time"),
    ] {
        step(&format!(
            "trace gandalf: {}",
            crate::plots::check(plot, label)?
        ));
    }
    Ok(())
}

/// Every kind of event, from `trace-all.toml`; the manager read every pCPU's ring through
/// KEEL_TRACE_READ, all of it checked and nothing lost, and the VM without the grant was refused.
fn every_kind() -> Result<()> {
    let traced = traced("configs/tests/trace-all.toml", 2.5)?;
    let lacking = missing(&traced, &Kind::ALL);
    if !lacking.is_empty() {
        return Err(format!("no {} events in the trace", lacking.join(", ")));
    }
    let line = |pattern: &str| {
        let regex = regex::Regex::new(pattern).unwrap();
        traced
            .lines
            .iter()
            .find_map(|line| {
                regex
                    .captures(line)
                    .map(|c| c.get(1).map(|m| m.as_str().to_string()))
            })
            .ok_or_else(|| format!("no console line matched /{pattern}/"))
    };
    line(r"^\[nosy\] trace-reader: (denied)$")?;
    for ring in &traced.rings {
        let pcpu = ring.pcpu;
        let read: usize = line(&format!(
            r"^\[manager\] trace-reader: s=2 pcpu={pcpu} records=(\d+) lost=0 marks=\d+$"
        ))?
        .unwrap_or_default()
        .parse()
        .map_err(|e| format!("records: {e}"))?;
        // The manager read the ring up to its second 2; the run went on to 2.5 s.
        if read > ring.events.len() || (pcpu != 0 && read == 0) {
            return Err(format!(
                "the manager read {read} records of pCPU {pcpu}, whose ring holds {}",
                ring.events.len()
            ));
        }
    }
    Ok(())
}

/// The trace scenarios (`cargo xtask test trace`).
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "trace: the Gandalf arrangement traced for 2 s (cargo xtask trace): the Chrome trace parses back, each pCPU's records in time order, vCPU runs never overlap, the partition's timer interrupts match its ticks, its plots drawn".into(),
            run: Box::new(gandalf),
        },
        Scenario {
            name: "trace: every kind of event (messages, doorbells, budgets, misses, a reset), a manager reading every ring with KEEL_TRACE_READ, a VM without the grant refused".into(),
            run: Box::new(every_kind),
        },
    ]
}
