//! `keel.mode=walk`: a real-time partition's memory-bound work, for the shared-cache
//! experiment (`cargo xtask bench llc`). It walks a working set of `keel.bytes` bytes (default
//! 256 KiB, at most [`MAX_BYTES`]) over and over, reading and writing one word in each 64-byte
//! line, and times each walk on the virtual counter. Every `keel.walks` walks (default 100) it
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

use core::cell::UnsafeCell;

use keel_guest::bootargs::BootArgs;
use keel_guest::{println, system_off, timer};

/// The largest working set.
pub const MAX_BYTES: usize = 1 << 20;
/// Bytes between the words a walk touches: one per line of a 64-byte-line cache.
const STRIDE: usize = 64;

#[repr(C, align(4096))]
struct WorkingSet(UnsafeCell<[u64; MAX_BYTES / 8]>);

// SAFETY: only vCPU 0 runs this mode, and only through `walk` below.
unsafe impl Sync for WorkingSet {}

static WORKING_SET: WorkingSet = WorkingSet(UnsafeCell::new([0; MAX_BYTES / 8]));

/// One walk over the first `bytes` of the working set.
fn walk(bytes: usize) {
    let base = WORKING_SET.0.get().cast::<u64>();
    for offset in (0..bytes.min(MAX_BYTES)).step_by(STRIDE) {
        // SAFETY: `offset` is inside the working set (bounded above) and 8-byte aligned; only
        // this vCPU touches it.
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
    walk(bytes);
    for _ in 0..reports {
        let (mut min, mut max, mut total) = (u64::MAX, 0, 0);
        for _ in 0..walks {
            let now = timer::counter();
            if now >= deadline {
                deadline = now + period;
                timer::set_deadline(deadline);
            }
            let start = timer::counter();
            walk(bytes);
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
