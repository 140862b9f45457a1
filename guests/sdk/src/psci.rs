//! PSCI calls (Arm DEN0022, PSCI 1.1) through `HVC #0`, the conduit both Keel and QEMU `virt`
//! (without EL2/EL3 firmware) use.

use keel_core::abi::psci;

use crate::smccc::{hvc_call, Version};

/// PSCI_VERSION (PSCI 1.1 section 5.1.1); mandatory, so it cannot fail.
pub fn psci_version() -> Version {
    // SAFETY: PSCI_VERSION has no side effect.
    let result = unsafe { hvc_call(psci::VERSION, [0; 3]) };
    Version::from_x0(result.x0).unwrap_or(Version { major: 0, minor: 0 })
}

/// SYSTEM_OFF (PSCI 1.1 section 5.10): powers off the VM (or, natively, the machine).
pub fn system_off() -> ! {
    // SAFETY: the call does not return; if it did, the loop below keeps the promise of `!`.
    unsafe { hvc_call(psci::SYSTEM_OFF, [0; 3]) };
    loop {
        crate::cpu::wait_for_interrupt();
    }
}

/// SYSTEM_RESET (PSCI 1.1 section 5.11): restarts the VM (or, natively, the machine).
pub fn system_reset() -> ! {
    // SAFETY: the call does not return; if it did, the loop below keeps the promise of `!`.
    unsafe { hvc_call(psci::SYSTEM_RESET, [0; 3]) };
    loop {
        crate::cpu::wait_for_interrupt();
    }
}
