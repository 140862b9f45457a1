//! Text without `core::fmt`: the few kinds of value Keel's own lines show (strings, decimal and
//! hexadecimal integers) and the messages of the errors it prints.
//!
//! Keel makes its lines with interrupts masked: with `core::fmt` a vCPU's start line took
//! about 1,100 instructions to format of the 4,400 it cost (the rest queueing and writing it
//! out, see `hypervisor/src/console.rs`); made of [`Show`] parts it takes about 1,000, with
//! no `core::fmt` machinery in the image. Each error's message is written once, as its
//! [`Show`]; its `Display` (host tools, tests) goes through [`fmt`].

/// Where text goes: a line being made, or a `core::fmt::Formatter` ([`fmt`]).
pub trait Out {
    /// Appends `text`: UTF-8 (a whole `str`, or ASCII digits).
    fn put_bytes(&mut self, text: &[u8]);

    /// Appends `text`.
    fn put(&mut self, text: &str) {
        self.put_bytes(text.as_bytes());
    }
}

/// A value that shows itself as text.
pub trait Show {
    /// Appends the value's text to `out`.
    fn show(&self, out: &mut dyn Out);
}

/// Shows each of `parts` in turn into `out`: `text!(out, "vm '", name, "' (id ", id, ")")`.
#[macro_export]
macro_rules! text {
    ($out:expr, $($part:expr),* $(,)?) => {{
        let out: &mut dyn $crate::text::Out = $out;
        $( $crate::text::Show::show(&$part, out); )*
    }};
}

impl Show for str {
    fn show(&self, out: &mut dyn Out) {
        out.put(self);
    }
}

impl<T: Show + ?Sized> Show for &T {
    fn show(&self, out: &mut dyn Out) {
        (**self).show(out);
    }
}

/// The digits of `value` in decimal, zero-padded to `width` (at most 20). Also the console's
/// counts of dropped output: one copy for both.
#[inline(never)]
pub(crate) fn decimal(mut value: u64, width: usize, buffer: &mut [u8; 20]) -> &[u8] {
    let mut at = buffer.len();
    loop {
        at -= 1;
        buffer[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 || at == 0 {
            break;
        }
    }
    pad(buffer, at, width)
}

/// The digits of `value` in hexadecimal, zero-padded to `width` (at most 20).
fn hexadecimal(mut value: u64, width: usize, buffer: &mut [u8; 20]) -> &[u8] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut at = buffer.len();
    loop {
        at -= 1;
        buffer[at] = DIGITS[(value & 0xf) as usize];
        value >>= 4;
        // `at == 0` never holds (16 digits at most): it lets the compiler drop the bounds check.
        if value == 0 || at == 0 {
            break;
        }
    }
    pad(buffer, at, width)
}

/// The digits from `at` on, after zeros that make them `width` long.
fn pad(buffer: &mut [u8; 20], mut at: usize, width: usize) -> &[u8] {
    let width = width.min(buffer.len());
    while buffer.len() - at < width && at > 0 {
        at -= 1;
        buffer[at] = b'0';
    }
    &buffer[at..]
}

/// An integer in decimal, at least `.1` digits (zero-padded): `Decimal(5, 6)` is `000005`
/// (`{:06}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decimal(pub u64, pub usize);

impl Show for Decimal {
    // One copy for every integer a line shows: small enough to be inlined into each, it would
    // grow every message that shows a number.
    #[inline(never)]
    fn show(&self, out: &mut dyn Out) {
        let mut buffer = [0; 20];
        out.put_bytes(decimal(self.0, self.1, &mut buffer));
    }
}

/// An integer in hexadecimal after `0x`, at least `.1` digits (zero-padded): `Hex(0x2a, 0)`
/// is `0x2a` (`{:#x}`), `Hex(0x2a, 8)` is `0x0000002a` (`{:#010x}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hex(pub u64, pub usize);

impl Show for Hex {
    fn show(&self, out: &mut dyn Out) {
        let mut buffer = [0; 20];
        out.put("0x");
        out.put_bytes(hexadecimal(self.0, self.1, &mut buffer));
    }
}

/// A template shown with each `{}` in it replaced by the next of its arguments:
/// `Fill("vm '{}' at {}", &[&name, &Hex(ipa, 0)])`. A line with several pieces of text is one
/// string, where a part for each piece took a `&str` of 16 bytes in the image and the code
/// that passes it. A `{}` beyond the last argument shows nothing.
#[derive(Clone, Copy)]
pub struct Fill<'a>(pub &'a str, pub &'a [&'a dyn Show]);

impl Show for Fill<'_> {
    fn show(&self, out: &mut dyn Out) {
        let mut args = self.1.iter();
        let mut rest = self.0.as_bytes();
        // A search for `{` alone, then a look at the byte after it: about half the
        // instructions of a search for the pair (a line made in a masked stretch pays them).
        while let Some(at) = rest.iter().position(|&byte| byte == b'{') {
            let (text, after) = rest.split_at(at);
            if after.get(1) == Some(&b'}') {
                out.put_bytes(text);
                if let Some(arg) = args.next() {
                    arg.show(out);
                }
                rest = after.get(2..).unwrap_or_default();
            } else {
                // A `{` of the text itself.
                out.put_bytes(rest.get(..=at).unwrap_or_default());
                rest = after.get(1..).unwrap_or_default();
            }
        }
        out.put_bytes(rest);
    }
}

/// The parts in turn (a line's parts, passed on as one).
impl Show for [&dyn Show] {
    fn show(&self, out: &mut dyn Out) {
        for part in self {
            part.show(out);
        }
    }
}

macro_rules! show_unsigned {
    ($($type:ty),*) => {$(
        impl Show for $type {
            fn show(&self, out: &mut dyn Out) {
                Decimal(*self as u64, 0).show(out);
            }
        }
    )*};
}

show_unsigned!(u8, u16, u32, u64, usize);

macro_rules! show_signed {
    ($($type:ty),*) => {$(
        impl Show for $type {
            fn show(&self, out: &mut dyn Out) {
                if *self < 0 {
                    out.put("-");
                }
                Decimal(self.unsigned_abs() as u64, 0).show(out);
            }
        }
    )*};
}

show_signed!(i32, i64);

/// A list as `[a, b, c]` (`{:?}` of a slice of integers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct List<'a, T>(pub &'a [T]);

impl<T: Show> Show for List<'_, T> {
    fn show(&self, out: &mut dyn Out) {
        out.put("[");
        for (index, value) in self.0.iter().enumerate() {
            if index > 0 {
                out.put(", ");
            }
            value.show(out);
        }
        out.put("]");
    }
}

/// Writes `value`'s text to a `core::fmt::Formatter`: the `Display` of a type whose text is
/// its [`Show`].
pub fn fmt(value: &dyn Show, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
    struct Formatter<'a, 'b> {
        f: &'a mut core::fmt::Formatter<'b>,
        result: core::fmt::Result,
    }
    impl Out for Formatter<'_, '_> {
        fn put_bytes(&mut self, text: &[u8]) {
            if self.result.is_ok() {
                self.result = core::str::from_utf8(text)
                    .map_err(|_| core::fmt::Error)
                    .and_then(|text| self.f.write_str(text));
            }
        }
    }
    let mut out = Formatter { f, result: Ok(()) };
    value.show(&mut out);
    out.result
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    struct Text(String);

    impl Out for Text {
        fn put_bytes(&mut self, text: &[u8]) {
            self.0.push_str(core::str::from_utf8(text).unwrap());
        }
    }

    /// What `value` shows, as a string (the tests of every `Show` in the crate use it).
    pub(crate) fn shown(value: &dyn Show) -> String {
        let mut text = Text(String::new());
        value.show(&mut text);
        text.0
    }

    #[test]
    fn integers_show_as_core_fmt_does() {
        for value in [0, 1, 9, 10, 42, 999_999, 1_000_000, u64::MAX] {
            assert_eq!(shown(&value), format!("{value}"));
            assert_eq!(shown(&Decimal(value, 6)), format!("{value:06}"));
            assert_eq!(shown(&Hex(value, 0)), format!("{value:#x}"));
            assert_eq!(shown(&Hex(value, 8)), format!("{value:#010x}"));
            assert_eq!(shown(&Hex(value, 2)), format!("{value:#04x}"));
        }
        for value in [0, 5, -1, i32::MIN, i32::MAX] {
            assert_eq!(shown(&value), format!("{value}"));
        }
        for value in [0, -2, i64::MIN, i64::MAX] {
            assert_eq!(shown(&value), format!("{value}"));
        }
        assert_eq!(shown(&7u8), "7");
        assert_eq!(shown(&usize::MAX), format!("{}", usize::MAX));
    }

    #[test]
    fn lists_show_as_debug_does() {
        for list in [&[][..], &[1], &[0, 1, 12]] {
            assert_eq!(shown(&List(list)), format!("{list:?}"));
        }
    }

    #[test]
    fn fill_puts_each_argument_in_its_place() {
        let fill = |template, value: u64| shown(&Fill(template, &[&value, &Hex(value, 0)]));
        assert_eq!(fill("{} at {}", 16), "16 at 0x10");
        assert_eq!(fill("value {} at {}.", 255), "value 255 at 0xff.");
        assert_eq!(fill("{}{}", 1), "10x1");
        assert_eq!(fill("no value", 1), "no value");
        assert_eq!(fill("", 1), "");
        assert_eq!(fill("{} {} {}", 2), "2 0x2 ");
        assert_eq!(fill("{ } { }}", 2), "{ } { }}");
        assert_eq!(fill("é {}é{", 3), "é 3é{");
    }

    #[test]
    fn parts_and_display() {
        struct Line(u64);
        impl Show for Line {
            fn show(&self, out: &mut dyn Out) {
                crate::text!(out, "value ", self.0, " at ", Hex(self.0, 0), "");
            }
        }
        impl core::fmt::Display for Line {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                fmt(self, f)
            }
        }
        assert_eq!(shown(&Line(255)), "value 255 at 0xff");
        assert_eq!(format!("{}", Line(16)), "value 16 at 0x10");
    }
}
