//! The GIC distributor (GICv3 spec 12.9): global enable and shared peripheral interrupts (SPIs).

use super::{IntId, Trigger, FIRST_SPI};
use crate::gic::{bit_position, byte_position, config_position};
use crate::mmio::MmioFrame;

/// GICD_CTLR.
const CTLR: usize = 0x0000;
/// GICD_TYPER.
const TYPER: usize = 0x0004;
/// GICD_IGROUPR<n>: one bit per INTID, 1 = Group 1.
const IGROUPR: usize = 0x0080;
/// GICD_ISENABLER<n>: one bit per INTID, write 1 to enable.
const ISENABLER: usize = 0x0100;
/// GICD_ICENABLER<n>: one bit per INTID, write 1 to disable.
const ICENABLER: usize = 0x0180;
/// GICD_IPRIORITYR<n>: one byte per INTID.
const IPRIORITYR: usize = 0x0400;
/// GICD_ICFGR<n>: two bits per INTID, the upper one set for edge-triggered.
const ICFGR: usize = 0x0C00;
/// GICD_IROUTER<n>: 64 bits per SPI (n = INTID), the target's affinity.
const IROUTER: usize = 0x6000;

/// GICD_CTLR.EnableGrp1 when DS = 1 (GICv3 spec 12.9.4).
const CTLR_ENABLE_GROUP1: u32 = 1 << 1;
/// GICD_CTLR.ARE when DS = 1: affinity routing enabled.
const CTLR_AFFINITY_ROUTING: u32 = 1 << 4;
/// GICD_CTLR.RWP: a register write is still taking effect.
const CTLR_REGISTER_WRITE_PENDING: u32 = 1 << 31;

/// A GICv3 distributor.
#[derive(Debug)]
pub struct Distributor {
    registers: MmioFrame,
}

impl Distributor {
    /// The distributor whose registers are `registers`.
    pub const fn new(registers: MmioFrame) -> Self {
        Self { registers }
    }

    /// Enables affinity routing and Group 1 interrupts, and waits until that took effect.
    pub fn enable(&self) {
        self.registers
            .write_u32(CTLR, CTLR_AFFINITY_ROUTING | CTLR_ENABLE_GROUP1);
        self.wait_for_register_write();
    }

    /// GICD_TYPER (GICv3 spec 12.9.38).
    pub fn typer(&self) -> u32 {
        self.registers.read_u32(TYPER)
    }

    /// The address of GICD_TYPER, for code that must issue the load itself (benchmarks).
    pub fn typer_address(&self) -> usize {
        self.registers.base() + TYPER
    }

    /// Configures SPI `intid` as Group 1 with `priority` and `trigger`, routes it to the CPU
    /// with affinity `target` (in GICD_IROUTER layout, see
    /// [`affinity_for_irouter`](crate::cpu::affinity_for_irouter)) and enables it.
    pub fn enable_spi(&self, intid: IntId, priority: u8, trigger: Trigger, target: u64) {
        assert!(intid >= FIRST_SPI, "INTID {intid} is not an SPI");
        let (word, bit) = bit_position(intid);
        self.set_bits(IGROUPR + word, 1 << bit);
        self.set_priority(intid, priority);
        let (config_word, config_shift) = config_position(intid);
        let config = self.registers.read_u32(ICFGR + config_word) & !(0b11 << config_shift);
        let edge = match trigger {
            Trigger::Level => 0b00,
            Trigger::Edge => 0b10,
        };
        self.registers
            .write_u32(ICFGR + config_word, config | edge << config_shift);
        self.registers
            .write_u64(IROUTER + intid as usize * 8, target);
        self.registers.write_u32(ISENABLER + word, 1 << bit);
    }

    /// Disables SPI `intid`.
    pub fn disable_spi(&self, intid: IntId) {
        let (word, bit) = bit_position(intid);
        self.registers.write_u32(ICENABLER + word, 1 << bit);
        self.wait_for_register_write();
    }

    fn set_priority(&self, intid: IntId, priority: u8) {
        let (offset, shift) = byte_position(intid);
        let others = self.registers.read_u32(IPRIORITYR + offset) & !(0xFF << shift);
        self.registers
            .write_u32(IPRIORITYR + offset, others | u32::from(priority) << shift);
    }

    fn set_bits(&self, offset: usize, bits: u32) {
        let value = self.registers.read_u32(offset);
        self.registers.write_u32(offset, value | bits);
    }

    fn wait_for_register_write(&self) {
        while self.registers.read_u32(CTLR) & CTLR_REGISTER_WRITE_PENDING != 0 {
            core::hint::spin_loop();
        }
    }
}
