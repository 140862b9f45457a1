//! Why a `[[vm.passthrough]]` table or `[system] iommu` is refused: one variant per rule, each
//! with its exact message.

use std::fmt;

use super::error::AddressRange;

/// What a `[[vm.passthrough]]` table breaks; shown after `vm '<name>': passthrough: `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassthroughProblem {
    /// `the board's device tree cannot be read: <error>`.
    BoardTree {
        /// Why.
        error: String,
    },
    /// `'<path>' is not a node directly under the root ('/name@address')`.
    NotTopLevel {
        /// The path given.
        path: String,
    },
    /// `'<path>' is not in the board's device tree`.
    NotFound {
        /// The path given.
        path: String,
    },
    /// `'<path>' is listed twice`.
    ListedTwice {
        /// The path given.
        path: String,
    },
    /// `'<path>' is Keel's own (<what>)`.
    Keels {
        /// The path given.
        path: String,
        /// What Keel uses it as.
        what: &'static str,
    },
    /// `'<path>' has no registers (reg) to map`.
    NoRegisters {
        /// The path given.
        path: String,
    },
    /// `'<path>' region <range> is not 4 KiB aligned (stage 2 maps whole pages)`: on the board,
    /// or where `ipa` puts it.
    Unaligned {
        /// The path given.
        path: String,
        /// The region, physical.
        range: AddressRange,
    },
    /// `'<path>' region <range> lies in RAM <ram>`.
    InRam {
        /// The path given.
        path: String,
        /// The region, physical.
        range: AddressRange,
        /// The board's RAM.
        ram: AddressRange,
    },
    /// `'<path>' at <range> lies beyond the <bits>-bit guest-physical space`.
    BeyondIpaSpace {
        /// The path given.
        path: String,
        /// The region, guest-physical.
        range: AddressRange,
        /// Width of the IPA space.
        bits: u32,
    },
    /// `'<path>' at <range> overlaps <what> <other>`.
    IpaOverlaps {
        /// The path given.
        path: String,
        /// The region, guest-physical.
        range: AddressRange,
        /// What the VM already sees there (`its memory`, `the emulated PL011`, ...).
        what: String,
        /// That range, guest-physical.
        other: AddressRange,
    },
    /// `'<path>' is already given to vm '<other>'`.
    AssignedTwice {
        /// The path given.
        path: String,
        /// The VM it was given to first.
        other: String,
    },
    /// `'<path>' has an interrupt Keel cannot forward: <why>`.
    Interrupt {
        /// The path given.
        path: String,
        /// Why (a PPI, beyond the virtual GIC, a trigger the GIC lacks, another controller).
        why: String,
    },
    /// `'<path>' interrupt <intid> is already <other>`.
    InterruptTaken {
        /// The path given.
        path: String,
        /// The INTID.
        intid: u32,
        /// Who else has it.
        other: String,
    },
    /// `'<path>' can master DMA (<what>) and no SMMU guards it`.
    DmaUnguarded {
        /// The path given.
        path: String,
        /// Why it is taken for a DMA master.
        what: &'static str,
    },
    /// `'<path>' streams <first>..=<last> are already vm '<other>''s`.
    StreamsTaken {
        /// The path given.
        path: String,
        /// The first stream both have.
        first: u32,
        /// The last.
        last: u32,
        /// The VM given them first.
        other: String,
    },
    /// `'<path>' masters DMA only with streams from <first>, beyond the <max> Keel's stream
    /// table covers`.
    StreamsBeyond {
        /// The path given.
        path: String,
        /// Its first stream.
        first: u32,
        /// The streams Keel covers.
        max: u32,
    },
    /// `'<path>''s streams would make the VMs' streams need <needed> level-2 stream table
    /// arrays, and Keel has <max> (one per VM owning whole blocks of 256 streams, one per block
    /// split between owners)`.
    StreamArrays {
        /// The path given.
        path: String,
        /// Arrays the streams would need.
        needed: usize,
        /// Arrays Keel has.
        max: usize,
    },
    /// `'<path>''s streams would make the VMs' devices <ranges> stream ranges, and Keel takes
    /// <max>`.
    StreamRanges {
        /// The path given.
        path: String,
        /// Stream ranges of all VMs' devices with this one's.
        ranges: usize,
        /// Ranges Keel takes.
        max: usize,
    },
    /// `unknown IOMMU '<value>' (expected 'smmuv3')` (`[system] iommu`).
    UnknownIommu {
        /// The value given.
        value: String,
    },
    /// `<why>` (`[system] iommu`: the board's SMMU cannot be found or read).
    Smmu {
        /// Why.
        why: String,
    },
    /// `'<path>': <why>` (a property the VM's copy of the node cannot keep).
    Node {
        /// The path given.
        path: String,
        /// Why.
        why: String,
    },
}

impl fmt::Display for PassthroughProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BoardTree { error } => {
                write!(f, "the board's device tree cannot be read: {error}")
            }
            Self::NotTopLevel { path } => write!(
                f,
                "'{path}' is not a node directly under the root ('/name@address')"
            ),
            Self::NotFound { path } => write!(f, "'{path}' is not in the board's device tree"),
            Self::ListedTwice { path } => write!(f, "'{path}' is listed twice"),
            Self::Keels { path, what } => write!(f, "'{path}' is Keel's own ({what})"),
            Self::NoRegisters { path } => write!(f, "'{path}' has no registers (reg) to map"),
            Self::Unaligned { path, range } => write!(
                f,
                "'{path}' region {range} is not 4 KiB aligned (stage 2 maps whole pages)"
            ),
            Self::InRam { path, range, ram } => {
                write!(f, "'{path}' region {range} lies in RAM {ram}")
            }
            Self::BeyondIpaSpace { path, range, bits } => write!(
                f,
                "'{path}' at {range} lies beyond the {bits}-bit guest-physical space"
            ),
            Self::IpaOverlaps {
                path,
                range,
                what,
                other,
            } => write!(f, "'{path}' at {range} overlaps {what} {other}"),
            Self::AssignedTwice { path, other } => {
                write!(f, "'{path}' is already given to vm '{other}'")
            }
            Self::Interrupt { path, why } => {
                write!(f, "'{path}' has an interrupt Keel cannot forward: {why}")
            }
            Self::InterruptTaken { path, intid, other } => {
                write!(f, "'{path}' interrupt {intid} is already {other}")
            }
            Self::DmaUnguarded { path, what } => {
                write!(f, "'{path}' can master DMA ({what}) and no SMMU guards it")
            }
            Self::StreamsTaken {
                path,
                first,
                last,
                other,
            } => write!(
                f,
                "'{path}' streams {first}..={last} are already vm '{other}''s"
            ),
            Self::StreamsBeyond { path, first, max } => write!(
                f,
                "'{path}' masters DMA only with streams from {first}, beyond the {max} Keel's \
                 stream table covers"
            ),
            Self::StreamArrays { path, needed, max } => write!(
                f,
                "'{path}''s streams would make the VMs' streams need {needed} level-2 stream \
                 table arrays, and Keel has {max} (one per VM owning whole blocks of 256 \
                 streams, one per block split between owners)"
            ),
            Self::StreamRanges { path, ranges, max } => write!(
                f,
                "'{path}''s streams would make the VMs' devices {ranges} stream ranges (an \
                 iommu-map entry or an iommus stream each), and Keel takes {max}"
            ),
            Self::UnknownIommu { value } => {
                write!(f, "unknown IOMMU '{value}' (expected 'smmuv3')")
            }
            Self::Smmu { why } => f.write_str(why),
            Self::Node { path, why } => write!(f, "'{path}': {why}"),
        }
    }
}
