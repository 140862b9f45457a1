//! Real-time task services (KEEL_TASK_*): the partition's task table and the slot its task
//! holds on a shared pCPU ([`keel_core::tasks`] decides; this carries it out).
//!
//! Ownership and locks: each VM's task table sits behind a lock of its own
//! ([`vm::task_table`], VM state), so that one VM's task services never wait for another's
//! unless one manages the other. A task service takes the table of the task's partition (the
//! caller's, or a VM's it manages), then the `SharedCpu` lock of the task's pCPU (possibly
//! another pCPU's: that pCPU holds its own lock only briefly and never while running a
//! guest), then at most a message queue's or a VM's device lock: the crate's
//! [lock order](crate#lock-order). The pCPU is kicked after the locks are dropped. Each
//! service is bounded by the slots of one pCPU.

use keel_core::abi::CallError;
use keel_core::addr::GuestPhysAddr;
use keel_core::tasks::{self, TaskError, TaskRequest, TaskTable};

use super::{this_shared, ticks_per_ns, Flags, Placed, SHARED};
use crate::arch::boot::MAX_CPUS;
use crate::arch::cpu::{self, MutexGuard};
use crate::arch::vectors::GuestRegs;
use crate::arch::{guest, timer};
use crate::config::SYSTEM;
use crate::vm::{self, VcpuPower};

/// What a task service asks of its caller beyond its result.
pub enum After {
    /// Resume the caller with x0 (and the registers set).
    Resume(u64),
    /// The caller deleted itself: it stops now.
    Stop,
}

/// KEEL_TASK_CREATE from VM `id`.
pub fn create(id: usize, request: &TaskRequest) -> u64 {
    let desc = vm::desc(id);
    if desc.tasks.is_none() {
        return TaskError::NotAllowed.to_x0();
    }
    let pcpu = request.pcpu as usize;
    if pcpu >= MAX_CPUS || !desc.pcpus.contains(&request.pcpu) {
        return TaskError::InvalidParameters.to_x0();
    }
    let vm = vm::vm(id);
    let mut table = vm::task_table(id).lock();
    let mut guard = SHARED[pcpu].lock();
    let shared = &mut *guard;
    let admitted = table.create(
        desc.tasks.as_ref(),
        desc.pcpus,
        request,
        |address, len| desc.region_of(GuestPhysAddr(address), len).is_some(),
        &mut shared.scheduler,
        ticks_per_ns(),
        SYSTEM.switch_cost_ns,
    );
    let admitted = match admitted {
        Ok(admitted) => admitted,
        Err(error) => return error.to_x0(),
    };
    let slot = admitted.slot;
    let vcpu = desc.pcpus.len() + admitted.index;
    let vttbr = (u64::from(desc.id.0 + 1) << 48) | vm.stage2_root();
    super::start_frame(shared, pcpu, slot, request.arg);
    let context = &mut shared.contexts[slot];
    context.reset(
        request.entry,
        guest::vmpidr(vcpu),
        (guest::hcr_value(true), guest::mdcr_value(desc.pmu)),
        vttbr,
        desc.pmu,
    );
    context.set_stack(request.stack);
    shared.place(slot, Some(Placed { vm: id, vcpu }));
    shared.generations[slot] = vm.generation();
    shared.timer_lr[slot] = (0, 0);
    vm.set_vcpu_power(vcpu, VcpuPower::Off);
    crate::ipc::clear(id, vcpu);
    tasks::handle(id, admitted.index)
}

/// A task `handle` names, which the caller may manage.
struct Found {
    /// Its index in the partition's table.
    index: usize,
    /// Where it is scheduled.
    task: tasks::Task,
    /// What its slot holds while the task exists: its partition, and its vCPU (the
    /// partition's configured ones plus its index).
    placed: Placed,
}

impl Found {
    /// Its slot on its pCPU.
    fn slot(&self) -> usize {
        usize::from(self.task.slot)
    }

    /// Whether `shared` (its pCPU's) still holds it: not if its VM was reset or ended since
    /// (the slot is then gone, and the table about to be cleared).
    fn is_in(&self, shared: &super::SharedCpu) -> bool {
        shared.placed[self.slot()] == Some(self.placed)
    }
}

/// The task `handle` names, if VM `caller` may manage it, and its partition's task table,
/// locked (the caller's own, or a managed VM's).
fn lookup(
    caller: usize,
    handle: u64,
) -> Result<(MutexGuard<'static, TaskTable>, Found), TaskError> {
    let (owner, index) = tasks::parse_handle(handle).ok_or(TaskError::NoSuchTask)?;
    if owner >= SYSTEM.vms.len() {
        return Err(TaskError::NoSuchTask);
    }
    if !tasks::may_manage(caller, owner, vm::desc(owner).tasks.as_ref()) {
        return Err(TaskError::NotAllowed);
    }
    let table = vm::task_table(owner).lock();
    let task = table.get(index)?;
    let vcpu = vm::desc(owner).pcpus.len() + index;
    let found = Found {
        index,
        task,
        placed: Placed { vm: owner, vcpu },
    };
    Ok((table, found))
}

/// KEEL_TASK_LAUNCH from VM `caller`: first release at `release` (counter ticks; 0 or a time
/// passed: now).
pub fn launch(caller: usize, handle: u64, release: u64) -> u64 {
    let (mut table, found) = match lookup(caller, handle) {
        Ok(found) => found,
        Err(error) => return error.to_x0(),
    };
    let pcpu = found.task.pcpu as usize;
    {
        let mut shared = SHARED[pcpu].lock();
        if !found.is_in(&shared) {
            return TaskError::NoSuchTask.to_x0();
        }
        let (slot, now) = (found.slot(), timer::now());
        if let Err(error) = table.launch(found.index, &mut shared.scheduler, now, release) {
            return error.to_x0();
        }
        shared.started |= 1 << slot;
        shared.set(slot, Flags::FRESH);
        vm::vm(found.placed.vm).set_vcpu_power(found.placed.vcpu, VcpuPower::On);
    }
    drop(table);
    vm::kick_pcpu(pcpu, found.placed.vm);
    0
}

/// KEEL_TASK_DELETE from vCPU `vcpu` of VM `caller`.
pub fn delete(caller: usize, vcpu: usize, handle: u64) -> After {
    let (mut table, found) = match lookup(caller, handle) {
        Ok(found) => found,
        Err(error) => return After::Resume(error.to_x0()),
    };
    let _ = table.delete(found.index);
    let pcpu = found.task.pcpu as usize;
    let slot = found.slot();
    let mut after = After::Resume(0);
    {
        let mut guard = SHARED[pcpu].lock();
        let shared = &mut *guard;
        if found.is_in(shared) {
            if shared.loaded == Some(slot) {
                // Running: here, it is the caller itself; elsewhere, it stops at the kick.
                shared.set(slot, Flags::DOOMED);
                if pcpu == cpu::index() && found.placed == (Placed { vm: caller, vcpu }) {
                    after = After::Stop;
                }
            } else {
                shared.remove_task(slot, timer::now());
            }
            // Off before its queue is emptied under the queue's lock: no send lands after, so
            // nothing sent to the deleted task is left for the next one with its index (nor
            // counted among the VM's queued messages).
            vm::vm(found.placed.vm).set_vcpu_power(found.placed.vcpu, VcpuPower::Off);
            crate::ipc::clear(found.placed.vm, found.placed.vcpu);
        }
    }
    drop(table);
    if matches!(after, After::Resume(_)) {
        vm::kick_pcpu(pcpu, found.placed.vm);
    }
    after
}

/// KEEL_TASK_STATS from VM `caller`: x0..x5 (see [`keel_core::abi::KEEL_TASK_STATS`]).
pub fn stats(caller: usize, handle: u64, regs: &mut GuestRegs) -> u64 {
    // The table stays locked while the pCPU's is taken, as in the other services.
    let (_table, found) = match lookup(caller, handle) {
        Ok(found) => found,
        Err(error) => return error.to_x0(),
    };
    let stats = {
        let shared = SHARED[found.task.pcpu as usize].lock();
        if !found.is_in(&shared) {
            return TaskError::NoSuchTask.to_x0();
        }
        shared.scheduler.stats(found.slot())
    };
    let ns = timer::ticks_to_ns;
    regs.x[1] = stats.deadline_misses;
    regs.x[2] = stats.overruns;
    regs.x[3] = ns(stats.worst_response);
    regs.x[4] = ns(stats.last_response);
    regs.x[5] = ns(stats.worst_lateness);
    stats.jobs
}

/// KEEL_TASK_WAIT from vCPU `vcpu` of VM `id`: whether the caller is a task on this (shared)
/// pCPU, which then gives the pCPU away until its next release.
pub fn may_wait(id: usize, vcpu: usize) -> Result<(), CallError> {
    if vcpu < vm::desc(id).pcpus.len() || !vm::this_cpu_is_shared() {
        return Err(CallError::Denied);
    }
    let shared = this_shared().lock();
    match shared.loaded {
        Some(slot) if shared.scheduler.has_reservation(slot) => Ok(()),
        _ => Err(CallError::Denied),
    }
}
