//! Volatile access to device registers at physical addresses Keel maps as device memory.

/// A 32-bit device register block at a fixed physical address.
#[derive(Clone, Copy, Debug)]
pub struct Mmio {
    base: usize,
}

impl Mmio {
    /// A register block at `base`.
    ///
    /// # Safety
    /// `base` must be the address of a device mapped by Keel's EL2 tables (identity, device
    /// memory), valid for the registers accessed through it, and not used as normal memory.
    pub const unsafe fn new(base: u64) -> Self {
        Self {
            base: base as usize,
        }
    }

    /// Reads the 32-bit register at `offset`.
    pub fn read32(&self, offset: usize) -> u32 {
        // SAFETY: `new`'s contract makes `base + offset` a mapped device register.
        unsafe { core::ptr::read_volatile((self.base + offset) as *const u32) }
    }

    /// Writes the 32-bit register at `offset`.
    pub fn write32(&self, offset: usize, value: u32) {
        // SAFETY: `new`'s contract makes `base + offset` a mapped device register.
        unsafe { core::ptr::write_volatile((self.base + offset) as *mut u32, value) }
    }

    /// Writes the 64-bit register at `offset`.
    pub fn write64(&self, offset: usize, value: u64) {
        // SAFETY: `new`'s contract makes `base + offset` a mapped device register.
        unsafe { core::ptr::write_volatile((self.base + offset) as *mut u64, value) }
    }

    /// Reads the 64-bit register at `offset` (the GICv3 driver's and the SMMU's).
    #[cfg_attr(keel_gic_v2, allow(dead_code))]
    pub fn read64(&self, offset: usize) -> u64 {
        // SAFETY: `new`'s contract makes `base + offset` a mapped device register.
        unsafe { core::ptr::read_volatile((self.base + offset) as *const u64) }
    }
}
