//! Running QEMU's `virt` machine: interactively for the demo, or as a scripted session
//! whose console output tests and benchmarks read.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use regex::Regex;

use crate::Result;

/// How to start QEMU.
#[derive(Clone, Debug)]
pub struct Machine {
    /// Image given to `-kernel`.
    pub kernel: PathBuf,
    /// Number of CPUs.
    pub cpus: u32,
    /// EL2 present (Keel) or not (a guest running natively at EL1).
    pub virtualization: bool,
    /// Deterministic virtual time: one instruction per nanosecond (`-icount shift=0,sleep=off`).
    pub icount: bool,
    /// Kernel command line (`-append`), for native guests.
    pub append: Option<String>,
    /// A device tree to use instead of QEMU's own (`-dtb`).
    pub dtb: Option<PathBuf>,
    /// An initial RAM disk (`-initrd`), for native Linux.
    pub initrd: Option<PathBuf>,
}

impl Machine {
    /// A Keel image on `cpus` pCPUs.
    pub fn keel(kernel: &Path, cpus: u32) -> Self {
        Self {
            kernel: kernel.into(),
            cpus,
            virtualization: true,
            icount: false,
            append: None,
            dtb: None,
            initrd: None,
        }
    }

    /// QEMU's arguments (without the console wiring).
    pub fn arguments(&self) -> Vec<String> {
        let machine = if self.virtualization {
            "virt,virtualization=on,gic-version=3"
        } else {
            "virt,gic-version=3"
        };
        let mut args: Vec<String> = [
            "-M",
            machine,
            "-cpu",
            "cortex-a72",
            "-m",
            "1G",
            "-smp",
            &self.cpus.to_string(),
            "-display",
            "none",
            "-monitor",
            "none",
            "-nic",
            "none",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if self.icount {
            args.extend(
                [
                    "-icount",
                    "shift=0,sleep=off",
                    "-seed",
                    "1",
                    "-rtc",
                    "clock=vm",
                ]
                .map(String::from),
            );
        }
        args.extend(["-kernel".to_string(), self.kernel.display().to_string()]);
        if let Some(append) = &self.append {
            args.extend(["-append".to_string(), append.clone()]);
        }
        if let Some(initrd) = &self.initrd {
            args.extend(["-initrd".to_string(), initrd.display().to_string()]);
        }
        if let Some(dtb) = &self.dtb {
            args.extend(["-dtb".to_string(), dtb.display().to_string()]);
        }
        args
    }

    /// Runs QEMU on this terminal: console on stdin/stdout, Ctrl-C goes to the guest.
    pub fn run_interactive(&self) -> Result<()> {
        let status = Command::new("qemu-system-aarch64")
            .args(self.arguments())
            .args([
                "-chardev",
                "stdio,id=console,signal=off",
                "-serial",
                "chardev:console",
            ])
            .status()
            .map_err(|e| format!("qemu-system-aarch64: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("QEMU exited with {status}"))
        }
    }

    /// Starts QEMU with its console on pipes.
    pub fn spawn(&self, log: &Path) -> Result<Session> {
        let mut child = Command::new("qemu-system-aarch64")
            .args(self.arguments())
            .args(["-serial", "stdio"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("qemu-system-aarch64: {e}"))?;
        let (sender, lines) = channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = Vec::new();
            while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                let text = String::from_utf8_lossy(&line).replace('\r', "");
                if sender
                    .send(text.trim_end_matches('\n').to_string())
                    .is_err()
                {
                    break;
                }
                line.clear();
            }
        });
        let mut stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Ok(Session {
            child,
            lines,
            output: Vec::new(),
            log: log.into(),
            stderr: Some(stderr),
        })
    }
}

/// A running QEMU whose console is read line by line.
pub struct Session {
    child: Child,
    lines: Receiver<String>,
    output: Vec<String>,
    log: PathBuf,
    stderr: Option<std::thread::JoinHandle<String>>,
}

/// How a session ended.
pub struct Ended {
    /// Every console line.
    pub lines: Vec<String>,
    /// QEMU's exit code, or None if it was killed at the deadline.
    pub exit_code: Option<i32>,
}

impl Session {
    /// Waits until a console line (seen before or now) matches `pattern`; returns that line.
    pub fn wait_for(&mut self, pattern: &str, timeout: Duration) -> Result<String> {
        self.wait_for_count(pattern, 1, timeout)
    }

    /// Waits until `count` console lines in all have matched `pattern`; returns the last one.
    pub fn wait_for_count(
        &mut self,
        pattern: &str,
        count: usize,
        timeout: Duration,
    ) -> Result<String> {
        let regex = Regex::new(pattern).map_err(|e| e.to_string())?;
        let mut matched: Vec<String> = self
            .output
            .iter()
            .filter(|l| regex.is_match(l))
            .cloned()
            .collect();
        let deadline = Instant::now() + timeout;
        while matched.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if regex.is_match(&line) {
                        matched.push(line.clone());
                    }
                    self.output.push(line);
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "{} of {count} console lines matched /{pattern}/ within {timeout:?}",
                        matched.len()
                    ))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!(
                        "QEMU ended after {} of {count} console lines matched /{pattern}/",
                        matched.len()
                    ))
                }
            }
        }
        Ok(matched.swap_remove(count - 1))
    }

    /// Types `bytes` on the console.
    pub fn send(&mut self, bytes: &[u8]) -> Result<()> {
        let stdin = self.child.stdin.as_mut().ok_or("QEMU stdin closed")?;
        stdin
            .write_all(bytes)
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("writing to QEMU: {e}"))
    }

    /// Waits for QEMU to exit by itself (killing it at the deadline) and collects all output.
    pub fn finish(mut self, timeout: Duration) -> Ended {
        let deadline = Instant::now() + timeout;
        let mut exit_code = None;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                exit_code = status.code();
                break;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.output.push(line);
        }
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let mut log = self.output.join("\n");
        if !stderr.is_empty() {
            log.push_str("\n--- QEMU stderr ---\n");
            log.push_str(&stderr);
        }
        let _ = std::fs::create_dir_all(self.log.parent().unwrap());
        let _ = std::fs::write(&self.log, log);
        Ended {
            lines: std::mem::take(&mut self.output),
            exit_code,
        }
    }

    /// Stops QEMU now and collects all output.
    pub fn kill(mut self) -> Ended {
        let _ = self.child.kill();
        self.finish(Duration::from_secs(5))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
