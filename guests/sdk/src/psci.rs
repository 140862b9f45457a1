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

/// CPU_ON (PSCI 1.1 section 5.6): starts the vCPU with MPIDR affinity `target` at the SDK's
/// CPU_ON entry, which runs the guest's [`crate::boot::set_secondary_main`] function on the stack whose
/// top is `stack_top` (16-byte aligned, owned by that vCPU alone). Returns PSCI's result.
pub fn cpu_on(target: u64, stack_top: usize) -> Result<(), i64> {
    let entry = crate::boot::keel_secondary_entry as *const () as usize as u64;
    // SAFETY: the entry is the SDK's, and the caller gives the new vCPU a stack of its own.
    let result = unsafe { hvc_call(psci::CPU_ON_64, [target, entry, stack_top as u64]) };
    match result.x0 as i64 {
        0 => Ok(()),
        error => Err(error),
    }
}

/// CPU_ON with any entry point and context, as a hostile or test guest may try: PSCI's
/// result code (0 on success).
///
/// # Safety
/// If it succeeds, the target vCPU runs whatever is at `entry`.
pub unsafe fn cpu_on_raw(target: u64, entry: u64, context: u64) -> i64 {
    // SAFETY: the caller accepts what the started vCPU runs.
    unsafe { hvc_call(psci::CPU_ON_64, [target, entry, context]).x0 as i64 }
}

/// CPU_OFF (PSCI 1.1 section 5.5): turns the calling vCPU off; it does not return.
pub fn cpu_off() -> ! {
    // SAFETY: the call does not return; if it did, the loop below keeps the promise of `!`.
    unsafe { hvc_call(psci::CPU_OFF, [0; 3]) };
    loop {
        crate::cpu::wait_for_interrupt();
    }
}

/// AFFINITY_INFO (PSCI 1.1 section 5.7) at level 0: 0 on, 1 off, 2 on pending, or an error.
pub fn affinity_info(target: u64) -> i64 {
    // SAFETY: AFFINITY_INFO has no side effect.
    unsafe { hvc_call(psci::AFFINITY_INFO_64, [target, 0, 0]).x0 as i64 }
}
