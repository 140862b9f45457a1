//! Why a VM's colours, Keel's own or the last-level cache's geometry are refused: one variant
//! per rule, each with its exact message (its doc comment).

use std::fmt;

use super::error::AddressRange;
use super::size::format_size;
use crate::colour::{CacheGeometry, ColourListError, Colours};

/// What `[system] llc` or `hypervisor_colours`, or a `[[vm]]`'s `colours`, `colours_exclusive`
/// or the memory they colour, breaks; shown after `<subject>: <field>: `. A set of colours shows as Xen's
/// `llc-colors` writes it, after `colours` (`colours 4-7`, `colours 0,2,5-7`), or `colour 3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColourProblem {
    /// `colouring needs the last-level cache's geometry: the configuration gives no [system]
    /// llc, and board <board>'s device tree <why>: give [system] llc = { size = "1M", ways =
    /// 16, line = 64 } with the cache's own size, ways and line size`.
    NoGeometry {
        /// The board's name.
        board: &'static str,
        /// What its device tree lacks (`has no unified level-2 or level-3 cache node ...`).
        why: String,
    },
    /// `a cache of <size>, <ways> ways and <line>-byte lines cannot be coloured: <problem>`
    /// (`[system] llc`), or `board <board>'s device tree gives the last-level cache at
    /// '<path>' as <size>, <ways> ways and <line>-byte lines, which cannot be coloured:
    /// <problem>`.
    Geometry {
        /// The geometry.
        geometry: CacheGeometry,
        /// Where it came from: `None` for `[system] llc`, or the board and the cache's node.
        node: Option<(&'static str, String)>,
        /// [`CacheGeometry::problem`].
        problem: &'static str,
    },
    /// `"<text>": <error>`: not a list of the cache's colours.
    List {
        /// The list as written.
        text: String,
        /// Why it is refused.
        error: ColourListError,
    },
    /// `needs colours: a VM without colours uses every colour of the cache`.
    ExclusiveWithoutColours,
    /// `flash is not coloured: a VM with colours has no flash`.
    Flash,
    /// `<ipa> is its memory's base, as for a VM mapped 1:1, but its memory is coloured: its
    /// IPAs are no longer its physical addresses (guest page i is the i-th frame of its
    /// colours), so nothing may rely on them being equal`.
    OneToOne {
        /// The VM's ipa, and its memory's base.
        ipa: u64,
    },
    /// `base <base> is not aligned to <period> (<period in KiB>: a period of the cache's
    /// <count> colours, so that its first frame has colour 0)`.
    BaseUnaligned {
        /// The memory's base.
        base: u64,
        /// The VM's colours.
        colours: Colours,
    },
    /// `<size> in colours <colours> spans to <end>, past RAM's end at <ram_end>: more memory
    /// than its colours can hold inside the RAM given`.
    BeyondRam {
        /// The guest's RAM.
        size: u64,
        /// The VM's colours.
        colours: Colours,
        /// The end of its span.
        end: u64,
        /// The end of `[system] ram`.
        ram_end: u64,
    },
    /// `span <range> overlaps vm '<other>' memory span <other_range>, and both use colours
    /// <common>: coloured VMs share a range only with disjoint colours`.
    SpansShareColours {
        /// This VM's span.
        range: AddressRange,
        /// The earlier VM.
        other: String,
        /// Its span.
        other_range: AddressRange,
        /// The colours both use.
        common: Colours,
    },
    /// `<capacity> of colours <colours> in the upper half of the hypervisor region <region>
    /// (from <frames_base> to its end) is less than the <min> Keel's image, data and stacks are
    /// copied to: give a larger hypervisor region or more colours`.
    KeelTooFewFrames {
        /// Keel's colours.
        colours: Colours,
        /// The bytes of their frames in the region's upper half ([`crate::colour::keel_frames`]).
        capacity: u64,
        /// `[system] hypervisor`.
        region: AddressRange,
        /// Where those frames start.
        frames_base: u64,
        /// [`crate::colour::KEEL_COLOURED_MIN_BYTES`].
        min: u64,
    },
    /// `shares colours <common> with Keel (system.hypervisor_colours), and keeps its colours
    /// its own (colours_exclusive = true)`.
    ExclusiveSharesWithKeel {
        /// The colours both use.
        common: Colours,
    },
    /// `shares colours <common> with vm '<other>', which keeps its colours its own
    /// (colours_exclusive = true)`.
    TakenByExclusive {
        /// The earlier VM, exclusive.
        other: String,
        /// The colours both use.
        common: Colours,
    },
    /// `vm '<other>' also uses colours <common>, and this VM keeps its colours its own
    /// (colours_exclusive = true)`.
    ExclusiveShared {
        /// The earlier VM.
        other: String,
        /// The colours both use.
        common: Colours,
    },
    /// `none given, so the VM uses all <count> colours, and vm '<other>' keeps colours
    /// <colours> its own (colours_exclusive = true)`.
    UncolouredBesideExclusive {
        /// The earlier VM, exclusive.
        other: String,
        /// Its colours.
        colours: Colours,
    },
    /// `vm '<other>' has no colours, so it uses all <count> colours, this VM's colours
    /// <colours> included`.
    ExclusiveBesideUncoloured {
        /// The earlier VM, not coloured.
        other: String,
        /// This VM's colours.
        colours: Colours,
    },
}

/// A set of colours as messages show it: `colour 3`, `colours 4-7`, `colours 0,2,5-7`.
fn named(colours: &Colours) -> String {
    if colours.len() == 1 {
        format!("colour {colours}")
    } else {
        format!("colours {colours}")
    }
}

/// A cache's geometry as messages show it: `1 MiB, 16 ways and 64-byte lines`.
fn geometry_text(geometry: &CacheGeometry) -> String {
    format!(
        "{}, {} ways and {}-byte lines",
        format_size(geometry.size),
        geometry.ways,
        geometry.line
    )
}

impl fmt::Display for ColourProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoGeometry { board, why } => write!(
                f,
                "colouring needs the last-level cache's geometry: the configuration gives no \
                 [system] llc, and board {board}'s device tree {why}: give [system] llc = \
                 {{ size = \"1M\", ways = 16, line = 64 }} with the cache's own size, ways and \
                 line size"
            ),
            Self::Geometry {
                geometry,
                node: None,
                problem,
            } => write!(
                f,
                "a cache of {} cannot be coloured: {problem}",
                geometry_text(geometry)
            ),
            Self::Geometry {
                geometry,
                node: Some((board, path)),
                problem,
            } => write!(
                f,
                "board {board}'s device tree gives the last-level cache at '{path}' as {}, \
                 which cannot be coloured: {problem}",
                geometry_text(geometry)
            ),
            Self::List { text, error } => write!(f, "{text:?}: {error}"),
            Self::ExclusiveWithoutColours => {
                f.write_str("needs colours: a VM without colours uses every colour of the cache")
            }
            Self::Flash => f.write_str("flash is not coloured: a VM with colours has no flash"),
            Self::OneToOne { ipa } => write!(
                f,
                "{ipa:#x} is its memory's base, as for a VM mapped 1:1, but its memory is \
                 coloured: its IPAs are no longer its physical addresses (guest page i is the \
                 i-th frame of its colours), so nothing may rely on them being equal"
            ),
            Self::BaseUnaligned { base, colours } => write!(
                f,
                "base {base:#x} is not aligned to {:#x} ({}: a period of the cache's {} \
                 colours, so that its first frame has colour 0)",
                colours.period_bytes(),
                format_size(colours.period_bytes()),
                colours.count
            ),
            Self::BeyondRam {
                size,
                colours,
                end,
                ram_end,
            } => write!(
                f,
                "{} in {} spans to {end:#x}, past RAM's end at {ram_end:#x}: more memory \
                 than its colours can hold inside the RAM given",
                format_size(*size),
                named(colours)
            ),
            Self::SpansShareColours {
                range,
                other,
                other_range,
                common,
            } => write!(
                f,
                "span {range} overlaps vm '{other}' memory span {other_range}, and both use \
                 {}: coloured VMs share a range only with disjoint colours",
                named(common)
            ),
            Self::KeelTooFewFrames {
                colours,
                capacity,
                region,
                frames_base,
                min,
            } => write!(
                f,
                "{} of {} in the upper half of the hypervisor region {region} (from \
                 {frames_base:#x} to its end) is less than the {} Keel's image, data and stacks \
                 are copied to: give a larger hypervisor region or more colours",
                format_size(*capacity),
                named(colours),
                format_size(*min)
            ),
            Self::ExclusiveSharesWithKeel { common } => write!(
                f,
                "shares {} with Keel (system.hypervisor_colours), and keeps its colours its own \
                 (colours_exclusive = true)",
                named(common)
            ),
            Self::TakenByExclusive { other, common } => write!(
                f,
                "shares {} with vm '{other}', which keeps its colours its own \
                 (colours_exclusive = true)",
                named(common)
            ),
            Self::ExclusiveShared { other, common } => write!(
                f,
                "vm '{other}' also uses {}, and this VM keeps its colours its own \
                 (colours_exclusive = true)",
                named(common)
            ),
            Self::UncolouredBesideExclusive { other, colours } => write!(
                f,
                "none given, so the VM uses all {} colours, and vm '{other}' keeps {} its own \
                 (colours_exclusive = true)",
                colours.count,
                named(colours)
            ),
            Self::ExclusiveBesideUncoloured { other, colours } => write!(
                f,
                "vm '{other}' has no colours, so it uses all {} colours, this VM's {} included",
                colours.count,
                named(colours)
            ),
        }
    }
}
