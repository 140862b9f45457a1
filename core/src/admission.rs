//! Schedulability tests for real-time vCPUs (and later tasks) sharing one pCPU: the same
//! code for the configuration compiler and for admission at run time.
//!
//! A task is (period T, budget C, relative deadline D ≤ T), released periodically. Keel's own
//! cost of switching vCPUs, `s`, is charged twice per job (dispatching it, and resuming the
//! job it preempted): each job is tested with budget C + 2s.
//!
//! - EDF, implicit deadlines (D = T): utilisation Σ C/T ≤ 1 (Liu and Layland 1973).
//! - EDF, constrained deadlines: the processor-demand criterion, dbf(L) ≤ L at every absolute
//!   deadline L up to the synchronous busy-period bound (Baruah, Rosier and Howell 1990).
//! - Fixed priority (index 0 highest): response-time analysis, R ≤ D for each task (Joseph
//!   and Pandya 1986; Audsley et al. 1993).
//!
//! All arithmetic is in integers (durations in any unit, e.g. nanoseconds): a set is admitted
//! only if it provably fits.

/// One periodic real-time task or vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Task {
    /// Release period.
    pub period: u64,
    /// Execution budget per period.
    pub budget: u64,
    /// Relative deadline (at most the period).
    pub deadline: u64,
}

/// A task's utilisation with the switch cost, (C + 2s) / T, in parts per million rounded up.
pub fn utilisation_ppm(task: &Task, switch_cost: u64) -> u64 {
    let budget = u128::from(task.budget) + 2 * u128::from(switch_cost);
    (budget * 1_000_000)
        .div_ceil(u128::from(task.period.max(1)))
        .min(u128::from(u64::MAX)) as u64
}

/// Why a set is refused, with the figures a message shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Task `task` has a zero budget, a budget above its deadline, or a deadline above its
    /// period (with the switch cost included in the budget).
    Invalid {
        /// Index of the task.
        task: usize,
    },
    /// EDF utilisation above one, in parts per million (each task's share, for a message
    /// that lists them, is [`utilisation_ppm`]).
    Utilisation {
        /// Σ (C + 2s) / T, ppm, each share rounded up.
        total_ppm: u64,
    },
    /// EDF demand above the time available at an absolute deadline.
    Demand {
        /// The instant L (from a synchronous release).
        at: u64,
        /// The processor demand dbf(L).
        demand: u64,
    },
    /// Fixed priority: task `task`'s worst response time exceeds its deadline.
    ResponseTime {
        /// Index of the task.
        task: usize,
        /// Its worst-case response time (or the first value found above its deadline).
        response: u64,
        /// Its deadline.
        deadline: u64,
    },
    /// More tasks than [`MAX_TASKS`], or checking would take too long (more than
    /// [`MAX_CHECK_POINTS`] deadlines): refused rather than guessed.
    TooComplex,
}

impl crate::text::Show for Refusal {
    fn show(&self, out: &mut dyn crate::text::Out) {
        use crate::text::Decimal;
        let two_places = |ppm: u64| (ppm / 1_000_000, (ppm % 1_000_000) / 10_000);
        match *self {
            Refusal::Invalid { task } => crate::text!(
                out,
                "task ",
                task,
                ": budget (with the switch cost) must be above 0 and within its deadline, and the deadline within the period"
            ),
            Refusal::Utilisation { total_ppm } => {
                let (units, hundredths) = two_places(total_ppm);
                crate::text!(out, "EDF utilisation ", units, ".", Decimal(hundredths, 2), " > 1")
            }
            Refusal::Demand { at, demand } => {
                crate::text!(out, "EDF demand ", demand, " > ", at, " available by time ", at)
            }
            Refusal::ResponseTime {
                task,
                response,
                deadline,
            } => crate::text!(
                out,
                "task ",
                task,
                ": worst response time ",
                response,
                " > deadline ",
                deadline
            ),
            Refusal::TooComplex => out.put("too many tasks or deadlines to check"),
        }
    }
}

impl core::fmt::Display for Refusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        crate::text::fmt(self, f)
    }
}

/// Most tasks on one pCPU.
pub const MAX_TASKS: usize = 64;
/// Most absolute deadlines the demand test examines (the configuration compiler's limit).
pub const MAX_CHECK_POINTS: u64 = 1_000_000;

/// How much work a test may do before it refuses a set as [`Refusal::TooComplex`]: refusing
/// is always safe, and at run time (a guest's task create) the work must stay short, since
/// Keel runs it with interrupts masked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most absolute deadlines the EDF processor-demand test examines.
    pub check_points: u64,
    /// Most fixed-point iterations of one task's response-time analysis.
    pub iterations: u64,
    /// Whether EDF utilisation is decided exactly when it lies within rounding of one (in
    /// [`UTILISATION_SHIFT`]-bit fixed point); otherwise such a set is refused as
    /// [`Refusal::TooComplex`] without the rational arithmetic, whose cost depends on the
    /// periods.
    pub exact_utilisation: bool,
}

impl Limits {
    /// The configuration compiler's: exhaustive within reason.
    pub const BUILD: Limits = Limits {
        check_points: MAX_CHECK_POINTS,
        iterations: MAX_CHECK_POINTS,
        exact_utilisation: true,
    };
    /// Admission at run time: a few thousand instructions at most (sets that need more are
    /// refused as not schedulable).
    pub const RUN_TIME: Limits = Limits {
        check_points: 32,
        iterations: 16,
        exact_utilisation: false,
    };
}

/// Tasks a run-time admission gives at most (a shared pCPU's slots and the new one): their
/// inflated copy fits a buffer of this size on the stack.
const FEW_TASKS: usize = 16;

/// Runs `test` on `tasks` with the switch cost added to each budget (twice: a switch in and
/// one out per job); refuses invalid ones. The copy lives in a buffer just large enough for a
/// run-time admission when it fits: at [`MAX_TASKS`] it was 1.5 KB to fill and to return by
/// value, about a third of a task create's interrupts-masked stretch.
fn with_inflated(
    tasks: &[Task],
    switch_cost: u64,
    test: impl FnOnce(&[Task]) -> Result<(), Refusal>,
) -> Result<(), Refusal> {
    const EMPTY: Task = Task {
        period: 1,
        budget: 0,
        deadline: 1,
    };
    if tasks.len() <= FEW_TASKS {
        let mut buffer = [EMPTY; FEW_TASKS];
        test(inflate_into(tasks, switch_cost, &mut buffer)?)
    } else if tasks.len() <= MAX_TASKS {
        let mut buffer = [EMPTY; MAX_TASKS];
        test(inflate_into(tasks, switch_cost, &mut buffer)?)
    } else {
        Err(Refusal::TooComplex)
    }
}

/// Writes `tasks` inflated by the switch cost into the start of `out` (at least as long) and
/// returns that part.
fn inflate_into<'a>(
    tasks: &[Task],
    switch_cost: u64,
    out: &'a mut [Task],
) -> Result<&'a [Task], Refusal> {
    let out = out.get_mut(..tasks.len()).ok_or(Refusal::TooComplex)?;
    for (i, (task, inflated)) in tasks.iter().zip(out.iter_mut()).enumerate() {
        let budget = task.budget.saturating_add(switch_cost.saturating_mul(2));
        if task.budget == 0 || task.deadline > task.period || budget > task.deadline {
            return Err(Refusal::Invalid { task: i });
        }
        *inflated = Task { budget, ..*task };
    }
    Ok(out)
}

/// EDF: whether `tasks` meet every deadline on one pCPU with `switch_cost` per switch.
pub fn edf(tasks: &[Task], switch_cost: u64) -> Result<(), Refusal> {
    edf_within(tasks, switch_cost, Limits::BUILD)
}

/// The fixed point of [`utilisation_bounds`]: one is `1 << UTILISATION_SHIFT`. A budget below
/// 2^34 (17 s in nanoseconds) shifted by it fits in 63 bits, so each share is one 64-bit
/// division.
pub const UTILISATION_SHIFT: u32 = 29;

/// Σ C/T in [`UTILISATION_SHIFT`]-bit fixed point, each share rounded down and up: the true
/// sum lies between the two, and equals them only if every share is exact. None if a budget is
/// too large for the 64-bit form. Budgets must be within their periods (as [`inflate_into`]
/// leaves them), so the sums cannot overflow.
fn utilisation_bounds(tasks: &[Task]) -> Option<(u64, u64)> {
    let (mut low, mut high) = (0u64, 0u64);
    for task in tasks {
        if task.budget >> (63 - UTILISATION_SHIFT) != 0 {
            return None;
        }
        let scaled = task.budget << UTILISATION_SHIFT;
        low += scaled / task.period;
        high += scaled.div_ceil(task.period);
    }
    Some((low, high))
}

/// Σ C/T compared with one exactly, in reduced fractions: `Ordering` of the sum against one,
/// or None if the fractions outgrow 128 bits.
fn utilisation_exact(tasks: &[Task]) -> Option<core::cmp::Ordering> {
    // Σ C/T ≤ 1  ⇔  Σ C·(P/T) ≤ P with P the product would overflow, so compare in u128
    // fractions one task at a time: keep the sum as num / den.
    let (mut num, mut den) = (0u128, 1u128);
    for task in tasks {
        let (c, t) = (u128::from(task.budget), u128::from(task.period));
        let g = gcd(den, t);
        let new_den = (den / g).checked_mul(t)?;
        let new_num = num
            .checked_mul(new_den / den)
            .and_then(|a| c.checked_mul(new_den / t).and_then(|b| a.checked_add(b)))?;
        let g = gcd(new_num, new_den).max(1);
        (num, den) = (new_num / g, new_den / g);
    }
    Some(num.cmp(&den))
}

/// [`edf`] doing at most the work `limits` allow.
pub fn edf_within(tasks: &[Task], switch_cost: u64, limits: Limits) -> Result<(), Refusal> {
    with_inflated(tasks, switch_cost, |tasks| edf_inflated(tasks, limits))
}

/// [`edf_within`] on tasks already inflated by the switch cost.
#[inline(never)]
fn edf_inflated(tasks: &[Task], limits: Limits) -> Result<(), Refusal> {
    use core::cmp::Ordering;
    let one = 1u64 << UTILISATION_SHIFT;
    // Decided in fixed point unless the sum lies within rounding of one.
    let fixed = match utilisation_bounds(tasks) {
        // An inexact share makes the true sum lie strictly between the two.
        Some((low, high)) if high < one || (high == one && low < high) => Some(Ordering::Less),
        Some((low, high)) if low == one && high == one => Some(Ordering::Equal),
        Some((low, high)) if low > one || (low == one && high > low) => Some(Ordering::Greater),
        _ => None,
    };
    let utilisation = match fixed {
        Some(order) => order,
        None if limits.exact_utilisation => utilisation_exact(tasks).ok_or(Refusal::TooComplex)?,
        None => return Err(Refusal::TooComplex),
    };
    if utilisation == Ordering::Greater {
        return Err(Refusal::Utilisation {
            total_ppm: tasks.iter().map(|t| utilisation_ppm(t, 0)).sum(),
        });
    }
    if tasks.iter().all(|t| t.deadline == t.period) {
        return Ok(());
    }
    demand_test(tasks, utilisation == Ordering::Equal, limits.check_points)
}

/// The processor-demand criterion for constrained deadlines (utilisation already ≤ 1, `full`
/// if exactly one).
fn demand_test(tasks: &[Task], full: bool, max_points: u64) -> Result<(), Refusal> {
    // Busy-period bound: the hyperperiod (+ the largest deadline) when U = 1, else
    // max(D_max, Σ (T−D)·U / (1−U)) (the La bound), and never beyond the hyperperiod bound.
    let d_max = tasks.iter().map(|t| t.deadline).max().unwrap_or(0);
    let mut hyperperiod = 1u64;
    for task in tasks {
        hyperperiod = (hyperperiod / gcd(hyperperiod, task.period))
            .checked_mul(task.period)
            .ok_or(Refusal::TooComplex)?;
    }
    let mut bound = hyperperiod.saturating_add(d_max);
    if !full {
        // La = Σ (T−D)·C/T / (1 − Σ C/T), computed as Σ(T−D)·C·P/T / (P − Σ C·P/T)
        // with P = hyperperiod (exact: every T divides P).
        let p = u128::from(hyperperiod);
        let used: u128 = tasks
            .iter()
            .map(|t| u128::from(t.budget) * u128::from(hyperperiod / t.period))
            .sum();
        let slack: u128 = tasks
            .iter()
            .map(|t| {
                u128::from(t.period - t.deadline)
                    * u128::from(t.budget)
                    * u128::from(hyperperiod / t.period)
            })
            .sum();
        if p > used {
            let la = slack.div_ceil(p - used);
            bound = bound.min(la.max(u128::from(d_max)).min(u128::from(u64::MAX)) as u64);
        }
    }
    // Every absolute deadline k·T + D ≤ bound, in increasing order (merge by repeated min),
    // with the demand kept as it grows: each deadline reached adds its task's budget.
    let mut next: [u64; MAX_TASKS] = [u64::MAX; MAX_TASKS];
    for (i, task) in tasks.iter().enumerate() {
        next[i] = task.deadline;
    }
    let next = &mut next[..tasks.len()];
    let mut demand = 0u128;
    let mut checked = 0;
    loop {
        let at = next.iter().copied().min().unwrap_or(u64::MAX);
        if at > bound {
            return Ok(());
        }
        checked += 1;
        if checked > max_points {
            return Err(Refusal::TooComplex);
        }
        for (i, task) in tasks.iter().enumerate() {
            if next[i] == at {
                demand += u128::from(task.budget);
                next[i] = next[i].saturating_add(task.period);
            }
        }
        if demand > u128::from(at) {
            return Err(Refusal::Demand {
                at,
                demand: demand.min(u128::from(u64::MAX)) as u64,
            });
        }
    }
}

/// Fixed priority (index 0 highest): whether every task's worst response time is within its
/// deadline, with `switch_cost` per switch.
pub fn fixed_priority(tasks: &[Task], switch_cost: u64) -> Result<(), Refusal> {
    fixed_priority_within(tasks, switch_cost, Limits::BUILD)
}

/// [`fixed_priority`] doing at most the work `limits` allow.
pub fn fixed_priority_within(
    tasks: &[Task],
    switch_cost: u64,
    limits: Limits,
) -> Result<(), Refusal> {
    with_inflated(tasks, switch_cost, |tasks| {
        fixed_priority_inflated(tasks, limits)
    })
}

/// [`fixed_priority_within`] on tasks already inflated by the switch cost.
#[inline(never)]
fn fixed_priority_inflated(tasks: &[Task], limits: Limits) -> Result<(), Refusal> {
    for (i, task) in tasks.iter().enumerate() {
        let mut response = task.budget;
        let mut iterations = 0;
        loop {
            iterations += 1;
            if iterations > limits.iterations {
                return Err(Refusal::TooComplex);
            }
            let interference: u128 = tasks[..i]
                .iter()
                .map(|h| u128::from(response.div_ceil(h.period)) * u128::from(h.budget))
                .sum();
            let next = u128::from(task.budget) + interference;
            if next > u128::from(task.deadline) {
                return Err(Refusal::ResponseTime {
                    task: i,
                    response: next.min(u128::from(u64::MAX)) as u64,
                    deadline: task.deadline,
                });
            }
            if next as u64 == response {
                break;
            }
            response = next as u64;
        }
    }
    Ok(())
}

fn gcd<T: Copy + PartialEq + Default + core::ops::Rem<Output = T>>(mut a: T, mut b: T) -> T {
    while b != T::default() {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn task(period: u64, budget: u64, deadline: u64) -> Task {
        Task {
            period,
            budget,
            deadline,
        }
    }

    #[test]
    fn utilisation_exactly_one_is_admitted_above_is_not() {
        assert_eq!(edf(&[task(10, 5, 10), task(20, 10, 20)], 0), Ok(()));
        assert_eq!(
            edf(&[task(10, 10, 10)], 0),
            Ok(()),
            "budget equal to the period"
        );
        let refusal = edf(&[task(10, 3, 10), task(4, 3, 4)], 0).unwrap_err();
        assert_eq!(refusal.to_string(), "EDF utilisation 1.05 > 1");
        assert_eq!(utilisation_ppm(&task(10, 3, 10), 0), 300_000);
        assert_eq!(utilisation_ppm(&task(3, 1, 3), 0), 333_334, "rounded up");
    }

    /// Sets beyond the run-time buffer are inflated in the large one, up to MAX_TASKS.
    #[test]
    fn sets_of_every_size_are_inflated() {
        for n in [1, FEW_TASKS, FEW_TASKS + 1, MAX_TASKS] {
            let n64 = n as u64;
            let exact = vec![task(n64 * 10, 8, n64 * 10); n];
            assert_eq!(edf(&exact, 1), Ok(()), "{n} tasks at U = 1");
            if n > 1 {
                let over = vec![task(n64 * 10, 9, n64 * 10); n];
                assert!(
                    matches!(edf(&over, 1), Err(Refusal::Utilisation { .. })),
                    "{n} tasks above U = 1"
                );
            }
            let mut invalid = exact.clone();
            invalid[n - 1].budget = 0;
            assert_eq!(edf(&invalid, 1), Err(Refusal::Invalid { task: n - 1 }));
            assert_eq!(
                fixed_priority(&invalid, 1),
                Err(Refusal::Invalid { task: n - 1 })
            );
        }
        let too_many = vec![task(1000, 1, 1000); MAX_TASKS + 1];
        assert_eq!(edf(&too_many, 0), Err(Refusal::TooComplex));
        assert_eq!(fixed_priority(&too_many, 0), Err(Refusal::TooComplex));
    }

    #[test]
    fn the_switch_cost_is_charged_twice_per_job() {
        assert_eq!(edf(&[task(10, 3, 10), task(10, 3, 10)], 1), Ok(()));
        assert!(matches!(
            edf(&[task(10, 3, 10), task(10, 3, 10)], 2),
            Err(Refusal::Utilisation { .. })
        ));
    }

    #[test]
    fn invalid_parameters_are_refused() {
        assert_eq!(
            edf(&[task(10, 0, 10)], 0),
            Err(Refusal::Invalid { task: 0 })
        );
        assert_eq!(
            edf(&[task(10, 2, 10), task(10, 5, 4)], 0),
            Err(Refusal::Invalid { task: 1 })
        );
        assert_eq!(
            fixed_priority(&[task(10, 3, 12)], 0),
            Err(Refusal::Invalid { task: 0 })
        );
    }

    #[test]
    fn constrained_deadlines_need_the_demand_test() {
        // U = 0.6 but both jobs due by time 3 need 4 units.
        assert_eq!(
            edf(&[task(10, 2, 3), task(10, 2, 3)], 0),
            Err(Refusal::Demand { at: 3, demand: 4 })
        );
        assert_eq!(edf(&[task(10, 2, 4), task(10, 2, 4)], 0), Ok(()));
    }

    #[test]
    fn response_time_analysis() {
        // The textbook set: (T, C) = (7, 3), (12, 3), (20, 5): R = 3, 6, 20.
        let set = [task(7, 3, 7), task(12, 3, 12), task(20, 5, 20)];
        assert_eq!(fixed_priority(&set, 0), Ok(()));
        let tight = [task(7, 3, 7), task(12, 3, 12), task(20, 5, 19)];
        assert_eq!(
            fixed_priority(&tight, 0),
            Err(Refusal::ResponseTime {
                task: 2,
                response: 20,
                deadline: 19
            })
        );
    }

    /// Which job runs: EDF (earliest absolute deadline) or fixed priority (lowest index).
    #[derive(Clone, Copy)]
    enum Policy {
        Edf,
        FixedPriority,
    }

    /// Simulates a synchronous release of `tasks` tick by tick over `horizon`, charging
    /// `switch_cost` ticks whenever the CPU turns to a job other than the one it ran last.
    /// Returns whether a deadline was missed.
    fn misses(tasks: &[Task], switch_cost: u64, policy: Policy, horizon: u64) -> bool {
        // Per task: remaining work of its current job, its absolute deadline.
        let mut remaining = vec![0u64; tasks.len()];
        let mut deadline = vec![0u64; tasks.len()];
        let mut last: Option<usize> = None;
        let mut switching = 0u64;
        let mut target: Option<usize> = None;
        for t in 0..horizon {
            for (i, task) in tasks.iter().enumerate() {
                if t % task.period == 0 {
                    if remaining[i] > 0 {
                        return true;
                    }
                    remaining[i] = task.budget;
                    deadline[i] = t + task.deadline;
                }
                if remaining[i] > 0 && t >= deadline[i] {
                    return true;
                }
            }
            let ready = (0..tasks.len()).filter(|&i| remaining[i] > 0);
            let chosen = match policy {
                Policy::Edf => ready.min_by_key(|&i| (deadline[i], i)),
                Policy::FixedPriority => ready.min(),
            };
            let Some(job) = chosen else {
                continue;
            };
            if target != Some(job) {
                target = Some(job);
                switching = if last == Some(job) { 0 } else { switch_cost };
            }
            if switching > 0 {
                switching -= 1;
                continue;
            }
            remaining[job] -= 1;
            last = Some(job);
        }
        false
    }

    fn random_set(rng: &mut Rng, constrained: bool) -> Vec<Task> {
        const PERIODS: [u64; 8] = [4, 5, 6, 8, 10, 12, 15, 20];
        let n = 2 + rng.below(3) as usize;
        (0..n)
            .map(|_| {
                let period = PERIODS[rng.below(8) as usize] * 2;
                let budget = 1 + rng.below(period / 2);
                let deadline = if constrained {
                    budget + rng.below(period - budget + 1)
                } else {
                    period
                };
                task(period, budget, deadline)
            })
            .collect()
    }

    /// Random task sets from a fixed seed: whatever admission accepts never misses a deadline
    /// in simulation over the hyperperiod (switch cost included); without switch cost the
    /// tests are exact, so whatever they refuse does miss.
    #[test]
    fn run_time_refuses_only_what_fixed_point_cannot_decide() {
        // Exactly one with shares of a third: the rational test admits it; at run time the
        // fixed point cannot tell it from just above one, so it is refused as too complex.
        let thirds = [task(3_000, 1_000, 3_000), task(3_000, 2_000, 3_000)];
        assert_eq!(edf_within(&thirds, 0, Limits::BUILD), Ok(()));
        assert_eq!(
            edf_within(&thirds, 0, Limits::RUN_TIME),
            Err(Refusal::TooComplex)
        );
        // Exactly one in binary fractions, below and above one: decided at run time too.
        let halves = [task(10, 5, 10), task(20, 10, 20)];
        assert_eq!(edf_within(&halves, 0, Limits::RUN_TIME), Ok(()));
        let below = [task(3_000, 1_000, 3_000), task(3_000, 1_999, 3_000)];
        assert_eq!(edf_within(&below, 0, Limits::RUN_TIME), Ok(()));
        let above = [task(3_000, 1_000, 3_000), task(3_000, 2_001, 3_000)];
        assert!(matches!(
            edf_within(&above, 0, Limits::RUN_TIME),
            Err(Refusal::Utilisation { .. })
        ));
    }

    #[test]
    fn fixed_point_utilisation_agrees_with_the_rational_sum() {
        use core::cmp::Ordering;
        let mut rng = Rng::new(0x7574_696c);
        let mut decided = 0;
        for round in 0..20_000 {
            // Up to 4 tasks of any period from 10 us to 1 s in ns (their fractions fit in 128
            // bits), or up to 8 whose periods are multiples of each other.
            let n = 1 + rng.below(if round % 2 == 0 { 4 } else { 8 }) as usize;
            let set: Vec<Task> = (0..n)
                .map(|_| {
                    let period = if round % 2 == 0 {
                        10_000 + rng.below(1 << 30)
                    } else {
                        [1_000_000, 3_000_000, 5_000_000, 7_000_000][rng.below(4) as usize]
                    };
                    let budget = 1 + rng.below(period / n as u64);
                    task(period, budget, period)
                })
                .collect();
            let exact = utilisation_exact(&set).expect("these sets fit in 128-bit fractions");
            let (low, high) = utilisation_bounds(&set).unwrap();
            let one = 1 << UTILISATION_SHIFT;
            assert!(low <= high && high - low <= n as u64);
            match edf_within(&set, 0, Limits::RUN_TIME) {
                Ok(()) => {
                    decided += 1;
                    assert_ne!(exact, Ordering::Greater, "{set:?}");
                }
                Err(Refusal::Utilisation { .. }) => {
                    decided += 1;
                    assert_eq!(exact, Ordering::Greater, "{set:?}");
                }
                Err(Refusal::TooComplex) => {
                    assert!(
                        low <= one && high >= one,
                        "refused though decidable: {set:?}"
                    )
                }
                Err(other) => panic!("{other:?} for {set:?}"),
            }
        }
        assert!(decided > 19_000, "only {decided} decided in fixed point");
    }

    #[test]
    fn admitted_sets_meet_every_deadline_in_simulation() {
        let mut rng = Rng::new(0x6b65_656c);
        let (mut admitted, mut refused) = (0, 0);
        for round in 0..3000 {
            let constrained = round % 2 == 1;
            let set = random_set(&mut rng, constrained);
            let switch_cost = rng.below(3);
            let horizon = 2 * 120 * 2 + 40;
            for (policy, verdict) in [
                (Policy::Edf, edf(&set, switch_cost)),
                (Policy::FixedPriority, fixed_priority(&set, switch_cost)),
            ] {
                let missed = misses(&set, switch_cost, policy, horizon);
                match verdict {
                    Ok(()) => {
                        admitted += 1;
                        assert!(
                            !missed,
                            "admitted but missed: {set:?}, switch cost {switch_cost}"
                        );
                    }
                    Err(Refusal::Invalid { .. }) => {}
                    Err(reason) => {
                        refused += 1;
                        if switch_cost == 0 {
                            assert!(missed, "refused ({reason}) but met every deadline: {set:?}");
                        }
                    }
                }
            }
        }
        assert!(
            admitted > 500 && refused > 500,
            "{admitted} admitted, {refused} refused"
        );
    }
}
