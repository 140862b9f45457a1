//! Rate limits for Keel's own diagnostics: a guest that triggers one (an SMC, a console
//! overrun, a reset) flat out gets a few lines per second and a count of what was left out,
//! never a flood that hides everything else or keeps the console busy.

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
    /// A VM reset.
    Reset = 2,
}

/// Number of [`DiagnosticKind`]s.
const KINDS: usize = 3;

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

/// Per kind and per VM, at most [`BURST`] lines per window.
#[derive(Clone, Copy, Debug)]
pub struct RateLimiter {
    windows: [[Window; MAX_VMS]; KINDS],
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
            }; MAX_VMS]; KINDS],
            window_ticks,
        }
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

    #[test]
    fn a_vm_beyond_the_table_is_never_silenced() {
        let mut limiter = RateLimiter::new(1000);
        for _ in 0..100 {
            assert_eq!(
                limiter.check(DiagnosticKind::Smc, MAX_VMS, 5),
                Verdict::Print { suppressed: 0 }
            );
        }
    }
}
