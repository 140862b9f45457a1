//! GICv2 guest driver (Arm IHI 0048B, GICv2 architecture specification): the distributor,
//! with the banked registers of this CPU's SGIs and PPIs, and the memory-mapped CPU
//! interface. Guests reach it through [`crate::gic`], which the SDK points at it when the
//! device tree's GIC is `arm,cortex-a15-gic`, `arm,gic-400` or `arm,cortex-a7-gic`.
//!
//! There is no system-register interface on a GICv2: nothing here executes an ICC_*
//! instruction, which would be UNDEFINED. The GIC has no Security Extensions as a guest sees it
//! (QEMU `virt` without EL3, and Keel's), so every interrupt is Group 0 from reset (GICD_IGROUPR
//! zero) and the SDK leaves it there: it enables Group 0 at the distributor and the CPU
//! interface, which signal it as IRQ (GICC_CTLR.FIQEn clear).

mod cpu_interface;
mod distributor;

pub use cpu_interface::{CpuInterface, IAR_INTERRUPT_ID};
pub use distributor::{Distributor, MAX_CPUS};

pub use crate::gic::{IntId, Trigger, FIRST_SPI, SPURIOUS_INTID_FIRST};
