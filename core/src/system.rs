//! The system description the hypervisor links in: constant tables emitted by the
//! configuration compiler (`keel_core::config`), never parsed at run time.

use crate::addr::{GuestPhysAddr, MemoryRegion, PhysAddr, VmId};

/// Most VMs Keel runs (its stage-2 table pool and VMIDs are sized for this).
pub const MAX_VMS: usize = 16;
/// Most vCPUs one VM may have (emulated redistributors per VM).
pub const MAX_VCPUS: usize = 8;
/// Width of the guest-physical address space stage 2 translates (`VTCR_EL2.T0SZ = 25`).
pub const IPA_BITS: u32 = 39;

/// What a guest's WFI does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WfiPolicy {
    /// WFI runs natively: the pCPU sleeps until an interrupt (best latency for a pinned vCPU).
    Native,
    /// WFI traps to Keel.
    Trap,
}

/// One VM, as compiled from its `[[vm]]` table.
#[derive(Debug)]
pub struct VmDesc {
    /// The VM's id (its index in [`SystemDesc::vms`]) and VMID.
    pub id: VmId,
    /// Name from the configuration, used in every diagnostic.
    pub name: &'static str,
    /// Guest RAM.
    pub memory: MemoryRegion,
    /// vCPU `i` runs pinned on pCPU `pcpus[i]`.
    pub pcpus: &'static [u32],
    /// The kernel image, copied to `image_ipa` at boot.
    pub image: &'static [u8],
    /// Where the image is loaded; also the entry point.
    pub image_ipa: GuestPhysAddr,
    /// The generated device tree blob, copied to `dtb_ipa`; its address is passed in x0.
    pub dtb: &'static [u8],
    /// Where the device tree is loaded.
    pub dtb_ipa: GuestPhysAddr,
    /// The initial RAM disk (empty if none), copied to `initrd_ipa`; the device tree describes it.
    pub initrd: &'static [u8],
    /// Where the initial RAM disk is loaded.
    pub initrd_ipa: GuestPhysAddr,
    /// Whether the VM has an emulated PL011 console.
    pub console: bool,
    /// What the guest's WFI does.
    pub wfi: WfiPolicy,
}

/// The whole system.
#[derive(Debug)]
pub struct SystemDesc {
    /// Name of the configuration.
    pub name: &'static str,
    /// Physical RAM the configuration was written for; checked against the DTB at boot.
    pub ram_base: PhysAddr,
    /// Size of that RAM.
    pub ram_size: u64,
    /// Number of pCPUs the configuration uses (pCPU ids `0..pcpus`).
    pub pcpus: u32,
    /// The VMs.
    pub vms: &'static [VmDesc],
}
