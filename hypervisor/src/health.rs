//! Health monitoring: each VM's health events (a fault, its watchdog's expiry, deadline misses
//! over its threshold, its own power-off or reset, a manager's request) decided by its
//! `[vm.health]` policy ([`keel_core::health`]), said in one diagnostic line, sent as a notice
//! to each of its managers, and carried out: a line only, a stop, or a restart from its
//! pristine image ([`lifecycle::restart`]), at most so many within a window.
//!
//! Where events come from: a trap of the VM's own (a fault, SYSTEM_OFF, SYSTEM_RESET: the
//! caller carries out what [`decide`] returns on its own vCPU), its watchdog's expiry and
//! the misses the scheduler noted (acted on from the EL2 timer of the VM's vCPU 0's pCPU,
//! [`serve`], where no lock is held), and a manager's call (`manager`).
//!
//! Ownership and locks: each VM's [`Record`] sits behind a lock of its own, a leaf (held for
//! a decision, never while printing, sending or stopping), taken by its managers too (the
//! crate's [lock order](crate#lock-order)). The watchdog expiries and the pending events are
//! `vm`'s atomics; a manager's request is claimed by a compare-and-swap (a second one is
//! refused, not kept waiting).

use core::sync::atomic::Ordering;

use keel_core::abi::CallError;
use keel_core::health::{Action, Decision, Event, Notice, Policy, Record, VmStatus, KEEL_SENDER};
use keel_core::ipc::{MessageError, Sender};
use keel_core::ratelimit::{DiagnosticKind, NO_VM};
use keel_core::text::{Out, Show};

use crate::arch::cpu::Mutex;
use crate::arch::timer;
use crate::config::SYSTEM;
use crate::console::{self, VmLabel};
use crate::vm::{self, VmState, MAX_VMS};
use crate::{iommu, ipc, keel_println_limited, lifecycle};

/// Whether health monitoring is built in: some VM has a policy other than the default, a
/// manager or a watchdog. Without, every event takes today's action with no record, notice or
/// service, and the code is left out (as the trace is).
pub const ON: bool = crate::config::HEALTH;

/// Each VM's health record.
static RECORDS: [Mutex<Record>; MAX_VMS] = [const { Mutex::new(Record::NEW) }; MAX_VMS];

/// Whether any VM has a miss threshold (set once at boot by [`init`]): the scheduler drains its
/// journal of misses only then.
static WATCH_MISSES: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// At boot, before any guest runs: no watchdog armed; whether misses are watched.
pub fn init() {
    vm::init_watchdogs();
    let watch = SYSTEM.vms.iter().any(|desc| desc.health.misses.is_some());
    WATCH_MISSES.store(watch, Ordering::Relaxed);
}

/// Whether the scheduler is to report misses ([`note_misses`]).
#[inline(always)]
pub fn misses_watched() -> bool {
    ON && WATCH_MISSES.load(Ordering::Relaxed)
}

fn policy(id: usize) -> &'static Policy {
    &vm::desc(id).health
}

fn now_ns() -> u64 {
    timer::ticks_to_ns(timer::now())
}

/// Decides what `event` of VM `id` does, says it in one line (the reason after the VM's
/// label, `reason` saying what happened), and sends the notice to its managers. The caller
/// carries the action out: [`carry_out`] from anywhere, or on the VM's own vCPU.
pub fn decide(id: usize, event: Event, reason: &dyn Show) -> Action {
    if !ON {
        return Policy::DEFAULT.action(event);
    }
    // What came before (a trap's decoding, a console drain in the same timer interrupt), the
    // decision and its line, and the notices: each a masked stretch of its own.
    crate::irq::serve_here();
    let action = decide_and_say(id, event, reason);
    crate::irq::serve_here();
    if !policy(id).managers.is_empty() {
        notify(id, event, action);
        crate::irq::serve_here();
    }
    action
}

/// [`decide`] without the notices (the caller sends them, or hands them on).
fn decide_and_say(id: usize, event: Event, reason: &dyn Show) -> Action {
    let decision = {
        let mut record = vm::entry(&RECORDS, id).lock_cold();
        record.decide(policy(id), event, now_ns())
    };
    say(id, event, decision, reason);
    decision.action
}

/// A manager's request (`manager`): decided and said at once, in the manager's trap; its
/// notices and action are handed to the VM's vCPU 0's pCPU, which carries them out from its
/// timer ([`serve`]), so that neither is in one masked stretch with the other. Refused
/// (false) while another request for the VM waits ([`pending_request`]).
pub fn request(id: usize, event: Event, manager: usize) -> bool {
    let slot = vm::entry(&REQUESTS, id);
    // Claimed first, so that two managers cannot both decide (and count) one request.
    if slot
        .compare_exchange(0, CLAIMED, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return false;
    }
    let reason = ByManager(manager);
    let action = decide_and_say(id, event, &reason);
    let packed = u32::from(event as u8) | u32::from(action as u8) << 8 | (manager as u32) << 16;
    slot.store(packed, Ordering::Release);
    vm::note_health_event_on(vm::home_pcpu(id), id);
    true
}

/// A request being decided in a manager's trap ([`request`]): not yet for [`serve`].
const CLAIMED: u32 = u32::MAX;

/// The action of the manager's request for VM `id` that waits for its vCPU 0's pCPU, if one
/// does (`Some(None)`: one is being decided).
pub fn pending_request(id: usize) -> Option<Option<Action>> {
    match vm::entry(&REQUESTS, id).load(Ordering::Acquire) {
        0 => None,
        CLAIMED => Some(None),
        packed => Some(Action::from_code((packed >> 8) as u8)),
    }
}

/// The reason a manager's request gives: `asked by 'linux'`.
pub struct ByManager(pub usize);

impl Show for ByManager {
    fn show(&self, out: &mut dyn Out) {
        keel_core::text!(out, "asked by '", vm::desc(self.0).name, "'");
    }
}

/// Each VM's manager request handed to its vCPU 0's pCPU ([`request`]): event, action (bits
/// 8-15) and manager (bits 16-31); 0: none.
static REQUESTS: [core::sync::atomic::AtomicU32; MAX_VMS] =
    [const { core::sync::atomic::AtomicU32::new(0) }; MAX_VMS];

/// The line for `decision` on `event`. Today's lines stay as they were for today's actions:
/// a stop says `stopped: <reason>`, a power-off that stops says `powered off` (said by the
/// life cycle), a reset that restarts `resets` (said by the reload).
fn say(id: usize, event: Event, decision: Decision, reason: &dyn Show) {
    let desc = vm::desc(id);
    let label = VmLabel(desc.name, id);
    let limit = policy(id).restarts;
    let between = crate::irq::serve_here;
    match decision.action {
        Action::Stop | Action::StopAtLimit => {}
        Action::Restart if event == Event::Reset => {}
        Action::Restart => match limit {
            Some(limit) if event != Event::ManagerRestart => console::line_in_steps(
                DiagnosticKind::Reset,
                id,
                &[
                    &label,
                    &" restarts: ",
                    &reason,
                    &" (restart ",
                    &decision.in_window,
                    &" of at most ",
                    &limit.max,
                    &" within ",
                    &Millis(limit.window_ns),
                    &")",
                ],
                between,
            ),
            _ => console::line_in_steps(
                DiagnosticKind::Reset,
                id,
                &[&label, &" restarts: ", &reason],
                between,
            ),
        },
        Action::Ignore => console::line_in_steps(
            DiagnosticKind::Reset,
            id,
            &[&label, &" health: ", &reason, &" (ignored)"],
            between,
        ),
    }
}

/// Nanoseconds shown as milliseconds (`10000 ms`).
struct Millis(u64);

impl Show for Millis {
    fn show(&self, out: &mut dyn Out) {
        keel_core::text!(out, self.0 / 1_000_000, " ms");
    }
}

/// Sends the notice of `event` and `action` of VM `id` to each of its managers' vCPU 0. A full
/// queue refuses it: that is counted, and said in a line limited as the VM's other lines (a VM
/// that resets flat out while its manager is busy makes thousands a second; the first line
/// after some were left out says how many).
fn notify(id: usize, event: Event, action: Action) {
    let managers = policy(id).managers;
    if managers.is_empty() {
        return;
    }
    let (restarts, time_ns) = {
        let record = vm::entry(&RECORDS, id).lock_cold();
        (record.restarts, record.last().map_or(0, |(_, _, at)| at))
    };
    let notice = Notice {
        vm: id as u16,
        event,
        action,
        restarts,
        time_ns,
    };
    let from = Sender {
        vm: KEEL_SENDER,
        vcpu: 0,
    };
    for &manager in managers {
        let manager = usize::from(manager);
        if let Err(error) = ipc::send_bytes(from, manager, 0, &notice.to_bytes()) {
            vm::entry(&RECORDS, id).lock_cold().notices_refused += 1;
            keel_println_limited!(
                DiagnosticKind::Notice,
                id,
                VmLabel(vm::desc(id).name, id),
                ": health notice to '",
                vm::desc(manager).name,
                "' refused: ",
                RefusedNotice(error)
            );
        }
    }
}

/// Why a manager's queue refused a notice.
struct RefusedNotice(MessageError);

impl Show for RefusedNotice {
    fn show(&self, out: &mut dyn Out) {
        out.put(match self.0 {
            MessageError::QueueFull => "its queue is full",
            MessageError::DestinationStopped => "it is not running",
            _ => "its queue refused it",
        });
    }
}

/// Carries out `action` on VM `id` from anywhere but the VM's own trap (a watchdog, misses, a
/// manager): a stop (its line said here), or a restart begun (its vCPU 0's pCPU reloads it).
/// The action ends with a poll point: what follows it (its notices, the scheduler's look at the
/// VM's stopped vCPUs, a switch) is a masked stretch of its own.
pub fn carry_out(id: usize, action: Action, event: Event, reason: &dyn Show) {
    if act(id, action, event, reason) {
        crate::irq::serve_here();
    }
}

/// [`carry_out`] without its poll point: whether there was anything to do.
fn act(id: usize, action: Action, event: Event, reason: &dyn Show) -> bool {
    match action {
        Action::Ignore => return false,
        Action::Stop | Action::StopAtLimit => stop(id, action, event, reason),
        Action::Restart => lifecycle::restart(id),
    }
    true
}

/// Stops VM `id` for `event` with its line (`stopped: <reason>`, and the limit if that is why).
pub fn stop(id: usize, action: Action, event: Event, reason: &dyn Show) {
    match (action, policy(id).restarts) {
        (Action::StopAtLimit, Some(limit)) => {
            let parts: &[&dyn Show] = &[
                reason,
                &" (",
                &limit.max,
                &" restarts within ",
                &Millis(limit.window_ns),
                &": its limit)",
            ];
            lifecycle::stop(id, &parts);
        }
        _ if event == Event::PowerOff => lifecycle::power_off(id),
        _ => lifecycle::stop(id, reason),
    }
}

/// KEEL_WATCHDOG from VM `id`: its watchdog expires one period from now. Returns the period
/// (ns).
pub fn keep_watchdog(id: usize) -> Result<u64, CallError> {
    if !ON {
        return Err(CallError::NotSupported);
    }
    let period_ns = policy(id)
        .watchdog
        .map(|watchdog| watchdog.period_ns)
        .filter(|&period| period > 0)
        .ok_or(CallError::NotSupported)?;
    let ticks = period_ns.saturating_mul(timer::frequency()) / 1_000_000_000;
    vm::set_watchdog_expiry(id, Some(timer::now().saturating_add(ticks.max(1))));
    Ok(period_ns)
}

/// The scheduler saw `count` new deadline misses or budget overruns of a vCPU or task of VM
/// `id` (its lock held): counted against the VM's threshold; an event crossing it is acted on
/// from this pCPU's timer at once ([`serve`]).
pub fn note_misses(id: usize, count: u32) {
    let crossed = vm::entry(&RECORDS, id)
        .lock_cold()
        .misses(policy(id), count, now_ns());
    if crossed {
        vm::note_health_event(id);
    }
}

/// This pCPU's health deadline came (installed in `irq` by `main`): each watchdog of a VM whose
/// vCPU 0 runs here that has expired, and each event noted here, is decided and carried out;
/// then the deadline is set for what is left.
pub fn serve() {
    if !ON {
        return;
    }
    let now = timer::now();
    let here = crate::arch::cpu::index();
    let pending = vm::this_cpu().health_pending.swap(0, Ordering::AcqRel);
    for id in 0..SYSTEM.vms.len() {
        // Only a manager's trap moves the slot from 0 (to CLAIMED, then to its request), and
        // only this pCPU from a request back to 0.
        let slot = vm::entry(&REQUESTS, id);
        let request = match slot.load(Ordering::Acquire) {
            request if pending & (1 << id) != 0 && request != 0 && request != CLAIMED => request,
            _ => 0,
        };
        if let (Some(event), Some(action)) = (
            Event::from_code(request as u8),
            Action::from_code((request >> 8) as u8),
        ) {
            let reason = ByManager((request >> 16) as usize);
            act(id, action, event, &reason);
            // Taken once under way: KEEL_VM_STATUS meanwhile says what it will be. Before the
            // poll point below, whose serving could come here again (an event of this VM noted
            // meanwhile) and must not find the request again.
            slot.store(0, Ordering::Release);
            // The action, then its notices (a manager reading the VM's state on one finds it
            // done or under way), each a masked stretch of its own.
            let _ = crate::irq::serve_between_steps(keel_core::abi::MaskedSite::GuestIrq);
            notify(id, event, action);
            // And the scheduler's look at the VM's stopped vCPUs that follows (the caller
            // reschedules: what these poll points served needs nothing else).
            let _ = crate::irq::serve_between_steps(keel_core::abi::MaskedSite::GuestIrq);
        } else if pending & (1 << id) != 0
            && vm::vm(id).state() == VmState::Running
            && !vm::vm(id).is_resetting()
        {
            let misses = policy(id).misses.map_or(0, |m| m.count);
            let window = policy(id).misses.map_or(0, |m| m.window_ns);
            let reason: &[&dyn Show] = &[
                &misses,
                &" deadline misses or overruns within ",
                &Millis(window),
            ];
            let action = decide(id, Event::Misses, &reason);
            carry_out(id, action, Event::Misses, &reason);
        }
        if vm::home_pcpu(id) == here && vm::take_expired_watchdog(id, now) {
            // A VM that ended or restarts meanwhile keeps no watchdog (its new boot arms it).
            if vm::vm(id).state() != VmState::Running || vm::vm(id).is_resetting() {
                continue;
            }
            let reason = "watchdog expired";
            let action = decide(id, Event::Watchdog, &reason);
            carry_out(id, action, Event::Watchdog, &reason);
        }
    }
    vm::rearm_watchdogs();
}

/// What KEEL_VM_STATUS reports of VM `id`: its state, restarts, last event and action, and
/// when (ns).
pub fn status(id: usize) -> (VmStatus, u32, u64, u64) {
    let vm = vm::vm(id);
    // A manager's restart asked and not yet begun is under way too.
    let asked = pending_request(id) == Some(Some(Action::Restart));
    let state = if vm.is_resetting() || asked {
        VmStatus::Restarting
    } else {
        match vm.state() {
            VmState::Running => VmStatus::Running,
            VmState::Off => VmStatus::Off,
            VmState::Stopped => VmStatus::Stopped,
        }
    };
    let record = vm::entry(&RECORDS, id).lock_cold();
    let (last, at) = record.last().map_or((0, 0), |(event, action, at)| {
        (u64::from(event as u8) | u64::from(action as u8) << 8, at)
    });
    (state, record.restarts, last, at)
}

/// Whether VM `caller` may manage VM `id`.
pub fn manages(caller: usize, id: usize) -> bool {
    u8::try_from(caller).is_ok_and(|caller| policy(id).is_manager(caller))
}

/// Faults the SMMU reported at most: a queue's worth per interrupt (more stay queued for the
/// next).
const FAULTS_PER_SERVE: usize = 32;

/// The SMMU's interrupt (installed in `irq` by `main`): each fault it recorded names a stream,
/// whose VM's policy decides what the fault does (stopped by default, or restarted), said with
/// the fault in Keel's line (`DMA refused by the SMMU: translation fault: stream 8, read at
/// 0x40100000`); its streams then abort without recording until it runs again, and the first
/// fault of a VM in a batch is the one acted on, so one line per VM. A fault of no VM's stream,
/// or a global error, is reported as such, rate-limited (a device can fault flat out).
pub fn serve_device_faults() {
    let mut faults = [None; FAULTS_PER_SERVE];
    let mut count = 0;
    let global = iommu::take_faults(&mut |event| {
        if let Some(slot) = faults.get_mut(count) {
            *slot = Some(*event);
            count += 1;
        }
    });
    // Acted on with the SMMU's lock released: stopping a VM takes it to cut its streams off.
    let mut acted = 0u32;
    for event in faults.iter().flatten() {
        match iommu::stream_owner(event.stream_id) {
            Some(id) if acted & 1 << id != 0 => {}
            Some(id) if vm::vm(id).state() != VmState::Running || vm::vm(id).is_resetting() => {}
            Some(id) => {
                acted |= 1 << id;
                let reason = DmaFault(event);
                let action = decide(id, Event::Fault, &reason);
                carry_out(id, action, Event::Fault, &reason);
            }
            None => {
                keel_println_limited!(
                    DiagnosticKind::Smmu,
                    NO_VM,
                    "SMMU: ",
                    event,
                    " (no VM's stream)"
                );
            }
        }
    }
    if let Some(error) = global {
        keel_println_limited!(DiagnosticKind::Smmu, NO_VM, "SMMU global error: ", error);
    }
}

/// A VM's stop reason: its device's DMA that the SMMU refused.
struct DmaFault<'a>(&'a keel_core::smmu::Event);

impl Show for DmaFault<'_> {
    fn show(&self, out: &mut dyn Out) {
        keel_core::text!(out, "DMA refused by the SMMU: ", *self.0);
    }
}
