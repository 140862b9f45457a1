//! The scheduling rules: a policy per pCPU (`[[pcpu]]`), parameters per vCPU (`schedule`),
//! and build-time admission of the reservations on each shared pCPU.
//!
//! Checked in three steps, each in file order: the `[[pcpu]]` tables with `[system]`, each
//! VM's `schedule` against the policies of its pCPUs, then every shared pCPU across the VMs
//! placed on it (fixed-priority ranks, then [`crate::admission`] with the switch cost, then
//! the reservations' utilisation with the task allowances of the VMs there).

use super::error::{ConfigErrorKind, Problem, Subject, VcpuName};
use super::model::Vm;
use super::percent::WHOLE_PPM;
use super::schema::{PcpuTable, SystemTable, VcpuScheduleTable, VmTable};
use super::unschedulable::{Holder, Unschedulable};
use crate::admission::{self, Refusal, Task};
use crate::sched::{Params, Policy, Reservation};

/// Time slice of a shared pCPU whose `[[pcpu]]` table gives no `quantum`: 1 ms.
pub const DEFAULT_QUANTUM_NS: u64 = 1_000_000;
/// Switch cost when `[system]` gives no `switch_cost`: 2 µs.
pub const DEFAULT_SWITCH_COST_NS: u64 = 2_000;

/// Builds the error for `subject`'s `field` breaking `problem`.
fn invalid(subject: &Subject, field: &'static str, problem: Problem) -> ConfigErrorKind {
    ConfigErrorKind::Invalid {
        subject: subject.clone(),
        field,
        problem,
    }
}

/// `[system] switch_cost` in nanoseconds.
pub fn switch_cost(system: &SystemTable) -> Result<u64, ConfigErrorKind> {
    match &system.switch_cost {
        None => Ok(DEFAULT_SWITCH_COST_NS),
        Some(text) => text
            .nanoseconds()
            .map_err(|error| invalid(&Subject::System, "switch_cost", Problem::BadDuration(error))),
    }
}

/// The `[[pcpu]]` rules: an existing pCPU, listed once, a known policy, a non-zero quantum
/// and none for `pinned`. Returns one policy per pCPU (unlisted ones pinned).
pub fn policies(tables: &[PcpuTable], pcpu_count: u32) -> Result<Vec<Policy>, ConfigErrorKind> {
    let mut policies = vec![Policy::Pinned; pcpu_count as usize];
    for (position, table) in tables.iter().enumerate() {
        let subject = Subject::Pcpu(table.id);
        let at = |field: &'static str, problem: Problem| invalid(&subject, field, problem);
        if table.id >= pcpu_count {
            return Err(invalid(
                &Subject::PcpuTable(position),
                "id",
                Problem::PcpuOutOfRange {
                    pcpu: table.id,
                    count: pcpu_count,
                },
            ));
        }
        if tables[..position].iter().any(|other| other.id == table.id) {
            return Err(at("id", Problem::PcpuTableTwice));
        }
        let policy: fn(u64) -> Policy = match table.policy.as_str() {
            "pinned" => |_| Policy::Pinned,
            "fixed-priority" => |quantum| Policy::FixedPriority { quantum },
            "edf" => |quantum| Policy::Edf { quantum },
            "round-robin" => |quantum| Policy::RoundRobin { quantum },
            value => {
                return Err(at(
                    "policy",
                    Problem::UnknownSchedulingPolicy {
                        value: value.to_string(),
                    },
                ))
            }
        };
        let quantum = match &table.quantum {
            None => DEFAULT_QUANTUM_NS,
            Some(_) if table.policy == "pinned" => {
                return Err(at("quantum", Problem::QuantumOnPinned))
            }
            Some(text) => text
                .nanoseconds()
                .map_err(|error| at("quantum", Problem::BadDuration(error)))?,
        };
        if quantum == 0 {
            return Err(at("quantum", Problem::Zero));
        }
        let policy = policy(quantum);
        policies[table.id as usize] = policy;
    }
    Ok(policies)
}

/// One VM's `schedule` (its `pcpus` already checked): one [`Params`] per vCPU, each fitting
/// the policy of the vCPU's pCPU. `subject` is the VM's.
pub fn vcpu_params(
    table: &VmTable,
    subject: &Subject,
    policies: &[Policy],
) -> Result<Vec<Params>, ConfigErrorKind> {
    let Some(schedule) = &table.schedule else {
        return Ok(vec![Params::default(); table.pcpus.len()]);
    };
    if schedule.len() != table.pcpus.len() {
        return Err(invalid(
            subject,
            "schedule",
            Problem::ScheduleCount {
                count: schedule.len(),
                vcpus: table.pcpus.len(),
            },
        ));
    }
    schedule
        .iter()
        .zip(&table.pcpus)
        .enumerate()
        .map(|(vcpu, (entry, &pcpu))| {
            let subject = Subject::Vcpu(VcpuName {
                vm: table.name.clone(),
                vcpu,
            });
            one_vcpu(entry, pcpu, policies[pcpu as usize])
                .map_err(|(field, problem)| invalid(&subject, field, problem))
        })
        .collect()
}

/// How messages describe `policy` if it takes no reservations (no scheduling parameters, no
/// tasks): `pinned (its one vCPU runs whenever it is ready)` or `shared by round robin`.
pub fn without_reservations(policy: Policy) -> Option<&'static str> {
    match policy {
        Policy::Pinned => Some("pinned (its one vCPU runs whenever it is ready)"),
        Policy::RoundRobin { .. } => Some("shared by round robin"),
        Policy::FixedPriority { .. } | Policy::Edf { .. } => None,
    }
}

/// One vCPU's entry on pCPU `pcpu` with `policy`; on error, the field at fault and why.
fn one_vcpu(
    entry: &VcpuScheduleTable,
    pcpu: u32,
    policy: Policy,
) -> Result<Params, (&'static str, Problem)> {
    let priority = match entry.priority {
        None => None,
        Some(value) => Some(
            u8::try_from(value).map_err(|_| ("priority", Problem::PriorityOutOfRange { value }))?,
        ),
    };
    let duration = |field: &'static str, text: &Option<super::duration::DurationText>| {
        text.as_ref()
            .map(|text| text.nanoseconds())
            .transpose()
            .map_err(|error| (field, Problem::BadDuration(error)))
    };
    let period = duration("period", &entry.period)?;
    let budget = duration("budget", &entry.budget)?;
    let deadline = duration("deadline", &entry.deadline)?;

    let first_given = [
        ("priority", priority.is_some()),
        ("period", period.is_some()),
        ("budget", budget.is_some()),
        ("deadline", deadline.is_some()),
    ]
    .into_iter()
    .find_map(|(field, given)| given.then_some(field));
    if let (Some(policy), Some(field)) = (without_reservations(policy), first_given) {
        return Err((field, Problem::ParameterNotAllowed { pcpu, policy }));
    }
    if matches!(policy, Policy::Edf { .. }) && priority.is_some() {
        return Err(("priority", Problem::PriorityOnEdf { pcpu }));
    }

    let reservation = match (period, budget) {
        (None, Some(budget)) => {
            return Err(("period", Problem::BudgetWithoutPeriod { budget }));
        }
        (None, None) => match deadline {
            Some(deadline) => {
                return Err(("period", Problem::DeadlineWithoutPeriod { deadline }));
            }
            None => None,
        },
        (Some(period), None) => return Err(("budget", Problem::PeriodWithoutBudget { period })),
        (Some(period), Some(budget)) => Some(reservation(period, budget, deadline)?),
    };
    Ok(Params {
        priority: priority.unwrap_or(0),
        reservation,
    })
}

/// A reservation's shape: a budget above zero, within the period and the deadline; a deadline
/// (default: the period) within the period.
fn reservation(
    period: u64,
    budget: u64,
    deadline: Option<u64>,
) -> Result<Reservation, (&'static str, Problem)> {
    let above = |value: u64, limit_name: &'static str, limit: u64| Problem::Above {
        value,
        limit_name,
        limit,
    };
    if budget == 0 {
        return Err(("budget", Problem::Zero));
    }
    if budget > period {
        return Err(("budget", above(budget, "period", period)));
    }
    let deadline = deadline.unwrap_or(period);
    if deadline > period {
        return Err(("deadline", above(deadline, "period", period)));
    }
    if budget > deadline {
        return Err(("budget", above(budget, "deadline", deadline)));
    }
    Ok(Reservation {
        period,
        budget,
        deadline,
    })
}

/// The rules across VMs on every shared pCPU, in pCPU order: on a fixed-priority pCPU,
/// distinct priorities among reservations and every reservation above the best-effort vCPUs;
/// then admission of the reservations, with `switch_cost` charged twice per job; then, if VMs
/// with `tasks` have vCPUs there, the reservations' utilisation plus their allowances.
pub fn check_shared_pcpus(
    policies: &[Policy],
    vms: &[Vm],
    switch_cost: u64,
) -> Result<(), ConfigErrorKind> {
    for (pcpu, &policy) in (0u32..).zip(policies) {
        let placed: Vec<(VcpuName, Params)> = vms
            .iter()
            .flat_map(|vm| {
                vm.pcpus
                    .iter()
                    .zip(&vm.sched)
                    .enumerate()
                    .filter(move |(_, (&on, _))| on == pcpu)
                    .map(move |(vcpu, (_, &params))| {
                        let name = VcpuName {
                            vm: vm.name.clone(),
                            vcpu,
                        };
                        (name, params)
                    })
            })
            .collect();
        let allowances: Vec<(String, u64)> = vms
            .iter()
            .filter(|vm| vm.pcpus.contains(&pcpu))
            .filter_map(|vm| {
                Some((
                    vm.name.clone(),
                    u64::from(vm.tasks.as_ref()?.utilisation_ppm),
                ))
            })
            .collect();
        let unschedulable = |problem| ConfigErrorKind::Unschedulable { pcpu, problem };
        match policy {
            Policy::FixedPriority { .. } => {
                check_priorities(&placed, pcpu)?;
                let mut reserved: Vec<(VcpuName, u8, Reservation)> = placed
                    .into_iter()
                    .filter_map(|(name, params)| Some((name, params.priority, params.reservation?)))
                    .collect();
                reserved.sort_by_key(|(_, priority, _)| core::cmp::Reverse(*priority));
                let reserved: Vec<(VcpuName, Reservation)> = reserved
                    .into_iter()
                    .map(|(name, _, reservation)| (name, reservation))
                    .collect();
                admit(
                    "fixed-priority",
                    &reserved,
                    switch_cost,
                    admission::fixed_priority,
                )
                .map_err(unschedulable)?;
                // Necessary only: run-time admission tests each task's response time exactly.
                admit_allowances("fixed-priority", &reserved, &allowances, switch_cost)
                    .map_err(unschedulable)?;
            }
            Policy::Edf { .. } => {
                let reserved: Vec<(VcpuName, Reservation)> = placed
                    .into_iter()
                    .filter_map(|(name, params)| Some((name, params.reservation?)))
                    .collect();
                admit("EDF", &reserved, switch_cost, admission::edf).map_err(unschedulable)?;
                admit_allowances("EDF", &reserved, &allowances, switch_cost)
                    .map_err(unschedulable)?;
            }
            Policy::Pinned | Policy::RoundRobin { .. } => {}
        }
    }
    Ok(())
}

/// Fixed-priority ranks on `pcpu`: no two reservations at one priority, and each reservation
/// above every best-effort vCPU (which would otherwise take its time unaccounted).
fn check_priorities(placed: &[(VcpuName, Params)], pcpu: u32) -> Result<(), ConfigErrorKind> {
    for (position, (name, params)) in placed.iter().enumerate() {
        if params.reservation.is_none() {
            continue;
        }
        let subject = Subject::Vcpu(name.clone());
        let shared = placed[..position]
            .iter()
            .find(|(_, other)| other.reservation.is_some() && other.priority == params.priority);
        if let Some((other, _)) = shared {
            return Err(invalid(
                &subject,
                "priority",
                Problem::PriorityShared {
                    other: other.clone(),
                    priority: params.priority,
                    pcpu,
                },
            ));
        }
        let above = placed
            .iter()
            .find(|(_, other)| other.reservation.is_none() && other.priority >= params.priority);
        if let Some((other, other_params)) = above {
            return Err(invalid(
                &subject,
                "priority",
                Problem::ReservationBelowBestEffort {
                    priority: params.priority,
                    other: other.clone(),
                    other_priority: other_params.priority,
                    pcpu,
                },
            ));
        }
    }
    Ok(())
}

/// A reservation as admission tests it.
fn as_task(reservation: &Reservation) -> Task {
    Task {
        period: reservation.period,
        budget: reservation.budget,
        deadline: reservation.deadline,
    }
}

/// Runs admission `test` (named `policy` in messages) over `reserved`, in the order the test
/// expects, and turns a refusal into its message's figures.
fn admit(
    policy: &'static str,
    reserved: &[(VcpuName, Reservation)],
    switch_cost: u64,
    test: fn(&[Task], u64) -> Result<(), Refusal>,
) -> Result<(), Unschedulable> {
    let tasks: Vec<Task> = reserved
        .iter()
        .map(|(_, reservation)| as_task(reservation))
        .collect();
    let Err(refusal) = test(&tasks, switch_cost) else {
        return Ok(());
    };
    let name = |task: usize| reserved[task].0.clone();
    let job_length = |task: &Task| task.budget.saturating_add(switch_cost.saturating_mul(2));
    Err(match refusal {
        Refusal::Invalid { task } => Unschedulable::SwitchCostAboveDeadline {
            policy,
            vcpu: name(task),
            budget: tasks[task].budget,
            switch_cost,
            deadline: tasks[task].deadline,
        },
        Refusal::Utilisation { total_ppm } => Unschedulable::Utilisation {
            policy,
            total_ppm,
            shares: tasks
                .iter()
                .enumerate()
                .map(|(task, t)| {
                    let share = admission::utilisation_ppm(t, switch_cost);
                    (Holder::Vcpu(name(task)), share)
                })
                .collect(),
        },
        Refusal::Demand { at, demand } => Unschedulable::EdfDemand {
            at,
            demand,
            jobs: tasks
                .iter()
                .enumerate()
                .filter(|(_, t)| t.deadline <= at)
                .map(|(task, t)| (name(task), (at - t.deadline) / t.period + 1, job_length(t)))
                .collect(),
            switch_cost,
        },
        Refusal::ResponseTime {
            task,
            response,
            deadline,
        } => Unschedulable::ResponseTime {
            vcpu: name(task),
            response,
            deadline,
        },
        Refusal::TooComplex => Unschedulable::TooComplex {
            policy,
            count: tasks.len(),
        },
    })
}

/// The task allowances on a pCPU (`(vm, ppm)`, each VM with `tasks` and a vCPU there) are
/// reserved bandwidth: with the reservations' shares, each (budget + 2 × switch cost) / period
/// rounded up to a whole ppm as run-time admission counts it, they must sum to at most 1.
/// Nothing to check without allowances (the exact tests of [`admit`] have decided).
fn admit_allowances(
    policy: &'static str,
    reserved: &[(VcpuName, Reservation)],
    allowances: &[(String, u64)],
    switch_cost: u64,
) -> Result<(), Unschedulable> {
    if allowances.is_empty() {
        return Ok(());
    }
    let reservations = reserved.iter().map(|(name, reservation)| {
        let share = admission::utilisation_ppm(&as_task(reservation), switch_cost);
        (Holder::Vcpu(name.clone()), share)
    });
    let allowances = allowances
        .iter()
        .map(|(vm, ppm)| (Holder::Tasks(vm.clone()), *ppm));
    let shares: Vec<(Holder, u64)> = reservations.chain(allowances).collect();
    let total_ppm = shares.iter().map(|(_, ppm)| ppm).sum();
    if total_ppm <= u64::from(WHOLE_PPM) {
        return Ok(());
    }
    Err(Unschedulable::Utilisation {
        policy,
        total_ppm,
        shares,
    })
}
