//! Running external programs: a failure names the command and carries the program's own words.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Output, Stdio};

use crate::Result;

/// How many of a failed program's last stderr lines an error quotes.
pub const STDERR_LINES: usize = 12;

/// The command line as a user would type it.
pub fn command_line(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The last `count` non-empty lines of `stderr`, indented for an error message.
pub fn stderr_tail(stderr: &[u8], count: usize) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(count);
    lines[start..]
        .iter()
        .map(|line| format!("\n      {line}"))
        .collect()
}

/// Runs `command` to its end with its output captured; a failure to start or a non-zero exit
/// is an error naming the command, with the last lines it wrote on stderr.
pub fn output(command: &mut Command) -> Result<Output> {
    output_quoting(command, STDERR_LINES)
}

/// As [`output`], quoting up to `lines` lines of stderr (a compiler's errors need more).
pub fn output_quoting(command: &mut Command, lines: usize) -> Result<Output> {
    let line = command_line(command);
    let output = command
        .output()
        .map_err(|e| format!("`{line}` could not start: {e}"))?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(failed(&line, &output, lines))
    }
}

/// As [`output`], calling `on_line` with each line the program writes on stdout as it comes
/// (to show its progress); the lines are in the output too.
pub fn output_by_line(command: &mut Command, mut on_line: impl FnMut(&str)) -> Result<Output> {
    let line = command_line(command);
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("`{line}` could not start: {e}"))?;
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let stderr = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
        bytes
    });
    let mut stdout = Vec::new();
    let mut reader = BufReader::new(child.stdout.take().expect("stdout is piped"));
    let mut text = Vec::new();
    while reader.read_until(b'\n', &mut text).is_ok_and(|n| n > 0) {
        on_line(String::from_utf8_lossy(&text).trim_end());
        stdout.append(&mut text);
    }
    let status = child
        .wait()
        .map_err(|e| format!("`{line}`: waiting for it: {e}"))?;
    let output = Output {
        status,
        stdout,
        stderr: stderr.join().unwrap_or_default(),
    };
    if output.status.success() {
        Ok(output)
    } else {
        Err(failed(&line, &output, STDERR_LINES))
    }
}

/// The error for a command that ran and failed, quoting `lines` lines of its stderr.
pub fn failed(line: &str, output: &Output, lines: usize) -> String {
    let tail = stderr_tail(&output.stderr, lines);
    if tail.is_empty() {
        format!(
            "`{line}` failed ({}), printing nothing on stderr",
            output.status
        )
    } else {
        format!("`{line}` failed ({}):{tail}", output.status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_program_is_named_with_its_own_words() {
        let error = output(Command::new("sh").args(["-c", "echo first >&2; echo why >&2; exit 3"]))
            .unwrap_err();
        assert!(
            error.starts_with(
                "`sh -c echo first >&2; echo why >&2; exit 3` failed (exit status: 3):"
            ),
            "{error}"
        );
        assert!(error.ends_with("\n      first\n      why"), "{error}");
    }

    #[test]
    fn only_the_last_lines_are_quoted() {
        let many: String = (0..40).map(|i| format!("line {i}\n")).collect();
        let tail = stderr_tail(many.as_bytes(), STDERR_LINES);
        assert_eq!(tail.lines().count(), STDERR_LINES + 1);
        assert!(tail.ends_with("line 39"));
        assert!(!tail.contains("line 27\n"));
    }

    #[test]
    fn lines_are_seen_as_they_come_and_kept() {
        let mut seen = Vec::new();
        let output = output_by_line(
            Command::new("sh").args(["-c", "echo one; echo two >&2; printf 'three'"]),
            |line| seen.push(line.to_string()),
        )
        .unwrap();
        assert_eq!(seen, ["one", "three"]);
        assert_eq!(output.stdout, b"one\nthree");
        assert_eq!(output.stderr, b"two\n");
        let error = output_by_line(
            Command::new("sh").args(["-c", "echo out; echo why >&2; exit 4"]),
            |_| {},
        )
        .unwrap_err();
        assert!(
            error.ends_with("failed (exit status: 4):\n      why"),
            "{error}"
        );
    }

    #[test]
    fn a_program_that_cannot_start_is_named() {
        let error = output(&mut Command::new("/nonexistent/keel-no-such-program")).unwrap_err();
        assert!(
            error.starts_with("`/nonexistent/keel-no-such-program` could not start:"),
            "{error}"
        );
    }
}
