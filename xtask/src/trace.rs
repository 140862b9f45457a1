//! `cargo xtask trace CONFIG [--seconds N]`: boots CONFIG with Keel's trace on under icount,
//! stops the machine once N seconds of virtual time are traced, reads every pCPU's ring out
//! of its memory through QEMU's QMP (`pmemsave`), and writes them as a Chrome trace-event JSON
//! file, which Perfetto's UI (ui.perfetto.dev) and chrome://tracing open.
//!
//! The rings' address comes from Keel's boot line (`trace: N rings of B bytes at 0x...`):
//! Keel runs with its addresses equal to physical ones. While the machine runs, xtask stops
//! it about twice a second of real time, reads the rings and lets it go on until the newest
//! record is N seconds after boot; stopping QEMU does not move the virtual clock, so the run
//! is the same as one never stopped.
//!
//! The JSON (see [`chrome_trace`]): one process per pCPU with a track of vCPU runs (slices from
//! a switch-in to the next switch-out or switch-in) and a track of Keel's work (slices from a
//! guest exit to its end, instant events for physical interrupts and the scheduler's
//! decisions), and one process per VM with a track per vCPU (instant events for its
//! interrupts, EOIs, jobs, messages and marks) and a counter of each real-time vCPU's budget
//! left (at each release and switch-out).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use keel_core::histogram::{self, Bucket, Distribution};
use keel_core::trace::{self, Event, Kind, SwitchReason, NO_VM};
use serde::{Deserialize, Serialize};

use crate::plots::{Panel, Plot};

use crate::image::output_dir;
use crate::{step, Result};

/// Each pCPU's ring when the configuration has no `[system] trace` of its own: room for
/// about two seconds of a Linux boot beside a 1 kHz partition (about 55,000 events a second
/// on its pCPU) without overwriting.
pub const DEFAULT_RING_BYTES: u64 = 4 << 20;

/// Real time a trace run may take before it is given up.
const DEADLINE: Duration = Duration::from_secs(900);

/// One pCPU's ring as read from memory, decoded.
pub struct Ring {
    pub pcpu: u32,
    pub frequency: u64,
    /// Records overwritten before the read.
    pub lost: u64,
    pub events: Vec<Event>,
}

/// A traced run: the rings, the VMs' names (by id), and the console's lines.
pub struct Traced {
    pub rings: Vec<Ring>,
    pub vms: Vec<String>,
    pub lines: Vec<String>,
}

/// A QMP connection to a running QEMU.
struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects to the socket at `path` (QEMU creates it as it starts) and leaves the
    /// capabilities negotiation.
    fn connect(path: &Path) -> Result<Qmp> {
        let started = Instant::now();
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(stream) => break stream,
                Err(_) if started.elapsed() < Duration::from_secs(10) => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(error) => return Err(format!("QMP socket {}: {error}", path.display())),
            }
        };
        let writer = stream.try_clone().map_err(|e| e.to_string())?;
        let mut qmp = Qmp {
            reader: BufReader::new(stream),
            writer,
        };
        qmp.answer()?; // the greeting
        qmp.execute(serde_json::json!({"execute": "qmp_capabilities"}))?;
        Ok(qmp)
    }

    /// The next line that is not an asynchronous event.
    fn answer(&mut self) -> Result<serde_json::Value> {
        loop {
            let mut line = String::new();
            let read = self
                .reader
                .read_line(&mut line)
                .map_err(|e| format!("QMP: {e}"))?;
            if read == 0 {
                return Err("QMP: QEMU closed the connection".into());
            }
            let value: serde_json::Value =
                serde_json::from_str(&line).map_err(|e| format!("QMP answer {line:?}: {e}"))?;
            if value.get("event").is_none() {
                return Ok(value);
            }
        }
    }

    /// Runs `command`, failing with QMP's own error.
    fn execute(&mut self, command: serde_json::Value) -> Result<serde_json::Value> {
        writeln!(self.writer, "{command}").map_err(|e| format!("QMP: {e}"))?;
        let answer = self.answer()?;
        match answer.get("error") {
            Some(error) => Err(format!("QMP {command}: {error}")),
            None => Ok(answer),
        }
    }

    /// `size` bytes of physical memory at `address`, through a file.
    fn read_memory(&mut self, address: u64, size: usize, file: &Path) -> Result<Vec<u8>> {
        self.execute(serde_json::json!({
            "execute": "pmemsave",
            "arguments": {"val": address, "size": size, "filename": file.display().to_string()}
        }))?;
        std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))
    }
}

/// The rings' place from Keel's boot line: address, count and bytes of each.
fn rings_line(line: &str) -> Option<(u64, usize, usize)> {
    let rest = line.strip_prefix("[keel] trace: ")?;
    let (rings, rest) = rest.split_once(" rings of ")?;
    let (bytes, rest) = rest.split_once(" bytes at ")?;
    let address = rest.split_once(',')?.0.strip_prefix("0x")?;
    Some((
        u64::from_str_radix(address, 16).ok()?,
        rings.parse().ok()?,
        bytes.parse().ok()?,
    ))
}

/// A traced machine running: its image, console session, QMP connection, and where its rings
/// are (address, count, bytes of each).
struct Running {
    image: crate::image::SystemImage,
    session: crate::qemu::Session,
    qmp: Qmp,
    rings: (u64, usize, usize),
    dump: PathBuf,
}

impl Running {
    /// Builds `config` with the trace on (its own `[system] trace`, or rings of
    /// `default_bytes`) and boots it, under icount or in real time, with a QMP socket; with
    /// `no_shutdown`, QEMU stays, stopped, when the guest powers off.
    fn start(config: &Path, default_bytes: u64, icount: bool, no_shutdown: bool) -> Result<Self> {
        crate::image::build_guests()?;
        let image = crate::image::build_system_traced(config, default_bytes)?;
        let dir = output_dir().join("trace");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let socket = dir.join(format!("{}.qmp", image.system.name));
        let _ = std::fs::remove_file(&socket);
        let machine = crate::qemu::Machine {
            qmp: Some(socket.clone()),
            no_shutdown,
            ..crate::image::machine(&image, icount)?
        };
        let log = output_dir().join(format!(
            "logs/trace-{}{}.log",
            image.system.name,
            if icount { "" } else { "-realtime" }
        ));
        let mut session = machine.spawn(&log)?;
        let line = session.wait_for(r"^\[keel\] trace: \d+ rings of ", Duration::from_secs(60))?;
        let rings = rings_line(&line).ok_or_else(|| format!("unexpected trace line: {line}"))?;
        let qmp = Qmp::connect(&socket)?;
        let dump = dir.join(format!("{}.rings", image.system.name));
        Ok(Self {
            image,
            session,
            qmp,
            rings,
            dump,
        })
    }

    /// Every ring as it is now (the machine stopped meanwhile, and left stopped).
    fn read(&mut self) -> Result<Vec<Ring>> {
        let (address, count, bytes) = self.rings;
        self.qmp.execute(serde_json::json!({"execute": "stop"}))?;
        let memory = self.qmp.read_memory(address, count * bytes, &self.dump)?;
        read_rings(&memory, count, bytes)
    }

    /// Whether the guest has powered the machine off (QEMU kept it, stopped).
    fn powered_off(&mut self) -> Result<bool> {
        let answer = self
            .qmp
            .execute(serde_json::json!({"execute": "query-status"}))?;
        Ok(answer["return"]["status"] == "shutdown")
    }

    /// Kills QEMU: the run's rings, VM names and console.
    fn end(self, rings: Vec<Ring>) -> Traced {
        let ended = self.session.kill();
        Traced {
            rings,
            vms: self
                .image
                .system
                .vms
                .iter()
                .map(|vm| vm.name.clone())
                .collect(),
            lines: ended.lines,
        }
    }
}

/// Boots `config` with the trace on, until `seconds` of virtual time are traced, or until it
/// powers itself off before that (QEMU stays, stopped: `-no-shutdown`; the last second of a
/// system that ends can pass between two looks).
pub fn run(config: &Path, seconds: f64) -> Result<Traced> {
    let mut running = Running::start(config, DEFAULT_RING_BYTES, true, true)?;
    let started = Instant::now();
    let rings = loop {
        std::thread::sleep(Duration::from_millis(500));
        let rings = running.read()?;
        let newest = rings
            .iter()
            .filter_map(|ring| {
                let last = ring.events.last()?;
                Some(last.time as f64 / ring.frequency.max(1) as f64)
            })
            .fold(0.0, f64::max);
        if newest >= seconds {
            break rings;
        }
        if running.powered_off()? {
            step(&format!(
                "the machine powered off at {newest:.3} s of virtual time: the trace ends there"
            ));
            break rings;
        }
        if started.elapsed() > DEADLINE {
            running.session.kill();
            return Err(format!(
                "the trace reached {newest:.3} s of virtual time in {} s, not {seconds} s",
                DEADLINE.as_secs()
            ));
        }
        running
            .qmp
            .execute(serde_json::json!({"execute": "cont"}))?;
    };
    Ok(running.end(rings))
}

/// Boots `config` with the trace on (rings of `default_bytes` unless it has its own), under
/// icount or in real time, until Keel powers the machine off (QEMU stays, stopped:
/// `-no-shutdown`), or `wait` has passed; then reads every ring once. For runs whose rings
/// hold all that matters: a full ring has overwritten its oldest records (counted as lost).
pub fn run_to_end(
    config: &Path,
    default_bytes: u64,
    icount: bool,
    wait: Duration,
) -> Result<Traced> {
    let mut running = Running::start(config, default_bytes, icount, true)?;
    running
        .session
        .wait_for(r"^\[keel\] all VMs have ended: powering off$", wait)?;
    // The power-off follows the line at once; the stop below makes sure of it either way.
    std::thread::sleep(Duration::from_millis(200));
    let rings = running.read()?;
    Ok(running.end(rings))
}

/// The `count` rings of `bytes` each in `memory`, checked and decoded.
pub fn read_rings(memory: &[u8], count: usize, bytes: usize) -> Result<Vec<Ring>> {
    (0..count)
        .map(|index| {
            let view = memory
                .get(index * bytes..(index + 1) * bytes)
                .ok_or_else(|| format!("ring {index}: memory read short"))
                .and_then(|ring| {
                    trace::read_ring(ring).map_err(|e| format!("ring {index}: {e}"))
                })?;
            Ok(Ring {
                pcpu: view.header.pcpu,
                frequency: view.header.frequency,
                lost: view.lost,
                events: view.events().collect(),
            })
        })
        .collect()
}

/// One event of the Chrome trace-event format (the fields Keel's trace uses).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TraceEvent {
    pub name: String,
    /// Phase: `X` a slice with a duration, `i` an instant, `C` a counter, `M` metadata.
    pub ph: String,
    /// Microseconds since boot.
    #[serde(default)]
    pub ts: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    pub pid: u32,
    #[serde(default)]
    pub tid: u32,
    /// An instant's scope (`t`: its thread's track).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, serde_json::Value>,
}

/// The whole file: `{"traceEvents": [...], "displayTimeUnit": "ns"}`.
#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraceFile {
    pub trace_events: Vec<TraceEvent>,
    pub display_time_unit: String,
}

/// Process ids: pCPU `n` is `n + 1`; VM `n` is `100 + n`. Threads of a pCPU: its vCPU runs
/// ([`RUNS`]) and Keel's work ([`KEEL`]); of a VM: its vCPUs.
const RUNS: u32 = 0;
const KEEL: u32 = 1;

fn pcpu_pid(pcpu: u32) -> u32 {
    pcpu + 1
}

fn vm_pid(vm: u8) -> u32 {
    100 + u32::from(vm)
}

fn metadata(name: &str, pid: u32, tid: u32, value: &str) -> TraceEvent {
    TraceEvent {
        name: name.into(),
        ph: "M".into(),
        ts: 0.0,
        dur: None,
        pid,
        tid,
        s: None,
        args: BTreeMap::from([("name".into(), value.into())]),
    }
}

fn instant(
    name: String,
    ts: f64,
    pid: u32,
    tid: u32,
    args: BTreeMap<String, serde_json::Value>,
) -> TraceEvent {
    TraceEvent {
        name,
        ph: "i".into(),
        ts,
        dur: None,
        pid,
        tid,
        s: Some("t".into()),
        args,
    }
}

fn slice(name: String, from: f64, to: f64, pid: u32, tid: u32) -> TraceEvent {
    TraceEvent {
        name,
        ph: "X".into(),
        ts: from,
        dur: Some((to - from).max(0.0)),
        pid,
        tid,
        s: None,
        args: BTreeMap::new(),
    }
}

/// A counter of `event`'s vCPU's budget left (its argument, counter ticks at `frequency`),
/// in µs, on its VM's track.
fn budget(vms: &[String], event: &Event, at: f64, frequency: u64) -> TraceEvent {
    TraceEvent {
        name: format!("budget {} (µs)", vcpu_name(vms, event.vm, event.vcpu)),
        ph: "C".into(),
        ts: at,
        dur: None,
        pid: vm_pid(event.vm),
        tid: 0,
        s: None,
        args: BTreeMap::from([(
            "left".into(),
            (f64::from(event.arg) * 1e6 / frequency.max(1) as f64).into(),
        )]),
    }
}

/// A VM's and vCPU's name in the trace.
fn vcpu_name(vms: &[String], vm: u8, vcpu: u8) -> String {
    let name = vms.get(usize::from(vm)).map_or("?", String::as_str);
    format!("{name}.vcpu{vcpu}")
}

/// A record of vCPU 0 (the tests' events).
#[cfg(test)]
pub(crate) fn event(time: u64, kind: Kind, vm: u8, detail: u8, arg: u32) -> Event {
    Event {
        time,
        kind,
        vm,
        vcpu: 0,
        detail,
        arg,
    }
}

/// Names an exit by its exception class.
pub(crate) fn exit_name(detail: u8, arg: u32) -> String {
    match detail {
        trace::EXIT_IRQ => format!("irq {arg}"),
        0x16 => format!("hvc {arg:#x}"),
        0x18 => "sysreg".into(),
        0x24 => format!("data abort {:#x}", u64::from(arg) << 12),
        0x20 => "instruction abort".into(),
        0x01 => "wfi/wfe".into(),
        0x17 => "smc".into(),
        class => format!("exit class {class:#x}"),
    }
}

/// The Chrome trace of `traced`.
pub fn chrome_trace(traced: &Traced) -> TraceFile {
    let mut events = Vec::new();
    for (vm, name) in traced.vms.iter().enumerate() {
        events.push(metadata(
            "process_name",
            vm_pid(vm as u8),
            0,
            &format!("VM {name}"),
        ));
    }
    for ring in &traced.rings {
        let pid = pcpu_pid(ring.pcpu);
        let us = |time: u64| time as f64 * 1e6 / ring.frequency.max(1) as f64;
        events.push(metadata(
            "process_name",
            pid,
            0,
            &format!("pCPU {}", ring.pcpu),
        ));
        events.push(metadata("thread_name", pid, RUNS, "vCPU runs"));
        events.push(metadata("thread_name", pid, KEEL, "Keel"));
        let mut run: Option<(f64, u8, u8)> = None;
        let mut exit: Option<(f64, String)> = None;
        let end_run = |run: &mut Option<(f64, u8, u8)>, at: f64, events: &mut Vec<TraceEvent>| {
            if let Some((from, vm, vcpu)) = run.take() {
                events.push(slice(vcpu_name(&traced.vms, vm, vcpu), from, at, pid, RUNS));
            }
        };
        for event in &ring.events {
            let at = us(event.time);
            let args = |pairs: &[(&str, serde_json::Value)]| {
                pairs
                    .iter()
                    .map(|(key, value)| (key.to_string(), value.clone()))
                    .collect::<BTreeMap<_, _>>()
            };
            match event.kind {
                Kind::SwitchIn => {
                    end_run(&mut run, at, &mut events);
                    run = Some((at, event.vm, event.vcpu));
                }
                Kind::SwitchOut => {
                    end_run(&mut run, at, &mut events);
                    if event.arg != u32::MAX {
                        events.push(budget(&traced.vms, event, at, ring.frequency));
                    }
                    let reason =
                        SwitchReason::from_u8(event.detail).map_or("?", SwitchReason::name);
                    events.push(instant(
                        format!("switch out: {reason}"),
                        at,
                        pid,
                        KEEL,
                        args(&[("vcpu", vcpu_name(&traced.vms, event.vm, event.vcpu).into())]),
                    ));
                }
                Kind::Exit => exit = Some((at, exit_name(event.detail, event.arg))),
                Kind::ExitEnd => {
                    if let Some((from, name)) = exit.take() {
                        events.push(slice(name, from, at, pid, KEEL));
                    }
                }
                Kind::PhysIrq => events.push(instant(
                    format!("irq {}", event.arg),
                    at,
                    pid,
                    KEEL,
                    BTreeMap::new(),
                )),
                Kind::Decide => {
                    let picked = if event.vm == NO_VM {
                        "idle".to_string()
                    } else {
                        vcpu_name(&traced.vms, event.vm, event.vcpu)
                    };
                    events.push(instant(
                        format!("decide: {picked}"),
                        at,
                        pid,
                        KEEL,
                        args(&[(
                            "until_us",
                            if event.arg == u32::MAX {
                                serde_json::Value::Null
                            } else {
                                us(u64::from(event.arg)).into()
                            },
                        )]),
                    ));
                }
                Kind::JobRelease if event.arg != u32::MAX => {
                    events.push(budget(&traced.vms, event, at, ring.frequency));
                    events.push(instant(
                        "job-release".into(),
                        at,
                        vm_pid(event.vm),
                        u32::from(event.vcpu),
                        args(&[("pcpu", ring.pcpu.into()), ("jobs", event.detail.into())]),
                    ));
                }
                kind if event.vm != NO_VM => {
                    if kind == Kind::Inject && event.detail & trace::INJECT_AFTER_EOI != 0 {
                        events.push(instant(
                            format!("eoi {}", event.arg),
                            at,
                            vm_pid(event.vm),
                            u32::from(event.vcpu),
                            args(&[("pcpu", ring.pcpu.into()), ("kind", "eoi".into())]),
                        ));
                    }
                    let mut extra = vec![
                        ("pcpu", ring.pcpu.into()),
                        ("kind", kind.name().into()),
                        ("arg", event.arg.into()),
                    ];
                    if kind == Kind::JobComplete {
                        extra.push(("response_us", us(u64::from(event.arg)).into()));
                    }
                    let name = match kind {
                        Kind::Inject => format!("inject {}", event.arg),
                        Kind::Eoi => format!("eoi {}", event.arg),
                        Kind::Mark => format!("mark {}", event.arg),
                        kind => kind.name().to_string(),
                    };
                    events.push(instant(
                        name,
                        at,
                        vm_pid(event.vm),
                        u32::from(event.vcpu),
                        args(&extra),
                    ));
                }
                _ => {}
            }
        }
        if let Some(last) = ring.events.last() {
            end_run(&mut run, us(last.time), &mut events);
        }
    }
    TraceFile {
        trace_events: events,
        display_time_unit: "ns".into(),
    }
}

/// `cargo xtask trace CONFIG [--seconds N]`: the run, its JSON written beside the rings'
/// dump, and a summary of what it holds.
pub fn command(config: &Path, seconds: f64) -> Result<PathBuf> {
    let traced = run(config, seconds)?;
    let (path, file) = write_json(config, &traced)?;
    let stem = stem(config);
    for plot in plots(
        &traced,
        &crate::plots::directory(),
        &format!("trace-{stem}"),
    )? {
        step(&format!("plot: {} and .png", plot.svg.display()));
    }
    for ring in &traced.rings {
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for event in &ring.events {
            *kinds.entry(event.kind.name()).or_default() += 1;
        }
        step(&format!(
            "pCPU {}: {} events ({} overwritten): {}",
            ring.pcpu,
            ring.events.len(),
            ring.lost,
            kinds
                .iter()
                .map(|(kind, n)| format!("{kind} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    step(&format!(
        "wrote {} ({} trace events): open it in ui.perfetto.dev",
        path.display(),
        file.trace_events.len()
    ));
    Ok(path)
}

/// The distribution of `samples` (counter ticks at `frequency`), in ns, in the histogram
/// buckets the guests' reports use.
fn distribution(samples: impl Iterator<Item = u64>, frequency: u64) -> Distribution {
    let mut counts: BTreeMap<usize, u64> = BTreeMap::new();
    for ticks in samples {
        *counts.entry(histogram::bucket(ticks)).or_default() += 1;
    }
    let ns = |ticks: u64| u128::from(ticks) * 1_000_000_000 / u128::from(frequency.max(1));
    Distribution {
        buckets: counts
            .into_iter()
            .map(|(index, count)| {
                let (low, high) = histogram::bounds(index);
                Bucket {
                    low: ns(low) as u64,
                    high: ns(high) as u64,
                    count,
                }
            })
            .collect(),
    }
}

/// The panels of named distributions.
fn panels(named: &[(String, Distribution)]) -> Vec<Panel<'_>> {
    named
        .iter()
        .map(|(title, distribution)| Panel {
            title: title.clone(),
            distribution,
        })
        .collect()
}

/// The plots of a trace, as `<stem>-exits` (each pCPU's exits, from the exit to its end: what
/// Keel spends on a trap or an interrupt) and `<stem>-responses` (each real-time vCPU's job
/// response times, from its releases to its completions) in `directory`; the second only if
/// a vCPU completed jobs.
pub fn plots(traced: &Traced, directory: &Path, stem: &str) -> Result<Vec<Plot>> {
    let mut exits = Vec::new();
    let mut responses: BTreeMap<(u8, u8), (Vec<u64>, u64)> = BTreeMap::new();
    for ring in &traced.rings {
        let mut durations = Vec::new();
        let mut exit = None;
        for event in &ring.events {
            match event.kind {
                Kind::Exit => exit = Some(event.time),
                Kind::ExitEnd => {
                    if let Some(start) = exit.take() {
                        durations.push(event.time - start);
                    }
                }
                Kind::JobComplete => responses
                    .entry((event.vm, event.vcpu))
                    .or_insert_with(|| (Vec::new(), ring.frequency))
                    .0
                    .push(u64::from(event.arg)),
                _ => {}
            }
        }
        if !durations.is_empty() {
            exits.push((
                format!("pCPU {}: exit to its end", ring.pcpu),
                distribution(durations.into_iter(), ring.frequency),
            ));
        }
    }
    let mut written = Vec::new();
    if !exits.is_empty() {
        written.push(crate::plots::histograms(
            directory,
            &format!("{stem}-exits"),
            &format!("{stem}: Keel's exits, from the trace"),
            2,
            &panels(&exits),
        )?);
    }
    let responses: Vec<(String, Distribution)> = responses
        .into_iter()
        .map(|((vm, vcpu), (samples, frequency))| {
            (
                format!("{}: job response time", vcpu_name(&traced.vms, vm, vcpu)),
                distribution(samples.into_iter(), frequency),
            )
        })
        .collect();
    if !responses.is_empty() {
        written.push(crate::plots::histograms(
            directory,
            &format!("{stem}-responses"),
            &format!("{stem}: real-time vCPUs' job response times, from the trace"),
            2,
            &panels(&responses),
        )?);
    }
    Ok(written)
}

/// What a trace of `config` is named by: its file's stem.
fn stem(config: &Path) -> String {
    config
        .file_stem()
        .map_or("trace".into(), |stem| stem.to_string_lossy().into_owned())
}

/// Writes `traced`'s Chrome trace as `target/keel/trace/<config's stem>.json`; returns its path
/// and what it holds.
pub fn write_json(config: &Path, traced: &Traced) -> Result<(PathBuf, TraceFile)> {
    write_json_named(&stem(config), traced)
}

/// Writes `traced`'s Chrome trace as `target/keel/trace/<name>.json`; returns its path and
/// what it holds.
pub fn write_json_named(name: &str, traced: &Traced) -> Result<(PathBuf, TraceFile)> {
    let file = chrome_trace(traced);
    let path = output_dir().join("trace").join(format!("{name}.json"));
    let json = serde_json::to_string(&file).map_err(|e| e.to_string())?;
    std::fs::write(&path, json).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((path, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_line_gives_the_rings_place() {
        assert_eq!(
            rings_line("[keel] trace: 2 rings of 262208 bytes at 0x40253000, one per pCPU"),
            Some((0x4025_3000, 2, 262_208))
        );
        assert_eq!(rings_line("[keel] trace: two rings"), None);
    }

    #[test]
    fn runs_and_exits_become_slices_and_the_file_reads_back() {
        let traced = Traced {
            rings: vec![Ring {
                pcpu: 1,
                frequency: 1_000_000,
                lost: 0,
                events: vec![
                    event(10, Kind::SwitchIn, 0, 0, 0),
                    event(20, Kind::Exit, 0, 0x16, 0xc600_0002),
                    event(25, Kind::ExitEnd, NO_VM, 0, 0),
                    event(30, Kind::SwitchOut, 0, SwitchReason::Yielded as u8, 0),
                    event(31, Kind::SwitchIn, 1, 0, 0),
                    event(40, Kind::Inject, 1, 1, 27),
                    event(50, Kind::PhysIrq, NO_VM, 0, 27),
                ],
            }],
            vms: vec!["linux".into(), "rt".into()],
            lines: Vec::new(),
        };
        let file = chrome_trace(&traced);
        let json = serde_json::to_string(&file).unwrap();
        let back: TraceFile = serde_json::from_str(&json).unwrap();
        let slices: Vec<(&str, f64, f64)> = back
            .trace_events
            .iter()
            .filter(|e| e.ph == "X")
            .map(|e| (e.name.as_str(), e.ts, e.dur.unwrap()))
            .collect();
        assert_eq!(
            slices,
            [
                ("hvc 0xc6000002", 20.0, 5.0),
                ("linux.vcpu0", 10.0, 20.0),
                ("rt.vcpu0", 31.0, 19.0)
            ]
        );
        let inject = back
            .trace_events
            .iter()
            .find(|e| e.name == "inject 27")
            .unwrap();
        assert_eq!((inject.pid, inject.tid, inject.ts), (101, 0, 40.0));
        assert!(back
            .trace_events
            .iter()
            .any(|e| e.name == "switch out: yielded" && e.pid == 2 && e.tid == KEEL));
    }
}
