//! The model: one set-associative, physically indexed cache shared by all vCPUs, LRU in each
//! set, and what each vCPU's and each named range's lookups found in it.
#![forbid(unsafe_code)]

use keel_core::colour::{CacheGeometry, Colours, FRAME};

use crate::args::{NamedRange, PhysRange, Settings};

/// A way that holds no line (no line number reaches it: a line is at least 1 byte).
const EMPTY: u64 = u64::MAX;

/// Hits and misses of some lookups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub hits: u64,
    pub misses: u64,
}

impl Counts {
    /// Lookups counted.
    pub fn accesses(&self) -> u64 {
        self.hits + self.misses
    }

    /// Misses per 1000 lookups (0 without lookups).
    pub fn misses_per_1000(&self) -> f64 {
        match self.accesses() {
            0 => 0.0,
            accesses => self.misses as f64 * 1000.0 / accesses as f64,
        }
    }

    fn add(&mut self, hit: bool) {
        if hit {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
    }

    /// The counts since `earlier`, a copy of these taken before.
    pub fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            hits: self.hits - earlier.hits,
            misses: self.misses - earlier.misses,
        }
    }
}

/// What one vCPU's lookups found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VcpuCounts {
    /// Lookups outside the excluded ranges.
    pub counted: Counts,
    /// Lookups in the excluded ranges.
    pub excluded: Counts,
    /// The colours of the lines its counted lookups touched (bit `c`: colour `c`).
    pub colours: u64,
}

/// The cache and its counters.
pub struct Model {
    geometry: CacheGeometry,
    /// log2 of the line's bytes.
    line_shift: u32,
    /// The line number's bits that select a set.
    set_mask: u64,
    /// `ways` line numbers per set, most recently used first; [`EMPTY`] where none.
    lines: Vec<u64>,
    ranges: Vec<NamedRange>,
    /// Per entry of `ranges`, all vCPUs together.
    range_counts: Vec<Counts>,
    excluded: Vec<PhysRange>,
    /// Per vCPU index (QEMU's, which is Keel's pCPU).
    vcpus: Vec<VcpuCounts>,
    /// Lookups between two intervals, and the lookups since the last one.
    interval: Option<u64>,
    since_interval: u64,
    /// Each vCPU's counted lookups when the last interval ended.
    interval_start: Vec<Counts>,
    /// The intervals ended and not yet taken: each vCPU's counted lookups in each.
    ended_intervals: Vec<Vec<Counts>>,
}

impl Model {
    /// An empty cache as `settings` describe it, with counters for `vcpus` vCPUs (more are
    /// added when a higher vCPU index looks up a line). `settings.geometry` must be valid
    /// ([`CacheGeometry::problem`]), as [`Settings::parse`] makes it.
    pub fn new(settings: &Settings, vcpus: usize) -> Model {
        let geometry = settings.geometry;
        Model {
            geometry,
            line_shift: geometry.line.trailing_zeros(),
            set_mask: geometry.sets() - 1,
            lines: vec![EMPTY; (geometry.sets() * u64::from(geometry.ways)) as usize],
            ranges: settings.ranges.clone(),
            range_counts: vec![Counts::default(); settings.ranges.len()],
            excluded: settings.excluded.clone(),
            vcpus: vec![VcpuCounts::default(); vcpus],
            interval: settings.interval,
            since_interval: 0,
            interval_start: vec![Counts::default(); vcpus],
            ended_intervals: Vec::new(),
        }
    }

    pub fn geometry(&self) -> CacheGeometry {
        self.geometry
    }

    /// An access of `size` bytes at physical `address` by vCPU `vcpu`: one lookup for each
    /// line it touches (two for an access across a line boundary). Only the lines of the
    /// access's first 4 KiB page: QEMU gives the physical address of its first byte, and the
    /// next virtual page may be any physical page (a coloured VM's is another colour's frame).
    pub fn access(&mut self, vcpu: usize, address: u64, size: u64) {
        if vcpu >= self.vcpus.len() {
            self.vcpus.resize(vcpu + 1, VcpuCounts::default());
            self.interval_start.resize(vcpu + 1, Counts::default());
        }
        let first = address >> self.line_shift;
        let page_end = address | (FRAME - 1);
        let last = address.saturating_add(size.max(1) - 1).min(page_end) >> self.line_shift;
        for line in first..=last {
            // The first byte of the access in this line.
            let byte = address.max(line << self.line_shift);
            self.look_up(vcpu, line, byte);
        }
    }

    /// Whether the line of `address` is in the cache (its LRU order left as it is).
    pub fn is_cached(&self, address: u64) -> bool {
        let line = address >> self.line_shift;
        self.set_of(line).contains(&line)
    }

    /// Each vCPU's counts, by vCPU index.
    pub fn vcpus(&self) -> &[VcpuCounts] {
        &self.vcpus
    }

    /// Each named range with its counts.
    pub fn ranges(&self) -> impl Iterator<Item = (&NamedRange, &Counts)> {
        self.ranges.iter().zip(&self.range_counts)
    }

    /// The intervals that ended since the last call: each vCPU's counted lookups in each.
    pub fn take_intervals(&mut self) -> Vec<Vec<Counts>> {
        std::mem::take(&mut self.ended_intervals)
    }

    /// The colours a vCPU touched as a set of the cache's colours.
    pub fn colours_of(&self, vcpu: &VcpuCounts) -> Colours {
        Colours {
            mask: vcpu.colours,
            count: self.geometry.colours(),
        }
    }

    fn set_of(&self, line: u64) -> &[u64] {
        let ways = self.geometry.ways as usize;
        let set = (line & self.set_mask) as usize;
        &self.lines[set * ways..(set + 1) * ways]
    }

    /// Looks `line` up for `vcpu` (the access's first byte in it at `byte`) and counts it.
    fn look_up(&mut self, vcpu: usize, line: u64, byte: u64) {
        let ways = self.geometry.ways as usize;
        let index = (line & self.set_mask) as usize;
        let set = &mut self.lines[index * ways..(index + 1) * ways];
        let hit = match set.iter().position(|&resident| resident == line) {
            Some(way) => {
                set[..=way].rotate_right(1);
                true
            }
            None => {
                // The least recently used (or an empty way) falls off the end.
                set.rotate_right(1);
                set[0] = line;
                false
            }
        };
        let counts = &mut self.vcpus[vcpu];
        if self.excluded.iter().any(|range| range.contains(byte)) {
            counts.excluded.add(hit);
        } else {
            counts.counted.add(hit);
            let colour = (byte / FRAME) % u64::from(self.geometry.colours());
            counts.colours |= 1 << colour;
        }
        for (named, range_counts) in self.ranges.iter().zip(&mut self.range_counts) {
            if named.range.contains(byte) {
                range_counts.add(hit);
            }
        }
        if let Some(interval) = self.interval {
            self.since_interval += 1;
            if self.since_interval == interval {
                self.since_interval = 0;
                let now: Vec<Counts> = self.vcpus.iter().map(|vcpu| vcpu.counted).collect();
                let deltas = now
                    .iter()
                    .zip(&self.interval_start)
                    .map(|(now, start)| now.since(start))
                    .collect();
                self.ended_intervals.push(deltas);
                self.interval_start = now;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1 MiB 16-way cache of 64-byte lines: 1024 sets, 16 colours of 64 sets.
    fn settings() -> Settings {
        Settings::parse(["size=1048576", "ways=16", "line=64"]).unwrap()
    }

    /// Bytes between two addresses of the same set: one way.
    const WAY: u64 = 64 * 1024;

    /// The `n`-th line of set `set`.
    fn line_of_set(set: u64, n: u64) -> u64 {
        0x4000_0000 + n * WAY + set * 64
    }

    #[test]
    fn a_full_set_evicts_its_least_recently_used_line() {
        let mut model = Model::new(&settings(), 1);
        for n in 0..16 {
            model.access(0, line_of_set(3, n), 8);
        }
        // Line 0 used again: line 1 is now the least recently used, and goes first.
        model.access(0, line_of_set(3, 0), 8);
        model.access(0, line_of_set(3, 16), 8);
        assert!(model.is_cached(line_of_set(3, 0)));
        assert!(!model.is_cached(line_of_set(3, 1)));
        model.access(0, line_of_set(3, 17), 8);
        assert!(!model.is_cached(line_of_set(3, 2)));
        assert!((3..18).all(|n| model.is_cached(line_of_set(3, n))));
        // Other sets are untouched.
        assert!(!model.is_cached(line_of_set(4, 0)));
        assert_eq!(
            model.vcpus()[0].counted,
            Counts {
                hits: 1,
                misses: 18
            }
        );
    }

    #[test]
    fn a_working_set_that_fits_misses_only_on_its_first_pass() {
        let mut model = Model::new(&settings(), 1);
        // 512 KiB, half the cache, one 8-byte load per 32 bytes (two per line).
        for _ in 0..3 {
            for address in (0x4000_0000..0x4008_0000).step_by(32) {
                model.access(0, address, 8);
            }
        }
        let lines = (512 * 1024) / 64;
        let counts = model.vcpus()[0].counted;
        assert_eq!(counts.misses, lines);
        assert_eq!(counts.accesses(), 3 * 2 * lines);
    }

    #[test]
    fn one_line_more_than_the_ways_thrashes_under_lru() {
        let mut model = Model::new(&settings(), 1);
        for _ in 0..10 {
            for n in 0..17 {
                model.access(0, line_of_set(0, n), 4);
            }
        }
        assert_eq!(model.vcpus()[0].counted.hits, 0);
        assert_eq!(model.vcpus()[0].counted.misses, 170);
    }

    /// vCPU 0 reads its 16 lines in each set of colour 0, vCPU 1 then reads as many lines
    /// at `other`, then vCPU 0 reads its own again: the hits of that second pass.
    fn second_pass_hits(other: u64) -> u64 {
        let mut model = Model::new(&settings(), 2);
        let colour_0_sets = 0..64;
        let pass = |model: &mut Model, vcpu, base| {
            for set in colour_0_sets.clone() {
                for n in 0..16 {
                    model.access(vcpu, base + n * WAY + set * 64, 8);
                }
            }
        };
        pass(&mut model, 0, 0x4000_0000);
        pass(&mut model, 1, other);
        let before = model.vcpus()[0].counted;
        pass(&mut model, 0, 0x4000_0000);
        model.vcpus()[0].counted.since(&before).hits
    }

    #[test]
    fn vcpus_evict_each_others_lines_only_in_colours_they_share() {
        // vCPU 1's lines in colour 0 too (the frames 16 apart): every line of vCPU 0 evicted.
        assert_eq!(second_pass_hits(0x5000_0000), 0);
        // vCPU 1's lines in colour 1 (one frame on): vCPU 0's all still there.
        assert_eq!(second_pass_hits(0x5000_1000), 64 * 16);
    }

    #[test]
    fn colours_ranges_and_exclusions_are_counted_apart() {
        let settings = Settings::parse([
            "size=1048576",
            "ways=16",
            "line=64",
            "range=low:0x40000000-0x40010000",
            "range=all:0x40000000-0x80000000",
            "exclude=0x40000000-0x40001000",
        ])
        .unwrap();
        let mut model = Model::new(&settings, 2);
        // vCPU 1: frames of colours 2, 3 and 8, twice; one 8-byte access across two lines.
        for _ in 0..2 {
            for address in [0x4000_2000, 0x4000_3000, 0x4000_8000, 0x4001_8000] {
                model.access(1, address, 8);
            }
        }
        model.access(1, 0x4000_203c, 8);
        // vCPU 0: only the excluded frame (colour 0).
        model.access(0, 0x4000_0000, 8);
        model.access(0, 0x4000_0000, 8);
        let (vcpu0, vcpu1) = (model.vcpus()[0], model.vcpus()[1]);
        assert_eq!(vcpu0.counted, Counts::default());
        assert_eq!(vcpu0.excluded, Counts { hits: 1, misses: 1 });
        assert_eq!(model.colours_of(&vcpu0).to_string(), "none");
        assert_eq!(vcpu1.counted, Counts { hits: 5, misses: 5 });
        assert_eq!(model.colours_of(&vcpu1).to_string(), "2-3,8");
        assert_eq!(vcpu1.counted.misses_per_1000(), 500.0);
        let ranges: Vec<(&str, Counts)> = model
            .ranges()
            .map(|(named, counts)| (named.name.as_str(), *counts))
            .collect();
        assert_eq!(
            ranges,
            [
                ("low", Counts { hits: 5, misses: 5 }),
                ("all", Counts { hits: 6, misses: 6 })
            ]
        );
        // An access across a page boundary counts only its first page's line: the next
        // page's frame is unknown (here it would be colour 3's, already touched, so the
        // colours show nothing; the count does).
        model.access(1, 0x4000_2ffc, 8);
        assert_eq!(
            model.vcpus()[1].counted.hits + model.vcpus()[1].counted.misses,
            11
        );
        // A vCPU not known at the start is added.
        model.access(5, 0x4000_2000, 8);
        assert_eq!(model.vcpus().len(), 6);
        assert_eq!(model.vcpus()[5].counted.hits, 1);
    }

    #[test]
    fn intervals_hold_each_vcpus_lookups_since_the_last() {
        let mut settings = settings();
        settings.interval = Some(4);
        let mut model = Model::new(&settings, 2);
        for address in [0x4000_0000, 0x4000_0040, 0x4000_0000] {
            model.access(0, address, 8);
        }
        assert!(model.take_intervals().is_empty());
        // The fourth lookup ends the first interval; the fifth to eighth the second.
        model.access(1, 0x4000_0080, 8);
        for _ in 0..4 {
            model.access(1, 0x4000_0080, 8);
        }
        let intervals = model.take_intervals();
        assert_eq!(
            intervals,
            [
                vec![Counts { hits: 1, misses: 2 }, Counts { hits: 0, misses: 1 }],
                vec![Counts::default(), Counts { hits: 4, misses: 0 }],
            ]
        );
        assert!(model.take_intervals().is_empty());
    }
}
