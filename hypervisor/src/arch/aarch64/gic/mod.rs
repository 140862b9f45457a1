//! The physical interrupt controller: a GICv3 ([`v3`]) or a GICv2 with the virtualization
//! extensions ([`v2`]), chosen when Keel is built for its board (`[system] board`; xtask sets
//! `cfg(keel_gic_v2)` for a GICv2 board). Both offer the same functions and types under the
//! same names, re-exported here, so that the rest of Keel names neither version: list
//! registers are read and written in the GICv3 layout (ICH_LR<n>_EL2), which the GICv2 driver
//! converts to and from GICH_LR<n>; "the redistributor" is this pCPU's own SGIs and PPIs (on a
//! GICv2, the distributor's banked registers).
//!
//! One version is compiled in: the GICv3 build has no GICv2 code and its hot paths are as
//! before, and a GICv2 build never executes an ICC_*/ICH_* system-register access, which a
//! GICv2 system does not implement.

#[cfg(keel_gic_v2)]
mod v2;
#[cfg(not(keel_gic_v2))]
mod v3;

#[cfg(keel_gic_v2)]
pub use v2::*;
#[cfg(not(keel_gic_v2))]
pub use v3::*;

/// The byte offset of the 32-bit word holding `intid`'s bit in a one-bit-per-interrupt
/// register array (both versions' distributors), and the bit.
fn spi_bit(intid: u32) -> (usize, u32) {
    ((intid / 32) as usize * 4, 1 << (intid % 32))
}

/// The distributor, once boot has [`install`]ed it.
static DISTRIBUTOR: super::cpu::Once<Distributor> = super::cpu::Once::new();

/// Initialises the distributor and keeps it for [`distributor`].
pub fn install(distributor: Distributor) -> &'static Distributor {
    distributor.init();
    DISTRIBUTOR.call_once(|| distributor)
}

/// The distributor, if boot has installed it.
pub fn distributor() -> Option<&'static Distributor> {
    DISTRIBUTOR.get()
}

/// The interrupt controller's register regions, from the device tree (0 where the version
/// has no such region).
#[derive(Clone, Copy, Debug, Default)]
pub struct Regions {
    /// The distributor (GICD).
    pub distributor: u64,
    /// GICv3: the redistributors (GICR), back to back.
    #[cfg_attr(keel_gic_v2, allow(dead_code))]
    pub redistributors: u64,
    /// Their size.
    #[cfg_attr(keel_gic_v2, allow(dead_code))]
    pub redistributors_size: u64,
    /// GICv2: the physical CPU interface (GICC), 8 KiB with GICC_DIR at 0x1000.
    #[cfg_attr(not(keel_gic_v2), allow(dead_code))]
    pub cpu_interface: u64,
    /// GICv2: the virtual interface control (GICH) of the pCPU that accesses it.
    #[cfg_attr(not(keel_gic_v2), allow(dead_code))]
    pub virtual_control: u64,
    /// GICv2: the virtual CPU interface (GICV), 8 KiB, mapped at each guest's GICC.
    #[cfg_attr(not(keel_gic_v2), allow(dead_code))]
    pub virtual_cpu: u64,
}

/// Saves the list registers in `listed` (the ones Keel filled for the vCPU leaving this pCPU)
/// into `lrs` and empties them, so that every list register is empty when no vCPU is loaded:
/// the others are empty already (Keel empties one when it takes it back), and the next vCPU
/// finds none of this one's interrupts ([`restore_listed`] writes only its own).
#[inline(always)]
pub fn save_listed(lrs: &mut [u64; 16], listed: u64) {
    let mut scan = listed;
    while scan != 0 {
        let lr = scan.trailing_zeros() as usize;
        scan &= scan - 1;
        if let Some(saved) = lrs.get_mut(lr) {
            *saved = read_lr_at(lr);
            write_lr_at(lr, 0);
        }
    }
}

/// Writes back the list registers in `listed` as [`save_listed`] saved them (every list
/// register is empty when it is called).
#[inline(always)]
pub fn restore_listed(lrs: &[u64; 16], listed: u64) {
    let mut scan = listed;
    while scan != 0 {
        let lr = scan.trailing_zeros() as usize;
        scan &= scan - 1;
        if let Some(&value) = lrs.get(lr) {
            write_lr_at(lr, value);
        }
    }
}

/// Whether a list register value has state invalid: the guest has finished with it.
pub fn list_register_is_invalid(value: u64) -> bool {
    value >> 62 == 0
}

/// Whether a list register value holds its interrupt pending (State bit 62, 12.4.6).
pub fn list_register_is_pending(value: u64) -> bool {
    value & (1 << 62) != 0
}

/// Whether a list register value holds its interrupt active (State bit 63, 12.4.6).
pub fn list_register_is_active(value: u64) -> bool {
    value & (1 << 63) != 0
}

/// Builds a list register value (ICH_LR<n>_EL2, 12.4.6): pending, group 1 or 0, with the
/// given priority; `physical` links it to a physical interrupt the guest's EOI deactivates;
/// `eoi_maintenance` asks for a maintenance interrupt when the guest EOIs it.
pub fn list_register_value(
    intid: u32,
    priority: u8,
    group1: bool,
    physical: Option<u32>,
    eoi_maintenance: bool,
) -> u64 {
    let mut value = u64::from(intid) | (u64::from(priority) << 48) | (1 << 62);
    if group1 {
        value |= 1 << 60;
    }
    match physical {
        Some(pintid) => value |= (1 << 61) | (u64::from(pintid) << 32),
        None if eoi_maintenance => value |= 1 << 41,
        None => {}
    }
    value
}
