//! The scheduler of one pCPU: vCPU slots fed with events (start, stop, block, wake) and asked
//! what to run and until when ([`Scheduler::decide`]).
//!
//! Time accounting: every call that takes `now` first charges the time since the previous
//! call to the vCPU the last [`Scheduler::decide`] chose, as long as that vCPU holds the pCPU
//! (it stops holding it when it blocks or is stopped: the time from then until the next
//! `decide` is the hypervisor's and is charged to no one). The same call then counts
//! deadline misses and releases the jobs due by `now`. A `now` earlier than a previous one is
//! taken as the previous one. [`Scheduler::block`] completes the blocking vCPU's job before
//! releasing the jobs due at `now`, so a job that ends exactly at its deadline (or at its
//! next release) is met.
//!
//! Quanta: a vCPU gets a fresh quantum whenever it is dispatched (switched to, or picked again
//! after blocking); when its quantum has ended and another vCPU of its round-robin class is
//! runnable, it goes to the back of the queue. Running alone, its quantum restarts at the
//! first `decide` after it ends, and no quantum timer is set.
//!
//! Budget across stops and starts: a vCPU's budget belongs to the window of one period its
//! last release opened, not to the run that used it. A vCPU stopped and started again within
//! that window (CPU_OFF and CPU_ON, its VM's reset) gets only what is left of it, with the
//! same deadline; a vCPU removed within it (a task deleted) leaves its slot retired until the
//! window ends: it never runs again, but admission still counts its reservation, so that the
//! budget it may have left there is never handed to another vCPU beyond what admission
//! allowed. A vCPU added meanwhile (the task re-created, whatever its parameters) gets another
//! slot, empty: nothing of the removed one (releases, budget, job, statistics) is left to it.
//! So whatever a vCPU does, it never runs more than its budget in a window of one period from
//! a release, two releases are at least a period apart, and a re-created task is admitted
//! beside what its predecessor may still have run in its window.
//!
//! Overruns: counted when a vCPU's budget runs out while it still runs (in `decide` or
//! `wake`), not when it blocks or stops at that very instant, nor when the EDF wake-up clip
//! leaves it nothing.

use super::slot::{Slot, Stats};
use super::{Params, Policy, Time};
use crate::admission::{self, Refusal};
use crate::table::Table;

/// Most vCPUs one pCPU's scheduler holds.
pub const MAX_SLOTS: usize = 8;

/// Why a vCPU cannot be added to a pCPU's scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedError {
    /// The pCPU holds as many vCPUs as it can ([`MAX_SLOTS`], or one when pinned).
    Full,
    /// The parameters do not fit the policy: a reservation under round robin, or a
    /// reservation without `0 < budget ≤ deadline ≤ period`; under fixed priority, a
    /// reservation at a priority another one has, or not above every best-effort vCPU.
    Invalid,
    /// The reservations here would no longer all be kept (see [`Scheduler::admit`]).
    Unschedulable(Refusal),
}

impl crate::text::Show for SchedError {
    fn show(&self, out: &mut dyn crate::text::Out) {
        out.put(match self {
            SchedError::Full => "no room for another vCPU on this pCPU",
            SchedError::Invalid => {
                "scheduling parameters do not fit the policy (a reservation needs 0 < budget ≤ deadline ≤ period, and round robin takes none)"
            }
            SchedError::Unschedulable(refusal) => {
                return crate::text!(out, "not schedulable: ", refusal)
            }
        })
    }
}

impl core::fmt::Display for SchedError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        crate::text::fmt(self, f)
    }
}

/// What to run now, and when to ask again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The slot to run now; `None`: the pCPU idles until an interrupt.
    pub run: Option<usize>,
    /// The absolute time at which [`Scheduler::decide`] must be called again (budget
    /// exhaustion, a release that may change the choice, a quantum's end); `None`: only an
    /// event (wake, start, block, stop) can change the choice.
    pub until: Option<Time>,
}

fn task(r: super::Reservation) -> admission::Task {
    admission::Task {
        period: r.period,
        budget: r.budget,
        deadline: r.deadline,
    }
}

/// How the policy ranks a runnable slot: lower runs first. The first field is the class
/// (vCPUs of one class that share by round robin have the same first field).
type Rank = (u64, u64, u64);

/// The vCPU scheduler of one pCPU. Const-constructible, so that it can live in a static.
#[derive(Clone, Debug)]
pub struct Scheduler {
    policy: Policy,
    /// Keel's cost of one switch, which a preempting real-time vCPU pays for the one it
    /// preempts (see [`Scheduler::with_switch_cost`]).
    switch_cost: Time,
    /// Indexed with one shared out-of-range panic ([`Table`]).
    slots: Table<Slot, MAX_SLOTS>,
    len: usize,
    /// What the last decision chose.
    current: Option<usize>,
    /// `current` still holds the pCPU: time is charged to it.
    holding: bool,
    /// The latest `now` seen.
    clock: Time,
    /// When the running vCPU's quantum ends.
    quantum_end: Time,
    /// The last decision armed a quantum timer (another vCPU of the running one's round-robin
    /// class was runnable).
    quantum_armed: bool,
    /// The next round-robin ticket: the back of every queue.
    next_ticket: u64,
    /// Retired slots (one bit each): removed within their budget window, freed when it ends.
    retired: u32,
    /// Round robin only: the runnable slots in ticket order (the order they joined the back
    /// of the queue), one 4-bit slot number each from the low end; `queued` of them. The pick
    /// is the first, whatever the number of vCPUs.
    queue: u64,
    queued: u32,
    /// Slots with a reservation (one bit each): the only ones with jobs, releases and
    /// budgets, so the only ones the catch-up and the next decision time look at. A pCPU of
    /// best-effort vCPUs pays nothing per vCPU for them.
    reserved: u32,
}

impl Scheduler {
    /// An empty scheduler with `policy`, which does not know Keel's switch cost.
    pub const fn new(policy: Policy) -> Self {
        Self::with_switch_cost(policy, 0)
    }

    /// An empty scheduler with `policy`, told Keel's cost of one vCPU switch. Admission
    /// charges that cost twice per job (dispatching it, and resuming the job it preempted),
    /// but on the pCPU the resumption is paid by the preempted vCPU, which may be preempted
    /// many times in one job. So when a vCPU with a reservation preempts another one (that
    /// was running and is still runnable), `switch_cost` of the preempting vCPU's budget moves
    /// to the preempted one (up to its full budget): each job then pays at most twice the cost
    /// from its own budget, as admission assumes.
    pub const fn with_switch_cost(policy: Policy, switch_cost: Time) -> Self {
        Self {
            policy,
            switch_cost,
            slots: Table([Slot::EMPTY; MAX_SLOTS]),
            len: 0,
            current: None,
            holding: false,
            clock: 0,
            quantum_end: 0,
            quantum_armed: false,
            // Zero, like everything else here: an unused scheduler in a static costs no image.
            next_ticket: 0,
            retired: 0,
            queue: 0,
            queued: 0,
            reserved: 0,
        }
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Adds a vCPU, stopped; returns its slot: the lowest one free (0, 1, … in the order of
    /// addition, then those freed by [`Scheduler::remove`]; a retired slot is not free until
    /// its window ends). The slot holds nothing of a vCPU it held before. A pinned pCPU takes
    /// one vCPU and ignores its parameters.
    pub fn add(&mut self, params: Params) -> Result<usize, SchedError> {
        let capacity = if self.policy == Policy::Pinned {
            1
        } else {
            MAX_SLOTS
        };
        let reservation = self.checked(params)?;
        let slot = (0..capacity)
            .find(|&slot| !self.slots[slot].present)
            .ok_or(SchedError::Full)?;
        self.slots[slot] = Slot {
            present: true,
            priority: params.priority,
            reservation,
            ..Slot::EMPTY
        };
        if reservation.is_some() {
            self.reserved |= 1 << slot;
        }
        self.len = self.len.max(slot + 1);
        Ok(slot)
    }

    /// The reservation `params` gives a vCPU under the policy, if they fit it.
    fn checked(&self, params: Params) -> Result<Option<super::Reservation>, SchedError> {
        match (self.policy, params.reservation) {
            (Policy::Pinned, _) | (_, None) => Ok(None),
            (Policy::RoundRobin { .. }, Some(_)) => Err(SchedError::Invalid),
            (_, Some(r)) => {
                if r.budget == 0 || r.budget > r.deadline || r.deadline > r.period {
                    return Err(SchedError::Invalid);
                }
                Ok(Some(r))
            }
        }
    }

    /// Removes `slot` at `now` (stopping it first): its statistics are gone and
    /// [`Scheduler::add`] may reuse it. A vCPU with a reservation removed within its budget
    /// window leaves the slot retired until the window ends (see the module's doc).
    pub fn remove(&mut self, slot: usize, now: Time) {
        if slot >= self.len || !self.slots[slot].present || self.slots[slot].retired {
            return;
        }
        self.stop(slot, now);
        if self.current == Some(slot) {
            self.current = None;
            self.holding = false;
        }
        let s = &mut self.slots[slot];
        if s.reservation.is_some() && self.clock < s.window_end {
            s.stats = Stats::ZERO;
            s.completed = 0;
            s.seen = [0; 4];
            s.retired = true;
            self.retired |= 1 << slot;
            return;
        }
        self.free(slot);
    }

    /// Empties `slot`.
    fn free(&mut self, slot: usize) {
        self.dequeue(slot);
        self.slots[slot] = Slot::EMPTY;
        self.retired &= !(1 << slot);
        self.reserved &= !(1 << slot);
        while self.len > 0 && !self.slots[self.len - 1].present {
            self.len -= 1;
        }
    }

    /// Whether a vCPU with `params` could be added and its reservation kept together with the
    /// reservations of every vCPU here (started or not), Keel's switch cost included: the
    /// same tests as the configuration compiler ([`crate::admission`]), within
    /// [`admission::Limits::RUN_TIME`] (a set that needs more work is refused). Under fixed priority
    /// no two reservations may share a priority, and a reservation must rank above every
    /// best-effort vCPU. Retired slots count as the reservations they were (see the module's
    /// doc).
    pub fn admit(&self, params: Params) -> Result<(), SchedError> {
        let reservation = self.checked(params)?;
        if self.policy == Policy::Pinned {
            return Err(SchedError::Full);
        }
        if !(0..MAX_SLOTS).any(|slot| !self.slots[slot].present) {
            return Err(SchedError::Full);
        }
        let Some(new) = reservation else {
            return Ok(());
        };
        let present = || self.slots[..self.len].iter().filter(|s| s.present);
        let mut tasks = [admission::Task {
            period: 1,
            budget: 0,
            deadline: 1,
        }; MAX_SLOTS + 1];
        let mut priorities = [0u8; MAX_SLOTS + 1];
        let mut count = 0;
        let mut retired = [false; MAX_SLOTS + 1];
        for slot in present() {
            if let Some(r) = slot.reservation {
                tasks[count] = task(r);
                priorities[count] = slot.priority;
                retired[count] = slot.retired;
                count += 1;
            } else if matches!(self.policy, Policy::FixedPriority { .. })
                && slot.priority >= params.priority
            {
                return Err(SchedError::Invalid);
            }
        }
        tasks[count] = task(new);
        priorities[count] = params.priority;
        count += 1;
        let result = match self.policy {
            Policy::FixedPriority { .. } => {
                // A retired slot never runs again: its priority is free, and among equal
                // priorities it ranks first (its window's work may come before the new one's).
                if (0..count - 1).any(|i| !retired[i] && priorities[i] == params.priority) {
                    return Err(SchedError::Invalid);
                }
                // Highest priority first.
                let mut order = [0usize; MAX_SLOTS + 1];
                for (i, o) in order.iter_mut().enumerate().take(count) {
                    *o = i;
                }
                order[..count]
                    .sort_unstable_by_key(|&i| (core::cmp::Reverse(priorities[i]), !retired[i]));
                let mut sorted = tasks;
                for (k, &i) in order[..count].iter().enumerate() {
                    sorted[k] = tasks[i];
                }
                admission::fixed_priority_within(
                    &sorted[..count],
                    self.switch_cost,
                    admission::Limits::RUN_TIME,
                )
            }
            _ => admission::edf_within(
                &tasks[..count],
                self.switch_cost,
                admission::Limits::RUN_TIME,
            ),
        };
        result.map_err(SchedError::Unschedulable)
    }

    /// The reservations of the vCPUs here (not of retired slots), with their priorities.
    pub fn reservations(&self) -> impl Iterator<Item = (u8, super::Reservation)> + '_ {
        self.slots[..self.len]
            .iter()
            .filter(|s| s.present && !s.retired)
            .filter_map(|s| Some((s.priority, s.reservation?)))
    }

    /// Powers `slot` on at `now`: runnable, at the back of its round-robin queue; a vCPU with
    /// a reservation has a job released at `now`, unless its budget window is still open
    /// (it was stopped within it): then it resumes with what is left of that window's budget
    /// (under EDF clipped to its bandwidth until the window's deadline, as at a wake-up) and
    /// the same deadline. Ignored if already started, or retired.
    pub fn start(&mut self, slot: usize, now: Time) {
        if slot >= self.len || self.slots[slot].started || self.slots[slot].retired {
            return;
        }
        let now = self.account(now, true);
        let ticket = self.take_ticket(slot);
        let clip = matches!(self.policy, Policy::Edf { .. });
        self.slots[slot].start(now, ticket, clip);
    }

    /// Powers `slot` on at `now` with its first job released at `release` (phase alignment),
    /// or when its open budget window ends if that is later: until then it waits. A `release`
    /// not after `now`, or a vCPU without a reservation, starts as [`Scheduler::start`] does.
    /// Returns whether it started: not if it was already started, retired or no vCPU's slot
    /// (nothing changes then).
    pub fn start_at(&mut self, slot: usize, now: Time, release: Time) -> bool {
        if slot >= self.len
            || !self.slots[slot].present
            || self.slots[slot].started
            || self.slots[slot].retired
        {
            return false;
        }
        if release <= now || !self.has_reservation(slot) {
            self.start(slot, now);
            return true;
        }
        self.account(now, true);
        let ticket = self.take_ticket(slot);
        self.slots[slot].start_later(release, ticket);
        true
    }

    /// Powers `slot` off at `now` (CPU_OFF, its VM ended): never picked until started again.
    /// If it holds the pCPU, it is charged up to `now` and stops holding it.
    pub fn stop(&mut self, slot: usize, now: Time) {
        if slot >= self.len {
            return;
        }
        let now = self.charge(now, self.current != Some(slot));
        self.slots[slot].count_miss(now);
        self.slots[slot].stop();
        self.dequeue(slot);
        self.leave(slot);
        self.catch_up();
    }

    /// `slot` executed WFI or KEEL_YIELD at `now`: it waits for [`Scheduler::wake`] or (with a
    /// reservation) its next release. Its current job is complete at `now` (before a release
    /// due at `now`, which makes it runnable again with a new job). If it holds the pCPU, it
    /// is charged up to `now` and stops holding it (using up its budget exactly then is not
    /// an overrun).
    pub fn block(&mut self, slot: usize, now: Time) {
        if slot >= self.len {
            return;
        }
        let now = self.charge(now, self.current != Some(slot));
        self.slots[slot].block(now);
        self.dequeue(slot);
        self.leave(slot);
        self.catch_up();
    }

    /// An interrupt is pending for `slot` at `now`: a blocked vCPU becomes runnable, at the
    /// back of its round-robin queue (under EDF, a real-time vCPU keeps what is left of its
    /// budget, clipped to its bandwidth until its deadline). Returns whether the caller should
    /// call [`Scheduler::decide`] now: `slot` is runnable and ranks before the running vCPU,
    /// or the pCPU is idle, or `slot` shares the running vCPU's round-robin class and no
    /// quantum timer is armed.
    pub fn wake(&mut self, slot: usize, now: Time) -> bool {
        if slot >= self.len {
            return false;
        }
        let now = self.account(now, true);
        if !self.slots[slot].started {
            return false;
        }
        if self.slots[slot].blocked {
            self.slots[slot].blocked = false;
            self.slots[slot].ticket = self.take_ticket(slot);
            if matches!(self.policy, Policy::Edf { .. }) {
                self.slots[slot].clip_budget(now);
            }
        }
        self.should_preempt(slot)
    }

    /// After a [`Scheduler::wake`] that asked for a decision, the decision round robin would
    /// make when it changes nothing but the timing: the vCPU holding the pCPU keeps it (its
    /// quantum is not over) and, now that another waits behind it, its quantum's end is timed.
    /// Arms it as [`Scheduler::decide`] would and returns that end (the decision's `until`);
    /// `None` when only a decision can say (any other case or policy). A host test holds it
    /// to `decide`'s state and decision.
    pub fn arm_quantum(&mut self, now: Time) -> Option<Time> {
        if !self.is_fifo() || self.quantum_armed || self.queued < 2 || now < self.clock {
            return None;
        }
        let running = self.current.filter(|_| self.holding)?;
        if !self.slots[running].runnable()
            || now >= self.quantum_end
            || (self.queue & 0xf) as usize != running
        {
            return None;
        }
        self.clock = now;
        self.quantum_armed = true;
        Some(self.quantum_end)
    }

    /// `slot`, holding the pCPU, gives it away at `now` and the scheduler decides what runs
    /// next, in one call: [`Scheduler::block`], then (`requeue`: a best-effort vCPU's
    /// KEEL_YIELD) [`Scheduler::wake`] at the back of its queue, then [`Scheduler::decide`],
    /// with the time accounted once. The decision is the same as those three calls' (a
    /// host test holds it so).
    pub fn give_away(&mut self, slot: usize, now: Time, requeue: bool) -> Decision {
        // The slot the last decision chose is in range (a removal forgets it): the round-robin
        // path needs no other test.
        if self.current == Some(slot) && self.is_fifo() {
            return self.give_away_round_robin(slot, now, requeue);
        }
        if slot >= self.len {
            return self.decide(now);
        }
        self.give_away_generic(slot, now, requeue)
    }

    /// [`Scheduler::give_away`] for every policy, the one [`Scheduler::give_away_round_robin`]
    /// must agree with (`slot` in range).
    fn give_away_generic(&mut self, slot: usize, now: Time, requeue: bool) -> Decision {
        let now = self.charge(now, self.current != Some(slot));
        self.slots[slot].block(now);
        self.dequeue(slot);
        self.leave(slot);
        self.catch_up();
        if requeue && self.slots[slot].started {
            self.slots[slot].blocked = false;
            self.slots[slot].ticket = self.take_ticket(slot);
            if matches!(self.policy, Policy::Edf { .. }) {
                self.slots[slot].clip_budget(now);
            }
        }
        self.decide_accounted(now)
    }

    /// [`Scheduler::give_away`] under round robin by the vCPU the last decision chose, the
    /// switch path of a pCPU of best-effort vCPUs: round robin takes no reservation, so there
    /// is no budget to charge, no job to complete or release and no retired slot; nothing is
    /// held after the block, so the head of the queue runs next with a fresh quantum, timed
    /// only if another vCPU is queued behind it.
    fn give_away_round_robin(&mut self, slot: usize, now: Time, requeue: bool) -> Decision {
        let now = now.max(self.clock);
        self.clock = now;
        self.holding = false;
        if requeue && self.slots[slot].started {
            // What a block and a wake would do: round robin has no job to complete, so the
            // quantum left is all that changes before the vCPU goes to the back (runnable,
            // even if it was blocked since the last decision).
            self.slots[slot].quantum_left = 0;
            self.slots[slot].blocked = false;
            self.slots[slot].ticket = self.next_ticket;
            self.next_ticket += 1;
            self.requeue_at_back(slot);
        } else {
            self.slots[slot].block(now);
            self.dequeue(slot);
        }
        // Nothing is held now (`slot` was the last pick): the head runs with its quantum.
        self.run_head(now, Some(slot), None)
    }

    /// Moves `slot` to the back of the round-robin queue (appends it if it is not queued): a
    /// rotation of the queue when it is at the head, the usual case (the vCPU that ran).
    fn requeue_at_back(&mut self, slot: usize) {
        if self.queued > 0 && self.queue & 0xf == slot as u64 {
            self.queue = self.queue >> 4 | (slot as u64) << (4 * (self.queued - 1));
        } else {
            self.dequeue(slot);
            self.queue |= (slot as u64) << (4 * self.queued);
            self.queued += 1;
        }
    }

    /// Charges the time since the previous call to the vCPU holding the pCPU, counts misses,
    /// releases jobs, throttles a vCPU out of budget, rotates a vCPU whose quantum ended,
    /// and picks what runs from `now`.
    pub fn decide(&mut self, now: Time) -> Decision {
        if self.is_fifo() {
            return self.decide_round_robin(now);
        }
        self.decide_generic(now)
    }

    /// [`Scheduler::decide`] for every policy, the one [`Scheduler::decide_round_robin`] must
    /// agree with.
    fn decide_generic(&mut self, now: Time) -> Decision {
        let now = self.account(now, true);
        self.decide_accounted(now)
    }

    /// [`Scheduler::decide`] under round robin: no reservation, so nothing to charge, release,
    /// catch up or pay for; the running vCPU goes behind the others when its quantum is over
    /// and one is queued behind it; the head of the queue runs, its quantum timed only if
    /// another vCPU waits behind it. A host test holds it to the generic path's state.
    fn decide_round_robin(&mut self, now: Time) -> Decision {
        let now = now.max(self.clock);
        self.clock = now;
        let held = self.current.filter(|_| self.holding);
        if let Some(running) = held {
            // Under round robin every runnable vCPU is queued, the running one too.
            if self.slots[running].runnable() && now >= self.quantum_end && self.queued > 1 {
                self.dequeue(running);
                self.slots[running].ticket = self.take_ticket(running);
            }
        }
        self.run_head(now, self.current, held)
    }

    /// Round robin's pick at `now` (the time accounted, `previous` the last decision's pick,
    /// `held` the vCPU that held the pCPU until now, if any): the head of the queue runs, with what is left of its quantum or a
    /// fresh one, timed only if another vCPU waits behind it. Inlined, so that the give-away,
    /// which holds nothing, pays for none of the `held` cases.
    #[inline(always)]
    fn run_head(&mut self, now: Time, previous: Option<usize>, held: Option<usize>) -> Decision {
        let pick = (self.queued > 0).then_some((self.queue & 0xf) as usize);
        let mut until = None;
        self.quantum_armed = false;
        if let Some(chosen) = pick {
            if let Some(preempted) = held.filter(|&p| p != chosen) {
                if self.slots[preempted].runnable() {
                    self.slots[preempted].quantum_left = self.quantum_end.saturating_sub(now);
                }
            }
            if held != Some(chosen) {
                let left = core::mem::take(&mut self.slots[chosen].quantum_left);
                self.quantum_end = now.saturating_add(if left > 0 { left } else { self.quantum() });
            } else if now >= self.quantum_end {
                self.quantum_end = now.saturating_add(self.quantum());
            }
            self.slots[chosen].dispatched(now);
            if previous != Some(chosen) {
                self.slots[chosen].stats.dispatches += 1;
            }
            if self.queued > 1 {
                until = Some(self.quantum_end);
                self.quantum_armed = true;
            }
        }
        self.current = pick;
        self.holding = pick.is_some();
        Decision { run: pick, until }
    }

    /// [`Scheduler::decide`] once the time up to `now` is accounted.
    #[inline(always)]
    fn decide_accounted(&mut self, now: Time) -> Decision {
        let previous = self.current;
        let held = previous.filter(|_| self.holding);
        if let Some(running) = held {
            if self.slots[running].runnable()
                && now >= self.quantum_end
                && self.peer_runnable(running)
            {
                self.dequeue(running);
                self.slots[running].ticket = self.take_ticket(running);
            }
        }
        let (pick, peer) = self.best();
        if let (Some(preempted), Some(chosen)) = (held, pick) {
            if preempted != chosen && self.slots[preempted].runnable() {
                self.slots[preempted].quantum_left = self.quantum_end.saturating_sub(now);
            }
        }
        if let Some(chosen) = pick {
            if held != Some(chosen) {
                let left = core::mem::take(&mut self.slots[chosen].quantum_left);
                self.quantum_end = now.saturating_add(if left > 0 { left } else { self.quantum() });
            } else if now >= self.quantum_end {
                self.quantum_end = now.saturating_add(self.quantum());
            }
            self.slots[chosen].dispatched(now);
            if previous != Some(chosen) {
                self.slots[chosen].stats.dispatches += 1;
                if let Some(preempted) = held {
                    self.pay_for_resumption(chosen, preempted);
                }
            }
        }
        self.current = pick;
        self.holding = pick.is_some();
        let until = self.until(now, pick, peer);
        Decision { run: pick, until }
    }

    /// What the last [`Scheduler::decide`] chose.
    pub fn current(&self) -> Option<usize> {
        self.current
    }

    /// `slot`'s statistics (all zero for a slot out of range).
    pub fn stats(&self, slot: usize) -> Stats {
        self.slots[..self.len]
            .get(slot)
            .map_or(Stats::ZERO, |s| s.stats)
    }

    /// Forgets `slot`'s statistics and journal (its VM restarted: the new incarnation's
    /// counts start from zero).
    pub fn clear_stats(&mut self, slot: usize) {
        if let Some(slot) = self.slots[..self.len].get_mut(slot) {
            slot.stats = Stats::ZERO;
            slot.completed = 0;
            slot.seen = [0; 4];
        }
    }

    /// What happened to `slot`'s jobs since this was last asked (nothing for a slot out of
    /// range): for a trace, read after each decision.
    pub fn take_journal(&mut self, slot: usize) -> super::slot::Journal {
        let len = self.len;
        self.slots[..len]
            .get_mut(slot)
            .map_or_else(Default::default, Slot::take_journal)
    }

    /// What is left of `slot`'s budget in its current window (`None`: no reservation, or no
    /// such slot).
    pub fn budget_left(&self, slot: usize) -> Option<Time> {
        let slot = self.slots[..self.len].get(slot)?;
        slot.reservation.map(|_| slot.budget)
    }

    /// `slot`'s budget window: the release that opened it and its end (`(0, 0)`: none yet,
    /// or no such slot).
    pub fn budget_window(&self, slot: usize) -> (Time, Time) {
        self.slots[..self.len]
            .get(slot)
            .map_or((0, 0), |s| (s.release, s.window_end))
    }

    /// Whether `slot` has a reservation (a real-time vCPU).
    #[inline]
    pub fn has_reservation(&self, slot: usize) -> bool {
        // Round robin takes none ([`Scheduler::add`] refuses them): its yields ask the policy.
        !self.is_fifo()
            && self.slots[..self.len]
                .get(slot)
                .is_some_and(|s| s.reservation.is_some())
    }

    /// Number of vCPUs added.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no vCPU was added.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `slot` is started (powered on and not stopped since).
    pub fn is_started(&self, slot: usize) -> bool {
        self.slots[..self.len].get(slot).is_some_and(|s| s.started)
    }

    /// Whether `slot` may be picked: started, not blocked, not throttled.
    #[inline]
    pub fn is_runnable(&self, slot: usize) -> bool {
        self.slots[..self.len].get(slot).is_some_and(Slot::runnable)
    }

    /// Charges the time since the last call, then counts misses and releases jobs, at
    /// `max(now, latest now)`, which it returns.
    fn account(&mut self, now: Time, may_overrun: bool) -> Time {
        let now = self.charge(now, may_overrun);
        self.catch_up();
        now
    }

    /// Charges the time since the last call to the vCPU holding the pCPU; returns
    /// `max(now, latest now)`.
    #[inline(always)]
    fn charge(&mut self, now: Time, may_overrun: bool) -> Time {
        let elapsed = now.saturating_sub(self.clock);
        self.clock = self.clock.max(now);
        if let Some(running) = self.current.filter(|_| self.holding) {
            self.slots[running].charge(elapsed, may_overrun);
        }
        self.clock
    }

    /// Counts misses and releases the jobs due at the latest `now` seen; frees the retired
    /// slots whose window has ended.
    #[inline(always)]
    fn catch_up(&mut self) {
        let clock = self.clock;
        let mut scan = self.reserved;
        while scan != 0 {
            let slot = scan.trailing_zeros() as usize;
            scan &= scan - 1;
            self.slots[slot].catch_up(clock);
        }
        if self.retired != 0 {
            self.free_expired(clock);
        }
    }

    /// Frees the retired slots whose budget window ended by `clock`.
    #[cold]
    fn free_expired(&mut self, clock: Time) {
        let mut scan = self.retired;
        while scan != 0 {
            let slot = scan.trailing_zeros() as usize;
            scan &= scan - 1;
            if clock >= self.slots[slot].window_end {
                self.free(slot);
            }
        }
    }

    /// `slot` no longer holds the pCPU (it blocked or stopped).
    fn leave(&mut self, slot: usize) {
        if self.current == Some(slot) {
            self.holding = false;
        }
    }

    /// The next ticket, for `slot`, which goes to the back of its queue: a slot not in the
    /// queue (it becomes runnable), or one the caller took out of it.
    fn take_ticket(&mut self, slot: usize) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        if self.is_fifo() {
            self.queue |= (slot as u64) << (4 * self.queued);
            self.queued += 1;
        }
        ticket
    }

    /// Whether the round-robin queue holds exactly the runnable slots, in ticket order (always
    /// true under the other policies, which keep none).
    #[cfg(test)]
    pub(crate) fn queue_is_consistent(&self) -> bool {
        if !self.is_fifo() {
            return self.queued == 0;
        }
        let mut runnable: std::vec::Vec<usize> = (0..self.len)
            .filter(|&s| self.slots[s].runnable())
            .collect();
        runnable.sort_by_key(|&s| self.slots[s].ticket);
        let queued: std::vec::Vec<usize> = (0..self.queued)
            .map(|i| ((self.queue >> (4 * i)) & 0xf) as usize)
            .collect();
        runnable == queued
    }

    /// Whether the policy keeps its runnable slots in [`Scheduler::queue`] (round robin).
    #[inline(always)]
    fn is_fifo(&self) -> bool {
        matches!(self.policy, Policy::RoundRobin { .. })
    }

    /// Takes `slot` out of the round-robin queue (it blocked, stopped or went), if there.
    /// Finds it among the 4-bit fields at once (a zero field of `queue ^ slot repeated`).
    fn dequeue(&mut self, slot: usize) {
        if !self.is_fifo() || self.queued == 0 {
            return;
        }
        if self.queue & 0xf == slot as u64 {
            // The usual one: the running vCPU, at the head.
            self.queue >>= 4;
            self.queued -= 1;
            return;
        }
        const ONES: u64 = 0x1111_1111;
        let used = (1u64 << (4 * self.queued)) - 1;
        let x = (self.queue ^ (slot as u64 * ONES)) & used | !used & 0xffff_ffff;
        let zero = x.wrapping_sub(ONES) & !x & (ONES << 3) & used;
        if zero == 0 {
            return;
        }
        let at = 4 * (zero.trailing_zeros() / 4);
        let below = self.queue & ((1 << at) - 1);
        self.queue = below | (self.queue >> (at + 4)) << at;
        self.queued -= 1;
    }

    fn quantum(&self) -> Time {
        match self.policy {
            Policy::Pinned => Time::MAX,
            Policy::RoundRobin { quantum }
            | Policy::FixedPriority { quantum }
            | Policy::Edf { quantum } => quantum.max(1),
        }
    }

    /// How the policy ranks `slot` (lower first).
    #[inline(always)]
    fn rank(&self, slot: usize) -> Rank {
        let s = &self.slots[slot];
        match self.policy {
            Policy::Pinned | Policy::RoundRobin { .. } => (0, 0, s.ticket),
            Policy::FixedPriority { .. } => (u64::from(u8::MAX - s.priority), 0, s.ticket),
            Policy::Edf { .. } => match s.reservation {
                Some(_) => (0, s.deadline, slot as u64),
                None => (1, 0, s.ticket),
            },
        }
    }

    /// Whether `slot` shares the pCPU by round robin with the others of its class.
    #[inline(always)]
    fn round_robin(&self, slot: usize) -> bool {
        match self.policy {
            Policy::Pinned => false,
            Policy::RoundRobin { .. } | Policy::FixedPriority { .. } => true,
            Policy::Edf { .. } => self.slots[slot].reservation.is_none(),
        }
    }

    /// Whether another runnable vCPU shares `slot`'s round-robin class.
    #[inline(always)]
    fn peer_runnable(&self, slot: usize) -> bool {
        self.round_robin(slot)
            && (0..self.len).any(|other| {
                other != slot
                    && self.slots[other].runnable()
                    && self.rank(other).0 == self.rank(slot).0
            })
    }

    /// The runnable slot that ranks first, and whether another runnable slot shares its
    /// round-robin class (it then gets a quantum timer). One pass over the slots, the
    /// policy's rank folded into one key: (class, ticket) packed into a `u64` under round
    /// robin and fixed priority (tickets stay below 2^56: one per dispatch, 2,000 years at a
    /// million a second); under EDF, a reservation's (deadline, slot) before any best-effort
    /// vCPU's ticket. The same order as [`Scheduler::rank`], which a host test holds.
    fn best(&self) -> (Option<usize>, bool) {
        if self.is_fifo() {
            return match self.queued {
                0 => (None, false),
                queued => (Some((self.queue & 0xf) as usize), queued > 1),
            };
        }
        let mut pick = None;
        let mut key = u64::MAX;
        // Runnable slots in the class of the best one so far.
        let mut in_class = 0u32;
        let mut class = u64::MAX;
        match self.policy {
            Policy::Pinned | Policy::RoundRobin { .. } | Policy::FixedPriority { .. } => {
                let fixed = matches!(self.policy, Policy::FixedPriority { .. });
                for (index, slot) in self.slots[..self.len].iter().enumerate() {
                    if !slot.runnable() {
                        continue;
                    }
                    let slot_class = if fixed {
                        u64::from(u8::MAX - slot.priority)
                    } else {
                        0
                    };
                    let slot_key = (slot_class << 56) | (slot.ticket & ((1 << 56) - 1));
                    if slot_class < class {
                        class = slot_class;
                        in_class = 0;
                    }
                    if slot_class == class {
                        in_class += 1;
                    }
                    if slot_key < key {
                        key = slot_key;
                        pick = Some(index);
                    }
                }
                (pick, in_class > 1)
            }
            Policy::Edf { .. } => {
                let mut deadline = (Time::MAX, usize::MAX);
                let mut best_effort = 0u32;
                let mut best_effort_pick = None;
                for (index, slot) in self.slots[..self.len].iter().enumerate() {
                    if !slot.runnable() {
                        continue;
                    }
                    if slot.reservation.is_some() {
                        if (slot.deadline, index) < deadline {
                            deadline = (slot.deadline, index);
                            pick = Some(index);
                        }
                    } else {
                        best_effort += 1;
                        if slot.ticket < key {
                            key = slot.ticket;
                            best_effort_pick = Some(index);
                        }
                    }
                }
                match pick {
                    Some(_) => (pick, false),
                    None => (best_effort_pick, best_effort > 1),
                }
            }
        }
    }

    /// Whether a `decide` now may change what runs, `slot` being runnable.
    fn should_preempt(&self, slot: usize) -> bool {
        if !self.slots[slot].runnable() {
            return false;
        }
        let Some(running) = self
            .current
            .filter(|&c| self.holding && self.slots[c].runnable())
        else {
            return true;
        };
        if running == slot {
            return false;
        }
        let (woken, current) = (self.rank(slot), self.rank(running));
        if woken.0 != current.0 {
            return woken.0 < current.0;
        }
        if self.round_robin(running) {
            return !self.quantum_armed;
        }
        woken < current
    }

    /// `chosen` preempts `preempted` (which held the pCPU): if both have reservations and
    /// `preempted` is still runnable, `chosen` pays for `preempted`'s coming resumption.
    fn pay_for_resumption(&mut self, chosen: usize, preempted: usize) {
        let (Some(full), Some(_)) = (
            self.slots[preempted].reservation,
            self.slots[chosen].reservation,
        ) else {
            return;
        };
        if self.switch_cost == 0 || !self.slots[preempted].runnable() {
            return;
        }
        // Leave the chosen vCPU at least one unit: it was picked to run.
        let amount = self
            .switch_cost
            .min(self.slots[chosen].budget.saturating_sub(1));
        self.slots[chosen].budget -= amount;
        let credited = self.slots[preempted].budget.saturating_add(amount);
        self.slots[preempted].budget = credited.min(full.budget);
    }

    /// When to decide again after choosing `pick` at `now`.
    fn until(&mut self, now: Time, pick: Option<usize>, peer: bool) -> Option<Time> {
        self.quantum_armed = false;
        if self.policy == Policy::Pinned {
            return None;
        }
        let mut until: Option<Time> = None;
        let mut earliest = |at: Time| until = Some(until.map_or(at, |u| u.min(at)));
        if let Some(running) = pick {
            let slot = &self.slots[running];
            if slot.reservation.is_some() {
                earliest(now.saturating_add(slot.budget));
                earliest(slot.next_release);
            }
            if peer {
                earliest(self.quantum_end);
                self.quantum_armed = true;
            }
        }
        let mut scan = self.reserved;
        while scan != 0 {
            let slot = &self.slots[scan.trailing_zeros() as usize];
            scan &= scan - 1;
            if slot.started && !slot.runnable() {
                earliest(slot.next_release);
            }
        }
        until
    }
}

#[cfg(test)]
mod best_tests {
    use super::*;
    use crate::rng::Rng;

    /// A round-robin scheduler of 1 to [`MAX_SLOTS`] best-effort slots and a random quantum.
    fn random_round_robin(rng: &mut Rng) -> Scheduler {
        let mut scheduler = Scheduler::new(Policy::RoundRobin {
            quantum: 1 + rng.below(40),
        });
        for _ in 0..(1 + rng.below(MAX_SLOTS as u64)) {
            let _ = scheduler.add(Params {
                priority: 0,
                reservation: None,
            });
        }
        scheduler
    }

    /// One of the operations both equivalence tests mix, chosen among `kinds`: a start, stop,
    /// block or wake of a random slot (returns true), or none (false: the test's own).
    fn random_operation(s: &mut Scheduler, rng: &mut Rng, now: Time, kinds: u64) -> bool {
        let slot = rng.below(s.len() as u64) as usize;
        match rng.below(kinds) {
            0 => s.start(slot, now),
            1 => s.stop(slot, now),
            2 => s.block(slot, now),
            3 => {
                let _ = s.wake(slot, now);
            }
            _ => return false,
        }
        true
    }

    /// Round robin's own decide leaves the scheduler exactly as the generic path does, over
    /// random mixes of starts, stops, blocks, wakes, yields and decisions.
    #[test]
    fn round_robin_decide_is_the_generic_one() {
        let mut rng = Rng::new(0x6b65_656c_0d32);
        let mut compared = 0;
        for _ in 0..300 {
            let mut fast = random_round_robin(&mut rng);
            let mut now = 0;
            for _ in 0..200 {
                now += rng.below(30);
                if !random_operation(&mut fast, &mut rng, now, 6) && rng.below(2) == 0 {
                    if let Some(running) = fast.current {
                        let _ = fast.give_away(running, now, rng.below(2) == 0);
                    }
                }
                // Not after every event: a vCPU may block and wake between two decisions.
                if rng.below(2) == 0 {
                    continue;
                }
                let mut generic = fast.clone();
                let a = fast.decide(now);
                let b = generic.decide_generic(now);
                assert_eq!(a, b, "at {now}");
                assert_eq!(
                    std::format!("{fast:?}"),
                    std::format!("{generic:?}"),
                    "at {now}"
                );
                compared += 1;
            }
        }
        assert!(compared > 25_000, "{compared} decisions compared");
    }

    /// Round robin's own give-away leaves the scheduler exactly as the generic path does, over
    /// random mixes of starts, stops, blocks, wakes, yields and decisions.
    #[test]
    fn round_robin_give_away_is_the_generic_one() {
        let mut rng = Rng::new(0x6b65_656c_0a77);
        let mut compared = 0;
        for _ in 0..300 {
            let mut fast = random_round_robin(&mut rng);
            let mut now = 0;
            for _ in 0..200 {
                now += rng.below(30);
                if !random_operation(&mut fast, &mut rng, now, 5) {
                    let _ = fast.decide(now);
                }
                let Some(running) = fast.current else {
                    continue;
                };
                let requeue = rng.below(2) == 0;
                let mut generic = fast.clone();
                let a = fast.give_away(running, now, requeue);
                let b = generic.give_away_generic(running, now, requeue);
                assert_eq!(a, b, "at {now}");
                assert_eq!(
                    std::format!("{fast:?}"),
                    std::format!("{generic:?}"),
                    "at {now}"
                );
                assert!(fast.queue_is_consistent());
                compared += 1;
            }
        }
        assert!(compared > 10_000, "{compared} give-aways compared");
    }

    /// A wake whose decision only times the quantum ([`Scheduler::arm_quantum`]) leaves the
    /// scheduler exactly as the decision would, over random mixes of operations.
    #[test]
    fn arming_the_quantum_is_the_decision() {
        let mut rng = Rng::new(0x6b65_656c_0a4d);
        let (mut armed, mut declined) = (0, 0);
        for _ in 0..1_000 {
            let mut fast = random_round_robin(&mut rng);
            let mut now = 0;
            for _ in 0..200 {
                now += rng.below(30);
                let slot = rng.below(fast.len() as u64) as usize;
                match rng.below(5) {
                    0 => fast.start(slot, now),
                    1 => fast.stop(slot, now),
                    2 => fast.block(slot, now),
                    _ => {
                        if !fast.wake(slot, now) {
                            continue;
                        }
                        let mut decided = fast.clone();
                        let decision = decided.decide(now);
                        match fast.arm_quantum(now) {
                            Some(until) => {
                                assert_eq!(
                                    decision,
                                    Decision {
                                        run: fast.current,
                                        until: Some(until)
                                    }
                                );
                                assert_eq!(std::format!("{fast:?}"), std::format!("{decided:?}"));
                                armed += 1;
                            }
                            None => {
                                fast = decided;
                                declined += 1;
                            }
                        }
                        continue;
                    }
                }
                let _ = fast.decide(now);
            }
        }
        assert!(
            armed > 1_000 && declined > 1_000,
            "{armed} armed, {declined} declined"
        );
    }

    /// The one-pass pick agrees with the policy's rank (the first minimum, as `min_by_key`
    /// gives it) and with the round-robin peer test, over random slot states.
    #[test]
    fn the_one_pass_pick_is_the_first_by_rank() {
        let mut rng = Rng::new(0x6b65_656c_0b35);
        for round in 0..5_000 {
            let policy = [
                Policy::RoundRobin { quantum: 10 },
                Policy::FixedPriority { quantum: 10 },
                Policy::Edf { quantum: 10 },
            ][round % 3];
            let mut scheduler = Scheduler::new(policy);
            scheduler.len = 1 + rng.below(MAX_SLOTS as u64) as usize;
            for slot in &mut scheduler.slots.0[..scheduler.len] {
                *slot = Slot {
                    present: true,
                    started: rng.below(4) != 0,
                    blocked: rng.below(4) == 0,
                    priority: rng.below(3) as u8,
                    ticket: rng.below(6),
                    deadline: rng.below(6),
                    budget: rng.below(3),
                    reservation: (policy != Policy::RoundRobin { quantum: 10 }
                        && rng.below(2) == 0)
                        .then_some(super::super::Reservation {
                            period: 10,
                            budget: 5,
                            deadline: 10,
                        }),
                    ..Slot::EMPTY
                };
            }
            // Round robin's queue as the operations would have built it: the runnable slots
            // by ticket (tickets are unique there).
            let mut order: std::vec::Vec<usize> = (0..scheduler.len)
                .filter(|&slot| scheduler.slots[slot].runnable())
                .collect();
            for (i, &slot) in order.iter().enumerate() {
                scheduler.slots[slot].ticket = 100 + i as u64 * 7 % 5 + i as u64 * 10;
            }
            order.sort_by_key(|&slot| scheduler.slots[slot].ticket);
            if scheduler.is_fifo() {
                for (i, &slot) in order.iter().enumerate() {
                    scheduler.queue |= (slot as u64) << (4 * i);
                }
                scheduler.queued = order.len() as u32;
            }
            let expected = (0..scheduler.len)
                .filter(|&slot| scheduler.slots[slot].runnable())
                .min_by_key(|&slot| scheduler.rank(slot));
            let (pick, peer) = scheduler.best();
            assert_eq!(pick, expected, "round {round} {policy:?}");
            if let Some(pick) = pick {
                assert_eq!(
                    peer,
                    scheduler.peer_runnable(pick),
                    "round {round} {policy:?}"
                );
            }
        }
    }
}
