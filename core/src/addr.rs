//! Address and identifier newtypes: a guest-physical address is never a physical one by accident.

/// A physical address as seen by the hypervisor (output of stage 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PhysAddr(pub u64);

/// An intermediate physical address: what a guest believes is physical (input of stage 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GuestPhysAddr(pub u64);

/// Index of a VM in the system configuration; also its VMID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VmId(pub u16);

/// Index of a vCPU within its VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VcpuId(pub u16);

/// A contiguous guest memory region and where it lives physically.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRegion {
    /// First guest-physical address of the region.
    pub ipa: GuestPhysAddr,
    /// First physical address backing it.
    pub phys: PhysAddr,
    /// Size in bytes.
    pub size: u64,
}

impl MemoryRegion {
    /// Translates a guest-physical address inside the region to its physical address.
    pub fn translate(&self, ipa: GuestPhysAddr) -> Option<PhysAddr> {
        let offset = ipa.0.checked_sub(self.ipa.0)?;
        (offset < self.size).then(|| PhysAddr(self.phys.0 + offset))
    }

    /// Whether `[ipa, ipa + len)` lies wholly inside the region.
    pub fn contains_range(&self, ipa: GuestPhysAddr, len: u64) -> bool {
        match (ipa.0.checked_sub(self.ipa.0), len) {
            (Some(offset), len) => offset <= self.size && len <= self.size - offset,
            (None, _) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REGION: MemoryRegion = MemoryRegion {
        ipa: GuestPhysAddr(0x4000_0000),
        phys: PhysAddr(0x5000_0000),
        size: 0x10_0000,
    };

    #[test]
    fn translate_inside_and_outside() {
        assert_eq!(
            REGION.translate(GuestPhysAddr(0x4000_1234)),
            Some(PhysAddr(0x5000_1234))
        );
        assert_eq!(REGION.translate(GuestPhysAddr(0x4010_0000)), None);
        assert_eq!(REGION.translate(GuestPhysAddr(0x3fff_ffff)), None);
    }

    #[test]
    fn contains_range_edges() {
        assert!(REGION.contains_range(GuestPhysAddr(0x400f_f000), 0x1000));
        assert!(!REGION.contains_range(GuestPhysAddr(0x400f_f000), 0x1001));
        assert!(!REGION.contains_range(GuestPhysAddr(0x4000_0000), u64::MAX));
    }
}
