//! What a guest reads from the device tree it is handed in x0: its command line and its memory.

use keel_core::fdt::{self, Fdt, FdtError};

/// Bytes of the header that [`fdt::total_size`] reads.
const SIZE_PREFIX: usize = 8;
/// Alignment of the blob required by the arm64 boot protocol (booting.rst: 8 bytes).
const BLOB_ALIGNMENT: usize = 8;

/// A range of guest-physical memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRange {
    /// First address.
    pub base: u64,
    /// Size in bytes.
    pub size: u64,
}

impl MemoryRange {
    /// The first address after the range.
    pub const fn end(&self) -> u64 {
        self.base.saturating_add(self.size)
    }
}

/// The boot information of the device tree.
#[derive(Clone, Copy, Debug)]
pub struct BootInfo<'a> {
    /// `/chosen/bootargs`, empty if absent.
    pub bootargs: &'a str,
    /// The span of `/memory`'s `reg` entries, from the lowest base to the highest end.
    pub memory: Option<MemoryRange>,
}

/// The device tree blob at `address`, checked.
///
/// # Safety
/// `address` must be the device tree address the guest was entered with (x0), and the
/// blob must stay in place and unmodified for the rest of the guest's life.
pub unsafe fn device_tree_at(address: usize) -> Result<Fdt<'static>, FdtError> {
    if address == 0 || !address.is_multiple_of(BLOB_ALIGNMENT) {
        return Err(FdtError::BadLayout(
            "the device tree address is null or misaligned",
        ));
    }
    // SAFETY: the loader put a blob at `address` (caller's contract); its header is at least
    // SIZE_PREFIX bytes long, and total_size checks the magic before trusting the size.
    let prefix = unsafe { core::slice::from_raw_parts(address as *const u8, SIZE_PREFIX) };
    let size = fdt::total_size(prefix)?;
    // SAFETY: the blob's own header says it is `size` bytes long, it is never written, and
    // it lives as long as the guest (caller's contract).
    let blob = unsafe { core::slice::from_raw_parts(address as *const u8, size) };
    Fdt::new(blob)
}

/// Reads `/chosen/bootargs` and `/memory`'s `reg`.
pub fn boot_info<'a>(device_tree: &Fdt<'a>) -> Result<BootInfo<'a>, FdtError> {
    let bootargs = match device_tree.find_node("/chosen")? {
        Some(chosen) => chosen.property_str("bootargs")?.unwrap_or(""),
        None => "",
    };
    let mut memory: Option<MemoryRange> = None;
    let regs = match device_tree.find_node("/memory")? {
        Some(node) => node.reg()?,
        None => None,
    };
    for (base, size) in regs.into_iter().flatten() {
        let range = MemoryRange { base, size };
        memory = Some(match memory {
            None => range,
            Some(span) => {
                let base = span.base.min(range.base);
                MemoryRange {
                    base,
                    size: span.end().max(range.end()) - base,
                }
            }
        });
    }
    Ok(BootInfo { bootargs, memory })
}
