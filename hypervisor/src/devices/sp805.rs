//! The emulated SP805 watchdog of a VM (`devices = ["watchdog"]`), which an unmodified Linux
//! keeps with its own `sp805_wdt` driver: the model ([`keel_core::devices::sp805`]) counts in
//! the system counter's time (CNTPCT_EL0, at WDOGCLK = [`layout::WATCHDOG_CLOCK_HZ`]), and
//! each write that moves the moment its reset output asserts tells health monitoring
//! ([`vm::set_watchdog_expiry`]): that moment is the VM's watchdog expiry, whose action its
//! `[vm.health]` names. No interrupt is wired (the driver takes none).
//!
//! Ownership and locks: each VM's model sits behind its own lock ([`watchdog`]), taken for one
//! access and by the life cycle's reset of the VM's devices; nothing else is locked while it is
//! held (setting the expiry is lock-free), so that expiries are set in the order the writes
//! made them (the crate's [lock order](crate#lock-order)).

use keel_core::abi::layout;
use keel_core::devices::sp805::Sp805;
use keel_core::devices::DeviceError;
use keel_core::system::VmDesc;

use super::{Access, Device};
use crate::arch::cpu::Mutex;
use crate::arch::timer;
use crate::vm::{self, MAX_VMS};

/// A VM's SP805.
pub struct Watchdog {
    model: Sp805,
}

impl Watchdog {
    /// A watchdog that never counts, until [`Watchdog::reset`] (the VM's build) sets it up.
    const fn new() -> Self {
        Self {
            model: Sp805::ZEROED,
        }
    }

    /// Puts VM `id`'s watchdog in its reset state (disabled, unlocked, WdogLoad all ones),
    /// counting at WDOGCLK on the system counter's frequency, and disarms its expiry (a write
    /// its vCPUs made before they stopped is forgotten with it).
    pub fn reset(&mut self, id: usize) {
        let counter_hz = u32::try_from(timer::frequency()).unwrap_or(u32::MAX);
        self.model = Sp805::new(layout::WATCHDOG_CLOCK_HZ, counter_hz);
        vm::set_watchdog_expiry(id, None);
    }
}

/// Each VM's SP805 (reset by `lifecycle` with the VM's other devices).
static WATCHDOGS: [Mutex<Watchdog>; MAX_VMS] = [const { Mutex::new(Watchdog::new()) }; MAX_VMS];

/// VM `id`'s SP805, behind its lock.
pub fn watchdog(id: usize) -> &'static Mutex<Watchdog> {
    vm::entry(&WATCHDOGS, id)
}

/// The device behind the [`Device`] interface.
pub struct Sp805Device;

impl Device for Sp805Device {
    fn name(&self) -> &'static str {
        "SP805 watchdog"
    }

    /// Only in a system with health monitoring built in (`config::HEALTH`, which a VM with the
    /// SP805 implies): otherwise the device is left out of the image.
    #[inline(always)]
    fn window(&self, desc: &VmDesc) -> Option<(u64, u64)> {
        (crate::config::HEALTH && desc.watchdog_device)
            .then_some((layout::WATCHDOG_BASE, layout::WATCHDOG_SIZE))
    }

    fn access(&self, id: usize, access: Access) -> Result<u64, DeviceError> {
        let now = timer::now();
        let mut watchdog = watchdog(id).lock();
        let Some(value) = access.write else {
            return watchdog
                .model
                .read(access.offset, access.size, now)
                .map(u64::from);
        };
        let before = watchdog.model.reset_at();
        // A 4-byte store's value (the only width the model takes) fits 32 bits.
        watchdog
            .model
            .write(access.offset, access.size, value as u32, now)?;
        let after = watchdog.model.reset_at();
        // Only a change: a write that moves nothing (WdogLock after a ping, or any write once
        // an ignored expiry's reset stays asserted) does not set the same expiry again.
        if after != before {
            vm::set_watchdog_expiry(id, after);
        }
        Ok(0)
    }
}
