//! Shares of a pCPU as a person writes them in TOML: `"60%"`, `"12.5%"`, in parts per million.
//!
//! A percentage is a string: a decimal number (`_` separators allowed, an optional fraction of
//! at most four places, so that it is a whole number of parts per million) followed by `%`,
//! with optional spaces between, and at most 100%. A number without the `%` — a bare TOML
//! integer or float, or a string such as `"0.6"` — is refused: `0.6` and `60` both look like
//! a share.

use std::fmt;

use serde::de::{Deserialize, Deserializer};

use super::decimal::{self, ScaleError};

/// Parts per million in one percent.
const PPM_PER_PERCENT: u64 = 10_000;
/// 100%, in parts per million: the whole pCPU.
pub const WHOLE_PPM: u32 = 1_000_000;

/// How the messages say what to write.
const EXAMPLE: &str = "write e.g. \"60%\" or \"12.5%\"";

/// A percentage as written in the TOML, kept as text so that the validator can name the VM and
/// the field when it does not parse (see [`parse_percent`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PercentText {
    /// A string, as written.
    Text(String),
    /// A bare TOML number (integer or float), which has no `%`.
    Number(String),
}

/// Why a percentage is refused; each variant's doc comment is its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PercentError {
    /// `'<text>' has no '%' (write e.g. "60%" or "12.5%")`.
    NoUnit {
        /// The text as written.
        text: String,
    },
    /// `'<text>' has the unit '<unit>', not '%' (write e.g. "60%" or "12.5%")`.
    UnknownUnit {
        /// The text as written.
        text: String,
        /// What follows the number.
        unit: String,
    },
    /// `'<text>' is not a percentage (write e.g. "60%" or "12.5%")`.
    NotANumber {
        /// The text as written.
        text: String,
    },
    /// `'<text>' has more than 4 decimal places (a share is a whole number of parts per
    /// million)`.
    TooPrecise {
        /// The text as written.
        text: String,
    },
    /// `'<text>' is above 100%`.
    AboveWhole {
        /// The text as written.
        text: String,
    },
}

impl fmt::Display for PercentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoUnit { text } => write!(f, "'{text}' has no '%' ({EXAMPLE})"),
            Self::UnknownUnit { text, unit } => {
                write!(f, "'{text}' has the unit '{unit}', not '%' ({EXAMPLE})")
            }
            Self::NotANumber { text } => write!(f, "'{text}' is not a percentage ({EXAMPLE})"),
            Self::TooPrecise { text } => write!(
                f,
                "'{text}' has more than 4 decimal places (a share is a whole number of parts \
                 per million)"
            ),
            Self::AboveWhole { text } => write!(f, "'{text}' is above 100%"),
        }
    }
}

impl PercentText {
    /// The share in parts per million.
    pub fn ppm(&self) -> Result<u32, PercentError> {
        match self {
            Self::Text(text) => parse_percent(text),
            Self::Number(text) => Err(PercentError::NoUnit { text: text.clone() }),
        }
    }
}

/// Parses a percentage such as `"60%"`, `"12.5%"` or `"0.0001 %"` into parts per million
/// (at most 100%, one million).
pub fn parse_percent(text: &str) -> Result<u32, PercentError> {
    let error_text = || text.to_string();
    let Some(number) = decimal::split(text) else {
        return Err(PercentError::NotANumber { text: error_text() });
    };
    match number.unit {
        "" => return Err(PercentError::NoUnit { text: error_text() }),
        "%" => {}
        unit => {
            return Err(PercentError::UnknownUnit {
                text: error_text(),
                unit: unit.to_string(),
            })
        }
    }
    let above = || PercentError::AboveWhole { text: error_text() };
    let ppm = number
        .scaled(PPM_PER_PERCENT)
        .map_err(|error| match error {
            ScaleError::NotWhole => PercentError::TooPrecise { text: error_text() },
            ScaleError::TooLarge => above(),
        })?;
    u32::try_from(ppm)
        .ok()
        .filter(|&ppm| ppm <= WHOLE_PPM)
        .ok_or_else(above)
}

impl<'de> Deserialize<'de> for PercentText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(
            match decimal::Written::deserialize(
                deserializer,
                "a percentage: a string like \"60%\" or \"12.5%\"",
            )? {
                decimal::Written::Text(text) => PercentText::Text(text),
                decimal::Written::Number(text) => PercentText::Number(text),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_in_parts_per_million() {
        assert_eq!(parse_percent("60%"), Ok(600_000));
        assert_eq!(parse_percent("12.5%"), Ok(125_000));
        assert_eq!(parse_percent("0.0001%"), Ok(1));
        assert_eq!(parse_percent("33.3333 %"), Ok(333_333));
        assert_eq!(parse_percent("100%"), Ok(WHOLE_PPM));
        assert_eq!(parse_percent("100.0000%"), Ok(WHOLE_PPM));
        assert_eq!(
            parse_percent("0%"),
            Ok(0),
            "zero is the validator's to refuse"
        );
    }

    #[test]
    fn refuses_what_is_not_a_share() {
        let text = |text: &str| text.to_string();
        assert_eq!(
            parse_percent("60"),
            Err(PercentError::NoUnit { text: text("60") })
        );
        assert_eq!(
            parse_percent("0.6 ppm"),
            Err(PercentError::UnknownUnit {
                text: text("0.6 ppm"),
                unit: text("ppm")
            })
        );
        for garbage in ["", "%", "half", "-5%", "1.2.3%", "5.%"] {
            assert_eq!(
                parse_percent(garbage),
                Err(PercentError::NotANumber {
                    text: text(garbage)
                }),
                "{garbage:?}"
            );
        }
        assert_eq!(
            parse_percent("12.34567%"),
            Err(PercentError::TooPrecise {
                text: text("12.34567%")
            })
        );
        for above in ["100.0001%", "250%", "99999999999999999999%"] {
            assert_eq!(
                parse_percent(above),
                Err(PercentError::AboveWhole { text: text(above) }),
                "{above:?}"
            );
        }
        assert_eq!(
            PercentText::Number(text("60")).ppm(),
            Err(PercentError::NoUnit { text: text("60") })
        );
    }

    #[test]
    fn messages() {
        assert_eq!(
            parse_percent("60").unwrap_err().to_string(),
            "'60' has no '%' (write e.g. \"60%\" or \"12.5%\")"
        );
        assert_eq!(
            parse_percent("12.34567%").unwrap_err().to_string(),
            "'12.34567%' has more than 4 decimal places (a share is a whole number of parts \
             per million)"
        );
    }
}
