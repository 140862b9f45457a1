//! The validated system: what the configuration compiler hands to code generation and DTB generation.

use std::path::PathBuf;

use super::error::Backing;
use crate::abi::layout;
use crate::addr::{GuestPhysAddr, MemoryRegion, PhysAddr};
pub use crate::colour::{CacheGeometry, Colours};
use crate::sched::{Params, Policy};
use crate::system::WfiPolicy;

/// Guest-physical base of a VM's memory when `ipa` is not given: QEMU `virt`'s RAM base.
pub const DEFAULT_IPA: u64 = 0x4000_0000;
/// Granule every base and size must be aligned to (stage-2 pages).
pub const PAGE_SIZE: u64 = 4 << 10;
/// Smallest memory a VM may have.
pub const MIN_VM_MEMORY: u64 = 4 << 20;
/// Space reserved for the device tree at the top of each VM's memory (the Linux arm64 boot
/// protocol caps a DTB at 2 MiB).
pub const DTB_REGION_SIZE: u64 = 2 << 20;
/// Offset of Keel's own image in the hypervisor region.
pub const HYPERVISOR_IMAGE_OFFSET: u64 = 2 << 20;
/// Alignment of the base a Linux Image is loaded above (Linux `Documentation/arch/arm64/booting.rst`).
pub const LINUX_IMAGE_BASE_ALIGN: u64 = 2 << 20;
/// First guest-physical address of the emulated device window (GIC distributor).
pub const DEVICE_WINDOW_START: u64 = layout::GICD_BASE;
/// End of the emulated device window (exclusive): GIC, PL011 and virtio console lie below.
pub const DEVICE_WINDOW_END: u64 = 0x0A00_1000;
/// Keel's health devices (the SP805 and the management window), above QEMU `virt`'s
/// virtio-mmio: kept clear of guest memory in every VM, whether it has them or not.
pub const HEALTH_WINDOW: (u64, u64) = (
    layout::WATCHDOG_BASE,
    layout::MANAGER_BASE + layout::MANAGER_SIZE,
);
/// Width of guest-physical addresses Keel's stage 2 translates.
pub const IPA_BITS: u32 = crate::system::IPA_BITS;
/// Most VMs a system may have.
pub const MAX_VMS: usize = crate::system::MAX_VMS;
/// Most pCPUs a system may have (each has a policy in the tables; far above what boards give).
pub const MAX_PCPUS: u32 = 256;
/// Most vCPUs a VM may have.
pub const MAX_VCPUS: usize = crate::system::MAX_VCPUS;
/// Size of QEMU `virt`'s flash window at IPA 0 (two 64 MiB banks): the most a VM's flash covers.
pub const FLASH_WINDOW_SIZE: u64 = 0x0800_0000;
/// Phandle of the GIC in every VM's generated device tree (the interrupt parent of its devices).
pub const VM_GIC_PHANDLE: u32 = 1;
/// First phandle of the nodes inside a VM's assigned devices that the devices refer to (a
/// MAC's PHY): the VM's tree numbers its own nodes (GIC, fixed clocks) below it.
pub const VM_DEVICE_PHANDLE_BASE: u32 = 0x1000;
/// Device names a `[[vm]]` may list.
pub const KNOWN_DEVICES: &[&str] = &["console", "watchdog"];

/// A whole validated system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct System {
    /// Name of the configuration.
    pub name: String,
    /// The board it runs on (`[system] board`).
    pub board: &'static crate::board::BoardDesc,
    /// First physical address of the board's RAM.
    pub ram_base: u64,
    /// Size of the board's RAM.
    pub ram_size: u64,
    /// First physical address reserved for Keel.
    pub hypervisor_base: u64,
    /// Size of Keel's region.
    pub hypervisor_size: u64,
    /// Number of pCPUs (ids `0..pcpus`).
    pub pcpus: u32,
    /// pCPU `i`'s scheduling policy, from its `[[pcpu]]` table ([`Policy::Pinned`] when it has
    /// none); one per pCPU, quanta in nanoseconds (default
    /// [`DEFAULT_QUANTUM_NS`](super::DEFAULT_QUANTUM_NS)).
    pub policies: Vec<Policy>,
    /// Keel's cost of one vCPU switch in nanoseconds (`[system] switch_cost`, default
    /// [`DEFAULT_SWITCH_COST_NS`](super::DEFAULT_SWITCH_COST_NS)), charged twice per job by
    /// admission.
    pub switch_cost_ns: u64,
    /// The VMs; `vms[i].id == i`.
    pub vms: Vec<Vm>,
    /// The shared-memory channels, in file order (a channel's id is its index).
    pub channels: Vec<Channel>,
    /// The SMMU Keel drives (`[system] iommu`), found in the board's device tree.
    pub iommu: Option<Iommu>,
    /// Bytes of records in each pCPU's trace ring (`[system] trace`; 0: no trace).
    pub trace_bytes: u64,
    /// The last-level cache's geometry (`[system] llc`, or the board's device tree): `None` if
    /// neither gives one Keel can colour.
    pub llc: Option<CacheGeometry>,
    /// The colours of Keel's image, data and stacks (`[system] hypervisor_colours`), copied at
    /// boot to the frames [`keel_frames`](crate::colour::keel_frames) gives in the upper half
    /// of its region; [`Colours::NONE`] if Keel is not coloured.
    pub hypervisor_colours: Colours,
}

/// The board's SMMUv3 that Keel owns (mapped in no VM): every stream of a device given to a VM
/// translates with that VM's memory map, every other stream aborts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iommu {
    /// Its node in the board's device tree.
    pub path: String,
    /// Its registers (two 64 KiB pages).
    pub phys: u64,
    /// Their size.
    pub size: u64,
    /// Its event queue interrupt (an SPI).
    pub event_intid: u32,
    /// Its global error interrupt (an SPI).
    pub gerror_intid: u32,
}

/// A validated `[[channel]]` table, emitted as a [`ChannelDesc`](crate::system::ChannelDesc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channel {
    /// Name from the configuration (unique among channels).
    pub name: String,
    /// First physical address of its memory: in RAM, clear of Keel, of every VM's memory and
    /// flash, and of the other channels.
    pub phys: u64,
    /// Size in bytes (a multiple of 4 KiB).
    pub size: u64,
    /// The doorbell: an SGI (0..=15) or an SPI (32..=127), neither the console's interrupt of a
    /// member with the console nor the message interrupt of a member.
    pub intid: u32,
    /// At least two distinct VMs, in the order written.
    pub members: Vec<ChannelMember>,
}

/// One VM's view of a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelMember {
    /// The VM's id.
    pub vm: u8,
    /// Where it sees the memory: 4 KiB aligned, clear of its own memory and flash, of its other
    /// channels' windows and of the emulated device window.
    pub ipa: u64,
    /// `access = "rw"` (otherwise `"ro"`).
    pub writable: bool,
}

/// Where a VM's kernel image comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    /// A guest of this workspace, built by xtask.
    Guest(String),
    /// A file, as written in the configuration (relative to its directory).
    File(PathBuf),
    /// A Debian arm64 kernel flavour (`cloud-arm64`, `arm64`, `rt-arm64`), fetched and built by xtask.
    Debian(String),
}

/// One validated VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vm {
    /// Index in [`System::vms`]; also the VMID.
    pub id: u16,
    /// Name from the configuration.
    pub name: String,
    /// First physical address of the VM's memory (of its span, if it is coloured).
    pub phys: u64,
    /// Guest-physical address the memory appears at.
    pub ipa: u64,
    /// Memory size in bytes: the guest's RAM, `[ipa, ipa + size)`.
    pub size: u64,
    /// The last-level cache's colours its memory is backed by ([`crate::colour`]):
    /// [`Colours::NONE`] if it is not coloured (its memory is `[phys, phys + size)`). A
    /// coloured VM's guest page `i` is `colours.frame(phys, i)`, in `[phys, phys + span())`.
    pub colours: Colours,
    /// Whether no other VM uses any of its colours (`colours_exclusive`; an uncoloured VM uses
    /// all of them).
    pub colours_exclusive: bool,
    /// vCPU `i` runs on pCPU `pcpus[i]`: alone if that pCPU is pinned, else sharing it under
    /// its policy with the other vCPUs placed there.
    pub pcpus: Vec<u32>,
    /// vCPU `i`'s scheduling parameters, from `schedule[i]` (durations in nanoseconds): they
    /// fit its pCPU's policy ([`Params::default`], best effort, on a pinned or round-robin
    /// pCPU), and the reservations on each shared pCPU passed admission.
    pub sched: Vec<Params>,
    /// Real-time tasks it may create at run time, from its `tasks` table (`None`: none): every
    /// pCPU of the VM is scheduled by EDF or fixed priority, and the allowance passed admission
    /// on each.
    pub tasks: Option<Tasks>,
    /// Its incoming message queues, from its `messages` table (`None`: no VM may send to it):
    /// one per vCPU and per task it may have, all laid out in Keel's message pool.
    pub messages: Option<Messages>,
    /// The VM (by id) at the other end of its virtio console, from its `virtio_console` table:
    /// this VM's queues take messages from it, and its queues take messages from this VM.
    pub virtio_console: Option<u8>,
    /// Where the image came from.
    pub image: ImageSource,
    /// The image file: absolute, and it exists.
    pub image_path: PathBuf,
    /// Flash at IPA 0 that the image is loaded into and boots from, if the VM has one.
    pub flash: Option<Flash>,
    /// Guest-physical load address and entry point of the image.
    pub image_ipa: u64,
    /// Guest-physical address of the device tree: the last [`DTB_REGION_SIZE`] of memory, or
    /// the first byte of memory for a VM that boots from flash (QEMU `virt`'s firmware contract).
    pub dtb_ipa: u64,
    /// The initial RAM disk, if any.
    pub initrd: Option<Initrd>,
    /// Whether the VM has the emulated PL011 console.
    pub console: bool,
    /// Whether that console's output reaches the terminal unescaped while the VM has the input
    /// focus (`console = { raw = true }`; the input focus starts on it): one VM of a system at
    /// most.
    pub raw_console: bool,
    /// What the guest's WFI does.
    pub wfi: WfiPolicy,
    /// Whether the VM owns its pCPUs' PMU (otherwise the PMU is hidden and trapped).
    pub pmu: bool,
    /// Whether the VM may read and reset every pCPU's interrupts-masked record
    /// (KEEL_MASKED_STRETCH), not only those of the pCPUs it alone uses.
    pub monitor_masked_stretch: bool,
    /// Whether the VM may copy Keel's trace rings (KEEL_TRACE_READ).
    pub trace_reader: bool,
    /// Its health policy and managers.
    pub health: Health,
    /// Whether it has the emulated SP805 watchdog (`devices = ["watchdog"]`).
    pub watchdog_device: bool,
    /// Kernel command line, for `/chosen/bootargs`.
    pub cmdline: String,
    /// The board's devices it is given, in the order written.
    pub passthrough: Vec<Passthrough>,
}

/// A board device given to a VM (a `[[vm.passthrough]]` table), resolved against the board's
/// device tree: its registers mapped in the VM's stage 2 as device memory, its interrupts
/// forwarded in hardware, its node copied into the VM's device tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passthrough {
    /// Its path in the board's device tree (a node directly under the root, or under buses).
    pub path: String,
    /// Its register regions as stage 2 maps them: whole pages (a region smaller than its page
    /// is mapped with the rest of the page, which no other node's registers share), clear of
    /// RAM, physical (translated through the buses above the node), at the IPAs the VM sees
    /// them.
    pub regions: Vec<MemoryRegion>,
    /// Its interrupts: SPIs the VM alone receives, as the board numbers them (the VM sees the
    /// same INTIDs).
    pub interrupts: Vec<DeviceInterrupt>,
    /// The node for the VM's device tree.
    pub node: DeviceNode,
    /// The SMMU streams of its DMA (first and last stream ID of each range, within the
    /// [`MAX_STREAMS`](crate::system::MAX_STREAMS) Keel's stream table covers): empty for a
    /// device that masters no DMA, or whose DMA no SMMU Keel drives guards.
    pub streams: Vec<(u32, u32)>,
    /// Whether the configuration accepts that its DMA is not isolated (`unisolated_dma`): no
    /// SMMU Keel drives guards it, the VM is mapped 1:1, and the device can read and write all
    /// of physical memory.
    pub unisolated_dma: bool,
}

/// One interrupt of an assigned device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceInterrupt {
    /// Its INTID (an SPI: 32 and up).
    pub intid: u32,
    /// Level-sensitive (high); otherwise edge-triggered (rising).
    pub level: bool,
}

/// An assigned device's node as the VM's device tree describes it, at its top level: the
/// board's node, its properties copied except those that wire it into the board (phandles,
/// `interrupt-parent`, IOMMU and MSI maps, power domains, resets, pin control), `reg` moved to
/// the VM's IPAs, its clocks replaced by fixed clocks of the VM's tree, and its child nodes
/// (references between them renumbered from [`VM_DEVICE_PHANDLE_BASE`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceNode {
    /// The node's name: the device's `name@unit-address` (at the VM's IPA); a child's as the
    /// board names it.
    pub name: String,
    /// The properties to copy, name and raw value, in board order (a renumbered `phandle`
    /// last).
    pub properties: Vec<(String, Vec<u8>)>,
    /// The frequency of each entry of its `clocks`, in order (empty: no clocks): the VM's tree
    /// gets a `fixed-clock` of each frequency, and the node's `clocks` names them in this order
    /// (its `clock-names` is the board's).
    pub clocks: Vec<u32>,
    /// Its child nodes (a MAC's PHY), copied the same way; none has clocks.
    pub children: Vec<DeviceNode>,
}

/// A VM's validated `tasks` table, emitted as a [`TaskGrant`](crate::system::TaskGrant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tasks {
    /// Most tasks at once (1..=[`MAX_TASKS_PER_VM`](crate::system::MAX_TASKS_PER_VM), and
    /// with the VM's vCPUs at most [`MAX_VCPUS`]).
    pub max: u8,
    /// Most utilisation its tasks may take on any one of its pCPUs, parts per million
    /// (1..=1,000,000).
    pub utilisation_ppm: u32,
    /// The other VMs, by id, that may also launch, delete and read the statistics of its
    /// tasks, in the order written.
    pub managers: Vec<u8>,
}

/// A VM's validated `messages` table, emitted as a
/// [`MessageGrant`](crate::system::MessageGrant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Messages {
    /// Most messages one queue holds (1..=[`MAX_QUEUE_DEPTH`](crate::system::MAX_QUEUE_DEPTH)).
    pub depth: u16,
    /// Largest message in bytes (1..=[`MAX_MESSAGE`](crate::ipc::MAX_MESSAGE)).
    pub size: u16,
    /// The INTID raised at the receiving vCPU: an SGI (0..=15) or an SPI (32..=127) other than
    /// the console's.
    pub intid: u32,
    /// The VMs, by id, that may send to it, in the order written (itself included if listed).
    pub senders: Vec<u8>,
    /// Where its rings start in Keel's message pool: after the rings of every earlier VM.
    pub pool_offset: usize,
}

impl Messages {
    /// Bytes of one queue's ring.
    pub fn ring_len(&self) -> usize {
        crate::ipc::Queue::storage_len(usize::from(self.depth), usize::from(self.size))
    }
}

/// A flash bank at IPA 0: physically backed RAM the image is loaded into, the rest erased (0xff).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flash {
    /// First physical address backing it.
    pub phys: u64,
    /// Size in bytes (at most [`FLASH_WINDOW_SIZE`]).
    pub size: u64,
}

/// An initial RAM disk, placed just below the device tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Initrd {
    /// Where it came from.
    pub source: ImageSource,
    /// The file: absolute, and it exists.
    pub path: PathBuf,
    /// Guest-physical load address (4 KiB aligned).
    pub ipa: u64,
    /// Size in bytes.
    pub size: u64,
}

impl Vm {
    /// The VM's memory as the runtime tables describe it.
    pub fn memory_region(&self) -> MemoryRegion {
        MemoryRegion {
            ipa: GuestPhysAddr(self.ipa),
            phys: PhysAddr(self.phys),
            size: self.size,
        }
    }

    /// The VM's flash as the runtime tables describe it (at IPA 0).
    pub fn flash_region(&self) -> Option<MemoryRegion> {
        self.flash.map(|flash| MemoryRegion {
            ipa: GuestPhysAddr(0),
            phys: PhysAddr(flash.phys),
            size: flash.size,
        })
    }

    /// Bytes of the physical range its memory lies in, from [`Self::phys`]: its size, or the
    /// span of its colours' frames ([`Colours::span`]) if it is coloured.
    pub fn span(&self) -> u64 {
        if self.colours.is_coloured() {
            self.colours.span(self.size).unwrap_or(self.size)
        } else {
            self.size
        }
    }

    /// Every physical range the VM owns: its memory (the span of its colours' frames, if it
    /// is coloured), then its flash.
    pub fn backing(&self) -> impl Iterator<Item = (Backing, u64, u64)> + '_ {
        core::iter::once((Backing::Memory, self.phys, self.span())).chain(
            self.flash
                .map(|flash| (Backing::Flash, flash.phys, flash.size)),
        )
    }

    /// Number of vCPUs.
    pub fn vcpu_count(&self) -> usize {
        self.pcpus.len()
    }

    /// Number of message queues the VM needs if it receives messages: one per vCPU and one per
    /// task it may have at once.
    pub fn message_queue_count(&self) -> usize {
        self.vcpu_count()
            + self
                .tasks
                .as_ref()
                .map_or(0, |tasks| usize::from(tasks.max))
    }

    /// Bytes its message queues' rings take in Keel's message pool (0 without a `messages`
    /// table).
    pub fn message_pool_len(&self) -> usize {
        self.messages.as_ref().map_or(0, |messages| {
            self.message_queue_count() * messages.ring_len()
        })
    }
}

impl System {
    /// The channels VM `vm` is a member of, each with its view of it, in channel order.
    pub fn channels_of(&self, vm: u16) -> impl Iterator<Item = (&Channel, &ChannelMember)> {
        self.channels.iter().filter_map(move |channel| {
            let member = channel
                .members
                .iter()
                .find(|member| u16::from(member.vm) == vm)?;
            Some((channel, member))
        })
    }

    /// Bytes of Keel's message pool: every VM's rings, one VM after another in VM order.
    pub fn message_pool_len(&self) -> usize {
        self.vms.iter().map(Vm::message_pool_len).sum()
    }
}

/// A VM's `[vm.health]`: the policy (its `managers` empty: they are in [`Health::managers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// The actions, watchdog, threshold and limit.
    pub policy: crate::health::Policy,
    /// The VMs (by id) that manage it.
    pub managers: Vec<u8>,
}
