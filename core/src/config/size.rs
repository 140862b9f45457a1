//! Byte sizes as a person writes them in TOML: `16777216`, `"16M"`, `"0x100000"`.

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
    use super::parse_size;

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
}
