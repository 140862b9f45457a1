//! The GICv2 distributor (GICv2 spec 4.3): global enable, SGIs through GICD_SGIR, and each
//! interrupt's enable, priority, target CPUs and trigger. The registers of INTIDs 0-31
//! (GICD_ISENABLER0, GICD_ICENABLER0, GICD_IPRIORITYR0-7, GICD_ITARGETSR0-7) are banked: each
//! CPU reaches its own SGIs and PPIs at the same addresses.

use super::{IntId, Trigger, FIRST_SPI};
use crate::gic::{bit_position, byte_position, config_position};
use crate::mmio::MmioFrame;

/// GICD_CTLR.
const CTLR: usize = 0x000;
/// GICD_TYPER.
const TYPER: usize = 0x004;
/// GICD_ISENABLER<n>: one bit per INTID, write 1 to enable.
const ISENABLER: usize = 0x100;
/// GICD_ICENABLER<n>: one bit per INTID, write 1 to disable.
const ICENABLER: usize = 0x180;
/// GICD_IPRIORITYR<n>: one byte per INTID.
const IPRIORITYR: usize = 0x400;
/// GICD_ITARGETSR<n>: one byte per INTID, a bit per CPU interface.
const ITARGETSR: usize = 0x800;
/// GICD_ICFGR<n>: two bits per INTID, the upper one set for edge-triggered.
const ICFGR: usize = 0xC00;
/// GICD_SGIR: writing it raises an SGI.
const SGIR: usize = 0xF00;

/// GICD_CTLR.EnableGrp0 (GICv2 spec 4.3.1, without Security Extensions).
const CTLR_ENABLE_GROUP0: u32 = 1 << 0;
/// GICD_SGIR.CPUTargetList (bits 23:16).
const SGIR_TARGET_LIST_SHIFT: u32 = 16;
/// GICD_SGIR.SGIINTID (bits 3:0).
const SGIR_INTID: u32 = 0xF;

/// CPU interfaces a GICv2 has at most (GICD_ITARGETSR and GICD_SGIR have a bit each).
pub const MAX_CPUS: u8 = 8;

/// A GICv2 distributor.
#[derive(Debug)]
pub struct Distributor {
    registers: MmioFrame,
}

impl Distributor {
    /// The distributor whose registers are `registers`.
    pub const fn new(registers: MmioFrame) -> Self {
        Self { registers }
    }

    /// Enables Group 0, the group of every interrupt the SDK configures.
    pub fn enable(&self) {
        self.registers.write_u32(CTLR, CTLR_ENABLE_GROUP0);
    }

    /// GICD_TYPER (GICv2 spec 4.3.2).
    pub fn typer(&self) -> u32 {
        self.registers.read_u32(TYPER)
    }

    /// The address of GICD_TYPER, for code that must issue the load itself (benchmarks).
    pub fn typer_address(&self) -> usize {
        self.registers.base() + TYPER
    }

    /// The address of GICD_SGIR, for code that must issue the store itself (benchmarks).
    pub fn sgir_address(&self) -> usize {
        self.registers.base() + SGIR
    }

    /// The calling CPU's bit among the CPU interfaces: GICD_ITARGETSR0's first byte, which
    /// reads as the reading CPU's own (GICv2 spec 4.3.12); on a GIC with one CPU interface,
    /// where it reads as zero, bit 0.
    pub fn this_cpu_target(&self) -> u8 {
        match self.registers.read_u32(ITARGETSR) as u8 {
            0 => 1,
            target => target,
        }
    }

    /// Configures SPI `intid` (Group 0, its reset group) with `priority` and `trigger`,
    /// targets it at the CPU interfaces of `targets` (a bit each) and enables it.
    pub fn enable_spi(&self, intid: IntId, priority: u8, trigger: Trigger, targets: u8) {
        assert!(intid >= FIRST_SPI, "INTID {intid} is not an SPI");
        self.set_priority(intid, priority);
        let (config_word, config_shift) = config_position(intid);
        let config = self.registers.read_u32(ICFGR + config_word) & !(0b11 << config_shift);
        let edge = match trigger {
            Trigger::Level => 0b00,
            Trigger::Edge => 0b10,
        };
        self.registers
            .write_u32(ICFGR + config_word, config | edge << config_shift);
        self.set_byte(ITARGETSR, intid, targets);
        let (word, bit) = bit_position(intid);
        self.registers.write_u32(ISENABLER + word, 1 << bit);
    }

    /// Disables SPI `intid`.
    pub fn disable_spi(&self, intid: IntId) {
        let (word, bit) = bit_position(intid);
        self.registers.write_u32(ICENABLER + word, 1 << bit);
    }

    /// Configures the calling CPU's SGI or PPI `intid` (its banked registers) with `priority`,
    /// and enables it.
    pub fn enable_private(&self, intid: IntId, priority: u8) {
        assert!(intid < FIRST_SPI, "INTID {intid} is not an SGI or PPI");
        self.set_priority(intid, priority);
        let (_, bit) = bit_position(intid);
        self.registers.write_u32(ISENABLER, 1 << bit);
    }

    /// Disables the calling CPU's SGI or PPI `intid`.
    pub fn disable_private(&self, intid: IntId) {
        let (_, bit) = bit_position(intid);
        self.registers.write_u32(ICENABLER, 1 << bit);
    }

    /// Sends SGI `intid` (0-15) to the CPU interfaces of `targets`, a bit each (GICD_SGIR with
    /// TargetListFilter 0, GICv2 spec 4.3.15), after the caller's earlier stores.
    pub fn send_sgi(&self, intid: IntId, targets: u8) {
        let value = u32::from(targets) << SGIR_TARGET_LIST_SHIFT | (intid & SGIR_INTID);
        crate::cpu::data_synchronization_barrier();
        self.registers.write_u32(SGIR, value);
    }

    fn set_priority(&self, intid: IntId, priority: u8) {
        self.set_byte(IPRIORITYR, intid, priority);
    }

    /// Writes `intid`'s byte of a one-byte-per-INTID array at `array` with a 32-bit
    /// read-modify-write (the SDK makes word accesses only, which every distributor register
    /// takes).
    fn set_byte(&self, array: usize, intid: IntId, value: u8) {
        let (offset, shift) = byte_position(intid);
        let others = self.registers.read_u32(array + offset) & !(0xFF << shift);
        self.registers
            .write_u32(array + offset, others | u32::from(value) << shift);
    }
}
