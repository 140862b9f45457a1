//! GICv3 guest driver (Arm IHI 0069, GICv3/v4 architecture specification): distributor,
//! this CPU's redistributor, and the system-register CPU interface. Guests reach it through
//! [`crate::gic`], which the SDK points at it when the device tree's GIC is `arm,gic-v3`.
//!
//! The GIC is a single-security-state one (GICD_CTLR.DS = 1) both on QEMU `virt` without
//! EL3 and under Keel, and every interrupt the SDK configures is Group 1.

mod cpu_interface;
mod distributor;
mod redistributor;

pub use cpu_interface::{acknowledge, end_of_interrupt, init_cpu_interface, send_sgi};
pub use distributor::Distributor;
pub use redistributor::Redistributor;

pub use crate::gic::{IntId, Trigger, FIRST_SPI, SPURIOUS_INTID_FIRST};
