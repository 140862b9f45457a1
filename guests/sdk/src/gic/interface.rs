//! The calls guests make, each passed to the selected version's driver.

use super::selection::{distributor_base, gicv2_cpu_interface_base, selected};
use super::{Description, IntId, Trigger, Version, SPURIOUS_INTID_FIRST};
use crate::mmio::MmioFrame;
use crate::{gicv2, gicv3};

/// The selected GICv2 CPU interface.
fn gicv2_cpu_interface() -> gicv2::CpuInterface {
    // SAFETY: the address is the CPU interface the device tree names (a GICv2 is selected).
    gicv2::CpuInterface::new(unsafe { MmioFrame::new(gicv2_cpu_interface_base()) })
}

/// Enables this CPU's interface: every priority let through, EOImode 0 (an end of interrupt
/// both drops the priority and deactivates), and the group the SDK puts interrupts in enabled
/// (Group 1 on GICv3, Group 0 on GICv2). IRQs stay masked in PSTATE.
pub fn init_cpu_interface() {
    match super::version() {
        Version::V3 => gicv3::init_cpu_interface(),
        Version::V2 => gicv2_cpu_interface().enable(),
    }
}

/// An interrupt this CPU acknowledged, to be ended with [`end_of_interrupt`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acknowledged {
    intid: IntId,
    /// What the acknowledge read (GICv2: with the SGI's source CPU, which the end must repeat).
    raw: u32,
}

impl Acknowledged {
    /// The interrupt's INTID.
    pub const fn intid(self) -> IntId {
        self.intid
    }
}

/// Acknowledges the highest-priority pending interrupt; `None` if nothing was pending.
pub fn acknowledge() -> Option<Acknowledged> {
    match super::version() {
        Version::V3 => gicv3::acknowledge().map(|intid| Acknowledged { intid, raw: intid }),
        Version::V2 => {
            let raw = gicv2_cpu_interface().acknowledge();
            let intid = raw & gicv2::IAR_INTERRUPT_ID;
            (intid < SPURIOUS_INTID_FIRST).then_some(Acknowledged { intid, raw })
        }
    }
}

/// Drops the priority of and deactivates an acknowledged interrupt.
pub fn end_of_interrupt(interrupt: Acknowledged) {
    match super::version() {
        Version::V3 => gicv3::end_of_interrupt(interrupt.intid),
        Version::V2 => gicv2_cpu_interface().end_of_interrupt(interrupt.raw),
    }
}

/// Sends SGI `intid` (0-15) to CPU (vCPU) n for each bit n of `targets`. On GICv2 only bits
/// 0-7 exist (GICD_SGIR's CPUTargetList: at most eight CPU interfaces).
pub fn send_sgi(intid: IntId, targets: u16) {
    match super::version() {
        Version::V3 => gicv3::send_sgi(intid, targets),
        Version::V2 => gicv2_distributor().send_sgi(intid, targets as u8),
    }
}

/// Whether an IRQ is pending at this CPU, masked or not (ISR_EL1.I, Arm ARM D17.2.86): under
/// a hypervisor, that a virtual interrupt sits pending in a list register. The same on both
/// versions: it reads the CPU, not the GIC.
pub fn irq_pending() -> bool {
    crate::cpu::irq_pending()
}

/// The distributor, of whichever version is selected.
#[derive(Debug)]
pub struct Distributor {
    _private: (),
}

/// The distributor the device tree names.
pub static DISTRIBUTOR: Distributor = Distributor { _private: () };

/// The selected GICv2's distributor.
fn gicv2_distributor() -> gicv2::Distributor {
    // SAFETY: the address is the distributor the device tree names.
    gicv2::Distributor::new(unsafe { MmioFrame::new(distributor_base()) })
}

/// The selected GICv3's distributor.
fn gicv3_distributor() -> gicv3::Distributor {
    // SAFETY: the address is the distributor the device tree names (or Keel's fixed one).
    gicv3::Distributor::new(unsafe { MmioFrame::new(distributor_base()) })
}

impl Distributor {
    /// Its first address.
    pub fn base(&self) -> usize {
        distributor_base()
    }

    /// Enables it for the group the SDK uses (GICv3: with affinity routing, Group 1; GICv2:
    /// Group 0), and waits until that took effect.
    pub fn enable(&self) {
        match super::version() {
            Version::V3 => gicv3_distributor().enable(),
            Version::V2 => gicv2_distributor().enable(),
        }
    }

    /// GICD_TYPER (GICv3 spec 12.9.38, GICv2 spec 4.3.2: at offset 0x004 on both).
    pub fn typer(&self) -> u32 {
        match super::version() {
            Version::V3 => gicv3_distributor().typer(),
            Version::V2 => gicv2_distributor().typer(),
        }
    }

    /// The address of GICD_TYPER, for code that must issue the load itself (benchmarks).
    pub fn typer_address(&self) -> usize {
        match super::version() {
            Version::V3 => gicv3_distributor().typer_address(),
            Version::V2 => gicv2_distributor().typer_address(),
        }
    }

    /// GICv2: the address of GICD_SGIR, for code that must issue the store itself
    /// (benchmarks); `None` on a GICv3, whose SGIs are sent through ICC_SGI1R_EL1.
    pub fn sgir_address(&self) -> Option<usize> {
        match super::version() {
            Version::V3 => None,
            Version::V2 => Some(gicv2_distributor().sgir_address()),
        }
    }

    /// Configures SPI `intid` with `priority` and `trigger` in the SDK's group, routes it to
    /// the calling CPU (GICv3: its affinity in GICD_IROUTER; GICv2: its bit in GICD_ITARGETSR)
    /// and enables it.
    pub fn enable_spi(&self, intid: IntId, priority: u8, trigger: Trigger) {
        match super::version() {
            Version::V3 => gicv3_distributor().enable_spi(
                intid,
                priority,
                trigger,
                crate::cpu::affinity_for_irouter(),
            ),
            Version::V2 => {
                let distributor = gicv2_distributor();
                let target = distributor.this_cpu_target();
                distributor.enable_spi(intid, priority, trigger, target);
            }
        }
    }

    /// Disables SPI `intid`.
    pub fn disable_spi(&self, intid: IntId) {
        match super::version() {
            Version::V3 => gicv3_distributor().disable_spi(intid),
            Version::V2 => gicv2_distributor().disable_spi(intid),
        }
    }
}

/// A CPU's private interrupts (its SGIs and PPIs): on GICv3 that CPU's redistributor, on
/// GICv2 the distributor's registers for INTIDs 0-31, which are banked: each CPU reaches its
/// own only, so on GICv2 a `PrivateInterrupts` acts on the CPU that uses it, whichever index
/// it was made for.
#[derive(Debug)]
pub enum PrivateInterrupts {
    /// GICv2: the banked registers of the distributor.
    V2(gicv2::Distributor),
    /// GICv3: the CPU's redistributor.
    V3(gicv3::Redistributor),
}

impl PrivateInterrupts {
    /// Those of CPU (vCPU) `index`; `None` if the GIC has no such CPU (GICv3: beyond the
    /// redistributor region; GICv2: index 8 or more).
    pub fn for_cpu(index: u64) -> Option<Self> {
        match selected() {
            Description::V3 {
                redistributors,
                redistributor_count,
                ..
            } => gicv3::Redistributor::for_cpu(redistributors, redistributor_count, index)
                .map(PrivateInterrupts::V3),
            Description::V2 { .. } => (index < u64::from(gicv2::MAX_CPUS))
                .then(|| PrivateInterrupts::V2(gicv2_distributor())),
        }
    }

    /// Wakes the CPU's redistributor (GICv3: clears GICR_WAKER.ProcessorSleep and waits);
    /// nothing to do on GICv2.
    pub fn wake(&self) {
        match self {
            PrivateInterrupts::V3(redistributor) => redistributor.wake(),
            PrivateInterrupts::V2(_) => {}
        }
    }

    /// Configures SGI or PPI `intid` with `priority` in the SDK's group, and enables it.
    #[inline]
    pub fn enable(&self, intid: IntId, priority: u8) {
        match self {
            PrivateInterrupts::V3(redistributor) => redistributor.enable_private(intid, priority),
            PrivateInterrupts::V2(distributor) => distributor.enable_private(intid, priority),
        }
    }

    /// Disables SGI or PPI `intid`.
    #[inline]
    pub fn disable(&self, intid: IntId) {
        match self {
            PrivateInterrupts::V3(redistributor) => redistributor.disable_private(intid),
            PrivateInterrupts::V2(distributor) => distributor.disable_private(intid),
        }
    }
}
