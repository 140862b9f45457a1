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
    let product = u128::from(value) * u128::from(numerator);
    saturate(product.div_ceil(u128::from(denominator.max(1))))
}

/// The same conversion rounded down: what a vCPU is granted (budget, deadline) never grows.
fn scale_down(value: Time, numerator: u64, denominator: u64) -> Time {
    saturate(u128::from(value) * u128::from(numerator) / u128::from(denominator.max(1)))
}

fn saturate(value: u128) -> Time {
    value.min(u128::from(u64::MAX)) as Time
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
    /// Budgets and deadlines round down and periods up, so a converted reservation never
    /// grows.
    pub fn scaled(self, numerator: u64, denominator: u64) -> Self {
        Params {
            priority: self.priority,
            reservation: self.reservation.map(|r| Reservation {
                period: scale(r.period, numerator, denominator),
                budget: scale_down(r.budget, numerator, denominator),
                deadline: scale_down(r.deadline, numerator, denominator),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversion_never_grows_a_reservation() {
        // 62.5 MHz counter ticks from nanoseconds: 16 ns per tick.
        let (numerator, denominator) = (62_500_000, 1_000_000_000);
        let params = Params {
            priority: 3,
            reservation: Some(Reservation {
                period: 1_000_010,
                budget: 200_010,
                deadline: 900_010,
            }),
        };
        let scaled = params.scaled(numerator, denominator).reservation.unwrap();
        assert_eq!(
            (scaled.period, scaled.budget, scaled.deadline),
            (62_501, 12_500, 56_250),
            "period rounded up, budget and deadline down"
        );
        assert_eq!(scale(u64::MAX, 2, 1), u64::MAX, "saturates");
        assert_eq!(
            Policy::RoundRobin { quantum: 1 }.scaled(numerator, denominator),
            Policy::RoundRobin { quantum: 1 },
            "a quantum never rounds to zero"
        );
    }
}
