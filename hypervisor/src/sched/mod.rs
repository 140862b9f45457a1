//! What runs on each pCPU. A pinned pCPU runs its one vCPU ([`pinned`]: start, park, idle);
//! a shared pCPU runs the loop here that picks a vCPU and runs it, switches between vCPU
//! contexts, and feeds events to the portable scheduler ([`keel_core::sched`]); the task
//! services place real-time tasks on shared pCPUs ([`tasks`]).
//!
//! Ownership: a shared pCPU's [`SharedCpu`] (its scheduler and the contexts of the vCPUs
//! placed on it) is owned by that pCPU; other pCPUs reach its vCPUs by a kick SGI
//! ([`crate::vm::kick_vcpu`]), except that a task service ([`tasks`]) locks the `SharedCpu`
//! of the task's pCPU for the few hundred instructions of a create, launch, delete or stats,
//! and kicks it after. Lock order (the crate's [lock order](crate#lock-order)): a VM's task
//! table ([`crate::vm::task_table`]), then a pCPU's `SharedCpu`, then a VM's device lock, a
//! message queue's lock ([`crate::ipc`]), a health record's or the console's. None is held
//! while entering a guest or waiting for an interrupt; a pCPU holds its own `SharedCpu` only
//! in short bounded sections.
//!
//! Exits are handled in place, on the running slot's own stack (below its frame). An exit
//! that gives the pCPU away ([`give_away`]: WFI, KEEL_YIELD, KEEL_TASK_WAIT) or after which
//! the scheduler picks another vCPU ([`reschedule`]: a deadline, a kick) asks the scheduler once; a vCPU
//! picked again resumes with nothing saved or restored, another one is switched in as the
//! trap returns ([`switch_in_place`]: the running context saved, the next one loaded, and the
//! trap returns through the next one's frame), and with none to run the pCPU waits in the
//! [`run_loop`], which enters the next one ([`enter`]). Each slot has an EL2 stack of its own
//! whose top is its frame ([`SlotStack`]), so that no switch copies general registers. A vCPU
//! that resets its VM gives its slot to the reload's bounded steps ([`reload`]), which the
//! scheduler runs and preempts like guest code.

pub mod pinned;
pub mod tasks;

use core::cell::UnsafeCell;
use core::sync::atomic::Ordering;

use keel_core::sched::{Decision, Journal, Scheduler, Stats, MAX_SLOTS};
use keel_core::table::{at, at_mut};

use crate::arch::boot::MAX_CPUS;
use crate::arch::context::VcpuContext;
use crate::arch::cpu::{self, Mutex};
use crate::arch::vectors::{self, GuestRegs};
use crate::arch::{gic, guest, timer};
use crate::config::SYSTEM;
use crate::console::Boot;
use crate::timers;
use crate::trace::{self, SwitchReason};
use crate::vm::{self, VmState};
use crate::{irq, keel_println, lifecycle};

/// A vCPU placed on a shared pCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Placed {
    vm: usize,
    vcpu: usize,
}

/// The per-slot conditions of a shared pCPU that its switch path tests (bits of
/// [`SharedCpu::flags`]); a slot loaded with none set takes the fast path.
struct Flags;

impl Flags {
    /// Started since its last load: its VMID's TLB entries are cleaned first.
    const FRESH: u8 = 1 << 0;
    /// Switched out and may have been sent interrupts (an SGI, an SPI) since it left: its
    /// list registers are brought up to date from the vGIC when it next runs.
    const NEEDS_SYNC: u8 = 1 << 1;
    /// Its VM is being reset by it: instead of guest code it runs the steps of the VM's
    /// reload ([`reload`]), in its own time, until it is complete.
    const RELOADING: u8 = 1 << 2;
    /// A task deleted while running here: it stops at its next exit (the deleter's kick forces
    /// one) and its slot is freed then.
    const DOOMED: u8 = 1 << 3;
    /// Waiting in KEEL_MSG_RECV: a message queued for it wakes it too, and so does its
    /// `wake_at`.
    const RECEIVING: u8 = 1 << 4;
    /// It is [`SharedCpu::fp_owner`]: it runs with FP/SIMD untrapped. Kept by a load (the
    /// others are seen to there).
    const FP_OWNER: u8 = 1 << 5;
}

const _: () = assert!(
    MAX_SLOTS < u8::MAX as usize,
    "SharedCpu::slots holds slot + 1 in a u8"
);

/// What a shared pCPU owns.
struct SharedCpu {
    scheduler: Scheduler,
    placed: [Option<Placed>; MAX_SLOTS],
    contexts: [VcpuContext; MAX_SLOTS],
    /// The VM generation each slot was started in.
    generations: [u32; MAX_SLOTS],
    /// The slot whose state is on the pCPU.
    loaded: Option<usize>,
    /// The slot that last ran here (its VMID and EL1 TLB entries may still be cached; 0 before
    /// any ran, as if slot 0 of VM 0 had: a guess that can only cost a needless TLB clean,
    /// never a missing one; `usize::MAX`: none, after its task went).
    last: usize,
    /// The VM of `last`.
    last_vm: usize,
    /// The slot whose FP/SIMD registers the pCPU holds.
    fp_owner: Option<usize>,
    /// Slots started (powered on) and not stopped since.
    started: u32,
    /// Slots that gave the pCPU away to wait for an interrupt, and have not run since: the
    /// ones whose virtual timer the timer queue watches.
    waiting: u32,
    /// Each slot's timer fast-path cache ([`vm::PerCpu::timer_lr`] and its value), kept with
    /// its list registers while it is switched out.
    timer_lr: [(u64, u64); MAX_SLOTS],
    /// Each slot's [`Flags`]: what its next load must see to besides loading it (one byte
    /// read by the switch for all of them).
    flags: [u8; MAX_SLOTS],
    /// The address of each slot's frame ([`frame_ptr`] on this pCPU, exposed), set by [`init`]:
    /// the switch reads it instead of computing it.
    frames: [usize; MAX_SLOTS],
    /// For each slot in `receiving`, when its wait ends (counter ticks; `u64::MAX`: never);
    /// meaningless for the others.
    wake_at: [u64; MAX_SLOTS],
    /// The slot (plus one; 0: none) of each vCPU placed here, by VM and vCPU: the index of
    /// `placed`.
    slots: [[u8; vm::MAX_VCPUS]; vm::MAX_VMS],
}

impl SharedCpu {
    const fn new() -> Self {
        Self {
            scheduler: Scheduler::new(keel_core::sched::Policy::Pinned),
            placed: [None; MAX_SLOTS],
            slots: [[0; vm::MAX_VCPUS]; vm::MAX_VMS],
            contexts: [VcpuContext::EMPTY; MAX_SLOTS],
            generations: [0; MAX_SLOTS],
            loaded: None,
            last: 0,
            last_vm: 0,
            fp_owner: None,
            started: 0,
            waiting: 0,
            flags: [0; MAX_SLOTS],
            // Zero, like everything else here, so the table lives in .bss: read only for
            // slots in `receiving`, which are given theirs when they enter it.
            wake_at: [0; MAX_SLOTS],
            timer_lr: [(0, 0); MAX_SLOTS],
            frames: [0; MAX_SLOTS],
        }
    }

    fn is_started(&self, slot: usize) -> bool {
        self.started & (1 << slot) != 0
    }

    /// Whether `slot` has every bit of `flag` ([`Flags`]).
    fn has(&self, slot: usize, flag: u8) -> bool {
        *at(&self.flags, slot) & flag != 0
    }

    fn set(&mut self, slot: usize, flag: u8) {
        *at_mut(&mut self.flags, slot) |= flag;
    }

    fn clear(&mut self, slot: usize, flag: u8) {
        *at_mut(&mut self.flags, slot) &= !flag;
    }

    /// `slot` becomes the owner of this pCPU's FP/SIMD registers.
    fn own_fp(&mut self, slot: usize) {
        if let Some(owner) = self.fp_owner {
            self.clear(owner, Flags::FP_OWNER);
        }
        self.fp_owner = Some(slot);
        self.set(slot, Flags::FP_OWNER);
    }

    /// `slot`'s FP/SIMD registers, if the pCPU holds them, are forgotten (it stops or starts
    /// afresh).
    fn forget_fp(&mut self, slot: usize) {
        if self.fp_owner == Some(slot) {
            self.fp_owner = None;
        }
        self.clear(slot, Flags::FP_OWNER);
    }

    /// The slot of vCPU `vcpu` of VM `vm`, if it is placed here: from `slots`, kept by
    /// [`SharedCpu::place`] (a wake by a message looks it up at every send).
    fn slot_of(&self, vm: usize, vcpu: usize) -> Option<usize> {
        match self.slots.get(vm).and_then(|vcpus| vcpus.get(vcpu)) {
            Some(&entry) => usize::from(entry).checked_sub(1),
            // Beyond the table (no configuration places one there): the placements themselves.
            None => self
                .placed
                .iter()
                .position(|placed| *placed == Some(Placed { vm, vcpu })),
        }
    }

    /// Places `placed` in `slot` (None: empties it), in `placed` and in `slots`. What `slot`
    /// held before is forgotten in `slots` only if it is still there: a task deleted while it
    /// ran, and emptied at its kick, must not take the entry of the task created since with
    /// its index.
    fn place(&mut self, slot: usize, placed: Option<Placed>) {
        if let Some(old) = *at(&self.placed, slot) {
            if let Some(entry) = self.slots.get_mut(old.vm).and_then(|v| v.get_mut(old.vcpu)) {
                if usize::from(*entry) == slot + 1 {
                    *entry = 0;
                }
            }
        }
        if let Some(new) = placed {
            if let Some(entry) = self.slots.get_mut(new.vm).and_then(|v| v.get_mut(new.vcpu)) {
                *entry = slot as u8 + 1;
            }
        }
        self.placed[slot] = placed;
    }

    /// Whether `slot` holds a real-time task (a vCPU beyond its VM's configured ones) that
    /// must go: deleted, or its VM ended or was reset since it was created.
    fn task_gone(&self, slot: usize) -> bool {
        let Some(Placed { vm: id, vcpu }) = *at(&self.placed, slot) else {
            return false;
        };
        let vm = vm::vm(id);
        vcpu >= vm::desc(id).pcpus.len()
            && (self.has(slot, Flags::DOOMED)
                || vm.state() != VmState::Running
                || vm.generation() != self.generations[slot])
    }

    /// Frees a task's slot at `now` (it is not loaded): its interrupts and FP state are
    /// dropped, the scheduler forgets it, and the next create may reuse the slot. A task
    /// deleted while it ran (doomed) was marked off by its delete, and its vCPU may be a new
    /// task's by now: its power is left as it is.
    fn remove_task(&mut self, slot: usize, now: u64) {
        let Some(Placed { vm: id, vcpu }) = *at(&self.placed, slot) else {
            return;
        };
        let doomed = self.has(slot, Flags::DOOMED);
        discard_saved(self, slot);
        self.scheduler.remove(slot, now);
        let keep = !(1u32 << slot);
        self.started &= keep;
        self.waiting &= keep;
        self.flags[slot] = 0;
        self.place(slot, None);
        if self.last == slot {
            self.last = usize::MAX;
        }
        if !doomed {
            vm::vm(id).set_vcpu_power(vcpu, vm::VcpuPower::Off);
        }
    }
}

static SHARED: [Mutex<SharedCpu>; MAX_CPUS] = [const { Mutex::new(SharedCpu::new()) }; MAX_CPUS];

fn this_shared() -> &'static Mutex<SharedCpu> {
    &SHARED[cpu::index()]
}

/// The size of the EL2 stack of a slot of a shared pCPU, below its frame: a trap's handlers,
/// the scheduler, and the run loop when the slot gave the pCPU away, run on it.
const SLOT_STACK_SIZE: usize = 16 * 1024;

/// The EL2 stack of a slot of a shared pCPU, the slot's general registers (its frame) in its
/// top 256 bytes: a vCPU runs with its stack pointer just above them, so that a trap saves
/// them in place and its return restores them from there ([`crate::arch::vectors`]). A
/// switch moves no general register: the trap returns through the next vCPU's frame.
#[repr(C, align(16))]
struct SlotStack {
    stack: [u8; SLOT_STACK_SIZE],
    frame: GuestRegs,
}

/// Every slot's stack and frame, per pCPU (all zero: in .bss). Ownership: a slot's frame is
/// its pCPU's. While the slot is loaded it is the trap's frame (the vectors and the handlers'
/// `&mut GuestRegs`); otherwise it is written only by a holder of its pCPU's `SharedCpu` lock
/// (a start, a task create from another pCPU) or by its pCPU as it switches the slot in,
/// before the guest runs ([`loaded_frame`]). The stack is used only through the stack pointer.
struct SlotStacks(UnsafeCell<[[SlotStack; MAX_SLOTS]; MAX_CPUS]>);

// SAFETY: see the ownership rules above; nothing in it is reached through a shared reference.
unsafe impl Sync for SlotStacks {}

static SLOT_STACKS: SlotStacks = SlotStacks(UnsafeCell::new(
    [const {
        [const {
            SlotStack {
                stack: [0; SLOT_STACK_SIZE],
                frame: GuestRegs::ZERO,
            }
        }; MAX_SLOTS]
    }; MAX_CPUS],
));

/// The frame of `slot` on pCPU `pcpu` (panics out of range). Only a pointer: who may use it
/// is said at [`SlotStacks`].
fn frame_ptr(pcpu: usize, slot: usize) -> *mut GuestRegs {
    assert!(pcpu < MAX_CPUS && slot < MAX_SLOTS, "no such slot");
    // SAFETY: in bounds (checked above); a raw pointer to a field, no reference is made.
    unsafe {
        let stacks = SLOT_STACKS.0.get().cast::<SlotStack>();
        &raw mut (*stacks.add(pcpu * MAX_SLOTS + slot)).frame
    }
}

/// The frame of `slot`, just loaded on this pCPU, for the switch-in's own use before the guest
/// runs (completing its wait in KEEL_MSG_RECV, entering it).
fn loaded_frame(slot: usize) -> &'static mut GuestRegs {
    // SAFETY: `slot` is loaded here (the caller's load succeeded), so its frame is this pCPU's
    // alone (no other pCPU writes a loaded slot's frame), and no reference to it lives: the
    // trap being handled, if any, is the previous vCPU's (a switch is to another slot), or was
    // abandoned with its stack (the run loop never returns into it).
    unsafe { &mut *frame_ptr(cpu::index(), slot) }
}

/// Gives slot `slot` of pCPU `pcpu` its start registers, all zero but x0. The caller holds
/// that pCPU's `SharedCpu` lock (`_locked`), and the slot is not loaded.
fn start_frame(_locked: &mut SharedCpu, pcpu: usize, slot: usize, x0: u64) {
    // SAFETY: the slot is not loaded and its pCPU's lock is held: nothing else writes or reads
    // its frame now (see SlotStacks).
    let frame = unsafe { &mut *frame_ptr(pcpu, slot) };
    frame.zero();
    frame.x[0] = x0;
}

/// Converts configuration nanoseconds into counter ticks: `(numerator, denominator)`.
fn ticks_per_ns() -> (u64, u64) {
    (timer::frequency(), 1_000_000_000)
}

/// Sets up pCPU `index`'s scheduler with the vCPUs the configuration places on it, at its
/// bring-up (`boot`: a vCPU the scheduler cannot take is said there).
pub fn init(index: usize, boot: Boot) {
    let (numerator, denominator) = ticks_per_ns();
    let mut shared = at(&SHARED, index).lock_cold();
    let policy = at(SYSTEM.policies, index).scaled(numerator, denominator);
    // The switch cost admission charged, so that a preempting vCPU pays for the preempted
    // one's resumption and every admitted job keeps its budget.
    let switch_cost = keel_core::sched::scale(SYSTEM.switch_cost_ns, numerator, denominator);
    shared.scheduler = Scheduler::with_switch_cost(policy, switch_cost);
    for (slot, frame) in shared.frames.iter_mut().enumerate() {
        *frame = frame_ptr(index, slot).expose_provenance();
    }
    for (vm_index, desc) in SYSTEM.vms.iter().enumerate() {
        for (vcpu, &pcpu) in desc.pcpus.iter().enumerate() {
            if pcpu as usize != index {
                continue;
            }
            let params = desc.sched[vcpu].scaled(numerator, denominator);
            match shared.scheduler.add(params) {
                Ok(slot) => shared.place(slot, Some(Placed { vm: vm_index, vcpu })),
                Err(error) => keel_println!(
                    boot,
                    "pCPU ",
                    index,
                    ": vm '",
                    desc.name,
                    "' vCPU ",
                    vcpu,
                    " not scheduled: ",
                    error
                ),
            }
        }
    }
}

/// The run loop of a shared pCPU: take start requests and wake-ups, ask the scheduler, run
/// the vCPU it picks (never returns from that: the vCPU's exits come back through the
/// vectors), or wait for an interrupt when it picks none. Entered with no vCPU loaded.
pub fn run_loop() -> ! {
    loop {
        let next = decide(&mut this_shared().lock(), timer::now());
        if let Some(slot) = next {
            enter(slot);
        }
        vm::masked().end();
        cpu::wait_for_interrupt();
        vm::masked().begin(keel_core::abi::MaskedSite::Idle);
        irq::handle_pending();
    }
}

/// Why a slot the scheduler picked cannot be entered, and where the pCPU goes instead.
enum Elsewhere {
    /// Nothing to enter (the slot is empty, or its VM ended or is being reset and the kick
    /// saying so is not handled yet): the run loop.
    RunLoop,
    /// The slot runs its VM's reload ([`run_reload`]).
    Reload { slot: usize, vm: usize },
}

impl Elsewhere {
    fn go(self) -> ! {
        match self {
            // A poll point: a VM's slots that stop one per pass (a restart) are not entered,
            // and each pass of the run loop after it is a masked stretch of its own.
            Elsewhere::RunLoop => {
                irq::serve_here();
                run_loop()
            }
            Elsewhere::Reload { slot, vm } => run_reload(slot, vm),
        }
    }
}

/// Restores `slot`'s context on this pCPU and enters it on its own stack.
fn enter(slot: usize) -> ! {
    let (mut pc, pstate, receiving) = {
        let mut guard = this_shared().lock();
        let shared = &mut *guard;
        let receiving = match load(shared, slot, false) {
            Ok(receiving) => receiving,
            Err(elsewhere) => {
                drop(guard);
                elsewhere.go()
            }
        };
        let context = &shared.contexts[slot];
        (
            context.pc,
            context.pstate,
            receiver(shared, slot, receiving),
        )
    };
    let frame = loaded_frame(slot);
    if let Some((id, vcpu)) = receiving {
        if crate::messages::complete_waiting_receive(id, vcpu, frame) {
            pc += 4;
        }
    }
    let stack_top = core::ptr::from_mut(frame) as u64 + core::mem::size_of::<GuestRegs>() as u64;
    vectors::resume_guest(frame, pc, pstate, stack_top, vm::end_masked)
}

/// Switches from the running vCPU to `next` as the trap being handled returns: the running one
/// is saved (its general registers stay in its frame), `next`'s context loaded, and the trap
/// returns through `next`'s frame ([`vectors::set_return_frame`]). One lock, and one call
/// that saves the running vCPU and loads `next`.
#[inline(always)]
fn switch_in_place(mut guard: cpu::MutexGuard<'_, SharedCpu>, next: usize) {
    let shared = &mut *guard;
    let receiving = match load(shared, next, true) {
        Ok(receiving) => receiving,
        Err(elsewhere) => {
            drop(guard);
            elsewhere.go()
        }
    };
    let context = &shared.contexts[next];
    vectors::set_return(context.pc, context.pstate);
    if let Some((id, vcpu)) = receiver(shared, next, receiving) {
        drop(guard);
        if crate::messages::complete_waiting_receive(id, vcpu, loaded_frame(next)) {
            vectors::skip_instruction();
        }
    }
}

/// The VM and vCPU of `slot` if it was `receiving` (see [`load`]).
#[inline(always)]
fn receiver(shared: &SharedCpu, slot: usize, receiving: bool) -> Option<(usize, usize)> {
    if !receiving {
        return None;
    }
    shared.placed[slot].map(|placed| (placed.vm, placed.vcpu))
}

/// Loads `slot`'s context onto this pCPU (all but its general registers and return state),
/// or says where the pCPU goes instead. `switching`: the running vCPU, if any, is saved first
/// (the switch path: this pCPU's [`vm::PerCpu`] is then written once, for `slot`); otherwise
/// none is loaded. Returns whether `slot` was waiting in KEEL_MSG_RECV (the caller completes
/// the call once the lock is released: [`receiver`]).
#[inline(always)]
fn load(shared: &mut SharedCpu, slot: usize, switching: bool) -> Result<bool, Elsewhere> {
    let cpu = vm::this_cpu();
    let redistributor = cpu.redistributor.get();
    if switching {
        if let Some(running) = shared.loaded.take() {
            save_context(shared, running, cpu, redistributor);
        }
    }
    let Some(placed) = *at(&shared.placed, slot) else {
        leave_guest(cpu);
        return Err(Elsewhere::RunLoop);
    };
    let flags = shared.flags[slot];
    if flags & Flags::RELOADING != 0 {
        leave_guest(cpu);
        return Err(Elsewhere::Reload {
            slot,
            vm: placed.vm,
        });
    }
    let vm = vm::vm(placed.vm);
    cpu.vm.store(placed.vm, Ordering::Relaxed);
    cpu.in_guest.store(true, Ordering::SeqCst);
    if !vm.enterable_in(shared.generations[slot]) || flags & Flags::DOOMED != 0 {
        // Its VM ended or is being reset, and the kick saying so is not handled yet.
        leave_guest(cpu);
        vm::mark_kicked_here(placed.vm);
        return Err(Elsewhere::RunLoop);
    }
    let bit = 1 << slot;
    let same_vm_other_vcpu = shared.last != slot && shared.last_vm == placed.vm;
    let context = &shared.contexts[slot];
    if let Some(redistributor) = redistributor.filter(|_| !cpu.vtimer_on.load(Ordering::Relaxed)) {
        redistributor.enable_private(keel_core::abi::layout::VTIMER_INTID);
        cpu.vtimer_on.store(true, Ordering::Relaxed);
    }
    if flags & Flags::FRESH != 0 {
        context.restore(redistributor, false);
        crate::arch::stage2::install(
            vm::desc(placed.vm).id.0 + 1,
            vm::vm(placed.vm).stage2_root(),
        );
    } else {
        context.restore(redistributor, same_vm_other_vcpu);
    }
    guest::set_fp_trap(flags & Flags::FP_OWNER == 0);
    let (timer_lr, timer_lr_value) = shared.timer_lr[slot];
    cpu.timer_lr_value.store(timer_lr_value, Ordering::Relaxed);
    cpu.timer_lr.store(timer_lr, Ordering::Relaxed);
    cpu.listed
        .store(context.interface.listed, Ordering::Relaxed);
    cpu.generation
        .store(shared.generations[slot], Ordering::Relaxed);
    cpu.vcpu.store(placed.vcpu, Ordering::Relaxed);
    vectors::set_return_frame(core::ptr::with_exposed_provenance_mut(shared.frames[slot]));
    shared.loaded = Some(slot);
    trace::record(trace::Kind::SwitchIn, placed.vm, placed.vcpu, 0, 0);
    shared.last = slot;
    shared.last_vm = placed.vm;
    shared.waiting &= !bit;
    // FRESH, RECEIVING and NEEDS_SYNC are seen to here; RELOADING and DOOMED returned above.
    shared.flags[slot] = flags & Flags::FP_OWNER;
    if flags & Flags::NEEDS_SYNC != 0 {
        irq::sync_list_registers();
    }
    let timer = &shared.contexts[slot].timer;
    if !timer.physical_active() && timer.deadline().is_some_and(|at| at <= timer::now()) {
        // Its virtual timer expired while it was out: listed now, not by a second exception.
        irq::list_expired_timer();
    }
    Ok(flags & Flags::RECEIVING != 0)
}

/// Saves the running vCPU into its context (its general registers stay in its frame) and
/// leaves the pCPU with none loaded. Returns the slot that was loaded.
fn save_running(shared: &mut SharedCpu) -> Option<usize> {
    let slot = shared.loaded.take()?;
    let cpu = vm::this_cpu();
    save_context(shared, slot, cpu, cpu.redistributor.get());
    leave_guest(cpu);
    Some(slot)
}

/// Saves the context of `slot`, the vCPU on this pCPU (`cpu`, whose `redistributor` it is),
/// taken out of `loaded`.
#[inline(always)]
fn save_context(
    shared: &mut SharedCpu,
    slot: usize,
    cpu: &vm::PerCpu,
    redistributor: Option<&gic::Redistributor>,
) {
    let listed = cpu.listed.load(Ordering::Relaxed);
    at_mut(&mut shared.contexts, slot).save(redistributor, listed);
    shared.timer_lr[slot] = (
        cpu.timer_lr.load(Ordering::Relaxed),
        cpu.timer_lr_value.load(Ordering::Relaxed),
    );
}

/// This pCPU runs no vCPU's guest code until the next load.
fn leave_guest(cpu: &vm::PerCpu) {
    cpu.in_guest.store(false, Ordering::SeqCst);
    cpu.vm.store(usize::MAX, Ordering::Relaxed);
    cpu.listed.store(0, Ordering::Relaxed);
}

/// The running vCPU gives the pCPU away: WFI with nothing pending, or KEEL_YIELD. A
/// real-time vCPU's job is complete; it waits for an interrupt or its next release. A
/// best-effort vCPU that yields (`yielding`) goes behind the others and runs again
/// when its turn comes. Returns when the trap is to return into a vCPU (the same one, or
/// the next one switched in: [`vectors::set_return_frame`]).
pub fn give_away(yielding: bool) {
    give_away_waiting(yielding, None)
}

/// The running vCPU waits in KEEL_MSG_RECV: it gives the pCPU away as for WFI, and a message
/// for it or the counter reaching `until` wakes it too.
pub fn give_away_until(until: u64) {
    give_away_waiting(false, Some(until))
}

fn give_away_waiting(yielding: bool, message_until: Option<u64>) {
    // Only a shared pCPU's exits come here: in a system without one, this (and with it the
    // scheduler and the switch) is left out of the image.
    if !vm::SHARED_PCPUS {
        return;
    }
    let mut guard = this_shared().lock();
    let shared = &mut *guard;
    let now = timer::now();
    let Some(slot) = shared.loaded else {
        let next = decide(shared, now);
        drop(guard);
        switch_to(next)
    };
    let bit = 1 << slot;
    // A running vCPU is never RECEIVING: its load (or its pick again below) cleared it.
    if let Some(until) = message_until {
        shared.set(slot, Flags::RECEIVING);
        *at_mut(&mut shared.wake_at, slot) = until;
    }
    let requeue = yielding && !shared.scheduler.has_reservation(slot);
    if !requeue {
        shared.waiting |= bit;
        // The timer queue ([`program`]) watches it from now on, before the switch saves it:
        // with the virtual timer it set just now, not the one it had when it last left.
        at_mut(&mut shared.contexts, slot).timer.capture();
    }
    let reason = if yielding {
        SwitchReason::Yielded
    } else {
        SwitchReason::Waiting
    };
    if vm::is_stale() {
        // The world changed (a kick): the scheduler hears of it ([`refresh`]) with this vCPU
        // saved, as one switched out.
        trace_switch_out(shared, reason);
        shared.scheduler.block(slot, now);
        if requeue {
            shared.scheduler.wake(slot, now);
        }
        save_running(shared);
        let next = decide(shared, now);
        drop(guard);
        switch_to(next)
    }
    // One call: the scheduler completes the job (or requeues it) and decides.
    let decision = shared.scheduler.give_away(slot, now, requeue);
    program(shared, decision);
    match decision.run {
        // Picked again: nothing to save or restore.
        Some(next) if next == slot => {
            shared.waiting &= !bit;
            shared.clear(slot, Flags::RECEIVING);
        }
        Some(next) => {
            trace_switch_out(shared, reason);
            switch_in_place(guard, next)
        }
        None => {
            trace_switch_out(shared, reason);
            save_running(shared);
            drop(guard);
            run_loop()
        }
    }
}

/// Takes what changed ([`refresh`]), asks the scheduler, and arms the timer queue for its
/// answer: the slot to run next, if any.
fn decide(shared: &mut SharedCpu, now: u64) -> Option<usize> {
    refresh(shared, now);
    let decision = shared.scheduler.decide(now);
    program(shared, decision);
    decision.run
}

/// Enters `next`, or waits in the run loop if the scheduler picked none. The running vCPU,
/// if any, was saved.
fn switch_to(next: Option<usize>) -> ! {
    match next {
        Some(slot) => enter(slot),
        None => run_loop(),
    }
}

/// Something may have changed what should run (a deadline passed, a vCPU here was woken or
/// started): asks the scheduler and, if it picks another vCPU, switches to it (as the trap
/// returns, when a vCPU is running). Returns when the trap is to return into a vCPU.
/// `unsynced`: the running vCPU's list registers are behind its vGIC (its caller was to bring
/// them up to date after this call): if it is switched out, that is done when it next runs.
pub fn reschedule(unsynced: bool) {
    // As in `give_away_waiting`: only a shared pCPU comes here.
    if !vm::SHARED_PCPUS {
        return;
    }
    let mut guard = this_shared().lock();
    let shared = &mut *guard;
    if shared
        .loaded
        .is_some_and(|slot| shared.has(slot, Flags::DOOMED))
    {
        // A task deleted by another pCPU while it ran here.
        drop(guard);
        pinned::park_deleted();
    }
    let now = timer::now();
    refresh(shared, now);
    let decision = shared.scheduler.decide(now);
    program(shared, decision);
    match (shared.loaded, decision.run) {
        (Some(loaded), Some(next)) if loaded == next => {}
        (loaded, next) => {
            if loaded.is_some() {
                trace_switch_out(shared, SwitchReason::Preempted);
            }
            if let Some(slot) = loaded.filter(|_| unsynced) {
                shared.set(slot, Flags::NEEDS_SYNC);
            }
            match (loaded, next) {
                (Some(_), Some(next)) => switch_in_place(guard, next),
                (_, next) => {
                    save_running(shared);
                    drop(guard);
                    switch_to(next)
                }
            }
        }
    }
}

/// The running vCPU stops (CPU_OFF, its VM ended or reset): the scheduler forgets it until
/// its next start. Its interrupts were discarded by the caller.
pub fn stop_running() -> ! {
    {
        let mut shared = this_shared().lock_cold();
        trace_switch_out(&shared, SwitchReason::Stopped);
        if let Some(slot) = shared.loaded.take() {
            at_mut(&mut shared.contexts, slot).leave_unsaved();
            let now = timer::now();
            shared.scheduler.stop(slot, now);
            shared.started &= !(1 << slot);
            shared.forget_fp(slot);
            if shared.task_gone(slot) {
                shared.remove_task(slot, now);
            }
        }
        leave_guest(vm::this_cpu());
    }
    // The stop, then the decision after it: two masked stretches (a VM restarted by health
    // parks its vCPU here, and its tasks' slots stop in the run loop's passes after it).
    if crate::config::HEALTH {
        irq::serve_here();
    }
    run_loop()
}

/// The running vCPU began a reset of its VM ([`lifecycle::reset_begin`]): its guest state is dropped
/// and its slot, still runnable, runs the reload's bounded steps instead ([`run_reload`]),
/// charged to it by the scheduler, which may switch to another vCPU between two steps (a
/// real-time vCPU released meanwhile runs at once, as if the reload were guest code).
pub fn reload(id: usize) -> ! {
    let next = {
        let mut guard = this_shared().lock_cold();
        let shared = &mut *guard;
        let cpu = vm::this_cpu();
        if let Some(slot) = shared.loaded.take() {
            at_mut(&mut shared.contexts, slot).leave_unsaved();
            let vcpu = cpu.vcpu.load(Ordering::Relaxed);
            irq::discard_vcpu_interrupts(id, vcpu, cpu.generation.load(Ordering::Relaxed));
            discard_saved(shared, slot);
            shared.set(slot, Flags::RELOADING);
        }
        leave_guest(cpu);
        decide(shared, timer::now())
    };
    switch_to(next)
}

/// Runs the reload of VM `id` in `slot`'s time: one bounded step, then the interrupts that
/// arrived, and the scheduler if they may change what runs; at the end, the reset completes
/// and the slot stops (the VM's vCPU 0 starts afresh where it is placed).
fn run_reload(slot: usize, id: usize) -> ! {
    use keel_core::abi::MaskedSite;
    vm::masked().at(MaskedSite::Reload);
    loop {
        // The interrupts that came while the scheduler picked this slot, or during the last
        // step, are served before each step: a step is a masked stretch of its own.
        if irq::serve_between_steps(MaskedSite::Reload).reschedule {
            // What was served (a health event carried out, a kick) and the decision it calls
            // for: two masked stretches (in one they took 2,480 instructions in health-leaks).
            let _ = irq::serve_between_steps(MaskedSite::Reload);
            let next = decide(&mut this_shared().lock_cold(), timer::now());
            if next != Some(slot) {
                switch_to(next)
            }
            // A poll point again before the step: the decision is a stretch of its own.
            continue;
        }
        if lifecycle::reload_step(id) {
            // The last step (its `reloaded` line) and the slot's stop with the decision after
            // it: two masked stretches (in one they took 2,069 instructions); run_loop decides
            // anew whatever was served here.
            let _ = irq::serve_between_steps(MaskedSite::Reload);
            {
                let mut shared = this_shared().lock_cold();
                shared.clear(slot, Flags::RELOADING);
                shared.scheduler.stop(slot, timer::now());
                // The reloaded VM's counts start afresh (the reload's own jobs included).
                shared.scheduler.clear_stats(slot);
                shared.started &= !(1 << slot);
            }
            lifecycle::reset_finish(id);
            run_loop()
        }
    }
}

/// The first FP/SIMD instruction of the running vCPU since it was switched in: the pCPU's
/// FP/SIMD registers go to their owner's context, the running vCPU's come in.
pub fn fp_trap() {
    let mut guard = this_shared().lock();
    let shared = &mut *guard;
    let Some(slot) = shared.loaded else {
        return;
    };
    guest::set_fp_trap(false);
    // The FP/SIMD save and load below run at EL2: the untrap takes effect first.
    cpu::isb();
    if let Some(owner) = shared.fp_owner {
        at_mut(&mut shared.contexts, owner).fp_save();
    }
    at_mut(&mut shared.contexts, slot).fp_restore();
    shared.own_fp(slot);
}

/// Brings the scheduler up to date with the world, if a kick or a deadline said it may have
/// changed: vCPUs whose VM ended or was reset stop, start requests (CPU_ON, reset) start, and
/// waiting vCPUs with an interrupt pending wake. Bounded by the slots of one pCPU.
fn refresh(shared: &mut SharedCpu, now: u64) {
    let reasons = vm::take_stale();
    if reasons == 0 {
        return;
    }
    let kicked = reasons & vm::Stale::Kicked as u8 != 0;
    if !kicked {
        // Only a virtual-timer deadline passed: wake the waiting vCPUs it was for.
        let mut scan = shared.waiting & shared.started;
        while scan != 0 {
            let slot = scan.trailing_zeros() as usize;
            scan &= scan - 1;
            if wait_ends(shared, slot, now)
                || shared.contexts[slot]
                    .timer
                    .deadline()
                    .is_some_and(|at| at <= now)
            {
                shared.scheduler.wake(slot, now);
            }
        }
        return;
    }
    // Only the slots of the VMs kicked here: a kick for one VM (a message, a start) does not
    // look at the other VMs' slots (a partition's tasks beside a Linux that restarts).
    let kicked_vms = vm::take_kicked_vms();
    // Each slot started, stopped or removed costs several hundred instructions: one per pass,
    // so that a VM whose vCPU and tasks all stop at once (a restart) is never one long masked
    // stretch. The kicks are handed back and the pCPU kicks itself, so that the next pass
    // comes right after the interrupts that wait are served.
    let mut changes = 0;
    for slot in 0..MAX_SLOTS {
        let Some(Placed { vm: id, vcpu }) = shared.placed[slot] else {
            continue;
        };
        if kicked_vms & (1 << id) == 0 {
            continue;
        }
        let current_generation = vm::vm(id).generation() == shared.generations[slot];
        if shared.loaded == Some(slot) || shared.has(slot, Flags::RELOADING) {
            continue;
        }
        if changes >= CHANGES_PER_PASS {
            vm::this_cpu()
                .kicked_vms
                .fetch_or(kicked_vms, Ordering::Release);
            vm::kick_pcpu(cpu::index(), id);
            return;
        }
        if refresh_slot(shared, slot, id, vcpu, current_generation, now) {
            changes += 1;
        }
    }
}

/// Slots started, stopped or removed in one [`refresh`] pass.
const CHANGES_PER_PASS: usize = 1;

/// [`refresh`] of one kicked slot, placed for vCPU `vcpu` of VM `id` and neither running nor
/// reloading: whether it was started, stopped or removed.
#[inline(always)]
fn refresh_slot(
    shared: &mut SharedCpu,
    slot: usize,
    id: usize,
    vcpu: usize,
    current_generation: bool,
    now: u64,
) -> bool {
    let vm = vm::vm(id);
    if crate::config::HEALTH && vcpu == 0 && vm.take_reload() {
        // A restart asked from elsewhere ([`lifecycle::restart`]): vCPU 0's slot runs the
        // reload's steps in its time, as a reset's does ([`run_reload`]).
        if shared.is_started(slot) {
            discard_saved(shared, slot);
            shared.scheduler.stop(slot, now);
        }
        shared.set(slot, Flags::RELOADING);
        shared.scheduler.start(slot, now);
        shared.started |= 1 << slot;
        return true;
    }
    let running = vm.state() == VmState::Running;
    if shared.task_gone(slot) {
        shared.remove_task(slot, now);
        return true;
    }
    // The kick may have raised an interrupt for it in its vGIC.
    shared.set(slot, Flags::NEEDS_SYNC);
    let mut changed = false;
    if (!running || !current_generation) && shared.is_started(slot) {
        discard_saved(shared, slot);
        shared.scheduler.stop(slot, now);
        shared.started &= !(1 << slot);
        vm.power_off_if_on(vcpu);
        changed = true;
    }
    if !running {
        return changed;
    }
    if let Some((entry, x0)) = vm.take_start(vcpu) {
        start_slot(shared, slot, id, vcpu, entry, x0, now);
        return true;
    }
    if shared.is_started(slot)
        && !shared.scheduler.is_runnable(slot)
        && has_pending(shared, slot, id, vcpu, now)
    {
        shared.scheduler.wake(slot, now);
    }
    changed
}

/// Gives a stopping, switched-out vCPU's listed SPIs back to its vGIC (unless its VM was
/// reset since: the vGIC is a new one) and forgets its interface and timer.
fn discard_saved(shared: &mut SharedCpu, slot: usize) {
    let Some(Placed { vm: id, vcpu }) = *at(&shared.placed, slot) else {
        return;
    };
    let context = &mut shared.contexts[slot];
    if vm::vm(id).generation() == shared.generations[slot] {
        let mut vgic = vm::vm(id).vgic.lock_cold();
        context.interface.for_each_listed(|intid, pending| {
            if intid >= 32 {
                vgic.unlisted(vcpu, intid, pending, false);
            }
        });
    }
    context.discard_interrupts();
    shared.timer_lr[slot] = (0, 0);
    shared.forget_fp(slot);
}

#[allow(clippy::too_many_arguments)]
fn start_slot(
    shared: &mut SharedCpu,
    slot: usize,
    id: usize,
    vcpu: usize,
    entry: u64,
    x0: u64,
    now: u64,
) {
    let desc = vm::desc(id);
    let vm = vm::vm(id);
    let vttbr = (u64::from(desc.id.0 + 1) << 48) | vm.stage2_root();
    start_frame(shared, cpu::index(), slot, x0);
    shared.contexts[slot].reset(
        entry,
        guest::vmpidr(vcpu),
        (guest::hcr_value(true), guest::mdcr_value(desc.pmu)),
        vttbr,
        desc.pmu,
    );
    shared.generations[slot] = vm.generation();
    shared.set(slot, Flags::FRESH);
    shared.timer_lr[slot] = (0, 0);
    shared.forget_fp(slot);
    vm.vgic.lock_cold().reset_vcpu(vcpu);
    if vcpu == 0 {
        crate::vcpu::announce_start(id);
    }
    shared.scheduler.start(slot, now);
    shared.started |= 1 << slot;
}

/// Whether a switched-out vCPU has an interrupt to take: one pending in its saved list
/// registers or its vGIC, or its virtual timer's deadline passed.
fn has_pending(shared: &SharedCpu, slot: usize, id: usize, vcpu: usize, now: u64) -> bool {
    has_pending_saved(shared, slot, id, vcpu, now)
        || vm::vm(id).vgic.lock().next_pending(vcpu).is_some()
}

/// [`has_pending`] but for its vGIC: pending in its saved list registers, its virtual timer's
/// deadline passed, or the end of its wait for a message come or a message queued.
fn has_pending_saved(shared: &SharedCpu, slot: usize, id: usize, vcpu: usize, now: u64) -> bool {
    let context = at(&shared.contexts, slot);
    context.interface.any_pending()
        || wait_ends(shared, slot, now)
        || (shared.has(slot, Flags::RECEIVING) && crate::ipc::has_message(id, vcpu))
        || context.timer.deadline().is_some_and(|at| at <= now)
}

/// Whether `slot` waits in KEEL_MSG_RECV and its wait's end has come.
fn wait_ends(shared: &SharedCpu, slot: usize, now: u64) -> bool {
    shared.has(slot, Flags::RECEIVING) && shared.wake_at[slot] <= now
}

/// Arms this pCPU's timer queue for a decision: the scheduler's next call, and the earliest
/// virtual-timer deadline of a vCPU here that waits.
#[inline(always)]
fn program(shared: &mut SharedCpu, decision: Decision) {
    if trace::ON {
        trace_decision(shared, decision);
    } else if crate::health::misses_watched() {
        note_misses(shared);
    }
    let scan = shared.waiting & shared.started;
    let earliest = if scan == 0 {
        None
    } else {
        earliest_wait(shared, scan, decision.run)
    };
    timers::set_schedule(decision.until, earliest);
}

/// The running vCPU leaves this pCPU for `reason`, in the trace, with the budget it has left
/// as the scheduler last charged it.
#[inline(always)]
fn trace_switch_out(shared: &SharedCpu, reason: SwitchReason) {
    if !trace::ON {
        return;
    }
    if let Some((id, vcpu)) = vm::current() {
        let budget = shared
            .loaded
            .and_then(|slot| shared.scheduler.budget_left(slot));
        trace::record(
            trace::Kind::SwitchOut,
            id,
            vcpu,
            reason as u8,
            budget_ticks(budget),
        );
    }
}

/// A budget in the trace: counter ticks, `u32::MAX` for none (no reservation).
fn budget_ticks(budget: Option<u64>) -> u32 {
    budget.map_or(u32::MAX, |ticks| {
        u32::try_from(ticks).unwrap_or(u32::MAX - 1)
    })
}

/// The misses and overruns since the last decision of each started vCPU, counted against its
/// VM's threshold (without a trace, which does this as it records them: [`trace_decision`]).
#[inline(never)]
fn note_misses(shared: &mut SharedCpu) {
    let mut scan = shared.started;
    while scan != 0 {
        let slot = scan.trailing_zeros() as usize;
        scan &= scan - 1;
        let Some(placed) = *at(&shared.placed, slot) else {
            continue;
        };
        let journal = shared.scheduler.take_journal(slot);
        report_misses(shared, slot, placed.vm, &journal);
    }
}

/// Hands slot `slot`'s new deadline misses and budget overruns (its `journal`) of VM `vm` to
/// health monitoring, but a reload's own.
#[inline(always)]
fn report_misses(shared: &SharedCpu, slot: usize, vm: usize, journal: &Journal) {
    let count = journal.missed + journal.exhausted;
    if count > 0 && !shared.has(slot, Flags::RELOADING) {
        crate::health::note_misses(vm, u32::try_from(count).unwrap_or(u32::MAX));
    }
}

/// The scheduler's `decision`, in the trace: the vCPU it picked (or none) and the counter
/// ticks until it decides again; before it, what happened to each vCPU's jobs since
/// the last decision (the scheduler's journal: releases, completions with their response
/// time, budgets used up, deadline misses).
#[inline(never)]
fn trace_decision(shared: &mut SharedCpu, decision: Decision) {
    // Only started slots have jobs; a stopped one's last counts wait for its next start.
    let mut scan = shared.started;
    while scan != 0 {
        let slot = scan.trailing_zeros() as usize;
        scan &= scan - 1;
        let Some(placed) = *at(&shared.placed, slot) else {
            continue;
        };
        let journal = shared.scheduler.take_journal(slot);
        if journal.is_empty() {
            continue;
        }
        if crate::health::misses_watched() {
            report_misses(shared, slot, placed.vm, &journal);
        }
        let budget = u64::from(budget_ticks(shared.scheduler.budget_left(slot)));
        for (kind, count, arg) in [
            (trace::Kind::JobRelease, journal.released, budget),
            (
                trace::Kind::JobComplete,
                journal.completed,
                journal.last_response,
            ),
            (trace::Kind::BudgetExhausted, journal.exhausted, 0),
            (trace::Kind::JobMiss, journal.missed, 0),
        ] {
            // One event each: a count above one (jobs skipped while nothing decided) is in
            // the detail, up to 255.
            if count > 0 {
                let arg = u32::try_from(arg).unwrap_or(u32::MAX);
                let detail = u8::try_from(count).unwrap_or(u8::MAX);
                trace::record(kind, placed.vm, placed.vcpu, detail, arg);
            }
        }
    }
    let picked = decision
        .run
        .and_then(|slot| *at(&shared.placed, slot))
        .map_or((usize::from(trace::NO_VM), 0), |placed| {
            (placed.vm, placed.vcpu)
        });
    let until = decision.until.map_or(u32::MAX, |until| {
        u32::try_from(until.saturating_sub(timer::now())).unwrap_or(u32::MAX - 1)
    });
    trace::record(trace::Kind::Decide, picked.0, picked.1, 0, until);
}

/// The earliest virtual-timer deadline or end of a message wait of the slots in `scan`
/// (waiting ones) that the scheduler does not already let run (`run`, its pick, is one).
#[inline(never)]
fn earliest_wait(shared: &SharedCpu, mut scan: u32, run: Option<usize>) -> Option<u64> {
    if let Some(run) = run {
        scan &= !(1 << run);
    }
    // `u64::MAX`: none (a message wait without an end has that `wake_at`, "never").
    let mut earliest = u64::MAX;
    while scan != 0 {
        let slot = scan.trailing_zeros() as usize;
        scan &= scan - 1;
        // A waiting vCPU made runnable since (woken, or released) needs no timer: a deadline
        // already passed would fire at once, again and again, until it runs.
        if shared.scheduler.is_runnable(slot) {
            continue;
        }
        if let Some(at) = at(&shared.contexts, slot).timer.deadline() {
            earliest = earliest.min(at);
        }
        if shared.has(slot, Flags::RECEIVING) {
            earliest = earliest.min(shared.wake_at[slot]);
        }
    }
    (earliest != u64::MAX).then_some(earliest)
}

/// An interrupt was raised (a message queued) for vCPU `vcpu` of VM `id`, which is placed on
/// this shared pCPU and not running: it wakes here at once, without the kick SGI a remote
/// pCPU would need, if it waits and now has something to take. Returns whether the
/// scheduler should be asked again (it woke). Called by [`crate::irq::raise_and_kick`], which
/// is given it at boot ([`crate::irq::set_wake_here`]): the layer below reaches it only so.
pub fn wake_here(id: usize, vcpu: usize) -> bool {
    let mut guard = this_shared().lock();
    let shared = &mut *guard;
    let Some(slot) = shared.slot_of(id, vcpu) else {
        return false;
    };
    if shared.loaded == Some(slot) || !shared.is_started(slot) {
        return false;
    }
    if shared.has(slot, Flags::NEEDS_SYNC) && shared.scheduler.is_runnable(slot) {
        // Woken already, its list registers to be brought up to date when it runs: a second
        // message before then changes neither (no scan of its vGIC again).
        return false;
    }
    // Its list registers are brought up to date from the vGIC when it next runs, if the vGIC
    // has something to list (a message whose interrupt it has not enabled needs nothing).
    let interrupt = vm::vm(id).vgic.lock().next_pending(vcpu).is_some();
    if interrupt {
        shared.set(slot, Flags::NEEDS_SYNC);
    }
    let now = timer::now();
    if shared.scheduler.is_runnable(slot)
        || !(interrupt || has_pending_saved(shared, slot, id, vcpu, now))
    {
        return false;
    }
    if shared.scheduler.wake(slot, now) && !vm::is_stale() {
        if let Some(until) = shared.scheduler.arm_quantum(now) {
            // Round robin: the running vCPU keeps the pCPU, its quantum timed now that another
            // waits behind it; the decision a reschedule would make, without one.
            let run = shared.loaded;
            program(
                shared,
                Decision {
                    run,
                    until: Some(until),
                },
            );
            return false;
        }
    }
    true
}

/// Whether the running vCPU on this shared pCPU has something to do now, so that its WFI
/// must not give the pCPU away: an interrupt listed pending or pending in its vGIC, or its
/// virtual timer's condition met.
///
/// Before it says no, the interrupts the guest has finished with (if any is listed) go back to
/// its vGIC
/// ([`crate::irq::sync_list_registers`], which lists what is pending meanwhile): an interrupt
/// still marked listed there would hide the next raise of the same INTID (a doorbell, an SGI)
/// from [`wake_here`], and the vCPU would sleep on until some other event woke it.
///
/// Only the list registers Keel filled (`listed`) can hold an interrupt: with none, none is
/// read.
pub fn running_has_work(id: usize, vcpu: usize) -> bool {
    if guest::virtual_timer_expired() {
        return true;
    }
    if vm::this_cpu().listed.load(Ordering::Relaxed) != 0 {
        if gic::any_interrupt_pending() {
            return true;
        }
        crate::irq::sync_list_registers();
        if gic::any_interrupt_pending() {
            return true;
        }
    }
    vm::vm(id).vgic.lock().next_pending(vcpu).is_some()
}

/// Scheduler slots of VM `id`'s vCPUs and tasks started on the shared pCPUs (a resource
/// counter: each pCPU's scheduler locked in turn, briefly).
pub fn started_slots(id: usize) -> u64 {
    let mut started = 0;
    for (pcpu, shared) in SHARED.iter().enumerate().take(SYSTEM.pcpus as usize) {
        if !vm::is_shared_pcpu(pcpu as u32) {
            continue;
        }
        let shared = shared.lock_cold();
        started += shared
            .placed
            .iter()
            .enumerate()
            .filter(|(slot, placed)| {
                placed.is_some_and(|placed| placed.vm == id) && shared.is_started(*slot)
            })
            .count() as u64;
    }
    started
}

/// Statistics of configured vCPU `vcpu` of VM `id` on its shared pCPU, if it is started there
/// (a manager's KEEL_VM_SCHED_STATS: that pCPU's scheduler locked briefly; none is held by
/// the caller).
pub fn stats_of(id: usize, vcpu: usize) -> Option<Stats> {
    let &pcpu = vm::desc(id).pcpus.get(vcpu)?;
    if !vm::is_shared_pcpu(pcpu) {
        return None;
    }
    let shared = SHARED.get(pcpu as usize)?.lock_cold();
    shared
        .slot_of(id, vcpu)
        .filter(|&slot| shared.is_started(slot))
        .map(|slot| shared.scheduler.stats(slot))
}

/// Statistics of vCPU `vcpu` of VM `id` on this pCPU's scheduler, if it is placed here.
pub fn stats(id: usize, vcpu: usize) -> Option<Stats> {
    let shared = this_shared().lock_cold();
    shared
        .slot_of(id, vcpu)
        .map(|slot| shared.scheduler.stats(slot))
}
