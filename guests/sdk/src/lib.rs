//! Keel guest SDK: boot code, exception vectors, hypercalls and small drivers for bare-metal guests
//!
//! A guest links with the SDK's `link.ld` (see `build.rs`), names its entry point with
//! [`entry!`], and runs at EL1 with the MMU off: all memory is then Device-nGnRnE, so the
//! SDK uses only aligned plain loads and stores (no exclusives, no `compare_exchange`).
//!
//! The interrupt controller is [`gic`]: one interface over the GICv3 ([`gicv3`]) and GICv2
//! ([`gicv2`]) drivers, picked by the boot code from the device tree's GIC node before the
//! entry point runs, so that one image runs on either.
#![no_std]

pub mod boot;
pub mod bootargs;
pub mod channel;
pub mod console;
pub mod cpu;
pub mod devicetree;
pub mod entry_check;
pub mod environment;
pub mod exceptions;
pub mod fatal;
pub mod gic;
pub mod gicv2;
pub mod gicv3;
pub mod health;
pub mod keel;
pub mod message;
pub mod mmio;
pub mod pl011;
pub mod pmu;
pub mod psci;
pub mod smccc;
pub mod task;
pub mod timer;
pub mod trace;

pub use keel_core::abi;
/// The device tree reader the SDK reads its blob with, for guests that look up their devices.
pub use keel_core::fdt;
/// Latency histograms guests record and print for the host's plots.
pub use keel_core::histogram;

pub use keel::{crash, keel_version, vm_id, yield_now};
pub use psci::{psci_version, system_off, system_reset};
pub use smccc::smccc_version;
