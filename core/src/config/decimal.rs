//! A decimal number followed by a unit, as durations (`"1.5ms"`) and percentages (`"12.5%"`)
//! are written: split, then scaled to a whole number of the smallest unit, exactly.
//!
//! The number is digits with `_` separators allowed and an optional fraction (`"1.5"`,
//! `".25"`; not `"1."` or `"1.2.3"`); spaces may surround it and separate it from its unit.

/// A quantity with a unit as the TOML file wrote it: a string (`"1.5ms"`, `"60%"`), or a bare
/// number, which has no unit and is refused with a message saying so.
pub enum Written {
    /// A string, as written.
    Text(String),
    /// A bare TOML number (integer or float).
    Number(String),
}

impl Written {
    /// Deserializes a quantity from a string or a bare number; `expecting` is what a value of
    /// another type is told it should have been (e.g. `a duration: a string with a unit like
    /// "250us"`).
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
        expecting: &'static str,
    ) -> Result<Written, D::Error> {
        deserializer.deserialize_any(WrittenVisitor(expecting))
    }
}

struct WrittenVisitor(&'static str);

impl serde::de::Visitor<'_> for WrittenVisitor {
    type Value = Written;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str(self.0)
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Written, E> {
        Ok(Written::Text(value.to_string()))
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Written, E> {
        Ok(Written::Number(value.to_string()))
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Written, E> {
        Ok(Written::Number(value.to_string()))
    }

    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Written, E> {
        Ok(Written::Number(value.to_string()))
    }
}

/// A number as written, split from its unit; what [`split`] returns.
#[derive(Debug, PartialEq, Eq)]
pub struct Decimal<'a> {
    /// Digits before the point, separators removed (may be empty: `".5"`).
    whole: String,
    /// Digits after the point, separators removed (empty without a point).
    fraction: String,
    /// What follows the number, leading spaces removed (empty: no unit).
    pub unit: &'a str,
}

/// Why a number cannot be scaled to a whole number of the smallest unit.
#[derive(Debug, PartialEq, Eq)]
pub enum ScaleError {
    /// The result has a fraction of the smallest unit (`"1.5ns"`).
    NotWhole,
    /// The result does not fit 64 bits.
    TooLarge,
}

/// Splits `text` into its number and unit; `None` if it does not start with a number.
pub fn split(text: &str) -> Option<Decimal<'_>> {
    let trimmed = text.trim();
    let number_end = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '_' || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let (whole, fraction) = (whole.replace('_', ""), fraction.replace('_', ""));
    let shapeless = (whole.is_empty() && fraction.is_empty())
        || fraction.contains('.')
        || (number.contains('.') && fraction.is_empty());
    (!shapeless).then(|| Decimal {
        whole,
        fraction,
        unit: unit.trim_start(),
    })
}

impl Decimal<'_> {
    /// The number times `scale` (the length of its unit in the smallest unit), if that is a
    /// whole number that fits 64 bits.
    pub fn scaled(&self, scale: u64) -> Result<u64, ScaleError> {
        let whole: u64 = if self.whole.is_empty() {
            0
        } else {
            self.whole.parse().map_err(|_| ScaleError::TooLarge)?
        };
        let whole = whole.checked_mul(scale).ok_or(ScaleError::TooLarge)?;
        // The fraction, without its trailing zeros, must be a whole number of the smallest unit.
        let fraction = self.fraction.trim_end_matches('0');
        let fraction = if fraction.is_empty() {
            0
        } else {
            let digits = u32::try_from(fraction.len()).map_err(|_| ScaleError::NotWhole)?;
            let divisor = 10u64.checked_pow(digits).ok_or(ScaleError::NotWhole)?;
            let value: u64 = fraction.parse().map_err(|_| ScaleError::NotWhole)?;
            let scaled = u128::from(value) * u128::from(scale);
            if scaled % u128::from(divisor) != 0 {
                return Err(ScaleError::NotWhole);
            }
            u64::try_from(scaled / u128::from(divisor)).map_err(|_| ScaleError::TooLarge)?
        };
        whole.checked_add(fraction).ok_or(ScaleError::TooLarge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_number_and_unit() {
        let decimal = split(" 1_000.5 ms ").unwrap();
        assert_eq!(decimal.unit, "ms");
        assert_eq!(decimal.scaled(10), Ok(10_005));
        assert_eq!(split("12.5%").unwrap().unit, "%");
        assert_eq!(split("60").unwrap().unit, "");
        assert_eq!(split(".5us").unwrap().scaled(1_000), Ok(500));
        for shapeless in ["", "ms", "-1ms", "1.2.3ms", "1.ms", ".", "%"] {
            assert_eq!(split(shapeless), None, "{shapeless:?}");
        }
    }

    #[test]
    fn scales_exactly_or_refuses() {
        let scaled = |text: &str, scale| split(text).unwrap().scaled(scale);
        assert_eq!(scaled("12.5", 10_000), Ok(125_000));
        assert_eq!(scaled("12.3456", 10_000), Ok(123_456));
        assert_eq!(scaled("12.34560000", 10_000), Ok(123_456));
        assert_eq!(scaled("12.34567", 10_000), Err(ScaleError::NotWhole));
        assert_eq!(
            scaled("0.0000000001", 1_000_000_000),
            Err(ScaleError::NotWhole)
        );
        assert_eq!(
            scaled("18446744074", 1_000_000_000),
            Err(ScaleError::TooLarge)
        );
        assert_eq!(scaled("99999999999999999999", 1), Err(ScaleError::TooLarge));
    }
}
