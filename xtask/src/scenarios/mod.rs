//! End-to-end scenarios: Keel images booted in QEMU, judged by what their consoles print.
//!
//! Scenarios that judge timing run under `-icount shift=0,sleep=off`, where virtual time is
//! one nanosecond per instruction and repeats exactly, so a loaded machine cannot fail them.

mod budget;
mod channels;
pub(crate) mod colouring;
mod console;
mod devices;
mod health;
mod lines;
mod linux_devices;
mod manager_window;
mod messages;
mod pinned;
mod plots;
mod readme_demo;
mod rootfs;
mod sched;
mod tasks;
mod trace;
mod watchdog;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use regex::Regex;

use crate::image::{build_system, output_dir};
use crate::process;
use crate::qemu::{Ended, Machine, Session};
use crate::{workspace, Result};

pub use rootfs::bench as rootfs_bench;

/// One named check.
pub struct Scenario {
    /// Shown in the report.
    pub name: String,
    /// Runs it (on any thread, beside other scenarios: see `test_command.rs`).
    pub run: Box<dyn Fn() -> Result<()> + Send + Sync>,
}

/// Time a scenario may take before QEMU is killed (real time; icount runs need far less).
const DEADLINE: Duration = Duration::from_secs(240);

pub(crate) fn config(name: &str) -> std::path::PathBuf {
    workspace()
        .join("configs/tests")
        .join(format!("{name}.toml"))
}

pub(crate) fn log_path(name: &str) -> std::path::PathBuf {
    let suffix = crate::image::board_override().map_or(String::new(), |b| format!("-{}", b.name));
    output_dir()
        .join("logs")
        .join(format!("{name}{suffix}.log"))
}

/// Builds configuration `name` and boots it under icount, its console logged.
fn boot(name: &str) -> Result<Session> {
    boot_config(&config(name), name)
}

/// Builds the configuration at `path` and boots it under icount, its console logged as `log`.
fn boot_config(path: &std::path::Path, log: &str) -> Result<Session> {
    crate::image::machine(&build_system(path)?, true)?.spawn(&log_path(log))
}

/// Boots configuration `name` under icount and waits for QEMU to end by itself.
fn boot_to_end(name: &str) -> Result<Ended> {
    Ok(boot(name)?.finish(DEADLINE))
}

/// Boots configuration `name` under icount until QEMU ends by itself; `check` judges its
/// console (a failure shows the console's last lines), then QEMU must have exited cleanly.
fn boot_to_end_checked(name: &str, check: fn(&Ended) -> Result<()>) -> Result<()> {
    let ended = boot_to_end(name)?;
    check(&ended).map_err(|m| with_console_tail(m, &ended))?;
    expect_clean_exit(&ended)
}

/// Console lines of VM `vm` (the multiplexer's `[vm] ` prefix removed).
pub(crate) fn lines_of<'a>(ended: &'a Ended, vm: &str) -> Vec<&'a str> {
    let prefix = format!("[{vm}] ");
    ended
        .lines
        .iter()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .collect()
}

/// One `tick:` report of the test guest: second, ticks counted, ticks the counter says.
pub(crate) struct TickReport {
    pub second: u64,
    pub ticks: u64,
    pub expected: u64,
    /// The worst lateness of a tick interrupt since the previous report, in µs.
    pub late_us: u64,
}

/// VM `vm`'s `tick:` reports, in order.
pub(crate) fn tick_reports(ended: &Ended, vm: &str) -> Vec<TickReport> {
    // A report may end with a note on what its lateness measures (`keel.late-note`).
    let tick =
        Regex::new(r"^tick: s=(\d+) ticks=(\d+) expected=(\d+) late_max_us=(\d+)(?: \(.*\))?$")
            .unwrap();
    lines_of(ended, vm)
        .into_iter()
        .filter_map(|line| {
            let c = tick.captures(line)?;
            let number = |i: usize| c[i].parse::<u64>().unwrap();
            Some(TickReport {
                second: number(1),
                ticks: number(2),
                expected: number(3),
                late_us: number(4),
            })
        })
        .collect()
}

/// Checks that VM `vm` reported at least `min_reports` times and that every report's tick
/// count is within one tick of the virtual counter (gaps between reports allowed).
fn check_tick_counts(ended: &Ended, vm: &str, min_reports: usize) -> Result<()> {
    let reports = tick_reports(ended, vm);
    if reports.len() < min_reports {
        return Err(format!(
            "vm '{vm}' reported its ticks only {} times",
            reports.len()
        ));
    }
    match reports.iter().find(|r| r.ticks.abs_diff(r.expected) > 1) {
        Some(r) => Err(format!(
            "vm '{vm}': second {}: {} ticks, virtual counter says {}",
            r.second, r.ticks, r.expected
        )),
        None => Ok(()),
    }
}

/// Checks a VM's `tick:` reports: consecutive seconds from 1 to at least `min_seconds`, each
/// within one tick of the virtual counter. Returns the last second reported.
fn check_ticks(ended: &Ended, vm: &str, min_seconds: u64) -> Result<u64> {
    check_tick_counts(ended, vm, 0)?;
    let mut last = 0;
    for report in tick_reports(ended, vm) {
        if report.second != last + 1 {
            return Err(format!(
                "vm '{vm}': tick report for second {} follows second {last}: a gap",
                report.second
            ));
        }
        last = report.second;
    }
    if last < min_seconds {
        return Err(format!(
            "vm '{vm}': ticks reported for {last} s, expected at least {min_seconds} s"
        ));
    }
    Ok(last)
}

/// A failure message followed by the last console lines, to see where the guest was.
pub(crate) fn with_console_tail(message: String, ended: &Ended) -> String {
    let start = ended.lines.len().saturating_sub(8);
    format!(
        "{message}; last console lines:\n      {}{}",
        ended.lines[start..].join("\n      "),
        ended.stderr_note()
    )
}

fn expect_line(ended: &Ended, pattern: &str) -> Result<()> {
    let regex = Regex::new(pattern).unwrap();
    if ended.lines.iter().any(|l| regex.is_match(l)) {
        Ok(())
    } else {
        Err(format!(
            "no console line matched /{pattern}/{}",
            ended.stderr_note()
        ))
    }
}

fn expect_clean_exit(ended: &Ended) -> Result<()> {
    expect_line(ended, r"^\[keel\] all VMs have ended: powering off$")?;
    match ended.exit_code {
        Some(0) => Ok(()),
        Some(code) => Err(format!(
            "QEMU exited with status {code}{}",
            ended.stderr_note()
        )),
        None => Err("QEMU did not exit by itself (killed at the deadline)".into()),
    }
}

/// Two VMs on two pCPUs tick at 1 kHz in step with virtual time, then power off: QEMU exits 0.
fn two_vms() -> Result<()> {
    let ended = boot_to_end("two-vms")?;
    for vm in ["rt-a", "rt-b"] {
        expect_line(
            &ended,
            &format!(r"^\[{vm}\] test-guest: vm \d vcpu 0 keel 1\.0 mode ticks entry clean$"),
        )?;
        check_ticks(&ended, vm, 5)?;
        expect_line(
            &ended,
            &format!(r"^\[keel\] vm '{vm}' \(id \d\) powered off$"),
        )?;
    }
    expect_clean_exit(&ended)
}

/// Keel built for QEMU `virt` with a GICv2 and booted on `virt` with a GICv3: one line naming
/// both, then it powers off.
fn wrong_board() -> Result<()> {
    let board = keel_core::board::board("qemu-virt-gicv2").expect("a known board");
    let image = crate::image::with_board(board, || build_system(&config("two-vms")))?;
    let machine = Machine {
        board: &keel_core::board::QEMU_VIRT,
        ..crate::image::machine(&image, true)?
    };
    let ended = machine.spawn(&log_path("wrong-board"))?.finish(DEADLINE);
    let check = || {
        expect_line(
            &ended,
            r"^\[keel\] boot error: Keel was built for board qemu-virt-gicv2 \(GICv2, PL011\) but this device tree has a GICv3 and a PL011$",
        )?;
        if ended.lines.iter().any(|line| line.contains("starts at")) {
            return Err("a VM started on the wrong board".into());
        }
        Ok(())
    };
    check().map_err(|m| with_console_tail(m, &ended))?;
    match ended.exit_code {
        Some(0) => Ok(()),
        other => Err(format!("QEMU ended with {other:?}, not powered off")),
    }
}

/// SYSTEM_RESET restarts only the calling VM, from its pristine image; the other VM's ticks
/// continue without a gap.
fn reset_one_vm() -> Result<()> {
    let ended = boot_to_end("reset")?;
    check_one_vm_reset(&ended)
}

/// What `reset.toml` (and its coloured twin) shows: rt-a's SYSTEM_RESET at 2 s restarts it
/// alone, from its pristine image, and it ticks again; rt-b's ticks continue without a gap.
fn check_one_vm_reset(ended: &Ended) -> Result<()> {
    let a = lines_of(ended, "rt-a");
    let boots = a
        .iter()
        .filter(|l| l.starts_with("test-guest: vm 0 vcpu 0"))
        .count();
    if boots != 2 {
        return Err(format!(
            "vm 'rt-a' booted {boots} times, expected 2 (before and after its reset)"
        ));
    }
    let reset = a
        .iter()
        .position(|l| *l == "reset: system_reset")
        .ok_or("vm 'rt-a' never asked for a reset")?;
    // A guest on a GICv2 says so after its first line.
    let after: Vec<&&str> = a[reset + 1..]
        .iter()
        .filter(|l| !l.starts_with("test-guest: GICv2 (from the device tree)"))
        .take(2)
        .collect();
    if after.first() != Some(&&"test-guest: vm 0 vcpu 0 keel 1.0 mode ticks entry clean")
        || after.get(1) != Some(&&"test-guest: restarted after a reset")
    {
        return Err(format!(
            "vm 'rt-a' did not restart right after its reset: {:?}",
            &a[reset..a.len().min(reset + 3)]
        ));
    }
    expect_line(ended, r"^\[keel\] vm 'rt-a' \(id 0\) resets$")?;
    // Ticks count again from 1 after the restart: check the restarted run alone.
    let after = Ended {
        lines: ended
            .lines
            .iter()
            .skip_while(|l| !l.contains("restarted after a reset"))
            .cloned()
            .collect(),
        exit_code: ended.exit_code,
        stderr: ended.stderr.clone(),
    };
    check_ticks(&after, "rt-a", 3)?;
    check_ticks(ended, "rt-b", 7)?;
    expect_clean_exit(ended)
}

/// Debian's unmodified cloud kernel, 2 vCPUs on 2 pCPUs with the Debian initramfs, runs
/// stress-ng, cyclictest and shows the arch timer and IPIs counting on both CPUs, then powers its
/// VM off; the real-time partition beside it keeps its tick count within one tick of the
/// virtual counter at every report (under icount).
///
/// Not asserted: the partition's interrupt lateness. Under `-icount` QEMU runs all vCPUs in one
/// thread, round robin, so a CPU-bound neighbour delays it by whole scheduling slices (two
/// spinning VMs starve it entirely, with Keel not involved); without icount, four vCPU threads
/// share this machine's two cores. Neither models a real SoC's independent cores.
fn linux_beside_rt(name: &str) -> Result<()> {
    let mut session = boot(name)?;
    let wait = Duration::from_secs(600);
    let outcome = session
        .wait_for(r"^\[keel\] vm 'linux' \(id 0\) powered off$", wait)
        .and_then(|_| session.wait_for(r"^\[rt\] tick: ", wait));
    let ended = session.kill();
    outcome.map_err(|message| with_console_tail(message, &ended))?;
    check_linux_beside_rt(&ended)
}

/// What a run of Debian Linux's `keel.test=stress` beside the ticking partition `rt` shows:
/// the test's steps done, the timer and IPIs counting on both of Linux's CPUs, the partition's
/// ticks whole.
fn check_linux_beside_rt(ended: &Ended) -> Result<()> {
    for pattern in [
        r"^\[linux\] KEEL-INIT-START$",
        r"^\[linux\] stress-ng: info: .* successful run completed",
        r"^\[linux\] T: 0 .* C:\s+1000 Min:\s+\d+ Act:\s+\d+ Avg:\s+\d+ Max:\s+\d+",
        r"^\[linux\] KEEL-INIT-END status=0$",
    ] {
        expect_line(ended, pattern)?;
    }
    let counts_on_both = |name: &str| -> Result<()> {
        let line = lines_of(ended, "linux")
            .into_iter()
            .find(|l| {
                l.trim_start()
                    .split(':')
                    .next()
                    .is_some_and(|id| !id.contains(' '))
                    && l.ends_with(name)
            })
            .ok_or(format!("/proc/interrupts has no '{name}' line"))?;
        let counts: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(2)
            .filter_map(|c| c.parse().ok())
            .collect();
        if counts.len() == 2 && counts.iter().all(|&c| c > 0) {
            Ok(())
        } else {
            Err(format!("'{name}' does not count on both CPUs: {line}"))
        }
    };
    counts_on_both("arch_timer")?;
    counts_on_both("Rescheduling interrupts")?;
    counts_on_both("Function call interrupts")?;

    check_tick_counts(ended, "rt", 3)
}

/// Two Debian Linux VMs side by side, each with 2 vCPUs on its own pCPUs: both reach userspace,
/// run stress-ng and cyclictest, and each kernel sees only its own 384 MiB of memory. Then
/// linux-a reads the physical address of linux-b's memory with devmem: Keel stops linux-a
/// without it reading anything, and linux-b finishes its run.
fn two_linux_vms() -> Result<()> {
    let ended = boot_to_end("two-linux")?;
    for vm in ["linux-a", "linux-b"] {
        for pattern in [
            r"\] \[\s*[\d.]+\] Memory: \d+K/393216K available",
            r"\] KEEL-INIT-START$",
            r"\] stress-ng: info: .* successful run completed",
            r"\] KEEL-STEP interrupts END [\d.]+ status=0$",
        ] {
            expect_line(&ended, &format!(r"^\[{vm}{pattern}"))?;
        }
    }
    expect_line(&ended, r"^\[linux-a\] KEEL-STEP peek BEGIN ")?;
    expect_line(
        &ended,
        r"^\[keel\] vm 'linux-a' \(id 0\) stopped: stage-2 fault: 4-byte read at IPA 0x60000000, outside its memory and devices",
    )?;
    if let Some(line) = lines_of(&ended, "linux-a")
        .into_iter()
        .find(|l| l.starts_with("KEEL-STEP peek END") || l.starts_with("KEEL-INIT-END"))
    {
        return Err(format!(
            "linux-a went on after reading linux-b's memory: '{line}'"
        ));
    }
    expect_line(&ended, r"^\[linux-b\] KEEL-INIT-END status=0$")?;
    expect_line(&ended, r"^\[keel\] vm 'linux-b' \(id 1\) powered off$")?;
    expect_clean_exit(&ended)
}

/// An SMP Linux VM that reboots (PSCI SYSTEM_RESET from its panic handler) comes back with both
/// vCPUs, twice; the real-time partition beside it keeps counting ticks right.
fn linux_reset() -> Result<()> {
    let mut session = boot("linux-reset")?;
    let wait = Duration::from_secs(300);
    let outcome = session
        .wait_for_count(r"^\[keel\] vm 'linux' \(id 0\) resets$", 2, wait)
        .and_then(|_| {
            session.wait_for_count(r"^\[linux\] .*smp: Brought up 1 node, 2 CPUs$", 3, wait)
        });
    let ended = session.kill();
    outcome.map_err(|message| with_console_tail(message, &ended))?;
    let boots = lines_of(&ended, "linux")
        .iter()
        .filter(|l| l.ends_with("smp: Brought up 1 node, 2 CPUs"))
        .count();
    let resets = ended
        .lines
        .iter()
        .filter(|l| l.as_str() == "[keel] vm 'linux' (id 0) resets")
        .count();
    if boots < resets + 1 {
        return Err(format!(
            "{resets} resets but only {boots} boots with both vCPUs"
        ));
    }
    check_tick_counts(&ended, "rt", 1)
}

/// Debian's unmodified U-Boot boots from its flash to the prompt and answers `version`,
/// `bdinfo` and `md` (reading its device tree at the start of RAM), then powers its VM off
/// with PSCI; the real-time partition beside it keeps its ticks.
fn u_boot() -> Result<()> {
    let mut session = boot("u-boot")?;
    let wait = Duration::from_secs(120);
    let mut steps = || -> Result<()> {
        session.wait_for(r"^\[uboot\] U-Boot 2023\.01", wait)?;
        session.wait_for(r"^\[uboot\] Net: ", wait)?;
        // Any key stops the autoboot countdown that follows.
        session.send(b" ")?;
        session.send(b"version\r")?;
        session.wait_for(r"^\[uboot\] aarch64-linux-gnu-gcc ", wait)?;
        session.send(b"bdinfo\r")?;
        session.wait_for(r"^\[uboot\] -> start    = 0x0000000040000000$", wait)?;
        session.wait_for(r"^\[uboot\] -> size     = 0x0000000008000000$", wait)?;
        // The device tree's magic, 0xd00dfeed big-endian, read as a little-endian word.
        session.send(b"md.l 0x40000000 1\r")?;
        session.wait_for(r"^\[uboot\] 40000000: edfe0dd0 ", wait)?;
        session.send(b"poweroff\r")?;
        session.wait_for(r"^\[keel\] vm 'uboot' \(id 0\) powered off$", wait)?;
        session.wait_for_count(r"^\[rt\] tick: ", 3, wait)?;
        Ok(())
    };
    let outcome = steps();
    let ended = session.kill();
    outcome.map_err(|message| with_console_tail(message, &ended))?;
    check_tick_counts(&ended, "rt", 3)
}

/// The attack each hostile mode makes, and the diagnostic Keel must print for it.
fn hostile_expectation(mode: &str) -> &'static str {
    match mode {
        "write-outside" => {
            r"^\[keel\] vm 'hostile' \(id 1\) stopped: stage-2 fault: \d-byte write at IPA 0x41001000, outside its memory and devices \(ESR 0x[0-9a-f]{8}, PC 0x[0-9a-f]+\)$"
        }
        "read-other" => {
            r"^\[keel\] vm 'hostile' \(id 1\) stopped: stage-2 fault: \d-byte read at IPA 0x50000000, outside its memory and devices \(ESR 0x[0-9a-f]{8}, PC 0x[0-9a-f]+\)$"
        }
        "gic-foreign" => {
            r"^\[keel\] vm 'hostile' \(id 1\) stopped: GIC distributor at IPA 0x8000104: interrupt 34 is not owned by this VM \(ESR 0x[0-9a-f]{8}, PC 0x[0-9a-f]+\)$"
        }
        "smc" => {
            r"^\[keel\] vm 'hostile': SMC \(function 0x84000000\) not forwarded: answered NOT_SUPPORTED$"
        }
        "el2-reg" => {
            r"^\[keel\] vm 'hostile' \(id 1\) stopped: guest reported a fatal exception: ESR_EL1 0x02000000 \(.*\) at ELR_EL1 0x[0-9a-f]+, FAR_EL1 0x[0-9a-f]+ \(ESR 0x5a000000, PC 0x[0-9a-f]+\)$"
        }
        "sysreg" => {
            r"^\[keel\] vm 'hostile' \(id 1\) stopped: illegal system register access: write to ACTLR_EL1 \(ESR 0x[0-9a-f]{8}, PC 0x[0-9a-f]+\)$"
        }
        "pmu" => {
            r"^\[keel\] vm 'hostile' \(id 1\) stopped: illegal system register access: read of PMCCNTR_EL0 \(ESR 0x[0-9a-f]{8}, PC 0x[0-9a-f]+\)$"
        }
        _ => unreachable!("unknown hostile mode {mode}"),
    }
}

/// A hostile VM is stopped (or, for SMC, refused) with its diagnostic; the victim's ticks
/// go on without a gap until it powers off, and the machine then powers off.
fn hostile(mode: &str) -> Result<()> {
    let ended = boot_to_end(&format!("hostile-{mode}"))?;
    expect_line(&ended, &format!(r"^\[hostile\] hostile: {mode}$"))?;
    expect_line(&ended, hostile_expectation(mode))?;
    let victim_seconds = check_ticks(&ended, "victim", 6)?;
    if mode == "pmu" {
        // The PMU Keel traps is also one the ID registers say is not there.
        expect_line(
            &ended,
            r"^\[hostile\] hostile: pmu: ID_AA64DFR0_EL1.PMUVer 0$",
        )?;
    }
    if mode == "smc" {
        expect_line(&ended, r"^\[hostile\] hostile: smc returned -1$")?;
        check_ticks(&ended, "hostile", 4)?;
    } else {
        let hostile = lines_of(&ended, "hostile");
        let attack = hostile
            .iter()
            .position(|l| *l == format!("hostile: {mode}"))
            .unwrap();
        if let Some(after) = hostile[attack + 1..]
            .iter()
            .find(|l| l.starts_with("tick:") || l.contains("survived"))
        {
            return Err(format!(
                "the hostile VM kept running after its attack: '{after}'"
            ));
        }
    }
    if victim_seconds < 6 {
        return Err("the victim stopped ticking".into());
    }
    expect_clean_exit(&ended)
}

/// Console input goes only to the VM that has the focus; Ctrl-A 1 moves the focus.
fn console_focus() -> Result<()> {
    let image = build_system(&config("console"))?;
    let mut session = Machine::keel(&image.path, image.system.pcpus).spawn(&log_path("console"))?;
    let wait = Duration::from_secs(60);
    let mut steps = || -> Result<()> {
        session.wait_for(r"^\[rt-a\] test-guest: vm 0", wait)?;
        session.wait_for(r"^\[rt-b\] test-guest: vm 1", wait)?;
        session.send(b"q")?;
        session.wait_for(r"^\[rt-a\] echo: q$", wait)?;
        session.send(&[0x01, b'1'])?;
        session.wait_for(r"^\[keel\] input focus: vm 'rt-b' \(id 1\)$", wait)?;
        session.send(b"z")?;
        session.wait_for(r"^\[rt-b\] echo: z$", wait)?;
        session.send(&[0x01, b'0', b'k'])?;
        session.wait_for(r"^\[rt-a\] echo: k$", wait)?;
        Ok(())
    };
    let outcome = steps();
    let ended = session.kill();
    outcome.map_err(|message| with_console_tail(message, &ended))?;
    for (vm, stray) in [("rt-b", "q"), ("rt-a", "z"), ("rt-b", "k")] {
        if lines_of(&ended, vm).contains(&format!("echo: {stray}").as_str()) {
            return Err(format!(
                "vm '{vm}' received '{stray}' typed while it did not have the focus"
            ));
        }
    }
    Ok(())
}

/// Types `line` and a newline on the console, in pieces, as a person types (a burst of any
/// length is taken too, by the input queue behind the emulated PL011's receive FIFO: see the
/// console paste scenarios).
fn type_line(session: &mut Session, line: &str) -> Result<()> {
    for piece in format!("{line}\n").as_bytes().chunks(16) {
        session.send(piece)?;
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The demo as a user meets it (`configs/demo.toml`, under icount): Linux's shell answers
/// what is typed (`keel` says there is no management window: this Linux manages no VM); the
/// real-time partition's control loop answers the commands the shell writes to /dev/hvc0 (a setpoint, then the plant's value moved toward it, an unknown command
/// refused); and its heartbeat comes once a minute, not through it.
fn demo() -> Result<()> {
    let mut session = boot_config(&workspace().join("configs/demo.toml"), "demo")?;
    let wait = Duration::from_secs(600);
    let telemetry = Regex::new(
        r"^\[linux\] telemetry: t_ms=\d+ setpoint=(-?\d+\.\d{3}) value=(-?\d+\.\d{3}) ticks=\d+ late_max_us=\d+$",
    )
    .unwrap();
    let value = |line: &str| -> Result<f64> {
        let captures = telemetry
            .captures(line)
            .ok_or_else(|| format!("not a telemetry line: {line}"))?;
        captures[2].parse().map_err(|e| format!("{line}: {e}"))
    };
    let mut steps = || -> Result<()> {
        // Linux's root is the disk on the PCI bridge given to it (behind the SMMU).
        session.wait_for(r"^\[linux\] KEEL-ROOT /dev/vda / ext4 rw", wait)?;
        session.wait_for(r"^\[linux\] KEEL-INIT-END shell$", wait)?;
        session.send(b"echo demo-$((6 * 7))\n")?;
        session.wait_for(r"^\[linux\] demo-42$", wait)?;
        // `keel` in a VM that manages none finds no management window in its device tree and
        // maps nothing (an access there would stop the VM): a line and exit status 3.
        type_line(&mut session, "keel status 1; echo \"keel-exit=$?\"")?;
        session.wait_for(r"^\[linux\] keel: this VM has no management window: ", wait)?;
        session.wait_for(r"^\[linux\] keel-exit=3$", wait)?;
        type_line(&mut session, "echo 'setpoint 42.5' > /dev/hvc0")?;
        type_line(&mut session, "head -n 1 /dev/hvc0")?;
        let first = session.wait_for(r"^\[linux\] telemetry: .* setpoint=42\.500 ", wait)?;
        type_line(&mut session, "echo get > /dev/hvc0")?;
        type_line(&mut session, "head -n 1 /dev/hvc0")?;
        let second = session.wait_for_count(r"^\[linux\] telemetry: ", 2, wait)?;
        let (before, after) = (value(&first)?, value(&second)?);
        if !((42.5 - after).abs() < (42.5 - before).abs() && after <= 42.5) {
            return Err(format!(
                "the value did not move toward the setpoint 42.5: {before} then {after}"
            ));
        }
        type_line(&mut session, "echo bogus > /dev/hvc0")?;
        type_line(&mut session, "head -n 1 /dev/hvc0")?;
        session.wait_for(
            r"^\[linux\] error: unknown command 'bogus' \(try: setpoint <value> \| get\)$",
            wait,
        )?;
        session.wait_for(r"^\[rt\] tick: s=60 ", wait)?;
        Ok(())
    };
    let outcome = steps();
    let ended = session.kill();
    outcome.map_err(|message| with_console_tail(message, &ended))?;
    if let Some(warning) = lines_of(&ended, "rt")
        .into_iter()
        .find(|line| line.starts_with("control: ") && !line.starts_with("control: plant "))
    {
        return Err(format!("vm 'rt': {warning}"));
    }
    let reports = tick_reports(&ended, "rt");
    if reports.iter().any(|r| !r.second.is_multiple_of(60)) {
        return Err(format!(
            "vm 'rt' reported at seconds {:?}, expected only whole minutes",
            reports.iter().map(|r| r.second).collect::<Vec<_>>()
        ));
    }
    check_tick_counts(&ended, "rt", 1)
}

/// A bad configuration fails `cargo xtask build` with the compiler's message.
fn bad_config(name: &str, message: &str) -> Result<()> {
    let path = config(name);
    let output = Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
        .arg("build")
        .arg(&path)
        .output()
        .map_err(|e| e.to_string())?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.success() {
        return Err(format!("building {} succeeded", path.display()));
    }
    if !stderr.contains(message) {
        return Err(format!("expected the message '{message}', got:\n{stderr}"));
    }
    Ok(())
}

/// Keel reports a device tree it cannot use and powers off instead of hanging.
fn broken_device_tree() -> Result<()> {
    let image = build_system(&config("two-vms"))?;
    let dir = output_dir().join("broken-dtb");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (dtb, dts) = (dir.join("virt.dtb"), dir.join("virt.dts"));
    let mut machine = Machine::keel(&image.path, 3);
    machine.dump_device_tree(&dtb)?;
    let decompiled = process::output(
        Command::new("dtc")
            .args(["-q", "-I", "dtb", "-O", "dts"])
            .arg(&dtb),
    )?;
    let text = String::from_utf8_lossy(&decompiled.stdout);
    // Drop the PL011 node: Keel must say which node is missing.
    let pl011 = Regex::new(r"(?s)\tpl011@9000000 \{.*?\n\t\};\n").unwrap();
    if !pl011.is_match(&text) {
        return Err("QEMU's device tree has no pl011@9000000 node to remove".into());
    }
    std::fs::write(&dts, pl011.replace(&text, "").as_bytes()).map_err(|e| e.to_string())?;
    process::output(
        Command::new("dtc")
            .args(["-q", "-I", "dts", "-O", "dtb", "-o"])
            .arg(&dtb)
            .arg(&dts),
    )?;
    machine.dtb = Some(dtb);
    let ended = machine
        .spawn(&log_path("broken-dtb"))?
        .finish(Duration::from_secs(60));
    expect_line(
        &ended,
        r"^\[keel\] boot error: device tree has no PL011 or Cadence UART node$",
    )?;
    match ended.exit_code {
        Some(0) => Ok(()),
        other => Err(format!(
            "QEMU did not power off after the boot error ({other:?})"
        )),
    }
}

/// One attack of the hostile guest: the probes it must pass (`probe <name>: ok`), and what
/// else its console output must show.
struct Attack {
    name: &'static str,
    probes: &'static [&'static str],
    check: fn(&Ended) -> Result<()>,
}

fn no_more_checks(_: &Ended) -> Result<()> {
    Ok(())
}

/// The flood: Keel's line about the attacker's SMCs comes a few times per second with a
/// count of the rest, not once per SMC.
fn flood_is_rate_limited(ended: &Ended) -> Result<()> {
    let smc = Regex::new(r"^\[keel\] vm 'hostile': SMC \(function 0x[0-9a-f]{8}\) not forwarded: answered NOT_SUPPORTED( \((\d+) more like it suppressed\))?$").unwrap();
    let lines: Vec<&String> = ended.lines.iter().filter(|l| smc.is_match(l)).collect();
    let suppressed: u64 = lines
        .iter()
        .filter_map(|l| smc.captures(l)?.get(2)?.as_str().parse::<u64>().ok())
        .sum();
    let rounds = ended
        .lines
        .iter()
        .find_map(|l| {
            l.strip_prefix("[hostile] hostile: flood: ")?
                .strip_suffix(" rounds")?
                .parse::<u64>()
                .ok()
        })
        .ok_or("the flood did not report its rounds")?;
    if lines.len() > 5 * 3 {
        return Err(format!(
            "{} lines about the attacker's SMCs: not rate-limited",
            lines.len()
        ));
    }
    if suppressed < 1000 || rounds < 100 {
        return Err(format!(
            "{rounds} flood rounds and {suppressed} SMC lines reported as suppressed: the flood did not run"
        ));
    }
    Ok(())
}

/// The forgery: what the attacker printed is on its own prefixed lines, its CR and ESC
/// shown escaped, so no line passes for Keel's or the victim's.
fn forgery_is_escaped(ended: &Ended) -> Result<()> {
    for expected in [
        r"[hostile] innocent\x0d[keel] vm 'victim' (id 0) stopped: forged",
        r"[hostile] \x1b[2K\x1b[1G[victim] tick: s=999 forged",
        "[hostile] [keel] all VMs have ended: powering off",
    ] {
        if !ended.lines.iter().any(|l| l == expected) {
            return Err(format!("no console line '{expected}'"));
        }
    }
    if let Some(forged) = ended
        .lines
        .iter()
        .find(|l| l.contains('\x1b') || (l.contains("forged") && !l.starts_with("[hostile] ")))
    {
        return Err(format!("a forged line reached the console: {forged:?}"));
    }
    Ok(())
}

/// Keel's `[keel] vm 'hostile' (id 1) <what>` lines matching `what` (a pattern): each one's
/// time in µs (the `starts at` figure, when `what` captures its seconds and microseconds as
/// `s` and `us`; otherwise 0) and the count of those left out before it (`(N more like it
/// suppressed)`).
fn limited_lines(ended: &Ended, what: &str) -> Vec<(u64, u64)> {
    let line = Regex::new(&format!(
        r"^\[keel\] vm 'hostile' \(id 1\) {what}(?: \((?P<left>\d+) more like it suppressed\))?$"
    ))
    .unwrap();
    ended
        .lines
        .iter()
        .filter_map(|l| {
            let c = line.captures(l)?;
            let number = |name| {
                c.name(name)
                    .map_or(0, |m| m.as_str().parse::<u64>().unwrap())
            };
            Some((number("s") * 1_000_000 + number("us"), number("left")))
        })
        .collect()
}

/// The reset loop: Keel's line about each start of the attacker comes at most 5 times in any
/// second (the rate window begins at a printed line, so a run whose lines span S seconds has
/// at most S + 1 windows), and the lines and the counts of those left out add up to exactly
/// the boots the attacker counted (the last boot, after a pause longer than the window, gets
/// the count of the loop's last window); the same for its `resets` and `reloaded` lines, two
/// per reset.
fn reset_loop_is_rate_limited(ended: &Ended) -> Result<()> {
    let report =
        Regex::new(r"^\[hostile\] probe reset-loop: ok boots=(\d+) clean=\d+ loop_ms=\d+$")
            .unwrap();
    let boots: u64 = ended
        .lines
        .iter()
        .find_map(|l| report.captures(l)?[1].parse().ok())
        .ok_or("the reset loop did not report its boots")?;
    if boots < 100 {
        return Err(format!("{boots} boots: the reset loop did not run"));
    }
    let starts = limited_lines(ended, r"starts at (?P<s>\d+)\.(?P<us>\d{6}) s");
    let resets = limited_lines(
        ended,
        r"(?:resets|reloaded: \d+ bytes in \d+ steps over \d+ us)",
    );
    let (first, last) = match (starts.first(), starts.last()) {
        (Some(first), Some(last)) => (first.0, last.0),
        _ => return Err("no line about the attacker's starts".into()),
    };
    let windows = (last - first) / 1_000_000 + 1;
    for (what, lines, events) in [
        ("starts", &starts, boots),
        ("resets and reloads", &resets, 2 * (boots - 1)),
    ] {
        let suppressed: u64 = lines.iter().map(|&(_, suppressed)| suppressed).sum();
        if lines.len() as u64 > 5 * windows {
            return Err(format!(
                "{} lines about the attacker's {what} over {windows} rate windows: not rate-limited",
                lines.len()
            ));
        }
        if lines.len() as u64 + suppressed != events {
            return Err(format!(
                "{} lines about the attacker's {what} and {suppressed} reported as left out, for {events} {what} ({boots} boots)",
                lines.len()
            ));
        }
    }
    Ok(())
}

/// The hostile guest's attacks.
const ATTACKS: &[Attack] = &[
    Attack {
        name: "calls",
        probes: &[
            "hvc-unknown-ids",
            "task-calls-refused",
            "message-calls-refused",
            "psci-features-unknown",
            "arch-features-unknown",
            "affinity-info-level-1",
            "affinity-info-no-such-vcpu",
            "affinity-info-aff1-set",
            "affinity-info-aff3-set",
            "cpu-on-no-such-vcpu",
            "cpu-on-self",
            "cpu-on-foreign-aff1",
            "cpu-on-entry-zero",
            "cpu-on-entry-gic",
            "cpu-on-entry-other-vm",
            "cpu-on-entry-past-ram",
            "cpu-on-entry-top",
            "smc-any",
            "cpu-on-off-cycles",
        ],
        check: no_more_checks,
    },
    Attack {
        name: "sgi-self",
        probes: &["sgi-self-16-masked"],
        check: no_more_checks,
    },
    Attack {
        name: "sgi-cross",
        probes: &["sgi-cross-16-masked"],
        check: no_more_checks,
    },
    // On a GICv2 it also runs `banked-registers` (a GICv3 has no banked distributor
    // registers, and the guest says it skipped it).
    Attack {
        name: "sgi-foreign",
        probes: &["sgi-no-such-vcpu"],
        check: no_more_checks,
    },
    Attack {
        name: "timer-cpu-off",
        probes: &[
            "cpu-off-with-timer-pending",
            "timer-after-cpu-off-pending",
            "cpu-off-with-timer-active",
            "timer-after-cpu-off-active",
        ],
        check: no_more_checks,
    },
    Attack {
        name: "timer-reset",
        probes: &[
            "timer-after-reset-active",
            "reset-with-timer-pending",
            "timer-after-reset-pending",
            "timer-after-clean-reset",
        ],
        check: no_more_checks,
    },
    Attack {
        name: "pmu-reset",
        probes: &[
            "pmu-own-values",
            "pmu-dirty-vcpu-1",
            "pmu-clean-after-cpu-on",
            "pmu-dirty-vcpu-0",
            "pmu-clean-after-reset",
        ],
        check: no_more_checks,
    },
    Attack {
        name: "flood",
        probes: &[],
        check: flood_is_rate_limited,
    },
    Attack {
        name: "forge",
        probes: &[],
        check: forgery_is_escaped,
    },
    Attack {
        name: "reset-loop",
        probes: &["reset-loop"],
        check: reset_loop_is_rate_limited,
    },
    Attack {
        name: "foreign-records",
        probes: &[
            "masked-stretch-foreign",
            "masked-stretch-own",
            "task-stats-foreign",
        ],
        check: no_more_checks,
    },
];

/// The attacks whose VM owns its pCPUs' PMU (`pmu = true`). Sharing a pCPU, a second VM that
/// owns the PMU ([`PMU_PEER`], the same attack) shares it with them: each must see only its own
/// PMU values.
const PMU_OWNERS: &[&str] = &["pmu-reset"];

/// The probes that need a pCPU of the attacker's own: the shared variant, where it has none,
/// does not run them (nor ask for them).
const OWN_PCPU_PROBES: &[&str] = &["masked-stretch-own"];

/// The second PMU owner of a PMU attack's shared variant: a copy of the hostile VM.
const PMU_PEER: &str = "hostile-peer";

/// Runs attack `name` of the hostile guest (`configs/tests/attack.toml` with `keel.attack=name`)
/// next to a 1 kHz victim: every probe passes, every vCPU start of the attacker is entered in
/// the documented state, and the victim keeps every tick. `shared`: the victim and both of the
/// attacker's vCPUs share pCPU 1 (fixed priority: the victim above, with a budget of 500 µs
/// per 1 ms; the attacker's vCPUs below, round robin between them; for an attack that owns the
/// PMU, a copy of the attacker, [`PMU_PEER`], owning it too, round robin with them).
fn attack(attack: &Attack, shared: bool) -> Result<()> {
    let (name, probes) = (attack.name, attack.probes);
    let template = config("attack");
    let text =
        std::fs::read_to_string(&template).map_err(|e| format!("{}: {e}", template.display()))?;
    let mut text = text.replace(
        "cmdline = \"\"",
        &format!("cmdline = \"keel.attack={name}\""),
    );
    if !text.contains(&format!("keel.attack={name}")) {
        return Err(format!("{}: no empty cmdline to fill", template.display()));
    }
    let owns_pmu = PMU_OWNERS.contains(&name);
    if owns_pmu {
        text = text.replace(
            &format!("cmdline = \"keel.attack={name}\"\n"),
            &format!("cmdline = \"keel.attack={name}\"\npmu = true\n"),
        );
        if !text.contains("pmu = true") {
            return Err(format!(
                "{}: cannot give the attacker the PMU",
                template.display()
            ));
        }
    }
    if shared {
        let before = text.clone();
        text = text
            .replace(
                "\n[[vm]]\nname = \"victim\"",
                "\n[[pcpu]]\nid = 1\npolicy = \"fixed-priority\"\n\n[[vm]]\nname = \"victim\"",
            )
            .replace(
                "pcpus = [1]\n",
                "pcpus = [1]\nschedule = [{ priority = 10, period = \"1ms\", budget = \"500us\" }]\n",
            )
            .replace(
                "pcpus = [2, 3]\n",
                "pcpus = [1, 1]\nschedule = [{ priority = 1 }, { priority = 1 }]\n",
            );
        if text.matches("schedule").count() != 2 || before == text {
            return Err(format!(
                "{}: cannot make its pCPUs shared",
                template.display()
            ));
        }
    }
    // Where attack.toml (and `shared` above) places the VMs, for the attacks that aim at the
    // victim's pCPU or must tell their own from others'.
    let own_pcpus = if shared { "none" } else { "2,3" };
    text = text.replacen(
        &format!("cmdline = \"keel.attack={name}"),
        &format!("cmdline = \"keel.attack={name} keel.victim-pcpus=1 keel.own-pcpus={own_pcpus}"),
        1,
    );
    let label = if shared {
        format!("attack-{name}-shared")
    } else {
        format!("attack-{name}")
    };
    // A system of its own per attack (its image under target/keel/<label>/): scenarios run at
    // the same time in one checkout do not boot each other's image.
    let mut text = text.replace("name = \"attack\"\n", &format!("name = \"{label}\"\n"));
    let pmu_peer = owns_pmu && shared;
    if pmu_peer {
        // attack.toml ends with the hostile VM's table: its copy, in memory of its own.
        let start = text
            .find("[[vm]]\nname = \"hostile\"")
            .ok_or_else(|| format!("{}: no hostile VM table", template.display()))?;
        let peer = text[start..]
            .replace("name = \"hostile\"", &format!("name = \"{PMU_PEER}\""))
            .replace("base = 0x5100_0000", "base = 0x5200_0000");
        if !peer.contains("0x5200_0000") {
            return Err(format!("{}: cannot place {PMU_PEER}", template.display()));
        }
        text = format!("{text}\n{peer}");
    }
    let dir = output_dir().join("attack-configs");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join(format!("{label}.toml"));
    std::fs::write(&path, text).map_err(|e| e.to_string())?;
    let ended = boot_config(&path, &label)?.finish(DEADLINE);
    let fail = |message: String| with_console_tail(message, &ended);
    let attackers: &[&str] = if pmu_peer {
        &["hostile", PMU_PEER]
    } else {
        &["hostile"]
    };
    for attacker in attackers {
        attacker_passed(&ended, attacker, name, probes, shared).map_err(fail)?;
    }
    (attack.check)(&ended).map_err(fail)?;
    check_ticks(&ended, "victim", 3)?;
    expect_clean_exit(&ended)
}

/// The attacker VM `vm` ran attack `name` to its end, every probe ok (in the `shared`
/// variant, every one but [`OWN_PCPU_PROBES`]), every vCPU start of it entered in the
/// documented state.
fn attacker_passed(
    ended: &Ended,
    vm: &str,
    name: &str,
    probes: &[&str],
    shared: bool,
) -> Result<()> {
    let hostile = lines_of(ended, vm);
    if !hostile.iter().any(|l| *l == format!("attack {name}: done")) {
        return Err(format!("no line '[{vm}] attack {name}: done'"));
    }
    if let Some(failed) = hostile.iter().find(|l| l.contains(": FAIL")) {
        return Err(format!("[{vm}] {failed}"));
    }
    for probe in probes {
        if shared && OWN_PCPU_PROBES.contains(probe) {
            continue;
        }
        let ok = format!("probe {probe}: ok");
        if !hostile.iter().any(|l| l.starts_with(&ok)) {
            return Err(format!("no line '[{vm}] {ok} ...'"));
        }
    }
    let entries: Vec<&&str> = hostile.iter().filter(|l| l.contains(" entry ")).collect();
    if entries.is_empty() {
        return Err(format!("{vm} reported no entry state"));
    }
    if let Some(dirty) = entries.iter().find(|l| !l.ends_with(" entry clean")) {
        return Err(format!(
            "a vCPU of {vm} was not entered in its documented state: {dirty}"
        ));
    }
    Ok(())
}

/// How the matrix expects a probe to be contained.
#[derive(Clone, Copy)]
enum Containment {
    /// Keel stops the VM with a diagnostic containing this text.
    Stopped(&'static str),
    /// The VM survives it, for the reason given (shown in the matrix).
    Survives(&'static str),
}

/// How `probe` is contained when the matrix runs on a board with a GICv2
/// ([`crate::image::with_board`]), where it differs from the GICv3's `containment`: the
/// guest's GIC CPU interface at 0x0801_0000 is the hardware's GICV, its own; the distributor has
/// no GICD_IROUTER (0x6100 is reserved, and a 64-bit access to it is refused as on any
/// distributor register); and the GICv3 system registers are not implemented, so their access
/// is undefined at EL1, the guest's own fatal exception.
fn on_this_gic(probe: &str, containment: Containment) -> Containment {
    let gicv2 = crate::image::board_override()
        .is_some_and(|board| board.gic == keel_core::board::GicVersion::V2);
    if !gicv2 {
        return containment;
    }
    match probe {
        "read32:0x8010000" => Containment::Survives("the VM's own GIC CPU interface (GICV)"),
        "write64:0x8006100" => Containment::Stopped("GIC distributor at IPA 0x8006100: "),
        probe if probe.starts_with("sysreg:icc_") => {
            Containment::Stopped("guest reported a fatal exception")
        }
        _ => containment,
    }
}

/// The access probes of the attack matrix: `keel.probe` and how each is contained. The
/// attacker has 16 MiB at IPA 0x4000_0000, one vCPU, and a console.
const ACCESS_PROBES: &[(&str, &str, Containment)] = &[
    (
        "memory",
        "read64:0x0",
        Containment::Stopped("stage-2 fault: 8-byte read at IPA 0x0,"),
    ),
    (
        "memory",
        "write32:0x4000000",
        Containment::Stopped("stage-2 fault: 4-byte write at IPA 0x4000000,"),
    ),
    (
        "memory",
        "read32:0x8010000",
        Containment::Stopped("stage-2 fault: 4-byte read at IPA 0x8010000,"),
    ),
    (
        "memory",
        "read32:0x80c0000",
        Containment::Stopped("stage-2 fault: 4-byte read at IPA 0x80c0000,"),
    ),
    (
        "memory",
        "read32:0x9010000",
        Containment::Stopped("stage-2 fault: 4-byte read at IPA 0x9010000,"),
    ),
    (
        "memory",
        "write32:0x9030000",
        Containment::Stopped("stage-2 fault: 4-byte write at IPA 0x9030000,"),
    ),
    (
        "memory",
        "read32:0xa000000",
        Containment::Stopped("stage-2 fault: 4-byte read at IPA 0xa000000,"),
    ),
    (
        "memory",
        "read64:0x3ffff000",
        Containment::Stopped("stage-2 fault: 8-byte read at IPA 0x3ffff000,"),
    ),
    (
        "memory",
        "write64:0x41000000",
        Containment::Stopped("stage-2 fault: 8-byte write at IPA 0x41000000,"),
    ),
    (
        "memory",
        "read64:0x50000000",
        Containment::Stopped("stage-2 fault: 8-byte read at IPA 0x50000000,"),
    ),
    (
        "memory",
        "read64:0x100000000",
        Containment::Stopped("stage-2 fault: 8-byte read at IPA 0x100000000,"),
    ),
    (
        "memory",
        "read64:0xfffffff000",
        Containment::Stopped("stage-2 fault: 8-byte read at IPA 0xfffffff000,"),
    ),
    (
        "memory",
        "fetch:0x50000000",
        Containment::Stopped("instruction fetch at IPA 0x50000000,"),
    ),
    (
        "memory",
        "fetch:0x9000000",
        Containment::Stopped("instruction fetch at IPA 0x9000000,"),
    ),
    (
        "memory",
        "read64:0xfffffffffffff000",
        Containment::Stopped("guest reported a fatal exception"),
    ),
    (
        "gic",
        "write32:0x8000104",
        Containment::Stopped("GIC distributor at IPA 0x8000104: "),
    ),
    (
        "gic",
        "write32:0x8000204",
        Containment::Stopped("GIC distributor at IPA 0x8000204: "),
    ),
    (
        "gic",
        "read32:0x80004c8",
        Containment::Stopped("GIC distributor at IPA 0x80004c8: "),
    ),
    (
        "gic",
        "read64:0x8000004",
        Containment::Stopped("GIC distributor at IPA 0x8000004: "),
    ),
    (
        "gic",
        "write64:0x8006100",
        Containment::Survives("write ignored: SPI 32 is not the VM's (its GICD_IROUTER is RAZ/WI)"),
    ),
    (
        "devices",
        "write64:0x9000000",
        Containment::Stopped("PL011 console at IPA 0x9000000: "),
    ),
    (
        "sysreg",
        "sysreg:actlr_el1-read",
        Containment::Stopped("illegal system register access: read of ACTLR_EL1"),
    ),
    (
        "sysreg",
        "sysreg:pmccntr_el0",
        Containment::Stopped("illegal system register access: read of PMCCNTR_EL0"),
    ),
    (
        "sysreg",
        "sysreg:pmcr_el0-write",
        Containment::Stopped("illegal system register access: write to PMCR_EL0"),
    ),
    (
        "sysreg",
        "sysreg:cntp_ctl_el0",
        Containment::Stopped("illegal system register access: read of CNTP_CTL_EL0"),
    ),
    (
        "sysreg",
        "sysreg:cntp_cval_el0-write",
        Containment::Stopped("illegal system register access: write to CNTP_CVAL_EL0"),
    ),
    (
        "sysreg",
        "sysreg:icc_sgi0r_el1",
        Containment::Stopped("illegal system register access: write to ICC_SGI0R_EL1"),
    ),
    (
        "sysreg",
        "sysreg:icc_asgi1r_el1",
        Containment::Stopped("illegal system register access: write to ICC_ASGI1R_EL1"),
    ),
    (
        "sysreg",
        "sysreg:hcr_el2",
        Containment::Stopped("guest reported a fatal exception"),
    ),
    (
        "sysreg",
        "sysreg:vttbr_el2-write",
        Containment::Stopped("guest reported a fatal exception"),
    ),
    (
        "sysreg",
        "sysreg:cpuactlr_el1",
        Containment::Survives(QEMU_NO_TIDCP),
    ),
    (
        "sysreg",
        "sysreg:l2ctlr_el1-write",
        Containment::Survives(QEMU_NO_TIDCP),
    ),
];

/// Why an implementation-defined register is not contained on the reference platform.
const QEMU_NO_TIDCP: &str = "not trapped by QEMU 7.2 (HCR_EL2.TIDCP unmodelled): the VM reached it";

/// Attackers per boot of the matrix (pCPUs 2-7; the victim has pCPU 1).
const ATTACKERS_PER_BOOT: usize = 6;

/// The attack matrix: every access probe in a VM of its own, six per boot next to a 1 kHz
/// victim; each is contained as the table says, and the victim keeps every tick. Writes the
/// outcome of each probe to `target/keel/attack-matrix.txt`.
fn access_matrix() -> Result<()> {
    let dir = output_dir().join("attack-configs");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut report = String::new();
    let mut problems = Vec::new();
    for (boot, chunk) in ACCESS_PROBES.chunks(ATTACKERS_PER_BOOT).enumerate() {
        // A system name per boot: one name is one image in a test run (image.rs).
        let mut text = format!(
            "[system]\nname = \"attack-matrix-{boot}\"\nram = {{ base = 0x4000_0000, size = \"1G\" }}\n\
             hypervisor = {{ base = 0x4000_0000, size = \"32M\" }}\npcpus = 8\n\n\
             [[vm]]\nname = \"victim\"\nimage = {{ guest = \"test-guest\" }}\n\
             memory = {{ base = 0x5000_0000, size = \"16M\" }}\npcpus = [1]\ndevices = [\"console\"]\n\
             cmdline = \"keel.mode=ticks keel.off=2\"\n",
        );
        for (i, (_, probe, _)) in chunk.iter().enumerate() {
            text.push_str(&format!(
                "\n[[vm]]\nname = \"h{i}\"\nimage = {{ guest = \"hostile\" }}\n\
                 memory = {{ base = {:#x}, size = \"16M\" }}\npcpus = [{}]\ndevices = [\"console\"]\n\
                 cmdline = \"keel.attack=probe keel.probe={probe}\"\n",
                0x5100_0000 + i * 0x100_0000,
                i + 2
            ));
        }
        let path = dir.join(format!("attack-matrix-{boot}.toml"));
        std::fs::write(&path, text).map_err(|e| e.to_string())?;
        let ended = boot_config(&path, &format!("attack-matrix-{boot}"))?.finish(DEADLINE);
        for (i, (kind, probe, containment)) in chunk.iter().enumerate() {
            let containment = &on_this_gic(probe, *containment);
            let vm = format!("h{i}");
            let stopped_prefix = format!("[keel] vm '{vm}' (id {}) stopped: ", i + 1);
            let stopped = ended
                .lines
                .iter()
                .find_map(|l| l.strip_prefix(stopped_prefix.as_str()));
            let survived = lines_of(&ended, &vm)
                .iter()
                .any(|l| l.starts_with("hostile: probe survived"));
            let outcome = match (containment, stopped) {
                (Containment::Stopped(expected), Some(diagnostic))
                    if diagnostic.contains(expected) =>
                {
                    format!("stopped: {diagnostic}")
                }
                (Containment::Survives(why), None) if survived => why.to_string(),
                (_, other) => {
                    problems.push(format!(
                        "probe {probe}: expected {}, got {}",
                        match containment {
                            Containment::Stopped(text) => format!("a stop with '{text}'"),
                            Containment::Survives(why) => format!("survival ({why})"),
                        },
                        other.map_or_else(
                            || format!("no stop (survived: {survived})"),
                            |d| format!("'{d}'")
                        )
                    ));
                    "UNEXPECTED".to_string()
                }
            };
            report.push_str(&format!("{kind}\t{probe}\t{outcome}\n"));
        }
        check_ticks(&ended, "victim", 2).map_err(|e| format!("boot {boot}: {e}"))?;
        let late = tick_lateness(&ended, "victim");
        report.push_str(&format!("boot {boot}: victim worst lateness {late} us\n"));
        expect_clean_exit(&ended).map_err(|e| with_console_tail(e, &ended))?;
    }
    let _ = std::fs::write(output_dir().join("attack-matrix.txt"), &report);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n    "))
    }
}

/// The worst `late_max_us` VM `vm` reported.
fn tick_lateness(ended: &Ended, vm: &str) -> u64 {
    tick_reports(ended, vm)
        .iter()
        .map(|report| report.late_us)
        .max()
        .unwrap_or(0)
}

/// Every scenario, in the order they run.
pub fn all() -> Vec<Scenario> {
    let mut scenarios = on_gicv3();
    for &(board, tag, names) in AGAIN_ON {
        let board = keel_core::board::board(board).expect("a known board");
        scenarios.extend(
            on_gicv3()
                .into_iter()
                .filter(|scenario| names.iter().any(|name| scenario.name.starts_with(name)))
                .map(|scenario| {
                    let run = scenario.run;
                    Scenario {
                        name: format!("{} [{tag}]", scenario.name),
                        run: Box::new(move || crate::image::with_board(board, &run)),
                    }
                }),
        );
    }
    scenarios
}

/// The scenarios that run again on another board, each with every configuration it builds
/// moved there ([`crate::image::with_board`]: `[system] board` set, the physical regions moved
/// to the board's RAM), named by how their names start: (board, the tag its names gain, the
/// scenarios). Each keeps its expectations.
const AGAIN_ON: &[(&str, &str, &[&str])] = &[
    ("qemu-virt-gicv2", "GICv2", ON_GICV2),
    ("zcu102", "ZCU102", ON_ZCU102),
];

/// On QEMU `virt` with a GICv2: interrupt delivery, the hostile guests, the shared pCPUs'
/// schedulers, tasks, messages and channels, the virtio console, health monitoring, and Debian
/// Linux beside the real-time partition, and Keel and two VMs coloured. The rest do not
/// depend on the interrupt controller (the board's devices: the PL031, the PCI bridge behind
/// the SMMU; the console's isolation; the trace; U-Boot) and run on the reference board only
/// (the testing chapter says so).
const ON_GICV2: &[&str] = &[
    "the demo: Linux boots from its disk",
    "two VMs tick in step",
    "SGIs between two vCPUs",
    "console input reaches only the focused VM",
    "SYSTEM_RESET restarts only the calling VM",
    "Debian generic kernel",
    "Debian PREEMPT_RT kernel",
    "two Debian Linux VMs side by side",
    "an SMP Linux VM resets itself",
    "hostile VM '",
    "attack matrix",
    "hostile guest attack '",
    "round robin",
    "lazy FP/SIMD",
    "EDF (M5150)",
    "EDF: a vCPU that never waits",
    "fixed priority (Gandalf)",
    "tasks: ",
    "messages between two VMs",
    "unmodified Debian Linux loads virtio_mmio",
    "a flooding sender",
    "shared-memory channels",
    "budget-",
    "health: a VM that faults",
    "health: a manager restarts",
    "health: nothing leaks",
    "colouring: Keel coloured 14-15 beside two coloured VMs",
];

/// On the ZCU102 (QEMU's `xlnx-zcu102`, Debian's device tree): two VMs in step, SGIs between
/// vCPUs, the virtual timer across a reset, console focus, the hostile guests, the 1 kHz
/// partition above Debian Linux on one pCPU, an SMP Linux reset beside the partition, two
/// Linux VMs under stress-ng, and Keel and two VMs coloured in RAM that starts at 0.
const ON_ZCU102: &[&str] = &[
    "two VMs tick in step",
    "SGIs between two vCPUs",
    "console input reaches only the focused VM",
    "SYSTEM_RESET restarts only the calling VM",
    "Debian generic kernel",
    "two Debian Linux VMs side by side",
    "an SMP Linux VM resets itself",
    "hostile VM '",
    "hostile guest attack 'sgi-cross': contained",
    "hostile guest attack 'sgi-self': contained",
    "fixed priority (Gandalf)",
    "colouring: Keel coloured 14-15 beside two coloured VMs",
];

/// Every scenario on the reference board, QEMU `virt` with a GICv3.
fn on_gicv3() -> Vec<Scenario> {
    let mut scenarios: Vec<Scenario> = vec![
        Scenario {
            name: "two VMs tick in step with virtual time, then power off (exit 0)".into(),
            run: Box::new(two_vms),
        },
        Scenario {
            name: "console input reaches only the focused VM".into(),
            run: Box::new(console_focus),
        },
        Scenario {
            name: "SGIs between two vCPUs of a VM: 100 pings, each answered from the other's interrupt handler".into(),
            run: Box::new(|| {
                boot_to_end_checked("sgi", |ended| {
                    expect_line(
                        ended,
                        r"^\[pair\] sgi: 100 of 100 round trips between vCPU 0 and vCPU 1 \(GICv[23]\), vCPU 1 took 100 pings$",
                    )
                })
            }),
        },
    ];
    scenarios.extend(console::all());
    scenarios.extend([
        Scenario {
            name: "SYSTEM_RESET restarts only the calling VM".into(),
            run: Box::new(reset_one_vm),
        },
        Scenario {
            name: "a device tree without a UART is a clear boot error".into(),
            run: Box::new(broken_device_tree),
        },
        Scenario {
            name: "the Raspberry Pi 4: configs/boards/rpi4b.toml passes the board checks against Debian's bcm2711-rpi-4-b.dtb and builds".into(),
            run: Box::new(|| {
                let image = build_system(&workspace().join("configs/boards/rpi4b.toml"))?;
                let board = image.system.board;
                if board.name != "rpi4b" || board.gic != keel_core::board::GicVersion::V2 {
                    return Err(format!("built for {board:?}, not the Raspberry Pi 4's GIC-400"));
                }
                Ok(())
            }),
        },
        Scenario {
            name: "a Keel built for one board halts with one line on another's device tree".into(),
            run: Box::new(wrong_board),
        },
        Scenario {
            name: "the demo: Linux boots from its disk on the PCI bridge, its shell answers and drives the RT control loop over /dev/hvc0, the RT heartbeat comes once a minute".into(),
            run: Box::new(demo),
        },
    ]);
    scenarios.extend(readme_demo::all());
    scenarios.extend(colouring::all());
    for (flavour, config) in [
        ("cloud", "linux-cloud"),
        ("generic", "linux-generic"),
        ("PREEMPT_RT", "linux-preempt-rt"),
    ] {
        scenarios.push(Scenario {
            name: format!(
                "Debian {flavour} kernel, 2 vCPUs: stress-ng, cyclictest, IPIs, beside a real-time partition"
            ),
            run: Box::new(move || linux_beside_rt(config)),
        });
    }
    scenarios.push(Scenario {
        name: "two Debian Linux VMs side by side run stress-ng; one reading the other's memory is stopped".into(),
        run: Box::new(two_linux_vms),
    });
    scenarios.push(Scenario {
        name: "Debian's U-Boot boots from flash to its prompt and answers commands".into(),
        run: Box::new(u_boot),
    });
    scenarios.push(Scenario {
        name: "an SMP Linux VM resets itself, with both vCPUs, twice; the RT partition ticks on"
            .into(),
        run: Box::new(linux_reset),
    });
    for mode in [
        "write-outside",
        "read-other",
        "gic-foreign",
        "smc",
        "el2-reg",
        "sysreg",
        "pmu",
    ] {
        scenarios.push(Scenario {
            name: format!("hostile VM '{mode}' is contained, victim ticks on"),
            run: Box::new(move || hostile(mode)),
        });
    }
    scenarios.push(Scenario {
        name: "attack matrix: every access outside the VM is contained, victim ticks on".into(),
        run: Box::new(access_matrix),
    });
    for attack_kind in ATTACKS {
        scenarios.push(Scenario {
            name: format!(
                "hostile guest attack '{}': contained, victim ticks on",
                attack_kind.name
            ),
            run: Box::new(move || attack(attack_kind, false)),
        });
    }
    for attack_kind in ATTACKS {
        let outcome = if PMU_OWNERS.contains(&attack_kind.name) {
            "with a second PMU owner, each sees only its own PMU, victim ticks on"
        } else {
            "contained, victim ticks on"
        };
        scenarios.push(Scenario {
            name: format!(
                "hostile guest attack '{}' with attacker and victim on one pCPU: {outcome}",
                attack_kind.name
            ),
            run: Box::new(move || attack(attack_kind, true)),
        });
    }
    let bad: BTreeMap<&str, &str> = BTreeMap::from([
        ("bad-overlap", "vm 'rt-b': memory: 0x50800000..0x51800000 overlaps vm 'rt-a' memory 0x50000000..0x51000000"),
        ("bad-pcpu-twice", "vm 'rt-b': pcpus: pCPU 1 is already claimed by vm 'rt-a'"),
        ("bad-hypervisor-overlap", "overlaps the hypervisor region"),
        ("bad-unknown-field", "unknown field"),
        ("bad-edf", "pCPU 1: EDF utilisation 1.06 > 1 (vm 'rt-a' vCPU 0: 0.61, vm 'rt-b' vCPU 0: 0.46)"),
    ]);
    scenarios.extend(sched::all());
    scenarios.extend(tasks::all());
    scenarios.extend(messages::all());
    scenarios.extend(channels::all());
    scenarios.extend(budget::all());
    scenarios.extend(devices::all());
    scenarios.extend(linux_devices::all());
    scenarios.extend(manager_window::all());
    scenarios.extend(rootfs::all());
    scenarios.extend(trace::all());
    scenarios.extend(health::all());
    scenarios.extend(pinned::all());
    scenarios.extend(lines::all());
    scenarios.extend(watchdog::all());
    scenarios.extend(plots::all());
    scenarios.push(Scenario {
        name: "benchmark figures (bench micro, the image, two switches, a 100-byte delivery on one and two pCPUs) exactly as xtask/baseline.toml holds them".into(),
        run: Box::new(crate::baseline::check),
    });
    for (name, message) in bad {
        scenarios.push(Scenario {
            name: format!("bad configuration {name} fails the build with its message"),
            run: Box::new(move || bad_config(name, message)),
        });
    }
    scenarios
}

#[cfg(test)]
mod board_lines {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    /// Every line README.md's "## Boards" section tells a user to type is `cargo xtask run
    /// --board B` for a board QEMU models, and the test command boots what that line boots:
    /// the board's own demo (`configs/boards/B-demo.toml`, a README demo of its own), or the
    /// demo run again there among the scenarios (`AGAIN_ON`).
    #[test]
    fn the_readmes_board_lines_run_the_demo_where_the_scenarios_boot_it() {
        let readme = std::fs::read_to_string(crate::workspace().join("README.md")).unwrap();
        let lines = super::readme_demo::sh_lines(&readme, "Boards").unwrap();
        for line in lines {
            let words: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(words[..2], ["cargo", "xtask"], "{line}");
            let cli =
                Cli::try_parse_from(std::iter::once("xtask").chain(words[2..].iter().copied()))
                    .unwrap_or_else(|e| panic!("{line}: {e}"));
            let Command::Run {
                config: None,
                board: Some(board),
            } = cli.command
            else {
                panic!("{line}: not `cargo xtask run --board B`");
            };
            let desc = keel_core::board::board(&board).unwrap_or_else(|| panic!("{line}"));
            assert!(desc.emulated, "{line}: QEMU has no model of {board}");
            let own = format!("configs/boards/{board}-demo.toml");
            if crate::workspace().join(&own).is_file() {
                assert!(
                    super::readme_demo::DEMOS
                        .iter()
                        .any(|demo| demo.board == Some(board.as_str()) && demo.config == own),
                    "{line}: the scenarios do not boot {own}"
                );
                continue;
            }
            assert!(
                super::AGAIN_ON
                    .iter()
                    .any(|(name, _, scenarios)| *name == board
                        && scenarios
                            .iter()
                            .any(|s| s.starts_with("the demo: Linux boots"))),
                "{line}: the demo does not run again on {board}"
            );
        }
    }
}
