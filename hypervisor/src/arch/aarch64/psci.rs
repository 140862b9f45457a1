//! Calls to the platform's PSCI firmware over SMC (PSCI 1.1, DEN0022; SMCCC 1.1 conduit).

use keel_core::abi::psci;

/// Issues an SMC with the SMC Calling Convention and returns x0.
fn smc(function: u32, a1: u64, a2: u64, a3: u64) -> u64 {
    let mut x0 = u64::from(function);
    // SAFETY: an SMC to PSCI firmware follows SMCCC: only x0-x3 may change and memory is not
    // touched by the calls Keel makes (CPU_ON, SYSTEM_OFF, SYSTEM_RESET).
    unsafe {
        core::arch::asm!("smc #0", inout("x0") x0, inout("x1") a1 => _, inout("x2") a2 => _, inout("x3") a3 => _,
            options(nostack));
    }
    x0
}

/// Starts the CPU with affinity `mpidr` at physical address `entry` with `context` in x0.
pub fn cpu_on(mpidr: u64, entry: u64, context: u64) -> Result<(), i64> {
    match smc(psci::CPU_ON_64, mpidr, entry, context) as i64 {
        0 => Ok(()),
        error => Err(error),
    }
}

/// Powers the machine off.
pub fn system_off() -> ! {
    smc(psci::SYSTEM_OFF, 0, 0, 0);
    super::cpu::halt()
}
