//! Emulated device models: pure state machines driven by trapped guest accesses.

pub mod pl011;
pub mod sp805;
pub mod vgic;
pub mod virtio;

/// A guest access the device model refuses: the VM is stopped with this as the reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceError {
    /// An access width the register does not support.
    BadWidth {
        /// Offset in the device frame.
        offset: u64,
        /// Access size in bytes.
        size: u8,
    },
    /// An access to a register for an interrupt the VM does not own.
    UnownedInterrupt {
        /// The interrupt id.
        intid: u32,
    },
    /// An access to a register beyond the interrupts the device implements.
    InterruptOutOfRange {
        /// The interrupt id.
        intid: u32,
    },
    /// An access to a redistributor of a vCPU the VM does not have.
    NoSuchRedistributor {
        /// Offset in the redistributor region.
        offset: u64,
    },
    /// An access made on behalf of a vCPU the VM does not have (a caller's error: banked
    /// registers are the accessing vCPU's).
    NoSuchVcpu {
        /// The vCPU index.
        vcpu: usize,
    },
    /// An access to an offset with no register, or in a direction the register lacks (a read
    /// of a write-only register, a write of a read-only one).
    NoSuchRegister {
        /// Offset in the device frame.
        offset: u64,
        /// Whether the access was a write.
        write: bool,
    },
}

impl crate::text::Show for DeviceError {
    fn show(&self, out: &mut dyn crate::text::Out) {
        use crate::text::Hex;
        match *self {
            DeviceError::BadWidth { offset, size } => crate::text!(
                out,
                size,
                "-byte access to register at offset ",
                Hex(offset, 0),
                " is not supported"
            ),
            DeviceError::UnownedInterrupt { intid } => {
                crate::text!(out, "interrupt ", intid, " is not owned by this VM")
            }
            DeviceError::InterruptOutOfRange { intid } => crate::text!(
                out,
                "interrupt ",
                intid,
                " is beyond the distributor's interrupt lines"
            ),
            DeviceError::NoSuchRedistributor { offset } => crate::text!(
                out,
                "no redistributor at offset ",
                Hex(offset, 0),
                " (no such vCPU)"
            ),
            DeviceError::NoSuchVcpu { vcpu } => {
                crate::text!(out, "access by vCPU ", vcpu, ", which the VM does not have")
            }
            DeviceError::NoSuchRegister { offset, write } => {
                let access = if write { "write" } else { "read" };
                crate::text!(
                    out,
                    "no register to ",
                    access,
                    " at offset ",
                    Hex(offset, 0)
                )
            }
        }
    }
}

impl core::fmt::Display for DeviceError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        crate::text::fmt(self, f)
    }
}
