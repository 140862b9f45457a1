//! Modes for shared pCPUs: `job` (a periodic real-time job released by Keel's scheduler) and
//! `share` (a best-effort CPU hog that measures the pCPU time it gets).

use keel_guest::keel::{sched_stats, yield_now};
use keel_guest::{println, timer};

/// A gap in the counter longer than this, seen between two reads of a tight loop, is time
/// the vCPU did not run (counter ticks; 16 µs at QEMU's 62.5 MHz).
const DESCHEDULED_GAP_TICKS: u64 = 1000;

/// `keel.mode=job`: each job does `work_us` of work (counter time), then yields: its job is
/// complete and it waits for its next release. `None` (`keel.work=forever`): it never
/// yields, so Keel throttles it at its budget every period. Reports Keel's statistics
/// every `report_seconds`.
pub fn job(work_us: Option<u64>, report_seconds: u64) -> ! {
    let frequency = timer::frequency();
    let work = work_us.map(|us| us * frequency / 1_000_000);
    let report_every = report_seconds * frequency;
    let mut next_report = timer::counter() + report_every;
    let mut seconds = 0;
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
                    stats.jobs,
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
