//! Latency histograms that guests record and print and the host tools read back: log-linear
//! buckets, the console lines a histogram is printed as, and (host only) their parser.
//!
//! A guest records each sample (counter ticks) with a few instructions and no division, after
//! the sample's own measurement; it prints the histogram as a few short lines when it is not
//! measuring. Buckets are exact below [`EXACT`] (16 µs of QEMU's 62.5 MHz counter), then
//! [`SUB_BUCKETS`] per power of two (each at most 0.2 % of its values wide: 128 ns at 100 µs),
//! up to [`MAX_VALUE`]; 48 KiB of counts.
//!
//! The lines, each at most [`LINE_MAX`] bytes (Keel's console cuts lines of 256 into pieces),
//! or shorter if the guest asks ([`Printer::with_line_max`]):
//!
//! ```text
//! hist: NAME LOW-HIGH:COUNT LOW-HIGH:COUNT ...
//! hist: NAME end n=TOTAL
//! ```
//!
//! `LOW` and `HIGH` (exclusive) are a bucket's bounds in nanoseconds, only buckets with samples
//! are listed, and `TOTAL` is the sum of the counts listed since the previous `end` line of
//! `NAME`, so that a reader can tell a report that lost a line.

use core::sync::atomic::{AtomicU32, Ordering};

use crate::text::{Decimal, Out, Show};

/// Bits of a value below its leading one that pick its bucket within its power of two.
const SUB_BUCKET_BITS: u32 = 9;
/// Buckets per power of two above [`EXACT`].
pub const SUB_BUCKETS: u64 = 1 << SUB_BUCKET_BITS;
/// Values below this have a bucket each.
pub const EXACT: u64 = 2 * SUB_BUCKETS;
/// The largest value told apart; larger ones are counted in the last bucket.
pub const MAX_VALUE: u64 = u32::MAX as u64;
/// Number of buckets: the exact ones, then [`SUB_BUCKETS`] for each power of two from
/// [`EXACT`] up to 2^32.
pub const BUCKETS: usize = (EXACT + (32 - EXACT.trailing_zeros() as u64) * SUB_BUCKETS) as usize;

/// The bucket `value` is counted in.
pub fn bucket(value: u64) -> usize {
    let value = value.min(MAX_VALUE);
    if value < EXACT {
        return value as usize;
    }
    let power = 63 - value.leading_zeros();
    let shift = power - SUB_BUCKET_BITS;
    let sub = (value >> shift) - SUB_BUCKETS;
    let octave = u64::from(power - EXACT.trailing_zeros());
    (EXACT + octave * SUB_BUCKETS + sub) as usize
}

/// The values bucket `index` counts: `(low, high)`, `high` excluded.
pub fn bounds(index: usize) -> (u64, u64) {
    let index = index as u64;
    if index < EXACT {
        return (index, index + 1);
    }
    let octave = (index - EXACT) / SUB_BUCKETS;
    let sub = (index - EXACT) % SUB_BUCKETS;
    let shift = octave + u64::from(EXACT.trailing_zeros() - SUB_BUCKET_BITS);
    let low = (SUB_BUCKETS + sub) << shift;
    (low, low + (1 << shift))
}

/// Counts of samples by bucket. One context records at a time ([`Histogram::record`] is a
/// plain load and store: guests run with the MMU off, where exclusives are not guaranteed);
/// any context may read.
pub struct Histogram {
    counts: [AtomicU32; BUCKETS],
}

impl Histogram {
    /// An empty histogram (all zero bytes: a static one lands in `.bss`).
    pub const fn new() -> Self {
        Self {
            counts: [const { AtomicU32::new(0) }; BUCKETS],
        }
    }

    /// Counts one sample. Only one context may record into a histogram.
    pub fn record(&self, value: u64) {
        let count = &self.counts[bucket(value)];
        count.store(
            count.load(Ordering::Relaxed).saturating_add(1),
            Ordering::Relaxed,
        );
    }

    /// Samples counted in bucket `index` (0 beyond the last bucket).
    pub fn count(&self, index: usize) -> u32 {
        self.counts
            .get(index)
            .map_or(0, |count| count.load(Ordering::Relaxed))
    }

    /// Samples counted in all.
    pub fn total(&self) -> u64 {
        (0..BUCKETS).map(|index| u64::from(self.count(index))).sum()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// Longest line a [`Printer`] makes.
pub const LINE_MAX: usize = 200;
/// Longest histogram name printed; longer names are cut.
pub const NAME_MAX: usize = 32;
/// Longest `LOW-HIGH:COUNT` entry, with its space: a line always has room for one.
const ENTRY_MAX: usize = 1 + 20 + 1 + 20 + 1 + 10;
const _: () = assert!(6 + NAME_MAX + ENTRY_MAX <= LINE_MAX);

/// One printed line, made without an allocator.
pub struct Line {
    bytes: [u8; LINE_MAX],
    len: usize,
}

impl Line {
    /// An empty line.
    pub const fn new() -> Self {
        Self {
            bytes: [0; LINE_MAX],
            len: 0,
        }
    }

    /// The line's text.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }

    fn clear(&mut self) {
        self.len = 0;
    }
}

impl Default for Line {
    fn default() -> Self {
        Self::new()
    }
}

/// Bytes past the line's end are dropped (never the case for a [`Printer`]'s lines).
impl Out for Line {
    fn put_bytes(&mut self, text: &[u8]) {
        let take = text.len().min(LINE_MAX - self.len);
        self.bytes[self.len..self.len + take].copy_from_slice(&text[..take]);
        self.len += take;
    }
}

/// Prints a histogram as lines, one line per call, so that a guest can spread the lines over
/// its idle moments (each line is written with interrupts masked).
pub struct Printer {
    /// The first bucket not yet printed.
    next: usize,
    /// Samples listed so far.
    printed: u64,
    done: bool,
    /// Units of the recorded values per second (the counter's frequency).
    units_per_second: u64,
    /// Longest line made, unless one entry alone is longer.
    line_max: usize,
}

impl Printer {
    /// A printer of a histogram whose values count units of which there are
    /// `units_per_second` (the counter's frequency): printed in nanoseconds, in lines of at
    /// most [`LINE_MAX`] bytes.
    pub const fn new(units_per_second: u64) -> Self {
        Self {
            next: 0,
            printed: 0,
            done: false,
            units_per_second,
            line_max: LINE_MAX,
        }
    }

    /// The same with lines of at most `line_max` bytes, but at least one bucket a line
    /// (printing a line costs a guest about its length in console traps).
    pub const fn with_line_max(mut self, line_max: usize) -> Self {
        self.line_max = if line_max < LINE_MAX {
            line_max
        } else {
            LINE_MAX
        };
        self
    }

    /// Whether the end line has been made.
    pub fn done(&self) -> bool {
        self.done
    }

    fn nanoseconds(&self, value: u64) -> u64 {
        (u128::from(value) * 1_000_000_000 / u128::from(self.units_per_second.max(1))) as u64
    }

    /// Makes the next line of `histogram`'s report as `name` in `line`: false once the end
    /// line has been made (and `line` is left empty).
    pub fn next_line(&mut self, histogram: &Histogram, name: &str, line: &mut Line) -> bool {
        line.clear();
        if self.done {
            return false;
        }
        line.put("hist: ");
        line.put_bytes(&name.as_bytes()[..name.len().min(NAME_MAX)]);
        let header = line.len;
        let mut entry = Line::new();
        while self.next < BUCKETS {
            let count = histogram.count(self.next);
            if count > 0 {
                let (low, high) = bounds(self.next);
                entry.clear();
                entry.put(" ");
                Decimal(self.nanoseconds(low), 0).show(&mut entry);
                entry.put("-");
                Decimal(self.nanoseconds(high), 0).show(&mut entry);
                entry.put(":");
                Decimal(u64::from(count), 0).show(&mut entry);
                if line.len > header && line.len + entry.len > self.line_max {
                    break;
                }
                line.put_bytes(&entry.bytes[..entry.len]);
                self.printed += u64::from(count);
            }
            self.next += 1;
        }
        if line.len == header {
            line.put(" end n=");
            Decimal(self.printed, 0).show(line);
            self.done = true;
        }
        true
    }
}

#[cfg(feature = "std")]
pub use self::read::{parse_line, Bucket, Collector, Distribution, ReportLine};

/// Reading printed histograms back (host tools).
#[cfg(feature = "std")]
mod read {
    use std::collections::BTreeMap;

    /// One bucket of a printed histogram, in nanoseconds.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Bucket {
        /// Its smallest value.
        pub low: u64,
        /// The value above its largest.
        pub high: u64,
        /// Samples in it.
        pub count: u64,
    }

    /// One line of a printed histogram.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum ReportLine {
        /// `hist: NAME LOW-HIGH:COUNT ...`
        Buckets { name: String, buckets: Vec<Bucket> },
        /// `hist: NAME end n=TOTAL`
        End { name: String, total: u64 },
    }

    /// Reads `text` as a histogram line: `None` if it is not one (no `hist: ` at its start),
    /// an error naming what is wrong if it is one but malformed.
    pub fn parse_line(text: &str) -> Option<Result<ReportLine, String>> {
        let rest = text.strip_prefix("hist: ")?;
        let mut words = rest.split(' ');
        let name = words.next().unwrap_or_default().to_string();
        if name.is_empty() {
            return Some(Err(format!("histogram line without a name: '{text}'")));
        }
        let words: Vec<&str> = words.collect();
        if let ["end", total] = words[..] {
            return Some(
                total
                    .strip_prefix("n=")
                    .and_then(|n| n.parse().ok())
                    .map(|total| ReportLine::End {
                        name: name.clone(),
                        total,
                    })
                    .ok_or(format!(
                        "histogram '{name}': bad end '{total}' (expected n=COUNT) in '{text}'"
                    )),
            );
        }
        let buckets = words
            .iter()
            .map(|word| {
                let parsed = word.split_once(':').and_then(|(range, count)| {
                    let (low, high) = range.split_once('-')?;
                    Some(Bucket {
                        low: low.parse().ok()?,
                        high: high.parse().ok()?,
                        count: count.parse().ok()?,
                    })
                });
                parsed.filter(|b| b.low < b.high).ok_or(format!(
                    "histogram '{name}': bad bucket '{word}' (expected LOW-HIGH:COUNT, LOW < HIGH) in '{text}'"
                ))
            })
            .collect::<Result<Vec<_>, _>>();
        Some(buckets.map(|buckets| ReportLine::Buckets { name, buckets }))
    }

    /// A histogram read back: its buckets with samples, in increasing order.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct Distribution {
        /// The buckets, lowest first.
        pub buckets: Vec<Bucket>,
    }

    impl Distribution {
        /// Samples in all.
        pub fn total(&self) -> u64 {
            self.buckets.iter().map(|b| b.count).sum()
        }

        /// The bucket holding the sample of rank `⌈q × total⌉` (`q` in 0..=1: 0.5 is the
        /// median's, 1 the largest sample's); `None` when empty.
        pub fn quantile(&self, q: f64) -> Option<Bucket> {
            let total = self.total();
            let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
            let mut seen = 0;
            self.buckets.iter().copied().find(|bucket| {
                seen += bucket.count;
                seen >= rank
            })
        }

        /// The lowest bucket with samples.
        pub fn lowest(&self) -> Option<Bucket> {
            self.buckets.first().copied()
        }

        /// The highest bucket with samples.
        pub fn highest(&self) -> Option<Bucket> {
            self.buckets.last().copied()
        }
    }

    /// Gathers printed histograms from console lines: the last complete report of each name.
    #[derive(Debug, Default)]
    pub struct Collector {
        partial: BTreeMap<String, Vec<Bucket>>,
        complete: BTreeMap<String, Distribution>,
    }

    impl Collector {
        /// An empty collector.
        pub fn new() -> Self {
            Self::default()
        }

        /// Takes one console line (without any `[vm]` prefix): histogram lines are gathered,
        /// others ignored. An error names a malformed line, or a report whose end line counts
        /// other samples than its lines listed (a line lost).
        pub fn feed(&mut self, text: &str) -> Result<(), String> {
            match parse_line(text) {
                None => Ok(()),
                Some(Err(error)) => Err(error),
                Some(Ok(ReportLine::Buckets { name, buckets })) => {
                    self.partial.entry(name).or_default().extend(buckets);
                    Ok(())
                }
                Some(Ok(ReportLine::End { name, total })) => {
                    let mut buckets = self.partial.remove(&name).unwrap_or_default();
                    let listed: u64 = buckets.iter().map(|b| b.count).sum();
                    if listed != total {
                        return Err(format!(
                            "histogram '{name}': its end line counts {total} samples, its lines list {listed} (a line lost?)"
                        ));
                    }
                    buckets.sort_by_key(|b| b.low);
                    if let Some(pair) = buckets.windows(2).find(|pair| pair[0].high > pair[1].low) {
                        return Err(format!(
                            "histogram '{name}': buckets {}-{} and {}-{} overlap",
                            pair[0].low, pair[0].high, pair[1].low, pair[1].high
                        ));
                    }
                    self.complete.insert(name, Distribution { buckets });
                    Ok(())
                }
            }
        }

        /// The last complete report of `name`.
        pub fn get(&self, name: &str) -> Option<&Distribution> {
            self.complete.get(name)
        }

        /// The names of the complete reports.
        pub fn names(&self) -> impl Iterator<Item = &str> {
            self.complete.keys().map(String::as_str)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_once_in_order() {
        assert_eq!(BUCKETS, 12_288);
        let mut expected_low = 0;
        for index in 0..BUCKETS {
            let (low, high) = bounds(index);
            assert_eq!(
                low, expected_low,
                "bucket {index} starts where the last ended"
            );
            assert!(high > low);
            assert_eq!(bucket(low), index);
            assert_eq!(bucket(high - 1), index);
            expected_low = high;
        }
        assert_eq!(expected_low, MAX_VALUE + 1);
    }

    #[test]
    fn buckets_are_exact_below_1024_then_at_most_a_512th_wide() {
        assert_eq!(bounds(bucket(1023)), (1023, 1024));
        assert_eq!(bounds(bucket(1024)), (1024, 1026));
        assert_eq!(bounds(bucket(6250)), (6248, 6256));
        assert_eq!(bounds(bucket(1_000_000)), (999_424, 1_000_448));
        for value in [1024, 2000, 6250, 65_535, 1 << 20, 3_000_000_000] {
            let (low, high) = bounds(bucket(value));
            assert!((high - low) * 512 <= low, "{value}: {low}-{high}");
        }
    }

    #[test]
    fn values_above_the_range_land_in_the_last_bucket() {
        assert_eq!(bucket(MAX_VALUE), BUCKETS - 1);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    fn print_all(histogram: &Histogram, name: &str, units_per_second: u64) -> Vec<String> {
        let mut printer = Printer::new(units_per_second);
        let mut line = Line::new();
        let mut lines = Vec::new();
        while printer.next_line(histogram, name, &mut line) {
            assert!(line.as_str().len() <= LINE_MAX);
            lines.push(line.as_str().to_string());
        }
        assert!(printer.done());
        assert_eq!(line.as_str(), "");
        lines
    }

    #[test]
    fn a_histogram_prints_its_buckets_in_nanoseconds_then_its_total() {
        let histogram = Histogram::new();
        for value in [8, 8, 9, 2000, 2000, 2001] {
            histogram.record(value);
        }
        assert_eq!(histogram.total(), 6);
        // 62.5 MHz: 16 ns a tick.
        assert_eq!(
            print_all(&histogram, "tick-lateness", 62_500_000),
            [
                "hist: tick-lateness 128-144:2 144-160:1 32000-32032:3",
                "hist: tick-lateness end n=6"
            ]
        );
    }

    #[test]
    fn an_empty_histogram_prints_only_its_end() {
        assert_eq!(
            print_all(&Histogram::new(), "empty", 1_000_000_000),
            ["hist: empty end n=0"]
        );
    }

    #[test]
    fn a_wide_histogram_takes_several_lines_that_read_back_as_recorded() {
        let histogram = Histogram::new();
        let mut recorded = Vec::new();
        for value in (0..200u64).map(|i| i * i * 997 + 3) {
            histogram.record(value);
            recorded.push(value);
        }
        let lines = print_all(&histogram, "wide", 1_000_000_000);
        assert!(lines.len() > 5, "{lines:?}");
        let mut collector = Collector::new();
        for line in &lines {
            collector.feed(line).unwrap();
            collector.feed("an unrelated console line").unwrap();
        }
        let read = collector.get("wide").unwrap();
        assert_eq!(read.total(), 200);
        for value in recorded {
            let (low, high) = bounds(bucket(value));
            assert!(read
                .buckets
                .iter()
                .any(|b| b.low == low && b.high == high && b.count >= 1));
        }
        assert_eq!(read.lowest().unwrap().low, 3);
        assert!(read.highest().unwrap().high > 199 * 199 * 997);
    }

    #[test]
    fn quantiles_name_the_bucket_of_that_rank() {
        let histogram = Histogram::new();
        for _ in 0..90 {
            histogram.record(10);
        }
        for _ in 0..9 {
            histogram.record(20);
        }
        histogram.record(1000);
        let mut collector = Collector::new();
        for line in print_all(&histogram, "q", 1_000_000_000) {
            collector.feed(&line).unwrap();
        }
        let read = collector.get("q").unwrap();
        assert_eq!(read.quantile(0.5).unwrap().low, 10);
        assert_eq!(read.quantile(0.9).unwrap().low, 10);
        assert_eq!(read.quantile(0.95).unwrap().low, 20);
        assert_eq!(read.quantile(0.99).unwrap().low, 20);
        assert_eq!(read.quantile(1.0).unwrap().low, 1000);
        assert_eq!(read.quantile(1.0).unwrap().high, 1001);
        assert_eq!(Distribution::default().quantile(0.5), None);
    }

    #[test]
    fn the_last_complete_report_of_a_name_wins() {
        let mut collector = Collector::new();
        collector.feed("hist: a 1-2:5").unwrap();
        collector.feed("hist: a end n=5").unwrap();
        collector.feed("hist: a 3-4:7").unwrap();
        collector.feed("hist: a end n=7").unwrap();
        // An unfinished report (the run was stopped while printing it) is not taken.
        collector.feed("hist: a 5-6:9").unwrap();
        assert_eq!(
            collector.get("a").unwrap().buckets,
            [Bucket {
                low: 3,
                high: 4,
                count: 7
            }]
        );
        assert_eq!(collector.names().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn a_lost_line_is_an_error_naming_the_histogram() {
        let mut collector = Collector::new();
        collector.feed("hist: lat 1-2:5").unwrap();
        assert_eq!(
            collector.feed("hist: lat end n=9"),
            Err(
                "histogram 'lat': its end line counts 9 samples, its lines list 5 (a line lost?)"
                    .into()
            )
        );
    }

    #[test]
    fn malformed_lines_are_errors_naming_the_word() {
        assert_eq!(
            parse_line("hist: lat 1-2:x"),
            Some(Err(
                "histogram 'lat': bad bucket '1-2:x' (expected LOW-HIGH:COUNT, LOW < HIGH) in 'hist: lat 1-2:x'".into()
            ))
        );
        assert_eq!(
            parse_line("hist: lat 5-2:1").unwrap().unwrap_err(),
            "histogram 'lat': bad bucket '5-2:1' (expected LOW-HIGH:COUNT, LOW < HIGH) in 'hist: lat 5-2:1'"
        );
        assert_eq!(
            parse_line("hist: lat end 4").unwrap().unwrap_err(),
            "histogram 'lat': bad end '4' (expected n=COUNT) in 'hist: lat end 4'"
        );
        assert_eq!(parse_line("tick: s=1"), None);
        let mut collector = Collector::new();
        collector.feed("hist: o 1-3:1 2-4:1").unwrap();
        assert_eq!(
            collector.feed("hist: o end n=2"),
            Err("histogram 'o': buckets 1-3 and 2-4 overlap".into())
        );
    }

    #[test]
    fn short_lines_hold_as_many_buckets_as_fit_and_at_least_one() {
        let histogram = Histogram::new();
        for value in [1, 2, 3, 1000] {
            histogram.record(value);
        }
        let mut printer = Printer::new(1_000_000_000).with_line_max(20);
        let mut line = Line::new();
        let mut lines = Vec::new();
        while printer.next_line(&histogram, "short", &mut line) {
            lines.push(line.as_str().to_string());
        }
        assert_eq!(
            lines,
            [
                "hist: short 1-2:1",
                "hist: short 2-3:1",
                "hist: short 3-4:1",
                "hist: short 1000-1001:1",
                "hist: short end n=4"
            ]
        );
        let mut printer = Printer::new(1_000_000_000).with_line_max(30);
        printer.next_line(&histogram, "short", &mut line);
        assert_eq!(line.as_str(), "hist: short 1-2:1 2-3:1 3-4:1");
        let mut printer = Printer::new(1_000_000_000).with_line_max(10_000);
        printer.next_line(&histogram, "short", &mut line);
        assert_eq!(line.as_str(), "hist: short 1-2:1 2-3:1 3-4:1 1000-1001:1");
    }

    #[test]
    fn long_names_are_cut_and_still_leave_room_for_a_bucket() {
        let histogram = Histogram::new();
        histogram.record(MAX_VALUE);
        let name = "n".repeat(100);
        let lines = print_all(&histogram, &name, 1);
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0],
            format!(
                "hist: {} 4290772992000000000-4294967296000000000:1",
                "n".repeat(NAME_MAX)
            )
        );
    }
}
