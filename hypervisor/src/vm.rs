//! VMs and pCPUs at run time: each VM's state (life cycle, vCPU power, device models, task
//! table), which pCPU runs which vCPU, why a pCPU must look at its vCPUs again and the kick
//! that tells it, and the one checked access to guest memory. What changes the state (build,
//! stop, reset) is [`crate::lifecycle`]'s; the state itself knows no module above it.
//!
//! Ownership: each of a VM's device models (vGIC, PL011 here; the virtio console in
//! [`crate::devices`]) sits behind a lock of its own, taken by the pCPU running its vCPU
//! (traps, through [`crate::devices`]), by pCPU 0 (console input, queued in the PL011 model
//! after the console lock is released) and by senders raising its interrupts. A device model
//! other than the vGIC is locked before the VM's vGIC (a model sets its interrupt's level
//! under its own lock, so that a level cannot be overtaken by an older one); the console lock
//! is never taken while holding either. Each VM's task table sits behind a lock of its own
//! ([`task_table`]), taken before a shared pCPU's (see `sched::tasks`). Every lock's place,
//! holders and longest hold: the crate's [lock order](crate#lock-order).

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use keel_core::addr::{GuestPhysAddr, VmId};
use keel_core::devices::{pl011::Pl011, vgic::Vgic};
use keel_core::system::VmDesc;
use keel_core::tasks::TaskTable;

use crate::arch::cpu::{self, Mutex, Once};
use crate::arch::{boot::MAX_CPUS, gic, stage2};
use crate::colouring;
use crate::config::SYSTEM;
use crate::masked;

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

/// [`Vm::status`]: the bits of its [`VmState`], the reset flag, and where the generation is.
const STATE_MASK: u64 = 0xff;
const RESETTING: u64 = 1 << 8;
/// A restart asked from outside the VM ([`Vm::begin_restart`]) waits for its vCPU 0's pCPU to
/// take the reload ([`Vm::take_reload`]).
const RELOAD_PENDING: u64 = 1 << 9;
/// The restarting VM runs again once reloaded, whatever state it had ended in.
const REVIVE: u64 = 1 << 10;
const GENERATION_SHIFT: u32 = 32;

/// A VM's run-time state.
pub struct Vm {
    /// Its state (bits 0-7, [`VmState`]), whether it is being reset ([`RESETTING`]: a vCPU of
    /// it reloads it, `lifecycle::reset_begin`; no other vCPU of it starts, and a second
    /// SYSTEM_RESET meanwhile just stops its caller) and its generation (bits 32-63, bumped on
    /// each reset: a vCPU started in an older generation stops), in one word so that a pCPU
    /// about to enter one of its vCPUs tests all three with one load ([`Vm::enterable_in`]).
    status: AtomicU64,
    /// The GIC distributor and redistributors, set up by `lifecycle::build` before any vCPU
    /// of the VM runs, like every device model.
    pub vgic: Mutex<Vgic>,
    /// The console UART, with the console input queued behind its receive FIFO (4 KiB, all
    /// zero bytes at boot: in .bss). Taken by pCPU 0 to deliver input, with no console lock
    /// held, and by the VM's vCPUs reading it.
    pub uart: Mutex<Pl011>,
    /// Bumped, under the device lock, by every guest write to the vGIC and every reset of it:
    /// the timer fast path ([`crate::irq`]) reuses what it listed only while this is unchanged.
    pub gic_writes: AtomicU32,
    stage2_root: AtomicU64,
    vcpus: [Vcpu; MAX_VCPUS],
}

impl Vm {
    const fn new() -> Self {
        Self {
            // Running (0), not resetting, generation 0.
            status: AtomicU64::new(0),
            // All-zero, so the VM table lives in .bss rather than in the image.
            vgic: Mutex::new(Vgic::EMPTY),
            uart: Mutex::new(Pl011::ZEROED),
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
        match self.status.load(Ordering::Acquire) & STATE_MASK {
            0 => VmState::Running,
            1 => VmState::Off,
            _ => VmState::Stopped,
        }
    }

    /// Current reset generation.
    pub fn generation(&self) -> u32 {
        (self.status.load(Ordering::Acquire) >> GENERATION_SHIFT) as u32
    }

    /// Whether a vCPU started in `generation` may enter: the VM runs, is not being reset, and
    /// is still in that generation. Called by a pCPU about to enter it, after setting its
    /// `in_guest` (SeqCst, as [`Vm::may_enter`]).
    #[inline(always)]
    pub fn enterable_in(&self, generation: u32) -> bool {
        // Running is 0 and RESETTING clear: the word is the generation alone.
        self.status.load(Ordering::SeqCst) == u64::from(generation) << GENERATION_SHIFT
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
        let before = self
            .status
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |status| {
                Some(status & !STATE_MASK | state as u64)
            })
            .unwrap_or_else(|status| status);
        before & STATE_MASK == VmState::Running as u64
    }

    /// Marks the VM as being reset and begins a new generation; false if a reset is already
    /// under way (and then changes nothing). SeqCst with [`Vm::may_enter`]: either a vCPU
    /// about to enter sees the flag, or the resetter sees its pCPU's `in_guest` and waits.
    pub fn begin_reset(&self) -> bool {
        self.status
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |status| {
                (status & RESETTING == 0)
                    .then(|| (status | RESETTING).wrapping_add(1 << GENERATION_SHIFT))
            })
            .is_ok()
    }

    /// Marks the VM as being restarted from outside it (a health action, a manager) and begins
    /// a new generation, after which it runs again whatever state it had ended in; false if a
    /// reset or restart is already under way (and then changes nothing). SeqCst as
    /// [`Vm::begin_reset`]. Its reload is then handed to its vCPU 0's pCPU by
    /// [`Vm::hand_reload`], once the reload's state is set.
    pub fn begin_restart(&self) -> bool {
        self.status
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |status| {
                (status & RESETTING == 0)
                    .then(|| (status | RESETTING | REVIVE).wrapping_add(1 << GENERATION_SHIFT))
            })
            .is_ok()
    }

    /// Leaves a restart's reload for its vCPU 0's pCPU to take ([`Vm::take_reload`]).
    pub fn hand_reload(&self) {
        self.status.fetch_or(RELOAD_PENDING, Ordering::Release);
    }

    /// Takes a pending restart's reload (its vCPU 0's pCPU, once): whether there was one.
    pub fn take_reload(&self) -> bool {
        self.status.fetch_and(!RELOAD_PENDING, Ordering::AcqRel) & RELOAD_PENDING != 0
    }

    /// Whether the VM is being reset or restarted.
    pub fn is_resetting(&self) -> bool {
        self.status.load(Ordering::Acquire) & RESETTING != 0
    }

    /// The reset is complete: vCPUs of the VM may start again (a restarted VM runs again).
    pub fn end_reset(&self) {
        let _ = self
            .status
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |status| {
                let revived = if status & REVIVE != 0 {
                    status & !STATE_MASK | VmState::Running as u64
                } else {
                    status
                };
                Some(revived & !(RESETTING | REVIVE))
            });
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
        self.status.load(Ordering::SeqCst) & RESETTING == 0
    }

    /// Takes a pending start request: `(entry, context)`. None while the VM is being reset.
    pub fn take_start(&self, vcpu: usize) -> Option<(u64, u64)> {
        if self.status.load(Ordering::Acquire) & RESETTING != 0 {
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
#[repr(align(128))]
pub struct PerCpu {
    /// Its longest interrupts-masked stretch ([`masked`]): next to `vm` and `vcpu`, which a
    /// trap reads first, so that a trap finds both with one address.
    pub masked: masked::Record,
    /// MPIDR affinity.
    pub mpidr: AtomicU64,
    /// VM of the vCPU pinned here, or `usize::MAX` (from [`assign_pcpus`] on; 0 in the static,
    /// which is all zero so that it lives in .bss).
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
    /// The [`Stale`] reasons since they were last taken (from [`assign_pcpus`]: kicked, since
    /// the first starts are pending).
    pub stale: AtomicU8,
    /// The VMs kicked here since the kicks were last taken (bit n = VM n; from
    /// [`assign_pcpus`]: all of them). A kicker sets its VM's bit before it sends the kick, so
    /// the pCPU's scheduler looks again at those VMs' slots only ([`take_kicked_vms`]).
    pub kicked_vms: AtomicU32,
    /// The virtual timer's PPI is enabled in this pCPU's redistributor; it is disabled when no
    /// guest could take it (at boot, and when it fires with none loaded), and a shared pCPU
    /// enables it again when it next loads a vCPU, and only then.
    pub vtimer_on: AtomicBool,
    /// Health events noted here to be acted on from this pCPU's timer (bit n = VM n; see
    /// `health`): noted where locks are held, acted on where none is.
    pub health_pending: AtomicU32,
    /// A watchdog of a VM whose vCPU 0 runs here was armed or moved earlier by another pCPU, or
    /// a health event was noted here by one: the timer queue's health deadline is to be
    /// computed again ([`rearm_watchdogs`]).
    pub watchdog_moved: AtomicBool,
}

impl PerCpu {
    /// Forgets the timer fast path's list register: something else wrote the list registers.
    #[inline(always)]
    pub fn forget_timer_lr(&self) {
        self.timer_lr.store(0, Ordering::Relaxed);
    }
}

/// All zero bytes (so not in the image): [`assign_pcpus`] marks every pCPU without a vCPU
/// (`vm` is `usize::MAX`) and kicked for every VM, at boot, before anything reads them.
static CPUS: [PerCpu; MAX_CPUS] = [const {
    PerCpu {
        masked: masked::Record::new(),
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
        stale: AtomicU8::new(0),
        kicked_vms: AtomicU32::new(0),
        vtimer_on: AtomicBool::new(false),
        health_pending: AtomicU32::new(0),
        watchdog_moved: AtomicBool::new(false),
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

/// This pCPU's interrupts-masked stretch record ([`masked::Record`]).
#[inline(always)]
pub fn masked() -> &'static masked::Record {
    &this_cpu().masked
}

/// Ends this pCPU's interrupts-masked stretch ([`masked::Record::end`]), as a function: the
/// last step a guest entry is given.
#[inline(always)]
pub fn end_masked() {
    masked().end();
}

/// Whether the configuration has a shared pCPU (one whose policy is not `pinned`). Without,
/// [`this_cpu_is_shared`] and [`is_shared_pcpu`] are the constant `false`, and the shared
/// pCPUs' scheduler and switch are left out of the image (as health monitoring and the trace
/// are).
pub const SHARED_PCPUS: bool = crate::config::SHARED_PCPUS;

/// Whether this pCPU is shared between vCPUs (its policy is not `pinned`).
#[inline(always)]
pub fn this_cpu_is_shared() -> bool {
    SHARED_PCPUS && this_cpu().shared.load(Ordering::Relaxed)
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

const _: () = assert!(MAX_VMS <= 32, "a kicked-VM mask has 32 bits");

/// Takes the VMs kicked on this pCPU since the last take (see [`PerCpu::kicked_vms`]).
pub fn take_kicked_vms() -> u32 {
    this_cpu().kicked_vms.swap(0, Ordering::Acquire)
}

/// Marks this pCPU stale for VM `id` as a kick of it would (its ended or reset state is not
/// taken yet).
pub fn mark_kicked_here(id: usize) {
    this_cpu().kicked_vms.fetch_or(1 << id, Ordering::Release);
    mark_stale(Stale::Kicked);
}

/// Something about this pCPU's switched-out vCPUs may have changed.
pub fn mark_stale(reason: Stale) {
    this_cpu().stale.fetch_or(reason as u8, Ordering::Relaxed);
}

/// Whether this pCPU has [`Stale`] reasons not taken yet.
#[inline(always)]
pub fn is_stale() -> bool {
    this_cpu().stale.load(Ordering::Relaxed) != 0
}

/// Takes this pCPU's [`Stale`] reasons marked since the last take (bit = reason; 0: none).
pub fn take_stale() -> u8 {
    this_cpu().stale.swap(0, Ordering::Relaxed)
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
        cpu.stale.store(Stale::Kicked as u8, Ordering::Relaxed);
        cpu.kicked_vms.store(u32::MAX, Ordering::Relaxed);
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
    let address = if desc.colours.is_coloured() {
        coloured_address(desc, ipa, len)?
    } else {
        desc.translate_range(ipa, len as u64)?.0
    };
    // SAFETY: the range lies inside one of the VM's own regions (checked above), which Keel
    // maps as normal memory (identity-mapped, or through its window on a coloured VM's frames)
    // and no other VM's stage 2 maps. Nothing of Keel's lives there. No vCPU of the VM runs
    // while it is (re)loaded; otherwise (messages) its vCPUs may write the bytes meanwhile,
    // which Keel copies in one pass and never interprets.
    Some(unsafe { core::slice::from_raw_parts_mut(address as *mut u8, len) })
}

/// Where Keel reaches `[ipa, ipa + len)` of coloured VM `desc`: in its window on the VM's RAM
/// (guest order), or its flash as one range. Out of line: uncoloured VMs' accesses, the fast
/// paths' (messages), inline only the test of `colours`.
#[cold]
#[inline(never)]
fn coloured_address(desc: &VmDesc, ipa: GuestPhysAddr, len: usize) -> Option<u64> {
    if desc.memory.contains_range(ipa, len as u64) {
        return Some(colouring::window(desc)? + (ipa.0 - desc.memory.ipa.0));
    }
    desc.translate_range(ipa, len as u64).map(|phys| phys.0)
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
    SHARED_PCPUS
        && CPUS
            .get(pcpu as usize)
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

/// [`kick_vcpu`]s each vCPU of VM `id` in the mask `vcpus` (bit `i`: vCPU `i`) but `caller`,
/// the one running here: after SGIs were raised at them (it takes its own at its trap's
/// return).
#[inline(always)]
pub fn kick_vcpus_but(id: usize, vcpus: u64, caller: usize) {
    let others = vcpus & !(1 << caller);
    for target in (0..desc(id).pcpus.len()).filter(|&t| others & (1 << t) != 0) {
        kick_vcpu(id, target);
    }
}

/// Sends the kick SGI to pCPU `pcpu` (also this one: it is then taken at the next exit) for
/// something that changed about VM `id`'s vCPUs there.
#[inline(always)]
pub fn kick_pcpu(pcpu: usize, id: usize) {
    if let Some(target) = CPUS.get(pcpu) {
        target.kicked_vms.fetch_or(1 << id, Ordering::Release);
        gic::send_sgi(KICK_SGI, target.mpidr.load(Ordering::Relaxed));
    }
}

/// The VM's identity as a hypercall answers it.
pub fn vm_id(id: usize) -> VmId {
    desc(id).id
}

/// Each VM's real-time tasks (KEEL_TASK_*: `sched::tasks` carries them out), each table behind
/// a lock of its own.
static TASK_TABLES: [Mutex<TaskTable>; MAX_VMS] = [const { Mutex::new(TaskTable::EMPTY) }; MAX_VMS];

/// VM `id`'s task table, behind its lock (taken before any shared pCPU's: see the lock order
/// above).
pub fn task_table(id: usize) -> &'static Mutex<TaskTable> {
    entry(&TASK_TABLES, id)
}

/// VM `id` was reset or ended: its tasks are forgotten. Their slots are freed by their pCPUs
/// when the kick that says so arrives (their generation or VM state no longer matches).
pub fn forget_tasks(id: usize) {
    task_table(id).lock_cold().clear();
}

/// Each VM's watchdog expiry: the counter value at which it expires (`u64::MAX`, or 0 in the
/// all-zero static before [`init_watchdogs`]: none). Written by the VM's pCPUs (KEEL_WATCHDOG,
/// its SP805), read by its vCPU 0's pCPU, whose timer queue serves it (`health`).
static WATCHDOGS: [AtomicU64; MAX_VMS] = [const { AtomicU64::new(0) }; MAX_VMS];

/// Disarms every watchdog (once, at boot, before any guest runs).
pub fn init_watchdogs() {
    for watchdog in &WATCHDOGS {
        watchdog.store(u64::MAX, Ordering::Relaxed);
    }
}

/// The pCPU that serves VM `id`'s watchdog and health events: its vCPU 0's.
pub fn home_pcpu(id: usize) -> usize {
    desc(id).pcpus.first().map_or(0, |&pcpu| pcpu as usize)
}

/// Sets VM `id`'s watchdog to expire when the counter reaches `at` (`None`: disarmed). An
/// expiry moved later leaves the home pCPU's timer to fire early once and find it not due;
/// one moved earlier (or armed) re-arms it, here or by a kick.
pub fn set_watchdog_expiry(id: usize, at: Option<u64>) {
    let at = at.unwrap_or(u64::MAX);
    let before = entry(&WATCHDOGS, id).swap(at, Ordering::AcqRel);
    if at >= before {
        return;
    }
    let home = home_pcpu(id);
    if home == cpu::index() {
        rearm_watchdogs();
    } else if let Some(cpu) = CPUS.get(home) {
        cpu.watchdog_moved.store(true, Ordering::Release);
        kick_pcpu(home, id);
    }
}

/// VM `id`'s watchdog expiry, if armed.
pub fn watchdog_expiry(id: usize) -> Option<u64> {
    let at = entry(&WATCHDOGS, id).load(Ordering::Acquire);
    (at != u64::MAX).then_some(at)
}

/// Takes VM `id`'s watchdog if it has expired at `now` (disarming it): whether it had.
pub fn take_expired_watchdog(id: usize, now: u64) -> bool {
    entry(&WATCHDOGS, id)
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |at| {
            (at <= now).then_some(u64::MAX)
        })
        .is_ok()
}

/// Notes a health event of VM `id` for this pCPU's timer to act on at once (see
/// [`PerCpu::health_pending`]).
pub fn note_health_event(id: usize) {
    this_cpu()
        .health_pending
        .fetch_or(1 << id, Ordering::AcqRel);
    crate::timers::set(crate::timers::Deadline::Health, 0);
}

/// [`note_health_event`] for pCPU `pcpu`'s timer: here, or there by a kick.
pub fn note_health_event_on(pcpu: usize, id: usize) {
    if pcpu == cpu::index() {
        return note_health_event(id);
    }
    if let Some(cpu) = CPUS.get(pcpu) {
        cpu.health_pending.fetch_or(1 << id, Ordering::AcqRel);
        cpu.watchdog_moved.store(true, Ordering::Release);
        kick_pcpu(pcpu, id);
    }
}

/// Sets this pCPU's health deadline: at once if events are noted, otherwise the earliest
/// watchdog of the VMs whose vCPU 0 runs here.
pub fn rearm_watchdogs() {
    let here = cpu::index();
    let cpu = this_cpu();
    cpu.watchdog_moved.store(false, Ordering::Relaxed);
    let earliest = if cpu.health_pending.load(Ordering::Acquire) != 0 {
        0
    } else {
        (0..SYSTEM.vms.len())
            .filter(|&id| home_pcpu(id) == here)
            .filter_map(watchdog_expiry)
            .min()
            .unwrap_or(u64::MAX)
    };
    crate::timers::set(crate::timers::Deadline::Health, earliest);
}
