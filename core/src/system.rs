//! The system description the hypervisor links in: constant tables emitted by the
//! configuration compiler (`keel_core::config`), never parsed at run time.

use crate::addr::{GuestPhysAddr, MemoryRegion, PhysAddr, VmId};
use crate::colour::Colours;
use crate::sched::{Params, Policy};

/// Most VMs Keel runs (its stage-2 table pool and VMIDs are sized for this).
pub const MAX_VMS: usize = 16;
/// Most vCPUs one VM may have (emulated redistributors per VM).
pub const MAX_VCPUS: usize = 8;
/// Most real-time tasks one partition may create at run time (each is a vCPU of the partition
/// beyond its configured ones, so `pcpus.len() + max` is at most [`MAX_VCPUS`]).
pub const MAX_TASKS_PER_VM: usize = 6;
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
    /// The colours of the last-level cache its RAM is backed by ([`crate::colour`]):
    /// [`Colours::NONE`] for RAM that is one physical range, `[phys, phys + size)`; otherwise
    /// its guest pages are the frames of these colours from `memory.phys` on.
    pub colours: Colours,
    /// vCPU `i` runs on pCPU `pcpus[i]`.
    pub pcpus: &'static [u32],
    /// vCPU `i`'s scheduling parameters (durations in nanoseconds).
    pub sched: &'static [Params],
    /// Flash at IPA 0 (firmware VMs): erased to 0xff with the image at its start at every boot.
    pub flash: Option<MemoryRegion>,
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
    /// Whether that console's output reaches the terminal unescaped while the VM has the input
    /// focus, which starts on it (one VM of a system at most; see [`crate::console`]).
    pub raw_console: bool,
    /// What the guest's WFI does.
    pub wfi: WfiPolicy,
    /// Whether the VM owns its pCPUs' PMU (counters passed through) or the PMU is hidden.
    pub pmu: bool,
    /// Whether the VM may read and reset every pCPU's interrupts-masked record
    /// (KEEL_MASKED_STRETCH), other VMs' traps and PCs included: a measurement partition the
    /// integrator trusts. Otherwise only those of the pCPUs it alone uses.
    pub monitor_masked_stretch: bool,
    /// Whether the VM may copy Keel's trace rings into its memory (KEEL_TRACE_READ): they show
    /// every VM's exits and interrupts, so only a manager the integrator trusts.
    pub trace_reader: bool,
    /// Its health policy: the action on each event, its watchdog, miss threshold, restart
    /// limit and managers (see [`crate::health`]).
    pub health: crate::health::Policy,
    /// Whether it has the emulated SP805 watchdog.
    pub watchdog_device: bool,
    /// Real-time task services: `None` if the VM may not create tasks.
    pub tasks: Option<TaskGrant>,
    /// Incoming messages (KEEL_MSG_*): `None` if no VM may send to this one.
    pub messages: Option<MessageGrant>,
    /// The VM (by id) at the other end of its virtio console, if it has one: the console's
    /// output goes to that VM's vCPU 0 as messages, and the messages for this VM's vCPU 0 are
    /// the console's input.
    pub virtio_console: Option<u8>,
    /// The board's devices it is given (`[[vm.passthrough]]`): their registers are mapped in
    /// its stage 2 as device memory, their interrupts forwarded to it in hardware.
    pub devices: &'static [AssignedDevice],
}

/// A board device given to one VM.
#[derive(Debug)]
pub struct AssignedDevice {
    /// Its path in the board's device tree, named in diagnostics.
    pub path: &'static str,
    /// Its register regions, at the IPAs the VM sees them (page aligned).
    pub regions: &'static [MemoryRegion],
    /// Its interrupts (SPIs), the same INTIDs physical and virtual.
    pub interrupts: &'static [AssignedInterrupt],
    /// The SMMU streams of its DMA, each `(first, last)`, translated with the VM's memory map.
    pub streams: &'static [(u32, u32)],
}

/// Stream IDs Keel's SMMU stream table covers: every 16-bit one (a PCI host bridge's
/// requester IDs, all buses behind it; a two-level table, `keel_core::smmu::strtab`); a
/// transaction with a higher one is out of range.
pub const MAX_STREAMS: u32 = 1 << 16;

/// Stream ranges (an `iommu-map` entry, an `iommus` stream) of all VMs' devices together that
/// Keel's SMMU driver takes at boot; a system with more is refused at build time.
pub const MAX_STREAM_RANGES: usize = 32;

/// Level-2 arrays of Keel's stream table (16 KiB each, in its `.bss`): one per VM whose
/// streams cover a whole block of 256 (a PCI host bridge's VM: one for all its 65,536), one per
/// block split between VMs or between a VM and no one (a platform device's single stream). A
/// system that needs more is refused at build time.
pub const MAX_STREAM_ARRAYS: usize = 4;

/// The board's SMMUv3, which Keel owns.
#[derive(Debug)]
pub struct IommuDesc {
    /// Its registers.
    pub base: PhysAddr,
    /// Their size.
    pub size: u64,
    /// Its event queue interrupt.
    pub event_intid: u32,
    /// Its global error interrupt.
    pub gerror_intid: u32,
}

/// One interrupt of an assigned device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AssignedInterrupt {
    /// Its INTID (32 up to [`crate::devices::vgic::NR_IRQS`]).
    pub intid: u32,
    /// Level-sensitive (high); otherwise edge-triggered (rising).
    pub level: bool,
}

/// A VM's incoming message queues (its `messages` table): each of its vCPUs and tasks has a
/// queue of its own, all alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageGrant {
    /// Most messages one queue holds (1..=[`MAX_QUEUE_DEPTH`]).
    pub depth: u16,
    /// Largest message, in bytes (1..=[`crate::ipc::MAX_MESSAGE`]).
    pub size: u16,
    /// The virtual interrupt raised at the receiving vCPU when a message is queued: an SGI
    /// (0..=15), or an SPI (32..[`crate::devices::vgic::NR_IRQS`]) the VM owns and routes.
    pub intid: u32,
    /// The VMs (by id) that may send to it, in the order written.
    pub senders: &'static [u8],
    /// Where its queues' rings start in Keel's message pool: its vCPUs' and tasks' rings follow
    /// one another from there, each [`crate::ipc::ring_len`] bytes.
    pub pool_offset: usize,
}

/// Most messages one queue may hold.
pub const MAX_QUEUE_DEPTH: usize = 256;
/// Most bytes all message queues of a system may take in Keel's memory together.
pub const MAX_MESSAGE_POOL: usize = 1 << 20;

impl MessageGrant {
    /// Whether VM `sender` may send to this VM.
    pub fn allows(&self, sender: usize) -> bool {
        self.senders.iter().any(|&id| usize::from(id) == sender)
    }
}

/// What a partition may do with real-time tasks at run time (its `tasks` table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskGrant {
    /// Most tasks it may have at once (1..=[`MAX_TASKS_PER_VM`]).
    pub max: u8,
    /// Most utilisation its tasks may take on any one of its pCPUs, in parts per million, each
    /// task counted as (budget + 2 × switch cost) / period.
    pub utilisation_ppm: u32,
    /// The other VMs (by id) that may launch, delete and read the statistics of its tasks.
    pub managers: &'static [u8],
}

/// Most shared-memory channels a system may have.
pub const MAX_CHANNELS: usize = 16;

/// A shared-memory channel (a `[[channel]]` table): one physical region that each member VM
/// sees at an IPA of its own, read-write or read-only, and a doorbell interrupt
/// (KEEL_CHANNEL_NOTIFY) raised at the members. Its memory is no VM's own: Keel's accessor of
/// guest memory ([`VmDesc::region_of`]) never finds it.
#[derive(Debug)]
pub struct ChannelDesc {
    /// Name from the configuration, used in diagnostics.
    pub name: &'static str,
    /// First physical address of the shared memory.
    pub phys: PhysAddr,
    /// Its size in bytes (a multiple of 4 KiB).
    pub size: u64,
    /// The doorbell: an SGI (0..=15, raised at the member's vCPU 0) or an SPI
    /// (32..[`crate::devices::vgic::NR_IRQS`], routed as the member routes it).
    pub intid: u32,
    /// The member VMs, in the order written (a doorbell names one by its position here).
    pub members: &'static [ChannelMember],
}

/// One VM's view of a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelMember {
    /// The VM's id.
    pub vm: u8,
    /// Where the VM sees the channel's memory (4 KiB aligned).
    pub ipa: GuestPhysAddr,
    /// Whether it may write it (otherwise a write is a stage-2 permission fault).
    pub writable: bool,
}

impl ChannelDesc {
    /// The position of VM `vm` among the members, if it is one.
    pub fn position_of(&self, vm: usize) -> Option<usize> {
        self.members
            .iter()
            .position(|member| usize::from(member.vm) == vm)
    }

    /// The channel's memory as `member` sees it.
    pub fn window(&self, member: &ChannelMember) -> MemoryRegion {
        MemoryRegion {
            ipa: member.ipa,
            phys: self.phys,
            size: self.size,
        }
    }
}

/// The whole system.
#[derive(Debug)]
pub struct SystemDesc {
    /// Name of the configuration.
    pub name: &'static str,
    /// The board it was built for; checked against the DTB at boot.
    pub board: crate::board::BoardDesc,
    /// Physical RAM the configuration was written for; checked against the DTB at boot.
    pub ram_base: PhysAddr,
    /// Size of that RAM.
    pub ram_size: u64,
    /// Number of pCPUs the configuration uses (pCPU ids `0..pcpus`).
    pub pcpus: u32,
    /// pCPU `i`'s scheduling policy (durations in nanoseconds); one per pCPU.
    pub policies: &'static [Policy],
    /// Keel's cost of one vCPU switch, in nanoseconds, as charged by admission.
    pub switch_cost_ns: u64,
    /// The VMs.
    pub vms: &'static [VmDesc],
    /// The shared-memory channels; a channel's id is its index here.
    pub channels: &'static [ChannelDesc],
    /// The SMMU Keel drives, if the configuration names one.
    pub iommu: Option<IommuDesc>,
}

impl SystemDesc {
    /// Whether pCPU `pcpu` runs vCPUs of VM `vm` and of no other VM: the configuration places
    /// at least one of its vCPUs there (a pinned pCPU of its own, or a shared one) and no
    /// other VM's. Tasks go only on their partition's own pCPUs, so none of another VM's
    /// either. What Keel records per pCPU there (its traps, its guests' PCs) is this VM's own.
    pub fn pcpu_used_only_by(&self, pcpu: u32, vm: usize) -> bool {
        let mut used = false;
        for (id, desc) in self.vms.iter().enumerate() {
            if desc.pcpus.contains(&pcpu) {
                if id != vm {
                    return false;
                }
                used = true;
            }
        }
        used
    }

    /// Whether VM `vm` may read and reset pCPU `pcpu`'s record of its longest stretch with
    /// interrupts masked (KEEL_MASKED_STRETCH), whose ESR_EL2 and ELR_EL2 are a trap and a PC
    /// of whichever vCPU ran there: only if the pCPU is its own alone
    /// ([`Self::pcpu_used_only_by`]), or the configuration makes it a monitor of every pCPU
    /// ([`VmDesc::monitor_masked_stretch`]).
    pub fn may_read_masked_record(&self, vm: usize, pcpu: u32) -> bool {
        self.vms
            .get(vm)
            .is_some_and(|desc| desc.monitor_masked_stretch)
            || self.pcpu_used_only_by(pcpu, vm)
    }

    /// Whether VM `vm` may also reset that record: only if it may read it and the pCPU is no
    /// other VM's alone. A monitor never resets the record a partition keeps of its own pCPU
    /// (a pCPU several VMs share is readable by monitors only, so resetting it wrongs no
    /// partition).
    pub fn may_reset_masked_record(&self, vm: usize, pcpu: u32) -> bool {
        self.may_read_masked_record(vm, pcpu)
            && (0..self.vms.len()).all(|other| other == vm || !self.pcpu_used_only_by(pcpu, other))
    }

    /// The channels VM `vm` is a member of, each with its view of it.
    pub fn channels_of(&self, vm: usize) -> impl Iterator<Item = (&ChannelDesc, &ChannelMember)> {
        self.channels.iter().filter_map(move |channel| {
            let member = channel.members.get(channel.position_of(vm)?)?;
            Some((channel, member))
        })
    }
}

impl VmDesc {
    /// What it takes of Keel's pools of translation tables.
    pub fn table_needs(&self) -> crate::table_pools::TableNeeds {
        crate::table_pools::TableNeeds {
            coloured: self.colours.is_coloured().then_some(self.memory.size),
            dma: self.devices.iter().any(|device| !device.streams.is_empty()),
        }
    }

    /// Its vCPUs: the configured ones, then as many as it may create tasks.
    pub fn vcpu_count(&self) -> usize {
        self.pcpus.len() + self.tasks.map_or(0, |grant| usize::from(grant.max))
    }

    /// The VM's guest-physical memory regions: its RAM, then its flash if it has one.
    pub fn regions(&self) -> impl Iterator<Item = MemoryRegion> + '_ {
        core::iter::once(self.memory).chain(self.flash)
    }

    /// The region that holds all of `[ipa, ipa + len)`, if one does.
    pub fn region_of(&self, ipa: GuestPhysAddr, len: u64) -> Option<MemoryRegion> {
        self.regions()
            .find(|region| region.contains_range(ipa, len))
    }

    /// The physical address of `ipa`, if `[ipa, ipa + len)` lies wholly in one of the VM's
    /// regions: [`Self::region_of`] then [`MemoryRegion::translate`], in one inlined step
    /// (its RAM tried first, then its flash; no region copied out).
    /// Not for coloured RAM, which is not one physical range: Keel reaches it through its
    /// window, and a page's frame is [`Colours::frame`] (the hypervisor's accessor of guest
    /// memory looks at the VM's colours first; a test here would cost its reload steps dear).
    #[inline]
    pub fn translate_range(&self, ipa: GuestPhysAddr, len: u64) -> Option<PhysAddr> {
        if self.memory.contains_range(ipa, len) {
            return self.memory.translate(ipa);
        }
        match &self.flash {
            Some(flash) if flash.contains_range(ipa, len) => flash.translate(ipa),
            _ => None,
        }
    }
}

/// A VM for host tests: `vcpus` best-effort vCPUs on pCPUs 1.., 16 MiB of RAM at IPA
/// 0x4000_0000 backed at `phys`, a console, and nothing else.
#[cfg(test)]
pub(crate) fn test_vm(id: u16, phys: u64, vcpus: usize) -> VmDesc {
    static PCPUS: [u32; MAX_VCPUS] = [1, 2, 3, 4, 5, 6, 7, 8];
    static SCHED: [Params; MAX_VCPUS] = [Params {
        priority: 0,
        reservation: None,
    }; MAX_VCPUS];
    VmDesc {
        id: VmId(id),
        name: "vm",
        colours: Colours::NONE,
        memory: MemoryRegion {
            ipa: GuestPhysAddr(0x4000_0000),
            phys: PhysAddr(phys),
            size: 0x100_0000,
        },
        pcpus: &PCPUS[..vcpus],
        sched: &SCHED[..vcpus],
        flash: None,
        image: &[],
        image_ipa: GuestPhysAddr(0x4000_0000),
        dtb: &[],
        dtb_ipa: GuestPhysAddr(0x40e0_0000),
        initrd: &[],
        initrd_ipa: GuestPhysAddr(0),
        console: true,
        raw_console: false,
        wfi: WfiPolicy::Trap,
        pmu: false,
        monitor_masked_stretch: false,
        trace_reader: false,
        health: crate::health::Policy::DEFAULT,
        watchdog_device: false,
        tasks: None,
        messages: None,
        virtio_console: None,
        devices: &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_to_the_region_that_holds_them_whole() {
        let region = |ipa, phys, size| MemoryRegion {
            ipa: GuestPhysAddr(ipa),
            phys: PhysAddr(phys),
            size,
        };
        let vm = VmDesc {
            id: VmId(0),
            name: "fw",
            memory: region(0x4000_0000, 0x6000_0000, 0x400_0000),
            colours: Colours::NONE,
            flash: Some(region(0, 0x7000_0000, 0x800_0000)),
            pcpus: &[1],
            sched: &[Params {
                priority: 0,
                reservation: None,
            }],
            image: &[],
            image_ipa: GuestPhysAddr(0),
            dtb: &[],
            dtb_ipa: GuestPhysAddr(0x4000_0000),
            initrd: &[],
            initrd_ipa: GuestPhysAddr(0),
            console: true,
            raw_console: false,
            wfi: WfiPolicy::Native,
            pmu: false,
            monitor_masked_stretch: false,
            trace_reader: false,
            health: crate::health::Policy::DEFAULT,
            watchdog_device: false,
            tasks: None,
            messages: None,
            virtio_console: None,
            devices: &[],
        };
        let found = |ipa, len| vm.region_of(GuestPhysAddr(ipa), len).map(|r| r.phys.0);
        assert_eq!(found(0x4000_0000, 4), Some(0x6000_0000));
        assert_eq!(found(0x0400_0000, 0x4_0000), Some(0x7000_0000));
        assert_eq!(found(0x07ff_fffc, 4), Some(0x7000_0000));
        // Across the end of the flash, between the regions, past RAM: no region.
        assert_eq!(found(0x07ff_fffc, 8), None);
        assert_eq!(found(0x1000_0000, 4), None);
        assert_eq!(found(0x43ff_fffc, 8), None);
        let no_flash = VmDesc { flash: None, ..vm };
        assert_eq!(no_flash.region_of(GuestPhysAddr(0), 4), None);
        // translate_range is region_of then translate, at the edges of both regions (lengths
        // 0 and 1 at each end included) and at random addresses and lengths.
        let mut rng = crate::rng::Rng::new(0x7a);
        let mut cases = std::vec::Vec::new();
        for edge in [0u64, 0x800_0000, 0x4000_0000, 0x4400_0000] {
            for delta in [-8i64, -4, -1, 0, 1, 4] {
                for len in [0, 1, 3, 4, 8, 0x4_0000, u64::MAX] {
                    cases.push((edge.wrapping_add_signed(delta), len));
                }
            }
        }
        for _ in 0..20_000 {
            cases.push((rng.below(0x4800_0000), rng.below(0x900_0000)));
        }
        for desc in [vm, no_flash] {
            for &(ipa, len) in &cases {
                let ipa = GuestPhysAddr(ipa);
                let expected = desc
                    .region_of(ipa, len)
                    .and_then(|region| region.translate(ipa));
                assert_eq!(desc.translate_range(ipa, len), expected, "{ipa:?} {len}");
            }
        }
    }

    /// A system of `vms`, each given as its vCPUs' pCPUs, on 5 pCPUs.
    fn placed(vms: &[&'static [u32]]) -> SystemDesc {
        SystemDesc {
            board: crate::board::QEMU_VIRT,
            name: "placement",
            ram_base: PhysAddr(0x4000_0000),
            ram_size: 0x4000_0000,
            pcpus: 5,
            policies: &[],
            switch_cost_ns: 0,
            iommu: None,
            vms: Vec::leak(
                vms.iter()
                    .enumerate()
                    .map(|(id, &pcpus)| VmDesc {
                        pcpus,
                        ..test_vm(id as u16, 0x5000_0000 + 0x100_0000 * id as u64, 0)
                    })
                    .collect(),
            ),
            channels: &[],
        }
    }

    #[test]
    fn a_pcpu_is_a_vms_own_only_if_every_vcpu_placed_there_is_its() {
        // VM 0 pinned on 1, its second vCPU on 4, which it shares with VM 2; VM 1 pinned on 2
        // and 3; VM 3 has both of its vCPUs on (shared) pCPU 0. Nobody on 5.
        let system = placed(&[&[1, 4], &[2, 3], &[4], &[0, 0]]);
        let own = |vm| -> Vec<u32> {
            (0..6)
                .filter(|&pcpu| system.pcpu_used_only_by(pcpu, vm))
                .collect()
        };
        assert_eq!(own(0), [1], "pCPU 4 is shared with VM 2");
        assert_eq!(own(1), [2, 3]);
        assert_eq!(own(2), [] as [u32; 0], "its only pCPU is shared with VM 0");
        assert_eq!(own(3), [0], "both of its vCPUs on one pCPU");
        assert_eq!(own(4), [] as [u32; 0], "no such VM");
        // A pCPU nobody uses is nobody's.
        assert!((0..5).all(|vm| !system.pcpu_used_only_by(5, vm)));
    }

    #[test]
    fn masked_records_are_read_by_their_pcpus_only_vm_or_a_monitor() {
        let mut system = placed(&[&[1], &[2, 3], &[1]]);
        let readable = |system: &SystemDesc, vm| -> Vec<u32> {
            (0..5)
                .filter(|&pcpu| system.may_read_masked_record(vm, pcpu))
                .collect()
        };
        assert_eq!(
            readable(&system, 0),
            [] as [u32; 0],
            "pCPU 1 is shared with VM 2"
        );
        assert_eq!(readable(&system, 1), [2, 3]);
        assert_eq!(readable(&system, 2), [] as [u32; 0]);
        let mut vms: Vec<VmDesc> = system.vms.iter().map(|vm| VmDesc { ..*vm }).collect();
        vms[2].monitor_masked_stretch = true;
        system.vms = Vec::leak(vms);
        assert_eq!(
            readable(&system, 2),
            [0, 1, 2, 3, 4],
            "a monitor reads every pCPU"
        );
        assert_eq!(
            readable(&system, 0),
            [] as [u32; 0],
            "and nobody else gains"
        );
        assert_eq!(readable(&system, 1), [2, 3]);
        // The monitor resets the records of pCPUs 0, 1 and 4 (nobody's alone) but not VM 1's.
        let resettable = |vm| -> Vec<u32> {
            (0..5)
                .filter(|&pcpu| system.may_reset_masked_record(vm, pcpu))
                .collect()
        };
        assert_eq!(
            resettable(2),
            [0, 1, 4],
            "never another partition's own record"
        );
        assert_eq!(resettable(1), [2, 3]);
        assert_eq!(resettable(0), [] as [u32; 0]);
    }

    #[test]
    fn channels_are_found_by_member_and_are_never_a_vms_memory() {
        static MEMBERS: [ChannelMember; 2] = [
            ChannelMember {
                vm: 1,
                ipa: GuestPhysAddr(0x7000_0000),
                writable: true,
            },
            ChannelMember {
                vm: 0,
                ipa: GuestPhysAddr(0x6000_0000),
                writable: false,
            },
        ];
        let system = SystemDesc {
            board: crate::board::QEMU_VIRT,
            name: "channels",
            ram_base: PhysAddr(0x4000_0000),
            ram_size: 0x4000_0000,
            pcpus: 3,
            policies: &[],
            switch_cost_ns: 0,
            iommu: None,
            vms: Vec::leak(vec![
                test_vm(0, 0x5000_0000, 1),
                test_vm(1, 0x5100_0000, 1),
                test_vm(2, 0x5200_0000, 1),
            ]),
            channels: Vec::leak(vec![ChannelDesc {
                name: "telemetry",
                phys: PhysAddr(0x5f00_0000),
                size: 0x1_0000,
                intid: 48,
                members: &MEMBERS,
            }]),
        };
        let channel = &system.channels[0];
        assert_eq!(channel.position_of(0), Some(1));
        assert_eq!(channel.position_of(1), Some(0));
        assert_eq!(channel.position_of(2), None);
        let of = |vm| -> Vec<(u64, bool)> {
            system
                .channels_of(vm)
                .map(|(channel, member)| {
                    (
                        channel.window(member).translate(member.ipa).unwrap().0,
                        member.writable,
                    )
                })
                .collect()
        };
        assert_eq!(of(0), [(0x5f00_0000, false)]);
        assert_eq!(of(1), [(0x5f00_0000, true)]);
        assert_eq!(of(2), []);
        // Keel's guest-memory accessor looks in the VM's own regions only: a window is not one.
        let reader = &system.vms[0];
        assert_eq!(reader.region_of(GuestPhysAddr(0x6000_0000), 4), None);
        assert_eq!(system.vms[1].region_of(GuestPhysAddr(0x7000_0000), 4), None);
        assert!(reader.region_of(GuestPhysAddr(0x4000_0000), 4).is_some());
    }
}
