//! Why a `[[vm.passthrough]]` table or `[system] iommu` is refused: one variant per rule, each
//! with its exact message (its doc comment).

use std::fmt;

use super::error::AddressRange;
use super::frequency::FrequencyError;

/// What a `[[vm.passthrough]]` table breaks; shown after `vm '<name>': passthrough: `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassthroughProblem {
    /// `the board's device tree cannot be read: <error>`.
    BoardTree {
        /// Why.
        error: String,
    },
    /// `'<path>' is not a node directly under the root ('/name@address')`: not an absolute
    /// path, or a node below one that is not a `simple-bus` (a device under buses is taken).
    NotTopLevel {
        /// The path given.
        path: String,
    },
    /// `'<path>' is not in the device tree of board <board>`.
    NotFound {
        /// The path given.
        path: String,
        /// The board's name.
        board: &'static str,
    },
    /// `'<path>' is disabled in the board's device tree (status = "<status>"): the board does
    /// not wire it up, or keeps it for its firmware`.
    Disabled {
        /// The path given.
        path: String,
        /// Its `status`.
        status: String,
    },
    /// `'<path>': its bus '<bus>' has no 'ranges', so its registers are not at addresses the
    /// CPUs see`.
    BusWithoutRanges {
        /// The path given.
        path: String,
        /// The bus's path.
        bus: String,
    },
    /// `'<path>' region <range> (in bus '<bus>''s addresses) is outside that bus's 'ranges'`.
    OutsideBusRanges {
        /// The path given.
        path: String,
        /// The bus's path.
        bus: String,
        /// The region, in the bus's addresses.
        range: AddressRange,
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
    /// `'<path>' region <range> is not a whole page, and the rest of its page <page> holds
    /// registers of '<other>' (stage 2 maps whole pages)`.
    PageShared {
        /// The path given.
        path: String,
        /// The region, physical.
        range: AddressRange,
        /// The page(s) that would be mapped.
        page: AddressRange,
        /// The node whose registers share them.
        other: String,
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
    /// `'<path>' can master DMA (<what>) and no SMMU Keel drives guards it: its DMA would
    /// reach all of physical memory, Keel's and the other VMs' included (a VM mapped 1:1 may
    /// accept that with unisolated_dma = true)`.
    DmaUnguarded {
        /// The path given.
        path: String,
        /// Why it is taken for a DMA master.
        what: String,
    },
    /// `'<path>': unisolated_dma = true, but the SMMU Keel drives guards its DMA (remove
    /// unisolated_dma)`.
    UnisolatedButGuarded {
        /// The path given.
        path: String,
    },
    /// `'<path>': unisolated_dma = true needs the VM mapped 1:1, and its <what> at ipa <ipa> is
    /// at physical <phys>: the device's DMA addresses would be IPAs, which the hardware takes
    /// for physical addresses`.
    NotOneToOne {
        /// The path given.
        path: String,
        /// `memory` or `flash`.
        what: &'static str,
        /// Where the VM sees it.
        ipa: u64,
        /// Where it is.
        phys: u64,
    },
    /// `'<path>': unisolated_dma = true needs the VM mapped 1:1, but its memory is coloured:
    /// its IPAs are no longer its physical addresses (guest page i is the i-th frame of its
    /// colours), so the device's DMA would miss its memory`.
    UnisolatedColoured {
        /// The path given.
        path: String,
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
    /// `board <board> has no SMMUv3 (its device tree has no arm,smmu-v3 node)`, then, for each
    /// IOMMU it has, `; it has '<path>' (<compatible>), an IOMMU Keel does not drive`
    /// (`[system] iommu`).
    NoSmmu {
        /// The board's name.
        board: &'static str,
        /// The IOMMUs it has: path and compatible.
        others: Vec<(String, String)>,
    },
    /// `<why>` (`[system] iommu`: the board's SMMU cannot be read).
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
    /// `'<path>': it has '<property>'` (or `its child '<child>' has ...`) `, a reference to
    /// <target> outside the device, which the VM's device tree cannot have`.
    Reference {
        /// The path given.
        path: String,
        /// The child that has it, by its path below the device (`None`: the device itself).
        child: Option<String>,
        /// The property.
        property: String,
        /// What it refers to: `'<path>'`, or `phandle <n>` if the tree has no such node.
        target: String,
    },
    /// `'<path>': its child '<child>' has interrupts, which Keel does not forward (only the
    /// device's own)`.
    ChildInterrupts {
        /// The path given.
        path: String,
        /// The child, by its path below the device.
        child: String,
    },
    /// `'<path>': clocks.<clock>: it has no clock of that name (its clocks: <known>)`.
    UnknownClock {
        /// The path given.
        path: String,
        /// The name the configuration gives.
        clock: String,
        /// Its clocks' names.
        known: Vec<String>,
    },
    /// `'<path>': clocks.<clock>: <error>` (a rate that is not a frequency).
    ClockFrequency {
        /// The path given.
        path: String,
        /// The clock.
        clock: String,
        /// Why.
        error: FrequencyError,
    },
    /// `'<path>': clock '<clock>' comes from '<provider>' (<compatible>), not a fixed clock:
    /// give the rate it runs at on the board with clocks = { <clock> = "<frequency>" } in its
    /// [[vm.passthrough]] table (e.g. "100MHz"), and the VM's device tree gets a fixed clock of
    /// that rate`.
    ClockRate {
        /// The path given.
        path: String,
        /// The clock's name.
        clock: String,
        /// Its provider's path.
        provider: String,
        /// Its provider's first compatible.
        compatible: Option<String>,
    },
}

/// `name` as a TOML key: bare if it may be (letters, digits, `_` and `-`), else quoted.
fn toml_key(name: &str) -> String {
    if !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        name.to_string()
    } else {
        format!("{name:?}")
    }
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
            Self::NotFound { path, board } => {
                write!(f, "'{path}' is not in the device tree of board {board}")
            }
            Self::Disabled { path, status } => write!(
                f,
                "'{path}' is disabled in the board's device tree (status = \"{status}\"): the \
                 board does not wire it up, or keeps it for its firmware"
            ),
            Self::BusWithoutRanges { path, bus } => write!(
                f,
                "'{path}': its bus '{bus}' has no 'ranges', so its registers are not at \
                 addresses the CPUs see"
            ),
            Self::OutsideBusRanges { path, bus, range } => write!(
                f,
                "'{path}' region {range} (in bus '{bus}''s addresses) is outside that bus's \
                 'ranges'"
            ),
            Self::PageShared {
                path,
                range,
                page,
                other,
            } => write!(
                f,
                "'{path}' region {range} is not a whole page, and the rest of its page {page} \
                 holds registers of '{other}' (stage 2 maps whole pages)"
            ),
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
            Self::DmaUnguarded { path, what } => write!(
                f,
                "'{path}' can master DMA ({what}) and no SMMU Keel drives guards it: its DMA \
                 would reach all of physical memory, Keel's and the other VMs' included (a VM \
                 mapped 1:1 may accept that with unisolated_dma = true)"
            ),
            Self::UnisolatedButGuarded { path } => write!(
                f,
                "'{path}': unisolated_dma = true, but the SMMU Keel drives guards its DMA \
                 (remove unisolated_dma)"
            ),
            Self::NotOneToOne {
                path,
                what,
                ipa,
                phys,
            } => write!(
                f,
                "'{path}': unisolated_dma = true needs the VM mapped 1:1, and its {what} at ipa \
                 {ipa:#x} is at physical {phys:#x}: the device's DMA addresses would be IPAs, \
                 which the hardware takes for physical addresses"
            ),
            Self::UnisolatedColoured { path } => write!(
                f,
                "'{path}': unisolated_dma = true needs the VM mapped 1:1, but its memory is \
                 coloured: its IPAs are no longer its physical addresses (guest page i is the \
                 i-th frame of its colours), so the device's DMA would miss its memory"
            ),
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
            Self::NoSmmu { board, others } => {
                write!(
                    f,
                    "board {board} has no SMMUv3 (its device tree has no arm,smmu-v3 node)"
                )?;
                for (path, compatible) in others {
                    write!(
                        f,
                        "; it has '{path}' ({compatible}), an IOMMU Keel does not drive"
                    )?;
                }
                Ok(())
            }
            Self::Smmu { why } => f.write_str(why),
            Self::Node { path, why } => write!(f, "'{path}': {why}"),
            Self::Reference {
                path,
                child,
                property,
                target,
            } => {
                match child {
                    None => write!(f, "'{path}': it has '{property}'")?,
                    Some(child) => write!(f, "'{path}': its child '{child}' has '{property}'")?,
                }
                write!(
                    f,
                    ", a reference to {target} outside the device, which the VM's device tree \
                     cannot have"
                )
            }
            Self::ChildInterrupts { path, child } => write!(
                f,
                "'{path}': its child '{child}' has interrupts, which Keel does not forward \
                 (only the device's own)"
            ),
            Self::UnknownClock { path, clock, known } => {
                write!(
                    f,
                    "'{path}': clocks.{}: it has no clock of that name (",
                    toml_key(clock)
                )?;
                if known.is_empty() {
                    f.write_str("it has no clocks)")
                } else {
                    write!(f, "its clocks: {})", known.join(", "))
                }
            }
            Self::ClockFrequency { path, clock, error } => {
                write!(f, "'{path}': clocks.{}: {error}", toml_key(clock))
            }
            Self::ClockRate {
                path,
                clock,
                provider,
                compatible,
            } => {
                write!(f, "'{path}': clock '{clock}' comes from '{provider}'")?;
                if let Some(compatible) = compatible {
                    write!(f, " ({compatible})")?;
                }
                write!(
                    f,
                    ", not a fixed clock: give the rate it runs at on the board with clocks = {{ \
                     {} = \"<frequency>\" }} in its [[vm.passthrough]] table (e.g. \"100MHz\"), \
                     and the VM's device tree gets a fixed clock of that rate",
                    toml_key(clock)
                )
            }
        }
    }
}
