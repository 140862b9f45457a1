//! VMs at run time: their state, their device models, loading their images, and which
//! pCPU runs which vCPU.
//!
//! Ownership: each of a VM's device models (vGIC, PL011) sits behind a lock of its own,
//! taken by the pCPU running its vCPU (traps, through [`crate::devices`]), by pCPU 0 (console
//! input) and by senders raising its interrupts. Lock order: a device model other than the
//! vGIC, then the VM's vGIC (a model sets its interrupt's level under its own lock, so that a
//! level cannot be overtaken by an older one), then nothing (the console lock is never taken
//! while holding either).

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use keel_core::abi::layout;
use keel_core::addr::{GuestPhysAddr, VmId};
use keel_core::devices::{pl011::Pl011, vgic::Vgic};
use keel_core::ratelimit::DiagnosticKind;
use keel_core::seed;
use keel_core::stage2::MemoryKind;
use keel_core::system::VmDesc;
use spin::Once;

use crate::arch::cpu::{self, Mutex};
use crate::arch::{boot::MAX_CPUS, gic, stage2};
use crate::config::SYSTEM;
use crate::{keel_println, keel_println_limited};

/// Most VMs (as many as VMIDs Keel hands out from its stage-2 pool).
pub const MAX_VMS: usize = stage2::MAX_VMS;

/// Most vCPUs per VM.
pub const MAX_VCPUS: usize = keel_core::devices::vgic::MAX_VCPUS;

/// The SGI one pCPU sends another to make it look at its vCPUs again ([`kick_pcpu`]).
pub const KICK_SGI: u32 = 0;

/// A VM's life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum VmState {
    /// Its vCPUs run.
    Running = 0,
    /// It powered itself off (PSCI SYSTEM_OFF).
    Off = 1,
    /// Keel stopped it after a fault.
    Stopped = 2,
}

/// A vCPU's power state as PSCI sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum VcpuPower {
    /// Not running; CPU_ON may start it.
    Off = 0,
    /// Running.
    On = 1,
    /// CPU_ON accepted; the pCPU will start it.
    Pending = 2,
}

/// [`Vcpu::power`] while a CPU_ON is being recorded: reported as pending, taken by no one.
const CLAIMED: u8 = 3;

/// Per-vCPU start request and power state.
pub struct Vcpu {
    power: AtomicU8,
    entry: AtomicU64,
    context: AtomicU64,
}

/// A VM's run-time state.
pub struct Vm {
    state: AtomicU8,
    /// Bumped on each reset: a vCPU started in an older generation stops.
    generation: AtomicU32,
    /// The GIC distributor and redistributors, set up by [`build`] before any vCPU of the VM
    /// runs, like every device model.
    pub vgic: Mutex<Vgic>,
    /// The console UART.
    pub uart: Mutex<Pl011>,
    /// The virtio console, if the VM has one.
    pub virtio: Mutex<crate::virtio::Console>,
    /// Set while a vCPU of the VM reloads it ([`reset`]): no other vCPU of it starts, and a
    /// second SYSTEM_RESET meanwhile just stops its caller.
    resetting: AtomicBool,
    /// Bumped, under the device lock, by every guest write to the vGIC and every reset of it:
    /// the timer fast path ([`crate::irq`]) reuses what it listed only while this is unchanged.
    pub gic_writes: AtomicU32,
    stage2_root: AtomicU64,
    vcpus: [Vcpu; MAX_VCPUS],
    /// How far the reload of a reset has come (used by the resetting pCPU alone, while
    /// `resetting` is set).
    reload: Mutex<Reload>,
    /// Where each of [`seed::SEED_PROPERTIES`]'s values sits in the VM's device tree, found
    /// once by [`build`] (0: not there; no value sits in the blob's header): a reload patches
    /// them without parsing. Zero at first, so that the VM table stays in .bss.
    seed_offsets: [AtomicUsize; seed::SEED_PROPERTIES.len()],
}

impl Vm {
    const fn new() -> Self {
        Self {
            state: AtomicU8::new(VmState::Running as u8),
            generation: AtomicU32::new(0),
            // All-zero, so the VM table lives in .bss rather than in the image.
            vgic: Mutex::new(Vgic::EMPTY),
            uart: Mutex::new(Pl011::ZEROED),
            virtio: Mutex::new(crate::virtio::Console::new()),
            resetting: AtomicBool::new(false),
            gic_writes: AtomicU32::new(0),
            stage2_root: AtomicU64::new(0),
            vcpus: [const {
                Vcpu {
                    power: AtomicU8::new(0),
                    entry: AtomicU64::new(0),
                    context: AtomicU64::new(0),
                }
            }; MAX_VCPUS],
            reload: Mutex::new(Reload::START),
            seed_offsets: [const { AtomicUsize::new(0) }; seed::SEED_PROPERTIES.len()],
        }
    }

    /// The VM's state.
    pub fn state(&self) -> VmState {
        match self.state.load(Ordering::Acquire) {
            0 => VmState::Running,
            1 => VmState::Off,
            _ => VmState::Stopped,
        }
    }

    /// Current reset generation.
    pub fn generation(&self) -> u32 {
        self.generation.load(Ordering::Acquire)
    }

    /// Root of the VM's stage-2 tables.
    pub fn stage2_root(&self) -> u64 {
        self.stage2_root.load(Ordering::Relaxed)
    }

    /// A vCPU's PSCI power state.
    pub fn vcpu_power(&self, vcpu: usize) -> VcpuPower {
        match self.vcpus[vcpu].power.load(Ordering::Acquire) {
            1 => VcpuPower::On,
            2 | CLAIMED => VcpuPower::Pending,
            _ => VcpuPower::Off,
        }
    }

    /// Marks a vCPU on or off.
    pub fn set_vcpu_power(&self, vcpu: usize, power: VcpuPower) {
        self.vcpus[vcpu].power.store(power as u8, Ordering::Release);
    }

    /// Marks a running vCPU off; leaves an off or pending one as it is.
    pub fn power_off_if_on(&self, vcpu: usize) {
        let _ = self.vcpus[vcpu].power.compare_exchange(
            VcpuPower::On as u8,
            VcpuPower::Off as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Asks for `vcpu` to start at `entry` with `context` in x0 (PSCI CPU_ON).
    /// Fails if it is not off, and then changes nothing: the vCPU is first claimed (a state
    /// no one else acts on), then given its entry, then made pending, so a refused call can
    /// never overwrite the entry point of a start that is already pending.
    pub fn request_start(&self, vcpu: usize, entry: u64, context: u64) -> Result<(), VcpuPower> {
        let slot = &self.vcpus[vcpu];
        slot.power
            .compare_exchange(
                VcpuPower::Off as u8,
                CLAIMED,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .map_err(|now| {
                if now == VcpuPower::On as u8 {
                    VcpuPower::On
                } else {
                    VcpuPower::Pending
                }
            })?;
        slot.entry.store(entry, Ordering::Relaxed);
        slot.context.store(context, Ordering::Relaxed);
        slot.power
            .store(VcpuPower::Pending as u8, Ordering::Release);
        Ok(())
    }

    /// Called by a pCPU about to enter a vCPU of this VM, after setting its `in_guest`: false
    /// if the VM is being reset (the pCPU must not enter; see [`reset`]).
    pub fn may_enter(&self) -> bool {
        !self.resetting.load(Ordering::SeqCst)
    }

    /// Takes a pending start request: `(entry, context)`. None while the VM is being reset.
    pub fn take_start(&self, vcpu: usize) -> Option<(u64, u64)> {
        if self.resetting.load(Ordering::Acquire) {
            return None;
        }
        let slot = &self.vcpus[vcpu];
        slot.power
            .compare_exchange(
                VcpuPower::Pending as u8,
                VcpuPower::On as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .ok()
            .map(|_| {
                (
                    slot.entry.load(Ordering::Relaxed),
                    slot.context.load(Ordering::Relaxed),
                )
            })
    }
}

static VMS: [Vm; MAX_VMS] = [const { Vm::new() }; MAX_VMS];

/// The run-time state of VM `id`.
pub fn vm(id: usize) -> &'static Vm {
    &VMS[id]
}

/// The configuration of VM `id`.
pub fn desc(id: usize) -> &'static VmDesc {
    &SYSTEM.vms[id]
}

/// What runs on one pCPU.
pub struct PerCpu {
    /// MPIDR affinity.
    pub mpidr: AtomicU64,
    /// VM of the vCPU pinned here, or `usize::MAX`.
    pub vm: AtomicUsize,
    /// Index of that vCPU in its VM.
    pub vcpu: AtomicUsize,
    /// List registers holding an interrupt Keel put there (bit n = ICH_LR<n>_EL2).
    pub listed: AtomicU64,
    /// This pCPU's redistributor.
    pub redistributor: Once<gic::Redistributor>,
    /// The VM generation the vCPU here was started in.
    pub generation: AtomicU32,
    /// Whether this pCPU is shared by several vCPUs (its policy is not `pinned`).
    pub shared: AtomicBool,
    /// Whether the vCPU in `vm`/`vcpu` may be running guest code (entered and not yet
    /// parked or switched out): what a reset of its VM waits for to go false.
    pub in_guest: AtomicBool,
    /// The timer fast path's cache: the list register (plus one; 0: none) the running vCPU's
    /// virtual timer was last listed in (bits 0-7), and its VM's `gic_writes` then (32-63).
    pub timer_lr: AtomicU64,
    /// The value written to that list register.
    pub timer_lr_value: AtomicU64,
}

impl PerCpu {
    /// Forgets the timer fast path's list register: something else wrote the list registers.
    #[inline(always)]
    pub fn forget_timer_lr(&self) {
        self.timer_lr.store(0, Ordering::Relaxed);
    }
}

static CPUS: [PerCpu; MAX_CPUS] = [const {
    PerCpu {
        mpidr: AtomicU64::new(0),
        vm: AtomicUsize::new(usize::MAX),
        vcpu: AtomicUsize::new(0),
        listed: AtomicU64::new(0),
        redistributor: Once::new(),
        generation: AtomicU32::new(0),
        shared: AtomicBool::new(false),
        in_guest: AtomicBool::new(false),
        timer_lr: AtomicU64::new(0),
        timer_lr_value: AtomicU64::new(0),
    }
}; MAX_CPUS];

/// State of pCPU `index`.
pub fn percpu(index: usize) -> &'static PerCpu {
    &CPUS[index]
}

/// State of this pCPU.
#[inline(always)]
pub fn this_cpu() -> &'static PerCpu {
    &CPUS[cpu::index()]
}

/// Whether this pCPU is shared between vCPUs (its policy is not `pinned`).
#[inline(always)]
pub fn this_cpu_is_shared() -> bool {
    this_cpu().shared.load(Ordering::Relaxed)
}

/// The vCPU running on this pCPU (pinned here, or loaded on a shared pCPU): `(vm, vcpu)`.
#[inline(always)]
pub fn current() -> Option<(usize, usize)> {
    let cpu = this_cpu();
    let vm = cpu.vm.load(Ordering::Relaxed);
    (vm != usize::MAX).then(|| (vm, cpu.vcpu.load(Ordering::Relaxed)))
}

/// Why a pCPU must look at its vCPUs again (a shared pCPU's scheduler takes them: see
/// `sched::refresh`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Stale {
    /// A kick: an interrupt raised for one of its vCPUs, a start requested, a VM ended or
    /// reset.
    Kicked = 1,
    /// A waiting vCPU's virtual-timer deadline passed.
    TimerDue = 2,
}

/// Per pCPU, the [`Stale`] reasons since they were last taken (at boot: kicked, since the
/// first starts are pending).
static STALE: [AtomicU8; MAX_CPUS] = [const { AtomicU8::new(Stale::Kicked as u8) }; MAX_CPUS];

/// Something about this pCPU's switched-out vCPUs may have changed.
pub fn mark_stale(reason: Stale) {
    STALE[cpu::index()].fetch_or(reason as u8, Ordering::Relaxed);
}

/// Takes this pCPU's [`Stale`] reasons marked since the last take (bit = reason; 0: none).
pub fn take_stale() -> u8 {
    STALE[cpu::index()].swap(0, Ordering::Relaxed)
}

/// Records which vCPU runs where (from the configuration's pinning) and which pCPUs are
/// shared; a shared pCPU's vCPUs are placed by [`crate::sched::init`].
pub fn assign_pcpus() {
    for (index, policy) in SYSTEM.policies.iter().enumerate().take(MAX_CPUS) {
        CPUS[index]
            .shared
            .store(policy.is_shared(), Ordering::Relaxed);
    }
    for (vm_index, desc) in SYSTEM.vms.iter().enumerate() {
        for (vcpu, &pcpu) in desc.pcpus.iter().enumerate() {
            let cpu = &CPUS[pcpu as usize];
            if cpu.shared.load(Ordering::Relaxed) {
                continue;
            }
            cpu.vm.store(vm_index, Ordering::Relaxed);
            cpu.vcpu.store(vcpu, Ordering::Relaxed);
        }
    }
}

/// Why a VM could not be built.
#[derive(Clone, Copy, Debug)]
pub enum LoadError {
    /// Out of stage-2 table storage.
    NoTables,
    /// The stage-2 map was refused.
    Map(keel_core::stage2::Stage2Error),
}

impl core::fmt::Display for LoadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LoadError::NoTables => write!(f, "no stage-2 table storage left"),
            LoadError::Map(error) => write!(f, "{error}"),
        }
    }
}

/// Builds VM `id`'s stage-2 tables, loads its image and device tree, creates its devices.
pub fn build(id: usize) -> Result<(), LoadError> {
    let desc = desc(id);
    let mut tables = stage2::tables_for(id).ok_or(LoadError::NoTables)?;
    for region in desc.regions() {
        tables
            .map(region.ipa.0, region.phys.0, region.size, MemoryKind::Normal)
            .map_err(LoadError::Map)?;
    }
    // Its windows on the channels it is a member of: shared memory, never the VM's own (Keel's
    // accessor of guest memory, `guest_bytes`, does not reach them).
    for (channel, member) in SYSTEM.channels_of(id) {
        let window = channel.window(member);
        let kind = if member.writable {
            MemoryKind::Normal
        } else {
            MemoryKind::NormalReadOnly
        };
        tables
            .map(window.ipa.0, window.phys.0, window.size, kind)
            .map_err(LoadError::Map)?;
    }
    VMS[id]
        .stage2_root
        .store(tables.root_phys(), Ordering::Relaxed);
    for (n, property) in seed::SEED_PROPERTIES.iter().enumerate() {
        if let Ok(Some(offset)) = seed::seed_offset(desc.dtb, *property) {
            VMS[id].seed_offsets[n].store(offset, Ordering::Relaxed);
        }
    }
    load_images(desc, VMS[id].generation());
    reset_devices(id);
    if is_shared_pcpu(desc.pcpus[0]) {
        // A shared pCPU's run loop starts it like a CPU_ON (cannot fail: it is off).
        let _ = VMS[id].request_start(0, desc.image_ipa.0, desc.dtb_ipa.0);
    } else {
        VMS[id].set_vcpu_power(0, VcpuPower::On);
    }
    Ok(())
}

fn reset_devices(id: usize) {
    let desc = desc(id);
    // The SPIs its devices, its message queues and its channels' doorbells raise (an SGI
    // needs no owning).
    let console = desc.console.then_some(layout::UART_INTID);
    let virtio = desc.virtio_console.map(|_| layout::VIRTIO_INTID);
    let messages = desc.messages.map(|grant| grant.intid);
    let doorbells = SYSTEM.channels_of(id).map(|(channel, _)| channel.intid);
    let mut owned = [0; 3 + keel_core::system::MAX_CHANNELS];
    let mut count = 0;
    for intid in console
        .into_iter()
        .chain(virtio)
        .chain(messages)
        .chain(doorbells)
        .filter(|&intid| intid >= 32)
    {
        owned[count] = intid;
        count += 1;
    }
    // Lock order: the device models', then the vGIC's.
    let mut virtio = VMS[id].virtio.lock();
    let mut uart = VMS[id].uart.lock();
    let mut vgic = VMS[id].vgic.lock();
    *virtio = crate::virtio::Console::new();
    *uart = Pl011::new();
    *vgic = Vgic::new(desc.pcpus.len(), &owned[..count]);
    VMS[id].gic_writes.fetch_add(1, Ordering::Relaxed);
}

/// The VM's memory at `[ipa, ipa + len)` as a byte slice (to load it, or to copy a message
/// in or out); None if no region of the VM holds it whole: the one check every access of
/// Keel's to guest memory goes through.
pub fn guest_bytes(desc: &VmDesc, ipa: GuestPhysAddr, len: usize) -> Option<&'static mut [u8]> {
    let phys = desc.region_of(ipa, len as u64)?.translate(ipa)?;
    // SAFETY: the range lies inside one of the VM's own regions (checked above), which Keel
    // maps as normal memory and no other VM's stage 2 maps. Nothing of Keel's lives there. No
    // vCPU of the VM runs while it is (re)loaded; otherwise (messages) its vCPUs may write
    // the bytes meanwhile, which Keel copies in one pass and never interprets.
    Some(unsafe { core::slice::from_raw_parts_mut(phys.0 as *mut u8, len) })
}

/// Copies `bytes` into the VM's memory at `ipa` and cleans them to the point of coherency.
fn copy_into(desc: &VmDesc, ipa: GuestPhysAddr, bytes: &[u8]) {
    if let Some(destination) = guest_bytes(desc, ipa, bytes.len()) {
        cpu::copy_bytes(destination, bytes);
        cpu::clean_to_poc(destination.as_ptr() as usize, bytes.len());
    }
}

/// Bytes one load step copies or fills: about 1,300 instructions with the cache cleaning,
/// so that Keel serves interrupts (and a shared pCPU's scheduler runs) at least that often
/// while it (re)loads a VM, whatever the image's size.
const STEP_BYTES: usize = 4096;

/// What a (re)load of a VM does, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Say that the VM resets (a reset only).
    Announce,
    /// Erase the flash (all ones).
    Flash,
    /// Copy the kernel image.
    Image,
    /// Copy the device tree.
    DeviceTree,
    /// Give the device tree this boot's seed properties, one per step.
    Seeds(usize),
    /// Copy the initial RAM disk.
    Initrd,
    /// Fresh devices (a reset only: at boot [`build`] makes them).
    Devices,
    /// Say how the reload went (a reset only).
    Report,
    /// Complete.
    Done,
}

/// How far a VM's load has come: bounded steps ([`Reload::step`]).
#[derive(Clone, Copy, Debug)]
pub struct Reload {
    phase: Phase,
    /// A boot's load: no announcement, devices or report (the caller does those).
    boot: bool,
    offset: usize,
    /// Steps done, bytes copied or filled, and the counter when the first step began.
    steps: u64,
    bytes: u64,
    began: u64,
}

impl Reload {
    /// At the start of a boot's load.
    const BOOT: Reload = Reload {
        phase: Phase::Flash,
        boot: true,
        offset: 0,
        steps: 0,
        bytes: 0,
        began: 0,
    };

    /// At the start of a reset's reload.
    pub const START: Reload = Reload {
        phase: Phase::Announce,
        boot: false,
        offset: 0,
        steps: 0,
        bytes: 0,
        began: 0,
    };

    /// Does one step of loading VM `desc` for `generation` (at most [`STEP_BYTES`] copied or
    /// filled, or one seed property); returns whether the load is complete.
    fn step(&mut self, desc: &VmDesc, generation: u32) -> bool {
        if self.steps == 0 {
            self.began = crate::arch::timer::now();
        }
        self.steps += 1;
        let offset = self.offset;
        let phase_done = match self.phase {
            Phase::Announce => {
                keel_println_limited!(
                    DiagnosticKind::Reset,
                    desc.id.0 as usize,
                    "vm '{}' (id {}) resets",
                    desc.name,
                    desc.id.0
                );
                true
            }
            Phase::Flash => desc
                .flash
                .is_none_or(|flash| self.fill(desc, flash.ipa, flash.size as usize)),
            Phase::Image => self.copy(desc, desc.image_ipa, desc.image),
            Phase::DeviceTree => self.copy(desc, desc.dtb_ipa, desc.dtb),
            Phase::Seeds(n) => {
                seed_device_tree(desc, n, generation);
                true
            }
            Phase::Initrd => self.copy(desc, desc.initrd_ipa, desc.initrd),
            Phase::Devices => {
                reset_devices(desc.id.0 as usize);
                true
            }
            Phase::Report => {
                let micros = crate::arch::timer::ticks_to_ns(
                    crate::arch::timer::now().saturating_sub(self.began),
                ) / 1_000;
                keel_println_limited!(
                    DiagnosticKind::Reset,
                    desc.id.0 as usize,
                    "vm '{}' (id {}) reloaded: {} bytes in {} steps over {} us",
                    desc.name,
                    desc.id.0,
                    self.bytes,
                    self.steps,
                    micros
                );
                true
            }
            Phase::Done => true,
        };
        self.bytes += self.offset.saturating_sub(offset) as u64;
        if phase_done {
            self.phase = match self.phase {
                Phase::Flash => Phase::Image,
                Phase::Image => Phase::DeviceTree,
                Phase::DeviceTree => Phase::Seeds(0),
                Phase::Seeds(n) if n + 1 < seed::SEED_PROPERTIES.len() => Phase::Seeds(n + 1),
                Phase::Seeds(_) => Phase::Initrd,
                Phase::Initrd if self.boot => Phase::Done,
                Phase::Initrd => Phase::Devices,
                Phase::Devices => Phase::Report,
                Phase::Announce => Phase::Flash,
                Phase::Report | Phase::Done => Phase::Done,
            };
            self.offset = 0;
        }
        self.phase == Phase::Done
    }

    /// Copies the next chunk of `bytes` to `ipa`; whether all of it is copied.
    fn copy(&mut self, desc: &VmDesc, ipa: GuestPhysAddr, bytes: &[u8]) -> bool {
        let end = bytes.len().min(self.offset + STEP_BYTES);
        if let Some(chunk) = bytes.get(self.offset..end) {
            copy_into(desc, GuestPhysAddr(ipa.0 + self.offset as u64), chunk);
        }
        self.offset = end;
        end == bytes.len()
    }

    /// Fills the next chunk of `[ipa, ipa + size)` with 0xff; whether all of it is filled.
    fn fill(&mut self, desc: &VmDesc, ipa: GuestPhysAddr, size: usize) -> bool {
        let end = size.min(self.offset + STEP_BYTES);
        let at = GuestPhysAddr(ipa.0 + self.offset as u64);
        if let Some(bytes) = guest_bytes(desc, at, end - self.offset) {
            bytes.fill(0xff);
            cpu::clean_to_poc(bytes.as_ptr() as usize, bytes.len());
        }
        self.offset = end;
        end == size
    }
}

/// Loads VM `desc` whole (at boot: no guest runs yet, nothing to serve in between).
fn load_images(desc: &VmDesc, generation: u32) {
    let mut reload = Reload::BOOT;
    while !reload.step(desc, generation) {}
}

/// Gives the VM's copy of its device tree this boot's seed property number `n` of
/// [`seed::SEED_PROPERTIES`] (`/chosen/rng-seed` or `kaslr-seed`, see [`keel_core::seed`]):
/// without entropy Linux pays for it on every system call. Its place in the blob was found by
/// [`build`].
fn seed_device_tree(desc: &VmDesc, n: usize, generation: u32) {
    let (Some(property), Some(offset)) = (
        seed::SEED_PROPERTIES.get(n),
        VMS[desc.id.0 as usize].seed_offsets.get(n),
    ) else {
        return;
    };
    let offset = offset.load(Ordering::Relaxed);
    if offset == 0 {
        return;
    }
    let key = crate::platform::get().seed_key.as_ref();
    let patch = seed::patch_at(offset, *property, key, desc.id, generation);
    let ipa = GuestPhysAddr(desc.dtb_ipa.0 + patch.offset as u64);
    copy_into(desc, ipa, patch.bytes());
}

/// Stops VM `id` after a fault, with Keel's diagnostic line.
pub fn stop(id: usize, reason: core::fmt::Arguments<'_>) {
    let desc = desc(id);
    if VMS[id].state.swap(VmState::Stopped as u8, Ordering::AcqRel) == VmState::Running as u8 {
        keel_println!("vm '{}' (id {}) stopped: {}", desc.name, id, reason);
        after_vm_ended(id);
    }
}

/// VM `id` powered itself off.
pub fn power_off(id: usize) {
    if VMS[id].state.swap(VmState::Off as u8, Ordering::AcqRel) == VmState::Running as u8 {
        keel_println!("vm '{}' (id {}) powered off", desc(id).name, id);
        after_vm_ended(id);
    }
}

/// Begins restarting VM `id` from its pristine image (PSCI SYSTEM_RESET, from any of its
/// vCPUs): every vCPU stops (a newer generation), its tasks are forgotten, and once none of
/// them runs guest code any more (each parks at its next exit, the kick making that at once)
/// the reload may begin: [`reload_step`] until it says done, then [`reset_finish`]. Returns
/// false if a reset is already under way (the caller just parks).
pub fn reset_begin(id: usize) -> bool {
    let vm = &VMS[id];
    // SeqCst with `may_enter`: either a vCPU about to enter sees the flag, or this sees its
    // `in_guest` and waits for it.
    if vm.resetting.swap(true, Ordering::SeqCst) {
        return false;
    }
    let desc = desc(id);
    vm.generation.fetch_add(1, Ordering::AcqRel);
    for vcpu in 0..vcpu_count(desc) {
        vm.set_vcpu_power(vcpu, VcpuPower::Off);
    }
    crate::ipc::clear_vm(id);
    this_cpu().in_guest.store(false, Ordering::Release);
    kick_vm(id);
    wait_until_stopped(id);
    crate::sched::tasks::forget(id);
    *vm.reload.lock() = Reload::START;
    true
}

/// One bounded step of reloading VM `id` (being reset); returns whether the reload is
/// complete.
pub fn reload_step(id: usize) -> bool {
    let vm = &VMS[id];
    vm.reload.lock().step(desc(id), vm.generation())
}

/// Ends the reset of VM `id` once reloaded (its devices too): vCPU 0 pending to start at the
/// image's entry on its own pCPU (unless the VM ended meanwhile).
pub fn reset_finish(id: usize) {
    let vm = &VMS[id];
    let desc = desc(id);
    // A CPU_ON made by a vCPU of the old generation before it stopped is dropped.
    for vcpu in 0..vcpu_count(desc) {
        vm.set_vcpu_power(vcpu, VcpuPower::Off);
    }
    vm.resetting.store(false, Ordering::Release);
    if vm.state() == VmState::Running {
        // Cannot fail: every vCPU was just turned off.
        let _ = vm.request_start(0, desc.image_ipa.0, desc.dtb_ipa.0);
        kick_vcpu(id, 0);
    }
}

/// Reloads VM `id` (its reset begun) on a pinned pCPU, which has nothing else to run: the
/// steps run here, with the interrupts that arrive meanwhile served between two steps, then
/// the reset ends. The caller parks.
pub fn reload_here(id: usize) {
    crate::masked::at(keel_core::abi::MaskedSite::Reload);
    while !reload_step(id) {
        let _ = crate::irq::serve_between_steps(keel_core::abi::MaskedSite::Reload);
    }
    reset_finish(id);
}

/// Waits until no pCPU runs guest code of VM `id` (its vCPUs were kicked and stop at their
/// next exit, which the kick forces). No lock is held meanwhile.
fn wait_until_stopped(id: usize) {
    for cpu in CPUS.iter().take(SYSTEM.pcpus as usize) {
        while cpu.in_guest.load(Ordering::SeqCst) && cpu.vm.load(Ordering::Relaxed) == id {
            cpu::spin_wait();
        }
    }
}

fn after_vm_ended(id: usize) {
    crate::sched::tasks::forget(id);
    kick_vm(id);
    let all_ended = (0..SYSTEM.vms.len()).all(|vm| VMS[vm].state() != VmState::Running);
    if all_ended {
        keel_println!("all VMs have ended: powering off");
        crate::console::flush_before_power_off();
        crate::arch::psci::system_off();
    }
}

/// Interrupts every pCPU running a vCPU of VM `id` other than this one, so it re-evaluates
/// the VM's state and virtual interrupts.
pub fn kick_vm(id: usize) {
    for vcpu in 0..desc(id).pcpus.len() {
        kick_vcpu(id, vcpu);
    }
}

/// The VM's vCPUs: its configured ones, then as many as it may create tasks.
pub fn vcpu_count(desc: &VmDesc) -> usize {
    desc.vcpu_count()
}

/// Whether a vCPU of VM `id` runs on a shared pCPU.
pub fn shares_a_pcpu(id: usize) -> bool {
    desc(id).pcpus.iter().any(|&pcpu| is_shared_pcpu(pcpu))
}

fn is_shared_pcpu(pcpu: u32) -> bool {
    CPUS.get(pcpu as usize)
        .is_some_and(|cpu| cpu.shared.load(Ordering::Relaxed))
}

/// Interrupts the pCPU of vCPU `vcpu` of VM `id` so it looks at the vCPU again: a pinned
/// pCPU unless it is this one; a shared pCPU always (also this one: its scheduler may have
/// a vCPU to wake or start, and does that from the kick).
pub fn kick_vcpu(id: usize, vcpu: usize) {
    let Some(&pcpu) = desc(id).pcpus.get(vcpu) else {
        return;
    };
    if pcpu as usize != cpu::index() || is_shared_pcpu(pcpu) {
        kick_pcpu(pcpu as usize);
    }
}

/// Sends the kick SGI to pCPU `pcpu` (also this one: it is then taken at the next exit).
pub fn kick_pcpu(pcpu: usize) {
    if let Some(target) = CPUS.get(pcpu) {
        gic::send_sgi(KICK_SGI, target.mpidr.load(Ordering::Relaxed));
    }
}

/// The VM's identity as a hypercall answers it.
pub fn vm_id(id: usize) -> VmId {
    desc(id).id
}
