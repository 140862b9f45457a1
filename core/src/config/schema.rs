//! The TOML file exactly as written: serde structures, before any resolution or checking.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::duration::DurationText;
use super::frequency::FrequencyText;
use super::percent::PercentText;
use super::size::ByteSize;

/// A whole configuration file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The `[system]` table.
    pub system: SystemTable,
    /// The `[[vm]]` tables, in file order (a VM's index is its id).
    #[serde(default)]
    pub vm: Vec<VmTable>,
    /// The `[[pcpu]]` tables: a scheduling policy for each shared pCPU (unlisted: pinned).
    #[serde(default)]
    pub pcpu: Vec<PcpuTable>,
    /// The `[[channel]]` tables: shared memory between VMs (a channel's index is its id).
    #[serde(default)]
    pub channel: Vec<ChannelTable>,
}

/// One `[[channel]]` table: memory shared by VMs, with a doorbell interrupt.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelTable {
    /// The channel's name.
    pub name: String,
    /// Its physical backing.
    pub memory: RegionTable,
    /// The doorbell INTID raised at the members: an SGI or an SPI (an integer of any width, so
    /// the range check can name the channel).
    pub interrupt: i64,
    /// The member VMs and how each sees the memory.
    pub vms: Vec<ChannelMemberTable>,
}

/// One member of a channel: `{ vm = "...", ipa = ..., access = "rw" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelMemberTable {
    /// The VM's name.
    pub vm: String,
    /// Where the VM sees the channel's memory.
    pub ipa: u64,
    /// `"rw"` or `"ro"` (checked later, so the message names the channel and the VM).
    pub access: String,
}

/// The `[system]` table: the board and what Keel keeps for itself.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemTable {
    /// Name of the configuration.
    pub name: String,
    /// The board: a name [`crate::board::BOARDS`] lists (default `"qemu-virt"`).
    pub board: Option<String>,
    /// The board's RAM.
    pub ram: RegionTable,
    /// Memory reserved for Keel.
    pub hypervisor: RegionTable,
    /// Number of pCPUs: ids `0..pcpus`.
    pub pcpus: u32,
    /// Keel's cost of one vCPU switch, charged twice per job by admission (default 2 µs).
    pub switch_cost: Option<DurationText>,
    /// The IOMMU Keel drives in front of the board's DMA masters: `"smmuv3"` (default: none,
    /// and no DMA-capable device may be given to a VM).
    pub iommu: Option<String>,
    /// Keel's trace: `{ size = "256K" }`, each pCPU's ring (default: no trace, and no cost).
    pub trace: Option<TraceTable>,
    /// The last-level cache's geometry, for colouring VMs' memory (default: as the board's
    /// device tree describes it).
    pub llc: Option<LlcTable>,
    /// The colours of Keel's own image, data and stacks, as a VM's `colours` (default: not
    /// coloured, every colour).
    pub hypervisor_colours: Option<String>,
}

/// The `[system] llc` table: `{ size = "1M", ways = 16, line = 64 }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlcTable {
    /// Total bytes.
    pub size: ByteSize,
    /// Ways (associativity).
    pub ways: u32,
    /// Bytes of a line.
    pub line: u32,
}

/// The `[system] trace` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceTable {
    /// Bytes of each pCPU's ring of records: a power of two.
    pub size: ByteSize,
}

/// One `[[pcpu]]` table: how a pCPU is shared.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcpuTable {
    /// The pCPU.
    pub id: u32,
    /// `"pinned"`, `"fixed-priority"`, `"edf"` or `"round-robin"` (checked later, so the
    /// message names the pCPU).
    pub policy: String,
    /// Time slice among vCPUs that share by round robin (default 1 ms; not for `pinned`).
    pub quantum: Option<DurationText>,
}

/// One vCPU's entry in a VM's `schedule`: none of period, budget and deadline is best effort.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VcpuScheduleTable {
    /// Fixed priority, 0..=255, higher first (an integer of any width, so the range check can
    /// name the vCPU).
    pub priority: Option<i64>,
    /// Release period of the reservation.
    pub period: Option<DurationText>,
    /// Budget per period.
    pub budget: Option<DurationText>,
    /// Relative deadline (default: the period).
    pub deadline: Option<DurationText>,
}

/// A VM's `tasks` table: what it may do with real-time tasks at run time.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksTable {
    /// Most tasks at once, 1..=[`MAX_TASKS_PER_VM`](crate::system::MAX_TASKS_PER_VM) (an
    /// integer of any width, so the range check can name the VM).
    pub max: i64,
    /// Most utilisation its tasks may take on any one of its pCPUs, a percentage.
    pub utilisation: PercentText,
    /// Names of the other VMs that may also launch, delete and read the statistics of its tasks.
    #[serde(default)]
    pub managers: Vec<String>,
}

/// A VM's `messages` table: the queues other VMs (or its own vCPUs) send to it through.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessagesTable {
    /// Most messages each of its vCPUs and tasks can hold queued,
    /// 1..=[`MAX_QUEUE_DEPTH`](crate::system::MAX_QUEUE_DEPTH) (an integer of any width, so the
    /// range check can name the VM).
    pub depth: i64,
    /// Largest message in bytes, 1..=[`MAX_MESSAGE`](crate::ipc::MAX_MESSAGE).
    pub size: i64,
    /// The INTID raised at the receiving vCPU when a message is queued: an SGI or an SPI.
    pub interrupt: i64,
    /// Names of the VMs that may send to it (the VM itself included if listed).
    pub from: Vec<String>,
}

/// A VM's `virtio_console` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VirtioConsoleTable {
    /// The VM at the other end of the port.
    pub peer: String,
}

/// A VM's `console` table: `{ raw = true }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleTable {
    /// Its output reaches the terminal unescaped while it has the input focus (default: false).
    #[serde(default)]
    pub raw: bool,
}

/// `{ base = ..., size = ... }`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionTable {
    /// First address.
    pub base: u64,
    /// Size in bytes.
    pub size: ByteSize,
}

/// One `[[vm]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmTable {
    /// The VM's name.
    pub name: String,
    /// Where its kernel comes from.
    pub image: ImageTable,
    /// Its initial RAM disk, if any.
    pub initrd: Option<ImageTable>,
    /// Its physical backing memory.
    pub memory: RegionTable,
    /// Guest-physical base of that memory (default [`super::DEFAULT_IPA`]).
    pub ipa: Option<u64>,
    /// The last-level cache's colours its memory is made of, as Xen's `llc-colors`: `"0-3,8"`
    /// (default: not coloured, every colour).
    pub colours: Option<String>,
    /// Whether no other VM may use any of its colours (default: false).
    #[serde(default)]
    pub colours_exclusive: bool,
    /// Physical backing of a flash bank at IPA 0 that the image boots from (firmware VMs).
    pub flash: Option<RegionTable>,
    /// vCPU `i` runs on pCPU `pcpus[i]`.
    pub pcpus: Vec<u32>,
    /// vCPU `i`'s scheduling parameters are `schedule[i]` (default: none, best effort).
    pub schedule: Option<Vec<VcpuScheduleTable>>,
    /// Real-time tasks the VM may create at run time (default: none).
    pub tasks: Option<TasksTable>,
    /// Message queues other VMs may send to (default: none).
    pub messages: Option<MessagesTable>,
    /// A virtio console whose port is backed by messages with another VM (default: none).
    pub virtio_console: Option<VirtioConsoleTable>,
    /// Emulated devices by name.
    #[serde(default)]
    pub devices: Vec<String>,
    /// How its emulated console (`"console"` in `devices`) is shown (default: escaped).
    pub console: Option<ConsoleTable>,
    /// The board's devices it is given (`[[vm.passthrough]]`), each by its path in the board's
    /// device tree.
    #[serde(default)]
    pub passthrough: Vec<PassthroughTable>,
    /// Kernel command line (`/chosen/bootargs`).
    #[serde(default)]
    pub cmdline: String,
    /// WFI policy: `"native"` or `"trap"` (checked later, so the message names the VM).
    pub wfi: Option<String>,
    /// Whether the VM owns its pCPUs' PMU (counters passed through; default: hidden). On a
    /// shared pCPU each of its vCPUs has a PMU of its own, switched with it.
    #[serde(default)]
    pub pmu: bool,
    /// Whether the VM may read every pCPU's interrupts-masked record (default: only those of
    /// the pCPUs it alone uses).
    #[serde(default)]
    pub monitor_masked_stretch: bool,
    /// Whether the VM may copy Keel's trace rings into its memory (KEEL_TRACE_READ; default:
    /// no). The trace shows every VM's exits and interrupts: a manager the integrator trusts.
    #[serde(default)]
    pub trace_reader: bool,
    /// Its health monitoring: the action on each event, its watchdog, its miss threshold, its
    /// restart limit and its managers (default: faults and power-off stop it, its own reset
    /// restarts it).
    pub health: Option<HealthTable>,
}

/// A `[vm.health]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthTable {
    /// On a fault (stage-2 fault, forbidden access, crash report, refused DMA): `"stop"`
    /// (default) or `"restart"`.
    pub fault: Option<ActionText>,
    /// On the VM's own power-off: `"stop"` (default) or `"restart"`.
    pub power_off: Option<ActionText>,
    /// On the VM's own reset: `"restart"` (default) or `"stop"`.
    pub reset: Option<ActionText>,
    /// Its watchdog: KEEL_WATCHDOG's period, or its emulated SP805 (`devices`), and the action.
    pub watchdog: Option<WatchdogTable>,
    /// A threshold of deadline misses and budget overruns over a window, and the action.
    pub misses: Option<MissesTable>,
    /// At most `max` restarts (by policy) within `window`; then it is stopped.
    pub restarts: Option<RestartsTable>,
    /// Names of the VMs that may start, stop, restart and read this VM, and receive its health
    /// notices as messages.
    #[serde(default)]
    pub managers: Vec<String>,
}

/// An action's name, checked later so that the message names the VM and the field.
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub struct ActionText(pub String);

/// `watchdog = { period = "500ms", action = "restart" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchdogTable {
    /// KEEL_WATCHDOG's period (optional with the emulated SP805, which the guest programs).
    pub period: Option<DurationText>,
    /// `"restart"`, `"stop"` or `"ignore"` (a line and a notice only).
    pub action: ActionText,
}

/// `misses = { count = 3, window = "1s", action = "restart" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MissesTable {
    /// Misses and overruns, 1..=16 (an integer of any width, so the range check names the VM).
    pub count: i64,
    /// Within this long.
    pub window: DurationText,
    /// `"restart"`, `"stop"` or `"ignore"`.
    pub action: ActionText,
}

/// `restarts = { max = 3, window = "10s" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartsTable {
    /// Most restarts within the window, 1..=16.
    pub max: i64,
    /// The window.
    pub window: DurationText,
}

/// One `[[vm.passthrough]]` table: `{ path = "/pl031@9010000" }`, optionally with `ipa`,
/// `clocks` and `unisolated_dma`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassthroughTable {
    /// The device's node in the board's device tree, as Xen's `xen,path`: directly under the
    /// root, or under `simple-bus` nodes.
    pub path: String,
    /// Where the VM sees its first register region (the others keep their offsets from it);
    /// default: where the board has it.
    pub ipa: Option<u64>,
    /// The rate of each of the device's clocks the VM's tree cannot copy from the board (one
    /// that is not a `fixed-clock`), by its `clock-names` name: `{ pclk = "100MHz" }`.
    #[serde(default)]
    pub clocks: BTreeMap<String, FrequencyText>,
    /// The VM accepts that the device masters DMA with no SMMU Keel drives in front of it, and
    /// can read and write all of physical memory (default: such a device is refused). The VM
    /// must be mapped 1:1.
    #[serde(default)]
    pub unisolated_dma: bool,
}

/// `image = { guest = "..." }` or `image = { file = "..." }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageTable {
    /// A guest of this workspace, built by xtask.
    pub guest: Option<String>,
    /// A file, relative to the configuration file's directory.
    pub file: Option<String>,
    /// A Debian arm64 kernel flavour or firmware package, fetched and built by xtask.
    pub debian: Option<String>,
}
