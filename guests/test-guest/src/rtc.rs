//! RTC mode (`keel.mode=rtc`): drives the board's PL031 real-time clock that the configuration
//! gave this VM (`[[vm.passthrough]]`), found in the device tree as Linux would find it.
//!
//! It reads the clock, then sets [`ALARMS`] alarms one after another, each
//! `keel.alarm=<seconds>` (default 2) ahead, and sleeps in WFI until the alarm's interrupt;
//! the handler clears the device's interrupt (RTCICR) before the SDK's EOI, which, with the
//! interrupt forwarded in hardware, also deactivates the physical one so the next alarm can
//! fire. Each alarm prints one line: `rtc: alarm N of M at <count>, <ms> ms after it was set`;
//! a lost alarm prints `rtc: alarm N lost` after twice its time. Then SYSTEM_OFF.
//!
//! Registers: ARM PrimeCell RTC (PL031) Technical Reference Manual, 3.2 (RTCDR 0x00, RTCMR
//! 0x04, RTCIMSC 0x10, RTCRIS 0x14, RTCMIS 0x18, RTCICR 0x1C, the peripheral and PrimeCell
//! IDs at 0xFE0-0xFFC).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use keel_guest::abi::layout;
use keel_guest::bootargs::BootArgs;
use keel_guest::cpu::{disable_irqs, enable_irqs, wait_for_interrupt};
use keel_guest::exceptions::set_irq_handler;
use keel_guest::fdt::Fdt;
use keel_guest::gic::{IntId, PrivateInterrupts, Trigger, DISTRIBUTOR, FIRST_SPI};
use keel_guest::mmio::MmioFrame;
use keel_guest::{println, system_off, timer};

use crate::interrupts::PRIORITY;

/// Data register: the count, in seconds.
const RTCDR: usize = 0x00;
/// Match register: the alarm.
const RTCMR: usize = 0x04;
/// Interrupt mask set/clear: bit 0 lets the alarm interrupt through.
const RTCIMSC: usize = 0x10;
/// Masked interrupt status.
const RTCMIS: usize = 0x18;
/// Interrupt clear (write only).
const RTCICR: usize = 0x1c;
/// First of the eight peripheral and PrimeCell ID registers (one byte each, 4 bytes apart).
const PERIPHERAL_ID: usize = 0xfe0;
/// The PL031's ID bytes: part 0x031, designer ARM (0x41), revision 1; PrimeCell 0xB105F00D.
const PL031_ID: [u32; 8] = [0x31, 0x10, 0x14, 0x00, 0x0d, 0xf0, 0x05, 0xb1];
/// Alarms set one after another.
const ALARMS: u32 = 3;

/// The RTC's INTID (u32::MAX until known).
static RTC_INTID: AtomicU32 = AtomicU32::new(u32::MAX);
/// The RTC's frame base, for the handler.
static RTC_BASE: AtomicU64 = AtomicU64::new(0);
/// Alarm interrupts taken; written by the handler only.
static ALARMS_TAKEN: AtomicU32 = AtomicU32::new(0);
/// RTCMIS as the handler read it last.
static LAST_MIS: AtomicU32 = AtomicU32::new(0);

/// The RTC's registers and INTID from the device tree: the first `arm,pl031` node.
fn find_rtc(tree: &Fdt) -> Option<(usize, IntId)> {
    let node = tree.find_compatible("arm,pl031").ok()??;
    let (base, _) = node.reg().ok()??.next()?;
    let mut cells = node.interrupts().ok()??;
    let (kind, number) = (cells.next()?, cells.next()?);
    // GIC specifier: 0 = SPI, numbered from INTID 32.
    (kind == 0).then_some((base as usize, number + FIRST_SPI))
}

fn handle_irq(intid: IntId) {
    if intid == RTC_INTID.load(Ordering::Relaxed) {
        // SAFETY: the base is the PL031's frame, set before IRQs were unmasked.
        let rtc = unsafe { MmioFrame::new(RTC_BASE.load(Ordering::Relaxed) as usize) };
        LAST_MIS.store(rtc.read_u32(RTCMIS), Ordering::Relaxed);
        // The line is level: cleared before the EOI, or it would come straight back.
        rtc.write_u32(RTCICR, 1);
        ALARMS_TAKEN.fetch_add(1, Ordering::Relaxed);
    } else if intid == layout::VTIMER_INTID {
        // A wait's timeout: it stops asserting; the waiter sees the counter past it.
        timer::mask();
    }
}

/// Runs RTC mode on the device tree `tree`.
pub fn run(tree: &Fdt, args: BootArgs<'_>, interrupts: &PrivateInterrupts) -> ! {
    let Some((base, intid)) = find_rtc(tree) else {
        println!("rtc: no arm,pl031 node in the device tree");
        system_off()
    };
    let alarm_seconds = args
        .value("keel.alarm")
        .and_then(|value| value.parse::<u32>().ok())
        .unwrap_or(2)
        .max(1);
    // SAFETY: the device tree describes a PL031 frame at `base` (Keel maps the board's there);
    // no Rust object lives in it.
    let rtc = unsafe { MmioFrame::new(base) };
    let id: [u32; 8] = core::array::from_fn(|i| rtc.read_u32(PERIPHERAL_ID + 4 * i) & 0xff);
    let count = rtc.read_u32(RTCDR);
    println!(
        "rtc: pl031 at {base:#x}, INTID {intid}, id {}, count {count}",
        if id == PL031_ID { "ok" } else { "unexpected" }
    );

    RTC_BASE.store(base as u64, Ordering::Relaxed);
    RTC_INTID.store(intid, Ordering::Relaxed);
    set_irq_handler(handle_irq);
    DISTRIBUTOR.enable_spi(intid, PRIORITY, Trigger::Level);
    interrupts.enable(layout::VTIMER_INTID, PRIORITY);
    rtc.write_u32(RTCIMSC, 1);
    enable_irqs();
    for alarm in 1..=ALARMS {
        let set_at = timer::counter();
        let start = rtc.read_u32(RTCDR);
        rtc.write_u32(RTCMR, start.wrapping_add(alarm_seconds));
        let timeout_ms = 2_000 * u64::from(alarm_seconds);
        if wait_for_alarm(alarm - 1, timeout_ms) {
            let ms = (timer::counter() - set_at) * 1000 / timer::frequency();
            println!(
                "rtc: alarm {alarm} of {ALARMS} at {}, {ms} ms after it was set (status {})",
                rtc.read_u32(RTCDR),
                LAST_MIS.load(Ordering::Relaxed)
            );
        } else {
            println!("rtc: alarm {alarm} lost");
        }
    }
    rtc.write_u32(RTCIMSC, 0);
    system_off()
}

/// Waits with WFI until more than `seen` alarms were taken, or `ms` milliseconds passed;
/// whether the alarm came.
fn wait_for_alarm(seen: u32, ms: u64) -> bool {
    let deadline = timer::counter() + ms * timer::frequency() / 1000;
    timer::set_deadline(deadline);
    timer::enable();
    let taken = loop {
        // Masked between the check and WFI, so that an alarm in between still wakes it.
        disable_irqs();
        if ALARMS_TAKEN.load(Ordering::Relaxed) > seen {
            break true;
        }
        if timer::counter() >= deadline {
            break false;
        }
        wait_for_interrupt();
        enable_irqs();
    };
    enable_irqs();
    timer::disable();
    taken
}
