//! The guest's interrupt controller, GICv2 or GICv3, behind one interface chosen once at boot.
//!
//! The SDK's boot code reads the GIC node of the device tree it is handed (its `compatible`
//! and `reg`) before the guest's entry point runs, and [`select`]s the driver: [`crate::gicv3`]
//! for `arm,gic-v3`, [`crate::gicv2`] for `arm,cortex-a15-gic`, `arm,gic-400` and
//! `arm,cortex-a7-gic`. Guest code uses this module only ([`DISTRIBUTOR`],
//! [`PrivateInterrupts`], [`init_cpu_interface`], [`acknowledge`], [`end_of_interrupt`],
//! [`send_sgi`]), so the same image runs on either version. Without a GIC node the SDK keeps
//! the GICv3 at Keel's fixed addresses (`abi::layout`), as before it read the device tree.
//!
//! Interrupt ids mean the same on both versions: 0-15 SGIs, 16-31 PPIs (the virtual timer is
//! 27), 32-1019 SPIs (the console is 33).

mod fields;
mod interface;
mod selection;

pub use interface::{
    acknowledge, end_of_interrupt, init_cpu_interface, irq_pending, send_sgi, Acknowledged,
    Distributor, PrivateInterrupts, DISTRIBUTOR,
};
pub(crate) use selection::{gicv2_cpu_interface_base, select_from_boot_device_tree};
pub use selection::{select, selected, version, Description, GicError};

pub(crate) use fields::{bit_position, byte_position, config_position};

/// An interrupt identifier (INTID): 0..15 SGIs, 16..31 PPIs, 32..1019 SPIs.
pub type IntId = u32;

/// First SPI.
pub const FIRST_SPI: IntId = 32;

/// INTIDs 1020..1023 are special (GICv3 spec 2.2.1, GICv2 spec 3.2.5); an acknowledge
/// returning one of them means nothing was pending for this CPU.
pub const SPURIOUS_INTID_FIRST: IntId = 1020;

/// How an interrupt is signalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Level-sensitive (GICD_ICFGR field 0b00).
    Level,
    /// Edge-triggered (GICD_ICFGR field 0b10).
    Edge,
}

/// The GIC architecture version a guest is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// GICv2 (Arm IHI 0048): memory-mapped CPU interface, SGIs through GICD_SGIR.
    V2,
    /// GICv3 (Arm IHI 0069): redistributors, system-register CPU interface.
    V3,
}

impl core::fmt::Display for Version {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Version::V2 => "GICv2",
            Version::V3 => "GICv3",
        })
    }
}
