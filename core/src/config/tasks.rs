//! The rules of a VM's `tasks` table: pCPUs that take reservations, how many tasks, how much of
//! each pCPU, and which other VMs manage them (the allowance's admission is in `schedule`).

use super::error::{ConfigErrorKind, Problem, Subject};
use super::model::{Tasks, MAX_VCPUS};
use super::schedule;
use super::schema::VmTable;
use crate::sched::Policy;
use crate::system::MAX_TASKS_PER_VM;

/// VM `index`'s `tasks` (its `pcpus` already checked), reported under `subject`; `names` are
/// the names of every VM in the file, in order (a manager may come later than the VM).
pub fn check_tasks(
    table: &VmTable,
    index: usize,
    subject: &Subject,
    policies: &[Policy],
    names: &[&str],
) -> Result<Option<Tasks>, ConfigErrorKind> {
    let Some(tasks) = &table.tasks else {
        return Ok(None);
    };
    let at = |field: &'static str, problem: Problem| ConfigErrorKind::Invalid {
        subject: subject.clone(),
        field,
        problem,
    };
    for &pcpu in &table.pcpus {
        if let Some(policy) = schedule::without_reservations(policies[pcpu as usize]) {
            return Err(at("tasks", Problem::TasksOnPcpu { pcpu, policy }));
        }
    }

    let max = u8::try_from(tasks.max)
        .ok()
        .filter(|max| (1..=MAX_TASKS_PER_VM).contains(&usize::from(*max)))
        .ok_or_else(|| {
            at(
                "tasks.max",
                Problem::MaxTasksOutOfRange {
                    value: tasks.max,
                    max: MAX_TASKS_PER_VM,
                },
            )
        })?;
    if table.pcpus.len() + usize::from(max) > MAX_VCPUS {
        return Err(at(
            "tasks.max",
            Problem::TasksExceedVcpus {
                tasks: max,
                vcpus: table.pcpus.len(),
                max: MAX_VCPUS,
            },
        ));
    }

    let utilisation_ppm = tasks
        .utilisation
        .ppm()
        .map_err(|error| at("tasks.utilisation", Problem::BadPercent(error)))?;
    if utilisation_ppm == 0 {
        return Err(at("tasks.utilisation", Problem::Zero));
    }

    let mut managers = Vec::with_capacity(tasks.managers.len());
    for (position, name) in tasks.managers.iter().enumerate() {
        let problem = |problem| at("tasks.managers", problem);
        let Some(id) = names.iter().position(|other| other == name) else {
            return Err(problem(Problem::UnknownVm { name: name.clone() }));
        };
        if id == index {
            return Err(problem(Problem::ManagerIsItself { name: name.clone() }));
        }
        if tasks.managers[..position].contains(name) {
            return Err(problem(Problem::VmListedTwice { name: name.clone() }));
        }
        managers.push(u8::try_from(id).expect("MAX_VMS fits a u8"));
    }
    Ok(Some(Tasks {
        max,
        utilisation_ppm,
        managers,
    }))
}
