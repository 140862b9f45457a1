//! Host tests of the task life cycle, every refusal, and run-time admission.

use super::*;
use crate::sched::Policy;

const MS: u64 = 1_000_000;
/// One tick per nanosecond: the tests' scheduler runs in nanoseconds.
const UNIT: (u64, u64) = (1, 1);
const SWITCH: u64 = 2_000;
/// The partition creating the tasks (its VM id).
const VM: u32 = 1;

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
        VM,
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
    assert_eq!(table.launch(0).unwrap().slot, 2);
    scheduler.start_at(2, 0, 5 * MS);
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
    assert_eq!(table.launch(0), Err(TaskError::AlreadyLaunched));
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

/// A task deleted and re-created with the same parameters within a period gets only what
/// was left of that period's budget, and its deadline: deleting it is no way to a fresh one.
#[test]
fn a_recreated_task_keeps_its_periods_budget() {
    let mut table = TaskTable::EMPTY;
    let mut scheduler = pcpu(FIXED, 0);
    let budget = 200_000;
    let task = create(&mut table, &mut scheduler, &request(MS, budget)).unwrap();
    let slot = task.slot;
    table.launch(0).unwrap();
    scheduler.start(0, 0);
    scheduler.start(slot, 0);
    assert_eq!(scheduler.decide(0).run, Some(slot));
    // It runs 150 us of its 200 us, then deletes itself and is re-created at once.
    table.delete(0).unwrap();
    scheduler.remove(slot, 150_000);
    let again = create(&mut table, &mut scheduler, &request(MS, budget)).unwrap();
    assert_eq!(again.slot, slot, "takes the retired slot over");
    table.launch(0).unwrap();
    scheduler.start(slot, 150_000);
    let decision = scheduler.decide(150_000);
    assert_eq!(decision.run, Some(slot));
    assert_eq!(
        decision.until,
        Some(200_000),
        "50 us left, not a fresh 200 us"
    );
    assert_eq!(
        scheduler.decide(200_000).run,
        Some(0),
        "throttled: Linux runs"
    );
    // The next period brings a full budget again.
    let next = scheduler.decide(MS);
    assert_eq!((next.run, next.until), (Some(slot), Some(MS + budget)));
    // Another partition's task with the same parameters does not take a window over.
    table.delete(0).unwrap();
    scheduler.remove(slot, MS + 10);
    let mut other = TaskTable::EMPTY;
    let foreign = other
        .create(
            VM + 1,
            Some(&GRANT),
            &[1],
            &request(MS, budget),
            in_memory,
            &mut scheduler,
            UNIT,
            SWITCH,
        )
        .unwrap();
    assert_ne!(foreign.slot, slot);
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
            VM,
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
            VM,
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
        VM,
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
