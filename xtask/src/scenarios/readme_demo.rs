//! The README's demos as a user meets them: `configs/demo.toml` booted as `cargo xtask run`
//! boots it, and the ZCU102's `configs/boards/zcu102-demo.toml` as `cargo xtask run --board
//! zcu102` does (the same image and QEMU command line, in real time, and the same file served
//! on the host), and the README's own lines for each, read from README.md when the scenario
//! runs, typed into Linux's shell one after another, each answer checked before the next line.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use regex::Regex;

use super::{log_path, type_line, with_console_tail, Scenario};
use crate::image::{build_system, machine};
use crate::qemu::Session;
use crate::{http, workspace, Result};

/// How long Linux may take to reach its shell. QEMU runs in real time here, its four vCPU
/// threads on a host that may be busy (a minute or two is usual).
const BOOT: Duration = Duration::from_secs(480);

/// How long one typed line may take to answer (DHCP and the fetch are the slow ones).
const ANSWER: Duration = Duration::from_secs(120);

/// How long the partition's first heartbeat (its 60th second) may take once the lines are done.
const HEARTBEAT: Duration = Duration::from_secs(240);

/// How far the PL031's count may be from the host's clock: QEMU starts it at the host's time
/// (no `-rtc` option without `-icount`), so only the run's own length separates them.
const RTC_SLACK_S: u64 = 600;

/// A console line of Linux that means a typed command failed.
const FAILURE: &str = r"^\[linux\] .*(No such device|not found|[Cc]an't |[Ee]rror|failed|Permission denied|Network is unreachable)";

/// A demo the README tells a user to run, and what to type into its Linux.
pub(super) struct Demo {
    /// The README's section with the lines to type.
    pub heading: &'static str,
    /// The configuration `cargo xtask run` boots, relative to the workspace.
    pub config: &'static str,
    /// The board of `cargo xtask run --board B` that boots it (its own demo), if not the
    /// default.
    pub board: Option<&'static str>,
    /// The console log's name.
    log: &'static str,
}

/// The demos: `configs/demo.toml` on QEMU `virt`, and the ZCU102's own.
pub(super) const DEMOS: &[Demo] = &[
    Demo {
        heading: "The demo",
        config: "configs/demo.toml",
        board: None,
        log: "readme-demo",
    },
    Demo {
        heading: "The demo on the ZCU102",
        config: "configs/boards/zcu102-demo.toml",
        board: Some("zcu102"),
        log: "readme-demo-zcu102",
    },
];

/// The scenarios of this module.
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "the demo as `cargo xtask run` boots it (real time, its served file): the README's own demo lines, typed into Linux's shell, answer: telemetry, the root disk, a DHCP lease, the file's SHA-256, the RTC; the heartbeat says what its lateness measures".into(),
            run: Box::new(|| readme_demo(&DEMOS[0])),
        },
        Scenario {
            name: "the ZCU102's demo as `cargo xtask run --board zcu102` boots it (real time, its served file): the README's lines, typed into Linux's shell, answer: telemetry, a DHCP lease through the GEM, the file's SHA-256, the ZynqMP RTC's seconds [ZCU102]".into(),
            run: Box::new(|| readme_demo(&DEMOS[1])),
        },
    ]
}

/// The lines of the ```sh blocks under README.md's "## The demo" heading, as written.
#[cfg(test)]
fn demo_lines(readme: &str) -> Result<Vec<String>> {
    sh_lines(readme, "The demo")
}

/// The lines of the ```sh blocks under README.md's `## <heading>` heading, as written: what
/// the README tells a user to type there.
pub(super) fn sh_lines(readme: &str, heading: &str) -> Result<Vec<String>> {
    let section = readme
        .split_once(&format!("\n## {heading}\n"))
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or(rest))
        .ok_or(format!("README.md has no \"## {heading}\" section"))?;
    let mut lines = Vec::new();
    let mut in_block = false;
    for line in section.lines() {
        match (in_block, line.trim_end()) {
            (false, "```sh") => in_block = true,
            (true, "```") => in_block = false,
            (true, text) if !text.trim().is_empty() => lines.push(text.to_string()),
            _ => {}
        }
    }
    if in_block {
        return Err(format!(
            "README.md's section \"{heading}\" has a ```sh block without its end"
        ));
    }
    if lines.is_empty() {
        return Err(format!(
            "README.md's section \"{heading}\" has no ```sh block"
        ));
    }
    Ok(lines)
}

/// What `cargo xtask run` announced about the file it serves.
struct Served {
    port: u16,
    /// The URL's path, `/keel-1000000.bin`.
    path: String,
    sha256: String,
}

/// Reads xtask's `serving ... at URL (SHA-256 HEX)` line.
fn served(announcement: &str) -> Result<Served> {
    let pattern = Regex::new(
        r"^serving a [\d,]+-byte file at http://10\.0\.2\.2:(\d+)(/\S+) \(SHA-256 ([0-9a-f]{64})\)$",
    )
    .unwrap();
    let captures = pattern
        .captures(announcement)
        .ok_or_else(|| format!("xtask's announcement is not as expected: {announcement:?}"))?;
    Ok(Served {
        port: captures[1]
            .parse()
            .map_err(|e| format!("{announcement}: {e}"))?,
        path: captures[2].to_string(),
        sha256: captures[3].to_string(),
    })
}

/// What a demo line is checked by, told by what it runs.
#[derive(Debug, PartialEq)]
enum Check {
    /// A command to the control loop over /dev/hvc0, answered with a telemetry line; `setpoint`
    /// is the value the line sets, if it sets one.
    Telemetry { setpoint: Option<String> },
    /// The root file system's line in `mount`'s list, and what the line wrote to a file and
    /// read back, if it does.
    Disk { written: Option<String> },
    /// An address from QEMU's DHCP server, set by udhcpc's hook.
    Lease,
    /// The served file's SHA-256, as `sha256sum` prints it for its standard input.
    Digest,
    /// The PL031's count of seconds since the epoch.
    Rtc,
    /// The ZynqMP RTC's seconds register read with devmem (hexadecimal).
    RtcRegister,
}

/// The check of demo line `line`; a line the scenario does not know is an error, so that a
/// line added to the README gets its check.
fn check_of(line: &str) -> Result<Check> {
    let command = line.split(" #").next().unwrap_or(line);
    if command.contains("/dev/hvc0") {
        let setpoint = Regex::new(r"'setpoint ([-0-9.]+)'").unwrap();
        return Ok(Check::Telemetry {
            setpoint: setpoint.captures(command).map(|c| c[1].to_string()),
        });
    }
    if command.starts_with("mount") {
        let written = Regex::new(r"echo (\w+) > (\S+);.* cat (\S+)").unwrap();
        return Ok(Check::Disk {
            written: written
                .captures(command)
                .filter(|c| c[2] == c[3])
                .map(|c| c[1].to_string()),
        });
    }
    if command.contains("udhcpc") {
        return Ok(Check::Lease);
    }
    if command.contains("wget") && command.contains("sha256sum") {
        return Ok(Check::Digest);
    }
    if command.contains("/sys/class/rtc/rtc0/since_epoch") {
        return Ok(Check::Rtc);
    }
    if command.starts_with("devmem 0xffa60010 32") {
        return Ok(Check::RtcRegister);
    }
    Err(format!(
        "README demo line {line:?}: the scenario does not know what it answers (give it a check in {})",
        file!()
    ))
}

/// `line` as the user types it: the port of xtask's announcement for `<port>`.
fn filled(line: &str, served: &Served) -> String {
    line.replace("<port>", &served.port.to_string())
}

/// Waits for a console line after `mark` matching `pattern`; a line of Linux saying that a
/// command failed, seen first, fails the wait with that line.
fn answer(session: &mut Session, mark: usize, pattern: &str) -> Result<String> {
    let either = format!("(?:{pattern})|(?:{FAILURE})");
    let line = session.wait_for_after(mark, &either, ANSWER)?;
    if Regex::new(pattern).unwrap().is_match(&line) {
        Ok(line)
    } else {
        Err(format!("a command failed: {line:?}"))
    }
}

/// The telemetry line: `telemetry: t_ms=.. setpoint=.. value=.. ticks=.. late_max_us=..`.
const TELEMETRY: &str = r"^\[linux\] telemetry: t_ms=\d+ setpoint=(-?\d+\.\d{3}) value=(-?\d+\.\d{3}) ticks=\d+ late_max_us=\d+$";

/// Types `line` and checks its answer; `setpoint` is the setpoint set by an earlier line.
fn type_and_check(
    session: &mut Session,
    line: &str,
    served: &Served,
    setpoint: &mut Option<f64>,
) -> Result<()> {
    let check = check_of(line)?;
    let typed = filled(line, served);
    let mark = session.lines_read();
    type_line(session, &typed)?;
    match check {
        Check::Telemetry { setpoint: set } => {
            let reply = answer(session, mark, TELEMETRY)?;
            let captures = Regex::new(TELEMETRY).unwrap().captures(&reply).unwrap();
            let shown: f64 = captures[1].parse().map_err(|e| format!("{reply}: {e}"))?;
            if let Some(set) = set {
                let set: f64 = set.parse().map_err(|e| format!("{line}: {e}"))?;
                *setpoint = Some(set);
            }
            if let Some(expected) = *setpoint {
                if (shown - expected).abs() > 0.0005 {
                    return Err(format!(
                        "{typed:?} answered setpoint {shown}, not {expected}"
                    ));
                }
            }
        }
        Check::Disk { written } => {
            answer(session, mark, r"^\[linux\] /dev/vda on / type ext4 \(rw")?;
            if let Some(text) = written {
                answer(
                    session,
                    mark,
                    &format!(r"^\[linux\] {}$", regex::escape(&text)),
                )?;
            }
        }
        Check::Lease => {
            answer(
                session,
                mark,
                r"^\[linux\] udhcpc: eth0 10\.0\.2\.15/255\.255\.255\.0 router 10\.0\.2\.2$",
            )?;
        }
        Check::Digest => {
            if !typed.contains(&format!("10.0.2.2:{}{} ", served.port, served.path)) {
                return Err(format!(
                    "{typed:?} does not fetch the URL xtask printed (port {}, path {})",
                    served.port, served.path
                ));
            }
            answer(session, mark, &format!(r"^\[linux\] {}  -$", served.sha256))?;
        }
        Check::Rtc | Check::RtcRegister => {
            let seconds = if check == Check::Rtc {
                let reply = answer(session, mark, r"^\[linux\] \d+$")?;
                reply["[linux] ".len()..]
                    .parse()
                    .map_err(|e| format!("{reply}: {e}"))?
            } else {
                let reply = answer(session, mark, r"^\[linux\] 0x[0-9A-F]{8}$")?;
                u64::from_str_radix(&reply["[linux] 0x".len()..], 16)
                    .map_err(|e| format!("{reply}: {e}"))?
            };
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_err(|e| e.to_string())?
                .as_secs();
            if seconds.abs_diff(now) > RTC_SLACK_S {
                return Err(format!(
                    "the RTC says {seconds} s since the epoch, the host {now}: more than {RTC_SLACK_S} s apart"
                ));
            }
        }
    }
    Ok(())
}

/// Boots `demo` as `cargo xtask run` does and types the README's lines for it.
fn readme_demo(demo: &Demo) -> Result<()> {
    let readme = std::fs::read_to_string(workspace().join("README.md"))
        .map_err(|e| format!("README.md: {e}"))?;
    let lines = sh_lines(&readme, demo.heading)?;
    for line in &lines {
        check_of(line)?;
    }
    // `cargo xtask run --board B` boots the board's own demo by this name (main.rs).
    if let Some(board) = demo.board {
        let own = format!("configs/boards/{board}-demo.toml");
        if demo.config != own {
            return Err(format!(
                "`cargo xtask run --board {board}` boots {own}, not {}",
                demo.config
            ));
        }
    }
    // `cargo xtask run`'s own steps (main.rs): the image, the machine without icount, the file.
    let image = build_system(&workspace().join(demo.config))?;
    let machine = machine(&image, false)?;
    if !machine.user_network {
        return Err("the demo's machine has no network card: xtask serves no file".into());
    }
    let (server, announcement) = http::demo_file()?;
    let served = served(&announcement)?;
    let mut session = machine.spawn(&log_path(demo.log))?;
    let mut steps = || -> Result<()> {
        session.wait_for(r"^\[linux\] KEEL-INIT-END shell$", BOOT)?;
        let mut setpoint = None;
        for line in &lines {
            type_and_check(&mut session, line, &served, &mut setpoint)
                .map_err(|e| format!("README line {line:?}: {e}"))?;
        }
        // The heartbeat of the partition's first minute, with what its lateness measures.
        session.wait_for(
            r"^\[rt\] tick: s=60 ticks=\d+ expected=\d+ late_max_us=\d+ \(QEMU's clock: mostly the host or QEMU's other vCPUs keeping this one waiting; Keel's own: cargo xtask bench sched\)$",
            HEARTBEAT,
        )?;
        Ok(())
    };
    let outcome = steps();
    let ended = session.kill();
    outcome.map_err(|message| with_console_tail(message, &ended))?;
    if server.served() == 0 {
        return Err("xtask's server sent its file to no one".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line of the README's demo has its check, and the lines are the blocks' lines.
    #[test]
    fn the_readme_demo_lines_are_read_and_each_has_a_check() {
        let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
        let lines = demo_lines(&readme).unwrap();
        assert!(lines.len() >= 6, "{lines:?}");
        for line in &lines {
            check_of(line).unwrap();
        }
        assert!(lines.iter().any(|l| l.contains("<port>")));
    }

    #[test]
    fn lines_are_taken_from_sh_blocks_of_the_demo_section_only() {
        let readme = "# X\n\n## The demo\n\ntext\n\n```sh\necho a   # first\n\nls\n```\n\n```toml\nx = 1\n```\n\n```sh\ndate\n```\n\n## Next\n\n```sh\nnot this\n```\n";
        assert_eq!(
            demo_lines(readme).unwrap(),
            ["echo a   # first", "ls", "date"]
        );
        assert!(demo_lines("## Other\n```sh\nls\n```\n").is_err());
        assert!(demo_lines("## The demo\n```sh\nls\n").is_err());
    }

    #[test]
    fn checks_follow_what_a_line_runs() {
        assert_eq!(
            check_of("echo 'setpoint 42.5' > /dev/hvc0; head -n 1 /dev/hvc0    # set").unwrap(),
            Check::Telemetry {
                setpoint: Some("42.5".into())
            }
        );
        assert_eq!(
            check_of("echo get > /dev/hvc0; head -n 1 /dev/hvc0").unwrap(),
            Check::Telemetry { setpoint: None }
        );
        assert_eq!(
            check_of("mount | grep vda; echo hello > /root/note; sync; cat /root/note").unwrap(),
            Check::Disk {
                written: Some("hello".into())
            }
        );
        assert_eq!(check_of("udhcpc -i eth0 -q").unwrap(), Check::Lease);
        assert!(check_of("reboot").is_err());
    }

    #[test]
    fn the_port_comes_from_xtasks_announcement() {
        let (server, announcement) = http::demo_file().unwrap();
        let served = served(&announcement).unwrap();
        assert_eq!(served.sha256, server.sha256);
        assert_eq!(served.path, "/keel-1000000.bin");
        assert_eq!(
            filled(
                "wget -O - http://10.0.2.2:<port>/keel-1000000.bin | sha256sum",
                &served
            ),
            format!(
                "wget -O - http://10.0.2.2:{}/keel-1000000.bin | sha256sum",
                served.port
            )
        );
        assert_eq!(
            server.guest_url(),
            format!("http://10.0.2.2:{}/keel-1000000.bin", served.port)
        );
    }
}
