//! Host tests of the task life cycle, every refusal, and run-time admission.

use super::*;
use crate::sched::{Policy, Stats};

const MS: u64 = 1_000_000;
/// One tick per nanosecond: the tests' scheduler runs in nanoseconds.
const UNIT: (u64, u64) = (1, 1);
const SWITCH: u64 = 2_000;

const GRANT: TaskGrant = TaskGrant {
    max: 3,
    utilisation_ppm: 600_000,
    managers: &[2],
};

/// Memory of the partition: [0x4000_0000, 0x4100_0000).
fn in_memory(address: u64, len: u64) -> bool {
    address >= 0x4000_0000 && address.saturating_add(len) <= 0x4100_0000
}

fn request(period: u64, budget: u64) -> TaskRequest {
    TaskRequest {
        entry: 0x4008_0000,
        stack: 0x4010_0000,
        arg: 7,
        period,
        budget,
        deadline: 0,
        pcpu: 1,
        priority: 10,
    }
}

/// An EDF pCPU holding one best-effort vCPU (Linux) and one real-time vCPU at `static_ppm`
/// of a 10 ms period.
fn pcpu(policy: Policy, static_ppm: u64) -> Scheduler {
    let mut scheduler = Scheduler::with_switch_cost(policy, SWITCH);
    scheduler
        .add(Params {
            priority: 1,
            reservation: None,
        })
        .unwrap();
    if static_ppm > 0 {
        scheduler
            .add(Params {
                priority: 200,
                reservation: Some(Reservation {
                    period: 10 * MS,
                    budget: 10 * MS * static_ppm / 1_000_000,
                    deadline: 10 * MS,
                }),
            })
            .unwrap();
    }
    scheduler
}

const EDF: Policy = Policy::Edf { quantum: MS };
const FIXED: Policy = Policy::FixedPriority { quantum: MS };

fn create(
    table: &mut TaskTable,
    scheduler: &mut Scheduler,
    request: &TaskRequest,
) -> Result<Admitted, TaskError> {
    table.create(
        Some(&GRANT),
        &[1],
        request,
        in_memory,
        scheduler,
        UNIT,
        SWITCH,
    )
}

#[test]
fn create_launch_wait_delete_and_reuse() {
    let mut table = TaskTable::EMPTY;
    let mut scheduler = pcpu(EDF, 200_000);
    let admitted = create(&mut table, &mut scheduler, &request(MS, 100_000)).unwrap();
    assert_eq!(admitted, Admitted { index: 0, slot: 2 });
    assert_eq!(table.get(0).unwrap().state, TaskState::Created);
    // Created stopped: never picked.
    assert!(!scheduler.is_runnable(2));
    // Launched with its first release at 5 ms (phase alignment): waits until then.
    assert_eq!(table.launch(0, &mut scheduler, 0, 5 * MS).unwrap().slot, 2);
    assert!(!scheduler.is_runnable(2));
    assert_eq!(scheduler.decide(0).until, Some(5 * MS));
    assert_eq!(scheduler.decide(5 * MS + 300).run, Some(2));
    assert!(scheduler.stats(2).worst_lateness == 300);
    // Its job done (wait for the next period) at 5.05 ms: sleeps until 6 ms.
    scheduler.block(2, 5 * MS + 50_000);
    assert!(!scheduler.is_runnable(2));
    let stats = scheduler.stats(2);
    assert_eq!((stats.jobs, stats.last_response), (1, 50_000));
    let next = scheduler.decide(5 * MS + 50_000);
    assert_ne!(next.run, Some(2));
    assert_eq!(scheduler.decide(6 * MS).run, Some(2));
    assert_eq!(scheduler.stats(2).jobs, 2);
    // Launching again is refused.
    assert_eq!(
        table.launch(0, &mut scheduler, 6 * MS, 0),
        Err(TaskError::AlreadyLaunched)
    );
    // Deleted mid-job: gone from the table and the scheduler at once.
    let deleted = table.delete(0).unwrap();
    scheduler.remove(usize::from(deleted.slot), 6 * MS + 10);
    assert!(!scheduler.is_runnable(2));
    assert_eq!(table.get(0), Err(TaskError::NoSuchTask));
    assert_eq!(scheduler.reservations().count(), 1);
    // A new task with other parameters reuses the index; its slot is another one while the
    // deleted task's budget window (until 7 ms) is open.
    let again = create(&mut table, &mut scheduler, &request(2 * MS, 100_000)).unwrap();
    assert_eq!(again, Admitted { index: 0, slot: 3 });
    assert_eq!(scheduler.stats(3).jobs, 0);
    // Once that window has ended, the slot is free again.
    table.delete(0).unwrap();
    scheduler.remove(3, 7 * MS);
    let third = create(&mut table, &mut scheduler, &request(2 * MS, 100_000)).unwrap();
    assert_eq!(third, Admitted { index: 0, slot: 2 });
}

/// A task deleted and re-created with the same parameters within a period is a new task in
/// a slot of its own: its whole budget and a job released at its launch, statistics from
/// zero. What its predecessor may still run of its window is not lost to admission: the
/// deleted task's slot stays retired, counted, until the window ends, so deleting is no way
/// to more than the pCPU admitted (a re-create that does not fit beside it is refused).
#[test]
fn a_recreated_task_starts_afresh_beside_its_predecessor_s_window() {
    let mut table = TaskTable::EMPTY;
    let mut scheduler = pcpu(FIXED, 0);
    let budget = 200_000;
    let task = create(&mut table, &mut scheduler, &request(MS, budget)).unwrap();
    let slot = task.slot;
    scheduler.start(0, 0);
    table.launch(0, &mut scheduler, 0, 0).unwrap();
    assert_eq!(scheduler.decide(0).run, Some(slot));
    // It runs 150 us of its 200 us, then deletes itself and is re-created at once.
    table.delete(0).unwrap();
    scheduler.remove(slot, 150_000);
    let again = create(&mut table, &mut scheduler, &request(MS, budget)).unwrap();
    assert_eq!(again.index, 0);
    assert_ne!(again.slot, slot, "the deleted task's slot is retired");
    assert_eq!(scheduler.stats(again.slot), Stats::ZERO);
    table.launch(0, &mut scheduler, 150_000, 0).unwrap();
    let decision = scheduler.decide(150_000);
    assert_eq!(decision.run, Some(again.slot));
    assert_eq!(decision.until, Some(350_000), "its whole budget");
    assert_eq!(scheduler.budget_window(again.slot), (150_000, MS + 150_000));
    assert_eq!(scheduler.stats(again.slot).jobs, 1);
    // A third with a budget that does not fit beside the retired one and the second.
    table.delete(0).unwrap();
    scheduler.remove(again.slot, 200_000);
    let big = create(&mut table, &mut scheduler, &request(MS, 590_000));
    assert_eq!(big, Err(TaskError::NotSchedulable));
    assert_eq!(table.count(), 0, "nothing changed");
    // Once both windows ended, it fits.
    scheduler.decide(MS + 150_000);
    assert_eq!(scheduler.reservations().count(), 0);
    assert!(create(&mut table, &mut scheduler, &request(MS, 590_000)).is_ok());
}

/// Issue 38: a task launched with its first release far away (never, here) and deleted with
/// a message queued left the slot it had taken over with that release and no budget, so the
/// next task created in it (launched for now) never ran. Each new task in the same index
/// now runs its jobs from its launch, whatever its predecessors did, round after round.
#[test]
fn a_task_after_one_launched_far_away_and_deleted_runs_its_jobs() {
    let mut table = TaskTable::EMPTY;
    let mut scheduler = pcpu(EDF, 0);
    scheduler.start(0, 0);
    let spec = request(10 * MS, MS);
    let mut now = 0;
    // A polling task, launched for now and deleted after it ran.
    let first = create(&mut table, &mut scheduler, &spec).unwrap();
    table.launch(first.index, &mut scheduler, now, 0).unwrap();
    assert_eq!(scheduler.decide(now).run, Some(first.slot));
    now += 50_000;
    table.delete(first.index).unwrap();
    scheduler.remove(first.slot, now);
    for round in 0..5 {
        // Launched at the end of time, deleted before it ever runs.
        let far = create(&mut table, &mut scheduler, &spec).unwrap();
        assert_eq!(far.index, 0);
        table
            .launch(far.index, &mut scheduler, now, u64::MAX)
            .unwrap();
        assert_ne!(scheduler.decide(now).run, Some(far.slot));
        now += 10_000;
        table.delete(far.index).unwrap();
        scheduler.remove(far.slot, now);
        // A new task in the same index, launched for now: a job at once, its whole budget,
        // statistics of its own, and a job every period after.
        let new = create(&mut table, &mut scheduler, &spec).unwrap();
        assert_eq!(new.index, 0, "round {round}");
        assert_eq!(scheduler.stats(new.slot), Stats::ZERO, "round {round}");
        table.launch(new.index, &mut scheduler, now, 0).unwrap();
        let decision = scheduler.decide(now);
        assert_eq!(decision.run, Some(new.slot), "round {round}");
        assert_eq!(
            decision.until,
            Some(now + MS),
            "round {round}: its whole budget"
        );
        let released = now;
        for job in 1..=3u64 {
            scheduler.block(new.slot, now + 100_000);
            now = released + job * 10 * MS;
            assert_eq!(scheduler.decide(now).run, Some(new.slot), "round {round}");
        }
        let stats = scheduler.stats(new.slot);
        assert_eq!(
            (stats.jobs, stats.deadline_misses, stats.overruns),
            (4, 0, 0),
            "round {round}"
        );
        now += 50_000;
        table.delete(new.index).unwrap();
        scheduler.remove(new.slot, now);
    }
}

/// A launch the scheduler cannot carry out is refused with a code, never silent: a task's
/// slot already started (launched behind the table's back), or not a vCPU's.
#[test]
fn a_launch_that_cannot_start_is_refused() {
    let mut table = TaskTable::EMPTY;
    let mut scheduler = pcpu(EDF, 0);
    let task = create(&mut table, &mut scheduler, &request(MS, 100_000)).unwrap();
    scheduler.start(task.slot, 0);
    assert_eq!(
        table.launch(task.index, &mut scheduler, 0, 0),
        Err(TaskError::AlreadyLaunched)
    );
    assert_eq!(table.get(task.index).unwrap().state, TaskState::Created);
    scheduler.remove(task.slot, 10 * MS);
    assert_eq!(
        table.launch(task.index, &mut scheduler, 10 * MS, 0),
        Err(TaskError::NoSuchTask)
    );
    assert_eq!(table.get(task.index).unwrap().state, TaskState::Created);
}

/// Every refusal has its own code, and changes neither the table nor the scheduler.
#[test]
fn every_refusal_has_its_code_and_changes_nothing() {
    let mut table = TaskTable::EMPTY;
    let mut scheduler = pcpu(EDF, 200_000);
    create(&mut table, &mut scheduler, &request(MS, 100_000)).unwrap();
    let before = (
        table.count(),
        scheduler.reservations().count(),
        scheduler.len(),
    );
    let mut refuse = |grant: Option<&TaskGrant>, request: TaskRequest, expected: TaskError| {
        let result = table.create(
            grant,
            &[1],
            &request,
            in_memory,
            &mut scheduler,
            UNIT,
            SWITCH,
        );
        assert_eq!(result, Err(expected), "{request:?}");
        assert_eq!(
            (
                table.count(),
                scheduler.reservations().count(),
                scheduler.len()
            ),
            before
        );
    };
    let good = request(MS, 100_000);
    refuse(None, good, TaskError::NotAllowed);
    let one = TaskGrant { max: 1, ..GRANT };
    refuse(Some(&one), good, TaskError::LimitReached);
    for bad in [
        TaskRequest { budget: 0, ..good },
        TaskRequest {
            budget: 2 * MS,
            ..good
        },
        TaskRequest {
            deadline: 2 * MS,
            ..good
        },
        TaskRequest {
            deadline: 50_000,
            ..good
        },
        TaskRequest {
            period: 1_000,
            ..good
        },
        TaskRequest {
            period: MAX_PERIOD_NS + 1,
            budget: MS,
            ..good
        },
        TaskRequest { pcpu: 2, ..good },
    ] {
        refuse(Some(&GRANT), bad, TaskError::InvalidParameters);
    }
    for bad in [
        TaskRequest {
            entry: 0x3000_0000,
            ..good
        },
        TaskRequest {
            entry: 0x4008_0002,
            ..good
        },
        TaskRequest {
            stack: 0x4200_0000,
            ..good
        },
        TaskRequest {
            stack: 0x4000_0000,
            ..good
        },
        TaskRequest {
            stack: 0x4010_0008,
            ..good
        },
        TaskRequest { stack: 0, ..good },
    ] {
        refuse(Some(&GRANT), bad, TaskError::BadAddress);
    }
    // Beyond the grant's 60 %: 10 % used, 55 % more asked.
    refuse(
        Some(&GRANT),
        request(MS, 550_000),
        TaskError::NotSchedulable,
    );
    let codes = TaskError::ALL.map(TaskError::code);
    for (i, code) in codes.iter().enumerate() {
        assert!(*code < 0);
        assert!(!codes[..i].contains(code), "code {code} used twice");
    }
    // Distinct from the message services' codes too (one error space for Keel's calls), but
    // for the two that mean the same.
    let message_codes = crate::ipc::MessageError::ALL.map(crate::ipc::MessageError::code);
    for task in TaskError::ALL {
        let shared = message_codes.contains(&task.code());
        let meaning_shared = matches!(task.code(), -3 | -9);
        assert_eq!(shared, meaning_shared, "{task:?}");
    }
}

/// A create that fits its grant but would break what the pCPU already admitted is refused.
#[test]
fn a_create_that_breaks_an_admitted_set_is_refused() {
    let whole = TaskGrant {
        max: 3,
        utilisation_ppm: 1_000_000,
        managers: &[],
    };
    let mut table = TaskTable::EMPTY;
    // EDF: 70 % held by a configured vCPU; 24 % fits (with the switch costs: 94.8 %), 10 %
    // more does not (70.04 + 24.4 + 10.4 = 104.84 %).
    let mut scheduler = pcpu(EDF, 700_000);
    let mut create = |scheduler: &mut Scheduler, request: TaskRequest| {
        table.create(
            Some(&whole),
            &[1],
            &request,
            in_memory,
            scheduler,
            UNIT,
            SWITCH,
        )
    };
    create(&mut scheduler, request(MS, 240_000)).unwrap();
    assert_eq!(
        create(&mut scheduler, request(MS, 100_000)),
        Err(TaskError::NotSchedulable)
    );
    assert_eq!(
        scheduler.admit(Params {
            priority: 0,
            reservation: request(MS, 100_000).reservation()
        }),
        Err(SchedError::Unschedulable(admission::Refusal::Utilisation {
            total_ppm: 1_048_400
        }))
    );
    // Fixed priority: a configured vCPU at priority 200 with 8 ms of a 10 ms period. A task
    // above it with 1.5 ms every 5 ms fits its own deadline but pushes the vCPU's response
    // to 8 + 2 × 1.5 ms plus switches > 10 ms.
    let mut fixed = pcpu(FIXED, 800_000);
    let high = TaskRequest {
        priority: 250,
        ..request(5 * MS, 1_500_000)
    };
    assert_eq!(create(&mut fixed, high), Err(TaskError::NotSchedulable));
    // Below it, the same task meets its own deadline? 1.5 ms every 5 ms under 8 ms every
    // 10 ms: response 1.5 + 8 > 5 ms: refused too.
    let low = TaskRequest {
        priority: 100,
        ..high
    };
    assert_eq!(create(&mut fixed, low), Err(TaskError::NotSchedulable));
    // A light one below it fits: 0.1 ms every 20 ms.
    let light = TaskRequest {
        priority: 100,
        ..request(20 * MS, 100_000)
    };
    assert!(create(&mut fixed, light).is_ok());
    // Same priority as an admitted reservation, or at or below best effort: invalid.
    let clash = TaskRequest {
        priority: 200,
        ..request(20 * MS, 100_000)
    };
    assert_eq!(create(&mut fixed, clash), Err(TaskError::InvalidParameters));
    let under = TaskRequest {
        priority: 1,
        ..request(20 * MS, 100_000)
    };
    assert_eq!(create(&mut fixed, under), Err(TaskError::InvalidParameters));
}

/// The partition's grant is counted per pCPU over its tasks, deleted ones given back.
#[test]
fn the_grant_is_counted_per_pcpu_and_given_back() {
    let mut table = TaskTable::EMPTY;
    let mut scheduler = pcpu(EDF, 0);
    let third = request(MS, 190_000); // 19 % + 0.4 % of switches
    for _ in 0..3 {
        create(&mut table, &mut scheduler, &third).unwrap();
    }
    assert_eq!(table.utilisation_on(1), 3 * 194_000);
    assert_eq!(
        create(&mut table, &mut scheduler, &third),
        Err(TaskError::LimitReached)
    );
    let deleted = table.delete(1).unwrap();
    scheduler.remove(usize::from(deleted.slot), 0);
    assert_eq!(table.utilisation_on(1), 2 * 194_000);
    assert_eq!(
        create(&mut table, &mut scheduler, &request(MS, 250_000)),
        Err(TaskError::NotSchedulable),
        "2 × 19.4 % + 25.4 % > 60 %"
    );
    assert_eq!(create(&mut table, &mut scheduler, &third).unwrap().index, 1);
    let before: Vec<_> = table.iter().map(|(i, _)| i).collect();
    assert_eq!(before, [0, 1, 2]);
    assert_eq!(table.clear().count(), 3);
    assert_eq!(table.count(), 0);
}

#[test]
fn handles_and_managers() {
    assert_eq!(handle(3, 2), 0x302);
    assert_eq!(parse_handle(0x302), Some((3, 2)));
    assert_eq!(parse_handle(0x306), None, "index beyond the most tasks");
    assert_eq!(parse_handle(0x1_0302), None, "upper bits set");
    assert!(may_manage(1, 1, Some(&GRANT)));
    assert!(may_manage(2, 1, Some(&GRANT)));
    assert!(!may_manage(3, 1, Some(&GRANT)));
    assert!(!may_manage(1, 1, None));
}

#[test]
fn a_scaled_budget_of_zero_ticks_is_invalid() {
    let mut table = TaskTable::EMPTY;
    let mut scheduler = pcpu(EDF, 0);
    // 62.5 MHz: 16 ns per tick; a 10 ns budget rounds down to nothing.
    let result = table.create(
        Some(&GRANT),
        &[1],
        &request(MS, 10),
        in_memory,
        &mut scheduler,
        (62_500_000, 1_000_000_000),
        SWITCH,
    );
    assert_eq!(result, Err(TaskError::InvalidParameters));
}

/// Run-time admission does a bounded amount of work: a set that needs more than
/// [`admission::Limits::RUN_TIME`] allows is refused, though the compiler's limits would admit
/// it (refusing is safe; the work runs with interrupts masked).
#[test]
fn run_time_admission_work_is_bounded() {
    use admission::{Limits, Refusal, Task as T};
    // EDF, a constrained deadline, utilisation 0.95: the demand test's busy period spans
    // about fifty deadlines (and the set fits exactly at 50 000).
    let constrained = [
        T {
            period: 1_000,
            budget: 900,
            deadline: 1_000,
        },
        T {
            period: 100_000,
            budget: 5_000,
            deadline: 50_000,
        },
    ];
    assert_eq!(
        admission::edf_within(&constrained, 0, Limits::BUILD),
        Ok(())
    );
    assert_eq!(
        admission::edf_within(&constrained, 0, Limits::RUN_TIME),
        Err(Refusal::TooComplex)
    );
    // Fixed priority: under a high-priority task using 90 %, a low-priority job's response
    // converges by a tenth each iteration (to 10 000: about 80 iterations).
    let nested = [
        T {
            period: 10,
            budget: 9,
            deadline: 10,
        },
        T {
            period: 100_000,
            budget: 1_000,
            deadline: 100_000,
        },
    ];
    assert_eq!(
        admission::fixed_priority_within(&nested, 0, Limits::BUILD),
        Ok(())
    );
    assert_eq!(
        admission::fixed_priority_within(&nested, 0, Limits::RUN_TIME),
        Err(Refusal::TooComplex)
    );
}
