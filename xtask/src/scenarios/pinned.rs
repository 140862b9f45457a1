//! The pinned partition beside the console's heaviest users: the 1 kHz victim alone on pCPU 1
//! (one line a second) keeps every tick, within the lateness it has alone, beside (a) a VM
//! printing flat out, (b) a manager storming its VM's restarts, stops and starts, and (c) both
//! at once (`configs/tests/pinned-*.toml`; no VM of them on pCPU 0, which takes the UART's
//! interrupt). `cargo xtask bench console` runs the same systems traced, under icount and in
//! real time, and says where the victim's worst tick went.

use regex::Regex;

use super::{boot_to_end, check_ticks, expect_clean_exit, with_console_tail, Scenario};
use crate::qemu::Ended;
use crate::Result;

/// The worst tick lateness of the pinned victim these scenarios accept, in ns (under icount,
/// one instruction per ns). Alone (`pinned-alone.toml`, the same victim with nothing else
/// running) its worst over 4,000 ticks is 256 ns at fadeb57 (368 ns with Keel's trace on): the
/// timer's interrupt taken at EL2 and listed, then the guest's vector, with the counter read in
/// 16 ns steps. The victim prints a line a second itself, a console trap a byte; a deadline
/// that falls inside one of those traps waits for it (writing out 48 bytes takes about 1,500
/// instructions, `hypervisor/src/console.rs`), which those 4,000 ticks alone did not happen to
/// show. 5 µs is that trap and the alone figure, with about three times their sum to spare:
/// anything above it is another VM's or Keel's work reaching the victim's pCPU.
pub(super) const PINNED_LATENESS_BOUND_NS: u64 = 5_000;

/// Seconds of ticks the victim reports before it powers off (`keel.off=4`); the printer and the
/// storm run through the first three.
const VICTIM_SECONDS: u64 = 4;

/// Lines the printer must have printed (its flood's own count) for the run to be one beside a
/// VM printing flat out (alone, it prints about 15,000 a second under icount).
const PRINTER_MIN_LINES: u64 = 1_000;

/// Restarts of the managed VM (KEEL_VM_STATUS's count at the storm's end) for the run to be
/// one beside a storm: at fadeb57, 98 to 133 in the storm's 3 s in real time (under icount, 1:
/// the storm froze the machine).
const STORM_MIN_RESTARTS: u64 = 10;

/// The largest `max_ns` of VM `vm`'s `lateness:` reports (`keel.lateness`), if it made any.
fn worst_lateness_ns(ended: &Ended, vm: &str) -> Option<u64> {
    let pattern = Regex::new(&format!(
        r"^\[{vm}\] lateness: s=\d+ min_ns=\d+ avg_ns=\d+ max_ns=(\d+)$"
    ))
    .unwrap();
    ended
        .lines
        .iter()
        .filter_map(|line| pattern.captures(line)?[1].parse().ok())
        .max()
}

/// The first capture of the first console line that matches `pattern`, as a number.
fn number_in(ended: &Ended, pattern: &str) -> Option<u64> {
    let regex = Regex::new(pattern).unwrap();
    ended
        .lines
        .iter()
        .find_map(|line| regex.captures(line)?[1].parse().ok())
}

/// Boots `config` and checks that the victim kept every tick of its seconds within
/// [`PINNED_LATENESS_BOUND_NS`], and that the printer printed and the storm restarted its VM
/// (those `config` has); then that the machine powered off cleanly.
fn beside(config: &str, printer: bool, storm: bool) -> Result<()> {
    let ended = boot_to_end(config)?;
    let mut problems = Vec::new();
    if let Err(problem) = check_ticks(&ended, "victim", VICTIM_SECONDS) {
        problems.push(problem);
    }
    match worst_lateness_ns(&ended, "victim") {
        Some(worst) if worst > PINNED_LATENESS_BOUND_NS => problems.push(format!(
            "the victim's worst tick lateness was {worst} ns, above its bound alone of \
             {PINNED_LATENESS_BOUND_NS} ns"
        )),
        Some(_) => {}
        None => problems.push("the victim made no lateness report".into()),
    }
    if printer {
        match number_in(&ended, r"^\[printer\] hostile: flood: (\d+) rounds$") {
            Some(lines) if lines >= PRINTER_MIN_LINES => {}
            other => problems.push(format!(
                "the printer printed {} lines, not the {PRINTER_MIN_LINES} of a flat-out run",
                other.map_or("no count of its".into(), |n| n.to_string())
            )),
        }
    }
    if storm {
        let restarts = number_in(
            &ended,
            r"^\[mgr\] manager: storm vm=2 ms=\d+ calls=\d+ restarts=(\d+) notices=\d+$",
        );
        match restarts {
            Some(restarts) if restarts >= STORM_MIN_RESTARTS => {}
            other => problems.push(format!(
                "the storm restarted its VM {} times, not the {STORM_MIN_RESTARTS} of a storm",
                other.map_or("no count of".into(), |n| n.to_string())
            )),
        }
    }
    if !problems.is_empty() {
        return Err(with_console_tail(problems.join("; "), &ended));
    }
    expect_clean_exit(&ended)
}

/// The scenarios of the pinned partition beside the console's heaviest users.
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "pinned partition beside a VM printing flat out: the 1 kHz victim keeps every tick, its worst lateness within its bound alone".into(),
            run: Box::new(|| beside("pinned-printer", true, false)),
        },
        Scenario {
            name: "pinned partition beside a manager storming its VM's restarts, stops and starts from two vCPUs: the 1 kHz victim keeps every tick, its worst lateness within its bound alone".into(),
            run: Box::new(|| beside("pinned-storm", false, true)),
        },
        Scenario {
            name: "pinned partition beside the printer and the storm at once: the 1 kHz victim keeps every tick, its worst lateness within its bound alone".into(),
            run: Box::new(|| beside("pinned-both", true, true)),
        },
    ]
}
