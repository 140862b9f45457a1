//! Interrupt controller bring-up for this vCPU, shared by every mode.

use keel_guest::gicv3::{init_cpu_interface, Redistributor, DISTRIBUTOR};

/// Priority of every interrupt the test guest enables (any value below the 0xFF mask).
pub const PRIORITY: u8 = 0x80;

/// Enables the distributor, wakes vCPU `vcpu`'s redistributor and enables the CPU interface;
/// IRQs stay masked in PSTATE. `None` if `vcpu` has no redistributor.
pub fn init(vcpu: u64) -> Option<Redistributor> {
    let redistributor = Redistributor::for_cpu(vcpu)?;
    DISTRIBUTOR.enable();
    redistributor.wake();
    init_cpu_interface();
    Some(redistributor)
}
