//! Bench mode: micro-benchmarks counted in instructions (PMCCNTR_EL0 under QEMU `-icount`).
//!
//! Each call-style figure brackets one instruction (`hvc`, `msr`, `ldr`) between
//! `isb; mrs pmccntr_el0` pairs; the cost of the bracket alone is measured first and
//! subtracted, so natively a one-instruction body reports 1. Figures print as
//! `bench: <name> min=<n> avg=<n> max=<n>`.
//!
//! On a GICv2 there is no ICC_SGI1R_EL1 (no system-register CPU interface): `sysreg-trap`
//! prints `n/a`, and `mmio-gicd-sgir` times its counterpart, a store to GICD_SGIR with an
//! empty target list. Which GIC, and where, is read outside the brackets.

use core::arch::asm;
use core::sync::atomic::{AtomicU32, Ordering};

use keel_guest::abi::{layout, psci, KEEL_VERSION};
use keel_guest::exceptions::{set_irq_handler, stamp_irq_entries, IRQ_ENTRY_STAMP};
use keel_guest::gic::{self, IntId, PrivateInterrupts, Version, DISTRIBUTOR};
use keel_guest::{pmu, println, system_off, timer};

use crate::interrupts::PRIORITY;

/// Samples per figure.
const ITERATIONS: u32 = 200;
/// How far ahead the benchmark timer is armed, in counter ticks (16 instructions each
/// under `-icount shift=0` at 62.5 MHz): far enough for the spin loop to be running.
const TIMER_AHEAD_TICKS: u64 = 300;
/// ICC_SGI1R_EL1 with an empty target list: generates no SGI.
const SGI1R_NO_TARGETS: u64 = 0;

/// Minimum, sum and maximum of a series of samples.
#[derive(Clone, Copy, Debug)]
struct Stats {
    min: u64,
    max: u64,
    sum: u64,
    count: u64,
}

impl Stats {
    const fn new() -> Self {
        Self {
            min: u64::MAX,
            max: 0,
            sum: 0,
            count: 0,
        }
    }

    fn add(&mut self, sample: u64) {
        self.min = self.min.min(sample);
        self.max = self.max.max(sample);
        self.sum += sample;
        self.count += 1;
    }

    fn report(&self, name: &str) {
        match self.sum.checked_div(self.count) {
            None => println!("bench: {name} n/a"),
            Some(average) => {
                let (min, max) = (self.min, self.max);
                println!("bench: {name} min={min} avg={average} max={max}");
            }
        }
    }
}

/// Runs every benchmark, prints `bench: done` and powers off.
pub fn run(native: bool, interrupts: &PrivateInterrupts) -> ! {
    pmu::enable_cycle_counter();
    stamp_irq_entries();
    let bracket = minimum(bracket_alone);

    if native {
        println!("bench: hvc-null n/a");
    } else {
        series(bracket, hvc_keel_version).report("hvc-null");
    }
    series(bracket, hvc_psci_version).report("psci-version");
    match gic::version() {
        Version::V3 => series(bracket, write_sgi1r).report("sysreg-trap"),
        Version::V2 => {
            println!("bench: sysreg-trap n/a");
            series(bracket, store_gicd_sgir).report("mmio-gicd-sgir");
        }
    }
    series(bracket, load_gicd_typer).report("mmio-gicd-typer");

    let_console_settle();
    let (entry, round_trip) = timer_interrupt_series(interrupts);
    entry.report("timer-irq-entry");
    round_trip.report("timer-irq-roundtrip");

    println!("bench: done");
    system_off();
}

/// Waits 2 ms of virtual time while Keel's console pCPU writes out the lines just printed:
/// asleep (WFI), so that QEMU runs that pCPU now. Under QEMU's one-thread round robin an
/// interrupt raised for an idle pCPU by this one (the console's, telling it output waits) is
/// seen when this vCPU's turn ends, at the next timer event: that would be in the series
/// below, its work counted in one of this vCPU's samples (the cycle counter follows virtual
/// time; 2,800 instructions in one timer sample), which a pCPU of its own on hardware does not
/// see.
pub(crate) fn let_console_settle() {
    timer::sleep_until(timer::counter() + timer::frequency() / 500);
}

/// The smallest of [`ITERATIONS`] runs of `measure`.
pub(crate) fn minimum(measure: fn() -> u64) -> u64 {
    (0..ITERATIONS).map(|_| measure()).min().unwrap_or(0)
}

/// [`ITERATIONS`] runs of `measure` (after one warm-up run), less `bracket` each.
fn series(bracket: u64, measure: fn() -> u64) -> Stats {
    measure();
    let mut stats = Stats::new();
    for _ in 0..ITERATIONS {
        stats.add(measure().saturating_sub(bracket));
    }
    stats
}

/// The measurement bracket with nothing inside.
fn bracket_alone() -> u64 {
    let (start, end): (u64, u64);
    // SAFETY: reads the cycle counter only.
    unsafe {
        asm!(
            "isb",
            "mrs {start}, pmccntr_el0",
            "isb",
            "mrs {end}, pmccntr_el0",
            start = out(reg) start,
            end = out(reg) end,
            options(nomem, nostack, preserves_flags),
        )
    };
    end - start
}

/// HVC KEEL_VERSION, the null hypercall.
fn hvc_keel_version() -> u64 {
    hvc_round_trip(KEEL_VERSION)
}

/// HVC PSCI_VERSION.
fn hvc_psci_version() -> u64 {
    hvc_round_trip(psci::VERSION)
}

/// One `hvc #0` with `function` in w0 and no arguments.
fn hvc_round_trip(function: u32) -> u64 {
    let (start, end): (u64, u64);
    // SAFETY: the functions measured (KEEL_VERSION, PSCI_VERSION) have no side effect, and
    // an SMCCC 1.1 implementation changes only x0..x3.
    unsafe {
        asm!(
            "isb",
            "mrs {start}, pmccntr_el0",
            "hvc #0",
            "isb",
            "mrs {end}, pmccntr_el0",
            start = out(reg) start,
            end = out(reg) end,
            inout("x0") u64::from(function) => _,
            inout("x1") 0u64 => _,
            inout("x2") 0u64 => _,
            inout("x3") 0u64 => _,
            options(nostack),
        )
    };
    end - start
}

/// One write of ICC_SGI1R_EL1 (`s3_0_c12_c11_5`) with an empty target list.
fn write_sgi1r() -> u64 {
    let (start, end): (u64, u64);
    // SAFETY: an SGI with no target CPU is not delivered anywhere; no memory is touched.
    unsafe {
        asm!(
            "isb",
            "mrs {start}, pmccntr_el0",
            "msr s3_0_c12_c11_5, {value}",
            "isb",
            "mrs {end}, pmccntr_el0",
            start = out(reg) start,
            end = out(reg) end,
            value = in(reg) SGI1R_NO_TARGETS,
            options(nomem, nostack, preserves_flags),
        )
    };
    end - start
}

/// GICD_SGIR with an empty CPUTargetList (TargetListFilter 0): forwards no SGI (GICv2 spec
/// 4.3.15).
const SGIR_NO_TARGETS: u32 = 0;

/// One 32-bit store to GICD_SGIR with an empty target list (a GICv2's SGI register).
fn store_gicd_sgir() -> u64 {
    let Some(address) = DISTRIBUTOR.sgir_address() else {
        return 0;
    };
    let (start, end): (u64, u64);
    // SAFETY: a single aligned store to a distributor register, not to memory; an SGI with no
    // target CPU is not delivered anywhere.
    unsafe {
        asm!(
            "isb",
            "mrs {start}, pmccntr_el0",
            "str {value:w}, [{address}]",
            "isb",
            "mrs {end}, pmccntr_el0",
            start = out(reg) start,
            end = out(reg) end,
            value = in(reg) SGIR_NO_TARGETS,
            address = in(reg) address,
            options(nostack, preserves_flags),
        )
    };
    end - start
}

/// One 32-bit load of GICD_TYPER.
fn load_gicd_typer() -> u64 {
    let (start, end): (u64, u64);
    // SAFETY: a single aligned load of a read-only distributor register, not of memory.
    unsafe {
        asm!(
            "isb",
            "mrs {start}, pmccntr_el0",
            "ldr {value:w}, [{address}]",
            "isb",
            "mrs {end}, pmccntr_el0",
            start = out(reg) start,
            end = out(reg) end,
            value = out(reg) _,
            address = in(reg) DISTRIBUTOR.typer_address(),
            options(nostack, preserves_flags),
        )
    };
    end - start
}

/// Set by the benchmark's IRQ handler once the timer interrupt ran.
static TIMER_INTERRUPT_SEEN: AtomicU32 = AtomicU32::new(0);

fn handle_timer_irq(intid: IntId) {
    if intid == layout::VTIMER_INTID {
        timer::mask();
        TIMER_INTERRUPT_SEEN.store(1, Ordering::Relaxed);
    }
}

/// Timer interrupt latency, as `(entry, round_trip)`.
///
/// A tight loop keeps reading PMCCNTR_EL0 into x9 while the timer fires; the SDK's IRQ
/// vector stamps PMCCNTR_EL0 and the interrupted x9 first thing (`irq-entry-stamp`).
/// Entry is the vector's count minus the loop's last count; round trip is the loop's first
/// count after the return minus its last count before. Both less the cost of two
/// back-to-back counter reads.
fn timer_interrupt_series(interrupts: &PrivateInterrupts) -> (Stats, Stats) {
    set_irq_handler(handle_timer_irq);
    interrupts.enable(layout::VTIMER_INTID, PRIORITY);
    let back_to_back = minimum(back_to_back_reads);
    let (mut entry, mut round_trip) = (Stats::new(), Stats::new());
    let mut attempts = 0;
    while entry.count < u64::from(ITERATIONS) && attempts < 2 * ITERATIONS {
        attempts += 1;
        if let Some((entry_sample, round_trip_sample)) = timer_interrupt_once() {
            // The first sample warms up the path, like `series` does.
            if attempts > 1 {
                entry.add(entry_sample.saturating_sub(back_to_back));
                round_trip.add(round_trip_sample.saturating_sub(back_to_back));
            }
        }
    }
    timer::disable();
    interrupts.disable(layout::VTIMER_INTID);
    (entry, round_trip)
}

/// Two `mrs pmccntr_el0` in a row, as the spin loop does them.
pub(crate) fn back_to_back_reads() -> u64 {
    let (first, second): (u64, u64);
    // SAFETY: reads the cycle counter only.
    unsafe {
        asm!(
            "mrs {first}, pmccntr_el0",
            "mrs {second}, pmccntr_el0",
            first = out(reg) first,
            second = out(reg) second,
            options(nomem, nostack, preserves_flags),
        )
    };
    second - first
}

/// One timer interrupt taken from the spin loop; `None` if it did not land inside the loop.
fn timer_interrupt_once() -> Option<(u64, u64)> {
    TIMER_INTERRUPT_SEEN.store(0, Ordering::Relaxed);
    IRQ_ENTRY_STAMP.interrupted_x9.store(0, Ordering::Relaxed);
    timer::set_deadline(timer::counter() + TIMER_AHEAD_TICKS);
    timer::enable();
    let (last_in_loop, after_loop): (u64, u64);
    // SAFETY: unmasks IRQs only while spinning (the SDK's vector preserves every register
    // the loop uses) and masks them again; the loop only reads the flag.
    unsafe {
        asm!(
            "mov x9, xzr",
            "msr daifclr, #2",
            "2: mrs x9, pmccntr_el0",
            "ldr {flag:w}, [{seen}]",
            "cbz {flag:w}, 2b",
            "mrs {after}, pmccntr_el0",
            "msr daifset, #2",
            seen = in(reg) &TIMER_INTERRUPT_SEEN,
            flag = out(reg) _,
            after = out(reg) after_loop,
            out("x9") last_in_loop,
            options(nostack),
        )
    };
    let entry = IRQ_ENTRY_STAMP.cycle_counter.load(Ordering::Relaxed);
    let before = IRQ_ENTRY_STAMP.interrupted_x9.load(Ordering::Relaxed);
    if before == 0 {
        return None;
    }
    // If the interrupt came after the loop's flag load, the loop ran once more: its x9 read
    // is the first count after the return. Otherwise the read after the loop is.
    let first_after = if last_in_loop != before {
        last_in_loop
    } else {
        after_loop
    };
    Some((entry - before, first_after - before))
}
