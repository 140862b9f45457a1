//! Device register accessors: each access is one aligned plain load or store of the register width.
//!
//! Under Keel, trapped MMIO is emulated from the data-abort syndrome, which is only valid
//! (ESR_EL2.ISS.ISV = 1, Arm ARM D17.2.40) for single loads and stores of one general-purpose
//! register without writeback. The accessors therefore spell the instruction out in `asm!`
//! (plain `ldr`/`str` with a base register only), as Linux's `readl`/`writel` do, instead of
//! leaving the compiler free to pick a pair or a writeback addressing mode.

use core::arch::asm;

/// A frame of device registers at a fixed (identity-mapped, MMU off) address.
#[derive(Clone, Copy, Debug)]
pub struct MmioFrame {
    base: usize,
}

impl MmioFrame {
    /// A frame starting at `base`.
    ///
    /// # Safety
    /// `base` must be the address of a device frame (real or emulated) for which aligned
    /// 32-bit and 64-bit loads and stores at the offsets the caller will use touch no memory
    /// that Rust code owns.
    pub const unsafe fn new(base: usize) -> Self {
        Self { base }
    }

    /// The frame's first address.
    pub const fn base(&self) -> usize {
        self.base
    }

    /// Loads the 32-bit register at `offset`.
    pub fn read_u32(&self, offset: usize) -> u32 {
        debug_assert!(offset.is_multiple_of(4));
        let value: u32;
        // SAFETY: `new`'s contract: the address is a device register, not Rust memory; aligned.
        unsafe {
            asm!(
                "ldr {value:w}, [{address}]",
                value = out(reg) value,
                address = in(reg) self.base + offset,
                options(nostack, preserves_flags),
            )
        };
        value
    }

    /// Stores `value` to the 32-bit register at `offset`.
    pub fn write_u32(&self, offset: usize, value: u32) {
        debug_assert!(offset.is_multiple_of(4));
        // SAFETY: `new`'s contract: the address is a device register, not Rust memory; aligned.
        unsafe {
            asm!(
                "str {value:w}, [{address}]",
                value = in(reg) value,
                address = in(reg) self.base + offset,
                options(nostack, preserves_flags),
            )
        };
    }

    /// Loads the 64-bit register at `offset`.
    pub fn read_u64(&self, offset: usize) -> u64 {
        debug_assert!(offset.is_multiple_of(8));
        let value: u64;
        // SAFETY: `new`'s contract: the address is a device register, not Rust memory; aligned.
        unsafe {
            asm!(
                "ldr {value}, [{address}]",
                value = out(reg) value,
                address = in(reg) self.base + offset,
                options(nostack, preserves_flags),
            )
        };
        value
    }

    /// Stores `value` to the 64-bit register at `offset`.
    pub fn write_u64(&self, offset: usize, value: u64) {
        debug_assert!(offset.is_multiple_of(8));
        // SAFETY: `new`'s contract: the address is a device register, not Rust memory; aligned.
        unsafe {
            asm!(
                "str {value}, [{address}]",
                value = in(reg) value,
                address = in(reg) self.base + offset,
                options(nostack, preserves_flags),
            )
        };
    }
}
