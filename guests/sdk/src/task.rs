//! Real-time tasks scheduled by Keel itself (KEEL_TASK_*, see `keel_core::tasks`): a
//! partition asks Keel to create its periodic tasks as vCPUs of its own, launches them, and
//! each job ends with [`wait_next_period`]. Keel schedules them with the other vCPUs of the
//! pCPU (EDF or fixed priority), enforces their budgets and counts their misses.
//!
//! A task starts at EL1 with interrupts masked, on the stack it was given, in
//! [`TaskStart::main`] (through the SDK's entry, which sets up the exception vectors as for
//! a secondary vCPU). It takes no interrupts: it runs its job and waits for its next release.

use keel_core::abi::{self, CallError, MaskedSite};
use keel_core::tasks::TaskError;

use crate::smccc::hvc_call7;

/// What a task runs: `main(arg)`, which never returns (each job ends with
/// [`wait_next_period`]).
pub struct TaskStart {
    /// The task's body.
    pub main: fn(u64) -> !,
    /// Its argument.
    pub arg: u64,
}

/// A task's timing, in nanoseconds, and where it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskSpec {
    /// Release period.
    pub period_ns: u64,
    /// Execution budget per period (enforced).
    pub budget_ns: u64,
    /// Relative deadline; 0: the period.
    pub deadline_ns: u64,
    /// The pCPU, one of the partition's.
    pub pcpu: u8,
    /// Priority on a fixed-priority pCPU (higher first).
    pub priority: u8,
}

/// A task, by its handle (`vm << 8 | index`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Task(pub u64);

/// What Keel counted for a task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskStats {
    /// Jobs released.
    pub jobs: u64,
    /// Jobs not complete by their deadline.
    pub deadline_misses: u64,
    /// Times it used its whole budget and was throttled.
    pub overruns: u64,
    /// Worst response time (release to completion), ns.
    pub worst_response_ns: u64,
    /// Last response time, ns.
    pub last_response_ns: u64,
    /// Worst release lateness (release to first run), ns.
    pub worst_lateness_ns: u64,
}

/// The error a task service returned in x0, if it is one.
pub fn task_error(x0: u64) -> Option<TaskError> {
    TaskError::ALL.into_iter().find(|error| error.to_x0() == x0)
}

fn result(x0: u64) -> Result<u64, TaskError> {
    match task_error(x0) {
        Some(error) => Err(error),
        None if (x0 as i64) < 0 => Err(TaskError::NotAllowed),
        None => Ok(x0),
    }
}

unsafe extern "C" {
    /// The SDK's task entry (x0 = a `&'static TaskStart`, SP = the task's stack).
    fn keel_task_entry();
}

core::arch::global_asm!(
    ".section .text.keel_task_entry, \"ax\"",
    ".global keel_task_entry",
    "keel_task_entry:",
    "    msr     daifset, #0xf",
    "    msr     spsel, #1",
    "    movz    x1, #{sctlr_low}",
    "    movk    x1, #{sctlr_high}, lsl #16",
    "    msr     sctlr_el1, x1",
    "    adrp    x1, __keel_guest_vectors",
    "    add     x1, x1, :lo12:__keel_guest_vectors",
    "    msr     vbar_el1, x1",
    "    isb",
    "    bl      {start}",
    "1:  wfe",
    "    b       1b",
    sctlr_low = const crate::boot::SCTLR_EL1_AT_ENTRY & 0xFFFF,
    sctlr_high = const crate::boot::SCTLR_EL1_AT_ENTRY >> 16,
    start = sym task_start,
);

extern "C" fn task_start(start: &'static TaskStart) -> ! {
    crate::exceptions::install_gicv2_vectors_if_needed();
    (start.main)(start.arg)
}

/// KEEL_TASK_CREATE: a task running `start` on the stack whose top is `stack_top`, created
/// stopped.
pub fn create(
    start: &'static TaskStart,
    stack_top: u64,
    spec: TaskSpec,
) -> Result<Task, TaskError> {
    let entry = keel_task_entry as *const () as u64;
    let arg = start as *const TaskStart as u64;
    let placement = u64::from(spec.pcpu) | u64::from(spec.priority) << 8;
    // SAFETY: the task starts in the SDK's entry with a `'static` argument and the caller's
    // stack; creating it has no other effect on the caller.
    let x = unsafe {
        hvc_call7(
            abi::KEEL_TASK_CREATE,
            [
                entry,
                stack_top,
                arg,
                spec.period_ns,
                spec.budget_ns,
                spec.deadline_ns,
                placement,
            ],
        )
    };
    result(x[0]).map(Task)
}

/// KEEL_TASK_LAUNCH: the first job is released when the virtual counter reaches
/// `release_at` (0: now).
pub fn launch(task: Task, release_at: u64) -> Result<(), TaskError> {
    // SAFETY: launching a task only starts it.
    let x = unsafe { hvc_call7(abi::KEEL_TASK_LAUNCH, [task.0, release_at, 0, 0, 0, 0, 0]) };
    result(x[0]).map(|_| ())
}

/// KEEL_TASK_DELETE: the task stops at once and its queued messages are dropped; its vCPU
/// is reused by the next create, as a new task with nothing of this one. Its reservation
/// stays counted by admission until the end of the period it was in (a create may be refused
/// as not schedulable until then, one with the same parameters too).
pub fn delete(task: Task) -> Result<(), TaskError> {
    // SAFETY: deleting a task stops it (the caller itself, if it deletes itself).
    let x = unsafe { hvc_call7(abi::KEEL_TASK_DELETE, [task.0, 0, 0, 0, 0, 0, 0]) };
    result(x[0]).map(|_| ())
}

/// KEEL_TASK_WAIT: the calling task's job is done; returns at its next release.
pub fn wait_next_period() -> Result<(), TaskError> {
    // SAFETY: the call only suspends the caller until its next release.
    let x = unsafe { hvc_call7(abi::KEEL_TASK_WAIT, [0; 7]) };
    result(x[0]).map(|_| ())
}

/// KEEL_TASK_STATS.
pub fn stats(task: Task) -> Result<TaskStats, TaskError> {
    // SAFETY: reading statistics has no side effect.
    let x = unsafe { hvc_call7(abi::KEEL_TASK_STATS, [task.0, 0, 0, 0, 0, 0, 0]) };
    let jobs = result(x[0])?;
    Ok(TaskStats {
        jobs,
        deadline_misses: x[1],
        overruns: x[2],
        worst_response_ns: x[3],
        last_response_ns: x[4],
        worst_lateness_ns: x[5],
    })
}

/// A pCPU's longest stretch at EL2 with interrupts masked (KEEL_MASKED_STRETCH).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaskedStretch {
    /// Its length, ns.
    pub ns: u64,
    /// Where it was.
    pub site: MaskedSite,
    /// ESR_EL2 when it ended (the trap's syndrome).
    pub esr: u64,
    /// ELR_EL2 when it ended (the guest's PC).
    pub elr: u64,
}

/// KEEL_MASKED_STRETCH: pCPU `pcpu`'s longest stretch at EL2 with interrupts masked; `reset`
/// starts the record again. `Denied` if another VM's vCPUs may run on that pCPU (unless this
/// VM is configured as a monitor), `NotSupported` if there is no such pCPU.
pub fn masked_stretch(pcpu: u64, reset: bool) -> Result<MaskedStretch, CallError> {
    // SAFETY: reading (and resetting) a record has no other effect.
    let x = unsafe {
        hvc_call7(
            abi::KEEL_MASKED_STRETCH,
            [pcpu, u64::from(reset), 0, 0, 0, 0, 0],
        )
    };
    match x[0] as i64 {
        code if code == CallError::Denied as i64 => return Err(CallError::Denied),
        code if code < 0 => return Err(CallError::NotSupported),
        _ => {}
    }
    Ok(MaskedStretch {
        ns: x[0],
        site: MaskedSite::from_u64(x[1]),
        esr: x[2],
        elr: x[3],
    })
}
