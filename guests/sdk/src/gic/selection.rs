//! Which GIC the guest has and where: read from the device tree's GIC node once at boot, kept
//! in statics that every vCPU reads.
//!
//! The boot vCPU selects before the guest's entry point runs, and other vCPUs start only after
//! (CPU_ON), so the plain stores here are seen by all of them.

use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use keel_core::abi::layout;
use keel_core::fdt::{Fdt, FdtError};

use super::Version;
use crate::devicetree::device_tree_at;

/// `compatible` values of a GICv3 node (Linux's `arm,gic-v3.yaml`).
const GICV3_COMPATIBLE: &[&str] = &["arm,gic-v3"];
/// `compatible` values of a GICv2 node this SDK drives (Linux's `arm,gic.yaml`): QEMU `virt`
/// with `gic-version=2` and Keel on GICv2 hardware say `arm,cortex-a15-gic`.
const GICV2_COMPATIBLE: &[&str] = &["arm,cortex-a15-gic", "arm,gic-400", "arm,cortex-a7-gic"];

/// Bytes of one GICv3 redistributor (its RD and SGI frames, GICv3 spec 12.10).
const REDISTRIBUTOR_SIZE: u64 = layout::GICR_STRIDE;

/// Redistributors that fit in QEMU `virt`'s first redistributor region (which ends before
/// the UART): the count assumed when no device tree says where the GIC is.
pub const DEFAULT_REDISTRIBUTORS: usize = 123;

/// Why the device tree's GIC could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GicError {
    /// The device tree has no node compatible with a GIC the SDK drives.
    NotFound,
    /// The GIC node's `reg` lacks its distributor or CPU interface (redistributor) region.
    MissingRegion,
    /// The device tree itself could not be read.
    DeviceTree(FdtError),
}

impl core::fmt::Display for GicError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            GicError::NotFound => f.write_str(
                "no GIC node (arm,gic-v3, arm,cortex-a15-gic, arm,gic-400 or arm,cortex-a7-gic)",
            ),
            GicError::MissingRegion => f.write_str(
                "the GIC node's reg lacks the distributor or the CPU interface (redistributors)",
            ),
            GicError::DeviceTree(error) => write!(f, "{error}"),
        }
    }
}

impl From<FdtError> for GicError {
    fn from(error: FdtError) -> Self {
        GicError::DeviceTree(error)
    }
}

/// A GIC and where its registers are, as the device tree's node describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Description {
    /// A GICv2: `reg` = <distributor>, <CPU interface> (first two entries).
    V2 {
        /// GICD.
        distributor: usize,
        /// GICC (under Keel, the hardware's virtual CPU interface mapped there).
        cpu_interface: usize,
    },
    /// A GICv3: `reg` = <distributor>, <redistributor region> (first two entries).
    V3 {
        /// GICD.
        distributor: usize,
        /// The first redistributor (CPU 0's RD frame).
        redistributors: usize,
        /// How many redistributors the region holds (its size / 128 KiB).
        redistributor_count: usize,
    },
}

impl Description {
    /// Keel's GICv3 at its fixed addresses: what the SDK assumes before (or without) a device
    /// tree that names a GIC.
    pub const DEFAULT: Self = Description::V3 {
        distributor: layout::GICD_BASE as usize,
        redistributors: layout::GICR_BASE as usize,
        redistributor_count: DEFAULT_REDISTRIBUTORS,
    };

    /// The GIC of `tree`: the first node compatible with a GICv3, else with a GICv2.
    pub fn from_device_tree(tree: &Fdt<'_>) -> Result<Self, GicError> {
        for (version, names) in [
            (Version::V3, GICV3_COMPATIBLE),
            (Version::V2, GICV2_COMPATIBLE),
        ] {
            for name in names {
                let Some(node) = tree.find_compatible(name)? else {
                    continue;
                };
                let mut regions = node.reg()?.ok_or(GicError::MissingRegion)?;
                let (Some((distributor, _)), Some((second, second_size))) =
                    (regions.next(), regions.next())
                else {
                    return Err(GicError::MissingRegion);
                };
                return Ok(match version {
                    Version::V2 => Description::V2 {
                        distributor: distributor as usize,
                        cpu_interface: second as usize,
                    },
                    Version::V3 => Description::V3 {
                        distributor: distributor as usize,
                        redistributors: second as usize,
                        redistributor_count: (second_size / REDISTRIBUTOR_SIZE) as usize,
                    },
                });
            }
        }
        Err(GicError::NotFound)
    }

    /// Its version.
    pub const fn version(&self) -> Version {
        match self {
            Description::V2 { .. } => Version::V2,
            Description::V3 { .. } => Version::V3,
        }
    }

    /// The distributor's address.
    pub const fn distributor(&self) -> usize {
        match *self {
            Description::V2 { distributor, .. } | Description::V3 { distributor, .. } => {
                distributor
            }
        }
    }
}

/// [`VERSION`] before any [`select`]: [`Description::DEFAULT`] holds.
const UNSELECTED: u8 = 0;
/// [`VERSION`] for a GICv2.
const SELECTED_V2: u8 = 2;
/// [`VERSION`] for a GICv3.
const SELECTED_V3: u8 = 3;

/// The selected version ([`UNSELECTED`], [`SELECTED_V2`] or [`SELECTED_V3`]).
static VERSION: AtomicU8 = AtomicU8::new(UNSELECTED);
/// The selected distributor's address.
static DISTRIBUTOR_BASE: AtomicUsize = AtomicUsize::new(0);
/// GICv2: the CPU interface's address; GICv3: the first redistributor's.
static CPU_BASE: AtomicUsize = AtomicUsize::new(0);
/// GICv3: how many redistributors there are.
static REDISTRIBUTOR_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Makes `description` the GIC every later call of this module drives. The SDK's boot code
/// calls it with the device tree's GIC before the guest's entry point; a guest calls it again
/// only to override that, before it starts other vCPUs.
pub fn select(description: Description) {
    let (version, cpu_base, count) = match description {
        Description::V2 { cpu_interface, .. } => (SELECTED_V2, cpu_interface, 0),
        Description::V3 {
            redistributors,
            redistributor_count,
            ..
        } => (SELECTED_V3, redistributors, redistributor_count),
    };
    DISTRIBUTOR_BASE.store(description.distributor(), Ordering::Relaxed);
    CPU_BASE.store(cpu_base, Ordering::Relaxed);
    REDISTRIBUTOR_COUNT.store(count, Ordering::Relaxed);
    VERSION.store(version, Ordering::Release);
}

/// The GIC in use: the one [`select`]ed, else [`Description::DEFAULT`].
pub fn selected() -> Description {
    match VERSION.load(Ordering::Acquire) {
        SELECTED_V2 => Description::V2 {
            distributor: DISTRIBUTOR_BASE.load(Ordering::Relaxed),
            cpu_interface: CPU_BASE.load(Ordering::Relaxed),
        },
        SELECTED_V3 => Description::V3 {
            distributor: DISTRIBUTOR_BASE.load(Ordering::Relaxed),
            redistributors: CPU_BASE.load(Ordering::Relaxed),
            redistributor_count: REDISTRIBUTOR_COUNT.load(Ordering::Relaxed),
        },
        _ => Description::DEFAULT,
    }
}

/// The version of the GIC in use.
#[inline]
pub fn version() -> Version {
    if VERSION.load(Ordering::Relaxed) == SELECTED_V2 {
        Version::V2
    } else {
        Version::V3
    }
}

/// GICv2: the CPU interface's address (valid once a GICv2 is selected).
#[inline]
pub(crate) fn gicv2_cpu_interface_base() -> usize {
    CPU_BASE.load(Ordering::Relaxed)
}

/// The distributor's address.
#[inline]
pub(crate) fn distributor_base() -> usize {
    match VERSION.load(Ordering::Relaxed) {
        UNSELECTED => Description::DEFAULT.distributor(),
        _ => DISTRIBUTOR_BASE.load(Ordering::Relaxed),
    }
}

/// Called by the boot code with x0 at entry: selects the device tree's GIC, and on a GICv2
/// installs the exception vectors whose IRQ path uses it. A device tree without a GIC the SDK
/// drives leaves [`Description::DEFAULT`] (the guest's own reading of the tree reports a bad one).
pub(crate) extern "C" fn select_from_boot_device_tree(address: usize) {
    // SAFETY: the boot code passes x0 as the guest was entered with it: the device tree's
    // address, whose blob nothing writes for the guest's life.
    let Ok(tree) = (unsafe { device_tree_at(address) }) else {
        return;
    };
    if let Ok(description) = Description::from_device_tree(&tree) {
        select(description);
        crate::exceptions::install_vectors();
    }
}
