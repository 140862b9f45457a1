//! One vCPU's scheduling state on its pCPU: run state, budget, current job and statistics.
//!
//! Budget windows: a job's release opens a window of one period (`[release, window_end)`)
//! whose budget is all the vCPU may run until `window_end`, however it stops and starts
//! meanwhile. A start within the window (CPU_ON after CPU_OFF, its VM's reset) resumes with
//! what is left of the budget and the same deadline; only a start after the window has ended
//! releases a new job at once. A task re-created is another vCPU in another slot (see
//! [`super::Scheduler::remove`]).

use super::{Reservation, Time};

/// What the scheduler counts for one vCPU.
///
/// Jobs exist for vCPUs with a reservation only (fixed priority or EDF): a job is released
/// at each period, and is complete when the vCPU blocks (WFI, KEEL_YIELD) after its release.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Jobs released.
    pub jobs: u64,
    /// Jobs not complete by their absolute deadline (each counted once).
    pub deadline_misses: u64,
    /// Times the vCPU used up its budget while still runnable, and was throttled.
    pub overruns: u64,
    /// Longest response time (completion − release) of a completed job.
    pub worst_response: Time,
    /// Response time of the last completed job.
    pub last_response: Time,
    /// Times [`decide`](super::Scheduler::decide) switched to this vCPU from another one or
    /// from idle.
    pub dispatches: u64,
    /// Longest release lateness: from a job's release to the first time it was given the
    /// pCPU.
    pub worst_lateness: Time,
}

impl Stats {
    /// All zero (as [`Default`], usable in a `const`).
    pub const ZERO: Stats = Stats {
        jobs: 0,
        deadline_misses: 0,
        overruns: 0,
        worst_response: 0,
        last_response: 0,
        dispatches: 0,
        worst_lateness: 0,
    };
}

/// One vCPU's state, as the scheduler keeps it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Slot {
    /// Holds a vCPU (added and not removed).
    pub(super) present: bool,
    /// Fixed-priority policy: its priority (higher runs first).
    pub(super) priority: u8,
    /// The reservation the policy enforces (`None`: best effort, or a pinned pCPU).
    pub(super) reservation: Option<Reservation>,
    /// Powered on (between `start` and `stop`).
    pub(super) started: bool,
    /// Waiting for `wake` or (with a reservation) its next release.
    pub(super) blocked: bool,
    /// Budget left in the current period (reservation only); 0 = throttled.
    pub(super) budget: Time,
    /// Release time of the current job.
    pub(super) release: Time,
    /// Absolute deadline of the current job.
    pub(super) deadline: Time,
    /// Release time of the next job.
    pub(super) next_release: Time,
    /// The current job is released and not complete.
    pub(super) job_pending: bool,
    /// The current job was already counted as a deadline miss.
    pub(super) job_missed: bool,
    /// The current job was given the pCPU (its release lateness is counted).
    pub(super) job_dispatched: bool,
    /// End of the budget window opened by the last release (`0`: none yet). Until then, the
    /// budget left is all the vCPU may run, whatever stops and starts it.
    pub(super) window_end: Time,
    /// Removed while its budget window was open: holds its place (and its reservation, for
    /// admission) until `window_end`, never runs again, and is then emptied.
    pub(super) retired: bool,
    /// Place in the round-robin queue of its class: lower runs first.
    pub(super) ticket: u64,
    /// What was left of its quantum when a vCPU of a higher class preempted it (0: none): it
    /// resumes with that, not a fresh quantum, or a frequent preemptor would let it keep the
    /// pCPU from its equals forever.
    pub(super) quantum_left: Time,
    /// What happened so far.
    pub(super) stats: Stats,
    /// Jobs completed so far (its blocks with a job pending).
    pub(super) completed: u64,
    /// The counts (jobs, completed, misses, overruns) when the journal was last taken
    /// ([`super::Scheduler::take_journal`]).
    pub(super) seen: [u64; 4],
}

/// What happened to one vCPU's jobs since its journal was last taken: how many jobs were
/// released, completed and missed their deadline, how many times it used up its budget, and
/// the response time of the last completed job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Journal {
    pub released: u64,
    pub completed: u64,
    pub missed: u64,
    pub exhausted: u64,
    pub last_response: Time,
}

impl Journal {
    /// Whether nothing happened.
    pub fn is_empty(&self) -> bool {
        self.released == 0 && self.completed == 0 && self.missed == 0 && self.exhausted == 0
    }
}

impl Slot {
    /// A slot holding no vCPU.
    pub(super) const EMPTY: Slot = Slot {
        present: false,
        priority: 0,
        reservation: None,
        started: false,
        blocked: false,
        budget: 0,
        release: 0,
        deadline: 0,
        next_release: 0,
        job_pending: false,
        job_missed: false,
        job_dispatched: false,
        window_end: 0,
        retired: false,
        ticket: 0,
        quantum_left: 0,
        stats: Stats::ZERO,
        completed: 0,
        seen: [0; 4],
    };

    /// Started, not blocked, and (with a reservation) not throttled.
    #[inline(always)]
    pub(super) fn runnable(&self) -> bool {
        self.started && !self.blocked && (self.reservation.is_none() || self.budget > 0)
    }

    /// Powers the vCPU on at `now`: runnable. With a reservation, a job is released at `now`,
    /// unless the budget window of its last release is still open: then it resumes with
    /// what is left of that window's budget (under EDF, clipped to its bandwidth until the
    /// window's deadline, as at a wake-up: `clip`) and no new job.
    pub(super) fn start(&mut self, now: Time, ticket: u64, clip: bool) {
        self.started = true;
        self.blocked = false;
        self.ticket = ticket;
        self.job_pending = false;
        if let Some(reservation) = self.reservation {
            if now < self.window_end {
                if clip {
                    self.clip_budget(now);
                }
            } else {
                self.release_job(now, reservation);
            }
        }
    }

    /// Powers the vCPU off: its current job is dropped (not counted as a miss unless its
    /// deadline had already passed, which the caller's catch-up counted). What is left of
    /// its budget stays with its window ([`Slot::start`]).
    pub(super) fn stop(&mut self) {
        self.started = false;
        self.blocked = false;
        self.quantum_left = 0;
        self.job_pending = false;
    }

    /// Charges `elapsed` execution to the budget. Running out counts an overrun when
    /// `may_overrun` (the vCPU is still running, not blocking or stopping at that instant).
    pub(super) fn charge(&mut self, elapsed: Time, may_overrun: bool) {
        if self.reservation.is_none() || !self.started {
            return;
        }
        let before = self.budget;
        self.budget = before.saturating_sub(elapsed);
        if before > 0 && self.budget == 0 && may_overrun && !self.blocked {
            self.stats.overruns += 1;
        }
    }

    /// Counts a deadline miss of the current job if its deadline is at or before `now`, and
    /// releases the jobs due by `now`. Jobs whose whole period passed without the scheduler
    /// being called (the caller ignored `until`) are counted as released and missed.
    pub(super) fn catch_up(&mut self, now: Time) {
        let Some(reservation) = self.reservation else {
            return;
        };
        if !self.started {
            return;
        }
        self.count_miss(now);
        if now < self.next_release {
            return;
        }
        // The deadline is within the period, so a pending job was counted as missed above.
        let period = reservation.period.max(1);
        let skipped = (now - self.next_release) / period;
        self.stats.jobs = self.stats.jobs.saturating_add(skipped);
        self.stats.deadline_misses = self.stats.deadline_misses.saturating_add(skipped);
        let at = self
            .next_release
            .saturating_add(skipped.saturating_mul(period));
        self.release_job(at, reservation);
    }

    /// Counts a deadline miss if the current job is not complete at its deadline, `now` or
    /// before (once per job).
    pub(super) fn count_miss(&mut self, now: Time) {
        if self.started && self.job_pending && !self.job_missed && now >= self.deadline {
            self.stats.deadline_misses += 1;
            self.job_missed = true;
        }
    }

    /// Releases a job at `at`: full budget, new deadline, runnable.
    fn release_job(&mut self, at: Time, reservation: Reservation) {
        self.stats.jobs += 1;
        self.release = at;
        self.deadline = at.saturating_add(reservation.deadline);
        self.next_release = at.saturating_add(reservation.period.max(1));
        self.window_end = self.next_release;
        self.budget = reservation.budget;
        self.job_pending = true;
        self.job_missed = false;
        self.job_dispatched = false;
        self.blocked = false;
    }

    /// The vCPU is given the pCPU at `now`: the first time in a job, its release lateness is
    /// counted.
    pub(super) fn dispatched(&mut self, now: Time) {
        if self.job_pending && !self.job_dispatched {
            self.job_dispatched = true;
            let lateness = now.saturating_sub(self.release);
            self.stats.worst_lateness = self.stats.worst_lateness.max(lateness);
        }
    }

    /// Powers the vCPU on at `now` with its first job released at `release` (later than
    /// `now`), or at the end of its open budget window if that is later: until then it waits,
    /// with no budget.
    pub(super) fn start_later(&mut self, release: Time, ticket: u64) {
        self.started = true;
        self.blocked = true;
        self.ticket = ticket;
        self.job_pending = false;
        self.budget = 0;
        self.next_release = release.max(self.window_end);
    }

    /// The vCPU blocks at `now`: its current job (if any) is complete.
    #[inline]
    pub(super) fn block(&mut self, now: Time) {
        if !self.started {
            return;
        }
        self.blocked = true;
        self.quantum_left = 0;
        if self.job_pending {
            self.job_pending = false;
            self.completed += 1;
            let response = now.saturating_sub(self.release);
            self.stats.last_response = response;
            self.stats.worst_response = self.stats.worst_response.max(response);
            if now > self.deadline && !self.job_missed {
                self.stats.deadline_misses += 1;
                self.job_missed = true;
            }
        }
    }

    /// What happened since the last call (see [`Journal`]).
    pub(super) fn take_journal(&mut self) -> Journal {
        // Word by word: an array comparison would be a byte-wise `memcmp` call.
        let [jobs, completed, missed, overruns] = self.seen;
        if jobs == self.stats.jobs
            && completed == self.completed
            && missed == self.stats.deadline_misses
            && overruns == self.stats.overruns
        {
            return Journal::default();
        }
        self.seen = [
            self.stats.jobs,
            self.completed,
            self.stats.deadline_misses,
            self.stats.overruns,
        ];
        Journal {
            released: self.stats.jobs.saturating_sub(jobs),
            completed: self.completed.saturating_sub(completed),
            missed: self.stats.deadline_misses.saturating_sub(missed),
            exhausted: self.stats.overruns.saturating_sub(overruns),
            last_response: self.stats.last_response,
        }
    }

    /// The constant-bandwidth clip at a wake-up (Abeni and Buttazzo 1998): the budget left
    /// may not exceed what the reserved bandwidth allows until the current deadline,
    /// ⌊(deadline − now) · budget / relative deadline⌋.
    pub(super) fn clip_budget(&mut self, now: Time) {
        let Some(reservation) = self.reservation else {
            return;
        };
        let left = self.deadline.saturating_sub(now);
        let allowed = super::params::mul_div(left, reservation.budget, reservation.deadline)
            .map_or(Time::MAX, |(quotient, _)| quotient);
        self.budget = self.budget.min(allowed);
    }
}
