//! Scenarios of shared-memory channels and their doorbells (KEEL_CHANNEL_NOTIFY), judged by
//! what the test guest's `channel` roles print: round trips of every size with content checked
//! both ways between two VMs on two pCPUs and on one shared pCPU, each VM seeing the channels at
//! addresses of its own; every refusal of the doorbell with its code; a VM of no channel refused;
//! a member that writes its read-only window stopped by Keel, naming the channel, while the
//! others finish.

use regex::Regex;

use super::Scenario;
use super::{boot_to_end, expect_clean_exit, expect_line, lines_of, with_console_tail};
use crate::qemu::Ended;
use crate::Result;

/// The round trips, the doorbell's figure, the refusals and the outsider of configuration
/// `name` (`chan-two-pcpus`, `chan-one-pcpu`).
fn round_trips(name: &str) -> Result<()> {
    super::boot_to_end_checked(name, check_round_trips)
}

fn check_round_trips(ended: &Ended) -> Result<()> {
    expect_line(
        ended,
        r"^\[writer\] chan: round trips: 1024 sizes 1\.\.=1024, content checked both ways, failures 0$",
    )?;
    expect_line(
        ended,
        r"^\[reader\] chan: reader: 1024 rounds checked \(0 wrong\), 64 pings answered$",
    )?;
    let (min, avg, max) = doorbell_round_trip(ended)?;
    // Two hypercalls, two kicks (or vCPU switches), two interrupt deliveries: a few thousand
    // instructions. Far more means a doorbell waited for something else (a timer, a time
    // slice), as a woken vCPU would if its wake-up check missed the doorbell.
    if min == 0 || avg > 20_000 || max > 100_000 {
        return Err(format!(
            "doorbell round trip min={min} avg={avg} max={max} ns: expected a few microseconds"
        ));
    }
    for (case, code) in [
        ("no-such-channel", -38),
        ("no-such-member", -38),
        ("reader-stopped", -36),
    ] {
        expect_line(
            ended,
            &format!(r"^\[writer\] chan: case {case}: got {code} expected {code} ok$"),
        )?;
    }
    expect_line(
        ended,
        r"^\[writer\] chan: writer done: 0 round-trip failures, 0 refusal failures$",
    )?;
    expect_line(
        ended,
        r"^\[outsider\] chan: outsider: 2 of 2 doorbells on channel 0 refused with -3$",
    )
}

/// The writer's `bench: doorbell-round-trip` figure: min, avg and max in ns.
fn doorbell_round_trip(ended: &Ended) -> Result<(u64, u64, u64)> {
    let pattern =
        Regex::new(r"^bench: doorbell-round-trip min=(\d+) avg=(\d+) max=(\d+)$").unwrap();
    lines_of(ended, "writer")
        .into_iter()
        .find_map(|line| {
            let c = pattern.captures(line)?;
            let n = |i: usize| c[i].parse::<u64>().unwrap();
            Some((n(1), n(2), n(3)))
        })
        .ok_or_else(|| "the writer printed no doorbell round-trip figure".to_string())
}

/// `chan-read-only`: the read-only member is stopped at its write, with the channel named; the
/// writer and the reader finish their round trips, and the stopped members are refused.
fn read_only_writer() -> Result<()> {
    let ended = boot_to_end("chan-read-only")?;
    let checked = check_read_only(&ended).map_err(|m| with_console_tail(m, &ended));
    checked?;
    expect_clean_exit(&ended)
}

fn check_read_only(ended: &Ended) -> Result<()> {
    expect_line(
        ended,
        r"^\[ro-writer\] chan: ro-writer: reads 0x[0-9a-f]+ at 0x68000000, then writes it$",
    )?;
    expect_line(
        ended,
        r"^\[keel\] vm 'ro-writer' \(id 2\) stopped: stage-2 permission fault: 4-byte write at IPA 0x68000000, in its read-only window of channel 'down' \(ESR 0x[0-9a-f]{8}, PC 0x[0-9a-f]+\)$",
    )?;
    if let Some(line) = lines_of(ended, "ro-writer")
        .into_iter()
        .find(|line| line.contains("FAIL"))
    {
        return Err(format!("the read-only member went on: '{line}'"));
    }
    expect_line(
        ended,
        r"^\[writer\] chan: round trips: 64 sizes 1\.\.=64, content checked both ways, failures 0$",
    )?;
    expect_line(
        ended,
        r"^\[reader\] chan: reader: 64 rounds checked \(0 wrong\), 16 pings answered$",
    )?;
    for case in ["reader-stopped", "member-stopped", "every-other-stopped"] {
        expect_line(
            ended,
            &format!(r"^\[writer\] chan: case {case}: got -36 expected -36 ok$"),
        )?;
    }
    expect_line(
        ended,
        r"^\[writer\] chan: writer done: 0 round-trip failures, 0 refusal failures$",
    )
}

/// The scenarios of this module.
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "shared-memory channels between two VMs on two pCPUs: every size 1..=1024 both ways through doorbells, the round trip timed, every refusal's code, a VM of no channel refused (DENIED)".into(),
            run: Box::new(|| round_trips("chan-two-pcpus")),
        },
        Scenario {
            name: "shared-memory channels between two VMs on one shared pCPU: every doorbell wakes its waiting peer at once, every size 1..=1024 both ways, every refusal's code".into(),
            run: Box::new(|| round_trips("chan-one-pcpu")),
        },
        Scenario {
            name: "a member writing its read-only channel window is stopped naming the channel; the other members finish".into(),
            run: Box::new(read_only_writer),
        },
    ]
}
