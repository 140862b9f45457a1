//! Cache colouring: which 4 KiB physical frames share sets of the last-level cache.
//!
//! A physically indexed cache of `size` bytes and `ways` ways has a way of `size / ways`
//! bytes. Two addresses that are equal modulo the way size index the same set. With 4 KiB
//! frames, a way holds `way / 4 KiB` frames, and frame `f` can only use the sets of
//! "colour" `f mod colours`. A VM given only frames of its colours can only evict lines of
//! those colours (Arm's caches are physically indexed; Xen, Bao and Jailhouse colour the same
//! way).
//!
//! A coloured VM's memory is the frames of its colours in a physical range, taken in address
//! order: its `i`-th 4 KiB guest page is the `i`-th such frame. With `k` colours of `n`, every
//! period of `n` frames gives the VM `k` of them, so the frame is found by arithmetic, without
//! a table ([`Colours::frame`]).

/// Bytes of a frame: the stage-2 page coloured memory is mapped with.
pub const FRAME: u64 = 4096;

/// The most colours Keel handles: a way of 256 KiB (a 4 MiB 16-way cache).
pub const MAX_COLOURS: u32 = 64;

/// The least memory of its colours Keel's coloured copy (its image, data and stacks) must find
/// in the upper half of its region (`[system] hypervisor_colours`).
pub const KEEL_COLOURED_MIN_BYTES: u64 = 2 << 20;

/// Where Keel's coloured copy goes in its region (`hypervisor_base`, `hypervisor_size` bytes):
/// the frames of `colours` from the first period boundary at or above the region's middle up
/// to its end. Returns that boundary, `frames_base = align_up(hypervisor_base +
/// hypervisor_size / 2, colours.period_bytes())` (colour 0's frame), and the bytes of those
/// frames (0 if `frames_base` is past the end). Memory that is not coloured takes every frame
/// from the middle on.
pub fn keel_frames(hypervisor_base: u64, hypervisor_size: u64, colours: Colours) -> (u64, u64) {
    let middle = hypervisor_base.saturating_add(hypervisor_size / 2);
    let end = hypervisor_base.saturating_add(hypervisor_size);
    if !colours.is_coloured() {
        return (middle, end.saturating_sub(middle));
    }
    let frames_base = middle
        .checked_next_multiple_of(colours.period_bytes())
        .unwrap_or(u64::MAX);
    (frames_base, colours.frames_from(frames_base, end) * FRAME)
}

/// The geometry of the last-level cache, as far as colouring needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheGeometry {
    /// Total bytes.
    pub size: u64,
    /// Ways (associativity).
    pub ways: u32,
    /// Bytes of a line.
    pub line: u32,
}

impl CacheGeometry {
    /// The number of sets.
    pub fn sets(&self) -> u64 {
        self.size / (u64::from(self.ways) * u64::from(self.line))
    }

    /// The number of colours: frames in one way (at least 1: a way smaller than a frame has
    /// one colour, which colouring cannot split).
    pub fn colours(&self) -> u32 {
        ((self.size / u64::from(self.ways)) / FRAME).max(1) as u32
    }

    /// Why the geometry is not one Keel can colour, if it is not: sizes that are not powers
    /// of two, a line larger than a frame, more colours than [`MAX_COLOURS`].
    pub fn problem(&self) -> Option<&'static str> {
        if self.ways == 0 || self.line == 0 || self.size == 0 {
            Some("size, ways and line must be above zero")
        } else if !self.size.is_power_of_two()
            || !self.ways.is_power_of_two()
            || !self.line.is_power_of_two()
        {
            Some("size, ways and line must be powers of two")
        } else if u64::from(self.line) > FRAME {
            Some("a line larger than 4 KiB")
        } else if self.size < u64::from(self.ways) * u64::from(self.line) {
            Some("fewer bytes than one line per way")
        } else if self.colours() > MAX_COLOURS {
            Some("more than 64 colours (a way larger than 256 KiB)")
        } else {
            None
        }
    }
}

/// A set of colours out of `count`, as a mask: bit `c` set if colour `c` is in the set.
/// `count == 0` is memory that is not coloured (every frame of its range).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Colours {
    /// Bit `c`: colour `c` is in the set.
    pub mask: u64,
    /// How many colours the cache has (a power of two), or 0 if the memory is not coloured.
    pub count: u32,
}

impl Colours {
    /// Memory that is not coloured.
    pub const NONE: Colours = Colours { mask: 0, count: 0 };

    /// Whether the memory is coloured.
    pub const fn is_coloured(&self) -> bool {
        self.count != 0
    }

    /// How many colours the set has.
    pub fn len(&self) -> u32 {
        self.mask.count_ones()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.mask == 0
    }

    /// Bytes of physical range one period of colours spans (`count` frames), to which a
    /// coloured range's start is aligned so that its first frame has colour 0.
    pub fn period_bytes(&self) -> u64 {
        u64::from(self.count) * FRAME
    }

    /// The physical address of guest page `page` of memory coloured `self` whose range
    /// starts at `base` (aligned to [`Self::period_bytes`]); None if the set is empty.
    #[inline]
    pub fn frame(&self, base: u64, page: u64) -> Option<u64> {
        let per_period = u64::from(self.len());
        if per_period == 0 {
            return None;
        }
        let period = page / per_period;
        let nth = (page % per_period) as u32;
        // The position of the set's nth colour: drop the nth lowest set bits first.
        let mut mask = self.mask;
        for _ in 0..nth {
            mask &= mask - 1;
        }
        let colour = u64::from(mask.trailing_zeros());
        Some(base + (period * u64::from(self.count) + colour) * FRAME)
    }

    /// How many frames of the set lie in `[start, end)`, `start` aligned to
    /// [`Self::period_bytes`] (its frame has colour 0); 0 if `end` is not above `start`.
    pub fn frames_from(&self, start: u64, end: u64) -> u64 {
        let frames = end.saturating_sub(start) / FRAME;
        let count = u64::from(self.count);
        if count == 0 {
            return frames;
        }
        // Whole periods give every colour of the set; the last, partial one its first
        // `frames % count` colours (fewer than 64, so the shift is in range).
        let partial = self.mask & ((1u64 << (frames % count)) - 1);
        frames / count * u64::from(self.len()) + u64::from(partial.count_ones())
    }

    /// Bytes of physical range that `size` bytes of memory coloured `self` spans from its
    /// start: whole periods, the last one up to and including its last frame.
    pub fn span(&self, size: u64) -> Option<u64> {
        let pages = size.div_ceil(FRAME);
        if pages == 0 {
            return Some(0);
        }
        let last = self.frame(0, pages - 1)?;
        Some(last + FRAME)
    }

    /// Translation tables (4 KiB each) that mapping `size` bytes of guest pages one by one
    /// takes below a level-1 table: level-3 tables for every 2 MiB and level-2 tables for
    /// every GiB, one more of each for a start that is not aligned.
    pub const fn page_tables(size: u64) -> usize {
        (size.div_ceil(2 << 20) + 1 + size.div_ceil(1 << 30) + 1) as usize
    }

    /// The colours both sets have.
    pub fn common(&self, other: &Colours) -> u64 {
        self.mask & other.mask
    }

    /// Parses a list of colours and ranges, as Xen's `llc-colors`: `"0-3"`, `"0,2,5-7"`,
    /// each below `count`. Errors name what is wrong.
    pub fn parse(text: &str, count: u32) -> Result<Colours, ColourListError> {
        let mut mask = 0u64;
        if text.trim().is_empty() {
            return Err(ColourListError::Empty);
        }
        for item in text.split(',') {
            let item = item.trim();
            let (first, last) = match item.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => (number(item)?, number(item)?),
            };
            if first > last {
                return Err(ColourListError::Backwards { first, last });
            }
            if last >= count {
                return Err(ColourListError::TooHigh {
                    colour: last,
                    count,
                });
            }
            for colour in first..=last {
                if mask & (1 << colour) != 0 {
                    return Err(ColourListError::Twice { colour });
                }
                mask |= 1 << colour;
            }
        }
        Ok(Colours { mask, count })
    }
}

/// The set as a list of colours and ranges, the form [`Colours::parse`] reads: `0-3,8`, runs of
/// two or more as ranges; `none` for an empty set.
impl core::fmt::Display for Colours {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.mask == 0 {
            return write!(f, "none");
        }
        let mut rest = self.mask;
        let mut separator = "";
        while rest != 0 {
            let first = rest.trailing_zeros();
            // The run of set bits from `first` on.
            let run = (rest >> first).trailing_ones();
            let last = first + run - 1;
            if run == 1 {
                write!(f, "{separator}{first}")?;
            } else {
                write!(f, "{separator}{first}-{last}")?;
            }
            separator = ",";
            rest &= !((u64::MAX >> (64 - run)) << first);
        }
        Ok(())
    }
}

fn number(text: &str) -> Result<u32, ColourListError> {
    let text = text.trim();
    text.parse::<u32>().map_err(|_| ColourListError::NotANumber)
}

/// Why a list of colours was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColourListError {
    /// No colour at all.
    Empty,
    /// An item is not a decimal number or a range of two.
    NotANumber,
    /// A range from a higher colour to a lower one.
    Backwards { first: u32, last: u32 },
    /// A colour the cache does not have.
    TooHigh { colour: u32, count: u32 },
    /// A colour named twice.
    Twice { colour: u32 },
}

impl core::fmt::Display for ColourListError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ColourListError::Empty => write!(f, "no colours"),
            ColourListError::NotANumber => {
                write!(f, "not a list of colours and ranges such as \"0-3,8\"")
            }
            ColourListError::Backwards { first, last } => {
                write!(f, "range {first}-{last} runs backwards")
            }
            ColourListError::TooHigh { colour, count } => write!(
                f,
                "colour {colour} is not one of the cache's {count} (0-{})",
                count - 1
            ),
            ColourListError::Twice { colour } => write!(f, "colour {colour} is named twice"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Cortex-A72-like cache the configuration gives QEMU `virt`.
    const A72: CacheGeometry = CacheGeometry {
        size: 1 << 20,
        ways: 16,
        line: 64,
    };

    #[test]
    fn a_1_mib_16_way_cache_has_16_colours_of_64_sets() {
        assert_eq!(A72.sets(), 1024);
        assert_eq!(A72.colours(), 16);
        assert_eq!(A72.problem(), None);
        let big = CacheGeometry {
            size: 32 << 20,
            ..A72
        };
        assert_eq!(
            big.problem(),
            Some("more than 64 colours (a way larger than 256 KiB)")
        );
        let odd = CacheGeometry { ways: 12, ..A72 };
        assert_eq!(
            odd.problem(),
            Some("size, ways and line must be powers of two")
        );
    }

    #[test]
    fn frames_come_in_address_order_with_the_sets_colours_only() {
        let colours = Colours::parse("0-3", 16).unwrap();
        let base = 0x4000_0000;
        let frames: Vec<u64> = (0..6).map(|i| colours.frame(base, i).unwrap()).collect();
        assert_eq!(
            frames,
            [
                base,
                base + 0x1000,
                base + 0x2000,
                base + 0x3000,
                base + 0x1_0000,
                base + 0x1_1000
            ]
        );
        let scattered = Colours::parse("1,5,15", 16).unwrap();
        let frames: Vec<u64> = (0..4).map(|i| scattered.frame(0, i).unwrap()).collect();
        assert_eq!(frames, [0x1000, 0x5000, 0xf000, 0x1_1000]);
        for page in 0..1000 {
            let frame = scattered.frame(0, page).unwrap();
            assert!(scattered.mask & (1 << ((frame / FRAME) % 16)) != 0);
        }
        assert_eq!(Colours { mask: 0, count: 16 }.frame(0, 0), None);
    }

    #[test]
    fn two_disjoint_sets_never_share_a_frame() {
        let a = Colours::parse("0-7", 16).unwrap();
        let b = Colours::parse("8-15", 16).unwrap();
        assert_eq!(a.common(&b), 0);
        let mut seen = std::collections::BTreeSet::new();
        for page in 0..512 {
            assert!(seen.insert(a.frame(0, page).unwrap()));
            assert!(seen.insert(b.frame(0, page).unwrap()));
        }
    }

    #[test]
    fn the_span_is_whole_periods_up_to_the_last_frame() {
        let quarter = Colours::parse("0-3", 16).unwrap();
        // 16 MiB in 4 of 16 colours spans 64 MiB, less the last period's 12 unused frames.
        assert_eq!(quarter.span(16 << 20), Some((64 << 20) - 12 * FRAME));
        let all = Colours::parse("0-15", 16).unwrap();
        assert_eq!(all.span(16 << 20), Some(16 << 20));
        assert_eq!(quarter.span(0), Some(0));
        assert_eq!(quarter.span(1), Some(FRAME));
    }

    #[test]
    fn keels_frames_are_its_colours_from_the_regions_middle_on() {
        let one = Colours::parse("15", 16).unwrap();
        // 32 MiB at 0x4000_0000: the upper 16 MiB holds 256 periods of 64 KiB, one frame each.
        assert_eq!(
            keel_frames(0x4000_0000, 32 << 20, one),
            (0x4100_0000, 256 * FRAME)
        );
        // A middle off a period boundary moves up to the next one.
        let quarter = Colours::parse("0-3", 16).unwrap();
        let (base, bytes) = keel_frames(0x4000_0000, 0x20_2000, quarter);
        assert_eq!(base, 0x4011_0000);
        // 0x4011_0000..0x4020_2000: 15 whole periods (60 frames), then 2 frames of colours 0-1.
        assert_eq!(bytes, 62 * FRAME);
        // A region whose middle rounds up past its end has none.
        assert_eq!(keel_frames(0x4000_0000, 0x4000, quarter), (0x4001_0000, 0));
        // Not coloured: every frame of the upper half.
        assert_eq!(
            keel_frames(0x4000_0000, 32 << 20, Colours::NONE),
            (0x4100_0000, 16 << 20)
        );
        assert_eq!(one.frames_from(0, 16 * FRAME - 1), 0);
        assert_eq!(one.frames_from(0, 16 * FRAME), 1);
        assert_eq!(
            Colours::parse("0-63", 64)
                .unwrap()
                .frames_from(0, 130 * FRAME),
            130
        );
    }

    #[test]
    fn lists_are_parsed_as_xens_and_refused_with_the_reason() {
        assert_eq!(Colours::parse("0-3", 16).unwrap().mask, 0xf);
        assert_eq!(Colours::parse(" 0, 2 ,5-7", 16).unwrap().mask, 0b1110_0101);
        let error = |text| Colours::parse(text, 16).unwrap_err().to_string();
        assert_eq!(error(""), "no colours");
        assert_eq!(
            error("a-3"),
            "not a list of colours and ranges such as \"0-3,8\""
        );
        assert_eq!(error("5-2"), "range 5-2 runs backwards");
        assert_eq!(
            error("0-16"),
            "colour 16 is not one of the cache's 16 (0-15)"
        );
        assert_eq!(error("1,0-3"), "colour 1 is named twice");
    }

    #[test]
    fn sets_are_written_as_lists_that_parse_back() {
        let written = |text| Colours::parse(text, 64).unwrap().to_string();
        assert_eq!(written("0-3,8"), "0-3,8");
        assert_eq!(written("5"), "5");
        assert_eq!(written("1,2"), "1-2");
        assert_eq!(written("0-63"), "0-63");
        assert_eq!(written("0,2,4,60-63"), "0,2,4,60-63");
        assert_eq!(Colours::NONE.to_string(), "none");
        for mask in [1u64, 0xf0f0, 0x8000_0000_0000_0001, u64::MAX] {
            let colours = Colours { mask, count: 64 };
            assert_eq!(Colours::parse(&colours.to_string(), 64), Ok(colours));
        }
    }
}
