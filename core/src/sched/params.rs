//! What the configuration gives the scheduler: a pCPU's policy and each vCPU's parameters.
//!
//! Durations are in one unit throughout (nanoseconds in the configuration tables, counter
//! ticks in the hypervisor, which converts them once at boot with [`Policy::scaled`] and
//! [`Params::scaled`]); the policies never look at the unit.

/// A duration or an instant, in the unit of the scheduler's clock.
pub type Time = u64;

/// How a pCPU shares itself among the vCPUs placed on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Exactly one vCPU, which owns the pCPU: no scheduler tick, WFI may stay native.
    Pinned,
    /// Preemptive fixed priority (higher number first); a vCPU may have a budget per period,
    /// enforced. Equal priorities share by round robin with `quantum`.
    FixedPriority {
        /// Time slice among vCPUs of equal priority.
        quantum: Time,
    },
    /// Earliest deadline first among real-time vCPUs (hard reservations); best-effort vCPUs
    /// share what is left, round robin with `quantum`.
    Edf {
        /// Time slice among best-effort vCPUs.
        quantum: Time,
    },
    /// Best-effort vCPUs only, round robin with `quantum` (no timer when one is runnable).
    RoundRobin {
        /// Time slice.
        quantum: Time,
    },
}

/// A vCPU's reservation: `budget` of pCPU time in every `period`, to be used by `deadline`
/// after each release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Reservation {
    /// Release period.
    pub period: Time,
    /// Execution budget per period.
    pub budget: Time,
    /// Relative deadline, at most the period.
    pub deadline: Time,
}

/// One vCPU's scheduling parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Params {
    /// Fixed-priority policy: its priority (higher runs first). 0 elsewhere.
    pub priority: u8,
    /// Real-time reservation (EDF: required for a real-time vCPU; fixed priority: an optional
    /// enforced budget); `None` for a best-effort vCPU.
    pub reservation: Option<Reservation>,
}

/// `value * numerator / denominator`, rounded up, saturating: a duration converted between
/// clocks (nanoseconds to counter ticks) never shrinks.
pub fn scale(value: Time, numerator: u64, denominator: u64) -> Time {
    let scaled =
        (u128::from(value) * u128::from(numerator)).div_ceil(u128::from(denominator.max(1)));
    scaled.min(u128::from(u64::MAX)) as Time
}

impl Policy {
    /// The same policy with its durations converted by `numerator / denominator`.
    pub fn scaled(self, numerator: u64, denominator: u64) -> Self {
        match self {
            Policy::Pinned => Policy::Pinned,
            Policy::FixedPriority { quantum } => Policy::FixedPriority {
                quantum: scale(quantum, numerator, denominator),
            },
            Policy::Edf { quantum } => Policy::Edf {
                quantum: scale(quantum, numerator, denominator),
            },
            Policy::RoundRobin { quantum } => Policy::RoundRobin {
                quantum: scale(quantum, numerator, denominator),
            },
        }
    }

    /// Whether the pCPU is shared (anything but [`Policy::Pinned`]).
    pub fn is_shared(self) -> bool {
        self != Policy::Pinned
    }
}

impl Params {
    /// The same parameters with their durations converted by `numerator / denominator`.
    /// Budgets round down and periods up, so a converted reservation never grows.
    pub fn scaled(self, numerator: u64, denominator: u64) -> Self {
        Params {
            priority: self.priority,
            reservation: self.reservation.map(|r| Reservation {
                period: scale(r.period, numerator, denominator),
                budget: (u128::from(r.budget) * u128::from(numerator)
                    / u128::from(denominator.max(1)))
                .min(u128::from(u64::MAX)) as Time,
                deadline: (u128::from(r.deadline) * u128::from(numerator)
                    / u128::from(denominator.max(1)))
                .min(u128::from(u64::MAX)) as Time,
            }),
        }
    }
}
