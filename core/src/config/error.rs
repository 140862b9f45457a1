//! Why a configuration was rejected: one variant per rule, each with its exact message.

use std::fmt;
use std::path::{Path, PathBuf};

use super::colour_problem::ColourProblem;
use super::duration::{format_duration, DurationError};
use super::passthrough_problem::PassthroughProblem;
use super::percent::PercentError;
use super::unschedulable::Unschedulable;

/// A rejected configuration. Displays as `<config path>: <message>`, or as
/// `<config path>:<line>:<column>: <message>` when the TOML itself is at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    path: PathBuf,
    kind: Box<ConfigErrorKind>,
}

impl ConfigError {
    /// Wraps `kind` with the path of the configuration file it came from.
    pub fn new(path: &Path, kind: ConfigErrorKind) -> Self {
        Self {
            path: path.to_path_buf(),
            kind: Box::new(kind),
        }
    }

    /// The configuration file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What is wrong with it.
    pub fn kind(&self) -> &ConfigErrorKind {
        &self.kind
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.kind {
            ConfigErrorKind::Toml {
                position: Some((line, column)),
                message,
            } => write!(f, "{}:{line}:{column}: {message}", self.path.display()),
            kind => write!(f, "{}: {kind}", self.path.display()),
        }
    }
}

impl std::error::Error for ConfigError {}

/// What is wrong with a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigErrorKind {
    /// `cannot read: <error>`: the configuration file itself could not be read.
    Read(String),
    /// `<message>` from the TOML parser, at `position` (1-based line and column) when known:
    /// a syntax error, an unknown field, a missing field or a value of the wrong type.
    Toml {
        /// 1-based line and column of the offending text.
        position: Option<(usize, usize)>,
        /// The parser's message.
        message: String,
    },
    /// `no [[vm]] table: a system needs at least one VM`.
    NoVms,
    /// `<count> [[vm]] tables exceed Keel's maximum of <max> VMs`.
    TooManyVms {
        /// Number of `[[vm]]` tables.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// `<subject>: <field>: <problem>`: a value breaks a rule.
    Invalid {
        /// The table the value is in.
        subject: Subject,
        /// The field, as spelled in the TOML.
        field: &'static str,
        /// The broken rule.
        problem: Problem,
    },
    /// `<count> [[channel]] tables exceed Keel's maximum of <max> channels`.
    TooManyChannels {
        /// Number of `[[channel]]` tables.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// `pCPU <pcpu>: <problem>`: the reservations on a shared pCPU cannot all be guaranteed.
    Unschedulable {
        /// The pCPU.
        pcpu: u32,
        /// Why admission refuses them.
        problem: Unschedulable,
    },
}

impl fmt::Display for ConfigErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read(error) => write!(f, "cannot read: {error}"),
            Self::Toml { message, .. } => f.write_str(message),
            Self::NoVms => f.write_str("no [[vm]] table: a system needs at least one VM"),
            Self::TooManyVms { count, max } => write!(
                f,
                "{count} [[vm]] tables exceed Keel's maximum of {max} VMs"
            ),
            Self::TooManyChannels { count, max } => write!(
                f,
                "{count} [[channel]] tables exceed Keel's maximum of {max} channels"
            ),
            Self::Invalid {
                subject,
                field,
                problem,
            } => write!(f, "{subject}: {field}: {problem}"),
            Self::Unschedulable { pcpu, problem } => write!(f, "pCPU {pcpu}: {problem}"),
        }
    }
}

/// The table a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// `system`: the `[system]` table.
    System,
    /// `vm '<name>'`: a `[[vm]]` table.
    Vm(String),
    /// `vm #<index>`: a `[[vm]]` table without a usable name (0-based index in the file).
    UnnamedVm(usize),
    /// `vm '<name>' vCPU <index>`: one vCPU's entry in its VM's `schedule`.
    Vcpu(VcpuName),
    /// `pCPU <id>`: a `[[pcpu]]` table.
    Pcpu(u32),
    /// `[[pcpu]] #<index>`: a `[[pcpu]]` table whose id names no pCPU (0-based index in the file).
    PcpuTable(usize),
    /// `channel '<name>'`: a `[[channel]]` table.
    Channel(String),
    /// `channel #<index>`: a `[[channel]]` table without a usable name (0-based index in the
    /// file).
    UnnamedChannel(usize),
    /// `channel '<channel>' vm '<vm>'`: one member's entry in a channel's `vms` (the names
    /// boxed, so that every rule's error stays small).
    ChannelMember {
        /// The channel's name.
        channel: Box<str>,
        /// The member VM's name.
        vm: Box<str>,
    },
}

/// A vCPU as messages name it: `vm '<vm>' vCPU <vcpu>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VcpuName {
    /// Its VM's name.
    pub vm: String,
    /// Its index in the VM.
    pub vcpu: usize,
}

impl fmt::Display for VcpuName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vm '{}' vCPU {}", self.vm, self.vcpu)
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::System => f.write_str("system"),
            Self::Vm(name) => write!(f, "vm '{name}'"),
            Self::UnnamedVm(index) => write!(f, "vm #{index}"),
            Self::Vcpu(vcpu) => write!(f, "{vcpu}"),
            Self::Pcpu(pcpu) => write!(f, "pCPU {pcpu}"),
            Self::PcpuTable(index) => write!(f, "[[pcpu]] #{index}"),
            Self::Channel(name) => write!(f, "channel '{name}'"),
            Self::UnnamedChannel(index) => write!(f, "channel #{index}"),
            Self::ChannelMember { channel, vm } => write!(f, "channel '{channel}' vm '{vm}'"),
        }
    }
}

/// A half-open address range, displayed as `0x50000000..0x51000000`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressRange {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
}

impl AddressRange {
    /// `[base, base + size)`; `None` if it wraps past the end of the 64-bit space.
    pub fn new(base: u64, size: u64) -> Option<Self> {
        Some(Self {
            start: base,
            end: base.checked_add(size)?,
        })
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.end - self.start
    }

    /// Whether the two ranges share at least one address.
    pub fn overlaps(&self, other: &AddressRange) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// Whether `other` lies wholly inside `self`.
    pub fn contains(&self, other: &AddressRange) -> bool {
        self.start <= other.start && other.end <= self.end
    }
}

impl fmt::Display for AddressRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}..{:#x}", self.start, self.end)
    }
}

/// Which physical range of a VM: shown as `memory` or `flash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// Its RAM.
    Memory,
    /// Its flash.
    Flash,
}

impl fmt::Display for Backing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Memory => "memory",
            Self::Flash => "flash",
        })
    }
}

/// A broken rule; the doc comment of each variant is its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// `must not be empty`.
    EmptyName,
    /// `base <base> is not 2 MiB aligned: Keel's image is linked at base + 2 MiB, where the
    /// loader puts an arm64 Image`.
    HypervisorUnaligned {
        /// The region's base.
        base: u64,
    },
    /// `unknown board '<value>' (Keel knows <known>)`.
    UnknownBoard {
        /// The value given.
        value: String,
    },
    /// `<board>: <why>` (its device tree lacks or contradicts what the system needs).
    Board {
        /// The board's name.
        board: &'static str,
        /// What is wrong.
        why: String,
    },
    /// `used by two VMs (#<first> and #<second>)`.
    DuplicateName {
        /// Index of the first VM with the name.
        first: usize,
        /// Index of the second.
        second: usize,
    },
    /// `size is zero`.
    SizeZero,
    /// `<what> <value> is not 4 KiB aligned`.
    Unaligned {
        /// `base`, `size` or `address`.
        what: &'static str,
        /// The offending value.
        value: u64,
    },
    /// `<base> + <size> wraps past the end of the 64-bit address space`.
    Wraps {
        /// First address.
        base: u64,
        /// Size in bytes.
        size: u64,
    },
    /// `size <size> is below the minimum of <minimum> (4 MiB)`.
    MemoryTooSmall {
        /// The VM's memory size.
        size: u64,
        /// The minimum.
        minimum: u64,
    },
    /// `<range> is outside RAM <ram>`.
    OutsideRam {
        /// The offending range.
        range: AddressRange,
        /// The board's RAM.
        ram: AddressRange,
    },
    /// `<range> overlaps the hypervisor region <hypervisor>`.
    OverlapsHypervisor {
        /// The VM's memory (the span of its colours' frames, if coloured) or flash, or a
        /// channel's memory.
        range: AddressRange,
        /// Keel's region.
        hypervisor: AddressRange,
    },
    /// `<range> overlaps vm '<other>' <other_what> <other_range>`.
    OverlapsVm {
        /// This VM's memory (the span of its colours' frames, if coloured) or flash, or a
        /// channel's memory.
        range: AddressRange,
        /// The VM declared earlier (or this VM, for its flash against its memory; any VM, for
        /// a channel's memory).
        other: String,
        /// Which of its ranges.
        other_what: Backing,
        /// Its range (a span, for a coloured VM's memory).
        other_range: AddressRange,
    },
    /// `size <size> is larger than the <window>-byte flash window at IPA 0`.
    FlashTooLarge {
        /// The flash size asked for.
        size: u64,
        /// The window's size.
        window: u64,
    },
    /// `guest memory <range> overlaps the flash window <flash> at IPA 0`.
    OverlapsFlash {
        /// The VM's guest-physical memory.
        range: AddressRange,
        /// The flash, guest-physical.
        flash: AddressRange,
    },
    /// `<size> bytes do not fit the <flash>-byte flash the image boots from`.
    ImageDoesNotFitFlash {
        /// The image's footprint.
        size: u64,
        /// The flash size.
        flash: u64,
    },
    /// `a VM that boots firmware from flash takes no initrd (its firmware loads one)`.
    InitrdWithFlash,
    /// `size <size> leaves no room for Keel's image, which loads at base + <offset in MiB> MiB`.
    HypervisorTooSmall {
        /// The hypervisor region's size.
        size: u64,
        /// Offset of Keel's image in the region.
        offset: u64,
    },
    /// `must be at least 1`.
    NoPcpus,
    /// `<count> pCPUs exceed Keel's maximum of <max>`.
    TooManyPcpus {
        /// `system.pcpus`.
        count: u32,
        /// The limit.
        max: u32,
    },
    /// `must not be empty: a VM needs at least one vCPU`.
    NoVcpus,
    /// `<count> vCPUs exceed Keel's maximum of <max> per VM`.
    TooManyVcpus {
        /// Length of the VM's pcpus list.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// `pCPU <pcpu> does not exist (system.pcpus = <count>)`.
    PcpuOutOfRange {
        /// The pCPU id.
        pcpu: u32,
        /// `system.pcpus`.
        count: u32,
    },
    /// `pCPU <pcpu> is listed twice, but it is pinned (one vCPU only): a [[pcpu]] policy lets
    /// vCPUs share it`.
    PcpuListedTwice {
        /// The pCPU id.
        pcpu: u32,
    },
    /// `pCPU <pcpu> is already claimed by vm '<other>', and it is pinned (one vCPU only): a
    /// [[pcpu]] policy lets vCPUs share it`.
    PcpuClaimed {
        /// The pCPU id.
        pcpu: u32,
        /// The VM declared earlier that has it.
        other: String,
    },
    /// `<size> bytes do not fit between the image's end <image_end> and the device tree at <dtb_ipa>`.
    InitrdDoesNotFit {
        /// Size of the initrd.
        size: u64,
        /// End of the image (guest-physical).
        image_end: u64,
        /// The device tree's address.
        dtb_ipa: u64,
    },
    /// `no Debian kernel flavour or firmware '<flavour>' could be provided (known: ...)`.
    UnknownDebianFlavour {
        /// The name given.
        flavour: String,
    },
    /// `give exactly one of 'guest', 'file' or 'debian', not several`.
    ImageBothSources,
    /// `give exactly one of 'guest', 'file' or 'debian'`.
    ImageNoSource,
    /// `no workspace guest named '<guest>'`.
    UnknownGuest {
        /// The name given.
        guest: String,
    },
    /// `guest '<guest>' has no built image at '<path>' (build it first)`.
    GuestImageNotBuilt {
        /// The guest's name.
        guest: String,
        /// Where its image should be.
        path: PathBuf,
    },
    /// `file '<path>' not found`.
    FileNotFound {
        /// The path, resolved against the configuration file's directory.
        path: PathBuf,
    },
    /// `cannot read '<path>': <error>`.
    ImageUnreadable {
        /// The image.
        path: PathBuf,
        /// The I/O error.
        error: String,
    },
    /// `'<path>' is empty`.
    ImageEmpty {
        /// The image.
        path: PathBuf,
    },
    /// `a Linux Image loads text_offset above a 2 MiB aligned base, but ipa <ipa> is not 2 MiB aligned`.
    LinuxImageMisaligned {
        /// The VM's ipa.
        ipa: u64,
    },
    /// `<size> bytes loaded at <image> do not fit below the device tree at <dtb_ipa>`.
    ImageDoesNotFit {
        /// Where the image would be loaded (guest-physical).
        image: AddressRange,
        /// Where the device tree goes.
        dtb_ipa: u64,
    },
    /// `<what> <range> overlaps the emulated device window <window> (GIC, PL011, virtio)`.
    OverlapsDeviceWindow {
        /// `guest memory` (a VM's) or `window` (a channel member's).
        what: &'static str,
        /// The guest-physical range.
        range: AddressRange,
        /// The emulated devices' window.
        window: AddressRange,
    },
    /// `<what> <range> extends past the <bits>-bit guest-physical address space`.
    BeyondIpaSpace {
        /// `guest memory` (a VM's) or `window` (a channel member's).
        what: &'static str,
        /// The guest-physical range.
        range: AddressRange,
        /// Width of the stage-2 input address.
        bits: u32,
    },
    /// `unknown device '<device>' (known devices: 'console')`.
    UnknownDevice {
        /// The name given.
        device: String,
        /// The names Keel knows.
        known: &'static [&'static str],
    },
    /// `'<device>' is listed twice`.
    DuplicateDevice {
        /// The name given.
        device: String,
    },
    /// `a console table needs the emulated console: add "console" to devices`.
    ConsoleTableWithoutConsole,
    /// `vm '<other>' is raw already: one VM of a system at most may have a raw console (it
    /// takes the terminal while it has the input focus)`.
    SecondRawConsole {
        /// The VM whose console is raw, earlier in the file.
        other: String,
    },
    /// `unknown policy '<value>' (expected 'native' or 'trap')`.
    UnknownWfiPolicy {
        /// The value given.
        value: String,
    },
    /// `contains a NUL character`.
    NulInCmdline,
    /// The duration's own message (see [`DurationError`]).
    BadDuration(DurationError),
    /// `listed in two [[pcpu]] tables`.
    PcpuTableTwice,
    /// `unknown policy '<value>' (expected 'pinned', 'fixed-priority', 'edf' or 'round-robin')`.
    UnknownSchedulingPolicy {
        /// The value given.
        value: String,
    },
    /// `must be above 0`.
    Zero,
    /// `a pinned pCPU has one vCPU and no time slice`.
    QuantumOnPinned,
    /// `<count> entries for <vcpus> vCPUs: give one per vCPU, in vCPU order` (singular for 1).
    ScheduleCount {
        /// Entries in `schedule`.
        count: usize,
        /// Length of `pcpus`.
        vcpus: usize,
    },
    /// `<value> is outside 0..=255`.
    PriorityOutOfRange {
        /// The value given.
        value: i64,
    },
    /// `pCPU <pcpu> is <policy>, which takes no scheduling parameters`, with `policy` one of
    /// `pinned (its one vCPU runs whenever it is ready)` or `shared by round robin`.
    ParameterNotAllowed {
        /// The vCPU's pCPU.
        pcpu: u32,
        /// `pinned ...` or `shared by round robin`.
        policy: &'static str,
    },
    /// `"native" needs pinned pCPUs: pCPU <pcpu> is shared, where Keel traps WFI to give the
    /// pCPU to another vCPU`.
    NativeWfiOnSharedPcpu {
        /// The shared pCPU.
        pcpu: u32,
    },
    /// `pCPU <pcpu> is scheduled by EDF, which takes no priority (a period and budget make a
    /// reservation)`.
    PriorityOnEdf {
        /// The vCPU's pCPU.
        pcpu: u32,
    },
    /// `missing: a period of <period> needs a budget`.
    PeriodWithoutBudget {
        /// The period given.
        period: u64,
    },
    /// `missing: a budget of <budget> needs a period`.
    BudgetWithoutPeriod {
        /// The budget given.
        budget: u64,
    },
    /// `missing: a deadline of <deadline> needs a period and a budget`.
    DeadlineWithoutPeriod {
        /// The deadline given.
        deadline: u64,
    },
    /// `<value> is above the <limit_name> <limit>`: a budget above the period or the deadline,
    /// a deadline above the period.
    Above {
        /// The value given.
        value: u64,
        /// `period` or `deadline`.
        limit_name: &'static str,
        /// The limit.
        limit: u64,
    },
    /// `<priority> is also the priority of <other> on fixed-priority pCPU <pcpu>: vCPUs with a
    /// reservation need distinct priorities`.
    PriorityShared {
        /// The vCPU declared earlier with the same priority and a reservation.
        other: VcpuName,
        /// The priority.
        priority: u8,
        /// The pCPU.
        pcpu: u32,
    },
    /// `<priority> does not rank above best-effort <other> (priority <other_priority>) on
    /// fixed-priority pCPU <pcpu>, so its budget cannot be guaranteed`.
    ReservationBelowBestEffort {
        /// This vCPU's priority.
        priority: u8,
        /// The best-effort vCPU at or above it.
        other: VcpuName,
        /// Its priority.
        other_priority: u8,
        /// The pCPU.
        pcpu: u32,
    },
    /// `pCPU <pcpu> is <policy>, but tasks are vCPUs with reservations: every pCPU of a VM with
    /// tasks must be 'edf' or 'fixed-priority'`, with `policy` one of `pinned (its one vCPU
    /// runs whenever it is ready)` or `shared by round robin`.
    TasksOnPcpu {
        /// The VM's first pCPU that takes no reservations.
        pcpu: u32,
        /// `pinned ...` or `shared by round robin`.
        policy: &'static str,
    },
    /// `<value> is outside 1..=<max>`.
    MaxTasksOutOfRange {
        /// The value given.
        value: i64,
        /// [`MAX_TASKS_PER_VM`](crate::system::MAX_TASKS_PER_VM).
        max: usize,
    },
    /// `<vcpus> vCPUs and <tasks> tasks make <vcpus + tasks> vCPUs, above Keel's maximum of
    /// <max> per VM (each task runs as a vCPU of the VM)` (singular for 1).
    TasksExceedVcpus {
        /// `tasks.max`.
        tasks: u8,
        /// Length of the VM's pcpus list.
        vcpus: usize,
        /// [`MAX_VCPUS`](crate::system::MAX_VCPUS).
        max: usize,
    },
    /// The percentage's own message (see [`PercentError`]).
    BadPercent(PercentError),
    /// `no VM is named '<name>'`.
    UnknownVm {
        /// The name given.
        name: String,
    },
    /// `'<name>' is this VM, which always manages its own tasks: list the other VMs that may`.
    ManagerIsItself {
        /// The VM's own name.
        name: String,
    },
    /// `'<name>' is this VM: a virtio console's peer is another VM`.
    VirtioPeerIsItself {
        /// The VM's own name.
        name: String,
    },
    /// `the console's input comes as messages from '<peer>': this VM's messages.from must list
    /// it`.
    VirtioInputNotAllowed {
        /// The peer's name.
        peer: String,
    },
    /// `the console's output goes as messages to '<peer>', whose messages table must list this
    /// VM in its from`.
    VirtioOutputNotAllowed {
        /// The peer's name.
        peer: String,
    },
    /// `<intid> is the virtio console's interrupt: give another SGI (0..=15) or SPI (32..=127)`.
    InterruptIsVirtio {
        /// The INTID given.
        intid: u32,
    },
    /// `'<name>' is listed twice`: a VM named twice in `tasks.managers` or `messages.from`.
    VmListedTwice {
        /// The name given.
        name: String,
    },
    /// `<value> is outside 1..=<max>`.
    QueueDepthOutOfRange {
        /// The value given.
        value: i64,
        /// [`MAX_QUEUE_DEPTH`](crate::system::MAX_QUEUE_DEPTH).
        max: usize,
    },
    /// `<value> is outside 1..=<max> bytes`.
    MessageSizeOutOfRange {
        /// The value given.
        value: i64,
        /// [`MAX_MESSAGE`](crate::ipc::MAX_MESSAGE).
        max: usize,
    },
    /// `<intid> is a PPI (16..=31), which Keel keeps for the timers and the GIC maintenance
    /// interrupt: give an SGI (0..=15) or an SPI (32..=127)`.
    MessageInterruptIsPpi {
        /// The INTID given.
        intid: i64,
    },
    /// `<intid> is no interrupt Keel's vGIC implements: give an SGI (0..=15) or an SPI
    /// (32..=127)`.
    MessageInterruptOutOfRange {
        /// The INTID given.
        intid: i64,
    },
    /// `<intid> is the console's interrupt (the PL011's SPI): give another SGI (0..=15) or SPI
    /// (32..=127)`.
    MessageInterruptIsConsole {
        /// The INTID given ([`UART_INTID`](crate::abi::layout::UART_INTID)).
        intid: u32,
    },
    /// `must name at least one VM: with no sender, its queues would stay empty`.
    NoSenders,
    /// `the message queues take <total> bytes in all, above Keel's <max>`.
    MessagePoolTooLarge {
        /// Bytes of every queue's ring, up to and including this VM's.
        total: usize,
        /// [`MAX_MESSAGE_POOL`](crate::system::MAX_MESSAGE_POOL).
        max: usize,
    },
    /// `<size> bytes is not a power of two between <min> and <max>`.
    TraceRingSize {
        /// The size given.
        size: u64,
        /// [`MIN_RING_BYTES`](crate::trace::MIN_RING_BYTES).
        min: u64,
        /// [`MAX_RING_BYTES`](crate::trace::MAX_RING_BYTES).
        max: u64,
    },
    /// `the trace rings take <total> bytes (<pcpus> pCPUs, each ring with its 64-byte
    /// header), above half of Keel's region (<half>)`.
    TraceRingsTooLarge {
        /// Bytes of every ring.
        total: u64,
        /// `system.pcpus`.
        pcpus: u32,
        /// Half of `system.hypervisor`'s size.
        half: u64,
    },
    /// `"<given>" is not an action here: give <allowed>`.
    BadAction {
        /// The text given.
        given: String,
        /// The actions this field takes, spelled out.
        allowed: &'static str,
    },
    /// `the emulated watchdog needs [vm.health] watchdog = { action = ... }: what its expiry does`.
    WatchdogDeviceWithoutAction,
    /// `needs a period (KEEL_WATCHDOG's) unless the VM has the emulated watchdog (devices = ["watchdog"])`.
    WatchdogWithoutPeriod,
    /// `<value> is outside 1..=<max>`: a miss count or restart limit.
    HealthCountOutOfRange {
        /// The value given.
        value: i64,
        /// [`MAX_COUNT`](crate::health::MAX_COUNT).
        max: usize,
    },
    /// `'<name>' is this VM: a VM's manager is another VM`.
    HealthManagerIsItself {
        /// The VM's own name.
        name: String,
    },
    /// `manages '<managed>', whose health notices come as messages of <size> bytes: give it a
    /// messages table whose size is at least <size>`.
    ManagerWithoutMessages {
        /// The VM it manages.
        managed: String,
        /// [`Notice::LEN`](crate::health::Notice::LEN).
        size: usize,
    },
    /// `manages '<managed>', whose health notices come as messages to its vCPU 0, which its
    /// virtio console takes as input: a manager has no virtio console`.
    ManagerHasVirtioConsole {
        /// The VM it manages.
        managed: String,
    },
    /// `used by two channels (#<first> and #<second>)`.
    DuplicateChannelName {
        /// Index of the first channel with the name.
        first: usize,
        /// Index of the second.
        second: usize,
    },
    /// `'<name>' is not a device-tree node name (a letter, then letters, digits or , . _ + -;
    /// at most 31 characters): the VMs' device trees describe the channel under it`.
    ChannelNameNotANodeName {
        /// The name given.
        name: String,
    },
    /// `<range> overlaps channel '<other>' memory <other_range>`.
    OverlapsChannel {
        /// This channel's memory.
        range: AddressRange,
        /// The channel declared earlier.
        other: String,
        /// Its memory.
        other_range: AddressRange,
    },
    /// `names <count> VM(s): a channel joins at least two` (singular for 1).
    TooFewMembers {
        /// Entries in `vms`.
        count: usize,
    },
    /// `unknown access '<value>' (expected 'rw' or 'ro')`.
    UnknownAccess {
        /// The value given.
        value: String,
    },
    /// `window <range> overlaps its <what> <other_range>`: a member's view of a channel over
    /// the VM's own guest memory or flash.
    WindowOverlapsOwn {
        /// The window, guest-physical.
        range: AddressRange,
        /// The VM's memory or flash.
        what: Backing,
        /// That range, guest-physical.
        other_range: AddressRange,
    },
    /// `window <range> overlaps its window <other_range> of channel '<other>'`.
    WindowOverlapsChannel {
        /// The window, guest-physical.
        range: AddressRange,
        /// The channel declared earlier that the VM also sees.
        other: String,
        /// The VM's window of it.
        other_range: AddressRange,
    },
    /// `window <range> overlaps the registers of '<path>' at <other_range>`: a device given to
    /// the member.
    WindowOverlapsDevice {
        /// The window, guest-physical.
        range: AddressRange,
        /// The device's path.
        path: String,
        /// Its registers, guest-physical.
        other_range: AddressRange,
    },
    /// `<intid> is the console's interrupt (the PL011's SPI) in member vm '<vm>': give another
    /// SGI (0..=15) or SPI (32..=127)`.
    ChannelInterruptIsConsole {
        /// The INTID given ([`UART_INTID`](crate::abi::layout::UART_INTID)).
        intid: u32,
        /// The member with the console.
        vm: String,
    },
    /// `<intid> is the message interrupt of member vm '<vm>': give another SGI (0..=15) or SPI
    /// (32..=127)`.
    ChannelInterruptIsMessages {
        /// The INTID given.
        intid: u32,
        /// The member whose `messages.interrupt` it is.
        vm: String,
    },
    /// `<intid> is the interrupt of '<path>', given to member vm '<vm>': give another SGI
    /// (0..=15) or SPI (32..=127)`.
    ChannelInterruptIsDevice {
        /// The INTID given.
        intid: u32,
        /// The member given the device.
        vm: String,
        /// The device's path.
        path: String,
    },
    /// A `[[vm.passthrough]]` rule (see [`PassthroughProblem`]; boxed, so that every rule's
    /// error stays small).
    Passthrough(Box<PassthroughProblem>),
    /// A rule of the last-level cache's geometry or of a VM's colours (see [`ColourProblem`];
    /// boxed, so that every rule's error stays small).
    Colour(Box<ColourProblem>),
}

/// How a pinned pCPU's refusal tells the reader to share it.
const SHARE_HINT: &str = "a [[pcpu]] policy lets vCPUs share it";

/// The interrupts a `messages.interrupt` may be: the SGIs, and the SPIs below
/// [`NR_IRQS`](crate::devices::vgic::NR_IRQS) (GICv3 spec, 2.2 "INTIDs").
const INTERRUPT_HINT: &str = "give an SGI (0..=15) or an SPI (32..=127)";

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyName => f.write_str("must not be empty"),
            Self::DuplicateName { first, second } => {
                write!(f, "used by two VMs (#{first} and #{second})")
            }
            Self::SizeZero => f.write_str("size is zero"),
            Self::Unaligned { what, value } => write!(f, "{what} {value:#x} is not 4 KiB aligned"),
            Self::Wraps { base, size } => write!(
                f,
                "{base:#x} + {size:#x} wraps past the end of the 64-bit address space"
            ),
            Self::MemoryTooSmall { size, minimum } => write!(
                f,
                "size {size:#x} is below the minimum of {minimum:#x} ({} MiB)",
                minimum >> 20
            ),
            Self::HypervisorUnaligned { base } => write!(
                f,
                "base {base:#x} is not 2 MiB aligned: Keel's image is linked at base + 2 MiB, \
                 where the loader puts an arm64 Image"
            ),
            Self::UnknownBoard { value } => {
                let known: Vec<&str> = crate::board::BOARDS.iter().map(|b| b.name).collect();
                write!(
                    f,
                    "unknown board '{value}' (Keel knows {})",
                    known.join(", ")
                )
            }
            Self::Board { board, why } => write!(f, "{board}: {why}"),
            Self::OutsideRam { range, ram } => write!(f, "{range} is outside RAM {ram}"),
            Self::OverlapsHypervisor { range, hypervisor } => {
                write!(f, "{range} overlaps the hypervisor region {hypervisor}")
            }
            Self::OverlapsVm {
                range,
                other,
                other_what,
                other_range,
            } => write!(
                f,
                "{range} overlaps vm '{other}' {other_what} {other_range}"
            ),
            Self::FlashTooLarge { size, window } => write!(
                f,
                "size {size:#x} is larger than the {window:#x}-byte flash window at IPA 0"
            ),
            Self::OverlapsFlash { range, flash } => write!(
                f,
                "guest memory {range} overlaps the flash window {flash} at IPA 0"
            ),
            Self::ImageDoesNotFitFlash { size, flash } => write!(
                f,
                "{size:#x} bytes do not fit the {flash:#x}-byte flash the image boots from"
            ),
            Self::InitrdWithFlash => f.write_str(
                "a VM that boots firmware from flash takes no initrd (its firmware loads one)",
            ),
            Self::HypervisorTooSmall { size, offset } => write!(
                f,
                "size {size:#x} leaves no room for Keel's image, which loads at base + {} MiB",
                offset >> 20
            ),
            Self::NoPcpus => f.write_str("must be at least 1"),
            Self::TooManyPcpus { count, max } => {
                write!(f, "{count} pCPUs exceed Keel's maximum of {max}")
            }
            Self::NoVcpus => f.write_str("must not be empty: a VM needs at least one vCPU"),
            Self::TooManyVcpus { count, max } => {
                write!(f, "{count} vCPUs exceed Keel's maximum of {max} per VM")
            }
            Self::PcpuOutOfRange { pcpu, count } => {
                write!(f, "pCPU {pcpu} does not exist (system.pcpus = {count})")
            }
            Self::PcpuListedTwice { pcpu } => write!(
                f,
                "pCPU {pcpu} is listed twice, but it is pinned (one vCPU only): {SHARE_HINT}"
            ),
            Self::PcpuClaimed { pcpu, other } => write!(
                f,
                "pCPU {pcpu} is already claimed by vm '{other}', and it is pinned \
                 (one vCPU only): {SHARE_HINT}"
            ),
            Self::InitrdDoesNotFit {
                size,
                image_end,
                dtb_ipa,
            } => write!(
                f,
                "{size:#x} bytes do not fit between the image's end {image_end:#x} \
                 and the device tree at {dtb_ipa:#x}"
            ),
            Self::UnknownDebianFlavour { flavour } => write!(
                f,
                "no Debian kernel flavour or firmware '{flavour}' could be provided \
                 (known: cloud-arm64, arm64, rt-arm64, u-boot-qemu)"
            ),
            Self::ImageBothSources => {
                f.write_str("give exactly one of 'guest', 'file' or 'debian', not several")
            }
            Self::ImageNoSource => f.write_str("give exactly one of 'guest', 'file' or 'debian'"),
            Self::UnknownGuest { guest } => write!(f, "no workspace guest named '{guest}'"),
            Self::GuestImageNotBuilt { guest, path } => write!(
                f,
                "guest '{guest}' has no built image at '{}' (build it first)",
                path.display()
            ),
            Self::FileNotFound { path } => write!(f, "file '{}' not found", path.display()),
            Self::ImageUnreadable { path, error } => {
                write!(f, "cannot read '{}': {error}", path.display())
            }
            Self::ImageEmpty { path } => write!(f, "'{}' is empty", path.display()),
            Self::LinuxImageMisaligned { ipa } => write!(
                f,
                "a Linux Image loads text_offset above a 2 MiB aligned base, \
                 but ipa {ipa:#x} is not 2 MiB aligned"
            ),
            Self::ImageDoesNotFit { image, dtb_ipa } => write!(
                f,
                "{:#x} bytes loaded at {image} do not fit below the device tree at {dtb_ipa:#x}",
                image.size()
            ),
            Self::OverlapsDeviceWindow {
                what,
                range,
                window,
            } => write!(
                f,
                "{what} {range} overlaps the emulated device window {window} ({})",
                if window.start == super::model::HEALTH_WINDOW.0 {
                    "SP805, management window"
                } else {
                    "GIC, PL011, virtio"
                }
            ),
            Self::BeyondIpaSpace { what, range, bits } => write!(
                f,
                "{what} {range} extends past the {bits}-bit guest-physical address space"
            ),
            Self::UnknownDevice { device, known } => {
                let known: Vec<String> = known.iter().map(|name| format!("'{name}'")).collect();
                write!(
                    f,
                    "unknown device '{device}' (known devices: {})",
                    known.join(", ")
                )
            }
            Self::DuplicateDevice { device } => write!(f, "'{device}' is listed twice"),
            Self::ConsoleTableWithoutConsole => f.write_str(
                "a console table needs the emulated console: add \"console\" to devices",
            ),
            Self::SecondRawConsole { other } => write!(
                f,
                "vm '{other}' is raw already: one VM of a system at most may have a raw console \
                 (it takes the terminal while it has the input focus)"
            ),
            Self::UnknownWfiPolicy { value } => {
                write!(f, "unknown policy '{value}' (expected 'native' or 'trap')")
            }
            Self::NulInCmdline => f.write_str("contains a NUL character"),
            Self::BadDuration(error) => write!(f, "{error}"),
            Self::PcpuTableTwice => f.write_str("listed in two [[pcpu]] tables"),
            Self::UnknownSchedulingPolicy { value } => write!(
                f,
                "unknown policy '{value}' (expected 'pinned', 'fixed-priority', 'edf' or \
                 'round-robin')"
            ),
            Self::Zero => f.write_str("must be above 0"),
            Self::QuantumOnPinned => f.write_str("a pinned pCPU has one vCPU and no time slice"),
            Self::ScheduleCount { count, vcpus } => {
                let entries = if *count == 1 { "entry" } else { "entries" };
                let plural = if *vcpus == 1 { "" } else { "s" };
                write!(
                    f,
                    "{count} {entries} for {vcpus} vCPU{plural}: give one per vCPU, in vCPU order"
                )
            }
            Self::PriorityOutOfRange { value } => write!(f, "{value} is outside 0..=255"),
            Self::ParameterNotAllowed { pcpu, policy } => write!(
                f,
                "pCPU {pcpu} is {policy}, which takes no scheduling parameters"
            ),
            Self::NativeWfiOnSharedPcpu { pcpu } => write!(
                f,
                "\"native\" needs pinned pCPUs: pCPU {pcpu} is shared, where Keel traps WFI \
                 to give the pCPU to another vCPU"
            ),
            Self::PriorityOnEdf { pcpu } => write!(
                f,
                "pCPU {pcpu} is scheduled by EDF, which takes no priority \
                 (a period and budget make a reservation)"
            ),
            Self::PeriodWithoutBudget { period } => write!(
                f,
                "missing: a period of {} needs a budget",
                format_duration(*period)
            ),
            Self::BudgetWithoutPeriod { budget } => write!(
                f,
                "missing: a budget of {} needs a period",
                format_duration(*budget)
            ),
            Self::DeadlineWithoutPeriod { deadline } => write!(
                f,
                "missing: a deadline of {} needs a period and a budget",
                format_duration(*deadline)
            ),
            Self::Above {
                value,
                limit_name,
                limit,
            } => write!(
                f,
                "{} is above the {limit_name} {}",
                format_duration(*value),
                format_duration(*limit)
            ),
            Self::PriorityShared {
                other,
                priority,
                pcpu,
            } => write!(
                f,
                "{priority} is also the priority of {other} on fixed-priority pCPU {pcpu}: \
                 vCPUs with a reservation need distinct priorities"
            ),
            Self::ReservationBelowBestEffort {
                priority,
                other,
                other_priority,
                pcpu,
            } => write!(
                f,
                "{priority} does not rank above best-effort {other} (priority {other_priority}) \
                 on fixed-priority pCPU {pcpu}, so its budget cannot be guaranteed"
            ),
            Self::TasksOnPcpu { pcpu, policy } => write!(
                f,
                "pCPU {pcpu} is {policy}, but tasks are vCPUs with reservations: every pCPU of \
                 a VM with tasks must be 'edf' or 'fixed-priority'"
            ),
            Self::MaxTasksOutOfRange { value, max } => write!(f, "{value} is outside 1..={max}"),
            Self::TasksExceedVcpus { tasks, vcpus, max } => {
                let tasks_plural = if *tasks == 1 { "" } else { "s" };
                let vcpus_plural = if *vcpus == 1 { "" } else { "s" };
                write!(
                    f,
                    "{vcpus} vCPU{vcpus_plural} and {tasks} task{tasks_plural} make {} vCPUs, \
                     above Keel's maximum of {max} per VM (each task runs as a vCPU of the VM)",
                    vcpus + usize::from(*tasks)
                )
            }
            Self::BadPercent(error) => write!(f, "{error}"),
            Self::UnknownVm { name } => write!(f, "no VM is named '{name}'"),
            Self::ManagerIsItself { name } => write!(
                f,
                "'{name}' is this VM, which always manages its own tasks: list the other VMs \
                 that may"
            ),
            Self::VmListedTwice { name } => write!(f, "'{name}' is listed twice"),
            Self::VirtioPeerIsItself { name } => {
                write!(
                    f,
                    "'{name}' is this VM: a virtio console's peer is another VM"
                )
            }
            Self::VirtioInputNotAllowed { peer } => write!(
                f,
                "the console's input comes as messages from '{peer}': this VM's messages.from \
                 must list it"
            ),
            Self::VirtioOutputNotAllowed { peer } => write!(
                f,
                "the console's output goes as messages to '{peer}', whose messages table must \
                 list this VM in its from"
            ),
            Self::InterruptIsVirtio { intid } => write!(
                f,
                "{intid} is the virtio console's interrupt: give another SGI (0..=15) or SPI \
                 (32..=127)"
            ),
            Self::QueueDepthOutOfRange { value, max } => write!(f, "{value} is outside 1..={max}"),
            Self::MessageSizeOutOfRange { value, max } => {
                write!(f, "{value} is outside 1..={max} bytes")
            }
            Self::MessageInterruptIsPpi { intid } => write!(
                f,
                "{intid} is a PPI (16..=31), which Keel keeps for the timers and the GIC \
                 maintenance interrupt: {INTERRUPT_HINT}"
            ),
            Self::MessageInterruptOutOfRange { intid } => write!(
                f,
                "{intid} is no interrupt Keel's vGIC implements: {INTERRUPT_HINT}"
            ),
            Self::MessageInterruptIsConsole { intid } => write!(
                f,
                "{intid} is the console's interrupt (the PL011's SPI): give another SGI \
                 (0..=15) or SPI (32..=127)"
            ),
            Self::NoSenders => f.write_str(
                "must name at least one VM (or the VM must manage one, in its \
                 `health.managers`): with no sender, its queues would stay empty",
            ),
            Self::MessagePoolTooLarge { total, max } => write!(
                f,
                "the message queues take {total} bytes in all, above Keel's {max}"
            ),
            Self::TraceRingSize { size, min, max } => write!(
                f,
                "{size} bytes is not a power of two between {min} and {max}"
            ),
            Self::TraceRingsTooLarge { total, pcpus, half } => write!(
                f,
                "the trace rings take {total} bytes ({pcpus} pCPUs, each ring with its 64-byte header), above half of Keel's region ({half})"
            ),
            Self::BadAction { given, allowed } => {
                write!(f, "\"{given}\" is not an action here: give {allowed}")
            }
            Self::WatchdogDeviceWithoutAction => f.write_str(
                "the emulated watchdog needs [vm.health] watchdog = { action = ... }: what its \
                 expiry does",
            ),
            Self::WatchdogWithoutPeriod => f.write_str(
                "needs a period (KEEL_WATCHDOG's) unless the VM has the emulated watchdog \
                 (devices = [\"watchdog\"])",
            ),
            Self::HealthCountOutOfRange { value, max } => {
                write!(f, "{value} is outside 1..={max}")
            }
            Self::HealthManagerIsItself { name } => {
                write!(f, "'{name}' is this VM: a VM's manager is another VM")
            }
            Self::ManagerWithoutMessages { managed, size } => write!(
                f,
                "manages '{managed}', whose health notices come as messages of {size} bytes: \
                 give it a messages table whose size is at least {size}"
            ),
            Self::ManagerHasVirtioConsole { managed } => write!(
                f,
                "manages '{managed}', whose health notices come as messages to its vCPU 0, \
                 which its virtio console takes as input: a manager has no virtio console"
            ),
            Self::DuplicateChannelName { first, second } => {
                write!(f, "used by two channels (#{first} and #{second})")
            }
            Self::ChannelNameNotANodeName { name } => write!(
                f,
                "'{name}' is not a device-tree node name (a letter, then letters, digits or \
                 , . _ + -; at most 31 characters): the VMs' device trees describe the channel \
                 under it"
            ),
            Self::OverlapsChannel {
                range,
                other,
                other_range,
            } => write!(f, "{range} overlaps channel '{other}' memory {other_range}"),
            Self::TooFewMembers { count } => {
                let plural = if *count == 1 { "" } else { "s" };
                write!(f, "names {count} VM{plural}: a channel joins at least two")
            }
            Self::UnknownAccess { value } => {
                write!(f, "unknown access '{value}' (expected 'rw' or 'ro')")
            }
            Self::WindowOverlapsOwn {
                range,
                what,
                other_range,
            } => write!(f, "window {range} overlaps its {what} {other_range}"),
            Self::WindowOverlapsChannel {
                range,
                other,
                other_range,
            } => write!(
                f,
                "window {range} overlaps its window {other_range} of channel '{other}'"
            ),
            Self::WindowOverlapsDevice {
                range,
                path,
                other_range,
            } => write!(
                f,
                "window {range} overlaps the registers of '{path}' at {other_range}"
            ),
            Self::ChannelInterruptIsConsole { intid, vm } => write!(
                f,
                "{intid} is the console's interrupt (the PL011's SPI) in member vm '{vm}': give \
                 another SGI (0..=15) or SPI (32..=127)"
            ),
            Self::ChannelInterruptIsMessages { intid, vm } => write!(
                f,
                "{intid} is the message interrupt of member vm '{vm}': give another SGI \
                 (0..=15) or SPI (32..=127)"
            ),
            Self::ChannelInterruptIsDevice { intid, vm, path } => write!(
                f,
                "{intid} is the interrupt of '{path}', given to member vm '{vm}': give another \
                 SGI (0..=15) or SPI (32..=127)"
            ),
            Self::Passthrough(problem) => write!(f, "{problem}"),
            Self::Colour(problem) => write!(f, "{problem}"),
        }
    }
}
