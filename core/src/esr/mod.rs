//! Decoding of ESR_EL2 exception syndromes (Arm ARM DDI 0487, D17.2.37 ESR_ELx) into typed traps.
//!
//! The hypervisor reads ESR_EL2 on every synchronous exception from a guest and hands
//! the raw value to [`Esr`]; everything here is pure bit decoding, tested on the host
//! against the `aarch64-esr-decoder` crate.

mod abort;
mod class;
mod syndrome;
mod sysreg;
pub mod sysregs;
#[cfg(test)]
mod tests;

pub use abort::{fault_status_name, DataAbort, FaultStatus, InstructionAbort};
pub use class::ExceptionClass;
pub use syndrome::Esr;
pub use sysreg::{SysReg, SysRegAccess};
