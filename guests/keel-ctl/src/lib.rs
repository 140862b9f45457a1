//! `keel`, a manager VM's command for Linux's shell: it starts, stops and restarts the VMs its
//! VM manages, reads their state and their vCPUs' scheduling statistics, and prints the health
//! notices Keel queued for it, through Keel's management window (`abi::manager_window`, mapped
//! from `/dev/mem`). This library is everything but the mapping: the command line
//! ([`command`]), the window's node in the device tree ([`devicetree`]), the calls and their
//! answers ([`services`]), the lines printed ([`report`]), and [`run`], which ties them
//! together; `main.rs` maps the window and runs it.

#![forbid(unsafe_code)]

pub mod command;
pub mod devicetree;
pub mod report;
pub mod services;

use std::fmt;
use std::io::Write;

use command::{Command, VmRef};
use devicetree::Managed;
use services::{Received, Refusal, Window};

/// Exit status of a refused service or another failure after the window was reached.
pub const EXIT_FAILED: u8 = 1;
/// Exit status of a command line `keel` does not understand.
pub const EXIT_USAGE: u8 = 2;
/// Exit status when this VM has no management window (or `/dev/mem` cannot map it).
pub const EXIT_NO_WINDOW: u8 = 3;

/// Most messages one `keel events` takes (a manager's queue holds at most 256; a sender that
/// keeps sending does not keep the command running).
pub const MAX_EVENTS: usize = 1024;

/// Why a command failed, as `keel: <this>` prints it.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// A VM name that is none of the VMs this VM manages.
    UnknownName {
        /// The name given.
        name: String,
        /// The names it manages.
        managed: Vec<String>,
    },
    /// Keel refused a service.
    Refused {
        /// The command's verb (`restart`).
        verb: &'static str,
        /// The VM.
        vm: u16,
        /// The vCPU, for `stats`.
        vcpu: Option<u16>,
        /// Keel's answer.
        refusal: Refusal,
    },
    /// The next queued message is longer than the window carries: it stays queued.
    MessageTooLong {
        /// Its length in bytes.
        len: u64,
    },
    /// Writing the output failed (a closed pipe).
    Output(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::UnknownName { name, managed } if managed.is_empty() => write!(
                f,
                "no VM named '{name}': this VM manages none (its device tree names none)"
            ),
            Failure::UnknownName { name, managed } => write!(
                f,
                "no VM named '{name}' among those this VM manages ({})",
                managed.join(", ")
            ),
            Failure::Refused {
                verb,
                vm,
                vcpu,
                refusal,
            } => {
                write!(f, "{verb} vm {vm}")?;
                if let Some(vcpu) = vcpu {
                    write!(f, " vcpu {vcpu}")?;
                }
                write!(f, ": {}", refusal.explained(verb, *vm, *vcpu))
            }
            Failure::MessageTooLong { len } => write!(
                f,
                "events: the next message is {len} bytes, longer than the {} the management \
                 window carries: it stays queued (take it with KEEL_MSG_RECV)",
                keel_core::abi::manager_window::MESSAGE_BYTES
            ),
            Failure::Output(error) => write!(f, "writing the output: {error}"),
        }
    }
}

/// Runs `command` (anything but [`Command::Help`], which needs no window) through `window`,
/// printing its lines on `out`; `managed` are the VMs this VM manages, by id and name, from its
/// device tree.
pub fn run(
    command: &Command,
    managed: &[Managed],
    window: &mut dyn Window,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let name_of = |id: u16| {
        managed
            .iter()
            .find(|vm| vm.id == id)
            .map(|vm| vm.name.as_str())
    };
    let resolve = |vm: &VmRef| -> Result<u16, Failure> {
        match vm {
            VmRef::Id(id) => Ok(*id),
            VmRef::Name(name) => managed
                .iter()
                .find(|vm| vm.name == *name)
                .map(|vm| vm.id)
                .ok_or_else(|| Failure::UnknownName {
                    name: name.clone(),
                    managed: managed.iter().map(|vm| vm.name.clone()).collect(),
                }),
        }
    };
    let refused = |verb, vm, vcpu| {
        move |refusal| Failure::Refused {
            verb,
            vm,
            vcpu,
            refusal,
        }
    };
    let line = |out: &mut dyn Write, text: String| {
        writeln!(out, "{text}").map_err(|error| Failure::Output(error.to_string()))
    };
    match command {
        Command::Help => line(out, command::USAGE.trim_end().to_string()),
        Command::Status(vm) => {
            let id = resolve(vm)?;
            let status = services::status(window, id).map_err(refused("status", id, None))?;
            line(out, report::status_line(id, name_of(id), &status))
        }
        Command::Start(vm) | Command::Stop(vm) | Command::Restart(vm) => {
            let id = resolve(vm)?;
            let (verb, outcome) = match command {
                Command::Start(_) => ("start", services::start(window, id)),
                Command::Stop(_) => ("stop", services::stop(window, id)),
                _ => ("restart", services::restart(window, id)),
            };
            outcome.map_err(refused(verb, id, None))?;
            line(out, report::done_line(verb, id, name_of(id)))
        }
        Command::Stats { vm, vcpu } => {
            let id = resolve(vm)?;
            let stats = services::sched_stats(window, id, *vcpu).map_err(refused(
                "stats",
                id,
                Some(*vcpu),
            ))?;
            line(out, report::stats_line(id, name_of(id), *vcpu, &stats))
        }
        Command::Resources(vm) => {
            let id = resolve(vm)?;
            let resources =
                services::resources(window, id).map_err(refused("resources", id, None))?;
            line(out, report::resources_line(id, name_of(id), &resources))
        }
        Command::Events => {
            let mut taken = 0;
            while taken < MAX_EVENTS {
                let received = services::receive(window).map_err(|refusal| Failure::Refused {
                    verb: "events",
                    vm: 0,
                    vcpu: None,
                    refusal,
                })?;
                let text = match received {
                    Received::Empty => break,
                    Received::TooLong { len } => return Err(Failure::MessageTooLong { len }),
                    Received::Notice(notice) => report::notice_line(&notice, name_of(notice.vm)),
                    Received::Message { vm, vcpu, bytes } => report::message_line(vm, vcpu, &bytes),
                };
                line(out, text)?;
                taken += 1;
            }
            if taken == 0 {
                line(out, "no events queued".to_string())?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::abi;
    use keel_core::health::{Action, Event, Notice, KEEL_SENDER};
    use services::tests::Scripted;

    fn managed() -> Vec<Managed> {
        vec![Managed {
            id: 1,
            name: "rt".into(),
        }]
    }

    fn run_text(command: &Command, window: &mut Scripted) -> (Result<(), Failure>, String) {
        let mut out = Vec::new();
        let outcome = run(command, &managed(), window, &mut out);
        (outcome, String::from_utf8(out).unwrap())
    }

    #[test]
    fn status_by_name_asks_for_the_named_vm() {
        let mut window = Scripted::answering(&[[0, 2, 0x0202, 1_234_000_000, 0, 0, 0, 0]]);
        let (outcome, text) = run_text(&Command::Status(VmRef::Name("rt".into())), &mut window);
        assert_eq!(outcome, Ok(()));
        assert_eq!(
            text,
            "vm 1 (rt): running, 2 restarts, last: watchdog expired -> restarting at 1.234 s\n"
        );
        assert_eq!(window.calls, [(abi::KEEL_VM_STATUS, vec![1])]);
    }

    #[test]
    fn an_unknown_name_is_named_with_the_managed_ones_and_nothing_is_called() {
        let mut window = Scripted::answering(&[]);
        let (outcome, text) = run_text(&Command::Restart(VmRef::Name("linux".into())), &mut window);
        let failure = outcome.unwrap_err();
        assert_eq!(
            failure.to_string(),
            "no VM named 'linux' among those this VM manages (rt)"
        );
        assert!(text.is_empty());
        assert!(window.calls.is_empty());
    }

    #[test]
    fn a_denied_restart_is_an_error_naming_the_vm() {
        let mut window =
            Scripted::answering(&[[abi::CallError::Denied.to_x0(), 0, 0, 0, 0, 0, 0, 0]]);
        let (outcome, text) = run_text(&Command::Restart(VmRef::Id(2)), &mut window);
        assert_eq!(
            outcome.unwrap_err().to_string(),
            "restart vm 2: denied (this VM does not manage vm 2)"
        );
        assert!(text.is_empty());
        assert_eq!(window.calls, [(abi::KEEL_VM_RESTART, vec![2])]);
    }

    #[test]
    fn restart_start_and_stop_say_what_was_asked() {
        for (command, function, expected) in [
            (
                Command::Restart(VmRef::Id(1)),
                abi::KEEL_VM_RESTART,
                "vm 1 (rt): restarting\n",
            ),
            (
                Command::Stop(VmRef::Id(1)),
                abi::KEEL_VM_STOP,
                "vm 1 (rt): stopped\n",
            ),
            (
                Command::Start(VmRef::Id(3)),
                abi::KEEL_VM_START,
                "vm 3: starting\n",
            ),
        ] {
            let mut window = Scripted::answering(&[[0; 8]]);
            let (outcome, text) = run_text(&command, &mut window);
            assert_eq!(outcome, Ok(()), "{command:?}");
            assert_eq!(text, expected);
            assert_eq!(window.calls[0].0, function);
        }
    }

    #[test]
    fn stats_pass_the_vcpu_and_explain_a_pinned_vcpu() {
        let mut window = Scripted::answering(&[[5000, 1, 2, 123_456, 0, 0, 0, 0]]);
        let stats = Command::Stats {
            vm: VmRef::Id(1),
            vcpu: 0,
        };
        let (outcome, text) = run_text(&stats, &mut window);
        assert_eq!(outcome, Ok(()));
        assert_eq!(
            text,
            "vm 1 (rt) vcpu 0: 5000 jobs, 1 deadline miss, 2 budget overruns, worst response 123.456 us\n"
        );
        assert_eq!(window.calls, [(abi::KEEL_VM_SCHED_STATS, vec![1, 0])]);

        let mut window =
            Scripted::answering(&[[abi::CallError::NotSupported.to_x0(), 0, 0, 0, 0, 0, 0, 0]]);
        let (outcome, _) = run_text(&stats, &mut window);
        assert_eq!(
            outcome.unwrap_err().to_string(),
            "stats vm 1 vcpu 0: not supported (vm 1 vcpu 0 is on a pinned pCPU, where nothing \
             is counted, or has not started)"
        );
    }

    fn received(notice: &Notice) -> [u64; 8] {
        let bytes = notice.to_bytes();
        let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        [16, u64::from(KEEL_SENDER), 0, 0, word(0), word(1), 0, 0]
    }

    #[test]
    fn events_print_every_queued_notice_and_message_until_the_queue_is_empty() {
        let notice = Notice {
            vm: 1,
            event: Event::ManagerRestart,
            action: Action::Restart,
            restarts: 1,
            time_ns: 12_345_678_901,
        };
        let hello = u64::from_le_bytes(*b"hello\0\0\0");
        let empty = keel_core::ipc::MessageError::Empty.code() as u64;
        let mut window = Scripted::answering(&[
            received(&notice),
            [5, 2, 0, 1, hello, 0, 0, 0],
            [empty, 0, 0, 0, 0, 0, 0, 0],
        ]);
        let (outcome, text) = run_text(&Command::Events, &mut window);
        assert_eq!(outcome, Ok(()));
        assert_eq!(
            text,
            "event: vm 1 (rt): restart asked by a manager -> restarting at 12.345 s, 1 restart since boot\n\
             message: from vm 2 vcpu 0, 5 bytes: 68656c6c6f\n"
        );
        assert_eq!(window.calls.len(), 3);
        assert!(window
            .calls
            .iter()
            .all(|(function, _)| *function == abi::KEEL_MSG_RECV));
    }

    #[test]
    fn no_events_is_said_and_a_long_message_is_an_error() {
        let empty = keel_core::ipc::MessageError::Empty.code() as u64;
        let mut window = Scripted::answering(&[[empty, 0, 0, 0, 0, 0, 0, 0]]);
        let (outcome, text) = run_text(&Command::Events, &mut window);
        assert_eq!((outcome, text.as_str()), (Ok(()), "no events queued\n"));

        let too_small = keel_core::ipc::MessageError::BufferTooSmall.code() as u64;
        let mut window = Scripted::answering(&[[too_small, 100, 0, 0, 0, 0, 0, 0]]);
        let (outcome, _) = run_text(&Command::Events, &mut window);
        assert_eq!(outcome, Err(Failure::MessageTooLong { len: 100 }));
        assert!(outcome
            .unwrap_err()
            .to_string()
            .starts_with("events: the next message is 100 bytes, longer than the 32 "));
    }
}
