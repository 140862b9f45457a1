//! Commands Keel sends the SMMU (IHI 0070 chapter 4) and the command queue's errors (7.1).
//!
//! A command is 16 bytes, two little-endian doublewords; bits `[7:0]` of the first are the
//! opcode. QEMU 7.2 caches decoded STEs and CDs and keeps an IOTLB: after changing an STE, a
//! CD or a stage-1 table, Keel invalidates (CFGI_STE, CFGI_ALL, TLBI) and then waits for a
//! CMD_SYNC. (QEMU caches a stream's STE and CD as one, so CFGI_STE drops both; hardware
//! caches CDs apart, invalidated by CMD_CFGI_CD, which Keel does not need as long as it
//! writes a CD before any STE points at it and never changes it after.)

use super::Field;
use crate::text::{Decimal, Out, Show};

/// A command: two doublewords, as written to the command queue.
pub type Command = [u64; 2];

/// Opcodes (bits `[7:0]` of doubleword 0).
pub mod opcode {
    /// CMD_CFGI_STE: invalidate one stream's cached STE.
    pub const CFGI_STE: u8 = 0x03;
    /// CMD_CFGI_STE_RANGE: invalidate the STEs of an aligned range of streams (CMD_CFGI_ALL
    /// when the range is 31).
    pub const CFGI_STE_RANGE: u8 = 0x04;
    /// CMD_TLBI_NH_ALL: invalidate every non-hypervisor stage-1 TLB entry (of a VMID, when
    /// stage 2 is implemented).
    pub const TLBI_NH_ALL: u8 = 0x10;
    /// CMD_TLBI_NSNH_ALL: invalidate every Non-secure non-hypervisor TLB entry.
    pub const TLBI_NSNH_ALL: u8 = 0x30;
    /// CMD_SYNC: complete once every earlier command has taken effect.
    pub const SYNC: u8 = 0x46;
}

/// Doubleword 0: the opcode.
pub const OPCODE: Field = Field::new(0, 8);
/// CFGI doubleword 0: `StreamID[63:32]`.
pub const CFGI_SID: Field = Field::new(32, 32);
/// CMD_CFGI_STE doubleword 1: Leaf (1 = only the STE, not a two-level table's L1 descriptor).
pub const CFGI_LEAF: u64 = 1 << 0;
/// CMD_CFGI_STE_RANGE doubleword 1: `Range[4:0]`, the range being 2^(Range + 1) streams.
pub const CFGI_RANGE: Field = Field::new(0, 5);
/// The Range of CMD_CFGI_ALL: every stream.
pub const CFGI_RANGE_ALL: u64 = 31;
/// CMD_SYNC doubleword 0: `CS[13:12]`, how completion is signalled ([`SyncSignal`]).
pub const SYNC_CS: Field = Field::new(12, 2);

/// The opcode of `command`.
pub const fn opcode_of(command: &Command) -> u8 {
    OPCODE.get(command[0]) as u8
}

/// CMD_CFGI_STE for stream `sid` (Leaf = 0: any cached level-1 descriptor on its path too).
pub const fn cfgi_ste(sid: u32) -> Command {
    [
        OPCODE.put(opcode::CFGI_STE as u64) | CFGI_SID.put(sid as u64),
        0,
    ]
}

/// The commands that invalidate the cached STEs of streams `first..=last`: CMD_CFGI_STE for
/// one stream, else CMD_CFGI_STE_RANGE over the smallest aligned power-of-two range holding
/// them all (2^(Range + 1) streams from `first` rounded down; every stream when they differ
/// in bit 31).
pub const fn cfgi_ste_range(first: u32, last: u32) -> Command {
    let bits = u32::BITS - (first ^ last).leading_zeros();
    if bits == 0 {
        return cfgi_ste(first);
    }
    [
        OPCODE.put(opcode::CFGI_STE_RANGE as u64) | CFGI_SID.put(first as u64),
        CFGI_RANGE.put(bits as u64 - 1),
    ]
}

/// CMD_CFGI_ALL: CMD_CFGI_STE_RANGE with Range 31 (every stream's cached configuration).
pub const fn cfgi_all() -> Command {
    [
        OPCODE.put(opcode::CFGI_STE_RANGE as u64),
        CFGI_RANGE.put(CFGI_RANGE_ALL),
    ]
}

/// CMD_TLBI_NH_ALL (VMID 0, which a stage-1-only SMMU ignores).
pub const fn tlbi_nh_all() -> Command {
    [OPCODE.put(opcode::TLBI_NH_ALL as u64), 0]
}

/// CMD_TLBI_NSNH_ALL.
pub const fn tlbi_nsnh_all() -> Command {
    [OPCODE.put(opcode::TLBI_NSNH_ALL as u64), 0]
}

/// How a CMD_SYNC signals its completion (besides CMDQ_CONS passing it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncSignal {
    /// CS = SIG_NONE (0b00): poll CMDQ_CONS.
    None,
    /// CS = SIG_IRQ (0b01): the cmd-sync interrupt (QEMU 7.2 pulses its wired line).
    Irq,
}

/// CMD_SYNC.
pub const fn sync(signal: SyncSignal) -> Command {
    let cs = match signal {
        SyncSignal::None => 0b00,
        SyncSignal::Irq => 0b01,
    };
    [OPCODE.put(opcode::SYNC as u64) | SYNC_CS.put(cs), 0]
}

/// Why the SMMU stopped consuming commands (CMDQ_CONS.ERR, with GERROR.CMDQ_ERR active);
/// CONS then designates the command at fault. Each variant's message is its [`Show`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandError {
    /// CERROR_ILL (0x01), "illegal command": an unknown opcode or a bad field.
    Illegal,
    /// CERROR_ABT (0x02), "command fetch aborted": reading the queue aborted.
    Abort,
    /// CERROR_ATC_INV_SYNC (0x03), "ATC invalidation timed out before a sync".
    AtcInvalidationSync,
    /// "command error N": a code this module does not know.
    Other(u8),
}

impl CommandError {
    /// The error CMDQ_CONS `cons` reports, if any.
    pub const fn from_cons(cons: u32) -> Option<Self> {
        match super::regs::queue::CONS_ERR.get(cons as u64) {
            0 => None,
            1 => Some(CommandError::Illegal),
            2 => Some(CommandError::Abort),
            3 => Some(CommandError::AtcInvalidationSync),
            other => Some(CommandError::Other(other as u8)),
        }
    }
}

impl Show for CommandError {
    fn show(&self, out: &mut dyn Out) {
        out.put(match self {
            CommandError::Illegal => "illegal command",
            CommandError::Abort => "command fetch aborted",
            CommandError::AtcInvalidationSync => "ATC invalidation timed out before a sync",
            CommandError::Other(code) => {
                out.put("command error ");
                Decimal(u64::from(*code), 0).show(out);
                return;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_put_opcode_and_fields_at_the_specs_bits() {
        assert_eq!(cfgi_ste(8), [0x0000_0008_0000_0003, 0]);
        assert_eq!(cfgi_ste(u32::MAX)[0] >> 32, 0xffff_ffff);
        assert_eq!(cfgi_all(), [0x04, 31]);
        assert_eq!(tlbi_nh_all(), [0x10, 0]);
        assert_eq!(tlbi_nsnh_all(), [0x30, 0]);
        assert_eq!(sync(SyncSignal::None), [0x46, 0]);
        assert_eq!(sync(SyncSignal::Irq), [0x1046, 0]);
        for command in [
            cfgi_ste(1),
            cfgi_all(),
            tlbi_nh_all(),
            sync(SyncSignal::Irq),
        ] {
            assert_eq!(u64::from(opcode_of(&command)), command[0] & 0xff);
        }
    }

    #[test]
    fn a_range_is_invalidated_by_the_smallest_aligned_range_holding_it() {
        // One stream: CMD_CFGI_STE.
        assert_eq!(cfgi_ste_range(8, 8), cfgi_ste(8));
        // Bus 1 (streams 0x100-0x1ff): 2^(7+1) streams from 0x100.
        assert_eq!(cfgi_ste_range(0x100, 0x1ff), [0x0000_0100_0000_0004, 7]);
        // A bridge's 65,536 requester IDs: Range 15.
        assert_eq!(cfgi_ste_range(0, 0xffff)[1], 15);
        // Two streams across an alignment boundary: 512 from 0.
        assert_eq!(cfgi_ste_range(0xff, 0x100)[1], 8);
        // Every stream: CMD_CFGI_ALL's Range.
        assert_eq!(cfgi_ste_range(0, u32::MAX)[1], CFGI_RANGE_ALL);
        for (first, last) in [(3, 5), (0x100, 0x47f), (0x8005, 0x8005), (0, 0xffff)] {
            let [word0, word1] = cfgi_ste_range(first, last);
            let (count, base) = if opcode_of(&[word0, word1]) == opcode::CFGI_STE {
                (1u64, word0 >> 32)
            } else {
                let count = 2u64 << word1;
                ((count), (word0 >> 32) & !(count - 1))
            };
            assert!(base <= u64::from(first) && u64::from(last) < base + count);
        }
    }

    #[test]
    fn command_errors_from_cons() {
        assert_eq!(CommandError::from_cons(0x13), None);
        assert_eq!(
            CommandError::from_cons(1 << 24 | 0x13),
            Some(CommandError::Illegal)
        );
        assert_eq!(CommandError::from_cons(2 << 24), Some(CommandError::Abort));
        assert_eq!(
            CommandError::from_cons(3 << 24),
            Some(CommandError::AtcInvalidationSync)
        );
        assert_eq!(
            CommandError::from_cons(0x7f << 24 | 1 << 31),
            Some(CommandError::Other(0x7f))
        );
    }
}
