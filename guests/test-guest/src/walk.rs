//! `keel.mode=walk`: a real-time partition's memory-bound work, for the shared-cache
//! experiment (`cargo xtask bench llc`). It walks a working set of `keel.bytes` bytes (default
//! 256 KiB, at most [`MAX_BYTES`]) at guest-physical `keel.at=<hex>` (default [`DEFAULT_AT`],
//! 8 MiB into the RAM a test guest has at 0x4000_0000; the VM's memory must hold it) over and
//! over, reading and writing one word in each 64-byte line, and times each walk on the virtual
//! counter. (Not a static: the test guest zeroes its .bss at every boot, and 1 MiB more of it
//! would lengthen every mode's boot.) Every `keel.walks` walks (default 100) it
//! prints
//!
//! `walk: walks=100 bytes=262144 lines=4096 ns_min=.. ns_avg=.. ns_max=..`
//!
//! and after `keel.reports` such lines (default 10) `walk: done` and powers off. With
//! `keel.after=<seconds>` it first waits in WFI until the virtual counter reaches that time
//! (beside a Linux VM, until Linux's load runs).
//!
//! It keeps a 1 kHz deadline in its virtual timer, masked (a real-time partition's tick,
//! without the interrupt): under `-icount` QEMU runs the vCPUs in turn, each until the next
//! deadline of any timer, so the deadline makes the vCPUs take turns at least every
//! millisecond, as a SoC's cores run side by side; without one a vCPU's turn lasts up to
//! 100 ms and the walks would never meet the other vCPUs' accesses. Under QEMU's
//! `-icount shift=0` a nanosecond is an instruction, so a walk's time is its instructions: the
//! cache's effect is what an LLC model (the project's QEMU plugin) counts beside it.

use keel_guest::bootargs::BootArgs;
use keel_guest::{println, system_off, timer};

/// The largest working set.
pub const MAX_BYTES: usize = 1 << 20;
/// Bytes between the words a walk touches: one per line of a 64-byte-line cache.
const STRIDE: usize = 64;

/// Where the working set is when `keel.at` does not say.
pub const DEFAULT_AT: u64 = 0x4080_0000;

/// One walk over the first `bytes` of the working set at `at`.
fn walk(at: u64, bytes: usize) {
    let base = at as *mut u64;
    for offset in (0..bytes.min(MAX_BYTES)).step_by(STRIDE) {
        // SAFETY: the working set is RAM of this VM that nothing else of the guest uses (the
        // configuration gives it: `keel.at`), `offset` is inside it (bounded above) and 8-byte
        // aligned, and only this vCPU touches it.
        unsafe {
            let word = base.add(offset / 8);
            word.write_volatile(word.read_volatile().wrapping_add(1));
        }
    }
}

/// Runs the mode; never returns.
pub fn run(args: BootArgs) -> ! {
    let number = |key: &str, default: u64| {
        args.value(key)
            .and_then(|value| value.parse::<u64>().ok())
            .unwrap_or(default)
    };
    let bytes = (number("keel.bytes", 256 * 1024) as usize).clamp(STRIDE, MAX_BYTES);
    let at = args
        .value("keel.at")
        .and_then(|value| u64::from_str_radix(value.trim_start_matches("0x"), 16).ok())
        .unwrap_or(DEFAULT_AT)
        & !7;
    let walks = number("keel.walks", 100).max(1);
    let reports = number("keel.reports", 10);
    let frequency = timer::frequency().max(1);
    let after = number("keel.after", 0).saturating_mul(frequency);
    if timer::counter() < after {
        timer::sleep_until(after);
    }
    let ns = |ticks: u64| (u128::from(ticks) * 1_000_000_000 / u128::from(frequency)) as u64;
    let period = (frequency / 1000).max(1);
    let mut deadline = timer::counter() + period;
    timer::set_deadline(deadline);
    timer::mask();
    // A first walk brings the working set in; it is not counted.
    walk(at, bytes);
    for _ in 0..reports {
        let (mut min, mut max, mut total) = (u64::MAX, 0, 0);
        for _ in 0..walks {
            let now = timer::counter();
            if now >= deadline {
                deadline = now + period;
                timer::set_deadline(deadline);
            }
            let start = timer::counter();
            walk(at, bytes);
            let took = ns(timer::counter() - start);
            min = min.min(took);
            max = max.max(took);
            total += took;
        }
        println!(
            "walk: walks={walks} bytes={bytes} lines={} ns_min={min} ns_avg={} ns_max={max}",
            bytes / STRIDE,
            total / walks
        );
        // A millisecond in WFI between reports: under `-icount`, QEMU wakes a vCPU waiting in
        // WFI for its interrupt (a Linux vCPU, idle or started by Keel's kick) only while no
        // other vCPU runs flat out, so a partition that never waits would starve a Linux VM
        // that is still booting.
        timer::sleep_until(timer::counter() + period);
        deadline = timer::counter() + period;
        timer::set_deadline(deadline);
        timer::mask();
    }
    println!("walk: done");
    system_off()
}
