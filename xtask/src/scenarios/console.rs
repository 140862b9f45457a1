//! The raw console under icount: a raw VM's escape sequences reach the UART unchanged only
//! while it has the input focus, another VM's are always escaped, and no raw byte follows
//! Keel's line saying that raw output ended.

use std::time::Duration;

use super::{boot, with_console_tail, Scenario};
use crate::qemu::Ended;
use crate::Result;

/// What `keel.ansi` prints after `ansi: s=N `: bold on, a word, attributes off.
const ANSI: &str = "\x1b[1mbold\x1b[0m";

/// The line pattern of VM `vm`'s `keel.ansi` line, its sequences raw or shown escaped.
fn ansi_line(vm: &str, raw: bool) -> String {
    let shown = if raw {
        ANSI.to_string()
    } else {
        ANSI.replace('\x1b', "\\x1b")
    };
    format!(r"^\[{vm}\] ansi: s=\d+ {}$", regex::escape(&shown))
}

/// `configs/tests/console-raw.toml`: `shell` (raw, the focus starts there) and `plain` print
/// the same escape sequences each second. Focus to `plain`: `shell`'s are escaped; back to
/// `shell`: raw again; `Ctrl-A r`: escaped.
fn raw_console() -> Result<()> {
    let mut session = boot("console-raw")?;
    let wait = Duration::from_secs(120);
    let mut steps = || -> Result<()> {
        session.wait_for(
            r"^\[keel\] vm 'shell' \(id 1\): console output raw while it has the input focus",
            wait,
        )?;
        session.wait_for(&ansi_line("shell", true), wait)?;
        session.wait_for(&ansi_line("plain", false), wait)?;
        for (keys, announced, raw) in [
            (
                &[0x01, b'0'],
                r"^\[keel\] input focus: vm 'plain' \(id 0\)$",
                false,
            ),
            (
                &[0x01, b'1'],
                r"^\[keel\] input focus: vm 'shell' \(id 1\)$",
                true,
            ),
            (
                &[0x01, b'r'],
                r"^\[keel\] vm 'shell' \(id 1\): console output escaped$",
                false,
            ),
        ] {
            session.send(keys)?;
            session.wait_for(announced, wait)?;
            let mark = session.lines_read();
            session.wait_for_after(mark, &ansi_line("shell", raw), wait)?;
        }
        Ok(())
    };
    let outcome = steps();
    let ended = session.kill();
    outcome.map_err(|message| with_console_tail(message, &ended))?;
    raw_only_while_focused(&ended).map_err(|message| with_console_tail(message, &ended))
}

/// Every escape byte on the console is in a `shell` line while its output was raw: none in
/// Keel's or `plain`'s lines, and none in `shell`'s after Keel said that the focus left it or
/// that its output is escaped (until the focus came back).
fn raw_only_while_focused(ended: &Ended) -> Result<()> {
    let raw = regex::Regex::new(&ansi_line("shell", true)).unwrap();
    let mut shell_raw = true;
    for line in &ended.lines {
        if line.starts_with("[keel] input focus: vm 'plain'")
            || line.starts_with("[keel] vm 'shell' (id 1): console output escaped")
        {
            shell_raw = false;
        } else if line.starts_with("[keel] input focus: vm 'shell'") {
            shell_raw = true;
        }
        if !line.contains('\x1b') {
            continue;
        }
        if !line.starts_with("[shell] ") {
            return Err(format!(
                "an escape byte outside the raw VM's lines: {line:?}"
            ));
        }
        if !raw.is_match(line) {
            return Err(format!("a raw line the guest did not print: {line:?}"));
        }
        if !shell_raw {
            return Err(format!(
                "a raw line after Keel said the raw output ended: {line:?}"
            ));
        }
    }
    Ok(())
}

/// The console's scenarios.
pub fn all() -> Vec<Scenario> {
    vec![Scenario {
        name: "raw console: the raw VM's escape sequences reach the UART unchanged only while it has the focus, the other VM's are escaped".into(),
        run: Box::new(raw_console),
    }]
}
