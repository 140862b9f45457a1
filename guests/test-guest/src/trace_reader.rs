//! Trace-reader mode (`keel.mode=trace-reader`): a manager VM reading Keel's trace rings into
//! its own memory with KEEL_TRACE_READ, as a Linux tool would stream them.
//!
//! Every 10 ms it copies what each pCPU's ring gained (`keel.pcpus=<n>` rings, default 2), a
//! call's worth (`TRACE_READ_MAX` records) at a time until it has caught up or made
//! [`CALLS_PER_PASS`] calls for that pCPU, and checks each record:
//! a known kind, and a time never before the previous record's of that pCPU. Records the ring
//! overwrote before they were read are counted as lost, not as errors. Each second it prints
//! `trace-reader: s=<s> pcpu=<p> records=<n> lost=<n> marks=<n>` per pCPU; any record that fails
//! its check prints `trace-reader: pcpu=<p> record <i> bad: <why>` and ends the run; a VM
//! without the grant prints `trace-reader: denied` once. After `keel.seconds=<s>` (default 3),
//! SYSTEM_OFF.

use keel_guest::abi::{CallError, TRACE_READ_MAX};
use keel_guest::bootargs::BootArgs;
use keel_guest::trace::{read, Copied, Event, Kind, RECORD_BYTES};
use keel_guest::{println, system_off, timer};

/// Most pCPUs read.
const MAX_PCPUS: usize = 8;
/// Most calls for one pCPU in one pass (a ring filling faster than this reads is left for
/// the next pass; what it overwrites meanwhile is counted lost).
const CALLS_PER_PASS: usize = 128;

/// What was read of one pCPU's ring.
#[derive(Clone, Copy, Default)]
struct Reading {
    next: u64,
    records: u64,
    lost: u64,
    marks: u64,
    last_time: u64,
}

/// The records of one copy, checked into `reading`; the first bad record's index and why.
fn take(reading: &mut Reading, copied: &Copied, buffer: &[u8]) -> Result<(), (u64, &'static str)> {
    if copied.first > reading.next {
        reading.lost += copied.first - reading.next;
    }
    let records = buffer
        .get(copied.offset..)
        .unwrap_or_default()
        .chunks_exact(RECORD_BYTES)
        .take(copied.count as usize);
    for (n, record) in records.enumerate() {
        let index = copied.first + n as u64;
        let word = |at: usize| {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(&record[at..at + 8]);
            u64::from_le_bytes(bytes)
        };
        let Some(event) = Event::decode(word(0), word(8)) else {
            return Err((index, "unknown kind"));
        };
        if event.time < reading.last_time {
            return Err((index, "earlier than the record before it"));
        }
        reading.last_time = event.time;
        reading.records += 1;
        if event.kind == Kind::Mark {
            reading.marks += 1;
        }
    }
    reading.next = copied.first + copied.count;
    Ok(())
}

/// Runs trace-reader mode.
pub fn run(args: BootArgs<'_>) -> ! {
    let pcpus = args
        .value("keel.pcpus")
        .and_then(|value| value.parse::<usize>().ok())
        .unwrap_or(2)
        .min(MAX_PCPUS);
    let seconds = args
        .value("keel.seconds")
        .and_then(|value| value.parse::<u64>().ok())
        .unwrap_or(3);
    let frequency = timer::frequency();
    let start = timer::counter();
    let mut buffer = [0u8; TRACE_READ_MAX * RECORD_BYTES];
    let mut readings = [Reading::default(); MAX_PCPUS];
    let mut reported = 0;
    loop {
        for (pcpu, reading) in readings.iter_mut().enumerate().take(pcpus) {
            for _ in 0..CALLS_PER_PASS {
                match read(pcpu as u64, reading.next, &mut buffer) {
                    Ok(copied) => {
                        if let Err((index, why)) = take(reading, &copied, &buffer) {
                            println!("trace-reader: pcpu={pcpu} record {index} bad: {why}");
                            system_off();
                        }
                        if copied.first + copied.count >= copied.head {
                            break;
                        }
                    }
                    Err(CallError::Denied) => {
                        println!("trace-reader: denied");
                        system_off();
                    }
                    Err(error) => {
                        println!("trace-reader: pcpu={pcpu} read failed: {error:?}");
                        system_off();
                    }
                }
            }
        }
        let elapsed = (timer::counter() - start) / frequency;
        if elapsed > reported {
            reported = elapsed;
            for (pcpu, reading) in readings.iter().enumerate().take(pcpus) {
                println!(
                    "trace-reader: s={elapsed} pcpu={pcpu} records={} lost={} marks={}",
                    reading.records, reading.lost, reading.marks
                );
            }
            if elapsed >= seconds {
                system_off();
            }
        }
        timer::sleep_until(timer::counter() + frequency / 100);
    }
}
