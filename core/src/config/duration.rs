//! Durations as a person writes them in TOML: `"250us"`, `"1ms"`, `"1.5ms"`, in nanoseconds.
//!
//! A duration is a string: a decimal number (`_` separators allowed, an optional fraction)
//! followed by a unit, `ns`, `us`, `ms` or `s`, with optional spaces between. A fraction is
//! accepted when the result is a whole number of nanoseconds (`"1.5ms"`, `"0.25us"`; not
//! `"1.5ns"`). A number without a unit — a bare TOML integer or float, or a string such as
//! `"250"` — is refused: the unit is what says what the number means.

use std::fmt;

use serde::de::{Deserialize, Deserializer};

use super::decimal::{self, ScaleError};

/// The units, with their length in nanoseconds, as the messages list them.
const UNITS: [(&str, u64); 4] = [
    ("ns", 1),
    ("us", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
];

/// The units, for messages.
const UNIT_LIST: &str = "ns, us, ms, s";

/// A duration as written in the TOML, kept as text so that the validator can name the VM, the
/// vCPU and the field when it does not parse (see [`parse_duration`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DurationText {
    /// A string, as written.
    Text(String),
    /// A bare TOML number (integer or float), which has no unit.
    Number(String),
}

/// Why a duration is refused; each variant's doc comment is its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DurationError {
    /// `duration '<text>' has no unit (write e.g. "250us"; units: ns, us, ms, s)`.
    NoUnit {
        /// The text as written.
        text: String,
    },
    /// `duration '<text>' has an unknown unit '<unit>' (units: ns, us, ms, s)`.
    UnknownUnit {
        /// The text as written.
        text: String,
        /// What follows the number.
        unit: String,
    },
    /// `'<text>' is not a duration (write e.g. "250us"; units: ns, us, ms, s)`.
    NotANumber {
        /// The text as written.
        text: String,
    },
    /// `duration '<text>' is not a whole number of nanoseconds`.
    FractionOfNanosecond {
        /// The text as written.
        text: String,
    },
    /// `duration '<text>' does not fit 64 bits of nanoseconds`.
    TooLong {
        /// The text as written.
        text: String,
    },
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoUnit { text } => write!(
                f,
                "duration '{text}' has no unit (write e.g. \"250us\"; units: {UNIT_LIST})"
            ),
            Self::UnknownUnit { text, unit } => write!(
                f,
                "duration '{text}' has an unknown unit '{unit}' (units: {UNIT_LIST})"
            ),
            Self::NotANumber { text } => write!(
                f,
                "'{text}' is not a duration (write e.g. \"250us\"; units: {UNIT_LIST})"
            ),
            Self::FractionOfNanosecond { text } => {
                write!(f, "duration '{text}' is not a whole number of nanoseconds")
            }
            Self::TooLong { text } => {
                write!(f, "duration '{text}' does not fit 64 bits of nanoseconds")
            }
        }
    }
}

impl DurationText {
    /// The duration in nanoseconds.
    pub fn nanoseconds(&self) -> Result<u64, DurationError> {
        match self {
            Self::Text(text) => parse_duration(text),
            Self::Number(text) => Err(DurationError::NoUnit { text: text.clone() }),
        }
    }
}

/// Parses a duration such as `"250us"`, `"1ms"`, `"1.5ms"` or `"2_000 ns"` into nanoseconds.
pub fn parse_duration(text: &str) -> Result<u64, DurationError> {
    let error_text = || text.to_string();
    let Some(number) = decimal::split(text) else {
        return Err(DurationError::NotANumber { text: error_text() });
    };
    if number.unit.is_empty() {
        return Err(DurationError::NoUnit { text: error_text() });
    }
    let Some(&(_, unit_ns)) = UNITS.iter().find(|(name, _)| *name == number.unit) else {
        return Err(DurationError::UnknownUnit {
            text: error_text(),
            unit: number.unit.to_string(),
        });
    };
    number.scaled(unit_ns).map_err(|error| match error {
        ScaleError::NotWhole => DurationError::FractionOfNanosecond { text: error_text() },
        ScaleError::TooLarge => DurationError::TooLong { text: error_text() },
    })
}

/// A duration in nanoseconds as a person reads it, exactly: the largest unit in which it has
/// at most two decimals (`5ms`, `5.20ms`, `1.25us`), else nanoseconds (`1234567ns`).
pub fn format_duration(nanoseconds: u64) -> String {
    for &(name, unit_ns) in UNITS.iter().rev() {
        if nanoseconds < unit_ns {
            continue;
        }
        if nanoseconds.is_multiple_of(unit_ns) {
            return format!("{}{name}", nanoseconds / unit_ns);
        }
        let hundredth = unit_ns / 100;
        if hundredth > 0 && nanoseconds.is_multiple_of(hundredth) {
            let hundredths = nanoseconds / hundredth;
            return format!("{}.{:02}{name}", hundredths / 100, hundredths % 100);
        }
    }
    format!("{nanoseconds}ns")
}

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(
            match decimal::Written::deserialize(
                deserializer,
                "a duration: a string with a unit like \"250us\" or \"1ms\"",
            )? {
                decimal::Written::Text(text) => DurationText::Text(text),
                decimal::Written::Number(text) => DurationText::Number(text),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_fractions() {
        assert_eq!(parse_duration("250ns"), Ok(250));
        assert_eq!(parse_duration("250us"), Ok(250_000));
        assert_eq!(parse_duration("1ms"), Ok(1_000_000));
        assert_eq!(parse_duration("2s"), Ok(2_000_000_000));
        assert_eq!(parse_duration("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_duration("0.25us"), Ok(250));
        assert_eq!(parse_duration(".5us"), Ok(500));
        assert_eq!(parse_duration("1.500000000000s"), Ok(1_500_000_000));
        assert_eq!(parse_duration(" 2_000 ns "), Ok(2_000));
        assert_eq!(parse_duration("0ms"), Ok(0));
    }

    #[test]
    fn refuses_what_is_not_a_duration() {
        let text = |text: &str| text.to_string();
        assert_eq!(
            parse_duration("250"),
            Err(DurationError::NoUnit { text: text("250") })
        );
        assert_eq!(
            parse_duration("5min"),
            Err(DurationError::UnknownUnit {
                text: text("5min"),
                unit: text("min")
            })
        );
        assert_eq!(
            parse_duration("1 MS"),
            Err(DurationError::UnknownUnit {
                text: text("1 MS"),
                unit: text("MS")
            })
        );
        for garbage in ["", "ms", "fast", "-1ms", "1.2.3ms", "1.ms", "."] {
            assert_eq!(
                parse_duration(garbage),
                Err(DurationError::NotANumber {
                    text: text(garbage)
                }),
                "{garbage:?}"
            );
        }
        assert_eq!(
            parse_duration("1.5ns"),
            Err(DurationError::FractionOfNanosecond {
                text: text("1.5ns")
            })
        );
        assert_eq!(
            parse_duration("0.0000000001s"),
            Err(DurationError::FractionOfNanosecond {
                text: text("0.0000000001s")
            })
        );
        assert_eq!(
            parse_duration("18446744074s"),
            Err(DurationError::TooLong {
                text: text("18446744074s")
            })
        );
        assert_eq!(
            parse_duration("99999999999999999999ns"),
            Err(DurationError::TooLong {
                text: text("99999999999999999999ns")
            })
        );
        assert_eq!(
            DurationText::Number(text("1000")).nanoseconds(),
            Err(DurationError::NoUnit { text: text("1000") })
        );
    }

    #[test]
    fn messages() {
        assert_eq!(
            parse_duration("250").unwrap_err().to_string(),
            "duration '250' has no unit (write e.g. \"250us\"; units: ns, us, ms, s)"
        );
        assert_eq!(
            parse_duration("5min").unwrap_err().to_string(),
            "duration '5min' has an unknown unit 'min' (units: ns, us, ms, s)"
        );
    }

    #[test]
    fn formats_exactly_in_the_largest_fitting_unit() {
        assert_eq!(format_duration(0), "0ns");
        assert_eq!(format_duration(999), "999ns");
        assert_eq!(format_duration(1_250), "1.25us");
        assert_eq!(format_duration(1_000_000), "1ms");
        assert_eq!(format_duration(5_200_000), "5.20ms");
        assert_eq!(format_duration(5_001_000), "5001us");
        assert_eq!(format_duration(1_234_567), "1234567ns");
        assert_eq!(format_duration(1_500_000_000), "1.50s");
        assert_eq!(format_duration(120_000_000_000), "120s");
        for nanoseconds in [
            1,
            999,
            1_250,
            5_200_000,
            5_001_000,
            1_234_567,
            1_500_000_000,
        ] {
            assert_eq!(
                parse_duration(&format_duration(nanoseconds)),
                Ok(nanoseconds),
                "round trip"
            );
        }
    }
}
