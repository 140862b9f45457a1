//! Clock frequencies as a person writes them in TOML: `"100MHz"`, `"32.768kHz"`, in hertz.
//!
//! A frequency is a string: a decimal number (`_` separators allowed, an optional fraction)
//! and a unit, `Hz`, `kHz`, `MHz` or `GHz`, with optional spaces between; the result must be a
//! whole number of hertz from 1 to `u32::MAX` (a `fixed-clock`'s `clock-frequency` is one
//! 32-bit cell). A number without a unit is refused.

use std::fmt;

use serde::de::{Deserialize, Deserializer};

use super::decimal::{self, ScaleError};

/// How the messages say what to write.
const EXAMPLE: &str = "write e.g. \"100MHz\" or \"32.768kHz\"";

/// The units a frequency may have, each with its length in hertz.
const UNITS: &[(&str, u64)] = &[
    ("Hz", 1),
    ("kHz", 1_000),
    ("MHz", 1_000_000),
    ("GHz", 1_000_000_000),
];

/// A frequency as written in the TOML, kept as text so that the validator can name the VM,
/// the device and the clock when it does not parse (see [`parse_frequency`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrequencyText {
    /// A string, as written.
    Text(String),
    /// A bare TOML number (integer or float), which has no unit.
    Number(String),
}

impl<'de> Deserialize<'de> for FrequencyText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(
            match decimal::Written::deserialize(
                deserializer,
                "a frequency: a string with a unit like \"100MHz\"",
            )? {
                decimal::Written::Text(text) => Self::Text(text),
                decimal::Written::Number(text) => Self::Number(text),
            },
        )
    }
}

impl FrequencyText {
    /// The frequency in hertz.
    pub fn hz(&self) -> Result<u32, FrequencyError> {
        match self {
            Self::Text(text) => parse_frequency(text),
            Self::Number(text) => Err(FrequencyError::NoUnit { text: text.clone() }),
        }
    }
}

/// Why a frequency is refused; each variant's doc comment is its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrequencyError {
    /// `'<text>' has no unit (write e.g. "100MHz" or "32.768kHz")`.
    NoUnit {
        /// The text as written.
        text: String,
    },
    /// `'<text>' has the unit '<unit>', not Hz, kHz, MHz or GHz (write e.g. "100MHz" or
    /// "32.768kHz")`.
    UnknownUnit {
        /// The text as written.
        text: String,
        /// What follows the number.
        unit: String,
    },
    /// `'<text>' is not a frequency (write e.g. "100MHz" or "32.768kHz")`.
    NotANumber {
        /// The text as written.
        text: String,
    },
    /// `'<text>' is not a whole number of hertz`.
    NotWhole {
        /// The text as written.
        text: String,
    },
    /// `'<text>' is not between 1 Hz and 4294967295 Hz (a fixed clock's clock-frequency is
    /// one 32-bit cell)`.
    OutOfRange {
        /// The text as written.
        text: String,
    },
}

impl fmt::Display for FrequencyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoUnit { text } => write!(f, "'{text}' has no unit ({EXAMPLE})"),
            Self::UnknownUnit { text, unit } => write!(
                f,
                "'{text}' has the unit '{unit}', not Hz, kHz, MHz or GHz ({EXAMPLE})"
            ),
            Self::NotANumber { text } => write!(f, "'{text}' is not a frequency ({EXAMPLE})"),
            Self::NotWhole { text } => write!(f, "'{text}' is not a whole number of hertz"),
            Self::OutOfRange { text } => write!(
                f,
                "'{text}' is not between 1 Hz and {} Hz (a fixed clock's clock-frequency is one \
                 32-bit cell)",
                u32::MAX
            ),
        }
    }
}

/// Parses a frequency such as `"100MHz"`, `"32.768kHz"` or `"50_000_000 Hz"` into hertz (1 to
/// `u32::MAX`).
pub fn parse_frequency(text: &str) -> Result<u32, FrequencyError> {
    let error_text = || text.to_string();
    let Some(number) = decimal::split(text) else {
        return Err(FrequencyError::NotANumber { text: error_text() });
    };
    let scale = match UNITS.iter().find(|&&(unit, _)| unit == number.unit) {
        Some(&(_, scale)) => scale,
        None if number.unit.is_empty() => {
            return Err(FrequencyError::NoUnit { text: error_text() })
        }
        None => {
            return Err(FrequencyError::UnknownUnit {
                text: error_text(),
                unit: number.unit.to_string(),
            })
        }
    };
    let out_of_range = || FrequencyError::OutOfRange { text: error_text() };
    let hz = number.scaled(scale).map_err(|error| match error {
        ScaleError::NotWhole => FrequencyError::NotWhole { text: error_text() },
        ScaleError::TooLarge => out_of_range(),
    })?;
    u32::try_from(hz)
        .ok()
        .filter(|&hz| hz > 0)
        .ok_or_else(out_of_range)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frequencies_with_units_are_read_in_hertz() {
        assert_eq!(parse_frequency("100MHz"), Ok(100_000_000));
        assert_eq!(parse_frequency("32.768kHz"), Ok(32_768));
        assert_eq!(parse_frequency(" 1.5 GHz "), Ok(1_500_000_000));
        assert_eq!(parse_frequency("24_000_000Hz"), Ok(24_000_000));
        assert_eq!(parse_frequency("4294967295Hz"), Ok(u32::MAX));
    }

    #[test]
    fn frequencies_without_a_known_unit_or_out_of_range_are_refused() {
        let text = |t: &str| t.to_string();
        assert_eq!(
            parse_frequency("100"),
            Err(FrequencyError::NoUnit { text: text("100") })
        );
        assert_eq!(
            parse_frequency("100mhz"),
            Err(FrequencyError::UnknownUnit {
                text: text("100mhz"),
                unit: text("mhz")
            })
        );
        assert_eq!(
            parse_frequency("fast"),
            Err(FrequencyError::NotANumber { text: text("fast") })
        );
        assert_eq!(
            parse_frequency("1.5Hz"),
            Err(FrequencyError::NotWhole {
                text: text("1.5Hz")
            })
        );
        for out in ["0Hz", "4294967296Hz", "5GHz", "99999999999999999999GHz"] {
            assert_eq!(
                parse_frequency(out),
                Err(FrequencyError::OutOfRange { text: text(out) }),
                "{out}"
            );
        }
        assert_eq!(
            FrequencyText::Number("100".into()).hz(),
            Err(FrequencyError::NoUnit { text: text("100") })
        );
    }
}
