//! Scenarios of shared-memory channels and their doorbells (KEEL_CHANNEL_NOTIFY), judged by
//! what the test guest's `channel` roles print: round trips of every size with content checked
//! both ways between two VMs on two pCPUs and on one shared pCPU, each VM seeing the channels at
//! addresses of its own; every refusal of the doorbell with its code; a VM of no channel refused;
//! a member that writes its read-only window stopped by Keel, naming the channel, while the
//! others finish; the same for every store form without instruction syndrome (STP, STR with
//! writeback, STR Q, STXR, an LSE atomic), none of which lands.

use regex::Regex;

use super::Scenario;
use super::{
    boot_to_end, check_ticks, expect_clean_exit, expect_line, lines_of, log_path,
    with_console_tail, DEADLINE,
};
use crate::image::{build_system, output_dir};
use crate::qemu::Ended;
use crate::qemu::{Machine, REFERENCE_CPU};
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

/// The hostile guest's store forms without instruction syndrome (`keel.store`), in the order
/// of its `STORE_FORMS` (form i stores at offset 0x800 + 0x40 * i of the window).
const STORE_FORMS: &[&str] = &["stp", "str-pre", "str-post", "str-q", "stxr", "swp"];
/// The boots of `ro-channel-stores`: the forms of each (one VM per form, pCPUs 3-7, beside the
/// 1 kHz victim on pCPU 1 and the channel's read-write owner on pCPU 2) and its CPU. The
/// reference CPU (cortex-a72, Armv8.0) has no LSE atomics: SWP runs on a cortex-a76.
const STORE_BOOTS: &[(&[&str], &str)] = &[
    (
        &["stp", "str-pre", "str-post", "str-q", "stxr"],
        REFERENCE_CPU,
    ),
    (&["swp"], "cortex-a76"),
];

/// `ro-channel-stores`: every store form without instruction syndrome into a read-only
/// channel window stops its VM with the channel named and a write said; the owner finds its
/// page intact afterwards and the victim keeps every tick. The outcome of each form is written
/// to `target/keel/ro-channel-stores.txt`.
fn read_only_stores() -> Result<()> {
    let dir = output_dir().join("attack-configs");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut report = String::new();
    for (boot, &(forms, cpu)) in STORE_BOOTS.iter().enumerate() {
        let name = format!("ro-channel-stores-{boot}");
        let mut text = format!(
            "[system]\nname = \"{name}\"\nram = {{ base = 0x4000_0000, size = \"1G\" }}\n\
             hypervisor = {{ base = 0x4000_0000, size = \"32M\" }}\npcpus = {}\n\n\
             [[vm]]\nname = \"victim\"\nimage = {{ guest = \"test-guest\" }}\n\
             memory = {{ base = 0x5000_0000, size = \"16M\" }}\npcpus = [1]\ndevices = [\"console\"]\n\
             cmdline = \"keel.mode=ticks keel.off=1\"\n\n\
             [[vm]]\nname = \"owner\"\nimage = {{ guest = \"hostile\" }}\n\
             memory = {{ base = 0x5100_0000, size = \"16M\" }}\npcpus = [2]\ndevices = [\"console\"]\n\
             cmdline = \"keel.attack=ro-channel-owner keel.window=0x70000000\"\n",
            3 + forms.len()
        );
        let mut members = String::from("{ vm = \"owner\", ipa = 0x7000_0000, access = \"rw\" }");
        for (i, form) in forms.iter().enumerate() {
            text.push_str(&format!(
                "\n[[vm]]\nname = \"s{i}\"\nimage = {{ guest = \"hostile\" }}\n\
                 memory = {{ base = {:#x}, size = \"16M\" }}\npcpus = [{}]\ndevices = [\"console\"]\n\
                 cmdline = \"keel.attack=ro-channel-stores keel.window=0x60000000 keel.store={form}\"\n",
                0x5200_0000 + i * 0x100_0000,
                3 + i
            ));
            members.push_str(&format!(
                ", {{ vm = \"s{i}\", ipa = 0x6000_0000, access = \"ro\" }}"
            ));
        }
        text.push_str(&format!(
            "\n[[channel]]\nname = \"ro\"\nmemory = {{ base = 0x5f00_0000, size = \"64K\" }}\n\
             interrupt = 5\nvms = [{members}]\n"
        ));
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, text).map_err(|e| e.to_string())?;
        let machine = Machine {
            cpu,
            ..Machine::keel_icount(&build_system(&path)?)
        };
        let ended = machine.spawn(&log_path(&name))?.finish(DEADLINE);
        let fail = |message: String| with_console_tail(message, &ended);
        let mut last_stop = 0;
        for (i, form) in forms.iter().enumerate() {
            let index = STORE_FORMS.iter().position(|f| f == form).unwrap_or(0);
            let ipa = 0x6000_0800 + 0x40 * index;
            let vm = format!("s{i}");
            let stopped = Regex::new(&format!(
                r"^\[keel\] vm '{vm}' \(id {}\) stopped: (stage-2 permission fault: write at IPA {ipa:#x}, in its read-only window of channel 'ro' \(an instruction without syndrome: size unknown\)) \(ESR 0x[0-9a-f]{{8}}, PC 0x[0-9a-f]+\)$",
                2 + i
            ))
            .unwrap();
            let Some((at, diagnostic)) = ended
                .lines
                .iter()
                .enumerate()
                .find_map(|(at, l)| Some((at, stopped.captures(l)?[1].to_string())))
            else {
                let stop = format!("[keel] vm '{vm}' (id {}) stopped: ", 2 + i);
                let got = ended
                    .lines
                    .iter()
                    .find(|l| l.starts_with(&stop))
                    .map_or("no stop", |l| l.as_str());
                return Err(fail(format!(
                    "{form}: expected /{}/, got: {got}",
                    stopped.as_str()
                )));
            };
            last_stop = last_stop.max(at);
            report.push_str(&format!("{form}\t{cpu}\tstopped: {diagnostic}\n"));
        }
        if let Some(line) = ended.lines.iter().find(|l| l.contains(": FAIL")) {
            return Err(fail(line.clone()));
        }
        let intact = ended
            .lines
            .iter()
            .position(|l| l.starts_with("[owner] probe ro-channel-intact: ok "))
            .ok_or_else(|| fail("the owner did not find its page intact".into()))?;
        if intact < last_stop {
            return Err(fail(
                "the owner checked its page before every store was stopped".into(),
            ));
        }
        check_ticks(&ended, "victim", 1).map_err(fail)?;
        expect_clean_exit(&ended).map_err(fail)?;
    }
    let _ = std::fs::write(output_dir().join("ro-channel-stores.txt"), &report);
    Ok(())
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
        Scenario {
            name: "ro-channel-stores: every store without instruction syndrome (STP, STR pre/post-index, STR Q, STXR; SWP on a cortex-a76, which has LSE) into a read-only channel window stops its VM naming the channel; nothing lands, the owner and the victim go on".into(),
            run: Box::new(read_only_stores),
        },
    ]
}
