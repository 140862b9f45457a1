//! Real-time tasks a partition creates at run time (M5150's HCALL_RT_CREATE_APP and friends):
//! the checks of every request and each partition's table of tasks.
//!
//! A task is a vCPU of its partition beyond the configured ones (same stage-2 address space,
//! its own registers), with a reservation, on one of the partition's real-time pCPUs. The
//! hypervisor keeps one [`TaskTable`] per VM; this module decides whether a request is
//! allowed and valid, and the pCPU's [`Scheduler::admit`] whether it is schedulable. Every
//! refusal has its own [`TaskError`] and changes nothing.
//!
//! Life cycle: `create` → [`TaskState::Created`] (stopped) → `launch` →
//! [`TaskState::Launched`] (released periodically; `wait` ends a job) → `delete` →
//! [`TaskState::Free`] (its vCPU and scheduler slot are reused by the next create).

use crate::abi::CallError;
use crate::admission;
use crate::sched::{Params, Reservation, SchedError, Scheduler};
use crate::system::{TaskGrant, MAX_TASKS_PER_VM};

/// Why a task request is refused. Each has its own code in x0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskError {
    /// The caller may not do this: its VM has no `tasks` grant, it is not the task's
    /// partition or one of its managers, or (wait) it is not a task.
    NotAllowed,
    /// No task has that handle (never created, deleted, or another VM's that does not exist).
    NoSuchTask,
    /// The partition has as many tasks as its grant allows.
    LimitReached,
    /// Period, budget, deadline, priority or pCPU do not make a valid task.
    InvalidParameters,
    /// The entry point or the stack is not in the caller's memory.
    BadAddress,
    /// Admitting the task would break a reservation on its pCPU, or its partition's grant.
    NotSchedulable,
    /// Launch of a task already launched.
    AlreadyLaunched,
}

impl TaskError {
    /// Every refusal.
    pub const ALL: [TaskError; 7] = [
        TaskError::NotAllowed,
        TaskError::NoSuchTask,
        TaskError::LimitReached,
        TaskError::InvalidParameters,
        TaskError::BadAddress,
        TaskError::NotSchedulable,
        TaskError::AlreadyLaunched,
    ];

    /// The value returned in x0 (negative, distinct; PSCI's codes where one fits).
    pub const fn code(self) -> i64 {
        match self {
            TaskError::NotAllowed => CallError::Denied as i64,
            TaskError::InvalidParameters => CallError::InvalidParameters as i64,
            TaskError::AlreadyLaunched => CallError::AlreadyOn as i64,
            TaskError::BadAddress => CallError::InvalidAddress as i64,
            TaskError::NoSuchTask => -16,
            TaskError::LimitReached => -17,
            TaskError::NotSchedulable => -18,
        }
    }

    /// The value written to x0.
    pub const fn to_x0(self) -> u64 {
        self.code() as u64
    }
}

/// Longest period (and so deadline and budget) a task may have: 10 s, in nanoseconds.
pub const MAX_PERIOD_NS: u64 = 10_000_000_000;
/// Shortest period: 10 µs (below that, Keel's switches would be most of it).
pub const MIN_PERIOD_NS: u64 = 10_000;

/// A create request, as the hypercall gives it (durations in nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskRequest {
    /// Guest-physical entry point.
    pub entry: u64,
    /// Initial stack pointer (the top of the stack: it grows down).
    pub stack: u64,
    /// Value of x0 at entry.
    pub arg: u64,
    /// Release period.
    pub period: u64,
    /// Budget per period.
    pub budget: u64,
    /// Relative deadline (0: the period).
    pub deadline: u64,
    /// The pCPU, one of the partition's.
    pub pcpu: u32,
    /// Priority on a fixed-priority pCPU (higher first; ignored under EDF).
    pub priority: u8,
}

impl TaskRequest {
    /// The reservation asked for, in nanoseconds, if its figures are valid:
    /// `MIN_PERIOD_NS ≤ period ≤ MAX_PERIOD_NS`, `0 < budget ≤ deadline ≤ period`.
    pub fn reservation(&self) -> Option<Reservation> {
        let deadline = if self.deadline == 0 {
            self.period
        } else {
            self.deadline
        };
        let valid = (MIN_PERIOD_NS..=MAX_PERIOD_NS).contains(&self.period)
            && self.budget > 0
            && self.budget <= deadline
            && deadline <= self.period;
        valid.then_some(Reservation {
            period: self.period,
            budget: self.budget,
            deadline,
        })
    }

    /// The scheduling parameters (nanoseconds), if valid.
    pub fn params(&self) -> Option<Params> {
        Some(Params {
            priority: self.priority,
            reservation: Some(self.reservation()?),
        })
    }
}

/// A task's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    /// No task: the entry may be reused.
    Free,
    /// Created, stopped, waiting for launch.
    Created,
    /// Launched: released every period.
    Launched,
}

/// One task of a partition: where it is scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Task {
    /// Its state.
    pub state: TaskState,
    /// The pCPU it runs on.
    pub pcpu: u32,
    /// Its slot in that pCPU's scheduler.
    pub slot: u8,
    /// Its utilisation on that pCPU, ppm, switch cost included (counted against the grant).
    pub utilisation_ppm: u64,
}

impl Task {
    const FREE: Task = Task {
        state: TaskState::Free,
        pcpu: 0,
        slot: 0,
        utilisation_ppm: 0,
    };
}

/// A task handle as the hypercalls return and take it: `vm << 8 | index`.
pub const fn handle(vm: usize, index: usize) -> u64 {
    ((vm as u64) << 8) | index as u64
}

/// `(vm, index)` of a handle, if it is well formed (upper bits zero, index in range).
pub fn parse_handle(handle: u64) -> Option<(usize, usize)> {
    let vm = (handle >> 8) as usize;
    let index = (handle & 0xff) as usize;
    (handle >> 16 == 0 && index < MAX_TASKS_PER_VM).then_some((vm, index))
}

/// Whether VM `caller` may launch, delete or read the statistics of the tasks of VM `owner`
/// (which has `grant`): its own, or as one of the owner's managers.
pub fn may_manage(caller: usize, owner: usize, grant: Option<&TaskGrant>) -> bool {
    grant.is_some_and(|g| caller == owner || g.managers.iter().any(|&m| usize::from(m) == caller))
}

/// One partition's tasks.
#[derive(Clone, Copy, Debug)]
pub struct TaskTable {
    tasks: [Task; MAX_TASKS_PER_VM],
}

impl Default for TaskTable {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// Where a create was admitted: the task's index and its slot on the pCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The task's index in its partition (its handle's low byte).
    pub index: usize,
    /// Its slot in the pCPU's scheduler.
    pub slot: usize,
}

impl TaskTable {
    /// No tasks.
    pub const EMPTY: TaskTable = TaskTable {
        tasks: [Task::FREE; MAX_TASKS_PER_VM],
    };

    /// Task `index`, if it exists.
    pub fn get(&self, index: usize) -> Result<Task, TaskError> {
        self.tasks
            .get(index)
            .copied()
            .filter(|t| t.state != TaskState::Free)
            .ok_or(TaskError::NoSuchTask)
    }

    /// Tasks in use.
    pub fn count(&self) -> usize {
        self.tasks
            .iter()
            .filter(|t| t.state != TaskState::Free)
            .count()
    }

    /// Utilisation (ppm) the partition's tasks take on `pcpu`.
    pub fn utilisation_on(&self, pcpu: u32) -> u64 {
        self.tasks
            .iter()
            .filter(|t| t.state != TaskState::Free && t.pcpu == pcpu)
            .map(|t| t.utilisation_ppm)
            .sum()
    }

    /// Creates a task for partition `owner` (its VM id) with `grant` whose pCPUs are
    /// `vm_pcpus`, on `scheduler`
    /// (the request's pCPU's, whose durations are `request` durations converted by
    /// `ticks_per_ns = (numerator, denominator)`), checking in order: allowed, limit,
    /// parameters, addresses (`in_memory(address, length)`), schedulable. On success the
    /// task is added to `scheduler`, stopped, and recorded as created; on a refusal nothing
    /// changed. The task gets a slot empty of any task before it: one deleted within its
    /// budget window keeps its own slot, retired and counted by admission, until that window
    /// ends ([`Scheduler::remove`]).
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &mut self,
        grant: Option<&TaskGrant>,
        vm_pcpus: &[u32],
        request: &TaskRequest,
        in_memory: impl Fn(u64, u64) -> bool,
        scheduler: &mut Scheduler,
        ticks_per_ns: (u64, u64),
        switch_cost_ns: u64,
    ) -> Result<Admitted, TaskError> {
        let grant = grant.ok_or(TaskError::NotAllowed)?;
        let index = self
            .tasks
            .iter()
            .take(usize::from(grant.max))
            .position(|t| t.state == TaskState::Free)
            .ok_or(TaskError::LimitReached)?;
        let params = request.params().ok_or(TaskError::InvalidParameters)?;
        let shared_rt = !matches!(
            scheduler.policy(),
            crate::sched::Policy::Pinned | crate::sched::Policy::RoundRobin { .. }
        );
        if !vm_pcpus.contains(&request.pcpu) || !shared_rt {
            return Err(TaskError::InvalidParameters);
        }
        let entry_ok = request.entry.is_multiple_of(4) && in_memory(request.entry, 4);
        let stack_ok = request.stack.is_multiple_of(16)
            && request.stack >= 16
            && in_memory(request.stack - 16, 16);
        if !entry_ok || !stack_ok {
            return Err(TaskError::BadAddress);
        }
        let reservation = params.reservation.ok_or(TaskError::InvalidParameters)?;
        let utilisation = admission::utilisation_ppm(
            &admission::Task {
                period: reservation.period,
                budget: reservation.budget,
                deadline: reservation.deadline,
            },
            switch_cost_ns,
        );
        if self.utilisation_on(request.pcpu) + utilisation > u64::from(grant.utilisation_ppm) {
            return Err(TaskError::NotSchedulable);
        }
        let (numerator, denominator) = ticks_per_ns;
        let scaled = params.scaled(numerator, denominator);
        let scaled_reservation = scaled.reservation.ok_or(TaskError::InvalidParameters)?;
        if scaled_reservation.budget == 0 {
            return Err(TaskError::InvalidParameters);
        }
        scheduler.admit(scaled).map_err(|error| match error {
            SchedError::Full | SchedError::Unschedulable(_) => TaskError::NotSchedulable,
            SchedError::Invalid => TaskError::InvalidParameters,
        })?;
        let slot = scheduler
            .add(scaled)
            .map_err(|_| TaskError::NotSchedulable)?;
        self.tasks[index] = Task {
            state: TaskState::Created,
            pcpu: request.pcpu,
            slot: slot as u8,
            utilisation_ppm: utilisation,
        };
        Ok(Admitted { index, slot })
    }

    /// Launches task `index` at `now` on `scheduler` (its pCPU's): started there with its
    /// first job released at `release` (counter ticks; at or before `now`: at once), and
    /// marked launched; returns it as it was (created). Refused, with nothing changed, if it
    /// was launched already, or if its slot cannot start (already started, or not a vCPU's:
    /// the table and the scheduler disagree), which is never silent.
    pub fn launch(
        &mut self,
        index: usize,
        scheduler: &mut Scheduler,
        now: u64,
        release: u64,
    ) -> Result<Task, TaskError> {
        let task = self.get(index)?;
        if task.state == TaskState::Launched {
            return Err(TaskError::AlreadyLaunched);
        }
        if !scheduler.start_at(usize::from(task.slot), now, release.max(now)) {
            return Err(if scheduler.is_started(usize::from(task.slot)) {
                TaskError::AlreadyLaunched
            } else {
                TaskError::NoSuchTask
            });
        }
        self.tasks[index].state = TaskState::Launched;
        Ok(task)
    }

    /// Frees task `index`; returns it as it was (the caller removes its slot).
    pub fn delete(&mut self, index: usize) -> Result<Task, TaskError> {
        let task = self.get(index)?;
        self.tasks[index] = Task::FREE;
        Ok(task)
    }

    /// Forgets every task (the partition was reset or ended); returns the table as it was.
    pub fn clear(&mut self) -> TaskTable {
        core::mem::take(self)
    }

    /// The tasks in use, with their indices.
    pub fn iter(&self) -> impl Iterator<Item = (usize, Task)> + '_ {
        self.tasks
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, t)| t.state != TaskState::Free)
    }
}

#[cfg(test)]
mod tests;
