//! Health monitoring (XtratuM's health monitor, Jailhouse's cell management): the events that
//! say a VM has failed or ended, the action its configuration takes for each, a limit on
//! restarts over a window, a threshold of deadline misses over a window, and the record a
//! manager VM reads. Plain data and decisions; the hypervisor carries the actions out.
//!
//! Every event and the action taken is one diagnostic line, and a message to each of the VM's
//! managers ([`Notice`], sent by Keel as [`KEEL_SENDER`]).

/// A VM's health event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Event {
    /// It broke a rule: a stage-2 fault, a forbidden register or device access, its own crash
    /// report (KEEL_CRASH), a DMA the SMMU refused: Keel's stop reasons.
    Fault = 1,
    /// Its watchdog expired (KEEL_WATCHDOG or its SP805 not kept).
    Watchdog = 2,
    /// Its vCPUs or tasks missed deadlines or overran budgets `count` times in the window.
    Misses = 3,
    /// It powered itself off (PSCI SYSTEM_OFF).
    PowerOff = 4,
    /// It reset itself (PSCI SYSTEM_RESET).
    Reset = 5,
    /// A manager VM asked for it to stop.
    ManagerStop = 6,
    /// A manager VM asked for it to restart (or to start, when it had ended).
    ManagerRestart = 7,
}

impl Event {
    /// Every event, in code order.
    pub const ALL: [Event; 7] = [
        Event::Fault,
        Event::Watchdog,
        Event::Misses,
        Event::PowerOff,
        Event::Reset,
        Event::ManagerStop,
        Event::ManagerRestart,
    ];

    /// The event with code `code`.
    pub fn from_code(code: u8) -> Option<Event> {
        Self::ALL.into_iter().find(|event| *event as u8 == code)
    }

    /// Its name in diagnostics and in the manager's tools.
    pub const fn name(self) -> &'static str {
        match self {
            Event::Fault => "fault",
            Event::Watchdog => "watchdog expired",
            Event::Misses => "deadline misses",
            Event::PowerOff => "powered off",
            Event::Reset => "reset",
            Event::ManagerStop => "stop asked by a manager",
            Event::ManagerRestart => "restart asked by a manager",
        }
    }
}

/// What Keel does on an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Action {
    /// A diagnostic line and the managers' notice only (deadline misses and watchdog only).
    Ignore = 0,
    /// The VM is stopped: every vCPU off, its devices' interrupts and DMA cut off, until a
    /// manager starts it.
    Stop = 1,
    /// The VM restarts from its pristine image, in bounded steps.
    Restart = 2,
    /// The VM was to restart but had restarted its limit within the window: it is stopped.
    StopAtLimit = 3,
}

impl Action {
    /// The action with code `code`.
    pub fn from_code(code: u8) -> Option<Action> {
        [
            Action::Ignore,
            Action::Stop,
            Action::Restart,
            Action::StopAtLimit,
        ]
        .into_iter()
        .find(|action| *action as u8 == code)
    }

    /// Its name in diagnostics.
    pub const fn name(self) -> &'static str {
        match self {
            Action::Ignore => "ignored",
            Action::Stop => "stopped",
            Action::Restart => "restarting",
            Action::StopAtLimit => "stopped at its restart limit",
        }
    }
}

/// Most restarts a limit may count (`restarts.max`), and most misses a threshold may
/// (`misses.count`): each kept as a time in a fixed ring.
pub const MAX_COUNT: usize = 16;

/// A VM's watchdog (`health.watchdog`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watchdog {
    /// KEEL_WATCHDOG's period in nanoseconds: the VM must call it at least this often once it
    /// has called it once (0: no KEEL_WATCHDOG, only an emulated SP805 if it has one).
    pub period_ns: u64,
    /// What its expiry does.
    pub action: Action,
}

/// A threshold of deadline misses and budget overruns (`health.misses`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Misses {
    /// This many misses or overruns of any of the VM's vCPUs or tasks ...
    pub count: u8,
    /// ... within this many nanoseconds make an event.
    pub window_ns: u64,
    /// What the event does.
    pub action: Action,
}

/// A limit on restarts (`health.restarts`): at most `max` within `window_ns`, then the VM is
/// stopped instead ([`Action::StopAtLimit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartLimit {
    /// Most restarts within the window (1..=[`MAX_COUNT`]).
    pub max: u8,
    /// The window in nanoseconds.
    pub window_ns: u64,
}

/// A VM's health policy (its `[vm.health]` table; defaults: faults and power-off stop the VM,
/// its own reset restarts it, no watchdog, no miss threshold, no restart limit, no manager).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// On [`Event::Fault`]: [`Action::Stop`] or [`Action::Restart`].
    pub fault: Action,
    /// On [`Event::PowerOff`].
    pub power_off: Action,
    /// On [`Event::Reset`].
    pub reset: Action,
    /// Its watchdog, if it has one.
    pub watchdog: Option<Watchdog>,
    /// Its miss threshold, if it has one.
    pub misses: Option<Misses>,
    /// Its restart limit, if it has one.
    pub restarts: Option<RestartLimit>,
    /// The VMs (by id) that may start, stop, restart and read it, and are sent its events.
    pub managers: &'static [u8],
}

impl Policy {
    /// Today's behaviour, without a `[vm.health]` table.
    pub const DEFAULT: Policy = Policy {
        fault: Action::Stop,
        power_off: Action::Stop,
        reset: Action::Restart,
        watchdog: None,
        misses: None,
        restarts: None,
        managers: &[],
    };

    /// The action the policy names for `event` (before the restart limit).
    pub fn action(&self, event: Event) -> Action {
        match event {
            Event::Fault => self.fault,
            Event::Watchdog => self.watchdog.map_or(Action::Ignore, |w| w.action),
            Event::Misses => self.misses.map_or(Action::Ignore, |m| m.action),
            Event::PowerOff => self.power_off,
            Event::Reset => self.reset,
            Event::ManagerStop => Action::Stop,
            Event::ManagerRestart => Action::Restart,
        }
    }

    /// Whether VM `caller` may manage a VM with this policy (start, stop, restart, read it).
    pub fn is_manager(&self, caller: u8) -> bool {
        self.managers.contains(&caller)
    }
}

/// Up to [`MAX_COUNT`] times, the newest overwriting the oldest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Times {
    at: [u64; MAX_COUNT],
    /// Times recorded since the last clear (the newest is at `(len - 1) % MAX_COUNT`).
    len: u64,
}

impl Times {
    const EMPTY: Times = Times {
        at: [0; MAX_COUNT],
        len: 0,
    };

    fn push(&mut self, now: u64) {
        let index = (self.len % MAX_COUNT as u64) as usize;
        if let Some(slot) = self.at.get_mut(index) {
            *slot = now;
        }
        self.len += 1;
    }

    /// How many of the last `max` times are within `window` of `now` (`max` ≤ MAX_COUNT).
    fn within(&self, max: u8, window: u64, now: u64) -> u8 {
        let kept = self.len.min(MAX_COUNT as u64).min(u64::from(max));
        let mut count = 0;
        for back in 0..kept {
            let index = ((self.len - 1 - back) % MAX_COUNT as u64) as usize;
            if self
                .at
                .get(index)
                .is_some_and(|&at| now.saturating_sub(at) <= window)
            {
                count += 1;
            }
        }
        count
    }
}

/// What happened to a VM, kept by Keel for its diagnostics and its managers. All zero bytes
/// when new, so that Keel's table of them takes no image space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Restarts since boot (by policy or by a manager; its own resets not counted).
    pub restarts: u32,
    /// Notices a manager's full queue refused (each said in a diagnostic line).
    pub notices_refused: u32,
    /// The last event's and action's codes (event 0: none yet) and when (ns since boot).
    last_event: u8,
    last_action: u8,
    last_at: u64,
    recent_restarts: Times,
    recent_misses: Times,
}

/// What [`Record::decide`] chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The action.
    pub action: Action,
    /// With [`Action::Restart`]: this restart's number within the limit's window (1 for the
    /// first), and the limit; with [`Action::StopAtLimit`]: the restarts in the window.
    pub in_window: u8,
}

impl Record {
    /// Nothing happened yet.
    pub const NEW: Record = Record {
        restarts: 0,
        notices_refused: 0,
        last_event: 0,
        last_action: 0,
        last_at: 0,
        recent_restarts: Times::EMPTY,
        recent_misses: Times::EMPTY,
    };

    /// The last event and the action taken, and when (ns since boot).
    pub fn last(&self) -> Option<(Event, Action, u64)> {
        Some((
            Event::from_code(self.last_event)?,
            Action::from_code(self.last_action)?,
            self.last_at,
        ))
    }

    /// Decides what `event` at `now` (ns) does under `policy`, and records it. Only a restart
    /// the policy or a manager asks for counts against the limit (the VM's own reset is a
    /// restart it asked for and is not counted, as today).
    pub fn decide(&mut self, policy: &Policy, event: Event, now: u64) -> Decision {
        let mut action = policy.action(event);
        let mut in_window = 0;
        if action == Action::Restart && event != Event::Reset {
            if let Some(limit) = policy.restarts {
                let recent = self.recent_restarts.within(limit.max, limit.window_ns, now);
                if recent >= limit.max && event != Event::ManagerRestart {
                    action = Action::StopAtLimit;
                    in_window = recent;
                } else {
                    in_window = recent + 1;
                }
            }
            if action == Action::Restart {
                self.recent_restarts.push(now);
                self.restarts = self.restarts.saturating_add(1);
            }
        }
        self.last_event = event as u8;
        self.last_action = action as u8;
        self.last_at = now;
        Decision { action, in_window }
    }

    /// Records `count` new misses or overruns at `now`; whether they cross the policy's
    /// threshold (then the window starts afresh: one event per `count` misses).
    pub fn misses(&mut self, policy: &Policy, count: u32, now: u64) -> bool {
        let Some(threshold) = policy.misses else {
            return false;
        };
        for _ in 0..count.min(MAX_COUNT as u32) {
            self.recent_misses.push(now);
        }
        let crossed = self
            .recent_misses
            .within(threshold.count, threshold.window_ns, now)
            >= threshold.count;
        if crossed {
            self.recent_misses = Times::EMPTY;
        }
        crossed
    }
}

/// The sender VM id of Keel's own messages (health notices) as KEEL_MSG_RECV reports it.
pub const KEEL_SENDER: u16 = u16::MAX;

/// A health notice as a manager receives it: 16 bytes, little-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notice {
    /// The VM it is about.
    pub vm: u16,
    /// What happened.
    pub event: Event,
    /// What Keel did.
    pub action: Action,
    /// Its restarts since boot, after this action.
    pub restarts: u32,
    /// When (ns since boot).
    pub time_ns: u64,
}

impl Notice {
    /// Its length in bytes.
    pub const LEN: usize = 16;

    /// Its bytes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut bytes = [0; Self::LEN];
        bytes[0..2].copy_from_slice(&self.vm.to_le_bytes());
        bytes[2] = self.event as u8;
        bytes[3] = self.action as u8;
        bytes[4..8].copy_from_slice(&self.restarts.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.time_ns.to_le_bytes());
        bytes
    }

    /// Reads one back (None if the bytes are not a notice).
    pub fn from_bytes(bytes: &[u8]) -> Option<Notice> {
        let bytes: &[u8; Self::LEN] = bytes.try_into().ok()?;
        let [v0, v1, event, action, r0, r1, r2, r3, t @ ..] = *bytes;
        Some(Notice {
            vm: u16::from_le_bytes([v0, v1]),
            event: Event::from_code(event)?,
            action: Action::from_code(action)?,
            restarts: u32::from_le_bytes([r0, r1, r2, r3]),
            time_ns: u64::from_le_bytes(t),
        })
    }
}

/// A VM's resource counters (KEEL_VM_RESOURCES): what a restart must bring back to what they
/// were at boot. Keel, the guest SDK and the `keel` command share this one encoding of them
/// in x0..x3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resources {
    /// Messages queued in its queues.
    pub messages: u64,
    /// Its live tasks.
    pub tasks: u64,
    /// Scheduler slots of its vCPUs and tasks started on shared pCPUs.
    pub slots: u64,
    /// Its virtual interrupts raised and not done with (pending, active or listed).
    pub raised: u32,
    /// Whether its devices' DMA translates.
    pub dma: bool,
    /// Whether its watchdog is armed.
    pub watchdog: bool,
}

impl Resources {
    /// x0..x3 of the call's result: the three counts, then `raised | dma << 32 | watchdog << 33`.
    pub fn to_results(&self) -> [u64; 4] {
        [
            self.messages,
            self.tasks,
            self.slots,
            u64::from(self.raised) | u64::from(self.dma) << 32 | u64::from(self.watchdog) << 33,
        ]
    }

    /// The counters from x0..x3 of the call's result ([`Resources::to_results`]).
    pub fn from_results(x: [u64; 4]) -> Self {
        Self {
            messages: x[0],
            tasks: x[1],
            slots: x[2],
            raised: x[3] as u32,
            dma: x[3] >> 32 & 1 != 0,
            watchdog: x[3] >> 33 & 1 != 0,
        }
    }
}

/// A VM's state as KEEL_VM_STATUS reports it (x0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum VmStatus {
    /// Its vCPUs run.
    Running = 0,
    /// It powered itself off.
    Off = 1,
    /// Keel stopped it (a fault, a manager, or its health policy).
    Stopped = 2,
    /// It is being reloaded from its image.
    Restarting = 3,
}

impl VmStatus {
    /// The status with code `code`.
    pub fn from_code(code: u64) -> Option<VmStatus> {
        [
            VmStatus::Running,
            VmStatus::Off,
            VmStatus::Stopped,
            VmStatus::Restarting,
        ]
        .into_iter()
        .find(|status| *status as u64 == code)
    }

    /// Its name.
    pub const fn name(self) -> &'static str {
        match self {
            VmStatus::Running => "running",
            VmStatus::Off => "off",
            VmStatus::Stopped => "stopped",
            VmStatus::Restarting => "restarting",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters go through x0..x3 and back unchanged, each flag in its own bit.
    #[test]
    fn resources_round_trip_through_the_results() {
        for (dma, watchdog) in [(false, false), (true, false), (false, true), (true, true)] {
            let resources = Resources {
                messages: 7,
                tasks: 3,
                slots: 4,
                raised: u32::MAX,
                dma,
                watchdog,
            };
            let x = resources.to_results();
            assert_eq!(x[3] >> 34, 0);
            assert_eq!(Resources::from_results(x), resources);
        }
    }

    const SECOND: u64 = 1_000_000_000;

    fn policy() -> Policy {
        Policy {
            fault: Action::Restart,
            restarts: Some(RestartLimit {
                max: 3,
                window_ns: 10 * SECOND,
            }),
            misses: Some(Misses {
                count: 3,
                window_ns: SECOND,
                action: Action::Restart,
            }),
            ..Policy::DEFAULT
        }
    }

    #[test]
    fn defaults_are_todays_behaviour() {
        let mut record = Record::NEW;
        let policy = Policy::DEFAULT;
        assert_eq!(record.decide(&policy, Event::Fault, 5).action, Action::Stop);
        assert_eq!(
            record.decide(&policy, Event::Reset, 6).action,
            Action::Restart
        );
        assert_eq!(
            record.decide(&policy, Event::PowerOff, 7).action,
            Action::Stop
        );
        assert_eq!(record.restarts, 0, "its own reset is not counted");
        assert_eq!(record.last(), Some((Event::PowerOff, Action::Stop, 7)));
    }

    #[test]
    fn restarts_stop_at_the_limit_within_the_window_and_resume_after_it() {
        let mut record = Record::NEW;
        let policy = policy();
        let decide = |record: &mut Record, at| record.decide(&policy, Event::Fault, at);
        assert_eq!(
            decide(&mut record, SECOND),
            Decision {
                action: Action::Restart,
                in_window: 1
            }
        );
        assert_eq!(decide(&mut record, 2 * SECOND).in_window, 2);
        assert_eq!(decide(&mut record, 3 * SECOND).in_window, 3);
        assert_eq!(
            decide(&mut record, 4 * SECOND),
            Decision {
                action: Action::StopAtLimit,
                in_window: 3
            }
        );
        assert_eq!(record.restarts, 3);
        // Eleven seconds after the first, two of the three are still in the window.
        assert_eq!(
            decide(&mut record, 11 * SECOND + 1),
            Decision {
                action: Action::Restart,
                in_window: 3
            }
        );
        assert_eq!(record.restarts, 4);
    }

    #[test]
    fn a_manager_restarts_past_the_limit_and_is_counted() {
        let mut record = Record::NEW;
        let policy = policy();
        for at in 1..=3 {
            record.decide(&policy, Event::Fault, at);
        }
        let decision = record.decide(&policy, Event::ManagerRestart, 4);
        assert_eq!(decision.action, Action::Restart);
        assert_eq!(record.restarts, 4);
    }

    #[test]
    fn misses_cross_the_threshold_only_within_the_window() {
        let mut record = Record::NEW;
        let policy = policy();
        assert!(!record.misses(&policy, 1, 0));
        assert!(!record.misses(&policy, 1, SECOND / 2));
        // The first fell out of the window: two in it.
        assert!(!record.misses(&policy, 1, SECOND + SECOND / 4));
        assert!(record.misses(&policy, 1, SECOND + SECOND / 2));
        // Crossing starts the count afresh.
        assert!(!record.misses(&policy, 2, SECOND + SECOND / 2));
        assert!(record.misses(&policy, 1, SECOND + SECOND / 2));
        // Several at once.
        assert!(record.misses(&policy, 5, 3 * SECOND));
        assert!(!record.misses(&Policy::DEFAULT, 100, 3 * SECOND));
    }

    #[test]
    fn notices_round_trip() {
        let notice = Notice {
            vm: 3,
            event: Event::Watchdog,
            action: Action::StopAtLimit,
            restarts: 0x0102_0304,
            time_ns: 0x1122_3344_5566_7788,
        };
        let bytes = notice.to_bytes();
        assert_eq!(bytes[0..4], [3, 0, 2, 3]);
        assert_eq!(Notice::from_bytes(&bytes), Some(notice));
        assert_eq!(Notice::from_bytes(&bytes[..15]), None);
        let mut bad = bytes;
        bad[2] = 99;
        assert_eq!(Notice::from_bytes(&bad), None);
    }

    #[test]
    fn codes_round_trip() {
        for event in Event::ALL {
            assert_eq!(Event::from_code(event as u8), Some(event));
        }
        assert_eq!(Event::from_code(0), None);
        for code in 0..4 {
            assert_eq!(Action::from_code(code).map(|a| a as u8), Some(code));
            assert_eq!(
                VmStatus::from_code(u64::from(code)).map(|s| s as u8),
                Some(code)
            );
        }
        assert_eq!(Action::from_code(4), None);
    }
}
