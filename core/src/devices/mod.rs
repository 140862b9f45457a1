//! Emulated device models: pure state machines driven by trapped guest accesses.

pub mod pl011;
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
    /// An access to an offset with no register, or in a direction the register lacks (a read
    /// of a write-only register, a write of a read-only one).
    NoSuchRegister {
        /// Offset in the device frame.
        offset: u64,
        /// Whether the access was a write.
        write: bool,
    },
}

impl core::fmt::Display for DeviceError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            DeviceError::BadWidth { offset, size } => {
                write!(
                    f,
                    "{size}-byte access to register at offset {offset:#x} is not supported"
                )
            }
            DeviceError::UnownedInterrupt { intid } => {
                write!(f, "interrupt {intid} is not owned by this VM")
            }
            DeviceError::InterruptOutOfRange { intid } => {
                write!(
                    f,
                    "interrupt {intid} is beyond the distributor's interrupt lines"
                )
            }
            DeviceError::NoSuchRedistributor { offset } => {
                write!(f, "no redistributor at offset {offset:#x} (no such vCPU)")
            }
            DeviceError::NoSuchRegister { offset, write } => {
                let access = if write { "write" } else { "read" };
                write!(f, "no register to {access} at offset {offset:#x}")
            }
        }
    }
}
