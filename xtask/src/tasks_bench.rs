//! Benchmarks of real-time tasks and of Keel's interruptibility (`cargo xtask bench tasks`):
//! the task services' costs, the sample partition's release jitter and response times alone
//! and next to Linux, the longest stretch Keel runs with interrupts masked on the pCPU Linux
//! shares (boot, stress-ng, reset), and the 1 kHz partition's tick lateness while that Linux
//! boots, resets and reboots. Everything under `-icount shift=0,sleep=off` (1 instruction =
//! 1 ns), with one busy pCPU.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use regex::Regex;

use crate::exec_trace::{self, Symbols};
use crate::image::{build_guests, build_system, output_dir};
use crate::plots::Panel;
use crate::qemu::{Ended, ExecLog, Machine};
use crate::sched_bench::{boot_generated, distribution, figure, lateness, run_config, LINUX_VM};
use crate::{step, Result};

fn header(name: &str, policy: &str) -> String {
    format!(
        "[system]\nname = \"{name}\"\nram = {{ base = 0x4000_0000, size = \"1G\" }}\n\
         hypervisor = {{ base = 0x4000_0000, size = \"64M\" }}\npcpus = 2\n\n\
         [[pcpu]]\nid = 1\npolicy = \"{policy}\"\n"
    )
}

/// The sample partition on pCPU 1 with `cmdline`.
fn control(cmdline: &str, pmu: bool) -> String {
    format!(
        "\n[[vm]]\nname = \"control\"\nimage = {{ guest = \"rt-control\" }}\n\
         memory = {{ base = 0x6800_0000, size = \"16M\" }}\npcpus = [1]\ndevices = [\"console\"]\n\
         pmu = {pmu}\ntasks = {{ max = 3, utilisation = \"60%\" }}\ncmdline = \"control.pcpu=1 {cmdline}\"\n"
    )
}

/// The sample partition reporting the masked stretches of pCPU 1, which it shares with
/// Linux, with `cmdline` too: only a VM configured as a monitor may read a record of a pCPU
/// another VM uses.
fn masked_monitor(cmdline: &str) -> String {
    control(&format!("control.masked=1 {cmdline}"), false) + "monitor_masked_stretch = true\n"
}

/// Boots a generated configuration until each `(pattern, count)` has matched `count` console
/// lines in all (in order).
fn run_until(name: &str, text: &str, patterns: &[(&str, usize)]) -> Result<Ended> {
    let (mut session, _) = boot_generated(name, text)?;
    let mut outcome = Ok(());
    for &(pattern, count) in patterns {
        outcome = outcome.and_then(|_| {
            session
                .wait_for_count(pattern, count, Duration::from_secs(1200))
                .map(|_| ())
        });
    }
    let ended = session.kill();
    outcome.map(|()| ended)
}

/// The task services' costs.
fn services() -> Result<()> {
    let name = "bench-task-services";
    let ended = run_config(
        name,
        &(header(name, "edf") + &control("control.bench=1", true)),
    )?;
    let null = figure(&ended, "hvc-null")?;
    println!();
    println!("Real-time task services, EDF pCPU (instructions: min / avg / max; ratio of the average to the null hypercall's {}):", null.1);
    for (figure_name, what) in [
        ("task-create", "create (admission included)"),
        ("task-launch", "launch (first release later)"),
        ("task-delete", "delete (task not running)"),
        (
            "task-wait",
            "wait for the next period, to the next task's first instruction",
        ),
    ] {
        let (min, avg, max) = figure(&ended, figure_name)?;
        println!(
            "  {what:<64} {min} / {avg} / {max}  ({:.1}x)",
            avg as f64 / null.1.max(1) as f64
        );
    }
    Ok(())
}

/// `(jitter min, jitter max, response min, avg, max, Keel's worst lateness)` in ns, and the
/// misses, from the last report of each task.
fn task_figures(ended: &Ended) -> Result<Vec<(u64, [u64; 6], u64)>> {
    let pattern = Regex::new(
        r"^\[control\] control: (?:t|final)=\d+ s task (\d) \((\d+) us\): at_us=\d+ jobs=\d+ jitter_ns=(\d+)/(\d+) response_ns=(\d+)/(\d+)/(\d+) \| keel: jobs=\d+ misses=(\d+) overruns=\d+ worst_response_ns=\d+ worst_lateness_ns=(\d+)$",
    )
    .unwrap();
    let mut last: Vec<Option<(u64, [u64; 6], u64)>> = vec![None; 3];
    for c in ended.lines.iter().filter_map(|l| pattern.captures(l)) {
        let n = |i: usize| c[i].parse::<u64>().unwrap();
        let task = n(1) as usize;
        if let Some(slot) = last.get_mut(task) {
            *slot = Some((n(2), [n(3), n(4), n(5), n(6), n(7), n(9)], n(8)));
        }
    }
    last.into_iter()
        .enumerate()
        .map(|(task, r)| r.ok_or(format!("the partition never reported task {task}")))
        .collect()
}

fn print_tasks(label: &str, figures: &[(u64, [u64; 6], u64)]) {
    println!("  {label}:");
    for (period, f, misses) in figures {
        println!(
            "    {:>5} us task: jitter {} / {} ns, response {} / {} / {} ns, Keel's worst release lateness {} ns, {misses} misses",
            period, f[0], f[1], f[2], f[3], f[4], f[5]
        );
    }
}

/// `(second, longest_ns, site)` of every masked-stretch report, with its line index.
fn masked_reports(ended: &Ended) -> Vec<(usize, u64, String)> {
    let pattern =
        Regex::new(r"^\[control\] control: masked pCPU 1: s=\d+ longest_ns=(\d+) site=(.+ esr=0x[0-9a-f]+ elr=0x[0-9a-f]+)$")
            .unwrap();
    ended
        .lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let c = pattern.captures(l)?;
            Some((i, c[1].parse().unwrap(), c[2].to_string()))
        })
        .collect()
}

/// The index of the first line matching `pattern`.
fn line_index(ended: &Ended, pattern: &str) -> Result<usize> {
    let regex = Regex::new(pattern).unwrap();
    ended
        .lines
        .iter()
        .position(|l| regex.is_match(l))
        .ok_or(format!("no console line matched /{pattern}/"))
}

/// The longest masked stretch (and its site) among the reports printed between lines
/// `from` and `to`.
fn longest_between(reports: &[(usize, u64, String)], from: usize, to: usize) -> (u64, String) {
    reports
        .iter()
        .filter(|(i, _, _)| (from..to).contains(i))
        .max_by_key(|(_, ns, _)| *ns)
        .map(|(_, ns, site)| (*ns, site.clone()))
        .unwrap_or((0, "none".into()))
}

/// The sample tasks alone and next to Linux, and the masked stretches of Linux's pCPU.
fn sample_and_masked() -> Result<()> {
    let name = "bench-tasks-alone";
    let alone = run_until(
        name,
        &(header(name, "edf") + &control("control.seconds=5 control.histograms", false)),
        &[(r"^\[control\] control: done after 5 s$", 1)],
    )?;
    let name = "bench-tasks-linux";
    let text = header(name, "edf")
        + LINUX_VM
        + "cmdline = \"console=ttyAMA0 keel.test=load\"\n"
        + &masked_monitor("control.histograms");
    let loaded = run_until(
        name,
        &text,
        &[
            (r"^\[keel\] vm 'linux' \(id 0\) powered off$", 1),
            (r"^\[control\] control: masked pCPU 1: ", 1),
        ],
    )?;
    println!();
    println!("The sample partition's tasks (1 ms / 200 us budget / 100 us work, 5 ms / 1 ms / 500 us, 20 ms / 3 ms / 2 ms; EDF), min / max jitter, min / avg / max response from the ideal release:");
    print_tasks("alone on their pCPU", &task_figures(&alone)?);
    print_tasks(
        "sharing it with Debian Linux (boot, stress-ng --cpu 1 for 10 s)",
        &task_figures(&loaded)?,
    );
    for (kind, what) in [
        ("response", "response time (job end - ideal release)"),
        ("jitter", "release jitter (job start - ideal release)"),
    ] {
        let mut distributions = Vec::new();
        for (task, label) in ["1 ms", "5 ms", "20 ms"].iter().enumerate() {
            let name = format!("task{task}-{kind}");
            for (run, ended) in [("alone", &alone), ("beside Linux", &loaded)] {
                distributions.push((
                    format!("{label} task, {run}"),
                    distribution(ended, "control", &name)?,
                ));
            }
        }
        let panels: Vec<Panel<'_>> = distributions
            .iter()
            .map(|(title, distribution)| Panel {
                title: title.clone(),
                distribution,
            })
            .collect();
        crate::plots::publish_histograms(
            &format!("task-{kind}"),
            &format!("The sample partition's tasks (EDF): {what}"),
            2,
            &panels,
        )?;
    }

    let name = "bench-tasks-reset";
    let text = header(name, "edf")
        + "\n[[vm]]\nname = \"linux\"\nimage = { debian = \"cloud-arm64\" }\n\
           memory = { base = 0x4800_0000, size = \"256M\" }\npcpus = [1]\ndevices = [\"console\"]\n\
           cmdline = \"console=ttyAMA0 panic=1\"\n"
        + &masked_monitor("");
    let reset = run_until(
        name,
        &text,
        &[
            (r"^\[keel\] vm 'linux' \(id 0\) reloaded: ", 2),
            (r"^\[keel\] vm 'linux' \(id 0\) starts at ", 3),
            (r"^\[control\] control: masked pCPU 1: ", 6),
        ],
    )?;
    let reports = masked_reports(&loaded);
    let init = line_index(&loaded, r"^\[linux\] KEEL-INIT-START$")?;
    let begin = line_index(&loaded, r"^\[linux\] KEEL-STEP load BEGIN")?;
    let end = line_index(&loaded, r"^\[linux\] KEEL-STEP load END")?;
    // The partition reports each second the stretches since its last report: the reports up
    // to the first after Linux's init (at about 0.8 s, before the first report) cover the
    // whole boot.
    let covering = reports
        .iter()
        .find(|(i, _, _)| *i > init)
        .map_or(init, |(i, _, _)| i + 1);
    let boot = longest_between(&reports, 0, covering);
    let stress = longest_between(&reports, begin, end + 1);
    let reset_reports = masked_reports(&reset);
    let resets = line_index(&reset, r"^\[keel\] vm 'linux' \(id 0\) resets$")?;
    let during_reset = longest_between(&reset_reports, resets, reset.lines.len());
    let reload = Regex::new(r"reloaded: (\d+) bytes in (\d+) steps over (\d+) us$").unwrap();
    let (bytes, steps, micros) = reset
        .lines
        .iter()
        .find_map(|l| reload.captures(l))
        .map(|c| (c[1].to_string(), c[2].to_string(), c[3].to_string()))
        .ok_or("no reload line")?;
    println!();
    println!("Longest stretch Keel ran with interrupts masked at EL2 on the pCPU Linux shares with the partition (KEEL_MASKED_STRETCH, instructions):");
    println!("  during Linux's boot:          {} ({})", boot.0, boot.1);
    println!(
        "  during stress-ng --cpu 1:     {} ({})",
        stress.0, stress.1
    );
    println!(
        "  from Linux's reset on:        {} ({})",
        during_reset.0, during_reset.1
    );
    println!(
        "  the reset's reload: {bytes} bytes in {steps} steps over {micros} us, which before this issue was one masked stretch"
    );
    watchdog_restart()
}

/// The masked stretches of a health restart: Linux (its SP805 kept by busybox's `watchdog`,
/// timeout 3 s) crashes on purpose (`keel.test=crash`: sysrq c) and its watchdog's expiry
/// restarts it from its pristine image, beside the sample partition on the same pCPU.
fn watchdog_restart() -> Result<()> {
    let name = "bench-tasks-watchdog";
    let text = header(name, "edf")
        + "\n[[vm]]\nname = \"linux\"\nimage = { debian = \"cloud-arm64\" }\n\
           initrd = { debian = \"cloud-arm64\" }\nmemory = { base = 0x4800_0000, size = \"256M\" }\n\
           pcpus = [1]\ndevices = [\"console\", \"watchdog\"]\n\
           cmdline = \"console=ttyAMA0 keel.watchdog=3 keel.test=crash\"\n\n\
           [vm.health]\nwatchdog = { action = \"restart\" }\n"
        + &masked_monitor("");
    let restart = r"^\[keel\] vm 'linux' \(id 0\) restarts: watchdog expired$";
    let ended = run_until(
        name,
        &text,
        &[
            (restart, 1),
            (r"^\[keel\] vm 'linux' \(id 0\) reloaded: ", 1),
            (r"^\[keel\] vm 'linux' \(id 0\) starts at ", 2),
            (r"^\[control\] control: masked pCPU 1: ", 1),
        ],
    )?;
    let reports = masked_reports(&ended);
    let crash = line_index(&ended, r"^\[linux\] KEEL-CRASH now$")?;
    let restarts = line_index(&ended, restart)?;
    let started = line_index(&ended, r"^\[keel\] vm 'linux' \(id 0\) reloaded: ")?;
    // The partition reports each second the stretches since its last: the first report after
    // the restart's vCPU start covers the whole restart.
    let covering = reports
        .iter()
        .find(|(i, _, _)| *i > started)
        .map_or(ended.lines.len(), |(i, _, _)| i + 1);
    let (longest, site) = longest_between(&reports, crash, covering);
    let before = longest_between(&reports, 0, crash);
    println!(
        "  a watchdog restart of Linux (sysrq c, its SP805's expiry 3 s later, its reload), from the crash: {longest} ({site}); before the crash: {} ({})",
        before.0, before.1
    );
    if restarts > covering {
        return Err("no masked-stretch report covers the restart".into());
    }
    Ok(())
}

/// The longest masked stretch of each pCPU in a boot of the demo (`configs/demo.toml`: Debian
/// Linux on pCPUs 1 and 2, the real-time partition on 3, pCPU 0 left to Keel) up to Linux's
/// shell.
fn demo_boot() -> Result<()> {
    println!();
    println!("Longest stretch Keel ran with interrupts masked at EL2 in a boot of the demo to Linux's shell, per pCPU (`bench masked`, instructions):");
    masked_stretches(
        &crate::workspace().join("configs/demo.toml"),
        Some(r"^\[linux\] KEEL-INIT-END shell$"),
        false,
    )
}

/// `cargo xtask bench masked CONFIG [REGEX] [--path]`: boots CONFIG under icount until QEMU
/// ends (or a console line matches REGEX) and prints the longest stretch each pCPU ran with
/// interrupts masked at EL2 after Keel's start of it (with `path`, function by function),
/// counted in the pCPU's own instructions from QEMU's log of Keel's blocks
/// ([`crate::exec_trace`]; with several busy pCPUs the record's counter times would also hold
/// what the others ran in a stretch's middle).
pub fn masked_stretches(config: &Path, until: Option<&str>, path: bool) -> Result<()> {
    let image = build_system(config)?;
    let symbols = Symbols::read(&image.elf)?;
    let (start, end) = symbols.code()?;
    let name = &image.system.name;
    // QEMU writes its log into a FIFO that a thread here reads as it comes: the log of a few
    // seconds is many gigabytes (every block Keel ran), and only its figures are kept.
    let fifo = output_dir().join(format!("logs/masked-{name}.fifo"));
    let _ = std::fs::remove_file(&fifo);
    crate::process::output(Command::new("mkfifo").arg(&fifo))?;
    let mut reader = exec_trace::Reader::new(&symbols)?;
    let reading = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let source = File::open(&fifo).map_err(|e| format!("{}: {e}", fifo.display()))?;
            reader.read(source, &fifo).map(|bytes| (reader, bytes))
        })
    };
    let machine = Machine {
        exec_log: Some(ExecLog {
            path: fifo.clone(),
            start,
            end,
        }),
        ..crate::image::machine(&image, true)?
    };
    let session = machine.spawn(&output_dir().join(format!("logs/masked-{name}.log")));
    let ended = session.and_then(|mut session| {
        let deadline = Duration::from_secs(3600);
        Ok(match until {
            Some(pattern) => {
                let seen = session.wait_for(pattern, deadline);
                let ended = session.kill();
                seen.map_err(|e| format!("{}: {e}{}", config.display(), ended.stderr_note()))?;
                ended
            }
            None => session.finish(deadline),
        })
    });
    // If QEMU never opened the FIFO, the reading thread still waits for a writer: this one,
    // opened without waiting for a reader (O_NONBLOCK), ends it.
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(O_NONBLOCK)
        .open(&fifo);
    let read = reading
        .join()
        .map_err(|_| "the log's reader panicked".to_string());
    let _ = std::fs::remove_file(&fifo);
    let ended = ended?;
    let (reader, bytes) = read??;
    step(&format!("read {} MiB of QEMU's log", bytes >> 20));
    if reader.unlisted > 0 {
        return Err(format!(
            "{}: {} blocks of Keel's ran without their listing in QEMU's log: the counts would be short",
            config.display(),
            reader.unlisted
        ));
    }
    println!(
        "  configuration '{name}', {} console lines, QEMU {}:",
        ended.lines.len(),
        ended
            .exit_code
            .map_or("stopped here".to_string(), |c| format!("exited with {c}"))
    );
    if let Some((pcpu, stretch)) = reader.power_off.as_ref().filter(|p| p.1.instructions > 0) {
        println!(
            "  the machine's power-off, on pCPU {pcpu}: {} (from {}; not among the longest: nothing waits for it)",
            stretch.instructions,
            symbols.place(stretch.first())
        );
    }
    for (pcpu, (stretch, start)) in reader.longest.iter().zip(&reader.first).enumerate() {
        let longest = if stretch.instructions == 0 {
            "none: it waited for an interrupt throughout".to_string()
        } else {
            let most: Vec<String> = stretch
                .by_function(&symbols, 6)
                .iter()
                .map(|(name, n)| format!("{name} {n}"))
                .collect();
            format!(
                "{} (from {} to {}; most in {})",
                stretch.instructions,
                symbols.place(stretch.first()),
                symbols.name(stretch.last()),
                most.join(", ")
            )
        };
        println!(
            "  pCPU {pcpu}: {longest}; Keel's start of the pCPU, to its first guest or wait: {}",
            start.instructions
        );
        if path && stretch.instructions > 0 {
            println!("    its path (function, instructions):");
            for (name, n) in stretch.path(&symbols) {
                println!("      {n:6} {name}");
            }
        }
    }
    Ok(())
}

/// Linux's `O_NONBLOCK`, the same on x86-64 and arm64.
const O_NONBLOCK: i32 = 0o4000;

/// The 1 kHz partition's tick lateness above a Linux that boots, resets and reboots twice.
fn lateness_through_resets() -> Result<()> {
    let text =
        std::fs::read_to_string(crate::workspace().join("configs/bench/lateness-reset.toml"))
            .map_err(|e| format!("configs/bench/lateness-reset.toml: {e}"))?;
    let ended = run_until(
        "bench-lateness-reset",
        &text,
        &[
            (r"^\[keel\] vm 'linux' \(id 0\) resets$", 2),
            (r"^\[keel\] vm 'linux' \(id 0\) starts at ", 3),
            (r"^\[rt\] lateness: ", 6),
            (r"^\[rt\] hist: tick-lateness end ", 6),
        ],
    )?;
    let (min, avg, max) = lateness(&ended, "rt")?;
    let name = "bench-rt-alone";
    let alone = run_config(
        name,
        &format!(
            "[system]\nname = \"{name}\"\nram = {{ base = 0x4000_0000, size = \"1G\" }}\n\
             hypervisor = {{ base = 0x4000_0000, size = \"64M\" }}\npcpus = 2\n\n\
             [[vm]]\nname = \"rt\"\nimage = {{ guest = \"test-guest\" }}\n\
             memory = {{ base = 0x6800_0000, size = \"16M\" }}\npcpus = [1]\ndevices = [\"console\"]\n\
             cmdline = \"keel.mode=ticks keel.lateness keel.histogram keel.off=5\"\n"
        ),
    )?;
    let alone_distribution = distribution(&alone, "rt", "tick-lateness")?;
    let alone = lateness(&alone, "rt")?;
    println!();
    println!(
        "1 kHz partition's tick lateness (ns; min / avg / max), configs/bench/lateness-reset.toml:"
    );
    println!(
        "  alone on its pCPU:                                        {} / {} / {}",
        alone.0, alone.1, alone.2
    );
    println!("  above Linux booting, resetting (27 MB reload) and rebooting, twice: {min} / {avg} / {max}");
    let resets_distribution = distribution(&ended, "rt", "tick-lateness")?;
    crate::plots::publish_histograms(
        "tick-lateness-resets",
        "1 kHz partition's tick lateness (timer deadline to its handler)",
        2,
        &[
            Panel {
                title: "alone on its pCPU, 5 s".into(),
                distribution: &alone_distribution,
            },
            Panel {
                title: "above Linux booting, resetting and rebooting, twice".into(),
                distribution: &resets_distribution,
            },
        ],
    )?;
    Ok(())
}

/// Runs the task benchmarks and prints their figures.
pub fn run(restart_only: bool) -> Result<()> {
    build_guests()?;
    println!("Real-time tasks and interruptibility: QEMU 'virt' cortex-a72, -icount shift=0,sleep=off (1 instruction = 1 ns)");
    if restart_only {
        println!("Longest stretch Keel ran with interrupts masked at EL2 on the pCPU Linux shares with the partition (KEEL_MASKED_STRETCH, instructions):");
        return watchdog_restart();
    }
    services()?;
    sample_and_masked()?;
    demo_boot()?;
    lateness_through_resets()
}
