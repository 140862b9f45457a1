//! A CPU's redistributor (GICv3 spec 12.10/12.11): wake-up, and its SGIs and PPIs.

use super::{IntId, FIRST_SPI};
use crate::gic::{bit_position, byte_position};
use crate::mmio::MmioFrame;

/// GICR_WAKER, in the RD frame.
const WAKER: usize = 0x0014;
/// Offset of the SGI frame from the RD frame.
const SGI_FRAME: usize = 0x1_0000;
/// GICR_IGROUPR0, in the SGI frame.
const IGROUPR0: usize = 0x0080;
/// GICR_ISENABLER0, in the SGI frame.
const ISENABLER0: usize = 0x0100;
/// GICR_ICENABLER0, in the SGI frame.
const ICENABLER0: usize = 0x0180;
/// GICR_IPRIORITYR<n>, in the SGI frame.
const IPRIORITYR: usize = 0x0400;

/// GICR_WAKER.ProcessorSleep (GICv3 spec 12.11.38).
const WAKER_PROCESSOR_SLEEP: u32 = 1 << 1;
/// GICR_WAKER.ChildrenAsleep.
const WAKER_CHILDREN_ASLEEP: u32 = 1 << 2;

/// Bytes from one redistributor to the next: its RD and SGI frames (GICv3 spec 12.10).
const STRIDE: usize = 0x2_0000;

/// One CPU's redistributor: its RD frame and its SGI frame.
#[derive(Debug)]
pub struct Redistributor {
    control: MmioFrame,
    sgi: MmioFrame,
}

impl Redistributor {
    /// The redistributor of CPU (vCPU) `index` in the region of `count` redistributors that
    /// starts at `region` (the device tree's), at `region + index * 128 KiB`; `None` beyond
    /// the region.
    pub fn for_cpu(region: usize, count: usize, index: u64) -> Option<Self> {
        let index = usize::try_from(index).ok().filter(|&index| index < count)?;
        let base = region + index * STRIDE;
        // SAFETY: the two frames lie in the redistributor region the device tree names (or
        // Keel's fixed one), which holds no RAM.
        let (control, sgi) = unsafe { (MmioFrame::new(base), MmioFrame::new(base + SGI_FRAME)) };
        Some(Self { control, sgi })
    }

    /// Marks the CPU awake (clears ProcessorSleep) and waits until its interface is.
    pub fn wake(&self) {
        let waker = self.control.read_u32(WAKER);
        self.control
            .write_u32(WAKER, waker & !WAKER_PROCESSOR_SLEEP);
        while self.control.read_u32(WAKER) & WAKER_CHILDREN_ASLEEP != 0 {
            core::hint::spin_loop();
        }
    }

    /// Configures SGI or PPI `intid` as Group 1 with `priority`, and enables it.
    pub fn enable_private(&self, intid: IntId, priority: u8) {
        assert!(intid < FIRST_SPI, "INTID {intid} is not an SGI or PPI");
        let (_, bit) = bit_position(intid);
        let groups = self.sgi.read_u32(IGROUPR0);
        self.sgi.write_u32(IGROUPR0, groups | 1 << bit);
        let (offset, shift) = byte_position(intid);
        let others = self.sgi.read_u32(IPRIORITYR + offset) & !(0xFF << shift);
        self.sgi
            .write_u32(IPRIORITYR + offset, others | u32::from(priority) << shift);
        self.sgi.write_u32(ISENABLER0, 1 << bit);
    }

    /// Disables SGI or PPI `intid`.
    pub fn disable_private(&self, intid: IntId) {
        let (_, bit) = bit_position(intid);
        self.sgi.write_u32(ICENABLER0, 1 << bit);
    }
}
