//! GICv3 guest driver (Arm IHI 0069, GICv3/v4 architecture specification): distributor,
//! this CPU's redistributor, and the system-register CPU interface.
//!
//! The GIC is a single-security-state one (GICD_CTLR.DS = 1) both on QEMU `virt` without
//! EL3 and under Keel, and every interrupt the SDK configures is Group 1.

mod cpu_interface;
mod distributor;
mod redistributor;

pub use cpu_interface::{
    acknowledge, end_of_interrupt, init_cpu_interface, irq_pending, send_sgi, SPURIOUS_INTID_FIRST,
};
pub use distributor::{Distributor, Trigger, DISTRIBUTOR};
pub use redistributor::Redistributor;

/// An interrupt identifier (INTID): 0..15 SGIs, 16..31 PPIs, 32..1019 SPIs.
pub type IntId = u32;

/// First SPI.
pub const FIRST_SPI: IntId = 32;
