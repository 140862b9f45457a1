//! Host tests of each policy, driven event by event with explicit times.

use super::*;

const QUANTUM: Time = 10;

fn reservation(period: Time, budget: Time, deadline: Time) -> Option<Reservation> {
    Some(Reservation {
        period,
        budget,
        deadline,
    })
}

/// A real-time vCPU (EDF) or one with a budget (fixed priority, `priority`).
fn reserved(priority: u8, period: Time, budget: Time, deadline: Time) -> Params {
    Params {
        priority,
        reservation: reservation(period, budget, deadline),
    }
}

fn best_effort(priority: u8) -> Params {
    Params {
        priority,
        reservation: None,
    }
}

/// A scheduler with `params` added and started at 0.
fn started(policy: Policy, params: &[Params]) -> Scheduler {
    let mut scheduler = Scheduler::new(policy);
    for (i, p) in params.iter().enumerate() {
        assert_eq!(scheduler.add(*p), Ok(i));
    }
    for slot in 0..params.len() {
        scheduler.start(slot, 0);
    }
    scheduler
}

fn decision(run: Option<usize>, until: Option<Time>) -> Decision {
    Decision { run, until }
}

const EDF: Policy = Policy::Edf { quantum: QUANTUM };
const FIXED: Policy = Policy::FixedPriority { quantum: QUANTUM };
const ROUND_ROBIN: Policy = Policy::RoundRobin { quantum: QUANTUM };

#[test]
fn a_static_scheduler_is_empty_and_idle() {
    static SCHEDULER: Scheduler = Scheduler::new(Policy::Pinned);
    assert!(SCHEDULER.is_empty());
    assert_eq!(SCHEDULER.len(), 0);
    assert_eq!(SCHEDULER.current(), None);
    assert_eq!(SCHEDULER.policy(), Policy::Pinned);
    let mut scheduler = SCHEDULER.clone();
    assert_eq!(scheduler.decide(5), decision(None, None));
}

#[test]
fn pinned_takes_one_vcpu_and_never_sets_a_timer() {
    let mut scheduler = Scheduler::new(Policy::Pinned);
    assert_eq!(scheduler.add(reserved(3, 10, 5, 10)), Ok(0), "ignored");
    assert_eq!(scheduler.add(best_effort(0)), Err(SchedError::Full));
    assert_eq!(scheduler.decide(0), decision(None, None), "not started");
    scheduler.start(0, 1);
    assert_eq!(scheduler.decide(1), decision(Some(0), None));
    assert_eq!(scheduler.decide(1_000), decision(Some(0), None));
    scheduler.block(0, 1_001);
    assert!(!scheduler.is_runnable(0));
    assert_eq!(scheduler.decide(1_001), decision(None, None));
    assert!(scheduler.wake(0, 1_002), "the pCPU is idle");
    assert_eq!(scheduler.decide(1_002), decision(Some(0), None));
    scheduler.stop(0, 1_003);
    assert!(!scheduler.wake(0, 1_004), "stopped");
    assert_eq!(scheduler.decide(1_004), decision(None, None));
    let stats = scheduler.stats(0);
    assert_eq!((stats.jobs, stats.dispatches), (0, 2));
}

#[test]
fn invalid_parameters_and_a_full_pcpu_are_refused() {
    let mut round_robin = Scheduler::new(ROUND_ROBIN);
    assert_eq!(
        round_robin.add(reserved(0, 10, 5, 10)),
        Err(SchedError::Invalid)
    );
    let mut edf = Scheduler::new(EDF);
    for bad in [(10, 0, 10), (10, 6, 5), (10, 5, 11), (0, 0, 0)] {
        assert_eq!(
            edf.add(reserved(0, bad.0, bad.1, bad.2)),
            Err(SchedError::Invalid),
            "{bad:?}"
        );
    }
    assert_eq!(edf.add(reserved(0, 10, 10, 10)), Ok(0), "budget = period");
    for slot in 1..MAX_SLOTS {
        assert_eq!(edf.add(best_effort(0)), Ok(slot));
    }
    assert_eq!(edf.add(best_effort(0)), Err(SchedError::Full));
    assert_eq!(
        SchedError::Full.to_string(),
        "no room for another vCPU on this pCPU"
    );
    assert!(SchedError::Invalid
        .to_string()
        .contains("budget ≤ deadline"));
}

#[test]
fn slots_out_of_range_and_time_going_backwards_never_panic() {
    let mut scheduler = started(EDF, &[reserved(0, 10, 4, 10)]);
    for slot in [1, MAX_SLOTS, usize::MAX] {
        scheduler.start(slot, 0);
        scheduler.block(slot, 0);
        scheduler.stop(slot, 0);
        assert!(!scheduler.wake(slot, 0));
        assert!(!scheduler.is_runnable(slot));
        assert_eq!(scheduler.stats(slot), Stats::default());
    }
    assert_eq!(scheduler.decide(3), decision(Some(0), Some(7)));
    // Earlier than 3: taken as 3, nothing charged.
    assert_eq!(scheduler.decide(1), decision(Some(0), Some(7)));
    // Far later: every missed period counted, a job released, no overflow.
    assert_eq!(scheduler.decide(u64::MAX - 5).run, Some(0));
    let stats = scheduler.stats(0);
    assert_eq!(stats.jobs, (u64::MAX - 5) / 10 + 1);
    assert_eq!(stats.deadline_misses, stats.jobs - 1);
}

#[test]
fn round_robin_rotates_at_each_quantum_end() {
    let mut scheduler = started(ROUND_ROBIN, &[best_effort(0); 3]);
    assert_eq!(scheduler.decide(0), decision(Some(0), Some(10)));
    assert_eq!(
        scheduler.decide(4),
        decision(Some(0), Some(10)),
        "mid-quantum"
    );
    assert_eq!(scheduler.decide(10), decision(Some(1), Some(20)));
    assert_eq!(scheduler.decide(20), decision(Some(2), Some(30)));
    assert_eq!(scheduler.decide(31), decision(Some(0), Some(41)), "late");
    assert_eq!(scheduler.current(), Some(0));
    assert_eq!(scheduler.stats(0).dispatches, 2);
    assert_eq!(scheduler.stats(1).dispatches, 1);
}

#[test]
fn round_robin_sets_no_quantum_timer_for_a_single_runnable_vcpu() {
    let mut scheduler = started(ROUND_ROBIN, &[best_effort(0); 2]);
    scheduler.block(1, 0);
    assert_eq!(scheduler.decide(0), decision(Some(0), None));
    assert_eq!(scheduler.decide(25), decision(Some(0), None));
    // A peer wakes while no timer is armed: decide now, to arm one. The running vCPU's
    // quantum restarted at 25 (the first decide after its end): it keeps the pCPU until 35.
    assert!(scheduler.wake(1, 27));
    assert_eq!(scheduler.decide(27), decision(Some(0), Some(35)));
    assert!(!scheduler.wake(1, 28), "already runnable");
    assert_eq!(scheduler.decide(35), decision(Some(1), Some(45)));
    assert_eq!(scheduler.decide(45), decision(Some(0), Some(55)));
}

#[test]
fn round_robin_block_loses_the_quantum_and_a_woken_vcpu_joins_the_back() {
    let mut scheduler = started(ROUND_ROBIN, &[best_effort(0); 3]);
    assert_eq!(scheduler.decide(0), decision(Some(0), Some(10)));
    scheduler.block(0, 3);
    assert_eq!(scheduler.decide(3), decision(Some(1), Some(13)));
    assert!(!scheduler.wake(0, 5), "a quantum timer is armed");
    assert_eq!(scheduler.decide(13), decision(Some(2), Some(23)));
    assert_eq!(scheduler.decide(23), decision(Some(0), Some(33)));
    // Yield (block then wake at once): behind the others, a fresh quantum when its turn comes.
    scheduler.block(0, 25);
    scheduler.wake(0, 25);
    assert_eq!(scheduler.decide(25), decision(Some(1), Some(35)));
}

#[test]
fn idle_pcpu_waits_for_the_earliest_release_of_a_blocked_vcpu() {
    let mut scheduler = started(
        EDF,
        &[
            reserved(0, 50, 5, 50),
            reserved(0, 30, 5, 30),
            best_effort(0),
        ],
    );
    for slot in 0..3 {
        scheduler.block(slot, 0);
    }
    assert_eq!(scheduler.decide(0), decision(None, Some(30)));
    assert!(scheduler.wake(2, 12), "idle pCPU");
    assert_eq!(scheduler.decide(12), decision(Some(2), Some(30)));
    scheduler.block(2, 14);
    assert_eq!(scheduler.decide(14), decision(None, Some(30)));
    // Released at 30 although blocked: a new job.
    assert_eq!(scheduler.decide(30), decision(Some(1), Some(35)));
    assert_eq!(scheduler.stats(1).jobs, 2);
    assert_eq!(scheduler.stats(1).deadline_misses, 0);
}

#[test]
fn stopped_vcpus_are_never_picked_until_started_again() {
    let mut scheduler = started(EDF, &[reserved(0, 10, 4, 10), best_effort(0)]);
    assert_eq!(scheduler.decide(0), decision(Some(0), Some(4)));
    scheduler.stop(0, 2);
    assert!(!scheduler.is_runnable(0));
    assert_eq!(
        scheduler.decide(2),
        decision(Some(1), None),
        "no release timer"
    );
    assert!(!scheduler.wake(0, 3));
    assert_eq!(scheduler.decide(15), decision(Some(1), None));
    assert_eq!(scheduler.stats(0).jobs, 1, "no releases while stopped");
    assert_eq!(scheduler.stats(0).deadline_misses, 0, "dropped, not missed");
    scheduler.start(0, 17);
    assert_eq!(scheduler.stats(0).jobs, 2, "released at start");
    assert_eq!(scheduler.decide(17), decision(Some(0), Some(21)));
    scheduler.block(0, 18);
    assert_eq!(scheduler.stats(0).last_response, 1);
    assert_eq!(scheduler.decide(18), decision(Some(1), Some(27)));
}

#[test]
fn block_and_stop_charge_the_running_vcpu_up_to_then_and_no_further() {
    let mut scheduler = started(FIXED, &[reserved(1, 100, 10, 100)]);
    assert_eq!(scheduler.decide(0), decision(Some(0), Some(10)));
    scheduler.block(0, 3);
    assert_eq!(scheduler.decide(5), decision(None, Some(100)));
    assert!(scheduler.wake(0, 6));
    // 7 left: 3 charged by block, nothing between the block and this decide.
    assert_eq!(scheduler.decide(8), decision(Some(0), Some(15)));
    // Stopped at 10 and started again at 20, within the window its release at 0 opened: 5
    // left (3 + 2 charged), not a fresh budget.
    scheduler.stop(0, 10);
    scheduler.start(0, 20);
    assert_eq!(scheduler.decide(20), decision(Some(0), Some(25)));
    // Started after that window: a new job at once, with its full budget.
    scheduler.stop(0, 22);
    scheduler.start(0, 130);
    assert_eq!(scheduler.decide(130), decision(Some(0), Some(140)));
    assert_eq!(scheduler.stats(0).jobs, 2);
}

#[test]
fn fixed_priority_runs_the_highest_and_a_woken_higher_vcpu_preempts() {
    let mut scheduler = started(FIXED, &[best_effort(1), best_effort(5), best_effort(3)]);
    assert_eq!(scheduler.decide(0), decision(Some(1), None));
    scheduler.block(1, 4);
    assert_eq!(scheduler.decide(4), decision(Some(2), None));
    assert!(!scheduler.wake(0, 5), "lower priority");
    assert!(scheduler.wake(1, 7), "higher priority");
    assert_eq!(scheduler.decide(7), decision(Some(1), None));
    assert_eq!(scheduler.stats(1).dispatches, 2);
    assert_eq!(scheduler.stats(2).dispatches, 1);
    assert_eq!(scheduler.stats(0).dispatches, 0);
}

#[test]
fn fixed_priority_shares_equal_priorities_by_quantum_only_when_needed() {
    let mut scheduler = started(FIXED, &[best_effort(2), best_effort(2), best_effort(1)]);
    assert_eq!(scheduler.decide(0), decision(Some(0), Some(10)));
    assert_eq!(scheduler.decide(10), decision(Some(1), Some(20)));
    scheduler.block(0, 12);
    assert_eq!(scheduler.decide(12), decision(Some(1), None), "alone at 2");
    scheduler.block(1, 13);
    assert_eq!(scheduler.decide(13), decision(Some(2), None));
}

#[test]
fn fixed_priority_throttles_a_budget_hog_and_counts_overruns_and_misses() {
    // The hog (priority 2) never blocks; the other (priority 1) needs 5 by 8 in each 10.
    let mut scheduler = started(FIXED, &[reserved(2, 10, 6, 10), reserved(1, 10, 5, 8)]);
    assert_eq!(scheduler.decide(0), decision(Some(0), Some(6)));
    assert_eq!(scheduler.decide(6), decision(Some(1), Some(10)));
    assert!(!scheduler.is_runnable(0), "throttled");
    assert_eq!(scheduler.stats(0).overruns, 1);
    // The other job is not done by 8: missed, once, though detected at the release.
    assert_eq!(scheduler.decide(10), decision(Some(0), Some(16)));
    let other = scheduler.stats(1);
    assert_eq!((other.jobs, other.deadline_misses), (2, 1));
    assert_eq!(scheduler.stats(0).deadline_misses, 1, "the hog's job too");
    assert_eq!(scheduler.decide(16), decision(Some(1), Some(20)));
    scheduler.block(1, 19);
    let other = scheduler.stats(1);
    assert_eq!(other.deadline_misses, 2, "completed at 19 > 18");
    assert_eq!((other.last_response, other.worst_response), (9, 9));
    assert_eq!(scheduler.decide(19), decision(None, Some(20)));
    assert_eq!(scheduler.stats(0).overruns, 2);
}

#[test]
fn fixed_priority_budget_equal_to_the_period_runs_without_a_gap() {
    let mut scheduler = started(FIXED, &[reserved(3, 10, 10, 10), best_effort(1)]);
    for period in 0..5 {
        let at = period * 10;
        assert_eq!(scheduler.decide(at), decision(Some(0), Some(at + 10)));
    }
    assert_eq!(scheduler.stats(1).dispatches, 0);
    scheduler.block(0, 45);
    let stats = scheduler.stats(0);
    assert_eq!((stats.jobs, stats.last_response), (5, 5));
    assert_eq!(stats.overruns, 4, "the first four jobs never blocked");
    assert_eq!(stats.deadline_misses, 4);
    assert_eq!(scheduler.decide(45), decision(Some(1), Some(50)));
    // A job that completes exactly at its budget's end is neither an overrun nor a miss.
    assert_eq!(scheduler.decide(50), decision(Some(0), Some(60)));
    scheduler.block(0, 60);
    let stats = scheduler.stats(0);
    assert_eq!((stats.overruns, stats.deadline_misses), (4, 4));
    assert_eq!(stats.jobs, 7, "released at 60 as it blocks");
}

#[test]
fn edf_simultaneous_releases_run_by_deadline_then_slot() {
    let mut scheduler = started(
        EDF,
        &[
            reserved(0, 20, 2, 12),
            reserved(0, 20, 3, 9),
            reserved(0, 20, 4, 12),
            best_effort(0),
        ],
    );
    assert_eq!(scheduler.decide(0), decision(Some(1), Some(3)));
    scheduler.block(1, 3);
    assert_eq!(
        scheduler.decide(3),
        decision(Some(0), Some(5)),
        "tie: slot 0"
    );
    scheduler.block(0, 5);
    assert_eq!(scheduler.decide(5), decision(Some(2), Some(9)));
    scheduler.block(2, 9);
    assert_eq!(scheduler.decide(9), decision(Some(3), Some(20)));
    for (slot, response) in [(0, 5), (1, 3), (2, 9)] {
        let stats = scheduler.stats(slot);
        assert_eq!((stats.jobs, stats.last_response), (1, response));
        assert_eq!(stats.deadline_misses, 0);
    }
}

#[test]
fn edf_woken_vcpu_with_an_earlier_deadline_preempts() {
    let mut scheduler = started(EDF, &[reserved(0, 20, 10, 20), reserved(0, 10, 4, 10)]);
    assert_eq!(scheduler.decide(0), decision(Some(1), Some(4)));
    scheduler.block(1, 1);
    assert_eq!(
        scheduler.decide(1),
        decision(Some(0), Some(10)),
        "1's release"
    );
    assert!(scheduler.wake(1, 3), "deadline 10 before 20");
    // 3 left, clipped to ⌊(10 − 3) · 4 / 10⌋ = 2.
    assert_eq!(scheduler.decide(3), decision(Some(1), Some(5)));
    assert_eq!(scheduler.stats(1).dispatches, 2);
    scheduler.block(1, 5);
    assert_eq!(scheduler.decide(5), decision(Some(0), Some(10)));
    // A later deadline does not preempt.
    let mut later = started(EDF, &[reserved(0, 10, 4, 10), reserved(0, 20, 5, 20)]);
    later.block(1, 0);
    assert_eq!(later.decide(0), decision(Some(0), Some(4)));
    assert!(!later.wake(1, 1));
    // Real time preempts best effort.
    let mut mixed = started(EDF, &[best_effort(0), reserved(0, 10, 4, 10)]);
    mixed.block(1, 0);
    assert_eq!(mixed.decide(0), decision(Some(0), Some(10)));
    assert!(mixed.wake(1, 2));
    // 4 left, clipped to ⌊(10 − 2) · 4 / 10⌋ = 3.
    assert_eq!(mixed.decide(2), decision(Some(1), Some(5)));
}

#[test]
fn edf_clips_the_budget_of_a_woken_vcpu_to_its_bandwidth() {
    let mut scheduler = started(EDF, &[reserved(0, 10, 4, 10), best_effort(0)]);
    assert_eq!(scheduler.decide(0), decision(Some(0), Some(4)));
    scheduler.block(0, 1);
    assert_eq!(scheduler.decide(1), decision(Some(1), Some(10)));
    // 3 left; ⌊(10 − 8) · 4 / 10⌋ = 0: throttled until the release at 10.
    assert!(!scheduler.wake(0, 8));
    assert!(!scheduler.is_runnable(0));
    assert_eq!(scheduler.decide(8), decision(Some(1), Some(10)));
    assert_eq!(scheduler.decide(10), decision(Some(0), Some(14)));
    scheduler.block(0, 11);
    assert_eq!(scheduler.decide(11), decision(Some(1), Some(20)));
    // 3 left; ⌊(20 − 15) · 4 / 10⌋ = 2.
    assert!(scheduler.wake(0, 15));
    assert_eq!(scheduler.decide(15), decision(Some(0), Some(17)));
    assert_eq!(scheduler.decide(17), decision(Some(1), Some(20)));
    assert_eq!(scheduler.stats(0).overruns, 1, "ran out while runnable");
    assert_eq!(scheduler.stats(0).deadline_misses, 0);
}

#[test]
fn edf_throttles_a_hog_and_the_other_vcpu_meets_its_deadlines() {
    let mut scheduler = started(EDF, &[reserved(0, 10, 3, 10), reserved(0, 20, 8, 20)]);
    // The hog (slot 0) never blocks; slot 1 needs 8 every 20.
    assert_eq!(scheduler.decide(0), decision(Some(0), Some(3)));
    assert_eq!(scheduler.decide(3), decision(Some(1), Some(10)));
    assert_eq!(scheduler.stats(0).overruns, 1);
    assert_eq!(scheduler.decide(10), decision(Some(0), Some(13)));
    assert_eq!(scheduler.decide(13), decision(Some(1), Some(14)));
    scheduler.block(1, 14);
    assert_eq!(scheduler.decide(14), decision(None, Some(20)));
    let other = scheduler.stats(1);
    assert_eq!((other.deadline_misses, other.worst_response), (0, 14));
    let hog = scheduler.stats(0);
    assert_eq!((hog.jobs, hog.overruns, hog.deadline_misses), (2, 2, 1));
}

#[test]
fn edf_best_effort_vcpus_share_what_real_time_leaves() {
    let mut scheduler = started(
        EDF,
        &[best_effort(0), best_effort(0), reserved(0, 100, 15, 100)],
    );
    assert_eq!(scheduler.decide(0), decision(Some(2), Some(15)));
    assert_eq!(scheduler.decide(15), decision(Some(0), Some(25)));
    assert_eq!(scheduler.decide(25), decision(Some(1), Some(35)));
    scheduler.block(0, 30);
    assert_eq!(scheduler.decide(30), decision(Some(1), Some(100)), "alone");
    assert_eq!(scheduler.decide(100), decision(Some(2), Some(115)));
    assert_eq!(scheduler.stats(2).overruns, 1);
}

#[test]
fn edf_budget_equal_to_the_period_leaves_nothing_to_best_effort() {
    let mut scheduler = started(EDF, &[reserved(0, 10, 10, 10), best_effort(0)]);
    for at in [0, 10, 20, 30] {
        assert_eq!(scheduler.decide(at), decision(Some(0), Some(at + 10)));
    }
    scheduler.block(0, 35);
    assert_eq!(scheduler.decide(35), decision(Some(1), Some(40)));
    assert_eq!(scheduler.stats(0).last_response, 5);
}

#[test]
fn a_preempting_vcpu_pays_for_the_resumption_of_the_one_it_preempted() {
    let mut scheduler = Scheduler::with_switch_cost(EDF, 1);
    scheduler.add(reserved(0, 20, 10, 20)).unwrap();
    scheduler.add(reserved(0, 5, 2, 5)).unwrap();
    scheduler.start(0, 0);
    assert_eq!(scheduler.decide(0), decision(Some(0), Some(10)));
    scheduler.start(1, 2);
    // Slot 1 (deadline 7) preempts slot 0 (8 left): 1 of 1's budget moves to 0.
    assert_eq!(scheduler.decide(2), decision(Some(1), Some(3)));
    scheduler.block(1, 3);
    assert_eq!(
        scheduler.decide(3),
        decision(Some(0), Some(7)),
        "1's release"
    );
    // Again at 7 (slot 0 has 5 left, then 6).
    assert_eq!(scheduler.decide(7), decision(Some(1), Some(8)));
    scheduler.block(1, 8);
    assert_eq!(
        scheduler.decide(8),
        decision(Some(0), Some(12)),
        "1's release"
    );
    assert_eq!(scheduler.decide(12), decision(Some(1), Some(13)));
    scheduler.block(1, 13);
    assert_eq!(
        scheduler.decide(13),
        decision(Some(0), Some(16)),
        "6 − 4 + 1 = 3 left"
    );
    assert_eq!(scheduler.stats(1).overruns, 0);
    // Without the cost, no transfer.
    let mut plain = started(EDF, &[reserved(0, 20, 10, 20)]);
    plain.add(reserved(0, 5, 2, 5)).unwrap();
    assert_eq!(plain.decide(0), decision(Some(0), Some(10)));
    plain.start(1, 2);
    assert_eq!(plain.decide(2), decision(Some(1), Some(4)));
}

#[test]
fn fixed_priority_a_preempted_vcpu_resumes_its_quantum_so_its_equals_get_their_turn() {
    // Slot 0 (priority 5) wakes every 6 and runs 1; slots 1 and 2 share priority 1. Were the
    // preempted slot 1 given a fresh quantum each time, slot 2 would never run.
    let mut scheduler = started(FIXED, &[best_effort(5), best_effort(1), best_effort(1)]);
    assert_eq!(scheduler.decide(0).run, Some(0));
    scheduler.block(0, 1);
    assert_eq!(scheduler.decide(1), decision(Some(1), Some(11)));
    assert!(scheduler.wake(0, 6), "the higher priority preempts");
    assert_eq!(scheduler.decide(6).run, Some(0));
    scheduler.block(0, 7);
    assert_eq!(
        scheduler.decide(7),
        decision(Some(1), Some(12)),
        "slot 1 resumes with the 5 it had left"
    );
    assert!(scheduler.wake(0, 12));
    assert_eq!(scheduler.decide(12).run, Some(0));
    scheduler.block(0, 13);
    assert_eq!(
        scheduler.decide(13).run,
        Some(2),
        "slot 1's quantum ended at 12"
    );
}

/// A removed slot is gone at once, even while it holds the pCPU, and the next add reuses the
/// lowest free slot with fresh statistics.
#[test]
fn removed_slots_stop_at_once_and_are_reused() {
    let mut scheduler = started(
        EDF,
        &[
            reserved(0, 100, 30, 100),
            reserved(0, 200, 30, 200),
            best_effort(0),
        ],
    );
    assert_eq!(scheduler.decide(0).run, Some(0));
    scheduler.remove(0, 10);
    assert!(!scheduler.is_runnable(0));
    assert_eq!(scheduler.reservations().count(), 1);
    assert_eq!(scheduler.decide(10).run, Some(1), "the next in line runs");
    assert_eq!(scheduler.len(), 3);
    scheduler.remove(2, 20);
    assert_eq!(scheduler.len(), 2, "trailing free slots are dropped");
    // Slot 0 is retired until its window ends at 100.
    assert_eq!(scheduler.add(reserved(0, 50, 10, 50)), Ok(2));
    assert_eq!(scheduler.add(best_effort(0)), Ok(3));
    // Started with a later first release: waits for it, and its lateness is counted.
    scheduler.start_at(2, 20, 150);
    assert!(!scheduler.is_runnable(2));
    assert_eq!(scheduler.stats(2).jobs, 0);
    scheduler.block(1, 40);
    assert_eq!(scheduler.decide(160).run, Some(2));
    assert_eq!(
        scheduler.add(best_effort(0)),
        Ok(0),
        "its window ended: free"
    );
    let stats = scheduler.stats(2);
    assert_eq!((stats.jobs, stats.worst_lateness), (1, 10));
}

/// The one-call give-away (a yield or a WFI on a shared pCPU) decides exactly as block, wake
/// (for a best-effort yield) and decide made one after the other, and leaves the same state,
/// over random mixes of best-effort and real-time vCPUs under every policy.
#[test]
fn give_away_decides_as_block_wake_and_decide() {
    let mut rng = crate::rng::Rng::new(0x6b65_656c_0020);
    let mut compared = 0;
    for round in 0..300 {
        let policy = [ROUND_ROBIN, FIXED, EDF][round % 3];
        let mut params = Vec::new();
        for i in 0..(2 + rng.below(6)) {
            let period = 40 + rng.below(200);
            let p = if policy != ROUND_ROBIN && rng.below(2) == 0 {
                reserved(100 + i as u8, period, 1 + rng.below(period / 8), period)
            } else {
                best_effort(1)
            };
            params.push(p);
        }
        let mut one = Scheduler::new(policy);
        for p in &params {
            if one.admit(*p).is_ok() {
                one.add(*p).unwrap();
            }
        }
        for slot in 0..one.len() {
            one.start(slot, 0);
        }
        let mut three = one.clone();
        let mut now = 0;
        let mut running = one.decide(now).run;
        assert_eq!(three.decide(now).run, running);
        for _ in 0..200 {
            now += rng.below(50);
            let Some(slot) = running else {
                now += 1;
                let (a, b) = (one.decide(now), three.decide(now));
                assert_eq!(a, b);
                running = a.run;
                for slot in 0..one.len() {
                    if rng.below(3) == 0 {
                        assert_eq!(one.wake(slot, now), three.wake(slot, now));
                    }
                }
                continue;
            };
            let requeue = rng.below(2) == 0 && !one.has_reservation(slot);
            let a = one.give_away(slot, now, requeue);
            three.block(slot, now);
            if requeue {
                three.wake(slot, now);
            }
            let b = three.decide(now);
            assert_eq!(a, b, "round {round} {policy:?} at {now}");
            assert!(one.queue_is_consistent() && three.queue_is_consistent());
            // The whole state, not only what the accessors show.
            assert_eq!(
                format!("{one:?}"),
                format!("{three:?}"),
                "round {round} {policy:?}"
            );
            for s in 0..one.len() {
                assert_eq!(one.stats(s), three.stats(s));
                assert_eq!(one.is_runnable(s), three.is_runnable(s));
                assert_eq!(one.budget_window(s), three.budget_window(s));
            }
            compared += 1;
            running = a.run;
        }
    }
    assert!(compared > 30_000, "{compared} give-aways compared");
}
