//! A manager VM's services (KEEL_VM_STATUS, _START, _STOP, _RESTART, _SCHED_STATS,
//! _RESOURCES): what the
//! VMs that name it in `health.managers` let it do to them, as a hypercall or through the
//! management window. Each checks the grant first and changes nothing when refused.
//!
//! Ownership and locks: none of its own; a service takes `health`'s record lock, one shared
//! pCPU's scheduler lock for the statistics, or the managed VM's task table, vGIC or message
//! queues for its resource counters, each alone and briefly (the crate's
//! [lock order](crate#lock-order)).

use keel_core::abi::{self, CallError};
use keel_core::health::{Action, Event, Resources};

use crate::config::SYSTEM;
use crate::vm::{self, VmState};
use crate::{health, sched};

/// Results of a service: x0..x7 (the hypercall returns x0..x3; the window shows all).
pub type Results = [u64; 8];

fn refused(error: CallError) -> Results {
    let mut results = [0; 8];
    results[0] = error.to_x0();
    results
}

/// Makes service `function` for vCPU `caller_vcpu` of VM `caller`, with `args` as x1..x6.
pub fn call(caller: usize, caller_vcpu: usize, function: u32, args: &[u64; 6]) -> Results {
    if !health::ON {
        // No VM manages another, has a watchdog or a policy: the services are left out.
        return refused(CallError::NotSupported);
    }
    if function == abi::KEEL_VM_ID {
        return [
            u64::from(vm::vm_id(caller).0),
            caller_vcpu as u64,
            0,
            0,
            0,
            0,
            0,
            0,
        ];
    }
    let Some(target) = usize::try_from(args[0])
        .ok()
        .filter(|&target| target < SYSTEM.vms.len())
    else {
        return refused(CallError::InvalidParameters);
    };
    let manages = health::manages(caller, target);
    let reads = manages || target == caller;
    match function {
        abi::KEEL_VM_STATUS if reads => {
            let (state, restarts, last, at) = health::status(target);
            [state as u64, u64::from(restarts), last, at, 0, 0, 0, 0]
        }
        abi::KEEL_VM_SCHED_STATS if reads => {
            let Some(stats) = usize::try_from(args[1])
                .ok()
                .and_then(|vcpu| sched::stats_of(target, vcpu))
            else {
                return refused(CallError::NotSupported);
            };
            let ns = crate::arch::timer::ticks_to_ns;
            [
                stats.jobs,
                stats.deadline_misses,
                stats.overruns,
                ns(stats.worst_response),
                0,
                0,
                0,
                0,
            ]
        }
        abi::KEEL_VM_RESOURCES if reads => {
            let resources = Resources {
                messages: crate::ipc::queued(target),
                tasks: vm::task_table(target).lock_cold().count() as u64,
                slots: sched::started_slots(target),
                raised: vm::vm(target).vgic.lock_cold().raised_count(),
                dma: crate::iommu::vm_streams_translate(target),
                watchdog: vm::watchdog_expiry(target).is_some(),
            };
            let [x0, x1, x2, x3] = resources.to_results();
            [x0, x1, x2, x3, 0, 0, 0, 0]
        }
        abi::KEEL_VM_START if manages => {
            let vm = vm::vm(target);
            if vm.state() == VmState::Running || vm.is_resetting() {
                return refused(CallError::AlreadyOn);
            }
            asked(health::request(target, Event::ManagerRestart, caller))
        }
        abi::KEEL_VM_RESTART if manages => match health::pending_request(target) {
            // A restart under way or asked: this one is that one.
            _ if vm::vm(target).is_resetting() => [0; 8],
            Some(Some(Action::Restart)) => [0; 8],
            // A stop asked meanwhile: asked again once it is done.
            Some(_) => refused(CallError::OnPending),
            None => asked(health::request(target, Event::ManagerRestart, caller)),
        },
        abi::KEEL_VM_STOP if manages => {
            let vm = vm::vm(target);
            if vm.is_resetting() || health::pending_request(target).is_some() {
                // Its restart would run it again, or another request waits: asked again once
                // it is done.
                return refused(CallError::OnPending);
            }
            if vm.state() == VmState::Running {
                return asked(health::request(target, Event::ManagerStop, caller));
            }
            [0; 8]
        }
        abi::KEEL_VM_STATUS
        | abi::KEEL_VM_SCHED_STATS
        | abi::KEEL_VM_RESOURCES
        | abi::KEEL_VM_START
        | abi::KEEL_VM_RESTART
        | abi::KEEL_VM_STOP => refused(CallError::Denied),
        _ => refused(CallError::NotSupported),
    }
}

/// A manager's request made ([`health::request`]: decided, counted and said here, its
/// notices and action handed to the VM's vCPU 0's pCPU), or refused for another one that
/// waits (two managers at once).
fn asked(made: bool) -> Results {
    if made {
        [0; 8]
    } else {
        refused(CallError::OnPending)
    }
}
