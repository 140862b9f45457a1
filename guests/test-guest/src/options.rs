//! The test guest's boot arguments.
//!
//! | token | meaning |
//! | --- | --- |
//! | `keel.native` | running on bare QEMU: no Keel hypercalls |
//! | `keel.mode=ticks\|bench\|spin\|job\|share\|pingpong\|work\|messages\|channel\|rtc\|task-reuse\|sgi` | what to run (default `ticks`) |
//! | `keel.edu=write\|read`, `keel.flood=<ms>`, `keel.target=<hex>` | edu mode: the attack, the interrupt flood's length, the attack's address (see [`crate::edu`]) |
//! | `keel.canary=<hex ipa>` | ticks mode: fill 4 KiB there at the start and check it at each report (`canary: s=N intact`) |
//! | `keel.alarm=<seconds>` | rtc mode: how far ahead each alarm is set (default 2; see [`crate::rtc`]) |
//! | `keel.msg=<role>` and its numbers | messages mode (see [`crate::messages`]) |
//! | `keel.chan=<role>` and its numbers | channel mode (see [`crate::channels`]) |
//! | `keel.work=<us>\|forever` | job mode: work per job before yielding (default 100) |
//! | `keel.pingpong=measure\|partner` | pingpong mode: count instructions (owns the PMU) or only yield |
//! | `keel.fp` | pingpong mode: touch FP/SIMD before each yield |
//! | `keel.iterations=<n>` | work mode: rounds of the workload (default 10,000,000) |
//! | `keel.lateness` | ticks mode: also report each second's min/avg/max tick lateness in ns |
//! | `keel.late-note` | ticks mode: each report says after `late_max_us` what that figure measures and where Keel's own is (for the demo, which QEMU runs in real time) |
//! | `keel.ansi` | ticks mode: also print `ansi: s=N ` and a bold word in ANSI escape sequences at each report (for the console's raw mode) |
//! | `keel.histogram` | ticks mode: after each report, print the histogram of every tick's lateness since the start (`hist: tick-lateness ...`, one line per tick), and all of it before `keel.off` |
//! | `keel.control` | ticks mode: also run a control loop at the tick rate, commanded in lines over messages from `keel.peer` (see [`crate::control`]) |
//! | `keel.peer=<vm id>` | the VM that commands `keel.control` and gets its answers (default 0); messages mode's peer |
//! | `keel.max=<bytes>` | the largest message `keel.peer` takes (default 256, at least 1) |
//! | `keel.start=<ms>` | work mode: start the work when the counter reaches this (default 0) |
//! | `keel.print=<ms>` | work mode: print the result once the counter reaches this, sleeping in WFI until then (default: at once) |
//! | `keel.report=<seconds>` | ticks mode: report every that many seconds (default 1) |
//! | `keel.off=<seconds>` | ticks mode: SYSTEM_OFF after that many seconds |
//! | `keel.reset=<seconds>` | ticks mode: SYSTEM_RESET once, after that many seconds |
//! | `keel.hostile=<mode>` | ticks mode: misbehave (see [`crate::hostile`]) |
//! | `keel.hostile-after=<seconds>` | when to misbehave (default 2) |
//! | `keel.target=<hex ipa>` | the address `read-other` loads from |
//! | `keel.watchdog` | ticks mode: keep Keel's watchdog (KEEL_WATCHDOG) every 100 ticks |
//! | `keel.hang=<seconds>` | ticks mode: after that many seconds, mask interrupts and spin for ever (a hang) |
//! | `keel.pristine=<hex ipa>` | ticks mode: at boot, say whether the 4 KiB there are all zero (`pristine: clean` or `pristine: dirty`), then fill them |
//! | `keel.mode=manager` with `keel.managed=<vm id>` | the manager's services on that VM (see [`crate::manager`]) |
//! | `keel.restarts=<n>` | manager mode: restart the managed VM n times, timed, its resource counters compared with those at its boot (see [`crate::manager`]) |
//! | `keel.running=<ms>` | manager mode with `keel.restarts`: how long the VM runs before each reading and restart (default 1000) |
//! | `keel.input=echo\|count\|ignore` | ticks mode: what becomes of console input: each byte echoed in a line (`echo: X`, the default); counted, with the FNV-1a hash of all of it in order, said each second it changed (`input: s=N bytes=B fnv=HHHHHHHHHHHHHHHH`); or never read (the receive interrupt left masked) |
//! | `keel.storm=<ms>`, `keel.storm-pause=<us>` | manager mode: restart, stop and start the managed VM as fast as it can from two vCPUs for that long, optionally pausing between calls (see [`crate::storm`]) |
//! | `keel.restart-on-key` | manager mode with `keel.restarts`: wait for a byte typed on this VM's console instead |
//! | `keel.mode=sgi` with `keel.rounds=<n>` | SGIs back and forth between vCPU 0 and vCPU 1, n round trips (default 100; see [`crate::sgi`]) |
//! | `keel.mode=walk` with `keel.bytes=<n>`, `keel.at=<hex>`, `keel.walks=<n>`, `keel.reports=<n>`, `keel.after=<s>` | a working set of n bytes (default 256 KiB) at that IPA (default 0x40800000) walked over and over, each report the times of n walks (default 100), power off after n reports (default 10; see [`crate::walk`]) |
//! | `keel.mode=task-reuse` with `keel.rounds=<n>`, `keel.pcpu=<id>` | a task index reused after a far launch and a delete, n rounds, the tasks on that pCPU (see [`crate::task_reuse`]) |

use core::fmt;

use keel_guest::bootargs::BootArgs;

/// What the guest runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A 1 kHz timer tick, a report each second, console echo.
    Ticks,
    /// The micro-benchmarks, then SYSTEM_OFF.
    Bench,
    /// A CPU hog: spin forever with interrupts masked and no trap (an interference source).
    Spin,
    /// A periodic job released by Keel's scheduler (`keel.work`), with Keel's statistics.
    Job,
    /// A best-effort hog that reports the pCPU time it got.
    Share,
    /// Yield ping-pong with a partner vCPU (`keel.pingpong=measure|partner`, `keel.fp`).
    Pingpong,
    /// A fixed CPU-bound workload (`keel.iterations`), timed, then SYSTEM_OFF.
    Work,
    /// Messages between VMs (`keel.msg=<role>`, see [`crate::messages`]).
    Messages,
    /// Shared-memory channels and their doorbells (`keel.chan=<role>`, see
    /// [`crate::channels`]).
    Channel,
    /// The board's PL031 RTC given to the VM: its count and alarms (see [`crate::rtc`]).
    Rtc,
    /// QEMU's edu PCI device behind the bridge given to the VM: DMA and an interrupt flood,
    /// then a DMA attack (see [`crate::edu`]).
    Edu,
    /// A manager reading Keel's trace rings (see [`crate::trace_reader`]).
    TraceReader,
    /// A manager using Keel's health services on another VM (see [`crate::manager`]).
    Manager,
    /// A real-time task's index reused after a far launch and a delete (see
    /// [`crate::task_reuse`]).
    TaskReuse,
    /// SGIs back and forth between vCPU 0 and vCPU 1 (see [`crate::sgi`]).
    Sgi,
    /// A working set walked over and over, each walk timed (see [`crate::walk`]).
    Walk,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Ticks => "ticks",
            Mode::Bench => "bench",
            Mode::Spin => "spin",
            Mode::Job => "job",
            Mode::Share => "share",
            Mode::Pingpong => "pingpong",
            Mode::Work => "work",
            Mode::Messages => "messages",
            Mode::Channel => "channel",
            Mode::Rtc => "rtc",
            Mode::Edu => "edu",
            Mode::TraceReader => "trace-reader",
            Mode::Manager => "manager",
            Mode::TaskReuse => "task-reuse",
            Mode::Sgi => "sgi",
            Mode::Walk => "walk",
        })
    }
}

/// What ticks mode does with console input (`keel.input`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputMode {
    /// Each byte echoed in a line of its own.
    Echo,
    /// Counted and hashed (FNV-1a, 64 bits), said each second it changed.
    Count,
    /// Never read: the receive interrupt stays masked.
    Ignore,
}

/// Seconds before the hostile action when `keel.hostile-after` is absent.
const DEFAULT_HOSTILE_AFTER_SECONDS: u64 = 2;

/// The parsed boot arguments.
#[derive(Clone, Copy, Debug)]
pub struct Options<'a> {
    /// `keel.native`.
    pub native: bool,
    /// `keel.mode`.
    pub mode: Mode,
    /// `keel.report`, in seconds (at least 1): how often ticks mode reports.
    pub report_every_seconds: u64,
    /// `keel.off`, in seconds.
    pub off_after_seconds: Option<u64>,
    /// `keel.reset`, in seconds: PSCI SYSTEM_RESET once, after that many seconds.
    pub reset_after_seconds: Option<u64>,
    /// `keel.hostile`.
    pub hostile: Option<&'a str>,
    /// `keel.hostile-after`, in seconds.
    pub hostile_after_seconds: u64,
    /// `keel.target`.
    pub target: Option<u64>,
    /// `keel.canary`: ticks mode's canary page.
    pub canary: Option<u64>,
    /// `keel.watchdog`: ticks mode keeps Keel's watchdog.
    pub watchdog: bool,
    /// `keel.hang`, in seconds: ticks mode hangs (interrupts masked) after that long.
    pub hang_after_seconds: Option<u64>,
    /// `keel.pristine`: ticks mode's page checked for zeros at boot, then filled.
    pub pristine: Option<u64>,
    /// `keel.work`: job mode's work per job in microseconds; `None` for `forever`.
    pub work_us: Option<u64>,
    /// `keel.iterations`: work mode's rounds.
    pub iterations: u64,
    /// `keel.start`: when work mode starts, in counter milliseconds.
    pub start_ms: u64,
    /// `keel.print`: when work mode prints its result, in counter milliseconds.
    pub print_ms: u64,
    /// `keel.lateness`: ticks mode reports min/avg/max lateness too.
    pub lateness: bool,
    /// `keel.late-note`: ticks mode's reports say what their lateness measures.
    pub late_note: bool,
    /// `keel.ansi`: ticks mode prints a line with ANSI escape sequences at each report too.
    pub ansi: bool,
    /// `keel.histogram`: ticks mode prints its tick lateness histogram too.
    pub histogram: bool,
    /// `keel.control`: ticks mode runs the control loop too.
    pub control: bool,
    /// `keel.peer`: the VM that commands the control loop.
    pub peer: u64,
    /// `keel.max`: the largest message the peer takes, in bytes (at least 1).
    pub max_message: usize,
    /// `keel.input`: what ticks mode does with console input.
    pub input: InputMode,
}

/// A boot argument the guest cannot use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionError<'a> {
    key: &'static str,
    value: &'a str,
    expected: &'static str,
}

impl fmt::Display for OptionError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad boot argument {}={}: expected {}",
            self.key, self.value, self.expected
        )
    }
}

impl<'a> Options<'a> {
    /// Parses the `keel.*` tokens of `args`; other tokens are ignored.
    pub fn parse(args: BootArgs<'a>) -> Result<Self, OptionError<'a>> {
        let mode = match args.value("keel.mode") {
            None | Some("ticks") => Mode::Ticks,
            Some("bench") => Mode::Bench,
            Some("spin") => Mode::Spin,
            Some("job") => Mode::Job,
            Some("share") => Mode::Share,
            Some("pingpong") => Mode::Pingpong,
            Some("work") => Mode::Work,
            Some("messages") => Mode::Messages,
            Some("channel") => Mode::Channel,
            Some("rtc") => Mode::Rtc,
            Some("edu") => Mode::Edu,
            Some("trace-reader") => Mode::TraceReader,
            Some("manager") => Mode::Manager,
            Some("task-reuse") => Mode::TaskReuse,
            Some("sgi") => Mode::Sgi,
            Some("walk") => Mode::Walk,
            Some(value) => {
                return Err(OptionError {
                    key: "keel.mode",
                    value,
                    expected: "ticks, bench, spin, job, share, pingpong, work, messages, channel, \
                           rtc, edu, trace-reader, manager, task-reuse, sgi or walk",
                })
            }
        };
        let number =
            |key: &'static str, expected: &'static str| -> Result<Option<u64>, OptionError<'a>> {
                args.value(key)
                    .map(|value| {
                        value.parse().map_err(|_| OptionError {
                            key,
                            value,
                            expected,
                        })
                    })
                    .transpose()
            };
        let seconds = |key: &'static str| number(key, "whole seconds");
        let target = args
            .value("keel.target")
            .map(|value| {
                let digits = value
                    .strip_prefix("0x")
                    .or_else(|| value.strip_prefix("0X"));
                u64::from_str_radix(digits.unwrap_or(value), 16).map_err(|_| OptionError {
                    key: "keel.target",
                    value,
                    expected: "a hexadecimal address",
                })
            })
            .transpose()?;
        let hex = |key: &'static str| {
            args.value(key)
                .map(|value| {
                    u64::from_str_radix(value.trim_start_matches("0x"), 16).map_err(|_| {
                        OptionError {
                            key,
                            value,
                            expected: "a hexadecimal address",
                        }
                    })
                })
                .transpose()
        };
        let canary = hex("keel.canary")?;
        let pristine = hex("keel.pristine")?;
        let report_every_seconds = match seconds("keel.report")? {
            None => 1,
            Some(0) => {
                return Err(OptionError {
                    key: "keel.report",
                    value: "0",
                    expected: "at least 1 second",
                })
            }
            Some(every) => every,
        };
        let work_us = match args.value("keel.work") {
            Some("forever") => None,
            None => Some(100),
            Some(value) => Some(value.parse().map_err(|_| OptionError {
                key: "keel.work",
                value,
                expected: "microseconds or forever",
            })?),
        };
        let iterations = number("keel.iterations", "a whole number")?.unwrap_or(10_000_000);
        let start_ms = number("keel.start", "milliseconds")?.unwrap_or(0);
        let print_ms = number("keel.print", "milliseconds")?.unwrap_or(0);
        let peer = number("keel.peer", "a VM id")?.unwrap_or(0);
        let max_message = match number("keel.max", "a size in bytes")? {
            None => 256,
            Some(0) => {
                return Err(OptionError {
                    key: "keel.max",
                    value: "0",
                    expected: "at least 1 byte",
                })
            }
            Some(max) => max as usize,
        };
        let input = match args.value("keel.input") {
            None | Some("echo") => InputMode::Echo,
            Some("count") => InputMode::Count,
            Some("ignore") => InputMode::Ignore,
            Some(value) => {
                return Err(OptionError {
                    key: "keel.input",
                    value,
                    expected: "echo, count or ignore",
                })
            }
        };
        Ok(Self {
            input,
            control: args.has_flag("keel.control"),
            peer,
            max_message,
            lateness: args.has_flag("keel.lateness"),
            late_note: args.has_flag("keel.late-note"),
            ansi: args.has_flag("keel.ansi"),
            histogram: args.has_flag("keel.histogram"),
            start_ms,
            print_ms,
            iterations,
            work_us,
            native: args.has_flag("keel.native"),
            mode,
            report_every_seconds,
            off_after_seconds: seconds("keel.off")?,
            reset_after_seconds: seconds("keel.reset")?,
            hostile: args.value("keel.hostile"),
            hostile_after_seconds: seconds("keel.hostile-after")?
                .unwrap_or(DEFAULT_HOSTILE_AFTER_SECONDS),
            target,
            canary,
            watchdog: args.has_flag("keel.watchdog"),
            hang_after_seconds: seconds("keel.hang")?,
            pristine,
        })
    }
}
