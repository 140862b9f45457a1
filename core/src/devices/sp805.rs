//! Emulated Arm SP805 watchdog (PrimeCell Watchdog Module, ARM DDI 0270B): the registers and
//! the counting as a function of time, for an unmodified Linux's `sp805_wdt` driver.
//!
//! The counter counts WDOGCLK ticks down from WdogLoad while INTEN is set. When it passes zero
//! (WdogLoad + 1 ticks after its reload) the interrupt is raised and the counter reloads; when
//! it passes zero again with the interrupt still raised and RESEN set, the reset output
//! asserts and the counter stops (2.2, "Functional operation"). Writing WdogLoad or WdogIntClr
//! reloads it; setting INTEN after it was clear reloads it; clearing INTEN stops it where it
//! is. With RESEN clear the counter keeps reloading, the interrupt raised, and no reset comes.
//!
//! Nothing here runs a timer: the model keeps the counter's last reload in WDOGCLK ticks and
//! answers every question (the counter's value, the interrupt, when the reset output asserts)
//! for a time `now` of the system counter, whose frequency it is told with WDOGCLK's. Every
//! register write is bounded arithmetic on guest values and cannot panic.

use super::DeviceError;

/// WdogLoad: the value the counter reloads from (3.3.1).
const LOAD: u64 = 0x000;
/// WdogValue: the counter, read only (3.3.2).
const VALUE: u64 = 0x004;
/// WdogControl: INTEN and RESEN (3.3.3).
const CONTROL: u64 = 0x008;
/// WdogIntClr: any write clears the interrupt and reloads the counter, write only (3.3.4).
const INTCLR: u64 = 0x00c;
/// WdogRIS: the raw interrupt, read only (3.3.5).
const RIS: u64 = 0x010;
/// WdogMIS: the interrupt as INTEN masks it, read only (3.3.6).
const MIS: u64 = 0x014;
/// WdogLock: write access to every other register (3.3.7).
const LOCK: u64 = 0xc00;
/// WdogITCR: integration test mode (4.3.1).
const ITCR: u64 = 0xf00;
/// WdogITOP: the outputs in integration test mode, write only (4.3.2).
const ITOP: u64 = 0xf04;
/// WdogPeriphID0-3 (3.3.8-3.3.11): part number 0x805, designer 0x41 (Arm), revision 1: read
/// together as Linux's AMBA bus reads them, 0x00141805, the id `sp805_wdt` matches.
const PERIPH_ID: [u32; 4] = [0x05, 0x18, 0x14, 0x00];
/// WdogPCellID0-3 (3.3.12-3.3.15): 0xB105F00D, the PrimeCell id.
const CELL_ID: [u32; 4] = [0x0d, 0xf0, 0x05, 0xb1];
/// First PeriphID register; the PCellID registers follow at 0xff0.
const PERIPH_ID_BASE: u64 = 0xfe0;
const CELL_ID_BASE: u64 = 0xff0;

/// WdogControl.INTEN: the counter counts and the interrupt is enabled.
pub const CONTROL_INTEN: u32 = 1 << 0;
/// WdogControl.RESEN: the reset output is enabled.
pub const CONTROL_RESEN: u32 = 1 << 1;
/// WdogRIS/WdogMIS bit 0: the interrupt.
const INTERRUPT: u32 = 1 << 0;
/// The value written to WdogLock that enables writes to the other registers; any other value
/// disables them. Read back: 1 while writes are disabled, 0 while enabled.
pub const UNLOCK_KEY: u32 = 0x1ACC_E551;
/// WdogITCR.ITEN: integration test mode.
const ITCR_ENABLE: u32 = 1 << 0;
/// WdogITOP bits: the reset output and the interrupt output in integration test mode.
const ITOP_WDOGRES: u32 = 1 << 0;
const ITOP_WDOGINT: u32 = 1 << 1;

/// The state of one emulated SP805.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sp805 {
    /// WDOGCLK's frequency, as the guest is told (Hz).
    clock_hz: u32,
    /// The frequency of the system counter that `now` is read from (Hz).
    counter_hz: u32,
    load: u32,
    /// INTEN and RESEN.
    control: u32,
    /// Writes to every register but WdogLock are ignored.
    locked: bool,
    /// Integration test mode (WdogITCR): the outputs are WdogITOP's bits.
    integration: bool,
    /// WdogITOP.
    test_outputs: u32,
    /// The raw interrupt as of `reloaded_at`.
    raised: bool,
    /// WDOGCLK ticks (since the system counter's zero) at the counter's last reload: while it
    /// counts, its value is `load` minus the ticks since.
    reloaded_at: u128,
    /// The counter's value while it does not count (INTEN clear, or the reset asserted).
    held: u32,
    /// When the reset output asserted (system counter): the counter stopped there.
    reset_asserted: Option<u64>,
    /// When integration test mode drove the reset output high (system counter).
    test_reset: Option<u64>,
}

impl Sp805 {
    /// An all-zero watchdog that never counts, for static storage before [`Sp805::new`]
    /// replaces it.
    pub const ZEROED: Self = Self {
        clock_hz: 0,
        counter_hz: 0,
        load: 0,
        control: 0,
        locked: false,
        integration: false,
        test_outputs: 0,
        raised: false,
        reloaded_at: 0,
        held: 0,
        reset_asserted: None,
        test_reset: None,
    };

    /// A watchdog in its reset state (WdogLoad and WdogValue all ones, disabled, unlocked),
    /// counting at `clock_hz` while `now` is read from a counter of `counter_hz`. A zero rate
    /// makes a watchdog that never counts.
    pub const fn new(clock_hz: u32, counter_hz: u32) -> Self {
        Self {
            clock_hz,
            counter_hz,
            load: u32::MAX,
            held: u32::MAX,
            ..Self::ZEROED
        }
    }

    /// WDOGCLK ticks from the system counter's zero to `now`.
    fn clock_ticks(&self, now: u64) -> u128 {
        if self.counter_hz == 0 {
            return 0;
        }
        u128::from(now) * u128::from(self.clock_hz) / u128::from(self.counter_hz)
    }

    /// The first system counter value at which [`Self::clock_ticks`] reaches `tick`
    /// (`u64::MAX` if none fits).
    fn counter_time(&self, tick: u128) -> u64 {
        if self.clock_hz == 0 {
            return u64::MAX;
        }
        let clock = u128::from(self.clock_hz);
        tick.checked_mul(u128::from(self.counter_hz))
            .and_then(|product| product.checked_add(clock - 1))
            .and_then(|rounded_up| u64::try_from(rounded_up / clock).ok())
            .unwrap_or(u64::MAX)
    }

    /// WDOGCLK ticks from a reload to the counter passing zero.
    fn period(&self) -> u128 {
        u128::from(self.load) + 1
    }

    fn counting(&self) -> bool {
        self.control & CONTROL_INTEN != 0
            && self.reset_asserted.is_none()
            && self.clock_hz != 0
            && self.counter_hz != 0
    }

    /// Expiries (the counter passing zero) from the last reload until reset asserts: one more
    /// if the interrupt is raised already, two otherwise.
    fn expiries_to_reset(&self) -> u128 {
        if self.raised {
            1
        } else {
            2
        }
    }

    /// The model at `now`: the expiries since the last reload applied (the interrupt raised,
    /// the reload moved to the last of them, or the reset asserted and the counter stopped).
    /// What it answers for `now` or later is what `self` answers.
    pub(crate) fn at(&self, now: u64) -> Self {
        let mut state = *self;
        if !self.counting() {
            return state;
        }
        let period = self.period();
        let expiries = self.clock_ticks(now).saturating_sub(self.reloaded_at) / period;
        if expiries == 0 {
            return state;
        }
        let to_reset = self.expiries_to_reset();
        state.raised = true;
        if self.control & CONTROL_RESEN != 0 && expiries >= to_reset {
            state.reloaded_at = self.reloaded_at + to_reset * period;
            state.reset_asserted = Some(self.counter_time(state.reloaded_at));
            state.held = 0;
        } else {
            state.reloaded_at = self.reloaded_at + expiries * period;
        }
        state
    }

    /// The counter's value at `now`.
    pub fn value(&self, now: u64) -> u32 {
        let state = self.at(now);
        if !state.counting() {
            return state.held;
        }
        let elapsed = state.clock_ticks(now).saturating_sub(state.reloaded_at) % state.period();
        // `elapsed` is below the period, so at most `load`.
        state.load - elapsed as u32
    }

    /// Whether the interrupt is raised at `now` (WdogRIS).
    pub fn interrupt_raised(&self, now: u64) -> bool {
        self.at(now).raised
    }

    /// The level of the interrupt output WDOGINT at `now` (WdogMIS, or WdogITOP's bit in
    /// integration test mode). Keel wires it nowhere: Linux's driver does not take it.
    pub fn interrupt_level(&self, now: u64) -> bool {
        if self.integration {
            return self.test_outputs & ITOP_WDOGINT != 0;
        }
        self.control & CONTROL_INTEN != 0 && self.interrupt_raised(now)
    }

    /// When the reset output WDOGRES asserts, as a system counter value (in the past if it
    /// has asserted); `None` while it will not (the counter disabled, RESEN clear). The same
    /// answer whatever time it is asked at: only register writes change it.
    pub fn reset_at(&self) -> Option<u64> {
        if self.integration {
            return self.test_reset;
        }
        if self.reset_asserted.is_some() {
            return self.reset_asserted;
        }
        if !self.counting() || self.control & CONTROL_RESEN == 0 {
            return None;
        }
        Some(self.counter_time(self.reloaded_at + self.expiries_to_reset() * self.period()))
    }

    /// Registers are 32 bits wide and read and written whole (the APB slave's interface, 2.1).
    fn check_width(offset: u64, size: u8) -> Result<(), DeviceError> {
        if size == 4 && offset.is_multiple_of(4) {
            Ok(())
        } else {
            Err(DeviceError::BadWidth { offset, size })
        }
    }

    /// A guest read of `size` bytes at `offset` at time `now`. Write-only registers and
    /// offsets without a register read as zero.
    pub fn read(&self, offset: u64, size: u8, now: u64) -> Result<u32, DeviceError> {
        Self::check_width(offset, size)?;
        Ok(match offset {
            LOAD => self.load,
            VALUE => self.value(now),
            CONTROL => self.control,
            RIS if self.interrupt_raised(now) => INTERRUPT,
            MIS if self.control & CONTROL_INTEN != 0 && self.interrupt_raised(now) => INTERRUPT,
            LOCK => u32::from(self.locked),
            ITCR => u32::from(self.integration),
            PERIPH_ID_BASE..=0xfec => PERIPH_ID[((offset - PERIPH_ID_BASE) / 4) as usize],
            CELL_ID_BASE..=0xffc => CELL_ID[((offset - CELL_ID_BASE) / 4) as usize],
            _ => 0,
        })
    }

    /// A guest write of `value` at `offset` at time `now`. While locked, only WdogLock takes a
    /// write; writes to read-only registers and offsets without a register are ignored.
    pub fn write(
        &mut self,
        offset: u64,
        size: u8,
        value: u32,
        now: u64,
    ) -> Result<(), DeviceError> {
        Self::check_width(offset, size)?;
        if self.locked && offset != LOCK {
            return Ok(());
        }
        let mut state = self.at(now);
        let tick = state.clock_ticks(now);
        match offset {
            LOAD => {
                state.load = value;
                state.reload(tick);
            }
            CONTROL => {
                let was_enabled = state.control & CONTROL_INTEN != 0;
                if was_enabled && value & CONTROL_INTEN == 0 {
                    state.held = state.value(now);
                }
                state.control = value & (CONTROL_INTEN | CONTROL_RESEN);
                if !was_enabled && value & CONTROL_INTEN != 0 {
                    state.reload(tick);
                }
                // RESEN masks the reset output; a disabled counter asserts nothing.
                if state.control != CONTROL_INTEN | CONTROL_RESEN {
                    state.reset_asserted = None;
                }
            }
            INTCLR => {
                state.raised = false;
                state.reload(tick);
            }
            LOCK => state.locked = value != UNLOCK_KEY,
            ITCR => {
                state.integration = value & ITCR_ENABLE != 0;
                state.drive_test_reset(now);
            }
            ITOP => {
                state.test_outputs = value & (ITOP_WDOGRES | ITOP_WDOGINT);
                state.drive_test_reset(now);
            }
            _ => {}
        }
        *self = state;
        Ok(())
    }

    /// The counter reloads from WdogLoad at WDOGCLK tick `tick` (and counts from there if
    /// enabled); a reset output that had asserted deasserts.
    fn reload(&mut self, tick: u128) {
        self.reloaded_at = tick;
        self.held = self.load;
        self.reset_asserted = None;
    }

    /// In integration test mode, WdogITOP's WDOGRES bit is the reset output: asserted from
    /// `now` if it was not already.
    fn drive_test_reset(&mut self, now: u64) {
        let driven = self.integration && self.test_outputs & ITOP_WDOGRES != 0;
        self.test_reset = match self.test_reset {
            _ if !driven => None,
            Some(since) => Some(since),
            None => Some(now),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QEMU virt's system counter (62.5 MHz) and Keel's WDOGCLK (1 MHz).
    const COUNTER_HZ: u32 = 62_500_000;
    const CLOCK_HZ: u32 = 1_000_000;
    const SECOND: u64 = COUNTER_HZ as u64;

    fn watchdog() -> Sp805 {
        Sp805::new(CLOCK_HZ, COUNTER_HZ)
    }

    /// What Linux's `sp805_wdt` loads for `timeout` seconds: half of it, minus one tick.
    fn linux_load(timeout: u64) -> u32 {
        (u64::from(CLOCK_HZ) / 2 * timeout - 1) as u32
    }

    /// Linux's `wdt_config(wdd, ping)`: unlock, load, clear, enable (not on a ping), lock.
    fn linux_config(wdt: &mut Sp805, load: u32, ping: bool, now: u64) {
        wdt.write(LOCK, 4, UNLOCK_KEY, now).unwrap();
        wdt.write(LOAD, 4, load, now).unwrap();
        wdt.write(INTCLR, 4, INTERRUPT, now).unwrap();
        if !ping {
            wdt.write(CONTROL, 4, CONTROL_INTEN | CONTROL_RESEN, now)
                .unwrap();
        }
        wdt.write(LOCK, 4, 1, now).unwrap();
        assert_eq!(wdt.read(LOCK, 4, now), Ok(1));
    }

    #[test]
    fn identification_is_what_linux_matches() {
        let wdt = watchdog();
        let word = |base: u64| {
            (0..4).fold(0u32, |id, i| {
                id | (wdt.read(base + 4 * i, 4, 0).unwrap() & 0xff) << (8 * i)
            })
        };
        // Linux's AMBA bus: the peripheral id and the PrimeCell id, a byte per register.
        assert_eq!(word(0xfe0), 0x0014_1805);
        assert_eq!(word(0xff0), 0xb105_f00d);
    }

    #[test]
    fn reset_state() {
        let wdt = watchdog();
        assert_eq!(wdt.read(LOAD, 4, 5 * SECOND), Ok(u32::MAX));
        assert_eq!(wdt.read(VALUE, 4, 5 * SECOND), Ok(u32::MAX));
        assert_eq!(wdt.read(CONTROL, 4, 0), Ok(0));
        assert_eq!(wdt.read(RIS, 4, 0), Ok(0));
        assert_eq!(wdt.read(LOCK, 4, 0), Ok(0));
        assert_eq!(wdt.reset_at(), None);
    }

    #[test]
    fn linux_default_timeout_resets_thirty_seconds_after_the_last_ping() {
        let mut wdt = watchdog();
        let start = 10 * SECOND;
        linux_config(&mut wdt, linux_load(30), false, start);
        assert_eq!(linux_load(30), 14_999_999);
        assert_eq!(wdt.reset_at(), Some(start + 30 * SECOND));
        // The counter counts down in microseconds.
        assert_eq!(wdt.read(VALUE, 4, start + SECOND), Ok(13_999_999));
        assert_eq!(wdt.read(RIS, 4, start + 14 * SECOND), Ok(0));
        // Half-way, the interrupt (which nothing takes) is raised and the counter reloads.
        let after_first = start + 15 * SECOND + SECOND / 2;
        assert_eq!(wdt.read(RIS, 4, after_first), Ok(1));
        assert_eq!(wdt.read(MIS, 4, after_first), Ok(1));
        assert_eq!(wdt.read(VALUE, 4, after_first), Ok(14_499_999));
        // Asking changes nothing.
        assert_eq!(wdt.reset_at(), Some(start + 30 * SECOND));
        // A ping after the interrupt clears it and puts the reset 30 s after the ping.
        let ping = start + 20 * SECOND;
        linux_config(&mut wdt, linux_load(30), true, ping);
        assert_eq!(wdt.read(RIS, 4, ping), Ok(0));
        assert_eq!(wdt.reset_at(), Some(ping + 30 * SECOND));
        // Pings every 10 s keep it away.
        for n in 1..=5 {
            let ping = ping + n * 10 * SECOND;
            linux_config(&mut wdt, linux_load(30), true, ping);
            assert_eq!(wdt.reset_at(), Some(ping + 30 * SECOND));
        }
    }

    #[test]
    fn without_a_ping_the_reset_asserts_and_the_counter_stops() {
        let mut wdt = watchdog();
        linux_config(&mut wdt, linux_load(3), false, 0);
        let reset = wdt.reset_at().unwrap();
        assert_eq!(reset, 3 * SECOND);
        assert_eq!(wdt.read(VALUE, 4, reset - 1), Ok(0));
        assert_eq!(wdt.read(VALUE, 4, reset + 5 * SECOND), Ok(0));
        // A write that reloads nothing leaves it where it asserted.
        wdt.write(LOCK, 4, UNLOCK_KEY, reset + SECOND).unwrap();
        assert_eq!(wdt.reset_at(), Some(reset));
        // A ping after the expiry (its action ignored, the VM running on) starts it over.
        wdt.write(INTCLR, 4, 0, reset + 2 * SECOND).unwrap();
        assert_eq!(wdt.reset_at(), Some(reset + 5 * SECOND));
        assert_eq!(wdt.read(VALUE, 4, reset + 2 * SECOND), Ok(linux_load(3)));
    }

    #[test]
    fn a_locked_watchdog_ignores_writes_but_to_the_lock() {
        let mut wdt = watchdog();
        linux_config(&mut wdt, linux_load(30), false, 0);
        let before = wdt;
        for offset in [LOAD, CONTROL, INTCLR, ITCR, ITOP] {
            wdt.write(offset, 4, 0, SECOND).unwrap();
        }
        assert_eq!(wdt, before);
        // Only the key unlocks.
        wdt.write(LOCK, 4, UNLOCK_KEY + 1, SECOND).unwrap();
        assert_eq!(wdt.read(LOCK, 4, SECOND), Ok(1));
        wdt.write(LOCK, 4, UNLOCK_KEY, SECOND).unwrap();
        assert_eq!(wdt.read(LOCK, 4, SECOND), Ok(0));
        wdt.write(CONTROL, 4, 0, SECOND).unwrap();
        assert_eq!(wdt.reset_at(), None);
    }

    #[test]
    fn disabled_it_holds_its_value_and_enabled_again_it_reloads() {
        let mut wdt = watchdog();
        wdt.write(LOAD, 4, 999_999, 0).unwrap();
        wdt.write(CONTROL, 4, CONTROL_INTEN | CONTROL_RESEN, 0)
            .unwrap();
        assert_eq!(wdt.reset_at(), Some(2 * SECOND));
        wdt.write(CONTROL, 4, 0, SECOND / 4).unwrap();
        assert_eq!(wdt.reset_at(), None);
        assert_eq!(wdt.read(VALUE, 4, 7 * SECOND), Ok(749_999));
        wdt.write(CONTROL, 4, CONTROL_INTEN | CONTROL_RESEN, 8 * SECOND)
            .unwrap();
        assert_eq!(wdt.read(VALUE, 4, 8 * SECOND), Ok(999_999));
        assert_eq!(wdt.reset_at(), Some(10 * SECOND));
    }

    #[test]
    fn without_resen_it_counts_on_and_resen_resets_at_the_next_expiry() {
        let mut wdt = watchdog();
        wdt.write(LOAD, 4, 999_999, 0).unwrap();
        wdt.write(CONTROL, 4, CONTROL_INTEN, 0).unwrap();
        assert_eq!(wdt.reset_at(), None);
        assert_eq!(wdt.read(RIS, 4, 5 * SECOND + SECOND / 2), Ok(1));
        assert_eq!(wdt.read(VALUE, 4, 5 * SECOND + SECOND / 2), Ok(499_999));
        // The interrupt is raised already: the next time the counter passes zero resets.
        wdt.write(
            CONTROL,
            4,
            CONTROL_INTEN | CONTROL_RESEN,
            5 * SECOND + SECOND / 2,
        )
        .unwrap();
        assert_eq!(wdt.reset_at(), Some(6 * SECOND));
    }

    #[test]
    fn linux_restart_through_the_watchdog_resets_at_once() {
        // `wdt_restart`: unlock, disable, load 0, enable with reset.
        let mut wdt = watchdog();
        let now = 3 * SECOND;
        wdt.write(LOCK, 4, UNLOCK_KEY, now).unwrap();
        wdt.write(CONTROL, 4, 0, now).unwrap();
        wdt.write(LOAD, 4, 0, now).unwrap();
        wdt.write(CONTROL, 4, CONTROL_INTEN | CONTROL_RESEN, now)
            .unwrap();
        // Two WDOGCLK ticks: 2 us.
        assert_eq!(wdt.reset_at(), Some(now + 125));
    }

    #[test]
    fn integration_test_mode_drives_the_reset_output() {
        let mut wdt = watchdog();
        wdt.write(ITOP, 4, ITOP_WDOGRES, SECOND).unwrap();
        assert_eq!(wdt.reset_at(), None);
        wdt.write(ITCR, 4, ITCR_ENABLE, 2 * SECOND).unwrap();
        assert_eq!(wdt.reset_at(), Some(2 * SECOND));
        wdt.write(ITOP, 4, ITOP_WDOGRES | ITOP_WDOGINT, 3 * SECOND)
            .unwrap();
        assert_eq!(wdt.reset_at(), Some(2 * SECOND));
        assert!(wdt.interrupt_level(3 * SECOND));
        wdt.write(ITOP, 4, 0, 4 * SECOND).unwrap();
        assert_eq!(wdt.reset_at(), None);
    }

    #[test]
    fn only_whole_aligned_words() {
        let mut wdt = watchdog();
        assert_eq!(
            wdt.read(LOAD, 1, 0),
            Err(DeviceError::BadWidth { offset: 0, size: 1 })
        );
        assert_eq!(
            wdt.write(0x2, 4, 0, 0),
            Err(DeviceError::BadWidth { offset: 2, size: 4 })
        );
        assert_eq!(
            wdt.write(LOAD, 8, 0, 0),
            Err(DeviceError::BadWidth { offset: 0, size: 8 })
        );
        assert_eq!(wdt.read(0x800, 4, 0), Ok(0));
        assert_eq!(wdt.read(INTCLR, 4, 0), Ok(0));
    }

    #[test]
    fn extreme_rates_and_times_neither_panic_nor_wrap() {
        // No rate: it never counts.
        let mut still = Sp805::ZEROED;
        still.write(CONTROL, 4, 3, 5).unwrap();
        assert_eq!(still.reset_at(), None);
        assert_eq!(still.read(VALUE, 4, u64::MAX), Ok(0));
        // The fastest clock on the slowest counter, at the end of time: the reset would come
        // after the counter's last value.
        let mut fast = Sp805::new(u32::MAX, 1);
        fast.write(LOAD, 4, u32::MAX, u64::MAX - 1).unwrap();
        fast.write(CONTROL, 4, 3, u64::MAX - 1).unwrap();
        assert_eq!(fast.reset_at(), Some(u64::MAX));
        assert!(fast.read(VALUE, 4, u64::MAX).is_ok());
        // The slowest clock: two periods of 2^32 s, still a counter value.
        let mut slow = Sp805::new(1, COUNTER_HZ);
        slow.write(LOAD, 4, u32::MAX, 0).unwrap();
        slow.write(CONTROL, 4, 3, 0).unwrap();
        assert_eq!(slow.reset_at(), Some((1 << 33) * SECOND));
    }
}
