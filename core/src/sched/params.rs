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
    mul_div(value, numerator, denominator).map_or(Time::MAX, |(quotient, remainder)| {
        quotient.saturating_add(Time::from(remainder != 0))
    })
}

/// The same conversion rounded down: what a vCPU is granted (budget, deadline) never grows.
fn scale_down(value: Time, numerator: u64, denominator: u64) -> Time {
    mul_div(value, numerator, denominator).map_or(Time::MAX, |(quotient, _)| quotient)
}

/// `value * numerator / denominator` exactly (a denominator of 0 counts as 1), as quotient and
/// remainder; `None` when the quotient does not fit in 64 bits. The 128-bit product is divided
/// by 64 bits without a general 128-bit division (`compiler_builtins`' `__udivti3`, 780 bytes
/// of image): one hardware division when the product fits in 64 bits, else a restoring long
/// division a bit at a time (durations of hours in nanoseconds).
pub fn mul_div(value: u64, numerator: u64, denominator: u64) -> Option<(u64, u64)> {
    let divisor = denominator.max(1);
    let product = u128::from(value) * u128::from(numerator);
    let (high, low) = ((product >> 64) as u64, product as u64);
    if high == 0 {
        return Some((low / divisor, low % divisor));
    }
    if high >= divisor {
        return None;
    }
    // Invariant: remainder < divisor; shifting in the next bit of `low` makes it < 2 * divisor,
    // with bit 64 in `carry`, and one subtraction brings it back below the divisor.
    let (mut quotient, mut remainder) = (0u64, high);
    for bit in (0..64).rev() {
        let carry = remainder >> 63;
        remainder = remainder << 1 | (low >> bit) & 1;
        quotient <<= 1;
        if carry != 0 || remainder >= divisor {
            remainder = remainder.wrapping_sub(divisor);
            quotient |= 1;
        }
    }
    Some((quotient, remainder))
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
            scale(u64::MAX, 3, 3),
            u64::MAX,
            "the largest quotient that fits"
        );
        assert_eq!(
            Policy::RoundRobin { quantum: 1 }.scaled(numerator, denominator),
            Policy::RoundRobin { quantum: 1 },
            "a quantum never rounds to zero"
        );
    }

    #[test]
    fn mul_div_is_the_128_bit_arithmetic() {
        let values = [
            0,
            1,
            2,
            3,
            7,
            999,
            62_500_000,
            1_000_000_000,
            u64::from(u32::MAX),
            1 << 32,
            (1 << 63) - 1,
            1 << 63,
            u64::MAX - 1,
            u64::MAX,
        ];
        let mut state = 0x6b65_656c_u64;
        let mut random = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state >> (state % 64)
        };
        let randoms: Vec<u64> = (0..40).map(|_| random()).collect();
        for &a in values.iter().chain(&randoms) {
            for &b in values.iter().chain(&randoms) {
                for &c in values.iter().chain(&randoms) {
                    let d = u128::from(c.max(1));
                    let product = u128::from(a) * u128::from(b);
                    let expected = u64::try_from(product / d)
                        .ok()
                        .map(|q| (q, (product % d) as u64));
                    assert_eq!(mul_div(a, b, c), expected, "{a} * {b} / {c}");
                }
            }
        }
    }
}
