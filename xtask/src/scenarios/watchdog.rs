//! Debian Linux keeping Keel's emulated SP805 watchdog with nothing of Keel's: Debian's
//! `sp805_wdt` driver probes the device tree's PrimeCell, and busybox's `watchdog` daemon
//! (started by the initramfs's /init, timeout `keel.watchdog=3`) keeps it through several
//! timeouts. Killed with -9 (no magic close), the daemon leaves the watchdog running: it
//! expires one timeout later and Keel acts as the VM's `[vm.health]` says, with its line
//! (`configs/tests/linux-watchdog.toml`: a restart, back to its shell). A Linux crashed from
//! its shell stops writing it too: its expiry restarts it to its shell, while the real-time
//! partition above it on the same pCPU keeps every tick
//! (`configs/tests/linux-watchdog-restart.toml`).

use std::time::Duration;

use regex::Regex;

use super::sched::GANDALF_LATENESS_BOUND_US;
use super::{boot, check_ticks, expect_line, lines_of, tick_lateness, with_console_tail, Scenario};
use crate::qemu::{Ended, Session};
use crate::Result;

pub fn all() -> Vec<Scenario> {
    vec![Scenario {
        name: "watchdog: Debian Linux keeps its SP805 with sp805_wdt and busybox watchdog through several timeouts; its daemon killed, the watchdog expires 3 s later and Keel restarts the VM, back to its shell with its daemon".into(),
        run: Box::new(linux_keeps_its_sp805),
    },
    Scenario {
        name: "watchdog: Debian Linux crashed from its shell (sysrq c) is restarted by its SP805's expiry 3 s later and comes back to its shell; the 1 kHz partition above it on the same pCPU keeps every tick".into(),
        run: Box::new(a_crashed_linux_is_restarted),
    }]
}

/// Linux's driver probed the SP805 (once per boot).
const REGISTERED: &str = r"^\[linux\] .*sp805-wdt b000000\.watchdog: registration successful$";

/// Linux's /init reached its shell (once per boot).
const SHELL: &str = r"^\[linux\] KEEL-INIT-END shell$";

/// Keel acted once on vm 'linux', and that was a restart (no second restart, no stop).
fn one_restart(ended: &Ended) -> Result<()> {
    let acts = Regex::new(r"^\[keel\] vm 'linux' \(id 0\) (restarts|stopped)").unwrap();
    let count = ended.lines.iter().filter(|l| acts.is_match(l)).count();
    if count != 1 {
        return Err(format!(
            "vm 'linux' was restarted or stopped {count} times, expected one restart"
        ));
    }
    Ok(())
}

/// The timeout /init gives the daemon (`keel.watchdog=3` in the configuration), in seconds.
const TIMEOUT_S: f64 = 3.0;

/// Types `line` on the console in pieces, so that no burst outruns the emulated PL011's
/// 32-byte receive FIFO.
fn type_line(session: &mut Session, line: &str) -> Result<()> {
    for piece in format!("{line}\n").as_bytes().chunks(16) {
        session.send(piece)?;
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The uptime (seconds) in a line ending `uptime=<seconds>`.
fn uptime(line: &str) -> Result<f64> {
    line.rsplit_once("uptime=")
        .and_then(|(_, seconds)| seconds.parse().ok())
        .ok_or_else(|| format!("no uptime in {line:?}"))
}

fn linux_keeps_its_sp805() -> Result<()> {
    let mut session = boot("linux-watchdog")?;
    let wait = Duration::from_secs(600);
    let mut steps = || -> Result<()> {
        session.wait_for(REGISTERED, wait)?;
        session.wait_for(
            r"^\[linux\] keel: watchdog daemon on /dev/watchdog, timeout 3 s$",
            wait,
        )?;
        session.wait_for(SHELL, wait)?;
        type_line(&mut session, "echo daemon=$(pidof watchdog)")?;
        session.wait_for(r"^\[linux\] daemon=\d+$", wait)?;
        // Kept: the shell outlives three timeouts.
        type_line(
            &mut session,
            "sleep 10; echo kept uptime=$(cut -d ' ' -f 1 /proc/uptime)",
        )?;
        session.wait_for(r"^\[linux\] kept uptime=[0-9.]+$", wait)?;
        // Killed without its magic close: the shell says every half second that it lives.
        type_line(
            &mut session,
            "kill -9 $(pidof watchdog); echo killed uptime=$(cut -d ' ' -f 1 /proc/uptime); \
             while :; do sleep 0.5; echo alive uptime=$(cut -d ' ' -f 1 /proc/uptime); done",
        )?;
        session.wait_for(
            r"^\[keel\] vm 'linux' \(id 0\) restarts: watchdog expired$",
            wait,
        )?;
        // Back from its pristine image: the driver probes, the daemon runs, the shell answers.
        session.wait_for_count(REGISTERED, 2, wait)?;
        session.wait_for_count(SHELL, 2, wait)?;
        type_line(
            &mut session,
            "echo back daemon=$(pidof watchdog) uptime=$(cut -d ' ' -f 1 /proc/uptime)",
        )?;
        session.wait_for(r"^\[linux\] back daemon=\d+ uptime=[0-9.]+$", wait)?;
        Ok(())
    };
    let outcome = steps();
    let ended = session.kill();
    outcome.map_err(|message| with_console_tail(message, &ended))?;
    let check = || -> Result<()> {
        // The kernel saw the device closed without the magic character and left it running.
        expect_line(&ended, r"^\[linux\] .*watchdog0: watchdog did not stop!$")?;
        let linux = lines_of(&ended, "linux");
        let kept = linux
            .iter()
            .find(|line| line.starts_with("kept uptime="))
            .ok_or("no `kept` line")?;
        let killed = linux
            .iter()
            .find(|line| line.starts_with("killed uptime="))
            .ok_or("no `killed` line")?;
        let (kept, killed) = (uptime(kept)?, uptime(killed)?);
        if kept < 3.0 * TIMEOUT_S {
            return Err(format!(
                "the shell said it was kept at {kept} s of uptime, before three timeouts"
            ));
        }
        let alive = linux
            .iter()
            .filter(|line| line.starts_with("alive uptime="))
            .map(|line| uptime(line))
            .collect::<Result<Vec<f64>>>()?;
        let last = alive.iter().copied().fold(killed, f64::max);
        // The kernel's last write is at the close, when the daemon dies: the expiry comes one
        // timeout after, within the half second the loop says it lives.
        if last < killed + TIMEOUT_S - 1.0 || last >= killed + TIMEOUT_S + 0.5 {
            return Err(format!(
                "killed at {killed} s, last alive at {last} s: expected the expiry {TIMEOUT_S} s after the kill"
            ));
        }
        one_restart(&ended)?;
        // A new boot: its uptime starts again, below the first boot's at the kill.
        let back = linux
            .iter()
            .find(|line| line.starts_with("back daemon="))
            .ok_or("no `back` line")?;
        let back = uptime(back)?;
        if back >= killed {
            return Err(format!(
                "back at {back} s of uptime, not below the first boot's {killed} s at the kill: \
                 not a new boot"
            ));
        }
        Ok(())
    };
    check().map_err(|message| with_console_tail(message, &ended))
}

fn a_crashed_linux_is_restarted() -> Result<()> {
    let mut session = boot("linux-watchdog-restart")?;
    let wait = Duration::from_secs(900);
    let mut steps = || -> Result<()> {
        session.wait_for(REGISTERED, wait)?;
        session.wait_for(SHELL, wait)?;
        type_line(&mut session, "echo c > /proc/sysrq-trigger")?;
        session.wait_for(
            r"^\[linux\] .*Kernel panic - not syncing: sysrq triggered crash$",
            wait,
        )?;
        session.wait_for(
            r"^\[keel\] vm 'linux' \(id 0\) restarts: watchdog expired$",
            wait,
        )?;
        session.wait_for(r"^\[keel\] vm 'linux' \(id 0\) reloaded: ", wait)?;
        // Back: the driver probes again, the daemon starts again, the shell answers.
        session.wait_for_count(REGISTERED, 2, wait)?;
        session.wait_for_count(SHELL, 2, wait)?;
        type_line(&mut session, "echo back-$((6 * 7))")?;
        session.wait_for(r"^\[linux\] back-42$", wait)?;
        // Two more seconds of the partition after Linux is back.
        let mark = session.lines_read();
        session.wait_for_after(mark, r"^\[rt\] tick: ", wait)?;
        let mark = session.lines_read();
        session.wait_for_after(mark, r"^\[rt\] tick: ", wait)?;
        Ok(())
    };
    let outcome = steps();
    let ended = session.kill();
    outcome.map_err(|message| with_console_tail(message, &ended))?;
    let check = || -> Result<()> {
        let position = |pattern: &str| -> Result<usize> {
            let regex = Regex::new(pattern).unwrap();
            ended
                .lines
                .iter()
                .position(|line| regex.is_match(line))
                .ok_or_else(|| format!("no line matches /{pattern}/"))
        };
        let panic = position(r"^\[linux\] .*Kernel panic - not syncing")?;
        let restart = position(r"^\[keel\] vm 'linux' \(id 0\) restarts: ")?;
        // The partition's once-a-second reports between them: the expiry comes 2 to 3 s after
        // the crash (the daemon's last write was at most 1 s before it), not at once.
        let seconds = ended.lines[panic..restart]
            .iter()
            .filter(|line| line.starts_with("[rt] tick: "))
            .count();
        if !(1..=4).contains(&seconds) {
            return Err(format!(
                "{seconds} seconds of the partition passed between Linux's panic and its restart: \
                 expected about 3 (the watchdog's timeout)"
            ));
        }
        one_restart(&ended)?;
        let last = check_ticks(&ended, "rt", 5)?;
        let late = tick_lateness(&ended, "rt");
        if late > GANDALF_LATENESS_BOUND_US {
            return Err(format!(
                "the partition's worst tick lateness was {late} us over {last} s, above the \
                 {GANDALF_LATENESS_BOUND_US} us bound"
            ));
        }
        Ok(())
    };
    check().map_err(|message| with_console_tail(message, &ended))
}
