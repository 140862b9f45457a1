//! Scenarios of board devices given to VMs (`[[vm.passthrough]]`): the PL031 RTC found in the
//! VM's device tree, read, and its alarm interrupt taken through a hardware-linked list
//! register, on a pinned pCPU and on a shared one (the alarm waking its switched-out vCPU);
//! a VM without the device that loads from its address is stopped while the others run on.
//! And DMA isolation: the PCI host bridge given to a VM behind the SMMU, QEMU's edu device on
//! it doing DMA with the VM's memory, flooding interrupts, then attacking another VM's memory
//! by DMA (written or read), refused by the SMMU with Keel's line, the victim unchanged; and
//! the edu behind a PCIe root port, on the bus the VM numbers (stream 256), its faults handed to
//! the VM's health policy.

use regex::Regex;

use super::Scenario;
use super::{check_ticks, config, expect_clean_exit, expect_line, lines_of, log_path};
use super::{with_console_tail, DEADLINE};
use crate::image::{build_system, output_dir};
use crate::qemu::{Ended, Machine};
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

/// Boots `configs/tests/<system>.toml` (`edu-dma` or a variant of it), its attack `attack`
/// (`write` or `read`), with QEMU's edu device plugged in, until QEMU ends.
pub(super) fn boot_edu(system: &str, attack: &str) -> Result<Ended> {
    let name = format!("{system}-{attack}");
    let template = config(system);
    let text =
        std::fs::read_to_string(&template).map_err(|e| format!("{}: {e}", template.display()))?;
    let text = text
        .replace("keel.edu=write", &format!("keel.edu={attack}"))
        .replace(
            &format!("name = \"{system}\""),
            &format!("name = \"{name}\""),
        );
    let path = output_dir().join(format!("{name}.toml"));
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    let machine = Machine {
        edu: true,
        ..Machine::keel_icount(&build_system(&path)?)
    };
    Ok(machine.spawn(&log_path(&name))?.finish(DEADLINE))
}

/// What every edu run shows: the device found with its INTID, a DMA round trip with the VM's
/// own memory, the interrupt flood taken (each interrupt one guest EOI, so bounded by the
/// guest's pace), the attack refused with Keel's line and the VM stopped before it could end
/// its program, the victim's canary intact and its ticks whole, the prober stopped at the ECAM.
pub(super) fn check_edu(ended: &Ended, attack: &str, access: &str) -> Result<()> {
    expect_line(
        ended,
        r"^\[edu\] edu: device at 00:01\.0, BAR0 0x10000000, id ok, INTID 36$",
    )?;
    expect_line(ended, r"^\[edu\] edu: own DMA round trip ok \(64 bytes\)$")?;
    let flood =
        regex::Regex::new(r"^edu: interrupt flood: \d+ raised, (\d+) taken in 20 ms$").unwrap();
    let taken: u64 = lines_of(ended, "edu")
        .iter()
        .find_map(|line| flood.captures(line).map(|c| c[1].parse().unwrap()))
        .ok_or("vm 'edu' did not report its interrupt flood")?;
    if taken < 100 {
        return Err(format!(
            "vm 'edu' took {taken} interrupts in its 20 ms flood (expected at least 100)"
        ));
    }
    expect_line(
        ended,
        &format!(
            r"^\[keel\] vm 'edu' \(id 1\) stopped: DMA refused by the SMMU: translation fault: stream 8, {access} at 0x50800000$"
        ),
    )?;
    // The device reports an aborted transfer as done, and the guest, polling it on its own
    // pCPU, may print that before Keel has served the SMMU's event interrupt on pCPU 0 (which
    // way it falls moves with any change of either's instruction count). What it must never
    // reach is the end of its program, its own SYSTEM_OFF: Keel stops it first.
    if ended
        .lines
        .iter()
        .any(|line| line == "[keel] vm 'edu' (id 1) powered off")
    {
        return Err(format!(
            "vm 'edu' went on after its DMA {attack} and powered itself off"
        ));
    }
    let canaries: Vec<&str> = lines_of(ended, "victim")
        .into_iter()
        .filter(|line| line.starts_with("canary:"))
        .collect();
    if canaries.len() < 5 || canaries.iter().any(|line| !line.ends_with("intact")) {
        return Err(format!("the victim's canary reports: {canaries:?}"));
    }
    check_ticks(ended, "victim", 6)?;
    expect_line(
        ended,
        r"^\[keel\] vm 'prober' \(id 2\) stopped: stage-2 fault: \d-byte read at IPA 0x4010000000, outside its memory and devices .*$",
    )
}

/// The edu VM's DMA write into the victim's memory.
fn edu_write() -> Result<()> {
    let ended = boot_edu("edu-dma", "write")?;
    check_edu(&ended, "write", "write").map_err(|m| with_console_tail(m, &ended))?;
    expect_clean_exit(&ended)
}

/// The edu VM's DMA read of the victim's memory.
fn edu_read() -> Result<()> {
    let ended = boot_edu("edu-dma", "read")?;
    check_edu(&ended, "read", "read").map_err(|m| with_console_tail(m, &ended))?;
    expect_clean_exit(&ended)
}

/// Most Keel lines about the SMMU a run may show: the rate limit's burst (a device that
/// faults flat out gets no more per second, whoever owns its stream).
const SMMU_LINES: usize = keel_core::ratelimit::BURST as usize;

/// The edu behind a PCIe root port (`edu-root-port`): the guest numbers the root port's buses
/// and finds the edu at 01:00.0, its DMA (stream 256, as the bridge's `iommu-map` gives all
/// its requester IDs to the bridge's VM) works with its own memory, and its write into the
/// victim's memory is refused and handed to its health policy: restarted once (the round trip
/// works again: its streams given back), stopped at the second fault. One line per fault, at
/// most the rate limit's SMMU lines; the victim's canary intact and its ticks whole.
fn edu_root_port() -> Result<()> {
    let name = "edu-root-port";
    let machine = Machine {
        edu: true,
        edu_behind_root_port: true,
        ..Machine::keel_icount(&build_system(&config(name))?)
    };
    let ended = machine.spawn(&log_path(name))?.finish(DEADLINE);
    check_edu_root_port(&ended).map_err(|m| with_console_tail(m, &ended))?;
    expect_clean_exit(&ended)
}

fn check_edu_root_port(ended: &Ended) -> Result<()> {
    let found = r"^edu: device at 01:00\.0 behind the root port at 00:03\.0 \(buses 0, 1, 1\), BAR0 0x10000000, id ok, INTID \d+$";
    let found = Regex::new(found).unwrap();
    let edu = lines_of(ended, "edu");
    let boots = edu.iter().filter(|line| found.is_match(line)).count();
    let round_trips = edu
        .iter()
        .filter(|line| **line == "edu: own DMA round trip ok (64 bytes)")
        .count();
    if boots != 2 || round_trips != 2 {
        return Err(format!(
            "vm 'edu' found the edu behind the root port in {boots} boots and did {round_trips} \
             DMA round trips with its own memory (expected 2 and 2: before and after its restart)"
        ));
    }
    if edu.iter().any(|line| line.contains("FAILED")) {
        return Err("vm 'edu': a DMA round trip with its own memory failed".into());
    }
    let fault = r"DMA refused by the SMMU: translation fault: stream 256, write at 0x50800000";
    expect_line(
        ended,
        &format!(
            r"^\[keel\] vm 'edu' \(id 1\) restarts: {fault} \(restart 1 of at most 1 within 60000 ms\)$"
        ),
    )?;
    expect_line(
        ended,
        &format!(
            r"^\[keel\] vm 'edu' \(id 1\) stopped: {fault} \(1 restarts within 60000 ms: its limit\)$"
        ),
    )?;
    let smmu: Vec<&String> = ended
        .lines
        .iter()
        .filter(|line| line.starts_with("[keel]") && line.contains("SMMU"))
        .collect();
    if smmu.len() > SMMU_LINES {
        return Err(format!(
            "{} Keel lines about the SMMU (at most {SMMU_LINES}): {smmu:?}",
            smmu.len()
        ));
    }
    if ended
        .lines
        .iter()
        .any(|line| line == "[keel] vm 'edu' (id 1) powered off")
    {
        return Err("vm 'edu' went on after its second DMA write and powered itself off".into());
    }
    let canaries: Vec<&str> = lines_of(ended, "victim")
        .into_iter()
        .filter(|line| line.starts_with("canary:"))
        .collect();
    if canaries.len() < 2 || canaries.iter().any(|line| !line.ends_with("intact")) {
        return Err(format!("the victim's canary reports: {canaries:?}"));
    }
    check_ticks(ended, "victim", 3).map(|_| ())
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
        Scenario {
            name: "edu DMA attack: a VM given the PCI bridge behind the SMMU writes another VM's memory by DMA: refused, the VM stopped, the victim's canary intact".into(),
            run: Box::new(edu_write),
        },
        Scenario {
            name: "edu DMA attack: the same VM reads another VM's memory by DMA: refused, the VM stopped".into(),
            run: Box::new(edu_read),
        },
        Scenario {
            name: "edu behind a PCIe root port: the VM numbers its buses, its DMA as stream 256 translates with its memory, a write into another VM's is refused and handed to its health policy (restarted, then stopped), its SMMU lines within the rate limit".into(),
            run: Box::new(edu_root_port),
        },
    ]
}
