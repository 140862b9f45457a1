//! Scenarios of messages between VMs (KEEL_MSG_SEND, KEEL_MSG_RECV), judged by what the test
//! guest's `messages` roles print: round trips of every size with content checked both ways,
//! on two pCPUs and on one shared pCPU; every refusal with its code; a VM not allowed to send;
//! a stopped destination; a flooding sender beside a real-time partition.

use std::time::Duration;

use regex::Regex;

use super::sched::job_reports;
use super::Scenario;
use super::{boot, expect_line, lines_of, with_console_tail};
use crate::qemu::Ended;
use crate::Result;

/// Every refusal `ping` provokes, with the code it must get.
const CASES: &[(&str, i64)] = &[
    ("too-large", -33),
    ("unknown-vm", -35),
    ("unknown-vcpu", -35),
    ("not-allowed", -3),
    ("bad-buffer-send", -9),
    ("bad-buffer-receive", -9),
    ("empty", -37),
    ("timeout", -37),
    ("queue-full", -32),
    ("buffer-too-small", -34),
    ("stopped", -36),
];

/// The round trips and refusals of configuration `name` (ping, pong, outsider, stopped).
fn round_trips(name: &str) -> Result<()> {
    super::boot_to_end_checked(name, check_round_trips)
}

fn check_round_trips(ended: &Ended) -> Result<()> {
    expect_line(
        ended,
        r"^\[ping\] msg: round trips: 257 sizes 0\.\.=256, content checked both ways, failures 0$",
    )?;
    for (case, code) in CASES {
        expect_line(
            ended,
            &format!(r"^\[ping\] msg: case {case}: got {code} expected {code} ok$"),
        )?;
    }
    expect_line(
        ended,
        r"^\[ping\] msg: own queue took 4 \(depth 4\), gave back 4 intact$",
    )?;
    expect_line(
        ended,
        r"^\[ping\] msg: the message stayed queued: true, then came whole: true$",
    )?;
    expect_line(
        ended,
        r"^\[ping\] msg: ping done: 0 round-trip failures, 0 refusal failures$",
    )?;
    // 257 round trips and the message of the buffer-too-small case; nothing from outsider.
    expect_line(
        ended,
        r"^\[pong\] msg: pong \(vm 1\) echoed 258 messages, 0 from VMs that may not send$",
    )?;
    expect_line(
        ended,
        r"^\[outsider\] msg: outsider: 16 of 16 sends to vm 1 refused with -3$",
    )
}

/// A sender flooding a VM that never receives, from 1 s to 4 s, on the pCPU of a real-time
/// reservation (1 ms period): the sink's queue takes its depth (8) and every other send is
/// refused as full; from the report at 1 s to the one at 5 s, the partition gets a job every
/// millisecond, and misses no deadline and overruns no budget.
fn flood() -> Result<()> {
    let mut session = boot("msg-flood")?;
    let wait = Duration::from_secs(180);
    let outcome = session
        .wait_for(r"^\[flooder\] msg: flood: \d+ accepted", wait)
        .and_then(|_| session.wait_for(r"^\[rt\] \[job\] s=5 ", wait));
    let ended = session.kill();
    outcome.map_err(|m| with_console_tail(m, &ended))?;
    let pattern =
        Regex::new(r"^msg: flood: (\d+) accepted, (\d+) refused as full, (\d+) other refusals$")
            .unwrap();
    let (accepted, full, other) = lines_of(&ended, "flooder")
        .into_iter()
        .find_map(|line| {
            let c = pattern.captures(line)?;
            let n = |i: usize| c[i].parse::<u64>().unwrap();
            Some((n(1), n(2), n(3)))
        })
        .ok_or("the flooder printed no summary")?;
    if accepted != 8 || full == 0 || other != 0 {
        return Err(format!(
            "flooder: {accepted} accepted (the sink's depth is 8), {full} refused as full, {other} other refusals"
        ));
    }
    let reports = job_reports(&ended, "rt");
    let at = |second: u64| {
        reports
            .iter()
            .find(|r| r.second == second)
            .ok_or(format!("vm 'rt' did not report at {second} s"))
    };
    let first = at(1)?;
    for second in 2..=5 {
        let r = at(second)?;
        let jobs = r.jobs - first.jobs;
        let (misses, overruns) = (r.misses - first.misses, r.overruns - first.overruns);
        if jobs.abs_diff((second - 1) * 1000) > 1 || misses != 0 || overruns != 0 {
            return Err(format!(
                "vm 'rt' from 1 s to {second} s: {jobs} jobs (expected {}), {misses} deadline misses, {overruns} overruns",
                (second - 1) * 1000
            ));
        }
        if r.worst_response_us > 1000 {
            return Err(format!(
                "vm 'rt' at {second} s: worst response {} us beyond its period",
                r.worst_response_us
            ));
        }
    }
    Ok(())
}

/// Debian's cloud kernel, unmodified, talks to the real-time partition through Keel's
/// virtio console: its in-tree modules load, lines of 0 to 3,000 bytes go out on /dev/hvc0
/// and come back in capitals, each checked on both sides, then 1,000 round trips.
fn linux_virtio() -> Result<()> {
    let mut session = boot("linux-virtio")?;
    let outcome = session.wait_for(r"^\[linux\] KEEL-INIT-END ", Duration::from_secs(600));
    let ended = session.kill();
    outcome.map_err(|m| with_console_tail(m, &ended))?;
    let checked = (|| {
        expect_line(&ended, r"^\[linux\] keel: virtio console at /dev/hvc0$")?;
        for size in [0, 1, 7, 100, 1000, 3000] {
            expect_line(&ended, &format!(r"^\[linux\] KEEL-VIRTIO size={size} ok$"))?;
            expect_line(
                &ended,
                &format!(
                    r"^\[rt\] virtio: line {size} from vm 0: ok \(lines \d+, checked \d+, failed 0\)$"
                ),
            )?;
        }
        expect_line(
            &ended,
            r"^\[linux\] KEEL-STEP virtio-1000-round-trips END \S+ status=0$",
        )?;
        expect_line(&ended, r"^\[linux\] KEEL-INIT-END status=0$")
    })();
    checked.map_err(|m| with_console_tail(m, &ended))
}

/// The scenarios of this module.
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "messages between two VMs on two pCPUs: every size 0..=256 both ways, every refusal's code, an outsider refused, a stopped destination".into(),
            run: Box::new(|| round_trips("msg-two-pcpus")),
        },
        Scenario {
            name: "messages between two VMs on one shared pCPU: every size 0..=256 both ways, every refusal's code, an outsider refused, a stopped destination".into(),
            run: Box::new(|| round_trips("msg-one-pcpu")),
        },
        Scenario {
            name: "unmodified Debian Linux loads virtio_mmio and virtio_console; lines of 0 to 3,000 bytes over /dev/hvc0 to the real-time partition and back, checked both ways".into(),
            run: Box::new(linux_virtio),
        },
        Scenario {
            name: "a flooding sender fills only its destination's queue and gets 'queue full'; the real-time partition on its pCPU misses no deadline".into(),
            run: Box::new(flood),
        },
    ]
}
