//! Health monitoring from a guest: keeping its watchdog (KEEL_WATCHDOG), and a manager's
//! services on the VMs it manages (KEEL_VM_STATUS, _START, _STOP, _RESTART, _SCHED_STATS).
//! Health notices come as messages from [`keel_core::health::KEEL_SENDER`]
//! ([`crate::message::receive`]; decode them with [`keel_core::health::Notice::from_bytes`]).

use keel_core::abi::{self, CallError};
pub use keel_core::health::{Action, Event, Notice, Resources, VmStatus, KEEL_SENDER};

use crate::keel::SchedStats;
use crate::smccc::{error_from_x0, hvc_call, CallResult};

fn call(function: u32, args: [u64; 3]) -> Result<CallResult, CallError> {
    // SAFETY: the health services change only Keel's state and the VMs the configuration
    // lets the caller manage, never the caller's memory.
    let result = unsafe { hvc_call(function, args) };
    match error_from_x0(result.x0) {
        Some(error) => Err(error),
        None => Ok(result),
    }
}

/// KEEL_WATCHDOG: keeps (the first call arms) the caller's watchdog; its period in ns.
pub fn keep_watchdog() -> Result<u64, CallError> {
    call(abi::KEEL_WATCHDOG, [0; 3]).map(|result| result.x0)
}

/// A VM's health as KEEL_VM_STATUS reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// Its state.
    pub state: VmStatus,
    /// Its restarts since boot.
    pub restarts: u64,
    /// Its last event and the action taken, if any, and when (ns since boot).
    pub last: Option<(Event, Action, u64)>,
}

/// KEEL_VM_STATUS of VM `vm`.
pub fn status(vm: u64) -> Result<Status, CallError> {
    let result = call(abi::KEEL_VM_STATUS, [vm, 0, 0])?;
    let event = Event::from_code(result.x2 as u8);
    let action = Action::from_code((result.x2 >> 8) as u8);
    Ok(Status {
        state: VmStatus::from_code(result.x0).ok_or(CallError::NotSupported)?,
        restarts: result.x1,
        last: event
            .zip(action)
            .map(|(event, action)| (event, action, result.x3)),
    })
}

/// KEEL_VM_START of VM `vm` (off or stopped).
pub fn start(vm: u64) -> Result<(), CallError> {
    call(abi::KEEL_VM_START, [vm, 0, 0]).map(drop)
}

/// KEEL_VM_STOP of VM `vm`.
pub fn stop(vm: u64) -> Result<(), CallError> {
    call(abi::KEEL_VM_STOP, [vm, 0, 0]).map(drop)
}

/// KEEL_VM_RESTART of VM `vm`.
pub fn restart(vm: u64) -> Result<(), CallError> {
    call(abi::KEEL_VM_RESTART, [vm, 0, 0]).map(drop)
}

/// KEEL_VM_SCHED_STATS of vCPU `vcpu` of VM `vm`.
pub fn sched_stats(vm: u64, vcpu: u64) -> Result<SchedStats, CallError> {
    let result = call(abi::KEEL_VM_SCHED_STATS, [vm, vcpu, 0])?;
    Ok(SchedStats {
        jobs: result.x0,
        deadline_misses: result.x1,
        overruns: result.x2,
        worst_response_ns: result.x3,
    })
}

/// KEEL_VM_RESOURCES of VM `vm`.
pub fn resources(vm: u64) -> Result<Resources, CallError> {
    let result = call(abi::KEEL_VM_RESOURCES, [vm, 0, 0])?;
    Ok(Resources::from_results([
        result.x0, result.x1, result.x2, result.x3,
    ]))
}
