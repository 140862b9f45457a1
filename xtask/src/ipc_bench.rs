//! Benchmarks of messages between VMs (`cargo xtask bench messages`), beside the M5150
//! paper's table II: the instructions of a send, of a receive of a queued message, and of a
//! whole delivery (the sender's send until the receiver's receive returns, with the switch
//! between them when both share a pCPU), for 20-100 byte messages. Under
//! `-icount shift=0,sleep=off` (1 instruction = 1 ns), timed with the virtual counter (16 ns
//! steps, so each figure is an average over many calls).

use std::time::Duration;

use crate::image::{build_guests, build_system};
use crate::qemu::Machine;
use crate::sched_bench::figure;
use crate::{workspace, Result};

/// The paper's sizes and figures (MIPS M5150 at 100 MHz, instructions): send, receive, delivery.
const M5150: [(usize, u64, u64, u64); 5] = [
    (20, 1420, 1042, 2594),
    (40, 1485, 1107, 2724),
    (60, 1550, 1172, 2854),
    (80, 1615, 1237, 2984),
    (100, 1680, 1302, 3114),
];

/// Boots benchmark configuration `name` (configs/bench) to its end; its figures.
pub(crate) fn run(name: &str) -> Result<crate::qemu::Ended> {
    run_config(&format!("configs/bench/{name}.toml"), name, "bench: done")
}

/// Boots configuration `relative` (to the workspace) until QEMU ends; checks a line ends
/// with `done`.
fn run_config(relative: &str, name: &str, done: &str) -> Result<crate::qemu::Ended> {
    let path = workspace().join(relative);
    let image = build_system(&path)?;
    let log = crate::image::output_dir().join(format!("logs/{name}.log"));
    let ended = Machine::keel_icount(&image)
        .spawn(&log)?
        .finish(Duration::from_secs(600));
    if !ended.lines.iter().any(|l| l.contains(done)) {
        return Err(format!(
            "{name}: the benchmark did not finish (log: {})",
            log.display()
        ));
    }
    Ok(ended)
}

/// `avg (min-max)` of a figure.
fn cell(figure: (u64, u64, u64)) -> String {
    format!("{} ({}-{})", figure.1, figure.0, figure.2)
}

/// Prints the table.
pub fn run_all() -> Result<()> {
    build_guests()?;
    let one = run("messages-one-pcpu")?;
    let two = run("messages-two-pcpus")?;
    println!(
        "Messages between two VMs (instructions under icount: avg (min-max) of 128 sends, 128 \
         receives of a queued message, 64 deliveries; M5150 = the paper's table II):"
    );
    println!(
        "{:>5} | {:<20} {:<20} {:>6} | {:<20} {:<20} {:>6} | {:<20} {:<20} {:>6}",
        "bytes",
        "send, 1 pCPU",
        "send, 2 pCPUs",
        "M5150",
        "receive, 1 pCPU",
        "receive, 2 pCPUs",
        "M5150",
        "delivery, 1 pCPU",
        "delivery, 2 pCPUs",
        "M5150"
    );
    for (size, send, receive, delivery) in M5150 {
        let f = |ended, what: &str| figure(ended, &format!("{what}-{size}")).map(cell);
        println!(
            "{size:>5} | {:<20} {:<20} {send:>6} | {:<20} {:<20} {receive:>6} | {:<20} {:<20} {delivery:>6}",
            f(&one, "msg-send")?,
            f(&two, "msg-send")?,
            f(&one, "msg-receive")?,
            f(&two, "msg-receive")?,
            f(&one, "msg-delivery")?,
            f(&two, "msg-delivery")?,
        );
    }
    println!(
        "1 pCPU: sender and receiver round robin on one pCPU; a delivery includes the sender's \
         receive that gives the pCPU away and the switch. 2 pCPUs: pinned; a delivery includes \
         the kick SGI and the receiver's wake from WFI."
    );
    println!();
    for (config, setting) in [
        ("chan-two-pcpus", "writer and reader on two pinned pCPUs"),
        ("chan-one-pcpu", "writer and reader round robin on one pCPU"),
    ] {
        let ended = run_config(
            &format!("configs/tests/{config}.toml"),
            config,
            "bench: doorbell-round-trip",
        )?;
        let found = ended
            .lines
            .iter()
            .find_map(|line| line.split_once("bench: doorbell-round-trip "))
            .map(|(_, figures)| figures.to_string())
            .ok_or(format!("{config}: no doorbell figure"))?;
        println!(
            "Doorbell round trip over a shared-memory channel, {setting} (instructions): {found}"
        );
    }
    let round_trip = virtio_round_trip()?;
    println!(
        "Linux to the real-time partition and back over the virtio console (/dev/hvc0, a 5-byte \
         line each way, from Debian's busybox shell, `configs/tests/linux-virtio.toml`): \
         {round_trip:.1} us per round trip (1,000 round trips, the guest's uptime at 10 ms \
         resolution)"
    );
    Ok(())
}

/// Boots the virtio console scenario's configuration until Linux's test ends; the time of
/// one of its 1,000 round trips, in µs.
fn virtio_round_trip() -> Result<f64> {
    let path = workspace().join("configs/tests/linux-virtio.toml");
    let image = build_system(&path)?;
    let log = crate::image::output_dir().join("logs/bench-linux-virtio.log");
    let mut session = Machine::keel_icount(&image).spawn(&log)?;
    let outcome = session.wait_for(r"^\[linux\] KEEL-INIT-END ", Duration::from_secs(900));
    let ended = session.kill();
    outcome?;
    let uptime = |edge: &str| {
        let pattern = format!("KEEL-STEP virtio-1000-round-trips {edge} ");
        ended
            .lines
            .iter()
            .find_map(|line| line.split_once(pattern.as_str()))
            .and_then(|(_, rest)| rest.split_whitespace().next()?.parse::<f64>().ok())
            .ok_or(format!("no '{pattern}' line (log: {})", log.display()))
    };
    Ok((uptime("END")? - uptime("BEGIN")?) * 1e6 / 1000.0)
}
