//! Byte sizes as a person writes them in TOML (`16777216`, `"16M"`, `"0x100000"`), and as
//! messages show them (`16 MiB`).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Visitor};

/// A size in bytes, deserialized from an integer or from a string with an optional
/// `K`, `M` or `G` suffix (powers of 1024). Digits may be decimal or `0x` hexadecimal
/// and may contain `_` separators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

/// Parses a size string such as `"16M"`, `"0x100000"`, `"4_096"` or `"1G"`.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, multiplier) = match text.chars().last()? {
        'K' | 'k' => (&text[..text.len() - 1], 1u64 << 10),
        'M' | 'm' => (&text[..text.len() - 1], 1 << 20),
        'G' | 'g' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    let digits = digits.replace('_', "");
    let value = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => digits.parse::<u64>().ok()?,
    };
    value.checked_mul(multiplier)
}

/// Shows a size in the largest of GiB, MiB and KiB that divides it (`1 MiB`, `256 KiB`), or in
/// bytes (`1000 bytes`).
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes != 0 && bytes.trailing_zeros() >= shift {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

struct ByteSizeVisitor;

impl Visitor<'_> for ByteSizeVisitor {
    type Value = ByteSize;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a size: an integer, or a string like \"16M\" or \"0x100000\"")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<ByteSize, E> {
        Ok(ByteSize(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<ByteSize, E> {
        u64::try_from(value)
            .map(ByteSize)
            .map_err(|_| E::custom(format!("invalid size {value}: sizes cannot be negative")))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<ByteSize, E> {
        parse_size(value).map(ByteSize).ok_or_else(|| {
            E::custom(format!(
                "invalid size {value:?}: expected an integer (decimal or 0x hexadecimal) \
                 with an optional K, M or G suffix"
            ))
        })
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ByteSizeVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::{format_size, parse_size};

    #[test]
    fn suffixes_and_radixes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("4K"), Some(4096));
        assert_eq!(parse_size("16M"), Some(16 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("0x100000"), Some(0x10_0000));
        assert_eq!(parse_size("0x4000_0000"), Some(0x4000_0000));
        assert_eq!(parse_size("0x10M"), Some(16 << 20));
    }

    #[test]
    fn rejects_garbage_and_overflow() {
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("M"), None);
        assert_eq!(parse_size("16Q"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("0x"), None);
        assert_eq!(parse_size("99999999999G"), None);
    }

    #[test]
    fn sizes_are_shown_in_the_largest_unit_that_divides_them() {
        assert_eq!(format_size(1 << 20), "1 MiB");
        assert_eq!(format_size(256 << 10), "256 KiB");
        assert_eq!(format_size(3 << 30), "3 GiB");
        assert_eq!(format_size((1 << 20) + (4 << 10)), "1028 KiB");
        assert_eq!(format_size(1000), "1000 bytes");
        assert_eq!(format_size(0), "0 bytes");
    }
}
