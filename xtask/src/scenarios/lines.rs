//! Keel's lines a guest can cause stay limited (issue 39): every `[keel]` line of a run is
//! either a boot line or one of the limited kinds ([`LIMITED`], one pattern or more for each
//! `DiagnosticKind`), and each kind's lines about one VM come at most `BURST` (5) per rate
//! window, the rest counted in the next line printed. Two guests that used to flood the console
//! walk the lines the limits were missing: a managed VM resetting flat out while its manager
//! is busy (the notices its manager's full queue refuses), and a manager storming stops, starts
//! and restarts of its VM from two vCPUs (its stops, restarts, starts and refused notices).
//! `xtask/src/lines.rs` checks in the source that no other line a guest can cause is unlimited.

use std::collections::BTreeMap;

use keel_core::ratelimit::BURST;
use regex::Regex;

use super::{
    boot_to_end, check_ticks, expect_clean_exit, reset_loop_is_rate_limited, with_console_tail,
    Scenario,
};
use crate::qemu::Ended;
use crate::Result;

pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "Keel's lines: a managed VM resetting flat out while its manager does not read: the notices refused said at most 5 a second, the rest counted, as its starts and resets".into(),
            run: Box::new(reset_notices),
        },
        Scenario {
            name: "Keel's lines: a manager storming stop, start and restart of its VM from two vCPUs: its stops, restarts, starts and refused notices said at most 5 a second each, the rest counted".into(),
            run: Box::new(manager_storm),
        },
    ]
}

/// The lines each `DiagnosticKind` limits (by its `Debug` name), after `[keel] ` and before a
/// ` (N more like it suppressed)`: a VM's name as `vm` where the line is a VM's.
pub const LIMITED: &[(&str, &str)] = &[
    (
        "Smc",
        r"vm '(?P<vm>[^']+)': SMC \(function 0x[0-9a-f]{8}\) not forwarded: answered NOT_SUPPORTED",
    ),
    (
        "InputOverrun",
        r"vm '(?P<vm>[^']+)': console input queue full, \d+ bytes dropped \(the guest is not reading\)",
    ),
    ("Reset", r"vm '(?P<vm>[^']+)' \(id \d+\) resets"),
    (
        "Reset",
        r"vm '(?P<vm>[^']+)' \(id \d+\) reloaded: \d+ bytes in \d+ steps over \d+ us",
    ),
    ("Reset", r"vm '(?P<vm>[^']+)' \(id \d+\) restarts: .*"),
    (
        "Reset",
        r"vm '(?P<vm>[^']+)' \(id \d+\) health: .* \(ignored\)",
    ),
    (
        "Start",
        r"vm '(?P<vm>[^']+)' \(id \d+\) starts at \d+\.\d{6} s",
    ),
    ("Smmu", r"vm '(?P<vm>[^']+)' \(id \d+\): SMMU: .*"),
    ("Smmu", r"SMMU: .* \(no VM's stream\)"),
    ("Smmu", r"SMMU global error: .*"),
    (
        "Notice",
        r"vm '(?P<vm>[^']+)' \(id \d+\): health notice to '[^']+' refused: .*",
    ),
    ("Stop", r"vm '(?P<vm>[^']+)' \(id \d+\) stopped: .*"),
    ("Stop", r"vm '(?P<vm>[^']+)' \(id \d+\) powered off"),
    ("Stop", r"all VMs have ended: powering off"),
];

/// Keel's lines at boot, before any guest runs (said whatever their number: the configuration
/// decides them).
const BOOT: &[&str] = &[
    r"Keel \S+ on '.*' \(board \S+: GICv[23] at \S+, .* at \S+\): \d+ pCPUs, RAM .*, configuration '.*' with \d+ VMs",
    r"vm '[^']+' \(id \d+\): \d+ MiB at IPA .*",
    r"vm '[^']+' \(id \d+\): \d+ MiB of flash at IPA .*",
    r"trace: \d+ rings of \d+ bytes at .*, one per pCPU",
    r"vm '[^']+' \(id \d+\): console output raw while it has the input focus.*",
];

/// One limited line of Keel's.
#[derive(Debug, PartialEq, Eq)]
struct Said {
    kind: &'static str,
    /// The VM it is about (`None`: no VM's).
    vm: Option<String>,
    /// How many like it were left out before it.
    suppressed: u64,
}

/// Keel's limited lines of a run's console, in order; an error names each `[keel]` line that
/// is neither a boot line nor a limited one.
fn limited_lines(lines: &[String]) -> Result<Vec<Said>> {
    let suffix =
        Regex::new(r"^(?P<text>.*?)(?: \((?P<left>\d+) more like it suppressed\))?$").unwrap();
    let limited: Vec<(&str, Regex)> = LIMITED
        .iter()
        .map(|(kind, pattern)| (*kind, Regex::new(&format!("^(?:{pattern})$")).unwrap()))
        .collect();
    let boot: Vec<Regex> = BOOT
        .iter()
        .map(|pattern| Regex::new(&format!("^(?:{pattern})$")).unwrap())
        .collect();
    let mut said = Vec::new();
    let mut unknown = Vec::new();
    for line in lines {
        let Some(keel) = line.strip_prefix("[keel] ") else {
            continue;
        };
        let parts = suffix.captures(keel).unwrap();
        let text = &parts["text"];
        let found = limited
            .iter()
            .find_map(|(kind, pattern)| Some((*kind, pattern.captures(text)?)));
        match found {
            Some((kind, captures)) => said.push(Said {
                kind,
                vm: captures.name("vm").map(|m| m.as_str().to_string()),
                suppressed: parts
                    .name("left")
                    .map_or(0, |m| m.as_str().parse().unwrap()),
            }),
            None if parts.name("left").is_none() && boot.iter().any(|p| p.is_match(keel)) => {}
            None => unknown.push(line.as_str()),
        }
    }
    if unknown.is_empty() {
        Ok(said)
    } else {
        Err(format!(
            "Keel said lines that are neither boot lines nor limited: {unknown:?}"
        ))
    }
}

/// Each kind's lines about each VM: (lines, the count of those left out they report).
fn per_kind(said: &[Said]) -> BTreeMap<(&'static str, Option<&str>), (u64, u64)> {
    let mut counts = BTreeMap::new();
    for line in said {
        let entry = counts
            .entry((line.kind, line.vm.as_deref()))
            .or_insert((0, 0));
        entry.0 += 1;
        entry.1 += line.suppressed;
    }
    counts
}

/// Each kind's lines about each VM (`None`: no VM's): (lines printed, the count of those left
/// out that they report).
type Counts = BTreeMap<(&'static str, Option<String>), (u64, u64)>;

/// Checks that every `[keel]` line of `lines` is a boot line or a limited one, and that no kind
/// has more lines about one VM than `BURST` per rate window in a run of at most `run_ms` of
/// virtual time (its windows, each begun by a line printed at least a second after the last
/// one began, are at most `run_ms / 1000 + 1`). Returns each kind's lines and counts.
fn at_most_the_limited_lines(lines: &[String], run_ms: u64) -> Result<Counts> {
    let said = limited_lines(lines)?;
    let windows = run_ms / 1000 + 1;
    let counts = per_kind(&said);
    for (&(kind, vm), &(printed, _)) in &counts {
        if printed > u64::from(BURST) * windows {
            return Err(format!(
                "{printed} {kind} lines about {} in at most {windows} rate windows: not limited",
                vm.map_or("no VM".to_string(), |vm| format!("vm '{vm}'"))
            ));
        }
    }
    Ok(counts
        .into_iter()
        .map(|((kind, vm), count)| ((kind, vm.map(str::to_string)), count))
        .collect())
}

/// `lines`' `probe NAME: ok key=N ...` of VM `vm`: its numbers by key.
fn probe_numbers(ended: &Ended, vm: &str, name: &str) -> Result<BTreeMap<String, u64>> {
    let prefix = format!("[{vm}] probe {name}: ");
    let line = ended
        .lines
        .iter()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .ok_or(format!("vm '{vm}' did not report its probe {name}"))?;
    let Some(numbers) = line.strip_prefix("ok ") else {
        return Err(format!("[{vm}] probe {name}: {line}"));
    };
    Ok(numbers
        .split_whitespace()
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect())
}

/// A managed VM ("hostile", id 1) resets itself right after every boot for 100 ms, then once
/// more after a pause, while its manager ("mgr") ticks and never reads its queue of 8: of the
/// notices of its resets and its power-off (one per boot), all but 8 are refused. Keel says
/// at most 5 of those a window, and the lines and the counts they carry add up to every
/// refused notice (the last boot's, after the pause, carries the loop's); its starts and
/// resets are limited as before; no other line of Keel's comes but at boot.
fn reset_notices() -> Result<()> {
    let ended = boot_to_end("lines-reset-notices")?;
    let check = || -> Result<()> {
        let boots = probe_numbers(&ended, "hostile", "reset-loop")?["boots"];
        reset_loop_is_rate_limited(&ended)?;
        // The manager ticks from boot to the end of the run (it powers off last).
        let seconds = check_ticks(&ended, "mgr", 3)?;
        let counts = at_most_the_limited_lines(&ended.lines, (seconds + 1) * 1000)?;
        let (printed, reported) = counts
            .get(&("Notice", Some("hostile".to_string())))
            .copied()
            .unwrap_or((0, 0));
        let refused = boots - 8;
        if printed + reported != refused {
            return Err(format!(
                "{printed} lines about refused notices and {reported} reported as left out, for {refused} refused ({boots} notices, 8 queued)"
            ));
        }
        if printed > 2 * u64::from(BURST) {
            return Err(format!(
                "{printed} lines about refused notices: the loop's window and the last boot's allow {}",
                2 * BURST
            ));
        }
        Ok(())
    };
    check().map_err(|m| with_console_tail(m, &ended))?;
    expect_clean_exit(&ended)
}

/// A manager ("mgr", two vCPUs) stops, starts and restarts its VM ("rt") flat out for 1 s,
/// never reading its notices, then pauses and starts and stops it once more: Keel's stops,
/// restarts, starts and refused notices about "rt" come at most 5 a window each, the storm
/// made more of each than the limit shows (the lines after the pause carry counts), and no
/// other line of Keel's comes but at boot.
fn manager_storm() -> Result<()> {
    let ended = boot_to_end("lines-manager-storm")?;
    let check = || -> Result<()> {
        let probe = probe_numbers(&ended, "mgr", "manager-storm")?;
        // The manager powers off last, right after its report.
        let counts = at_most_the_limited_lines(&ended.lines, probe["at_ms"] + 1000)?;
        for kind in ["Stop", "Reset", "Start", "Notice"] {
            let (printed, reported) = counts
                .get(&(kind, Some("rt".to_string())))
                .copied()
                .unwrap_or((0, 0));
            if reported == 0 {
                return Err(format!(
                    "{printed} {kind} lines about vm 'rt' and none left out: the storm ({} calls) did not reach the limit",
                    probe["calls"]
                ));
            }
        }
        Ok(())
    };
    check().map_err(|m| with_console_tail(m, &ended))?;
    expect_clean_exit(&ended)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|line| line.to_string()).collect()
    }

    #[test]
    fn every_diagnostic_kind_has_its_lines() {
        for kind in keel_core::ratelimit::DiagnosticKind::ALL {
            let name = format!("{kind:?}");
            assert!(
                LIMITED.iter().any(|(listed, _)| *listed == name),
                "no line pattern for DiagnosticKind::{name}"
            );
        }
    }

    #[test]
    fn limited_lines_are_counted_per_kind_and_vm_with_what_they_left_out() {
        let run = lines(&[
            "[keel] Keel 0.1.0 on 'linux,dummy-virt' (board qemu-virt: GICv3 at 0x8000000, PL011 at 0x9000000): 4 pCPUs, RAM 0x40000000+0x40000000, configuration 'x' with 2 VMs",
            "[keel] vm 'rt' (id 0): 16 MiB at IPA 0x40000000 (PA 0x50000000), pCPUs [1], image 100 bytes at 0x40080000",
            "[rt] test-guest: vm 0 vcpu 0 keel 1.0 mode ticks entry clean",
            "[keel] vm 'rt' (id 0) stopped: asked by 'mgr'",
            "[keel] vm 'rt' (id 0) stopped: asked by 'mgr' (12 more like it suppressed)",
            "[keel] vm 'rt' (id 0): health notice to 'mgr' refused: its queue is full (7 more like it suppressed)",
            "[keel] vm 'rt' (id 0) starts at 1.000001 s",
            "[keel] all VMs have ended: powering off",
        ]);
        let counts = at_most_the_limited_lines(&run, 500).unwrap();
        let rt = |kind| counts[&(kind, Some("rt".to_string()))];
        assert_eq!(rt("Stop"), (2, 12));
        assert_eq!(rt("Notice"), (1, 7));
        assert_eq!(rt("Start"), (1, 0));
        assert_eq!(counts[&("Stop", None)], (1, 0));
    }

    #[test]
    fn more_than_a_burst_per_window_or_an_unknown_line_fails() {
        let mut run = lines(&["[keel] vm 'rt' (id 0) powered off"; 6]);
        assert!(at_most_the_limited_lines(&run, 999)
            .unwrap_err()
            .contains("6 Stop lines about vm 'rt' in at most 1 rate windows"));
        assert!(at_most_the_limited_lines(&run, 1000).is_ok());
        run.push("[keel] vm 'rt' (id 0) did something unlimited".into());
        assert!(at_most_the_limited_lines(&run, 1000)
            .unwrap_err()
            .contains("neither boot lines nor limited"));
        // A boot line with a count of lines left out is no boot line.
        let counted_boot = lines(&["[keel] trace: 2 rings of 4096 bytes at 0x1000, one per pCPU (3 more like it suppressed)"]);
        assert!(at_most_the_limited_lines(&counted_boot, 1000).is_err());
    }
}
