//! The virtio models' only way into a VM's memory: a range-checked read and write.

use crate::addr::GuestPhysAddr;

/// A range of guest memory the VM does not have, or whose end wraps past 2^64: nothing was
/// read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryError {
    /// First guest-physical address of the refused range.
    pub ipa: GuestPhysAddr,
    /// Its length in bytes.
    pub len: usize,
}

impl core::fmt::Display for MemoryError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} bytes at IPA {:#x} are not in the VM's memory",
            self.len, self.ipa.0
        )
    }
}

/// One VM's memory as a device model sees it. Every address the models use (ring, descriptor
/// table, buffer) comes from the guest, so an implementation checks each whole range against
/// the VM's memory (refusing one that wraps) and performs nothing it refuses.
///
/// Accesses take effect in the order they are made, as the guest's other vCPUs observe them
/// (the split ring relies on it, virtio 1.2 section 2.7.13: a used element is written before
/// the used index that publishes it; an available index is read before the entries it covers).
/// On Arm the hypervisor's implementation puts a `dmb ish` before each access.
pub trait GuestMemory {
    /// Fills `out` with the bytes at `[ipa, ipa + out.len())`.
    fn read(&self, ipa: GuestPhysAddr, out: &mut [u8]) -> Result<(), MemoryError>;
    /// Writes `bytes` at `[ipa, ipa + bytes.len())`.
    fn write(&mut self, ipa: GuestPhysAddr, bytes: &[u8]) -> Result<(), MemoryError>;
}

/// `base + offset`, or the error a range starting there would get if it wraps past 2^64.
pub(super) fn offset_address(
    base: GuestPhysAddr,
    offset: u64,
    len: usize,
) -> Result<GuestPhysAddr, MemoryError> {
    base.0
        .checked_add(offset)
        .map(GuestPhysAddr)
        .ok_or(MemoryError { ipa: base, len })
}

/// Reads `N` little-endian bytes at `ipa` (virtio structures are little-endian, section 1.4).
pub(super) fn read_bytes<const N: usize>(
    memory: &impl GuestMemory,
    ipa: GuestPhysAddr,
) -> Result<[u8; N], MemoryError> {
    let mut bytes = [0; N];
    memory.read(ipa, &mut bytes)?;
    Ok(bytes)
}

/// A VM's memory for host tests and fuzzing: one block of bytes at a base address, refusing
/// (and counting) every access not wholly inside it, and counting every access attempted, so
/// a test can bound a model's work per call.
#[cfg(any(test, feature = "std"))]
#[derive(Clone, Debug)]
pub struct TestMemory {
    /// Guest-physical address of `bytes[0]`.
    pub base: GuestPhysAddr,
    /// The memory's content.
    pub bytes: std::vec::Vec<u8>,
    accesses: core::cell::Cell<u64>,
    refused: core::cell::Cell<u64>,
}

#[cfg(any(test, feature = "std"))]
impl TestMemory {
    /// `size` zero bytes at `base`.
    pub fn new(base: u64, size: usize) -> Self {
        Self {
            base: GuestPhysAddr(base),
            bytes: std::vec![0; size],
            accesses: core::cell::Cell::new(0),
            refused: core::cell::Cell::new(0),
        }
    }

    /// Accesses attempted so far (performed or refused).
    pub fn accesses(&self) -> u64 {
        self.accesses.get()
    }

    /// Accesses refused so far: some byte outside the memory, or a range that wraps.
    pub fn refused(&self) -> u64 {
        self.refused.get()
    }

    /// Counts one access; the index range of `[ipa, ipa + len)` in `bytes` if wholly inside,
    /// else the refusal (counted too).
    fn check(
        &self,
        ipa: GuestPhysAddr,
        len: usize,
    ) -> Result<core::ops::Range<usize>, MemoryError> {
        self.accesses.set(self.accesses.get() + 1);
        let range = ipa
            .0
            .checked_sub(self.base.0)
            .and_then(|start| usize::try_from(start).ok())
            .and_then(|start| Some(start..start.checked_add(len)?))
            .filter(|range| range.end <= self.bytes.len());
        range.ok_or_else(|| {
            self.refused.set(self.refused.get() + 1);
            MemoryError { ipa, len }
        })
    }
}

#[cfg(any(test, feature = "std"))]
impl GuestMemory for TestMemory {
    fn read(&self, ipa: GuestPhysAddr, out: &mut [u8]) -> Result<(), MemoryError> {
        let range = self.check(ipa, out.len())?;
        out.copy_from_slice(&self.bytes[range]);
        Ok(())
    }

    fn write(&mut self, ipa: GuestPhysAddr, bytes: &[u8]) -> Result<(), MemoryError> {
        let range = self.check(ipa, bytes.len())?;
        self.bytes[range].copy_from_slice(bytes);
        Ok(())
    }
}
