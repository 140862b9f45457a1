//! The kernel command line (`/chosen/bootargs`): whitespace-separated `flag` and `key=value` words.

/// A borrowed command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BootArgs<'a> {
    line: &'a str,
}

impl<'a> BootArgs<'a> {
    /// Wraps a command line.
    pub const fn new(line: &'a str) -> Self {
        Self { line }
    }

    /// The whole line.
    pub const fn as_str(&self) -> &'a str {
        self.line
    }

    /// The tokens, in order.
    pub fn tokens(&self) -> impl Iterator<Item = &'a str> {
        self.line.split_ascii_whitespace()
    }

    /// Whether the bare token `flag` is present.
    pub fn has_flag(&self, flag: &str) -> bool {
        self.tokens().any(|token| token == flag)
    }

    /// The value of the last `key=value` token for `key`.
    pub fn value(&self, key: &str) -> Option<&'a str> {
        self.tokens()
            .filter_map(|token| token.split_once('='))
            .filter(|(name, _)| *name == key)
            .map(|(_, value)| value)
            .last()
    }
}
