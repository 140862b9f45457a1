//! Interrupt controller bring-up for this vCPU, shared by every mode.

use keel_guest::gic::{init_cpu_interface, PrivateInterrupts, DISTRIBUTOR};

/// Priority of every interrupt the test guest enables (any value below the 0xFF mask).
pub const PRIORITY: u8 = 0x80;

/// Enables the distributor, wakes vCPU `vcpu`'s redistributor (GICv3) and enables the CPU
/// interface, on whichever GIC the device tree names; IRQs stay masked in PSTATE. `None` if
/// the GIC has no CPU `vcpu`.
pub fn init(vcpu: u64) -> Option<PrivateInterrupts> {
    let interrupts = PrivateInterrupts::for_cpu(vcpu)?;
    DISTRIBUTOR.enable();
    interrupts.wake();
    init_cpu_interface();
    Some(interrupts)
}
