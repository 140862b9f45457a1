//! `cargo xtask bench console`: the 1 kHz victim (the test guest's ticks mode, one line a
//! second) alone on its pinned pCPU 1, then beside a VM printing flat out, a manager storming
//! its VM's restarts, stops and starts, and both at once (`configs/tests/pinned-*.toml`, the
//! systems of the `pinned partition` scenarios), each traced under icount and in real time.
//!
//! For each run: the victim's worst tick lateness as it measured it (its `lateness:` reports,
//! the counter at its handler's entry minus the tick's deadline), and from pCPU 1's ring of
//! Keel's trace the worst time from a tick's deadline to Keel listing its interrupt for the
//! victim, and what pCPU 1 was doing at that deadline. The deadlines are not in the trace: the
//! k-th timer interrupt listed for the victim is its k-th tick, whose deadline is k periods
//! after the first, so the trace's figure is each tick's listing time less k periods, beyond
//! that of the tick listed soonest (the best tick's own lateness, about 100 ns under icount,
//! is left out). At each of the victim's marks (its tick count, once a second) the listed
//! interrupts must match its ticks. The Chrome trace of each run is written as
//! `target/keel/trace/pinned-<case>-<icount|realtime>.json`, for ui.perfetto.dev.

use std::time::Duration;

use keel_core::abi::layout;
use keel_core::trace::{Event, Kind};
use regex::Regex;

use crate::trace::{self as tracing, Ring, Traced};
use crate::{step, workspace, Result};

/// One arrangement: its configuration's stem under `configs/tests/` and what runs beside the
/// victim.
struct Case {
    config: &'static str,
    beside: &'static str,
}

const CASES: [Case; 4] = [
    Case {
        config: "pinned-alone",
        beside: "nothing",
    },
    Case {
        config: "pinned-printer",
        beside: "(a) a VM printing flat out",
    },
    Case {
        config: "pinned-storm",
        beside: "(b) a manager storming its VM",
    },
    Case {
        config: "pinned-both",
        beside: "(c) both",
    },
];

/// Each pCPU's ring: pCPU 1's 4 s of ticks and one line a second take about 400 KiB; the busy
/// pCPUs' rings overwrite their oldest records, which the figures do not need.
const RING_BYTES: u64 = 2 << 20;

/// Real time one run may take (an icount run of the storm takes about 20 s here).
const WAIT: Duration = Duration::from_secs(600);

/// What a run showed.
struct Measured {
    /// The victim's `tick:` reports: `(second, ticks, expected)`.
    reports: Vec<(u64, u64, u64)>,
    /// The largest `max_ns` of its `lateness:` reports.
    worst_ns: u64,
    trace: TickTrace,
    /// What the interference did, from its own lines.
    interference: String,
}

/// The victim's ticks as pCPU 1's ring shows them.
struct TickTrace {
    ticks: usize,
    /// The worst tick's listing beyond the best tick's, in ns, and when (s since boot).
    worst_ns: u64,
    worst_at: f64,
    /// The most of any tick's time from deadline to listing that pCPU 1 spent in Keel's exits,
    /// in ns: Keel's part of the lateness, apart from the time QEMU or the host did not run
    /// pCPU 1 at all.
    worst_in_keel_ns: u64,
    /// What pCPU 1 was doing from that tick's deadline to its listing.
    during: String,
    /// pCPU 1's longest exit (from a guest exit to Keel's return), in ns, and its name.
    longest_exit: (u64, String),
}

/// The victim's reports and worst lateness from its console lines.
fn victim_reports(lines: &[String]) -> (Vec<(u64, u64, u64)>, u64) {
    let tick = Regex::new(r"^\[victim\] tick: s=(\d+) ticks=(\d+) expected=(\d+) ").unwrap();
    let lateness = Regex::new(r"^\[victim\] lateness: s=\d+ .* max_ns=(\d+)$").unwrap();
    let mut reports = Vec::new();
    let mut worst = 0;
    for line in lines {
        if let Some(c) = tick.captures(line) {
            let n = |i: usize| c[i].parse::<u64>().unwrap_or(0);
            reports.push((n(1), n(2), n(3)));
        }
        if let Some(c) = lateness.captures(line) {
            worst = worst.max(c[1].parse::<u64>().unwrap_or(0));
        }
    }
    (reports, worst)
}

/// What the printer and the storm said they did.
fn interference(lines: &[String]) -> String {
    let flood = Regex::new(r"^\[printer\] hostile: flood: (\d+) rounds$").unwrap();
    let storm = Regex::new(
        r"^\[mgr\] manager: storm vm=\d+ ms=\d+ calls=(\d+) restarts=(\d+) notices=(\d+)$",
    )
    .unwrap();
    let mut said = Vec::new();
    for line in lines {
        if let Some(c) = flood.captures(line) {
            said.push(format!("printer: {} lines", &c[1]));
        }
        if let Some(c) = storm.captures(line) {
            said.push(format!(
                "storm: {} calls, {} restarts, {} notices",
                &c[1], &c[2], &c[3]
            ));
        }
    }
    let keel_lines = lines.iter().filter(|l| l.starts_with("[keel] ")).count();
    said.push(format!("{keel_lines} Keel lines"));
    said.join("; ")
}

/// Nanoseconds in `ticks` of a counter at `frequency`.
fn ns(ticks: u64, frequency: u64) -> u64 {
    (u128::from(ticks) * 1_000_000_000 / u128::from(frequency.max(1))) as u64
}

/// The victim's ticks in pCPU 1's ring (see the module's comment).
fn tick_trace(traced: &Traced) -> Result<TickTrace> {
    let victim = traced
        .vms
        .iter()
        .position(|name| name == "victim")
        .ok_or("no VM 'victim'")? as u8;
    let ring: &Ring = traced
        .rings
        .iter()
        .find(|ring| ring.pcpu == 1)
        .ok_or("no ring for pCPU 1")?;
    if ring.lost != 0 {
        return Err(format!(
            "pCPU 1's ring overwrote {} records: the victim's ticks need all of them",
            ring.lost
        ));
    }
    let frequency = ring.frequency;
    let period = frequency / 1000;
    let mut listed: Vec<u64> = Vec::new();
    for event in ring.events.iter().filter(|event| event.vm == victim) {
        match event.kind {
            Kind::Inject if event.arg == layout::VTIMER_INTID => listed.push(event.time),
            Kind::Mark => {
                let ticks = u64::from(event.arg);
                let count = listed.len() as u64;
                if count != ticks && count != ticks + 1 {
                    return Err(format!(
                        "at the victim's mark of {ticks} ticks, {count} timer interrupts were listed for it"
                    ));
                }
            }
            _ => {}
        }
    }
    if listed.is_empty() {
        return Err("no timer interrupt listed for the victim".into());
    }
    // Each tick's listing less its index in periods: the deadlines' common start plus its
    // lateness. The least of them is the best tick's.
    let offsets: Vec<u64> = listed
        .iter()
        .enumerate()
        .map(|(k, &time)| time.wrapping_sub(k as u64 * period))
        .collect();
    let best = *offsets.iter().min().unwrap();
    let (worst_index, worst_offset) = offsets
        .iter()
        .enumerate()
        .max_by_key(|(_, offset)| **offset)
        .map(|(k, offset)| (k, *offset))
        .unwrap();
    let deadline = best + worst_index as u64 * period;
    let exits = exits(&ring.events);
    let longest_exit = exits
        .iter()
        .max_by_key(|(from, to, _)| to - from)
        .map_or((0, "none".to_string()), |(from, to, name)| {
            (ns(to - from, frequency), name.clone())
        });
    let listing = listed[worst_index];
    let during = during(&exits, &ring.events, deadline, listing, frequency);
    let worst_in_keel = worst_in_keel(&exits, &listed, best, period);
    Ok(TickTrace {
        ticks: listed.len(),
        worst_ns: ns(worst_offset - best, frequency),
        worst_in_keel_ns: ns(worst_in_keel, frequency),
        worst_at: deadline as f64 / frequency.max(1) as f64,
        during,
        longest_exit,
    })
}

/// The most time pCPU 1 spent in `exits` between any tick's deadline (`best` plus its index in
/// periods) and its listing, in counter ticks. Deadlines and listings both only grow, so one
/// pass over the exits serves every tick.
fn worst_in_keel(exits: &[(u64, u64, String)], listed: &[u64], best: u64, period: u64) -> u64 {
    let mut first = 0;
    let mut worst = 0;
    for (k, &listing) in listed.iter().enumerate() {
        let deadline = best + k as u64 * period;
        while exits.get(first).is_some_and(|(_, to, _)| *to <= deadline) {
            first += 1;
        }
        let in_keel: u64 = exits[first..]
            .iter()
            .take_while(|(from, _, _)| *from < listing)
            .map(|(from, to, _)| (*to).min(listing).saturating_sub((*from).max(deadline)))
            .sum();
        worst = worst.max(in_keel);
    }
    worst
}

/// What pCPU 1 did from a tick's `deadline` to its `listing` (counter ticks): the time in
/// Keel's exits (the longest of them named, with its whole length), and the rest, where pCPU 1
/// was in the victim or not run at all (QEMU's other pCPUs, or the host, had the time).
fn during(
    exits: &[(u64, u64, String)],
    events: &[Event],
    deadline: u64,
    listing: u64,
    frequency: u64,
) -> String {
    let overlapping: Vec<&(u64, u64, String)> = exits
        .iter()
        .filter(|(from, to, _)| *from < listing && *to > deadline)
        .collect();
    let in_keel: u64 = overlapping
        .iter()
        .map(|(from, to, _)| (*to).min(listing) - (*from).max(deadline))
        .sum();
    let us = |ticks: u64| ns(ticks, frequency) / 1000;
    let window = listing - deadline;
    let longest = overlapping
        .iter()
        .max_by_key(|(from, to, _)| to - from)
        .map_or(String::new(), |(from, to, name)| {
            format!(" (longest: {name}, {} us in all)", us(to - from))
        });
    let first =
        events
            .iter()
            .find(|event| event.time >= deadline)
            .map_or("none".to_string(), |event| {
                format!(
                    "{} us later, {}",
                    us(event.time - deadline),
                    describe(event)
                )
            });
    format!(
        "of {} us from deadline to listing, {} us in Keel's exits{longest}, {} us outside \
         them; first record after the deadline: {first}",
        us(window),
        us(in_keel),
        us(window - in_keel)
    )
}

/// A record in words.
fn describe(event: &Event) -> String {
    match event.kind {
        Kind::Exit => format!("exit, {}", tracing::exit_name(event.detail, event.arg)),
        Kind::PhysIrq => format!("interrupt {}", event.arg),
        kind => kind.name().to_string(),
    }
}

/// The exits of a ring: `(from, to, name)`, counter ticks.
fn exits(events: &[Event]) -> Vec<(u64, u64, String)> {
    let mut exits = Vec::new();
    let mut open: Option<(u64, String)> = None;
    for event in events {
        match event.kind {
            Kind::Exit => open = Some((event.time, tracing::exit_name(event.detail, event.arg))),
            Kind::ExitEnd => {
                if let Some((from, name)) = open.take() {
                    exits.push((from, event.time, name));
                }
            }
            _ => {}
        }
    }
    exits
}

/// Runs one case, under icount or in real time, and writes its Chrome trace.
fn measure(case: &Case, icount: bool) -> Result<Measured> {
    let config = workspace()
        .join("configs/tests")
        .join(format!("{}.toml", case.config));
    let traced = tracing::run_to_end(&config, RING_BYTES, icount, WAIT)?;
    let clock = if icount { "icount" } else { "realtime" };
    let (path, _) = tracing::write_json_named(&format!("{}-{clock}", case.config), &traced)?;
    step(&format!(
        "{} ({clock}): trace {}",
        case.config,
        path.display()
    ));
    let (reports, worst_ns) = victim_reports(&traced.lines);
    Ok(Measured {
        reports,
        worst_ns,
        trace: tick_trace(&traced).map_err(|e| format!("{} ({clock}): {e}", case.config))?,
        interference: interference(&traced.lines),
    })
}

/// The victim's tick reports summed up: seconds reported and ticks off the counter.
fn kept(reports: &[(u64, u64, u64)]) -> String {
    let seconds: Vec<String> = reports.iter().map(|r| r.0.to_string()).collect();
    let off = reports
        .iter()
        .map(|&(_, ticks, expected)| ticks.abs_diff(expected))
        .max()
        .unwrap_or(0);
    format!("s={} off by {off}", seconds.join(","))
}

/// `cargo xtask bench console [CASE]`: every case, or those whose configuration's name
/// contains `only`.
pub fn run(only: Option<&str>) -> Result<()> {
    let mut rows = Vec::new();
    for icount in [true, false] {
        for case in CASES
            .iter()
            .filter(|case| only.is_none_or(|text| case.config.contains(text)))
        {
            rows.push((case, icount, measure(case, icount)?));
        }
    }
    println!();
    println!(
        "The 1 kHz victim alone on pinned pCPU 1 (test guest, one line a second, 4 s), beside:"
    );
    println!(
        "{:<32} {:<9} {:<22} {:>14} {:>14} {:>14}",
        "", "clock", "reports, ticks", "victim worst", "trace worst", "in Keel"
    );
    for (case, icount, measured) in &rows {
        println!(
            "{:<32} {:<9} {:<22} {:>11} ns {:>11} ns {:>11} ns",
            case.beside,
            if *icount { "icount" } else { "real time" },
            kept(&measured.reports),
            measured.worst_ns,
            measured.trace.worst_ns,
            measured.trace.worst_in_keel_ns
        );
    }
    println!();
    println!("What pCPU 1's ring of Keel's trace shows:");
    for (case, icount, measured) in &rows {
        let trace = &measured.trace;
        println!(
            "- {} ({}): {} ticks listed; the worst at {:.3} s: {}. pCPU 1's longest exit: {} ns ({}). {}",
            case.config,
            if *icount { "icount" } else { "real time" },
            trace.ticks,
            trace.worst_at,
            trace.during,
            trace.longest_exit.0,
            trace.longest_exit.1,
            measured.interference
        );
    }
    println!("victim worst: the victim's own `lateness:` reports (its handler's entry); trace worst: a tick's deadline to Keel listing its interrupt, beyond the best tick's;");
    println!("in Keel: the most of one tick's deadline-to-listing that pCPU 1 spent in Keel's exits (the rest: pCPU 1 in the victim, or not run by QEMU or the host).");
    println!("Under icount QEMU runs the pCPUs one after another in one thread; in real time six vCPU threads share this host's cores.");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::event;

    /// Ticks listed 1,000 counter ticks apart (a 1 MHz counter) but the third, 300 late inside
    /// an exit: its lateness beyond the best, and the exit it fell in, are found.
    #[test]
    fn the_worst_tick_and_where_pcpu_1_was() {
        let mut events = Vec::new();
        for k in 0..5u64 {
            let late = if k == 2 { 300 } else { 10 };
            if k == 2 {
                events.push(event(2_000 - 50, Kind::Exit, 0, 0x24, 0x9000));
                events.push(event(2_000 + 290, Kind::ExitEnd, 0, 0, 0));
            }
            events.push(event(
                k * 1_000 + late,
                Kind::Inject,
                0,
                0,
                layout::VTIMER_INTID,
            ));
        }
        events.push(event(4_500, Kind::Mark, 0, 0, 5));
        let traced = Traced {
            rings: vec![Ring {
                pcpu: 1,
                frequency: 1_000_000,
                lost: 0,
                events,
            }],
            vms: vec!["victim".into()],
            lines: Vec::new(),
        };
        let trace = tick_trace(&traced).unwrap();
        assert_eq!(trace.ticks, 5);
        assert_eq!(trace.worst_ns, 290_000);
        assert_eq!(trace.worst_in_keel_ns, 280_000);
        assert_eq!(
            trace.during,
            "of 290 us from deadline to listing, 280 us in Keel's exits (longest: data abort \
             0x9000000, 340 us in all), 10 us outside them; first record after the deadline: 280 \
             us later, exit-end"
        );
        assert_eq!(trace.longest_exit, (340_000, "data abort 0x9000000".into()));
    }

    #[test]
    fn reports_and_interference_are_read_from_the_lines() {
        let lines: Vec<String> = [
            "[victim] tick: s=1 ticks=1000 expected=1000 late_max_us=0",
            "[victim] lateness: s=1 min_ns=128 avg_ns=128 max_ns=256",
            "[victim] tick: s=3 ticks=3001 expected=3001 late_max_us=2997912",
            "[victim] lateness: s=3 min_ns=224 avg_ns=1498365168 max_ns=2997912000",
            "[mgr] manager: storm vm=2 ms=3000 calls=7697599 restarts=1 notices=1",
            "[printer] hostile: flood: 5631 rounds",
            "[keel] vm 'managed' (id 2) stopped: asked by 'mgr'",
        ]
        .map(String::from)
        .to_vec();
        let (reports, worst) = victim_reports(&lines);
        assert_eq!(reports, [(1, 1000, 1000), (3, 3001, 3001)]);
        assert_eq!(worst, 2_997_912_000);
        assert_eq!(kept(&reports), "s=1,3 off by 0");
        assert_eq!(
            interference(&lines),
            "storm: 7697599 calls, 1 restarts, 1 notices; printer: 5631 lines; 1 Keel lines"
        );
    }
}
