//! The GICv2 CPU interface (GICv2 spec 4.4, GICC_*), memory-mapped; under Keel the hardware's
//! virtual CPU interface (GICV), which acknowledges and ends interrupts without a trap.

use crate::mmio::MmioFrame;

/// GICC_CTLR.
const CTLR: usize = 0x00;
/// GICC_PMR: the priority mask.
const PMR: usize = 0x04;
/// GICC_IAR: reading it acknowledges.
const IAR: usize = 0x0C;
/// GICC_EOIR: writing it ends an interrupt.
const EOIR: usize = 0x10;

/// GICC_CTLR.EnableGrp0 (GICv2 spec 4.4.1, without Security Extensions).
const CTLR_ENABLE_GROUP0: u32 = 1 << 0;
/// GICC_CTLR.FIQEn: Group 0 signalled as FIQ (left clear: it is IRQ).
const CTLR_FIQ_ENABLE: u32 = 1 << 3;
/// GICC_CTLR.EOImode: 0 = an EOIR write both drops priority and deactivates.
const CTLR_EOI_MODE: u32 = 1 << 9;
/// GICC_PMR value letting every priority through.
const PRIORITY_MASK_ALL: u32 = 0xFF;
/// GICC_IAR.InterruptID (bits 9:0); bits 12:10 are an SGI's source CPU, which the end of
/// interrupt must repeat.
pub const IAR_INTERRUPT_ID: u32 = 0x3FF;

/// A GICv2 CPU interface.
#[derive(Debug)]
pub struct CpuInterface {
    registers: MmioFrame,
}

impl CpuInterface {
    /// The CPU interface whose registers are `registers`.
    pub const fn new(registers: MmioFrame) -> Self {
        Self { registers }
    }

    /// Unmasks every priority, selects EOImode 0 and IRQ signalling, and enables Group 0
    /// (keeping the bypass bits as they are).
    pub fn enable(&self) {
        self.registers.write_u32(PMR, PRIORITY_MASK_ALL);
        let control = self.registers.read_u32(CTLR) & !(CTLR_EOI_MODE | CTLR_FIQ_ENABLE);
        self.registers.write_u32(CTLR, control | CTLR_ENABLE_GROUP0);
    }

    /// Acknowledges the highest-priority pending interrupt: GICC_IAR as read (InterruptID in
    /// bits 9:0, 1020-1023 when nothing is pending; an SGI's source CPU in bits 12:10).
    pub fn acknowledge(&self) -> u32 {
        self.registers.read_u32(IAR)
    }

    /// Ends the interrupt whose acknowledge read `acknowledged` (GICC_EOIR, EOImode 0).
    pub fn end_of_interrupt(&self, acknowledged: u32) {
        self.registers.write_u32(EOIR, acknowledged);
    }
}
