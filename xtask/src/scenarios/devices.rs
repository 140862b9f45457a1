//! Scenarios of board devices given to VMs (`[[vm.passthrough]]`): the PL031 RTC found in the
//! VM's device tree, read, and its alarm interrupt taken through a hardware-linked list
//! register, on a pinned pCPU and on a shared one (the alarm waking its switched-out vCPU);
//! a VM without the device that loads from its address is stopped while the others run on.

use regex::Regex;

use super::Scenario;
use super::{check_ticks, expect_line, lines_of};
use crate::qemu::Ended;
use crate::Result;

/// Alarms the test guest's rtc mode sets, each `keel.alarm=2` seconds ahead.
const ALARMS: u64 = 3;

/// VM `vm` found the RTC and took every alarm, each after between one and two seconds (the
/// PL031 counts whole seconds: a match two counts ahead comes 1-2 s later), with the
/// device's masked interrupt status set in its handler.
fn check_alarms(ended: &Ended, vm: &str) -> Result<()> {
    expect_line(
        ended,
        &format!(r"^\[{vm}\] rtc: pl031 at 0x9010000, INTID 34, id ok, count 17040672\d\d$"),
    )?;
    let alarm = Regex::new(
        r"^rtc: alarm (\d+) of (\d+) at \d+, (\d+) ms after it was set \(status (\d+)\)$",
    )
    .unwrap();
    let mut taken = 0;
    for line in lines_of(ended, vm) {
        if line.starts_with("rtc: alarm") && line.ends_with("lost") {
            return Err(format!("vm '{vm}': {line}"));
        }
        let Some(c) = alarm.captures(line) else {
            continue;
        };
        let number = |i: usize| c[i].parse::<u64>().unwrap();
        let (n, ms, status) = (number(1), number(3), number(4));
        if n != taken + 1 || number(2) != ALARMS {
            return Err(format!("vm '{vm}': alarm lines out of order: '{line}'"));
        }
        if !(1000..=2100).contains(&ms) || status != 1 {
            return Err(format!(
                "vm '{vm}': alarm {n} came {ms} ms after it was set with status {status} (expected 1000-2100 ms, status 1)"
            ));
        }
        taken = n;
    }
    if taken != ALARMS {
        return Err(format!("vm '{vm}' took {taken} of {ALARMS} alarms"));
    }
    expect_line(
        ended,
        &format!(r"^\[keel\] vm '{vm}' \(id \d\) powered off$"),
    )
}

/// The RTC on a pinned pCPU; the prober, without it, is stopped at its first load from it;
/// the victim ticks throughout.
fn rtc_pinned() -> Result<()> {
    super::boot_to_end_checked("rtc-passthrough", |ended| {
        check_alarms(ended, "rtc")?;
        expect_line(ended, r"^\[prober\] hostile: read-other$")?;
        expect_line(
            ended,
            r"^\[keel\] vm 'prober' \(id 2\) stopped: .*IPA 0x9010000.*$",
        )?;
        check_ticks(ended, "victim", 10).map(|_| ())
    })
}

/// The RTC's VM shares its pCPU with a ticking VM: each alarm wakes it there.
fn rtc_shared() -> Result<()> {
    super::boot_to_end_checked("rtc-shared", |ended| {
        check_alarms(ended, "rtc")?;
        check_ticks(ended, "ticker", 10).map(|_| ())
    })
}

/// The device-assignment scenarios.
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "the board's PL031 given to a VM: found in its device tree, three alarms forwarded in hardware; a VM without it is stopped at its address".into(),
            run: Box::new(rtc_pinned),
        },
        Scenario {
            name: "the PL031's VM on a shared pCPU: each alarm wakes it beside a ticking VM".into(),
            run: Box::new(rtc_shared),
        },
    ]
}
