//! Keel's sample real-time partition: a control application whose three periodic tasks
//! (1 ms, 5 ms and 20 ms) are created by Keel as vCPUs of this partition and scheduled by Keel
//! itself (EDF or fixed priority, with enforced budgets), M5150-style, rather than by a
//! scheduler of the partition's own.
//!
//! Each job does a measured amount of work (calibrated loop iterations), and records its
//! release jitter (start − ideal release) and response time (end − ideal release). vCPU 0
//! creates and launches the tasks with a common first release (phase alignment), then prints
//! a summary once a second: the tasks' own figures and Keel's statistics (KEEL_TASK_STATS).
//!
//! Boot arguments (`/chosen/bootargs`):
//! - `control.seconds=N`: after N seconds, print the final summary and power the partition
//!   off (default: run for ever);
//! - `control.overrun=I`: task I works three times its budget (it is throttled and counted);
//! - `control.extra=PERIOD_US:BUDGET_US`: after launching, ask for a fourth task (refused
//!   when it does not fit the partition's grant or the pCPU);
//! - `control.delete=I@S`: delete task I at second S, check that it stopped, and create it
//!   again (its vCPU and slot are reused);
//! - `control.manage=VM`: be a manager instead: try to read, launch and delete the tasks of
//!   VM `VM` and print what Keel answered;
//! - `control.histograms`: each second, after the summary, print each task's histograms of
//!   response time and release jitter since the start (`hist: task0-response ...`);
//! - `control.masked=PCPU`: each second, also print pCPU PCPU's longest stretch with
//!   interrupts masked at EL2 since the last report (KEEL_MASKED_STRETCH), and where;
//! - `control.bench=PCPU`: measure the task services instead (see [`bench`]).
#![no_std]
#![no_main]

mod bench;
mod control;
mod manage;

use keel_guest::bootargs::BootArgs;
use keel_guest::devicetree::{boot_info, device_tree_at};
use keel_guest::{println, system_off};

keel_guest::entry!(main);

fn main(device_tree_address: usize) -> ! {
    // SAFETY: x0 at entry is the address of the device tree Keel loaded, never written.
    let info = match unsafe { device_tree_at(device_tree_address) }.and_then(|t| boot_info(&t)) {
        Ok(info) => info,
        Err(error) => {
            println!("control: unreadable device tree: {error}");
            system_off();
        }
    };
    let args = BootArgs::new(info.bootargs);
    if let Some(pcpu) = args.value("control.bench") {
        bench::run(pcpu.parse().unwrap_or(1));
    }
    match args.value("control.manage") {
        Some(vm) => manage::run(vm),
        None => control::run(&args),
    }
}

/// Converts between the counter's ticks and time.
pub struct Clock {
    frequency: u64,
}

impl Clock {
    fn new() -> Self {
        Self {
            frequency: keel_guest::timer::frequency().max(1),
        }
    }

    /// Ticks in `us` microseconds.
    fn us(&self, us: u64) -> u64 {
        us * self.frequency / 1_000_000
    }

    /// Nanoseconds in `ticks`.
    fn ns(&self, ticks: u64) -> u64 {
        ticks * 1_000_000_000 / self.frequency
    }
}

/// Sleeps (WFI) until the counter reaches `at`: the SDK's, used by the tasks and the manager.
use keel_guest::timer::sleep_until;

/// A line of text built in place (no allocator).
pub struct Line {
    bytes: [u8; 160],
    len: usize,
}

impl Line {
    fn new() -> Self {
        Self {
            bytes: [0; 160],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("?")
    }
}

impl core::fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = self.bytes.len() - self.len;
        let n = s.len().min(room);
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    keel_guest::fatal::fatal_panic(info)
}
