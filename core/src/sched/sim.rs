//! A discrete-event simulation of periodic tasks, one per vCPU, under a [`Scheduler`], with
//! Keel's switch cost: the check that admission's verdicts hold for the scheduler as built.
//!
//! Each task releases a job every period from 0 (a synchronous release). A job needs `work`
//! of execution; it runs when the scheduler picks the task's vCPU and, when done, the vCPU
//! blocks (as a guest's WFI). At each release the task's vCPU is woken (the guest's timer
//! interrupt; for a vCPU with a reservation the scheduler has released it already). Every
//! switch to a vCPU (from another or from idle) costs `switch_cost` of pure overhead, run as
//! the incoming vCPU's first execution, so charged to its budget. Time advances from event to
//! event: the next release, the scheduler's `until`, the running job's completion.

use super::{Params, Policy, Reservation, SchedError, Scheduler, Stats, Time};

/// One periodic task on its own vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimTask {
    /// Job period (and the reservation's).
    pub period: Time,
    /// Relative deadline of each job (and the reservation's).
    pub deadline: Time,
    /// Execution each job needs (not counting switch costs).
    pub work: Time,
    /// The vCPU's budget per period; `None`: a best-effort vCPU (jobs still arrive by
    /// wake-ups each period, and are checked against `deadline` by the simulation alone).
    pub budget: Option<Time>,
    /// Fixed-priority policy: the vCPU's priority (higher runs first).
    pub priority: u8,
}

impl SimTask {
    /// The task's vCPU parameters.
    pub fn params(&self) -> Params {
        Params {
            priority: self.priority,
            reservation: self.budget.map(|budget| Reservation {
                period: self.period,
                budget,
                deadline: self.deadline,
            }),
        }
    }
}

/// What a simulation is run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Simulation {
    /// The pCPU's policy.
    pub policy: Policy,
    /// Overhead of each switch to a vCPU, run as that vCPU's execution.
    pub switch_cost: Time,
    /// Whether the scheduler is told the switch cost ([`Scheduler::with_switch_cost`]) or
    /// not ([`Scheduler::new`]).
    pub scheduler_knows_switch_cost: bool,
    /// The simulation covers `[0, horizon]`: events at `horizon` are processed, and jobs
    /// still pending then are misses if their deadline is at or before it.
    pub horizon: Time,
}

/// One task's outcome, as the simulation saw it, and the scheduler's own statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskReport {
    /// Jobs released.
    pub jobs: u64,
    /// Jobs that did not complete by their deadline.
    pub deadline_misses: u64,
    /// Longest response time of a completed job.
    pub worst_response: Time,
    /// The scheduler's statistics of the task's vCPU at the end.
    pub scheduler: Stats,
}

/// A simulation's outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Per task, in the order given.
    pub tasks: Vec<TaskReport>,
    /// Switches to a vCPU (each cost `switch_cost`).
    pub switches: u64,
    /// Time the pCPU was idle.
    pub idle: Time,
}

impl Report {
    /// Deadline misses of all tasks.
    pub fn deadline_misses(&self) -> u64 {
        self.tasks.iter().map(|t| t.deadline_misses).sum()
    }
}

/// The least common multiple of the tasks' periods (`None` on overflow or a zero period).
pub fn hyperperiod(tasks: &[SimTask]) -> Option<Time> {
    tasks.iter().try_fold(1u64, |acc, task| {
        if task.period == 0 {
            return None;
        }
        let (mut a, mut b) = (acc, task.period);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        (acc / a).checked_mul(task.period)
    })
}

/// A task's current job, as the simulation tracks it.
#[derive(Clone, Copy, Debug, Default)]
struct Job {
    /// Work left; 0 = no job pending.
    left: Time,
    release: Time,
    deadline: Time,
    next_release: Time,
}

/// Most scheduler calls at one instant before the simulation declares the scheduler stuck.
const MAX_STEPS_PER_INSTANT: usize = 64;

impl Simulation {
    /// Runs `tasks` (at most [`super::MAX_SLOTS`]); fails if the scheduler refuses one.
    ///
    /// # Panics
    /// If the scheduler makes no progress (asks for a decision at a time not in the future
    /// while running a vCPU without work, again and again): a scheduler bug.
    pub fn run(&self, tasks: &[SimTask]) -> Result<Report, SchedError> {
        let mut scheduler = if self.scheduler_knows_switch_cost {
            Scheduler::with_switch_cost(self.policy, self.switch_cost)
        } else {
            Scheduler::new(self.policy)
        };
        for task in tasks {
            scheduler.add(task.params())?;
        }
        let mut report = Report {
            tasks: vec![TaskReport::default(); tasks.len()],
            ..Report::default()
        };
        let mut jobs = vec![Job::default(); tasks.len()];
        for slot in 0..tasks.len() {
            scheduler.start(slot, 0);
        }
        let mut now: Time = 0;
        let mut running: Option<usize> = None;
        let mut overhead_left: Time = 0;
        loop {
            // Releases at `now`: a job still pending is replaced (a miss if not yet counted).
            for (slot, task) in tasks.iter().enumerate() {
                let job = &mut jobs[slot];
                if job.next_release != now {
                    continue;
                }
                let outcome = &mut report.tasks[slot];
                if job.left > 0 {
                    outcome.deadline_misses += 1;
                }
                outcome.jobs += 1;
                *job = Job {
                    left: task.work,
                    release: now,
                    deadline: now.saturating_add(task.deadline),
                    next_release: now.saturating_add(task.period.max(1)),
                };
                if task.work > 0 {
                    scheduler.wake(slot, now);
                }
            }
            // Decide; a vCPU picked without work blocks at once (the guest's idle WFI).
            let mut decision = scheduler.decide(now);
            let mut steps = 0;
            while let Some(slot) = decision.run.filter(|&slot| jobs[slot].left == 0) {
                steps += 1;
                assert!(steps < MAX_STEPS_PER_INSTANT, "scheduler stuck at {now}");
                scheduler.block(slot, now);
                decision = scheduler.decide(now);
            }
            if decision.run != running {
                running = decision.run;
                if running.is_some() {
                    report.switches += 1;
                    overhead_left = self.switch_cost;
                }
            }
            if now >= self.horizon {
                break;
            }
            // The next event.
            let mut next = self.horizon;
            for job in &jobs {
                next = next.min(job.next_release);
            }
            if let Some(until) = decision.until {
                assert!(until > now, "until {until} not after now {now}");
                next = next.min(until);
            }
            if let Some(slot) = running {
                next = next.min(
                    now.saturating_add(overhead_left)
                        .saturating_add(jobs[slot].left),
                );
            }
            // Run until then.
            let elapsed = next - now;
            now = next;
            let Some(slot) = running else {
                report.idle += elapsed;
                continue;
            };
            let overhead = elapsed.min(overhead_left);
            overhead_left -= overhead;
            let job = &mut jobs[slot];
            job.left -= (elapsed - overhead).min(job.left);
            if job.left == 0 {
                // Complete: the vCPU blocks.
                let outcome = &mut report.tasks[slot];
                let response = now - job.release;
                outcome.worst_response = outcome.worst_response.max(response);
                if now > job.deadline {
                    outcome.deadline_misses += 1;
                }
                scheduler.block(slot, now);
            }
        }
        for (slot, job) in jobs.iter().enumerate() {
            if job.left > 0 && job.deadline <= now {
                report.tasks[slot].deadline_misses += 1;
            }
            report.tasks[slot].scheduler = scheduler.stats(slot);
        }
        Ok(report)
    }
}
