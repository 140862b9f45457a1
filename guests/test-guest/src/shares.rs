//! Modes for shared pCPUs: `job` (a periodic real-time job released by Keel's scheduler) and
//! `share` (a best-effort CPU hog that measures the pCPU time it gets).

use keel_guest::histogram::{Histogram, Line, Printer};
use keel_guest::keel::{sched_stats, yield_now};
use keel_guest::{println, timer};

/// A gap in the counter longer than this, seen between two reads of a tight loop, is time
/// the vCPU did not run (counter ticks; 16 µs at QEMU's 62.5 MHz).
const DESCHEDULED_GAP_TICKS: u64 = 1000;

/// `keel.mode=job`: each job does `work_us` of work (counter time), then yields: its job is
/// complete and it waits for its next release. `None` (`keel.work=forever`): it never
/// yields, so Keel throttles it at its budget every period. Reports Keel's statistics
/// every `report_seconds`: its jobs since this loop began (its boot's are left out), its
/// misses, overruns and worst response since the VM started.
pub fn job(work_us: Option<u64>, report_seconds: u64) -> ! {
    let frequency = timer::frequency();
    let work = work_us.map(|us| us * frequency / 1_000_000);
    let report_every = report_seconds * frequency;
    let mut next_report = timer::counter() + report_every;
    let mut seconds = 0;
    // Keel's count of this vCPU's jobs when this loop begins (the guest's boot ran in them):
    // each report counts from here, over the same seconds as its `s=`.
    let released_before = sched_stats().map_or(0, |stats| stats.jobs);
    loop {
        let start = timer::counter();
        loop {
            let now = timer::counter();
            if work.is_some_and(|work| now - start >= work) || now >= next_report {
                break;
            }
        }
        let now = timer::counter();
        if now >= next_report {
            next_report += report_every;
            seconds += report_seconds;
            match sched_stats() {
                Ok(stats) => println!(
                    "[job] s={seconds} jobs={} misses={} overruns={} worst_response_us={}",
                    stats.jobs.saturating_sub(released_before),
                    stats.deadline_misses,
                    stats.overruns,
                    stats.worst_response_ns / 1000
                ),
                Err(error) => println!("[job] s={seconds} no statistics: {error:?}"),
            }
        }
        if work.is_some() {
            yield_now();
        }
    }
}

/// `keel.mode=share`: spins, counting the counter time it ran (gaps longer than
/// [`DESCHEDULED_GAP_TICKS`] are time another vCPU had), and reports every `report_seconds`
/// the microseconds it ran and the microseconds that passed.
pub fn share(report_seconds: u64) -> ! {
    let frequency = timer::frequency();
    let report_every = report_seconds * frequency;
    let begin = timer::counter();
    let mut last = begin;
    let mut ran = 0u64;
    let mut next_report = begin + report_every;
    loop {
        let now = timer::counter();
        let step = now - last;
        if step < DESCHEDULED_GAP_TICKS {
            ran += step;
        }
        last = now;
        if now >= next_report {
            next_report += report_every;
            let micros = |ticks: u64| ticks * 1_000_000 / frequency;
            println!(
                "[share] ran_us={} elapsed_us={}",
                micros(ran),
                micros(now - begin)
            );
            last = timer::counter();
        }
    }
}

/// Yields per measured round of `pingpong` mode.
const PINGPONG_YIELDS: u64 = 1000;
/// Measured rounds.
const PINGPONG_ROUNDS: usize = 5;
/// Each yield of the round after the measured ones (counter ticks), for the distribution.
static PINGPONG_HISTOGRAM: Histogram = Histogram::new();

/// Lets EL1 and EL0 use FP/SIMD (CPACR_EL1.FPEN = 0b11; the entry state traps it).
fn enable_fp() {
    // SAFETY: only changes whether this guest's own FP/SIMD instructions trap at EL1.
    unsafe {
        core::arch::asm!(
            "mrs {tmp}, cpacr_el1",
            "orr {tmp}, {tmp}, #(3 << 20)",
            "msr cpacr_el1, {tmp}",
            "isb",
            tmp = out(reg) _,
            options(nomem, nostack, preserves_flags)
        )
    };
}

/// Writes an FP/SIMD register: the first FP/SIMD instruction after a switch, which Keel's
/// lazy switch traps.
fn touch_fp(value: u64) {
    // SAFETY: writes D0 only, which nothing in this soft-float guest uses.
    unsafe {
        core::arch::asm!(
            ".arch_extension fp",
            "fmov d0, {value}",
            ".arch_extension nofp",
            value = in(reg) value,
            options(nomem, nostack, preserves_flags)
        )
    };
}

/// Reads D0 back (see [`touch_fp`]).
fn read_fp() -> u64 {
    let value: u64;
    // SAFETY: reads D0 only.
    unsafe {
        core::arch::asm!(
            ".arch_extension fp",
            "fmov {value}, d0",
            ".arch_extension nofp",
            value = out(reg) value,
            options(nomem, nostack, preserves_flags)
        )
    };
    value
}

/// One yield of `pingpong` mode; with `fp`, D0 holds `value` across it (written before, read
/// after: the read is the first FP/SIMD instruction after the partner ran). Returns whether
/// D0 changed meanwhile (another VM's FP/SIMD registers leaked in, or ours were lost).
fn pingpong_yield(fp: bool, value: u64) -> bool {
    if !fp {
        yield_now();
        return false;
    }
    touch_fp(value);
    yield_now();
    read_fp() != value
}

/// `keel.mode=pingpong`: yields (with `fp`, touching FP/SIMD before each yield, and keeping its
/// own value in D0 across its first [`PINGPONG_YIELDS`], counting those after which it was not
/// there: `fp: <n> yields checked, <m> with D0 changed`), then powers off; with
/// `measure` (the VM owns the PMU), counts the instructions of [`PINGPONG_YIELDS`] yields in
/// each of [`PINGPONG_ROUNDS`] rounds and prints them per yield as a benchmark figure, then
/// times [`PINGPONG_YIELDS`] more one by one and prints their histogram (`hist:
/// switch-pair ...`, see [`keel_guest::histogram`]). With a partner vCPU doing the same on one
/// round-robin pCPU, one yield is two vCPU switches.
pub fn pingpong(measure: bool, fp: bool) -> ! {
    if fp {
        enable_fp();
    }
    // The two VMs of a ping-pong keep different values in D0.
    let marker = if measure {
        0xaaaa_0000_0000
    } else {
        0x5555_0000_0000
    };
    // D0 is checked across the first PINGPONG_YIELDS yields of each VM (the measuring VM's
    // warm-up), not in the timed rounds, whose loop stays the bare write and yield.
    let mut changed = 0u64;
    if !measure {
        // As many yields as the measuring vCPU makes, and some: then off, so that the system
        // ends (alone on the pCPU, a yield returns at once).
        let yields = (PINGPONG_ROUNDS as u64 + 3) * PINGPONG_YIELDS;
        for i in 0..PINGPONG_YIELDS {
            changed += u64::from(pingpong_yield(fp, marker | i));
        }
        for i in PINGPONG_YIELDS..yields {
            if fp {
                touch_fp(i);
            }
            yield_now();
        }
        if fp {
            println!("fp: {PINGPONG_YIELDS} yields checked, {changed} with D0 changed");
        }
        keel_guest::system_off()
    }
    // Timed with the virtual counter, not the PMU: on a shared pCPU each VM's PMU is its own,
    // stopped while the partner runs. Under `-icount shift=0` a nanosecond is an instruction,
    // and a round of 1,000 yields makes the counter's 16 ns tick negligible.
    let per_second = keel_guest::timer::frequency().max(1);
    // Warm up: let the partner start and both settle into alternation (D0 checked).
    for i in 0..PINGPONG_YIELDS {
        changed += u64::from(pingpong_yield(fp, marker | i));
    }
    let (mut min, mut max, mut total) = (u64::MAX, 0, 0);
    for _ in 0..PINGPONG_ROUNDS {
        let start = keel_guest::timer::counter();
        // Two loops, so that the one without FP/SIMD is the bare yield (no test of `fp` in it).
        if fp {
            for i in 0..PINGPONG_YIELDS {
                touch_fp(i);
                yield_now();
            }
        } else {
            for _ in 0..PINGPONG_YIELDS {
                yield_now();
            }
        }
        let ticks = keel_guest::timer::counter() - start;
        let per_yield = ticks * 1_000_000_000 / per_second / PINGPONG_YIELDS;
        min = min.min(per_yield);
        max = max.max(per_yield);
        total += per_yield;
    }
    // The distribution: each yield timed alone (the counter's 16 ns ticks), the recording
    // between two yields' brackets; after the measured rounds, so that they stay bare.
    for i in 0..PINGPONG_YIELDS {
        let start = keel_guest::timer::counter();
        if fp {
            touch_fp(i);
        }
        yield_now();
        PINGPONG_HISTOGRAM.record(keel_guest::timer::counter() - start);
    }
    let name = if fp { "switch-pair-fp" } else { "switch-pair" };
    println!(
        "bench: {name} min={min} avg={} max={max}",
        total / PINGPONG_ROUNDS as u64
    );
    let (mut printer, mut line) = (Printer::new(per_second), Line::new());
    while printer.next_line(&PINGPONG_HISTOGRAM, name, &mut line) {
        println!("{}", line.as_str());
    }
    if fp {
        println!("fp: {PINGPONG_YIELDS} yields checked, {changed} with D0 changed");
    }
    println!("bench: done");
    keel_guest::system_off()
}

/// `keel.mode=work`: a fixed CPU-bound workload (`iterations` rounds of xorshift64, the
/// M5150 paper's kind of benchmark), timed with the counter, then SYSTEM_OFF. Run alone
/// natively and as n VMs on one pCPU, it gives the scheduler's overhead.
/// Work starts once the counter reaches `start_ms` (all VMs of a run have booted by then, so
/// their boot is not timed). The result is printed once the counter reaches `print_ms`
/// (sleeping in WFI until then), so that a VM done early does not print while the others
/// still work: its console line would be timed as theirs.
pub fn work(iterations: u64, start_ms: u64, print_ms: u64) -> ! {
    let start_at = start_ms * timer::frequency() / 1000;
    while timer::counter() < start_at {
        core::hint::spin_loop();
    }
    let start = timer::counter();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..iterations {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
    }
    let end = timer::counter();
    timer::sleep_until(print_ms * timer::frequency() / 1000);
    println!(
        "[work] start={start} end={end} result={:#x}",
        state & 0xffff
    );
    keel_guest::system_off()
}
