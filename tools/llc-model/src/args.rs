//! The plugin's arguments (`key=value`, one per QEMU `arg=`) parsed into [`Settings`].
#![forbid(unsafe_code)]

use std::path::PathBuf;

use keel_core::colour::CacheGeometry;

/// What the plugin was asked to model and where it writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The cache (`size=`, `ways=`, `line=`, all required).
    pub geometry: CacheGeometry,
    /// Physical ranges whose lookups are also counted on their own (`range=NAME:0xS-0xE`).
    pub ranges: Vec<NamedRange>,
    /// Physical ranges whose lookups count apart, as excluded (`exclude=0xS-0xE`).
    pub excluded: Vec<PhysRange>,
    /// The file the report goes to (`out=`), or QEMU's log if none.
    pub out: Option<PathBuf>,
    /// Lookups of all vCPUs between two interval lines (`interval=`), or none.
    pub interval: Option<u64>,
}

/// Physical addresses `start..end` (`end` not included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhysRange {
    pub start: u64,
    pub end: u64,
}

impl PhysRange {
    /// Whether `address` is in the range.
    pub fn contains(&self, address: u64) -> bool {
        (self.start..self.end).contains(&address)
    }
}

/// A physical range counted under its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedRange {
    pub name: String,
    pub range: PhysRange,
}

/// Why the arguments were refused; each message names the argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    /// An argument without `=`.
    NotKeyValue(String),
    /// A key the plugin does not know.
    Unknown(String),
    /// A value that is not a number (decimal, or hexadecimal after `0x`).
    NotANumber(String),
    /// A number too large for its key (`ways`, `line`: 32 bits).
    TooLarge(String),
    /// A key that may appear once appeared again.
    Twice(String),
    /// A required key is missing.
    Missing(&'static str),
    /// `size`, `ways` and `line` are not a cache Keel can colour.
    Geometry(&'static str),
    /// A range that is not `0xSTART-0xEND` with START below END.
    BadRange(String),
    /// A `range=` without a `NAME:` before its addresses.
    NoName(String),
    /// `interval=0`.
    ZeroInterval,
}

impl std::fmt::Display for ArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArgError::NotKeyValue(arg) => write!(f, "`{arg}`: not key=value"),
            ArgError::Unknown(arg) => write!(
                f,
                "`{arg}`: unknown argument (size, ways, line, range, exclude, out, interval)"
            ),
            ArgError::NotANumber(arg) => {
                write!(
                    f,
                    "`{arg}`: not a number (decimal, or hexadecimal after 0x)"
                )
            }
            ArgError::TooLarge(arg) => write!(f, "`{arg}`: too large"),
            ArgError::Twice(arg) => write!(f, "`{arg}`: given twice"),
            ArgError::Missing(key) => write!(f, "missing `{key}=`"),
            ArgError::Geometry(problem) => write!(f, "size, ways, line: {problem}"),
            ArgError::BadRange(arg) => {
                write!(f, "`{arg}`: not 0xSTART-0xEND with START below END")
            }
            ArgError::NoName(arg) => write!(f, "`{arg}`: not range=NAME:0xSTART-0xEND"),
            ArgError::ZeroInterval => write!(f, "`interval=0`: the interval must be above 0"),
        }
    }
}

impl Settings {
    /// Parses the plugin's arguments, each `key=value`.
    pub fn parse<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Settings, ArgError> {
        let (mut size, mut ways, mut line, mut out, mut interval) = (None, None, None, None, None);
        let (mut ranges, mut excluded) = (Vec::new(), Vec::new());
        for arg in args {
            let (key, value) = arg
                .split_once('=')
                .ok_or_else(|| ArgError::NotKeyValue(arg.into()))?;
            match key {
                "size" => set_once(&mut size, number(value, arg)?, arg)?,
                "ways" => set_once(&mut ways, narrow(number(value, arg)?, arg)?, arg)?,
                "line" => set_once(&mut line, narrow(number(value, arg)?, arg)?, arg)?,
                "interval" => set_once(&mut interval, number(value, arg)?, arg)?,
                "out" => set_once(&mut out, PathBuf::from(value), arg)?,
                "exclude" => excluded.push(range(value, arg)?),
                "range" => {
                    let (name, addresses) = value
                        .split_once(':')
                        .filter(|(name, _)| !name.is_empty())
                        .ok_or_else(|| ArgError::NoName(arg.into()))?;
                    ranges.push(NamedRange {
                        name: name.into(),
                        range: range(addresses, arg)?,
                    });
                }
                _ => return Err(ArgError::Unknown(arg.into())),
            }
        }
        let geometry = CacheGeometry {
            size: size.ok_or(ArgError::Missing("size"))?,
            ways: ways.ok_or(ArgError::Missing("ways"))?,
            line: line.ok_or(ArgError::Missing("line"))?,
        };
        if let Some(problem) = geometry.problem() {
            return Err(ArgError::Geometry(problem));
        }
        if interval == Some(0) {
            return Err(ArgError::ZeroInterval);
        }
        Ok(Settings {
            geometry,
            ranges,
            excluded,
            out,
            interval,
        })
    }
}

/// Puts `value` of the argument `arg` in `slot`, unless an earlier argument did.
fn set_once<T>(slot: &mut Option<T>, value: T, arg: &str) -> Result<(), ArgError> {
    match slot {
        Some(_) => Err(ArgError::Twice(arg.into())),
        None => {
            *slot = Some(value);
            Ok(())
        }
    }
}

/// A decimal number, or a hexadecimal one after `0x`, of the argument `arg`.
fn number(text: &str, arg: &str) -> Result<u64, ArgError> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
    .ok_or_else(|| ArgError::NotANumber(arg.into()))
}

/// `value` of the argument `arg` as a 32-bit number.
fn narrow(value: u64, arg: &str) -> Result<u32, ArgError> {
    u32::try_from(value).map_err(|_| ArgError::TooLarge(arg.into()))
}

/// `0xSTART-0xEND` (or decimal) with START below END, from the argument `arg`.
fn range(text: &str, arg: &str) -> Result<PhysRange, ArgError> {
    let bad = || ArgError::BadRange(arg.into());
    let (start, end) = text.split_once('-').ok_or_else(bad)?;
    let (start, end) = (
        number(start, arg).map_err(|_| bad())?,
        number(end, arg).map_err(|_| bad())?,
    );
    if start >= end {
        return Err(bad());
    }
    Ok(PhysRange { start, end })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CACHE: [&str; 3] = ["size=1048576", "ways=16", "line=64"];

    fn parse(extra: &[&str]) -> Result<Settings, ArgError> {
        Settings::parse(CACHE.iter().chain(extra).copied())
    }

    #[test]
    fn every_argument_is_read() {
        let settings = parse(&[
            "range=keel:0x40000000-0x40200000",
            "range=vm1:1073741824-1140850688",
            "exclude=0x40000000-0x40200000",
            "out=/tmp/llc.txt",
            "interval=100000",
        ])
        .unwrap();
        assert_eq!(
            settings.geometry,
            CacheGeometry {
                size: 1 << 20,
                ways: 16,
                line: 64
            }
        );
        let keel = PhysRange {
            start: 0x4000_0000,
            end: 0x4020_0000,
        };
        assert_eq!(settings.ranges[0].name, "keel");
        assert_eq!(settings.ranges[0].range, keel);
        assert_eq!(settings.ranges[1].range.end, 0x4400_0000);
        assert_eq!(settings.excluded, [keel]);
        assert_eq!(settings.out, Some(PathBuf::from("/tmp/llc.txt")));
        assert_eq!(settings.interval, Some(100_000));
        assert!(keel.contains(0x4000_0000) && !keel.contains(0x4020_0000));
    }

    #[test]
    fn bad_arguments_are_refused_by_name() {
        let after_the_cache = [
            (&["colour"][..], "`colour`: not key=value"),
            (
                &["colours=4"],
                "`colours=4`: unknown argument (size, ways, line, range, exclude, out, interval)",
            ),
            (
                &["interval=1e6"],
                "`interval=1e6`: not a number (decimal, or hexadecimal after 0x)",
            ),
            (&["ways=8"], "`ways=8`: given twice"),
            (&["out=a", "out=b"], "`out=b`: given twice"),
            (
                &["exclude=0x2000-0x1000"],
                "`exclude=0x2000-0x1000`: not 0xSTART-0xEND with START below END",
            ),
            (
                &["range=0x1000-0x2000"],
                "`range=0x1000-0x2000`: not range=NAME:0xSTART-0xEND",
            ),
            (
                &["range=a:0x1000"],
                "`range=a:0x1000`: not 0xSTART-0xEND with START below END",
            ),
            (
                &["interval=0"],
                "`interval=0`: the interval must be above 0",
            ),
        ];
        for (extra, message) in after_the_cache {
            assert_eq!(parse(extra).unwrap_err().to_string(), message);
        }
        let alone = [
            (&["size=1048576", "line=64"][..], "missing `ways=`"),
            (
                &["size=1048576", "ways=12", "line=64"],
                "size, ways, line: size, ways and line must be powers of two",
            ),
            (
                &["size=1048576", "ways=0x100000000", "line=64"],
                "`ways=0x100000000`: too large",
            ),
        ];
        for (args, message) in alone {
            let error = Settings::parse(args.iter().copied()).unwrap_err();
            assert_eq!(error.to_string(), message);
        }
    }
}
