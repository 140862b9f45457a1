//! Stage-2 installation (VTCR_EL2, VTTBR_EL2; Arm ARM D8.2); the tables come from Keel's pools
//! (`tables`), built by `keel_core::stage2`.

use super::regs::write_sysreg;

/// Most VMs.
pub const MAX_VMS: usize = keel_core::system::MAX_VMS;

/// VTCR_EL2 (D23.2.185): T0SZ = 25 (39-bit IPA), SL0 = 1 (start at level 1), inner/outer
/// write-back, inner shareable, 4 KiB granule, PS = 40 bits, RES1 bit 31, 8-bit VMID.
const VTCR: u64 = 25 | (1 << 6) | (1 << 8) | (1 << 10) | (3 << 12) | (2 << 16) | (1 << 31);

/// Makes `root` (with VMID `vmid`) this pCPU's stage-2 translation.
pub fn install(vmid: u16, root: u64) {
    // SAFETY: `root` is a complete stage-2 table built at boot in Keel's pool of tables; the TLB is cleaned of
    // any earlier use of the VMID before the guest runs.
    unsafe {
        write_sysreg!("vtcr_el2", VTCR);
        write_sysreg!("vttbr_el2", (u64::from(vmid) << 48) | root);
        core::arch::asm!("isb", "tlbi vmalls12e1", "dsb nsh", "isb", options(nostack));
    }
}

/// Switches this pCPU to another VM's stage-2 translation (`vttbr`: VMID and root, as
/// [`install`] wrote it). No TLB maintenance: the VMID tags every entry, and a VM's tables
/// never change after [`install`] first cleaned its VMID. No barrier either: the caller
/// synchronizes (an ISB before anything that uses the new VMID at EL2, or the guest entry's
/// ERET).
pub fn switch_to(vttbr: u64) {
    // SAFETY: `vttbr` names a complete stage-2 table built at boot, installed before.
    unsafe {
        write_sysreg!("vttbr_el2", vttbr);
    }
}
