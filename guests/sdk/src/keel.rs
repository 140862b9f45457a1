//! Keel's own hypercalls (vendor-specific hypervisor service range, `keel_core::abi`).
//!
//! Only valid when running on Keel: natively, QEMU's HVC answers PSCI only and any other
//! function id is an UNDEFINED instruction.

use keel_core::abi::{self, CallError};

use crate::smccc::{hvc_call, Version};

/// KEEL_VERSION: Keel's version; also the null hypercall of the benchmarks.
pub fn keel_version() -> Result<Version, CallError> {
    // SAFETY: KEEL_VERSION has no side effect.
    let result = unsafe { hvc_call(abi::KEEL_VERSION, [0; 3]) };
    Version::from_x0(result.x0)
}

/// KEEL_VM_ID: the caller's VM id and vCPU index, as `(vm, vcpu)`.
pub fn vm_id() -> (u64, u64) {
    // SAFETY: KEEL_VM_ID has no side effect.
    let result = unsafe { hvc_call(abi::KEEL_VM_ID, [0; 3]) };
    (result.x0, result.x1)
}

/// KEEL_YIELD: gives up the rest of this vCPU's time slice.
pub fn yield_now() {
    // SAFETY: yielding only delays the caller.
    unsafe { hvc_call(abi::KEEL_YIELD, [0; 3]) };
}

/// What Keel's scheduler counted for the calling vCPU (KEEL_SCHED_STATS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedStats {
    /// Jobs released (periods begun).
    pub jobs: u64,
    /// Jobs not complete by their deadline.
    pub deadline_misses: u64,
    /// Periods in which the vCPU used its whole budget and was throttled.
    pub overruns: u64,
    /// Worst response time, in nanoseconds.
    pub worst_response_ns: u64,
}

/// KEEL_SCHED_STATS: the calling vCPU's statistics; an error on a pinned pCPU.
pub fn sched_stats() -> Result<SchedStats, CallError> {
    // SAFETY: KEEL_SCHED_STATS has no side effect.
    let result = unsafe { hvc_call(abi::KEEL_SCHED_STATS, [0; 3]) };
    if (result.x0 as i64) < 0 {
        return Err(CallError::NotSupported);
    }
    Ok(SchedStats {
        jobs: result.x0,
        deadline_misses: result.x1,
        overruns: result.x2,
        worst_response_ns: result.x3,
    })
}

/// KEEL_CRASH: reports a fatal exception (ESR_EL1, ELR_EL1, FAR_EL1); Keel stops the VM.
pub fn crash(esr: u64, elr: u64, far: u64) -> ! {
    // SAFETY: the call does not return; if it did, the loop below keeps the promise of `!`.
    unsafe { hvc_call(abi::KEEL_CRASH, [esr, elr, far]) };
    loop {
        crate::cpu::wait_for_interrupt();
    }
}
