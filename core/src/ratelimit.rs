//! Rate limits for Keel's own diagnostics: a guest that triggers one (an SMC, a console
//! overrun, a reset, a start of its vCPU 0, a notice its manager's full queue refused, a stop)
//! flat out gets a few lines per second and a count of what was left out, never a flood that
//! hides everything else or keeps the console busy. The first line of each kind for each VM is
//! always printed (its first boot's start). Lines that no VM is known to cause are limited
//! apart, as [`NO_VM`]'s. Every line of Keel's that a guest's action can cause is one of these
//! kinds (the hypervisor's console takes no other without a cause that is not a guest's: its
//! boot or the operator at the console).

use crate::console::MAX_VMS;

/// Lines of one kind, for one VM, printed per window before the rest are counted instead.
pub const BURST: u32 = 5;

/// What a guest can make Keel say over and over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiagnosticKind {
    /// A guest SMC, answered NOT_SUPPORTED.
    Smc = 0,
    /// Console input the guest did not read.
    InputOverrun = 1,
    /// A VM reset (its announcement and its reload's report).
    Reset = 2,
    /// A VM starts (its vCPU 0 enters the image: boot, after a reset, or CPU_ON of vCPU 0).
    Start = 3,
    /// An SMMU line: an event of a stream no VM owns, a global error, a VM's streams that could
    /// not be cut off or given back (a device a guest drives can cause each, over and over).
    Smmu = 4,
    /// A health notice a manager's queue refused (full, or the manager not running): said for
    /// the managed VM, whose events (its resets, a manager's requests) send the notices.
    Notice = 5,
    /// A VM ends: it is stopped (a fault, a policy, a manager's request) or powers itself off;
    /// and the last one's `all VMs have ended`, as [`NO_VM`]'s. A manager can stop and start
    /// its VM over and over.
    Stop = 6,
}

/// Number of [`DiagnosticKind`]s.
const KINDS: usize = 7;

impl DiagnosticKind {
    /// Every kind, in order of their values.
    pub const ALL: [DiagnosticKind; KINDS] = [
        DiagnosticKind::Smc,
        DiagnosticKind::InputOverrun,
        DiagnosticKind::Reset,
        DiagnosticKind::Start,
        DiagnosticKind::Smmu,
        DiagnosticKind::Notice,
        DiagnosticKind::Stop,
    ];
}

/// The "VM" of lines that no VM is known to cause (an SMMU event of a stream no VM owns, a
/// global error): limited like a VM's, in a window of their own.
pub const NO_VM: usize = MAX_VMS;

#[derive(Clone, Copy, Debug, Default)]
struct Window {
    start: u64,
    printed: u32,
    suppressed: u64,
}

/// Whether to print a diagnostic now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Print it; `suppressed` lines of its kind were left out before it (say so).
    Print {
        /// Lines of this kind and VM not printed since the last one that was.
        suppressed: u64,
    },
    /// Leave it out (it is counted).
    Suppress,
}

/// Per kind and per VM (and [`NO_VM`]), at most [`BURST`] lines per window.
#[derive(Clone, Copy, Debug)]
pub struct RateLimiter {
    windows: [[Window; MAX_VMS + 1]; KINDS],
    window_ticks: u64,
}

impl RateLimiter {
    /// A limiter whose windows last `window_ticks` (of whatever clock `check` is given).
    pub const fn new(window_ticks: u64) -> Self {
        Self {
            windows: [[Window {
                start: 0,
                printed: 0,
                suppressed: 0,
            }; MAX_VMS + 1]; KINDS],
            window_ticks,
        }
    }

    /// Makes the windows last `window_ticks` from now on (set at boot, once the clock's frequency
    /// is known): in place, as the limiter is large (a window per kind and VM: made on a stack
    /// and copied, it made the boot code's frame too large to reach its variables in one
    /// instruction each).
    pub fn set_window_ticks(&mut self, window_ticks: u64) {
        self.window_ticks = window_ticks;
    }

    /// Decides about one diagnostic of `kind` caused by VM `vm` at time `now`.
    pub fn check(&mut self, kind: DiagnosticKind, vm: usize, now: u64) -> Verdict {
        let Some(window) = self.windows[kind as usize].get_mut(vm) else {
            return Verdict::Print { suppressed: 0 };
        };
        if now.wrapping_sub(window.start) >= self.window_ticks || window.printed == 0 {
            window.start = now;
            window.printed = 0;
        }
        if window.printed < BURST {
            window.printed += 1;
            let suppressed = window.suppressed;
            window.suppressed = 0;
            Verdict::Print { suppressed }
        } else {
            window.suppressed += 1;
            Verdict::Suppress
        }
    }

    /// Lines of `kind` for `vm` left out and not yet reported.
    pub fn pending(&self, kind: DiagnosticKind, vm: usize) -> u64 {
        self.windows[kind as usize]
            .get(vm)
            .map_or(0, |window| window.suppressed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_counted_then_reported_with_the_next_window() {
        let mut limiter = RateLimiter::new(1000);
        for i in 0..BURST {
            assert_eq!(
                limiter.check(DiagnosticKind::Smc, 1, 10 + u64::from(i)),
                Verdict::Print { suppressed: 0 }
            );
        }
        for i in 0..1000 {
            assert_eq!(
                limiter.check(DiagnosticKind::Smc, 1, 20 + i % 900),
                Verdict::Suppress
            );
        }
        assert_eq!(limiter.pending(DiagnosticKind::Smc, 1), 1000);
        assert_eq!(
            limiter.check(DiagnosticKind::Smc, 1, 1010),
            Verdict::Print { suppressed: 1000 },
            "the first line of the next window carries the count"
        );
        assert_eq!(limiter.pending(DiagnosticKind::Smc, 1), 0);
    }

    #[test]
    fn every_kind_is_limited_for_every_vm_and_for_no_vm() {
        for (value, &kind) in DiagnosticKind::ALL.iter().enumerate() {
            assert_eq!(kind as usize, value, "ALL is in the order of the values");
            for vm in 0..=NO_VM {
                let mut limiter = RateLimiter::new(1000);
                let printed = (0..100)
                    .filter(|&i| matches!(limiter.check(kind, vm, i), Verdict::Print { .. }))
                    .count();
                assert_eq!(
                    printed, BURST as usize,
                    "{kind:?} of VM {vm}: a burst a window"
                );
                assert_eq!(limiter.pending(kind, vm), 100 - u64::from(BURST));
                assert_eq!(
                    limiter.check(kind, vm, 1000),
                    Verdict::Print {
                        suppressed: 100 - u64::from(BURST)
                    },
                    "{kind:?} of VM {vm}: the next window's first line counts the rest"
                );
            }
        }
    }

    #[test]
    fn windows_set_later_are_as_windows_made_so() {
        let mut limiter = RateLimiter::new(0);
        limiter.set_window_ticks(1000);
        for now in 0..100 {
            limiter.check(DiagnosticKind::Stop, 2, now);
        }
        assert_eq!(
            limiter.pending(DiagnosticKind::Stop, 2),
            100 - u64::from(BURST)
        );
    }

    #[test]
    fn kinds_and_vms_are_limited_apart() {
        let mut limiter = RateLimiter::new(1000);
        for _ in 0..100 {
            limiter.check(DiagnosticKind::Smc, 1, 5);
        }
        assert_eq!(
            limiter.check(DiagnosticKind::Smc, 0, 5),
            Verdict::Print { suppressed: 0 },
            "another VM's SMC is still reported"
        );
        assert_eq!(
            limiter.check(DiagnosticKind::Reset, 1, 5),
            Verdict::Print { suppressed: 0 },
            "another kind from the same VM is still reported"
        );
    }

    /// The `(time, suppressed)` of each line printed.
    type Printed = Vec<(u64, u64)>;

    /// What VM 1 makes Keel say when it resets itself every `gap` ticks from `from` to `to`
    /// (each reset: its announcement, its reload's report, then the start), then once more
    /// `after` ticks later: the `(time, suppressed)` of each line printed, per kind.
    fn reset_loop(
        limiter: &mut RateLimiter,
        from: u64,
        to: u64,
        gap: u64,
        after: u64,
    ) -> (u64, Printed, Printed) {
        let (mut resets, mut reset_lines, mut start_lines) = (0, Vec::new(), Vec::new());
        let mut say = |kind, now, lines: &mut Printed| {
            if let Verdict::Print { suppressed } = limiter.check(kind, 1, now) {
                lines.push((now, suppressed));
            }
        };
        say(DiagnosticKind::Start, from, &mut start_lines);
        let mut now = from;
        while now < to + after {
            now = if now < to { now + gap } else { to + after };
            resets += 1;
            say(DiagnosticKind::Reset, now, &mut reset_lines);
            say(DiagnosticKind::Reset, now, &mut reset_lines);
            say(DiagnosticKind::Start, now, &mut start_lines);
        }
        (resets, reset_lines, start_lines)
    }

    #[test]
    fn a_reset_loop_prints_its_first_start_then_a_burst_per_window_and_counts_the_rest() {
        // One tick a microsecond. VM 1 boots at 0.5 s and resets every 150 us until 3.5 s
        // (20,000 resets: the rate measured before starts were limited), then once more 1.5 s
        // later.
        let second = 1_000_000;
        let mut limiter = RateLimiter::new(second);
        let (resets, reset_lines, start_lines) = reset_loop(
            &mut limiter,
            second / 2,
            3 * second + second / 2,
            150,
            3 * second / 2,
        );
        assert_eq!(resets, 20_001);
        assert_eq!(
            start_lines[0],
            (second / 2, 0),
            "the first boot's start is printed, with nothing left out before it"
        );
        for (lines, per_event) in [(&start_lines, 1), (&reset_lines, 2)] {
            for &(at, _) in lines.iter() {
                let in_window = lines
                    .iter()
                    .filter(|&&(t, _)| (at..at + second).contains(&t))
                    .count();
                assert!(
                    in_window <= BURST as usize,
                    "{in_window} lines within a second"
                );
            }
            let reported: u64 = lines.iter().map(|&(_, suppressed)| suppressed).sum();
            let events = if per_event == 1 {
                resets + 1
            } else {
                2 * resets
            };
            assert_eq!(
                lines.len() as u64 + reported,
                events,
                "every line printed or counted in a later one"
            );
        }
        // 3 windows of the loop and the last reset's: at most 20 starts printed (4 windows x 5).
        assert!(start_lines.len() <= 4 * BURST as usize);
        let last = *start_lines.last().unwrap();
        assert_eq!(last.0, 5 * second, "the reset after the pause is printed");
        assert!(
            last.1 > 0,
            "and carries the count of the loop's last window"
        );
        assert_eq!(limiter.pending(DiagnosticKind::Start, 1), 0);
    }

    #[test]
    fn another_vms_first_start_is_printed_whatever_one_vm_floods() {
        let mut limiter = RateLimiter::new(1000);
        for now in 0..500 {
            limiter.check(DiagnosticKind::Start, 1, now);
            limiter.check(DiagnosticKind::Reset, 1, now);
        }
        assert_eq!(
            limiter.check(DiagnosticKind::Start, 0, 499),
            Verdict::Print { suppressed: 0 }
        );
        assert_eq!(
            limiter.check(DiagnosticKind::Start, 2, 499),
            Verdict::Print { suppressed: 0 }
        );
        assert_eq!(limiter.pending(DiagnosticKind::Start, 1), 495);
    }

    #[test]
    fn a_vm_beyond_the_table_is_never_silenced() {
        let mut limiter = RateLimiter::new(1000);
        for _ in 0..100 {
            assert_eq!(
                limiter.check(DiagnosticKind::Smc, NO_VM + 1, 5),
                Verdict::Print { suppressed: 0 }
            );
        }
    }

    #[test]
    fn smmu_lines_of_no_vm_are_limited_apart_from_every_vms() {
        // A device of no VM faults flat out: 793 events in 4.8 windows (each was a line).
        let mut limiter = RateLimiter::new(1000);
        let (mut printed, mut reported) = (0u64, 0u64);
        for i in 0..793 {
            if let Verdict::Print { suppressed } = limiter.check(DiagnosticKind::Smmu, NO_VM, i * 6)
            {
                printed += 1;
                reported += suppressed;
            }
        }
        // Windows from 0, 1002, 2004, 3006 and 4008: a burst each.
        assert_eq!(printed, 5 * u64::from(BURST));
        assert_eq!(
            printed + reported + limiter.pending(DiagnosticKind::Smmu, NO_VM),
            793
        );
        for vm in 0..MAX_VMS {
            assert_eq!(
                limiter.check(DiagnosticKind::Smmu, vm, 4_760),
                Verdict::Print { suppressed: 0 },
                "VM {vm}'s own SMMU line is still printed"
            );
        }
    }
}
