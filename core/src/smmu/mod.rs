//! SMMUv3 (Arm IHI 0070) as plain data: registers, queues, commands, STEs, CDs, events.
//!
//! Everything Keel's SMMUv3 driver needs that does not touch hardware, tested on the host; the
//! driver (in the hypervisor) is a thin MMIO layer on top. QEMU 7.2's SMMUv3 implements stage 1
//! only (`SMMU_IDR0.S2P = 0`, docs/research/device-assignment.md section 2), so Keel gives each
//! VM's devices a stage-1 translation of its own that maps the VM's IPA to PA exactly as its
//! stage 2 does: the guest never sees it, and a device of the VM reaches only the VM's memory.
//!
//! - [`regs`]: register offsets and fields, [`Features`] decoded from the ID registers and
//!   [`check`] (why an SMMU cannot serve Keel), global errors.
//! - [`queue`]: the PROD/CONS index arithmetic of the command and event queues.
//! - [`command`]: command encoders and the command queue's error codes.
//! - [`ste`]: stream table entries, and the checks of the streams given to VMs.
//! - [`strtab`]: the two-level stream table over every 16-bit stream ID, its level-2 arrays
//!   only where VMs have streams ([`StreamLayout`]).
//! - [`cd`]: the stage-1 context descriptor and the stage-1 table builder ([`Stage1`]).
//! - [`event`]: event records decoded for Keel's diagnostic line.
//!
//! No `core::fmt`: messages are [`crate::text::Show`], as everywhere in the hypervisor.

pub mod cd;
pub mod command;
pub mod event;
pub mod queue;
pub mod regs;
pub mod ste;
pub mod strtab;

pub use cd::{ContextDescriptor, Stage1, Stage1Error};
pub use command::{Command, CommandError, SyncSignal};
pub use event::{Event, EventKind};
pub use queue::Queue;
pub use regs::{check, AddressSize, Features, GlobalError, Unsupported};
pub use ste::{Ste, StreamAssignment, StreamConfig, StreamTableError};
pub use strtab::{arrays_needed, Level2, StreamLayout};

/// A field of a register or structure word: `width` bits from bit `shift`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The field's lowest bit.
    pub shift: u32,
    /// Its number of bits (1 to 64).
    pub width: u32,
}

impl Field {
    /// Bits `[shift + width - 1 : shift]`.
    pub const fn new(shift: u32, width: u32) -> Self {
        Self { shift, width }
    }

    /// The field's bits in place.
    pub const fn mask(self) -> u64 {
        (u64::MAX >> (64 - self.width)) << self.shift
    }

    /// The field's value in `word`.
    pub const fn get(self, word: u64) -> u64 {
        (word & self.mask()) >> self.shift
    }

    /// `value` placed in the field (bits of `value` beyond its width dropped).
    pub const fn put(self, value: u64) -> u64 {
        (value << self.shift) & self.mask()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_get_and_put_their_bits_only() {
        let field = Field::new(4, 3);
        assert_eq!(field.mask(), 0b111_0000);
        assert_eq!(field.put(0b1101), 0b101_0000);
        assert_eq!(field.get(0xffff), 0b111);
        assert_eq!(Field::new(0, 64).mask(), u64::MAX);
        assert_eq!(Field::new(63, 1).put(1), 1 << 63);
    }
}
