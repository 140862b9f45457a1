//! Ticks mode: a drift-free 1 kHz virtual-timer tick, a report each second, console echo,
//! the timed `keel.off` and `keel.hostile` actions, and the `keel.control` loop
//! ([`crate::control`]).

use core::sync::atomic::{AtomicU64, Ordering};

use keel_guest::abi::layout;
use keel_guest::cpu::{enable_irqs, wait_for_interrupt, with_irqs_masked};
use keel_guest::devicetree::BootInfo;
use keel_guest::exceptions::set_irq_handler;
use keel_guest::gic::{IntId, PrivateInterrupts, Trigger, DISTRIBUTOR};
use keel_guest::histogram::{Histogram, Line, Printer};
use keel_guest::{console, println, system_off, system_reset, timer};

use crate::control::{self, Control};
use crate::hostile;
use crate::interrupts::PRIORITY;
use crate::options::{InputMode, Options};

/// Tick rate.
const TICKS_PER_SECOND: u64 = 1000;

/// Ticks counted by the IRQ handler; written by it only.
static TICKS: AtomicU64 = AtomicU64::new(0);
/// The deadline of the next tick; written by the IRQ handler once the tick runs.
static NEXT_DEADLINE: AtomicU64 = AtomicU64::new(0);
/// Counter ticks per timer tick.
static PERIOD: AtomicU64 = AtomicU64::new(0);
/// Largest lateness of a tick interrupt (counter now minus its deadline, in counter ticks)
/// since the last report; written by the IRQ handler, reset by the report.
static MAX_LATENESS: AtomicU64 = AtomicU64::new(0);
/// Smallest lateness since the last report (counter ticks); `u64::MAX` when none.
static MIN_LATENESS: AtomicU64 = AtomicU64::new(u64::MAX);
/// Sum of the latenesses since the last report, and their number.
static SUM_LATENESS: AtomicU64 = AtomicU64::new(0);
static COUNT_LATENESS: AtomicU64 = AtomicU64::new(0);
/// Largest lateness of a tick interrupt since the start (counter ticks); never reset.
static WORST_LATENESS: AtomicU64 = AtomicU64::new(0);
/// Every tick's lateness since the start (counter ticks); recorded by the IRQ handler only,
/// printed with `keel.histogram`.
static LATENESS_HISTOGRAM: Histogram = Histogram::new();
/// The name the lateness histogram is printed as.
const HISTOGRAM_NAME: &str = "tick-lateness";
/// Longest histogram line printed between two ticks. A line is written with IRQs masked, a
/// console trap a byte, and beside a Linux printing its boot a trap may also write out some of
/// Linux's output. With lines of up to 164 bytes, `configs/bench/lateness-reset.toml`'s worst
/// lateness was 20-28 µs in each second once the printing had begun (2 µs in the first, and
/// 2.6 µs in all with these lines): likely a line that outlasted the 1 ms to the next tick.
const HISTOGRAM_LINE_MAX: usize = 48;

/// Ticks taken since the start.
pub fn ticks_taken() -> u64 {
    TICKS.load(Ordering::Relaxed)
}

/// The worst lateness of a tick interrupt since the start, in counter ticks.
pub fn worst_lateness() -> u64 {
    WORST_LATENESS.load(Ordering::Relaxed)
}

fn handle_irq(intid: IntId) {
    if intid == layout::VTIMER_INTID {
        // Every deadline already past is taken in this interrupt, so that the one set at the
        // end is in the future and the timer's line is low when the SDK ends the interrupt. A
        // line left asserted through a hardware-linked EOI is not signalled again by QEMU's
        // GICv2 model until something else updates it (the testing chapter).
        loop {
            let deadline = NEXT_DEADLINE.load(Ordering::Relaxed);
            let now = timer::counter();
            take_tick(now.saturating_sub(deadline));
            // Absolute deadlines: the next one follows the last one, never "now", so lateness
            // in taking one interrupt is not carried into the following ones.
            let next = deadline + PERIOD.load(Ordering::Relaxed);
            NEXT_DEADLINE.store(next, Ordering::Relaxed);
            control::step();
            if next > now {
                timer::set_deadline(next);
                if timer::counter() < next {
                    break;
                }
            }
        }
    } else if intid == layout::UART_INTID {
        console::drain_receive_fifo();
    }
}

/// Counts one tick taken `lateness` counter ticks after its deadline.
fn take_tick(lateness: u64) {
    TICKS.store(TICKS.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    if lateness > MAX_LATENESS.load(Ordering::Relaxed) {
        MAX_LATENESS.store(lateness, Ordering::Relaxed);
    }
    if lateness > WORST_LATENESS.load(Ordering::Relaxed) {
        WORST_LATENESS.store(lateness, Ordering::Relaxed);
    }
    if lateness < MIN_LATENESS.load(Ordering::Relaxed) {
        MIN_LATENESS.store(lateness, Ordering::Relaxed);
    }
    SUM_LATENESS.store(
        SUM_LATENESS.load(Ordering::Relaxed) + lateness,
        Ordering::Relaxed,
    );
    COUNT_LATENESS.store(
        COUNT_LATENESS.load(Ordering::Relaxed) + 1,
        Ordering::Relaxed,
    );
    LATENESS_HISTOGRAM.record(lateness);
}

/// Marks, in RAM that a reset does not reload (just below the device tree's 2 MiB), that this
/// VM has already reset once, so `keel.reset` resets only once.
const RESET_MARKER: u64 = 0x7265_7365_7421_2121;

/// The marker's address: the last word below the top 2 MiB of the VM's memory.
fn reset_marker_address(info: &BootInfo<'_>) -> Option<u64> {
    info.memory
        .map(|memory| memory.base + memory.size - (2 << 20) - 8)
}

fn reset_marker_set(info: &BootInfo<'_>) -> bool {
    // SAFETY: the address is inside the VM's own RAM (from its device tree), below the device
    // tree and far above the image; nothing else uses it.
    reset_marker_address(info)
        .is_some_and(|a| unsafe { core::ptr::read_volatile(a as *const u64) } == RESET_MARKER)
}

fn set_reset_marker(info: &BootInfo<'_>) {
    if let Some(address) = reset_marker_address(info) {
        // SAFETY: as in `reset_marker_set`.
        unsafe { core::ptr::write_volatile(address as *mut u64, RESET_MARKER) };
    }
}

/// Runs ticks mode until `keel.off` (or forever).
pub fn run(options: &Options<'_>, info: &BootInfo<'_>, interrupts: &PrivateInterrupts) -> ! {
    let mut reset_pending = options.reset_after_seconds;
    if reset_pending.is_some() && reset_marker_set(info) {
        println!("test-guest: restarted after a reset");
        reset_pending = None;
    }
    let frequency = timer::frequency();
    let period = frequency / TICKS_PER_SECOND;
    set_irq_handler(handle_irq);
    if let Some(canary) = options.canary {
        for (i, byte) in canary_page(canary).iter_mut().enumerate() {
            *byte = canary_byte(i);
        }
    }

    if let Some(page) = options.pristine {
        let bytes = canary_page(page);
        let clean = bytes.iter().all(|&byte| byte == 0);
        println!("pristine: {}", if clean { "clean" } else { "dirty" });
        bytes.fill(0xa5);
    }

    let start = timer::counter();
    PERIOD.store(period, Ordering::Relaxed);
    NEXT_DEADLINE.store(start + period, Ordering::Relaxed);
    timer::set_deadline(start + period);
    timer::enable();
    interrupts.enable(layout::VTIMER_INTID, PRIORITY);

    // A guest that ignores its input never unmasks the receive interrupt: the input waits in
    // Keel's queue, which refuses what does not fit (and says how much).
    if options.input != InputMode::Ignore {
        console::enable_receive_interrupt();
    }
    DISTRIBUTOR.enable_spi(layout::UART_INTID, PRIORITY, Trigger::Level);
    enable_irqs();

    let mut control = options
        .control
        .then(|| Control::new(options.peer, options.max_message, start, frequency));
    let mut polled_tick = 0;
    let mut reported_seconds = 0;
    let mut hostile_pending = options.hostile;
    // The lateness histogram being printed: one line per wake-up (each tick), so that no line
    // written with IRQs masked delays the next tick.
    let mut histogram: Option<Printer> = None;
    let mut watchdog_kept = 0;
    let mut input = InputCount::new();
    if options.watchdog {
        match keel_guest::health::keep_watchdog() {
            Ok(period) => println!(
                "watchdog: kept every 100 ms, period {} ms",
                period / 1_000_000
            ),
            Err(error) => println!("watchdog: {error:?}"),
        }
    }
    loop {
        wait_for_interrupt();
        if options.watchdog {
            let tick = ticks_taken();
            if tick >= watchdog_kept + 100 {
                watchdog_kept = tick;
                let _ = keel_guest::health::keep_watchdog();
            }
        }
        while let Some(byte) = console::read_byte() {
            match options.input {
                InputMode::Count => input.take(byte),
                InputMode::Echo | InputMode::Ignore => echo(byte),
            }
        }
        if let Some(printer) = &mut histogram {
            if !print_histogram_line(printer) {
                histogram = None;
            }
        }
        // Messages once per tick, here rather than in the handler: a tick is never late for them.
        if let Some(control) = &mut control {
            let tick = ticks_taken();
            if tick != polled_tick {
                polled_tick = tick;
                control.poll(tick);
            }
        }
        // Both samples with IRQs masked, so that no tick lands between them.
        let (now, ticks) = with_irqs_masked(|| (timer::counter(), TICKS.load(Ordering::Relaxed)));
        let elapsed = now - start;
        let seconds = elapsed / frequency;
        if seconds <= reported_seconds {
            continue;
        }
        reported_seconds = seconds;
        if input.bytes != input.said {
            input.said = input.bytes;
            println!(
                "input: s={seconds} bytes={} fnv={:016x}",
                input.bytes, input.hash
            );
        }
        // The ticks taken, in Keel's trace (when it has one): a tool compares them with the
        // timer interrupts it saw listed for this vCPU before the mark.
        with_irqs_masked(|| keel_guest::trace::mark(TICKS.load(Ordering::Relaxed) as u32));
        // Timed actions are checked every second; the report only every `keel.report` seconds.
        if seconds.is_multiple_of(options.report_every_seconds) {
            report(seconds, ticks, elapsed, frequency, options);
            if options.ansi {
                // SGR bold, then SGR reset: a terminal shows "bold" in bold, if the console
                // lets the escape sequences through.
                println!("ansi: s={seconds} \x1b[1mbold\x1b[0m");
            }
            if options.histogram {
                histogram = Some(Printer::new(frequency).with_line_max(HISTOGRAM_LINE_MAX));
            }
            if let Some(canary) = options.canary {
                match canary_page(canary)
                    .iter()
                    .enumerate()
                    .position(|(i, &byte)| byte != canary_byte(i))
                {
                    None => println!("canary: s={seconds} intact"),
                    Some(offset) => println!("canary: s={seconds} changed at +{offset:#x}"),
                }
            }
        }

        if reset_pending.is_some_and(|after| seconds >= after) {
            set_reset_marker(info);
            println!("reset: system_reset");
            system_reset();
        }
        if options.off_after_seconds.is_some_and(|off| seconds >= off) {
            if options.histogram {
                // The measurement is over: all of the histogram at once.
                let mut printer = histogram.take().unwrap_or(Printer::new(frequency));
                while print_histogram_line(&mut printer) {}
            }
            println!("off: system_off");
            system_off();
        }
        if options
            .hang_after_seconds
            .is_some_and(|after| seconds >= after)
        {
            println!("hang: interrupts masked, spinning");
            keel_guest::cpu::disable_irqs();
            loop {
                core::hint::spin_loop();
            }
        }
        if let Some(mode) = hostile_pending {
            if seconds >= options.hostile_after_seconds {
                hostile_pending = None;
                hostile::run(mode, info, options.target);
            }
        }
    }
}

/// What `keel.late-note` adds to each report after `late_max_us`: the lateness is read on QEMU's
/// clock, which runs on while this vCPU waits for QEMU to run it: in real time (`cargo xtask
/// run`), while the host runs other work (milliseconds on a busy host); under `-icount`, while
/// QEMU's one thread runs the other vCPUs in turn (milliseconds while Linux boots). Keel's own
/// figure is measured under `-icount` with only that pCPU busy (`cargo xtask bench sched`).
const LATE_NOTE: &str =
    " (QEMU's clock: mostly the host or QEMU's other vCPUs keeping this one waiting; Keel's own: cargo xtask bench sched)";

/// Prints one tick report: the seconds since start, ticks taken, ticks the counter says are due,
/// and the worst lateness of a tick interrupt since the last report, in microseconds (with
/// `keel.late-note`, followed by [`LATE_NOTE`]); with `keel.lateness`, a second line with the
/// minimum, average and maximum in ns.
fn report(seconds: u64, ticks: u64, elapsed: u64, frequency: u64, options: &Options) {
    let lateness = options.lateness;
    let note = if options.late_note { LATE_NOTE } else { "" };
    let expected =
        (u128::from(elapsed) * u128::from(TICKS_PER_SECOND) / u128::from(frequency)) as u64;
    // Load and store with IRQs masked: no exclusives (the guest runs with its MMU off).
    let (late, min, sum, count) = with_irqs_masked(|| {
        let figures = (
            MAX_LATENESS.load(Ordering::Relaxed),
            MIN_LATENESS.load(Ordering::Relaxed),
            SUM_LATENESS.load(Ordering::Relaxed),
            COUNT_LATENESS.load(Ordering::Relaxed),
        );
        MAX_LATENESS.store(0, Ordering::Relaxed);
        MIN_LATENESS.store(u64::MAX, Ordering::Relaxed);
        SUM_LATENESS.store(0, Ordering::Relaxed);
        COUNT_LATENESS.store(0, Ordering::Relaxed);
        figures
    });
    let late_us = late * 1_000_000 / frequency;
    println!("tick: s={seconds} ticks={ticks} expected={expected} late_max_us={late_us}{note}");
    if let (true, Some(average)) = (lateness, sum.checked_div(count)) {
        let ns = |ticks: u64| ticks * 1_000_000_000 / frequency;
        println!(
            "lateness: s={seconds} min_ns={} avg_ns={} max_ns={}",
            ns(min),
            ns(average),
            ns(late)
        );
    }
}

/// Prints the next line of the lateness histogram; false once it has all been printed.
fn print_histogram_line(printer: &mut Printer) -> bool {
    let mut line = Line::new();
    let more = printer.next_line(&LATENESS_HISTOGRAM, HISTOGRAM_NAME, &mut line);
    if more {
        println!("{}", line.as_str());
    }
    more
}

/// Console input counted (`keel.input=count`): how many bytes, the FNV-1a hash (64 bits) of
/// all of them in order, and the count last said.
struct InputCount {
    bytes: u64,
    hash: u64,
    said: u64,
}

impl InputCount {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new() -> Self {
        Self {
            bytes: 0,
            hash: Self::FNV_OFFSET,
            said: 0,
        }
    }

    fn take(&mut self, byte: u8) {
        self.bytes += 1;
        self.hash = (self.hash ^ u64::from(byte)).wrapping_mul(Self::FNV_PRIME);
    }
}

/// Prints one received byte: itself if printable ASCII, else `\x..`.
fn echo(byte: u8) {
    if byte.is_ascii_graphic() || byte == b' ' {
        println!("echo: {}", char::from(byte));
    } else {
        println!("echo: \\x{byte:02x}");
    }
}

/// Byte `i` of the canary page's pattern.
fn canary_byte(i: usize) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(0x5a)
}

/// The 4 KiB canary page at `address` (`keel.canary`: in this VM's memory, which another
/// VM's DMA attack aims at).
fn canary_page(address: u64) -> &'static mut [u8] {
    // SAFETY: the scenario names a page of this VM's own RAM that nothing else of the guest
    // uses (far above its image and below its device tree); only this vCPU touches it.
    unsafe { core::slice::from_raw_parts_mut(address as *mut u8, 4096) }
}
