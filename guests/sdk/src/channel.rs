//! Shared-memory channels between VMs (see `keel_core::channel`): memory that each member VM
//! sees at an address of its own, read-write or read-only, and a doorbell
//! ([`notify`], KEEL_CHANNEL_NOTIFY) that raises the channel's interrupt in other members.
//!
//! Keel never looks at a channel's memory: what it holds and how the members take turns is
//! theirs to agree on. With the MMU off its accesses are Device-nGnRnE, so [`Window`] uses
//! plain single loads and stores (no exclusives, no pairs).

use keel_core::abi;
pub use keel_core::channel::{ChannelError, EVERY_OTHER_MEMBER};

use crate::smccc::hvc_call;

/// Rings channel `channel`'s doorbell at its member `member` (its position in the channel's
/// `vms`), or at every member but the caller ([`EVERY_OTHER_MEMBER`]). Returns how many
/// members were rung (those stopped are skipped; all of them stopped is refused).
pub fn notify(channel: u64, member: u64) -> Result<u64, ChannelError> {
    // SAFETY: the doorbell only raises an interrupt in other VMs (or this one).
    let result = unsafe { hvc_call(abi::KEEL_CHANNEL_NOTIFY, [channel, member, 0]) };
    match ChannelError::from_x0(result.x0) {
        Some(error) => Err(error),
        // A code Keel does not give for a doorbell is reported as an unknown channel.
        None if (result.x0 as i64) < 0 => Err(ChannelError::NoSuchChannel),
        None => Ok(result.x0),
    }
}

/// A VM's window on a channel's memory: `size` bytes at a guest-physical address.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    base: usize,
    size: usize,
}

impl Window {
    /// The window at `base`, `size` bytes long.
    ///
    /// # Safety
    /// `[base, base + size)` must be this VM's window on a channel (its `ipa` in the
    /// configuration), which no Rust object lives in. Through a read-only window a store is a
    /// fault that stops the VM.
    pub const unsafe fn new(base: usize, size: usize) -> Self {
        Self { base, size }
    }

    /// The window's first address.
    pub const fn base(&self) -> usize {
        self.base
    }

    /// Its size in bytes.
    pub const fn size(&self) -> usize {
        self.size
    }

    /// The address of `len` bytes at `offset`, if they lie in the window and are aligned to
    /// `len`.
    fn address(&self, offset: usize, len: usize) -> usize {
        assert!(
            offset.is_multiple_of(len) && offset < self.size && len <= self.size - offset,
            "channel window access of {len} bytes at {offset:#x} (window of {:#x})",
            self.size
        );
        self.base + offset
    }

    /// Loads the byte at `offset`.
    pub fn read_u8(&self, offset: usize) -> u8 {
        let address = self.address(offset, 1);
        // SAFETY: `new`'s contract: the address is in the window, not Rust memory.
        unsafe { core::ptr::read_volatile(address as *const u8) }
    }

    /// Stores `value` at `offset`.
    pub fn write_u8(&self, offset: usize, value: u8) {
        let address = self.address(offset, 1);
        // SAFETY: `new`'s contract: the address is in the window, not Rust memory.
        unsafe { core::ptr::write_volatile(address as *mut u8, value) }
    }

    /// Loads the aligned 32-bit word at `offset`.
    pub fn read_u32(&self, offset: usize) -> u32 {
        let address = self.address(offset, 4);
        // SAFETY: `new`'s contract: the address is in the window, not Rust memory; aligned.
        unsafe { core::ptr::read_volatile(address as *const u32) }
    }

    /// Stores `value` as the aligned 32-bit word at `offset`.
    pub fn write_u32(&self, offset: usize, value: u32) {
        let address = self.address(offset, 4);
        // SAFETY: `new`'s contract: the address is in the window, not Rust memory; aligned.
        unsafe { core::ptr::write_volatile(address as *mut u32, value) }
    }
}

/// Orders this CPU's earlier accesses to shared memory before its later ones, as seen by the
/// other members (`dmb ish`, Arm ARM B2.3.12): a writer's data before the flag that
/// publishes it, a reader's flag before the data it then reads.
pub fn barrier() {
    // SAFETY: a barrier has no other effect; not `nomem`, so the compiler keeps accesses on
    // their side of it.
    unsafe { core::arch::asm!("dmb ish", options(nostack, preserves_flags)) }
}
