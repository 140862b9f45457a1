//! The rules of a VM's `[vm.health]` table: the action for each health event, its watchdog, its
//! threshold of deadline misses, its restart limit, and the VMs that manage it (each of which
//! receives its notices as messages, so has a `messages` table and no virtio console that would
//! take them as input).

use super::error::{ConfigErrorKind, Problem, Subject};
use super::model::{Health, Vm};
use super::schema::{ActionText, VmTable};
use crate::health::{Action, Misses, Notice, Policy, RestartLimit, Watchdog, MAX_COUNT};

/// VM `index`'s `health` (`watchdog_device`: whether `devices` names the SP805), reported under
/// `subject`; `names` are the names of every VM in the file, in order (a manager may come
/// later than the VM). The managers' own tables are checked once every VM is read, by
/// [`check_managers`].
pub fn check_health(
    table: &VmTable,
    index: usize,
    subject: &Subject,
    watchdog_device: bool,
    names: &[&str],
) -> Result<Health, ConfigErrorKind> {
    let at = |field: &'static str, problem: Problem| ConfigErrorKind::Invalid {
        subject: subject.clone(),
        field,
        problem,
    };
    let Some(health) = &table.health else {
        if watchdog_device {
            return Err(at("devices", Problem::WatchdogDeviceWithoutAction));
        }
        return Ok(Health {
            policy: Policy::DEFAULT,
            managers: Vec::new(),
        });
    };
    let stop_or_restart = |field: &'static str, text: &Option<ActionText>, default: Action| {
        let Some(text) = text else {
            return Ok(default);
        };
        match action(&text.0) {
            Some(Action::Ignore) | None => Err(at(
                field,
                Problem::BadAction {
                    given: text.0.clone(),
                    allowed: "\"stop\" or \"restart\"",
                },
            )),
            Some(action) => Ok(action),
        }
    };
    let any_action = |field: &'static str, text: &ActionText| {
        action(&text.0).ok_or_else(|| {
            at(
                field,
                Problem::BadAction {
                    given: text.0.clone(),
                    allowed: "\"stop\", \"restart\" or \"ignore\"",
                },
            )
        })
    };
    let fault = stop_or_restart("health.fault", &health.fault, Action::Stop)?;
    let power_off = stop_or_restart("health.power_off", &health.power_off, Action::Stop)?;
    let reset = stop_or_restart("health.reset", &health.reset, Action::Restart)?;

    let watchdog = match &health.watchdog {
        None if watchdog_device => {
            return Err(at("devices", Problem::WatchdogDeviceWithoutAction));
        }
        None => None,
        Some(table) => {
            let action = any_action("health.watchdog.action", &table.action)?;
            let period_ns = match &table.period {
                Some(period) => {
                    let ns = period.nanoseconds().map_err(|error| {
                        at("health.watchdog.period", Problem::BadDuration(error))
                    })?;
                    if ns == 0 {
                        return Err(at("health.watchdog.period", Problem::Zero));
                    }
                    ns
                }
                None if watchdog_device => 0,
                None => return Err(at("health.watchdog", Problem::WatchdogWithoutPeriod)),
            };
            Some(Watchdog { period_ns, action })
        }
    };

    let misses = match &health.misses {
        None => None,
        Some(table) => {
            let count = count_in_range(table.count)
                .ok_or_else(|| at("health.misses.count", count_problem(table.count)))?;
            let window_ns =
                window(&table.window).map_err(|problem| at("health.misses.window", problem))?;
            let action = any_action("health.misses.action", &table.action)?;
            Some(Misses {
                count,
                window_ns,
                action,
            })
        }
    };

    let restarts = match &health.restarts {
        None => None,
        Some(table) => {
            let max = count_in_range(table.max)
                .ok_or_else(|| at("health.restarts.max", count_problem(table.max)))?;
            let window_ns =
                window(&table.window).map_err(|problem| at("health.restarts.window", problem))?;
            Some(RestartLimit { max, window_ns })
        }
    };

    let mut managers = Vec::with_capacity(health.managers.len());
    for (position, name) in health.managers.iter().enumerate() {
        let problem = |problem| at("health.managers", problem);
        let Some(id) = names.iter().position(|other| other == name) else {
            return Err(problem(Problem::UnknownVm { name: name.clone() }));
        };
        if id == index {
            return Err(problem(Problem::HealthManagerIsItself {
                name: name.clone(),
            }));
        }
        if health.managers[..position].contains(name) {
            return Err(problem(Problem::VmListedTwice { name: name.clone() }));
        }
        managers.push(u8::try_from(id).expect("MAX_VMS fits a u8"));
    }
    Ok(Health {
        policy: Policy {
            fault,
            power_off,
            reset,
            watchdog,
            misses,
            restarts,
            managers: &[],
        },
        managers,
    })
}

/// Every VM named in some VM's `health.managers` receives that VM's notices as messages in its
/// vCPU 0's queue: it has a `messages` table that takes a [`Notice`], and no virtio console
/// (whose input is its vCPU 0's messages). A `messages` table that names no sender is a
/// manager's (Keel's notices are all it takes), or refused.
pub fn check_managers(vms: &[Vm]) -> Result<(), ConfigErrorKind> {
    for (id, vm) in vms.iter().enumerate() {
        let manages = vms
            .iter()
            .any(|other| other.health.managers.iter().any(|&m| usize::from(m) == id));
        if vm.messages.as_ref().is_some_and(|m| m.senders.is_empty()) && !manages {
            return Err(ConfigErrorKind::Invalid {
                subject: Subject::Vm(vm.name.clone()),
                field: "messages.from",
                problem: Problem::NoSenders,
            });
        }
    }
    for vm in vms {
        for &manager in &vm.health.managers {
            let Some(manager_vm) = vms.get(usize::from(manager)) else {
                continue;
            };
            let problem = match &manager_vm.messages {
                _ if manager_vm.virtio_console.is_some() => {
                    Some(Problem::ManagerHasVirtioConsole {
                        managed: vm.name.clone(),
                    })
                }
                None => Some(Problem::ManagerWithoutMessages {
                    managed: vm.name.clone(),
                    size: Notice::LEN,
                }),
                Some(messages) if usize::from(messages.size) < Notice::LEN => {
                    Some(Problem::ManagerWithoutMessages {
                        managed: vm.name.clone(),
                        size: Notice::LEN,
                    })
                }
                Some(_) => None,
            };
            if let Some(problem) = problem {
                return Err(ConfigErrorKind::Invalid {
                    subject: Subject::Vm(manager_vm.name.clone()),
                    field: "messages",
                    problem,
                });
            }
        }
    }
    Ok(())
}

fn action(text: &str) -> Option<Action> {
    match text {
        "stop" => Some(Action::Stop),
        "restart" => Some(Action::Restart),
        "ignore" => Some(Action::Ignore),
        _ => None,
    }
}

fn count_in_range(value: i64) -> Option<u8> {
    u8::try_from(value)
        .ok()
        .filter(|count| (1..=MAX_COUNT).contains(&usize::from(*count)))
}

fn count_problem(value: i64) -> Problem {
    Problem::HealthCountOutOfRange {
        value,
        max: MAX_COUNT,
    }
}

fn window(text: &super::duration::DurationText) -> Result<u64, Problem> {
    let ns = text.nanoseconds().map_err(Problem::BadDuration)?;
    if ns == 0 {
        return Err(Problem::Zero);
    }
    Ok(ns)
}
