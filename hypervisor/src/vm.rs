//! VMs and pCPUs at run time: each VM's state (life cycle, vCPU power, device models, task
//! table), which pCPU runs which vCPU, why a pCPU must look at its vCPUs again and the kick
//! that tells it, and the one checked access to guest memory. What changes the state (build,
//! stop, reset) is [`crate::lifecycle`]'s; the state itself knows no module above it.
//!
//! Ownership: each of a VM's device models (vGIC, PL011 here; the virtio console in
//! [`crate::devices`]) sits behind a lock of its own, taken by the pCPU running its vCPU
//! (traps, through [`crate::devices`]), by pCPU 0 (console input) and by senders raising its
//! interrupts. Lock order: a device model other than the vGIC, then the VM's vGIC (a model
//! sets its interrupt's level under its own lock, so that a level cannot be overtaken by an
//! older one), then nothing (the console lock is never taken while holding either). The task
//! tables of all VMs sit behind one lock ([`task_tables`]), taken before a shared pCPU's own
//! (see `sched::tasks`).

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use keel_core::addr::{GuestPhysAddr, VmId};
use keel_core::devices::{pl011::Pl011, vgic::Vgic};
use keel_core::system::VmDesc;
use keel_core::tasks::TaskTable;

use crate::arch::cpu::{self, Mutex, Once};
use crate::arch::{boot::MAX_CPUS, gic, stage2};
use crate::config::SYSTEM;

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
    /// The GIC distributor and redistributors, set up by `lifecycle::build` before any vCPU
    /// of the VM runs, like every device model.
    pub vgic: Mutex<Vgic>,
    /// The console UART.
    pub uart: Mutex<Pl011>,
    /// Set while a vCPU of the VM reloads it (`lifecycle::reset_begin`): no other vCPU of it
    /// starts, and a second SYSTEM_RESET meanwhile just stops its caller.
    resetting: AtomicBool,
    /// Bumped, under the device lock, by every guest write to the vGIC and every reset of it:
    /// the timer fast path ([`crate::irq`]) reuses what it listed only while this is unchanged.
    pub gic_writes: AtomicU32,
    stage2_root: AtomicU64,
    vcpus: [Vcpu; MAX_VCPUS],
}

impl Vm {
    const fn new() -> Self {
        Self {
            state: AtomicU8::new(VmState::Running as u8),
            generation: AtomicU32::new(0),
            // All-zero, so the VM table lives in .bss rather than in the image.
            vgic: Mutex::new(Vgic::EMPTY),
            uart: Mutex::new(Pl011::ZEROED),
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

    /// Records the root of the VM's stage-2 tables (its build, before any vCPU of it runs).
    pub fn set_stage2_root(&self, root: u64) {
        self.stage2_root.store(root, Ordering::Relaxed);
    }

    /// Ends the VM in `state` ([`VmState::Off`] or [`VmState::Stopped`]); whether it was
    /// running until now (only then is its end to be reported and carried out).
    pub fn end(&self, state: VmState) -> bool {
        self.state.swap(state as u8, Ordering::AcqRel) == VmState::Running as u8
    }

    /// Marks the VM as being reset and begins a new generation; false if a reset is already
    /// under way (and then changes nothing). SeqCst with [`Vm::may_enter`]: either a vCPU
    /// about to enter sees the flag, or the resetter sees its pCPU's `in_guest` and waits.
    pub fn begin_reset(&self) -> bool {
        if self.resetting.swap(true, Ordering::SeqCst) {
            return false;
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// The reset is complete: vCPUs of the VM may start again.
    pub fn end_reset(&self) {
        self.resetting.store(false, Ordering::Release);
    }

    /// A vCPU's PSCI power state.
    pub fn vcpu_power(&self, vcpu: usize) -> VcpuPower {
        match entry(&self.vcpus, vcpu).power.load(Ordering::Acquire) {
            1 => VcpuPower::On,
            2 | CLAIMED => VcpuPower::Pending,
            _ => VcpuPower::Off,
        }
    }

    /// Marks a vCPU on or off.
    pub fn set_vcpu_power(&self, vcpu: usize, power: VcpuPower) {
        entry(&self.vcpus, vcpu)
            .power
            .store(power as u8, Ordering::Release);
    }

    /// Marks a running vCPU off; leaves an off or pending one as it is.
    pub fn power_off_if_on(&self, vcpu: usize) {
        let _ = entry(&self.vcpus, vcpu).power.compare_exchange(
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
        let slot = self::entry(&self.vcpus, vcpu);
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
    /// if the VM is being reset (the pCPU must not enter; see `lifecycle::reset_begin`).
    pub fn may_enter(&self) -> bool {
        !self.resetting.load(Ordering::SeqCst)
    }

    /// Takes a pending start request: `(entry, context)`. None while the VM is being reset.
    pub fn take_start(&self, vcpu: usize) -> Option<(u64, u64)> {
        if self.resetting.load(Ordering::Acquire) {
            return None;
        }
        let slot = entry(&self.vcpus, vcpu);
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

/// `table[index]` for the accessors below and the other per-VM tables (`lifecycle`, `devices`),
/// with the per-pCPU tables' one shared out-of-range panic.
pub use crate::arch::cpu::entry;

static VMS: [Vm; MAX_VMS] = [const { Vm::new() }; MAX_VMS];

/// The run-time state of VM `id`.
pub fn vm(id: usize) -> &'static Vm {
    entry(&VMS, id)
}

/// The configuration of VM `id`.
pub fn desc(id: usize) -> &'static VmDesc {
    entry(SYSTEM.vms, id)
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
    /// The virtual timer's PPI is disabled in this pCPU's redistributor (no guest could take
    /// it): a shared pCPU enables it again when it next loads a vCPU, and only then.
    pub vtimer_off: AtomicBool,
}

impl PerCpu {
    /// Forgets the timer fast path's list register: something else wrote the list registers.
    #[inline(always)]
    pub fn forget_timer_lr(&self) {
        self.timer_lr.store(0, Ordering::Relaxed);
    }
}

/// All zero bytes (so not in the image): [`assign_pcpus`] marks every pCPU without a vCPU
/// (`vm` is `usize::MAX`) and with its virtual timer's PPI off, at boot, before anything
/// reads them.
static CPUS: [PerCpu; MAX_CPUS] = [const {
    PerCpu {
        mpidr: AtomicU64::new(0),
        vm: AtomicUsize::new(0),
        vcpu: AtomicUsize::new(0),
        listed: AtomicU64::new(0),
        redistributor: Once::new(),
        generation: AtomicU32::new(0),
        shared: AtomicBool::new(false),
        in_guest: AtomicBool::new(false),
        timer_lr: AtomicU64::new(0),
        timer_lr_value: AtomicU64::new(0),
        vtimer_off: AtomicBool::new(false),
    }
}; MAX_CPUS];

/// State of pCPU `index`.
pub fn percpu(index: usize) -> &'static PerCpu {
    entry(&CPUS, index)
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

/// Per pCPU, the VMs kicked there since the kicks were last taken (bit n = VM n; at boot all
/// of them). A kicker sets its VM's bit before it sends the kick, so the pCPU's scheduler
/// looks again at those VMs' slots only ([`take_kicked_vms`]).
static KICKED_VMS: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(u32::MAX) }; MAX_CPUS];

const _: () = assert!(MAX_VMS <= 32, "a kicked-VM mask has 32 bits");

/// Takes the VMs kicked on this pCPU since the last take (see [`KICKED_VMS`]).
pub fn take_kicked_vms() -> u32 {
    KICKED_VMS[cpu::index()].swap(0, Ordering::Acquire)
}

/// Marks this pCPU stale for VM `id` as a kick of it would (its ended or reset state is not
/// taken yet).
pub fn mark_kicked_here(id: usize) {
    KICKED_VMS[cpu::index()].fetch_or(1 << id, Ordering::Release);
    mark_stale(Stale::Kicked);
}

/// Something about this pCPU's switched-out vCPUs may have changed.
pub fn mark_stale(reason: Stale) {
    STALE[cpu::index()].fetch_or(reason as u8, Ordering::Relaxed);
}

/// Whether this pCPU has [`Stale`] reasons not taken yet.
pub fn is_stale() -> bool {
    STALE[cpu::index()].load(Ordering::Relaxed) != 0
}

/// Takes this pCPU's [`Stale`] reasons marked since the last take (bit = reason; 0: none).
pub fn take_stale() -> u8 {
    STALE[cpu::index()].swap(0, Ordering::Relaxed)
}

/// The pCPUs of the configuration, in order.
pub fn configured_pcpus() -> impl Iterator<Item = &'static PerCpu> {
    CPUS.iter().take(SYSTEM.pcpus as usize)
}

/// Records which vCPU runs where (from the configuration's pinning) and which pCPUs are
/// shared; a shared pCPU's vCPUs are placed by `sched::init`. Called once, by pCPU 0 at boot
/// before any other pCPU starts: it first gives [`CPUS`] its initial values.
pub fn assign_pcpus() {
    for cpu in &CPUS {
        cpu.vm.store(usize::MAX, Ordering::Relaxed);
        cpu.vtimer_off.store(true, Ordering::Relaxed);
    }
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

/// The VM's memory at `[ipa, ipa + len)` as a byte slice (to load it, or to copy a message
/// in or out); None if no region of the VM holds it whole: the one check every access of
/// Keel's to guest memory goes through. Inlined: the check is a few compares, no region
/// copied out ([`VmDesc::translate_range`]).
#[inline]
pub fn guest_bytes(desc: &VmDesc, ipa: GuestPhysAddr, len: usize) -> Option<&'static mut [u8]> {
    let phys = desc.translate_range(ipa, len as u64)?;
    // SAFETY: the range lies inside one of the VM's own regions (checked above), which Keel
    // maps as normal memory and no other VM's stage 2 maps. Nothing of Keel's lives there. No
    // vCPU of the VM runs while it is (re)loaded; otherwise (messages) its vCPUs may write
    // the bytes meanwhile, which Keel copies in one pass and never interprets.
    Some(unsafe { core::slice::from_raw_parts_mut(phys.0 as *mut u8, len) })
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

/// Whether pCPU `pcpu` is shared between vCPUs.
pub fn is_shared_pcpu(pcpu: u32) -> bool {
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
        kick_pcpu(pcpu as usize, id);
    }
}

/// Sends the kick SGI to pCPU `pcpu` (also this one: it is then taken at the next exit) for
/// something that changed about VM `id`'s vCPUs there.
pub fn kick_pcpu(pcpu: usize, id: usize) {
    if let (Some(target), Some(kicked)) = (CPUS.get(pcpu), KICKED_VMS.get(pcpu)) {
        kicked.fetch_or(1 << id, Ordering::Release);
        gic::send_sgi(KICK_SGI, target.mpidr.load(Ordering::Relaxed));
    }
}

/// The VM's identity as a hypercall answers it.
pub fn vm_id(id: usize) -> VmId {
    desc(id).id
}

/// Every VM's real-time tasks (KEEL_TASK_*: `sched::tasks` carries them out).
static TASK_TABLES: Mutex<[TaskTable; MAX_VMS]> = Mutex::new([TaskTable::EMPTY; MAX_VMS]);

/// The task tables of all VMs, behind their one lock (taken before any shared pCPU's).
pub fn task_tables() -> &'static Mutex<[TaskTable; MAX_VMS]> {
    &TASK_TABLES
}

/// VM `id` was reset or ended: its tasks are forgotten. Their slots are freed by their pCPUs
/// when the kick that says so arrives (their generation or VM state no longer matches).
pub fn forget_tasks(id: usize) {
    TASK_TABLES.lock_cold()[id].clear();
}
