//! Simulated periodic tasks under the scheduler: budget enforcement, round robin, the switch
//! cost, and admission's verdicts checked against random task sets.

use super::sim::{hyperperiod, Report, SimTask, Simulation};
use super::*;
use crate::admission::{self, Refusal, Task};
use crate::rng::Rng;

const EDF: Policy = Policy::Edf { quantum: 10 };
const FIXED: Policy = Policy::FixedPriority { quantum: 10 };

fn task(period: Time, budget: Time, deadline: Time, work: Time, priority: u8) -> SimTask {
    SimTask {
        period,
        deadline,
        work,
        budget: Some(budget),
        priority,
    }
}

fn simulate(policy: Policy, switch_cost: Time, horizon: Time, tasks: &[SimTask]) -> Report {
    Simulation {
        policy,
        switch_cost,
        scheduler_knows_switch_cost: true,
        horizon,
    }
    .run(tasks)
    .expect("accepted")
}

#[test]
fn a_hog_is_throttled_every_period_and_the_other_vcpu_meets_every_deadline() {
    for policy in [EDF, FIXED] {
        // The hog never completes a job; the other needs 8 every 20.
        let tasks = [task(10, 3, 10, Time::MAX, 2), task(20, 8, 20, 8, 1)];
        let report = simulate(policy, 0, 200, &tasks);
        let (hog, other) = (report.tasks[0], report.tasks[1]);
        assert_eq!((other.jobs, other.deadline_misses), (11, 0), "{policy:?}");
        // 0–3 the hog, 3–10 the other, 10–13 the hog (released, earlier or equal
        // deadline, higher priority), 13–14 the other.
        assert_eq!(other.worst_response, 14, "{policy:?}");
        assert_eq!(other.scheduler.worst_response, 14);
        assert_eq!(hog.scheduler.overruns, 20, "once per period in [0, 200)");
        assert_eq!((hog.jobs, hog.deadline_misses), (21, 20));
        assert_eq!(hog.scheduler.jobs, 21);
        assert_eq!(hog.scheduler.deadline_misses, 20);
        // Per period of 20: the hog runs 3 + 3, the other 8: 6 idle.
        assert_eq!(report.idle, 60);
    }
}

#[test]
fn round_robin_interleaves_best_effort_jobs_by_quantum() {
    let job = SimTask {
        period: 100,
        deadline: 100,
        work: 30,
        budget: None,
        priority: 0,
    };
    let report = Simulation {
        policy: Policy::RoundRobin { quantum: 10 },
        switch_cost: 0,
        scheduler_knows_switch_cost: false,
        horizon: 100,
    }
    .run(&[job, job])
    .unwrap();
    let responses: Vec<_> = report.tasks.iter().map(|t| t.worst_response).collect();
    assert_eq!(responses, [50, 60]);
    assert_eq!(report.idle, 40);
    assert_eq!(report.switches, 7, "six in the first period, one at 100");
    assert_eq!(report.deadline_misses(), 0);
    assert_eq!(report.tasks[0].scheduler.jobs, 0, "best effort: no jobs");
}

#[test]
fn a_long_job_preempted_often_needs_the_scheduler_to_know_the_switch_cost() {
    // A 20 ms job preempted by a 1 ms task about twelve times: each resumption costs 10 µs.
    let switch_cost = 10;
    let tasks = [
        task(1_000, 300 + 2 * switch_cost, 1_000, 300, 0),
        task(20_000, 8_000 + 2 * switch_cost, 20_000, 8_000, 0),
    ];
    let admitted: Vec<Task> = tasks
        .iter()
        .map(|t| Task {
            period: t.period,
            budget: t.work,
            deadline: t.deadline,
        })
        .collect();
    assert_eq!(admission::edf(&admitted, switch_cost), Ok(()));
    for (knows, misses) in [(true, 0), (false, 1)] {
        let report = Simulation {
            policy: EDF,
            switch_cost,
            scheduler_knows_switch_cost: knows,
            horizon: 40_000,
        }
        .run(&tasks)
        .unwrap();
        let long = report.tasks[1];
        assert_eq!(long.deadline_misses, misses * 2, "knows: {knows}");
        assert_eq!(long.scheduler.overruns, misses * 2, "knows: {knows}");
        assert_eq!(report.tasks[0].deadline_misses, 0);
    }
}

#[test]
fn hyperperiods() {
    let t = |period| task(period, 1, period, 1, 0);
    assert_eq!(hyperperiod(&[t(4), t(6), t(10)]), Some(60));
    assert_eq!(hyperperiod(&[]), Some(1));
    assert_eq!(hyperperiod(&[t(0)]), None);
    assert_eq!(hyperperiod(&[t(u64::MAX), t(u64::MAX - 1)]), None);
}

/// Task periods, in µs: hyperperiods stay at 20 ms.
const PERIODS: [Time; 6] = [1_000, 2_000, 4_000, 5_000, 10_000, 20_000];

/// A random set of 2 to 6 tasks with total utilisation around 3/4, and a switch cost.
fn random_set(rng: &mut Rng, constrained: bool) -> (Vec<Task>, Time) {
    let switch_cost = [0, 0, 5, 20][rng.below(4) as usize];
    let n = 2 + rng.below(5);
    let tasks = (0..n)
        .map(|_| {
            let period = PERIODS[rng.below(PERIODS.len() as u64) as usize];
            let budget = 1 + rng.below(3 * period / (2 * n));
            let needed = budget + 2 * switch_cost;
            let deadline = if constrained && needed < period {
                needed + rng.below(period - needed + 1)
            } else {
                period
            };
            Task {
                period,
                budget,
                deadline,
            }
        })
        .collect();
    (tasks, switch_cost)
}

/// Outcomes over the random sets, for one policy.
#[derive(Default, Debug)]
struct Tally {
    admitted: u32,
    refused: u32,
    refused_and_missed: u32,
}

/// Simulates `tasks` (reservations with admission's budgets, each job's work its full
/// budget) under `policy` over a hyperperiod and the longest deadline, and checks the
/// verdict: admitted sets miss nothing; refused ones are refused for one of `expected`
/// reasons, and miss when the switch cost is 0 (the tests are then exact).
fn check(
    policy: Policy,
    tasks: &[Task],
    switch_cost: Time,
    verdict: Result<(), Refusal>,
    tally: &mut Tally,
) {
    let fixed = matches!(policy, Policy::FixedPriority { .. });
    let simulated: Vec<SimTask> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| SimTask {
            period: t.period,
            deadline: t.deadline,
            work: t.budget,
            budget: Some(t.budget + 2 * switch_cost),
            priority: if fixed { (tasks.len() - i) as u8 } else { 0 },
        })
        .collect();
    let horizon =
        hyperperiod(&simulated).unwrap() + tasks.iter().map(|t| t.deadline).max().unwrap();
    let simulation = Simulation {
        policy,
        switch_cost,
        scheduler_knows_switch_cost: true,
        horizon,
    };
    let context = format!("{policy:?} {tasks:?} switch cost {switch_cost}: {verdict:?}");
    let report = match simulation.run(&simulated) {
        Err(error) => {
            assert_eq!(error, SchedError::Invalid, "{context}");
            assert!(matches!(verdict, Err(Refusal::Invalid { .. })), "{context}");
            return;
        }
        Ok(report) => report,
    };
    for outcome in &report.tasks {
        assert_eq!(outcome.jobs, outcome.scheduler.jobs, "{context}");
        assert_eq!(
            outcome.deadline_misses, outcome.scheduler.deadline_misses,
            "{context}"
        );
    }
    let missed = report.deadline_misses() > 0;
    match verdict {
        Ok(()) => {
            tally.admitted += 1;
            assert!(!missed, "admitted but missed: {context}: {report:?}");
            for outcome in &report.tasks {
                assert_eq!(outcome.scheduler.overruns, 0, "{context}");
                assert_eq!(
                    outcome.worst_response, outcome.scheduler.worst_response,
                    "{context}"
                );
            }
        }
        Err(refusal) => {
            tally.refused += 1;
            let expected = if fixed {
                matches!(refusal, Refusal::ResponseTime { .. })
            } else {
                matches!(
                    refusal,
                    Refusal::Utilisation { .. } | Refusal::Demand { .. }
                )
            };
            assert!(expected, "unexpected refusal: {context}");
            if missed {
                tally.refused_and_missed += 1;
            } else {
                assert!(switch_cost > 0, "refused but met every deadline: {context}");
            }
        }
    }
}

/// Random task sets from a fixed seed, under EDF and under fixed priority (index 0
/// highest): whatever admission accepts (switch cost included) meets every deadline in
/// simulation, and the simulation agrees with the scheduler's own statistics.
#[test]
fn admitted_task_sets_meet_every_deadline_under_the_scheduler() {
    let mut rng = Rng::new(0x5c4e_d01e);
    let (mut edf, mut fixed) = (Tally::default(), Tally::default());
    for round in 0..400 {
        let (tasks, switch_cost) = random_set(&mut rng, round % 2 == 1);
        check(
            EDF,
            &tasks,
            switch_cost,
            admission::edf(&tasks, switch_cost),
            &mut edf,
        );
        check(
            FIXED,
            &tasks,
            switch_cost,
            admission::fixed_priority(&tasks, switch_cost),
            &mut fixed,
        );
    }
    for (name, tally) in [("EDF", &edf), ("fixed priority", &fixed)] {
        println!("{name}: {tally:?}");
        assert!(
            tally.admitted >= 60 && tally.refused >= 60 && tally.refused_and_missed >= 40,
            "{name}: {tally:?}"
        );
    }
}
