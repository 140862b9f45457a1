//! Debian Linux keeping Keel's emulated SP805 watchdog (`configs/tests/linux-watchdog.toml`)
//! with nothing of Keel's: Debian's `sp805_wdt` driver probes the device tree's PrimeCell, and
//! busybox's `watchdog` daemon (started by the initramfs's /init, timeout `keel.watchdog=3`)
//! keeps it through several timeouts. Killed with -9 (no magic close), the daemon leaves the
//! watchdog running: it expires one timeout later and Keel acts as the VM's `[vm.health]`
//! says (here: stops it), with its line.

use std::time::Duration;

use regex::Regex;

use super::{boot, expect_line, lines_of, with_console_tail, Scenario};
use crate::qemu::Session;
use crate::Result;

pub fn all() -> Vec<Scenario> {
    vec![Scenario {
        name: "watchdog: Debian Linux keeps its SP805 with sp805_wdt and busybox watchdog through several timeouts; its daemon killed, the watchdog expires 3 s later and Keel stops the VM".into(),
        run: Box::new(linux_keeps_its_sp805),
    }]
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
        session.wait_for(
            r"^\[linux\] .*sp805-wdt b000000\.watchdog: registration successful$",
            wait,
        )?;
        session.wait_for(
            r"^\[linux\] keel: watchdog daemon on /dev/watchdog, timeout 3 s$",
            wait,
        )?;
        session.wait_for(r"^\[linux\] KEEL-INIT-END shell$", wait)?;
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
            r"^\[keel\] vm 'linux' \(id 0\) stopped: watchdog expired$",
            wait,
        )?;
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
                "killed at {killed} s, last alive at {last} s: expected the stop {TIMEOUT_S} s after the kill"
            ));
        }
        let stops = Regex::new(r"^\[keel\] vm 'linux' \(id 0\) stopped: ").unwrap();
        let count = ended.lines.iter().filter(|l| stops.is_match(l)).count();
        if count != 1 {
            return Err(format!("vm 'linux' stopped {count} times"));
        }
        Ok(())
    };
    check().map_err(|message| with_console_tail(message, &ended))
}
