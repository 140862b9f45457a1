//! The console under icount: a raw VM's escape sequences reach the UART unchanged only while
//! it has the input focus, another VM's are always escaped, and no raw byte follows Keel's
//! line saying that raw output ended; input pasted faster than a guest reads it (4 KiB in one
//! write) reaches a bare-metal guest and Debian Linux's shell whole and in order through the
//! input queue behind each VM's emulated PL011, and a guest that never reads loses only what
//! its full queue refused, which Keel says once with the count.

use std::time::Duration;

use regex::Regex;

use super::{boot, expect_line, type_line, with_console_tail, Scenario};
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

/// Bytes a VM's emulated PL011 holds before it refuses input: its receive FIFO and Keel's
/// input queue behind it.
const HELD: usize = keel_core::devices::pl011::FIFO_DEPTH + keel_core::devices::pl011::INPUT_QUEUE;

/// `len` bytes of pasted text: lines of 63 printable ASCII characters (varied, from a fixed
/// seed; no control character, so that neither Keel's Ctrl-A nor a tty's line editing takes
/// any), each ended by `\n`.
fn paste_text(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    (0..len)
        .map(|i| {
            if i % 64 == 63 {
                return b'\n';
            }
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            b' ' + ((state >> 33) % 95) as u8
        })
        .collect()
}

/// The FNV-1a hash (64 bits) of `bytes`, as the test guest's `keel.input=count` says it.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// No line says that input was lost: neither Keel's (its queue refused some) nor Linux's
/// PL011 driver's (`ttyAMA ttyAMA0: 1 input overrun(s)`).
fn no_input_lost(ended: &Ended) -> Result<()> {
    match ended
        .lines
        .iter()
        .find(|line| line.contains("input overrun") || line.contains("console input queue full"))
    {
        Some(line) => Err(format!("input was lost: {line:?}")),
        None => Ok(()),
    }
}

/// `configs/tests/console-paste.toml`: 4 KiB pasted in one write reach `reader` whole and in
/// order (its count and hash of what it read); 5,000 bytes pasted into `deaf`, which never
/// reads, fill its FIFO and queue and the rest is refused: Keel says so once, with the count;
/// Ctrl-A still moves the focus, and `reader` takes what is typed after it.
fn paste_bare_metal() -> Result<()> {
    let mut session = boot("console-paste")?;
    let wait = Duration::from_secs(120);
    let paste = paste_text(4096, 0x6b65_656c);
    let more = b"more";
    let mut whole = paste.clone();
    whole.extend_from_slice(more);
    let mut steps = || -> Result<()> {
        session.wait_for(r"^\[reader\] tick: s=1 ", wait)?;
        session.wait_for(r"^\[deaf\] tick: s=1 ", wait)?;
        session.send(&paste)?;
        session.wait_for(
            &format!(
                r"^\[reader\] input: s=\d+ bytes=4096 fnv={:016x}$",
                fnv1a(&paste)
            ),
            wait,
        )?;
        session.send(&[0x01, b'1'])?;
        session.wait_for(r"^\[keel\] input focus: vm 'deaf' \(id 1\)$", wait)?;
        session.send(&paste_text(5000, 7))?;
        session.wait_for(
            r"^\[keel\] vm 'deaf': console input queue full, \d+ bytes dropped \(the guest is not reading\)$",
            wait,
        )?;
        session.send(&[0x01, b'0'])?;
        session.wait_for(r"^\[keel\] input focus: vm 'reader' \(id 0\)$", wait)?;
        session.send(more)?;
        let line = session.wait_for(
            &format!(
                r"^\[reader\] input: s=\d+ bytes={} fnv={:016x}$",
                whole.len(),
                fnv1a(&whole)
            ),
            wait,
        )?;
        // Two seconds more of `deaf`'s own time, for a second line about it to show.
        let second: u64 = Regex::new(r"s=(\d+)").unwrap().captures(&line).unwrap()[1]
            .parse()
            .unwrap();
        session.wait_for(&format!(r"^\[deaf\] tick: s={} ", second + 2), wait)?;
        Ok(())
    };
    let outcome = steps();
    let ended = session.kill();
    outcome.map_err(|message| with_console_tail(message, &ended))?;
    let check = || -> Result<()> {
        let said =
            Regex::new(r"^\[keel\] vm '(\w+)': console input queue full, (\d+) bytes dropped")
                .unwrap();
        let lines: Vec<(String, u64)> = ended
            .lines
            .iter()
            .filter_map(|line| said.captures(line))
            .map(|c| (c[1].to_string(), c[2].parse().unwrap()))
            .collect();
        let expected = vec![("deaf".to_string(), (5000 - HELD) as u64)];
        if lines != expected {
            return Err(format!(
                "Keel said {lines:?} about refused input, expected one line: {expected:?}"
            ));
        }
        if let Some(line) = ended
            .lines
            .iter()
            .find(|line| line.contains("input overrun"))
        {
            return Err(format!("an overrun line: {line:?}"));
        }
        Ok(())
    };
    check().map_err(|message| with_console_tail(message, &ended))
}

/// `configs/tests/console-paste-linux.toml`: Debian Linux's shell runs `cat > /tmp/p`; 4 KiB
/// of text pasted in one write (64 lines), then Ctrl-D; the shell says the file's length
/// and SHA-256, which must be the text's, and neither Linux nor Keel says input was lost.
fn paste_linux() -> Result<()> {
    let mut session = boot("console-paste-linux")?;
    let wait = Duration::from_secs(600);
    let paste = paste_text(4096, 0x7061_7374);
    let mut steps = || -> Result<()> {
        session.wait_for(r"^\[linux\] KEEL-INIT-END shell$", wait)?;
        // The shell's line editing ends (the tty back in canonical mode) before it runs the
        // line: once `paste-ready` is out, what comes is `cat`'s.
        type_line(&mut session, "echo paste-ready; cat > /tmp/p")?;
        session.wait_for(r"^\[linux\] paste-ready$", wait)?;
        std::thread::sleep(Duration::from_millis(500));
        session.send(&paste)?;
        session.send(&[0x04])?;
        type_line(
            &mut session,
            "echo \"pasted: $(wc -c < /tmp/p) $(sha256sum < /tmp/p)\"",
        )?;
        let line = session.wait_for(r"^\[linux\] pasted: \d+ [0-9a-f]{64}  -$", wait)?;
        let expected = format!(
            "[linux] pasted: {} {}  -",
            paste.len(),
            crate::http::sha256_hex(&paste)
        );
        if line != expected {
            return Err(format!(
                "the pasted text arrived changed: {line:?}, expected {expected:?}"
            ));
        }
        Ok(())
    };
    let outcome = steps();
    let ended = session.kill();
    outcome.map_err(|message| with_console_tail(message, &ended))?;
    let check = || -> Result<()> {
        no_input_lost(&ended)?;
        // Linux's tty echoed every line as it came (its last one, too).
        let last = String::from_utf8_lossy(&paste[paste.len() - 64..paste.len() - 1]).into_owned();
        expect_line(
            &ended,
            &format!("^{}$", regex::escape(&format!("[linux] {last}"))),
        )
    };
    check().map_err(|message| with_console_tail(message, &ended))
}

/// The console's scenarios.
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "raw console: the raw VM's escape sequences reach the UART unchanged only while it has the focus, the other VM's are escaped".into(),
            run: Box::new(raw_console),
        },
        Scenario {
            name: "console paste: 4 KiB in one write reach a bare-metal guest whole and in order; a guest that never reads loses only what its full queue refused, said once with the count; Ctrl-A works throughout".into(),
            run: Box::new(paste_bare_metal),
        },
        Scenario {
            name: "console paste into Linux: 4 KiB in one write reach Debian Linux's shell (cat on ttyAMA0) whole and in order, no input overrun in Linux or Keel".into(),
            run: Box::new(paste_linux),
        },
    ]
}
