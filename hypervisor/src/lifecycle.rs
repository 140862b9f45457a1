//! The life cycle of VMs: building each at boot (its stage 2, image, device tree and
//! devices), stopping one after a fault, its power-off, and its reset (PSCI SYSTEM_RESET):
//! every vCPU of it stopped, its memory reloaded in bounded steps, its vCPU 0 started afresh.
//! A reset's reload runs on the resetting pCPU ([`reload_here`]) or, on a shared pCPU, in the
//! resetting vCPU's time (the scheduler calls [`reload_step`] and [`reset_finish`]).
//!
//! Ownership and locks: the state it changes is [`crate::vm`]'s. A reload's progress
//! (`RELOADS`) is used by the resetting pCPU alone, while its VM is marked resetting; where
//! the seed properties sit in a VM's device tree (`SEED_OFFSETS`) is written once by
//! [`build`] and only read after. A reset of the devices takes the virtio console's lock, the
//! PL011's, the SP805's, then the vGIC's (the device models' order: the crate's
//! [lock order](crate#lock-order)); no lock is held while it waits for a VM's vCPUs to stop.

use core::sync::atomic::{AtomicUsize, Ordering};

use keel_core::abi::{layout, MaskedSite};
use keel_core::addr::GuestPhysAddr;
use keel_core::ratelimit::{DiagnosticKind, NO_VM};
use keel_core::seed;
use keel_core::stage2::MemoryKind;
use keel_core::system::VmDesc;
use keel_core::table::{at, at_mut};
use keel_core::text::{Out, Show};

use crate::arch::cpu::{self, Mutex};
use crate::arch::psci;
use crate::config::SYSTEM;
use crate::console::VmLabel;
use crate::devices::{sp805, virtio};
use crate::tables;
use crate::vm::{self, VcpuPower, VmState, MAX_VMS};
use crate::{console, iommu, ipc, irq, keel_println_limited, trace};

/// How far each VM's reload has come (the resetting pCPU's alone, while the VM resets).
static RELOADS: [Mutex<Reload>; MAX_VMS] = [const { Mutex::new(Reload::START) }; MAX_VMS];

/// Where each of [`seed::SEED_PROPERTIES`]'s values sits in each VM's device tree, found once
/// by [`build`] (0: not there; no value sits in the blob's header): a reload patches them
/// without parsing.
static SEED_OFFSETS: [[AtomicUsize; seed::SEED_PROPERTIES.len()]; MAX_VMS] =
    [const { [const { AtomicUsize::new(0) }; seed::SEED_PROPERTIES.len()] }; MAX_VMS];

/// Why a VM could not be built.
#[derive(Clone, Copy, Debug)]
pub enum LoadError {
    /// Out of stage-2 table storage.
    NoTables,
    /// The stage-2 map was refused.
    Map(keel_core::stage2::Stage2Error),
}

impl Show for LoadError {
    fn show(&self, out: &mut dyn Out) {
        match self {
            LoadError::NoTables => out.put("no stage-2 table storage left"),
            LoadError::Map(error) => error.show(out),
        }
    }
}

/// Builds VM `id`'s stage-2 tables, loads its image and device tree, creates its devices.
pub fn build(id: usize) -> Result<(), LoadError> {
    let desc = vm::desc(id);
    let mut tables = tables::stage2(id).ok_or(LoadError::NoTables)?;
    if desc.colours.is_coloured() {
        // Its RAM page by page, to the frames of its colours (the compiler refuses flash).
        let memory = desc.memory;
        tables
            .map_coloured(memory.ipa.0, memory.phys.0, memory.size, &desc.colours)
            .map_err(LoadError::Map)?;
    } else {
        for region in desc.regions() {
            tables
                .map(region.ipa.0, region.phys.0, region.size, MemoryKind::Normal)
                .map_err(LoadError::Map)?;
        }
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
    // The registers of the board's devices given to it, as device memory.
    for device in desc.devices {
        for region in device.regions {
            tables
                .map(region.ipa.0, region.phys.0, region.size, MemoryKind::Device)
                .map_err(LoadError::Map)?;
        }
    }
    // On a GICv2, the hardware virtual CPU interface (GICV) where the guest sees its GIC's CPU
    // interface: it acknowledges and ends its interrupts there without a trap.
    #[cfg(keel_gic_v2)]
    tables
        .map(
            layout::GICC_BASE,
            crate::platform::get().gic.virtual_cpu,
            layout::GICC_SIZE,
            MemoryKind::Device,
        )
        .map_err(LoadError::Map)?;
    irq::claim_device_interrupts(id);
    let vm = vm::vm(id);
    vm.set_stage2_root(tables.root_phys());
    for (property, slot) in seed::SEED_PROPERTIES
        .iter()
        .zip(vm::entry(&SEED_OFFSETS, id))
    {
        if let Ok(Some(offset)) = seed::seed_offset(desc.dtb, *property) {
            slot.store(offset, Ordering::Relaxed);
        }
    }
    load_images(desc, vm.generation());
    reset_devices(id);
    if vm::is_shared_pcpu(desc.pcpus[0]) {
        // A shared pCPU's run loop starts it like a CPU_ON (cannot fail: it is off).
        let _ = vm.request_start(0, desc.image_ipa.0, desc.dtb_ipa.0);
    } else {
        vm.set_vcpu_power(0, VcpuPower::On);
    }
    Ok(())
}

/// A poll point that serves nothing, for steps whose caller holds what serving may take.
fn no_poll_point() {}

fn reset_devices(id: usize) {
    let desc = vm::desc(id);
    // The SPIs its devices, its message queues and its channels' doorbells raise (an SGI
    // needs no owning).
    let console = desc.console.then_some(layout::UART_INTID);
    let virtio = desc.virtio_console.map(|_| layout::VIRTIO_INTID);
    let messages = desc.messages.map(|grant| grant.intid);
    let doorbells = SYSTEM.channels_of(id).map(|(channel, _)| channel.intid);
    let assigned = desc
        .devices
        .iter()
        .flat_map(|device| device.interrupts.iter().map(|interrupt| interrupt.intid));
    // Each SPI at most once (the compiler refuses a second use), so all fit.
    let mut owned = [0; keel_core::devices::vgic::NR_IRQS];
    let mut count = 0;
    for intid in console
        .into_iter()
        .chain(virtio)
        .chain(messages)
        .chain(doorbells)
        .chain(assigned)
        .filter(|&intid| intid >= 32)
        .take(owned.len())
    {
        *at_mut(&mut owned, count) = intid;
        count += 1;
    }
    {
        // Lock order: the device models', then the vGIC's.
        let vm = vm::vm(id);
        let mut virtio = virtio::console(id).lock_cold();
        let mut uart = vm.uart.lock_cold();
        let mut watchdog = sp805::watchdog(id).lock_cold();
        let mut vgic = vm.vgic.lock_cold();
        virtio.reset();
        // In place, in constant work: its input queue emptied, not erased.
        uart.reset();
        watchdog.reset(id);
        vgic.reset(desc.pcpus.len(), at(&owned, ..count));
        vm.gic_writes.fetch_add(1, Ordering::Relaxed);
    }
    irq::reset_device_interrupts(id);
    // Its devices' DMA translates again (after a stop, they were cut off). No poll point
    // between the steps: a reload's step holds the VM's reload, which what a poll point serves
    // may want (a VM given a whole bridge: 256 STEs in this step's stretch).
    if let Err(error) = iommu::set_vm_streams(id, true, no_poll_point) {
        keel_println_limited!(
            DiagnosticKind::Smmu,
            id,
            VmLabel(desc.name, id),
            ": SMMU: ",
            error
        );
    }
}

/// Copies `bytes` into the VM's memory at `ipa` and cleans them to the point of coherency.
fn copy_into(desc: &VmDesc, ipa: GuestPhysAddr, bytes: &[u8]) {
    if let Some(destination) = vm::guest_bytes(desc, ipa, bytes.len()) {
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
    /// Say that the VM resets (a reset only). First, so that [`Reload::START`] is all zero
    /// bytes (the table of reloads takes no image space).
    Announce,
    /// A restart asked from outside the VM ([`restart`]): wait until none of its vCPUs runs
    /// guest code any more (each was kicked and stops at its next exit), forget its tasks.
    Quiesce,
    /// A restart's: end the line the VM was writing on the console.
    EndLine,
    /// A restart's: zero its RAM, so that it finds its memory as it was at boot (a reset of
    /// its own keeps it, as a warm reset of a board does).
    Zero,
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
struct Reload {
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

    /// At the start of a restart's reload (its line said by `health`).
    const RESTART: Reload = Reload {
        phase: Phase::Quiesce,
        boot: false,
        offset: 0,
        steps: 0,
        bytes: 0,
        began: 0,
    };

    /// At the start of a reset's reload.
    const START: Reload = Reload {
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
        // Complete only at the call after the last phase: the reset's end (the scheduler, the
        // vCPU's start) is a stretch of its own, after the interrupts that came meanwhile.
        if self.phase == Phase::Done {
            return true;
        }
        if self.steps == 0 {
            self.began = crate::arch::timer::now();
        }
        self.steps += 1;
        let offset = self.offset;
        let phase_done = match self.phase {
            // A restart's phases (only health monitoring restarts a VM from elsewhere).
            Phase::Quiesce if crate::config::HEALTH => {
                let id = desc.id.0 as usize;
                wait_until_stopped(id);
                vm::forget_tasks(id);
                true
            }
            Phase::EndLine if crate::config::HEALTH => {
                console::end_vm_line(desc.id.0 as usize);
                true
            }
            Phase::Announce => {
                keel_println_limited!(
                    DiagnosticKind::Reset,
                    desc.id.0 as usize,
                    VmLabel(desc.name, desc.id.0 as usize),
                    " resets"
                );
                true
            }
            Phase::Zero if crate::config::HEALTH => {
                self.fill(desc, desc.memory.ipa, desc.memory.size as usize, 0)
            }
            Phase::Quiesce | Phase::EndLine | Phase::Zero => true,
            Phase::Flash => desc
                .flash
                .is_none_or(|flash| self.fill(desc, flash.ipa, flash.size as usize, 0xff)),
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
                    // Parts, not a template: the line is made in the step's masked stretch.
                    VmLabel(desc.name, desc.id.0 as usize),
                    " reloaded: ",
                    self.bytes,
                    " bytes in ",
                    self.steps,
                    " steps over ",
                    micros,
                    " us"
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
                Phase::Quiesce => Phase::EndLine,
                Phase::EndLine => Phase::Zero,
                Phase::Announce | Phase::Zero => Phase::Flash,
                Phase::Report | Phase::Done => Phase::Done,
            };
            self.offset = 0;
        }
        false
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

    /// Fills the next chunk of `[ipa, ipa + size)` with `value`; whether all of it is filled.
    fn fill(&mut self, desc: &VmDesc, ipa: GuestPhysAddr, size: usize, value: u8) -> bool {
        let end = size.min(self.offset + STEP_BYTES);
        let at = GuestPhysAddr(ipa.0 + self.offset as u64);
        if let Some(bytes) = vm::guest_bytes(desc, at, end - self.offset) {
            fill_bytes(bytes, value);
            cpu::clean_to_poc(bytes.as_ptr() as usize, bytes.len());
        }
        self.offset = end;
        end == size
    }
}

/// Fills `bytes` with `value`, 16 bytes a store where they are 16-byte aligned (a page of a
/// reload's step is): stated here, so that the compiler's choice of a fill loop does not
/// hang on what it can prove of the slice's address where it was made (a test of the VM's
/// colours in `vm::guest_bytes` made each step 66 instructions longer).
#[inline(never)]
fn fill_bytes(bytes: &mut [u8], value: u8) {
    // SAFETY: every bit pattern is a valid u8 and a valid u128, so viewing the aligned middle
    // of the slice as u128s is sound; the three parts cover the slice exactly once.
    let (head, middle, tail) = unsafe { bytes.align_to_mut::<u128>() };
    head.fill(value);
    middle.fill(u128::from_ne_bytes([value; 16]));
    tail.fill(value);
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
        vm::entry(&SEED_OFFSETS, desc.id.0 as usize).get(n),
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

/// Stops VM `id` after a fault (or by its policy, or at a manager's request), with Keel's
/// diagnostic line, limited per VM (a manager can stop and start its VM over and over).
pub fn stop(id: usize, reason: &dyn Show) {
    let desc = vm::desc(id);
    if vm::vm(id).end(VmState::Stopped) {
        trace::record(
            trace::Kind::VmStop,
            id,
            0,
            trace::StopReason::Fault as u8,
            0,
        );
        let parts: [&dyn Show; 3] = [&VmLabel(desc.name, id), &" stopped: ", &reason];
        if crate::config::HEALTH {
            // Made in steps: a fault's line is long, and made with interrupts masked (the
            // callers, a trap or a timer's health event, may serve interrupts meanwhile).
            console::line_in_steps(DiagnosticKind::Stop, id, &parts, irq::serve_here);
        } else {
            // Without health monitoring, as before it (and the image without the steps' code).
            console::limited_line(DiagnosticKind::Stop, id, &parts);
        }
        after_vm_ended(id);
    }
}

/// VM `id` powered itself off (its line limited as a stop's: a manager can start it again).
pub fn power_off(id: usize) {
    if vm::vm(id).end(VmState::Off) {
        trace::record(
            trace::Kind::VmStop,
            id,
            0,
            trace::StopReason::PowerOff as u8,
            0,
        );
        keel_println_limited!(
            DiagnosticKind::Stop,
            id,
            VmLabel(vm::desc(id).name, id),
            " powered off"
        );
        after_vm_ended(id);
    }
}

/// Begins restarting VM `id` from its pristine image (PSCI SYSTEM_RESET, from any of its
/// vCPUs): every vCPU stops (a newer generation), its tasks are forgotten, and once none of
/// them runs guest code any more (each parks at its next exit, the kick making that at once)
/// the reload may begin: [`reload_step`] until it says done, then [`reset_finish`]. Returns
/// false if a reset is already under way (the caller just parks).
pub fn reset_begin(id: usize) -> bool {
    let vm = vm::vm(id);
    // SeqCst with `may_enter`: either a vCPU about to enter sees the flag, or this sees its
    // `in_guest` and waits for it.
    if !vm.begin_reset() {
        return false;
    }
    trace::record(trace::Kind::VmReset, id, 0, 0, 0);
    let desc = vm::desc(id);
    for vcpu in 0..vm::vcpu_count(desc) {
        vm.set_vcpu_power(vcpu, VcpuPower::Off);
    }
    ipc::clear_vm(id);
    vm::set_watchdog_expiry(id, None);
    vm::this_cpu().in_guest.store(false, Ordering::Release);
    vm::kick_vm(id);
    wait_until_stopped(id);
    vm::forget_tasks(id);
    *vm::entry(&RELOADS, id).lock_cold() = Reload::START;
    true
}

/// Restarts VM `id` from its pristine image, from anywhere but its own vCPUs' traps (a health
/// action, a manager), whatever its state: a new generation (its vCPUs stop at their next
/// exit, the kick making that at once), its messages forgotten, its watchdog disarmed, and the
/// reload left to its vCPU 0's pCPU ([`take_restart_here`] on a pinned pCPU, the scheduler's
/// reload on a shared one), which runs it in bounded steps and starts vCPU 0 afresh; the VM
/// runs again even if it had ended. A reset or restart already under way: nothing more.
pub fn restart(id: usize) {
    let vm = vm::vm(id);
    if !vm.begin_restart() {
        return;
    }
    trace::record(trace::Kind::VmReset, id, 0, 1, 0);
    let desc = vm::desc(id);
    for vcpu in 0..vm::vcpu_count(desc) {
        vm.set_vcpu_power(vcpu, VcpuPower::Off);
    }
    ipc::clear_vm(id);
    vm::set_watchdog_expiry(id, None);
    *vm::entry(&RELOADS, id).lock_cold() = Reload::RESTART;
    // Only now may its vCPU 0's pCPU take the reload: it finds the state just set.
    vm.hand_reload();
    // Every pCPU of it, its vCPU 0's too even when that is this one: a pinned one parks at the
    // kick and takes the reload in its idle loop.
    vm::kick_vm(id);
    vm::kick_pcpu(vm::home_pcpu(id), id);
}

/// On a pinned pCPU running vCPU 0 of VM `id` (parked): takes a restart's reload if one is
/// pending and runs it here ([`reload_here`]). Whether it did.
pub fn take_restart_here(id: usize) -> bool {
    if !vm::vm(id).take_reload() {
        return false;
    }
    reload_here(id);
    true
}

/// One bounded step of reloading VM `id` (being reset); returns whether the reload is
/// complete.
pub fn reload_step(id: usize) -> bool {
    vm::entry(&RELOADS, id)
        .lock_cold()
        .step(vm::desc(id), vm::vm(id).generation())
}

/// Ends the reset of VM `id` once reloaded (its devices too): vCPU 0 pending to start at the
/// image's entry on its own pCPU (unless the VM ended meanwhile).
pub fn reset_finish(id: usize) {
    let vm = vm::vm(id);
    let desc = vm::desc(id);
    // A CPU_ON made by a vCPU of the old generation before it stopped is dropped.
    for vcpu in 0..vm::vcpu_count(desc) {
        vm.set_vcpu_power(vcpu, VcpuPower::Off);
    }
    vm.end_reset();
    if vm.state() == VmState::Running {
        // Cannot fail: every vCPU was just turned off.
        let _ = vm.request_start(0, desc.image_ipa.0, desc.dtb_ipa.0);
        vm::kick_vcpu(id, 0);
    }
}

/// Reloads VM `id` (its reset begun) on a pinned pCPU, which has nothing else to run: the
/// steps run here, with the interrupts that arrive meanwhile served after each step, then
/// the reset ends. The caller parks. Served after the last step too: the vCPU's start that
/// follows (its line included) is a masked stretch of its own, not one with the last step's
/// (the `reloaded` line).
pub fn reload_here(id: usize) {
    vm::masked().at(MaskedSite::Reload);
    loop {
        let done = reload_step(id);
        let _ = irq::serve_between_steps(MaskedSite::Reload);
        if done {
            break;
        }
    }
    reset_finish(id);
}

/// Waits until no pCPU runs guest code of VM `id` (its vCPUs were kicked and stop at their
/// next exit, which the kick forces). No lock is held meanwhile.
fn wait_until_stopped(id: usize) {
    for cpu in vm::configured_pcpus() {
        while cpu.in_guest.load(Ordering::SeqCst) && cpu.vm.load(Ordering::Relaxed) == id {
            cpu::spin_wait();
        }
    }
}

fn after_vm_ended(id: usize) {
    vm::forget_tasks(id);
    vm::set_watchdog_expiry(id, None);
    // Its devices' interrupts off (and none left active), and their DMA cut off, until it
    // runs again.
    irq::reset_device_interrupts(id);
    if let Err(error) = iommu::set_vm_streams(id, false, irq::serve_here) {
        keel_println_limited!(
            DiagnosticKind::Smmu,
            id,
            VmLabel(vm::desc(id).name, id),
            ": SMMU: ",
            error
        );
    }
    vm::kick_vm(id);
    let all_ended = (0..SYSTEM.vms.len()).all(|other| vm::vm(other).state() != VmState::Running);
    if all_ended {
        // Said once (the machine powers off), limited as any line a guest's action causes.
        keel_println_limited!(
            DiagnosticKind::Stop,
            NO_VM,
            "all VMs have ended: powering off"
        );
        console::flush_before_power_off();
        psci::system_off();
    }
}
