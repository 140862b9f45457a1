//! The services of Keel's management window (`keel_core::abi::manager_window`) and their
//! answers: a call writes its arguments (x1..) and the function id, and reads the results
//! (x0..) back; x0 negative is a refusal.

use keel_core::abi::{self, CallError};
use keel_core::health::{Action, Event, Notice, VmStatus, KEEL_SENDER};
use keel_core::ipc::MessageError;

/// A management window: one call through its registers.
pub trait Window {
    /// Writes `args` as x1.. (at most six), then `function`, and reads the first `results`
    /// results (x0..; at most eight, the rest returned as 0).
    fn call(&mut self, function: u32, args: &[u64], results: usize) -> [u64; 8];
}

/// Why Keel refused a service (x0 negative).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// DENIED: this VM does not manage that one.
    Denied,
    /// INVALID_PARAMETERS: no such VM (or vCPU).
    InvalidParameters,
    /// NOT_SUPPORTED: the service cannot answer for this VM or vCPU, or does not exist.
    NotSupported,
    /// ALREADY_ON: a start of a VM that runs.
    AlreadyOn,
    /// ON_PENDING: a stop of a VM being restarted (its restart would run it again).
    OnPending,
    /// Another code.
    Other(i64),
}

impl Refusal {
    /// The refusal x0 holds, if it is one (a negative value).
    pub fn from_x0(x0: u64) -> Option<Refusal> {
        let code = x0 as i64;
        if code >= 0 {
            return None;
        }
        Some(match code {
            c if c == CallError::Denied as i64 => Refusal::Denied,
            c if c == CallError::InvalidParameters as i64 => Refusal::InvalidParameters,
            c if c == CallError::NotSupported as i64 => Refusal::NotSupported,
            c if c == CallError::AlreadyOn as i64 => Refusal::AlreadyOn,
            c if c == CallError::OnPending as i64 => Refusal::OnPending,
            c => Refusal::Other(c),
        })
    }

    /// What it means for `verb` of VM `vm` (vCPU `vcpu` for `stats`).
    pub fn explained(self, verb: &str, vm: u16, vcpu: Option<u16>) -> String {
        match (self, vcpu) {
            (Refusal::Denied, _) if verb == "events" => {
                "denied (this VM has no message queue)".into()
            }
            (Refusal::Denied, _) => format!("denied (this VM does not manage vm {vm})"),
            (Refusal::InvalidParameters, Some(vcpu)) => {
                format!("invalid parameters (there is no vm {vm} or it has no vcpu {vcpu})")
            }
            (Refusal::InvalidParameters, None) => {
                format!("invalid parameters (there is no vm {vm})")
            }
            (Refusal::NotSupported, Some(vcpu)) => format!(
                "not supported (vm {vm} vcpu {vcpu} is on a pinned pCPU, where nothing is \
                 counted, or has not started)"
            ),
            (Refusal::NotSupported, None) => {
                "not supported (this Keel does not have the service)".into()
            }
            (Refusal::AlreadyOn, _) => format!("already on (vm {vm} runs or is restarting)"),
            (Refusal::OnPending, _) => {
                format!("on pending (vm {vm} is restarting: ask again once it runs)")
            }
            (Refusal::Other(code), _) => format!("refused with code {code}"),
        }
    }
}

/// The last health event of a VM and the action taken, as KEEL_VM_STATUS reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastEvent {
    /// The event, or its code if this `keel` does not know it.
    pub event: Result<Event, u8>,
    /// The action, or its code.
    pub action: Result<Action, u8>,
    /// When, in nanoseconds since boot.
    pub time_ns: u64,
}

/// A VM's state as KEEL_VM_STATUS reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// Its state, or its code if this `keel` does not know it.
    pub state: Result<VmStatus, u64>,
    /// Its restarts since boot.
    pub restarts: u64,
    /// Its last health event, if it had one.
    pub last: Option<LastEvent>,
}

/// A vCPU's scheduling statistics (KEEL_VM_SCHED_STATS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedStats {
    /// Jobs released.
    pub jobs: u64,
    /// Deadline misses.
    pub misses: u64,
    /// Budget overruns.
    pub overruns: u64,
    /// Worst response time in nanoseconds.
    pub worst_ns: u64,
}

pub use keel_core::health::Resources;

/// What KEEL_MSG_RECV through the window took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Received {
    /// Nothing is queued.
    Empty,
    /// A health notice from Keel.
    Notice(Notice),
    /// A message from a VM (or one from Keel that is not a notice this `keel` knows).
    Message {
        /// The sender's VM ([`KEEL_SENDER`] for Keel).
        vm: u16,
        /// Its vCPU.
        vcpu: u16,
        /// Its bytes.
        bytes: Vec<u8>,
    },
    /// The next message is longer than the window carries; it stays queued.
    TooLong {
        /// Its length.
        len: u64,
    },
}

/// x0 as a result, or its refusal.
fn answer(x0: u64) -> Result<u64, Refusal> {
    match Refusal::from_x0(x0) {
        Some(refusal) => Err(refusal),
        None => Ok(x0),
    }
}

/// KEEL_VM_STATUS of VM `vm`.
pub fn status(window: &mut dyn Window, vm: u16) -> Result<Status, Refusal> {
    let x = window.call(abi::KEEL_VM_STATUS, &[u64::from(vm)], 4);
    let state = answer(x[0])?;
    let last = (x[2] != 0).then(|| {
        let event = (x[2] & 0xff) as u8;
        let action = (x[2] >> 8 & 0xff) as u8;
        LastEvent {
            event: Event::from_code(event).ok_or(event),
            action: Action::from_code(action).ok_or(action),
            time_ns: x[3],
        }
    });
    Ok(Status {
        state: VmStatus::from_code(state).ok_or(state),
        restarts: x[1],
        last,
    })
}

/// KEEL_VM_START of VM `vm`.
pub fn start(window: &mut dyn Window, vm: u16) -> Result<(), Refusal> {
    answer(window.call(abi::KEEL_VM_START, &[u64::from(vm)], 1)[0]).map(drop)
}

/// KEEL_VM_STOP of VM `vm`.
pub fn stop(window: &mut dyn Window, vm: u16) -> Result<(), Refusal> {
    answer(window.call(abi::KEEL_VM_STOP, &[u64::from(vm)], 1)[0]).map(drop)
}

/// KEEL_VM_RESTART of VM `vm`.
pub fn restart(window: &mut dyn Window, vm: u16) -> Result<(), Refusal> {
    answer(window.call(abi::KEEL_VM_RESTART, &[u64::from(vm)], 1)[0]).map(drop)
}

/// KEEL_VM_SCHED_STATS of vCPU `vcpu` of VM `vm`.
pub fn sched_stats(window: &mut dyn Window, vm: u16, vcpu: u16) -> Result<SchedStats, Refusal> {
    let x = window.call(
        abi::KEEL_VM_SCHED_STATS,
        &[u64::from(vm), u64::from(vcpu)],
        4,
    );
    Ok(SchedStats {
        jobs: answer(x[0])?,
        misses: x[1],
        overruns: x[2],
        worst_ns: x[3],
    })
}

/// KEEL_VM_RESOURCES of VM `vm`.
pub fn resources(window: &mut dyn Window, vm: u16) -> Result<Resources, Refusal> {
    let x = window.call(abi::KEEL_VM_RESOURCES, &[u64::from(vm)], 4);
    Ok(Resources::from_results([answer(x[0])?, x[1], x[2], x[3]]))
}

/// KEEL_MSG_RECV through the window: the next message queued for this VM's vCPU 0, taken.
pub fn receive(window: &mut dyn Window) -> Result<Received, Refusal> {
    let x = window.call(abi::KEEL_MSG_RECV, &[], 8);
    match MessageError::from_x0(x[0]) {
        Some(MessageError::Empty) => return Ok(Received::Empty),
        Some(MessageError::BufferTooSmall) => return Ok(Received::TooLong { len: x[1] }),
        Some(_) | None => {}
    }
    let len = answer(x[0])? as usize;
    let mut bytes: Vec<u8> = x[4..8].iter().flat_map(|word| word.to_le_bytes()).collect();
    bytes.truncate(len.min(abi::manager_window::MESSAGE_BYTES));
    let (vm, vcpu) = (x[1] as u16, x[2] as u16);
    if vm == KEEL_SENDER {
        if let Some(notice) = Notice::from_bytes(&bytes) {
            return Ok(Received::Notice(notice));
        }
    }
    Ok(Received::Message { vm, vcpu, bytes })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A window that answers each call with the next of its scripted results and records the
    /// calls (function, arguments); it checks the counts the trait promises.
    pub struct Scripted {
        answers: std::collections::VecDeque<[u64; 8]>,
        pub calls: Vec<(u32, Vec<u64>)>,
    }

    impl Scripted {
        pub fn answering(answers: &[[u64; 8]]) -> Scripted {
            Scripted {
                answers: answers.iter().copied().collect(),
                calls: Vec::new(),
            }
        }
    }

    impl Window for Scripted {
        fn call(&mut self, function: u32, args: &[u64], results: usize) -> [u64; 8] {
            assert!(args.len() <= abi::manager_window::ARG_COUNT as usize);
            assert!(results <= abi::manager_window::RESULT_COUNT as usize);
            self.calls.push((function, args.to_vec()));
            let all = self.answers.pop_front().expect("a call beyond the script");
            let mut read = [0; 8];
            read[..results].copy_from_slice(&all[..results]);
            read
        }
    }

    #[test]
    fn refusals_from_x0() {
        assert_eq!(Refusal::from_x0(0), None);
        assert_eq!(Refusal::from_x0(7), None);
        assert_eq!(
            Refusal::from_x0(CallError::Denied.to_x0()),
            Some(Refusal::Denied)
        );
        assert_eq!(
            Refusal::from_x0(CallError::InvalidParameters.to_x0()),
            Some(Refusal::InvalidParameters)
        );
        assert_eq!(
            Refusal::from_x0(CallError::OnPending.to_x0()),
            Some(Refusal::OnPending)
        );
        assert_eq!(
            Refusal::OnPending.explained("stop", 1, None),
            "on pending (vm 1 is restarting: ask again once it runs)"
        );
        assert_eq!(Refusal::from_x0(-40i64 as u64), Some(Refusal::Other(-40)));
    }

    #[test]
    fn status_decodes_state_restarts_and_the_last_event() {
        let mut window = Scripted::answering(&[
            [2, 3, 0x0301, 5, 0, 0, 0, 0],
            [0, 0, 0, 0, 0, 0, 0, 0],
            [9, 0, 0x0063, 1, 0, 0, 0, 0],
        ]);
        assert_eq!(
            status(&mut window, 4),
            Ok(Status {
                state: Ok(VmStatus::Stopped),
                restarts: 3,
                last: Some(LastEvent {
                    event: Ok(Event::Fault),
                    action: Ok(Action::StopAtLimit),
                    time_ns: 5
                })
            })
        );
        assert_eq!(status(&mut window, 4).unwrap().last, None);
        // Codes a newer Keel may add are kept, not refused.
        let unknown = status(&mut window, 4).unwrap();
        assert_eq!(unknown.state, Err(9));
        assert_eq!(unknown.last.unwrap().event, Err(0x63));
        assert_eq!(window.calls[0], (abi::KEEL_VM_STATUS, vec![4]));
    }

    #[test]
    fn resources_split_x3_into_interrupts_dma_and_watchdog() {
        let mut window = Scripted::answering(&[
            [2, 3, 4, 5 | 1 << 32, 0, 0, 0, 0],
            [0, 0, 1, 1 << 33, 0, 0, 0, 0],
            [CallError::Denied.to_x0(), 0, 0, 0, 0, 0, 0, 0],
        ]);
        assert_eq!(
            resources(&mut window, 1),
            Ok(Resources {
                messages: 2,
                tasks: 3,
                slots: 4,
                raised: 5,
                dma: true,
                watchdog: false
            })
        );
        let second = resources(&mut window, 1).unwrap();
        assert_eq!(
            (second.raised, second.dma, second.watchdog),
            (0, false, true)
        );
        assert_eq!(resources(&mut window, 1), Err(Refusal::Denied));
        assert_eq!(window.calls[0], (abi::KEEL_VM_RESOURCES, vec![1]));
    }

    #[test]
    fn a_notice_is_taken_only_from_keel_and_whole() {
        let notice = Notice {
            vm: 1,
            event: Event::Watchdog,
            action: Action::Restart,
            restarts: 2,
            time_ns: 99,
        };
        let bytes = notice.to_bytes();
        let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        let mut window = Scripted::answering(&[
            [16, u64::from(KEEL_SENDER), 0, 2, word(0), word(1), 0, 0],
            // The same bytes from a VM are a message.
            [16, 3, 1, 1, word(0), word(1), 0, 0],
            [
                MessageError::BufferTooSmall.code() as u64,
                40,
                0,
                0,
                0,
                0,
                0,
                0,
            ],
            [MessageError::Empty.code() as u64, 0, 0, 0, 0, 0, 0, 0],
        ]);
        assert_eq!(receive(&mut window), Ok(Received::Notice(notice)));
        assert_eq!(
            receive(&mut window),
            Ok(Received::Message {
                vm: 3,
                vcpu: 1,
                bytes: bytes.to_vec()
            })
        );
        assert_eq!(receive(&mut window), Ok(Received::TooLong { len: 40 }));
        assert_eq!(receive(&mut window), Ok(Received::Empty));
    }
}
