//! State the hostile guest's vCPUs share, and its interrupt bookkeeping.
//!
//! The guest runs with its MMU off (all memory Device-nGnRnE), so vCPUs see each other's
//! plain stores at once; no read-modify-write atomics (exclusives) are used.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use keel_guest::abi::layout;
use keel_guest::exceptions::set_irq_handler;
use keel_guest::gic::{init_cpu_interface, IntId, PrivateInterrupts, DISTRIBUTOR};
use keel_guest::timer;

/// vCPUs the guest uses.
pub const VCPUS: usize = 2;
/// Priority of every interrupt the guest enables.
pub const PRIORITY: u8 = 0x80;

/// How many times each SGI (0-15) and the virtual timer (slot 16) were taken, per vCPU.
/// Written only by the vCPU's own IRQ handler (IRQs masked), read by anyone.
static TAKEN: [[AtomicU32; 17]; VCPUS] = [const { [const { AtomicU32::new(0) }; 17] }; VCPUS];

/// What the virtual timer handler does when the timer fires on a vCPU.
pub static TIMER_ACTION: [AtomicU32; VCPUS] = [const { AtomicU32::new(0) }; VCPUS];
/// [`TIMER_ACTION`]: count it and disable the timer.
pub const TIMER_COUNT: u32 = 0;
/// [`TIMER_ACTION`]: turn this vCPU off from inside the handler (the interrupt active).
pub const TIMER_CPU_OFF: u32 = 1;
/// [`TIMER_ACTION`]: reset the VM from inside the handler (the interrupt active).
pub const TIMER_RESET: u32 = 2;

/// Bytes of a vCPU's stack.
const STACK_SIZE: usize = 16 * 1024;

/// A stack for a vCPU started by CPU_ON, 16-byte aligned.
#[repr(C, align(16))]
pub struct Stack(core::cell::UnsafeCell<[u8; STACK_SIZE]>);

// SAFETY: Rust code never reads or writes the bytes; each stack is one vCPU's alone, and that
// vCPU is started again only once AFFINITY_INFO says it is off.
unsafe impl Sync for Stack {}

impl Stack {
    /// A stack (zero-initialised, so it lives in .bss).
    pub const fn new() -> Self {
        Self(core::cell::UnsafeCell::new([0; STACK_SIZE]))
    }

    /// Its top: the stack pointer CPU_ON gives the vCPU.
    pub fn top(&self) -> usize {
        self.0.get() as usize + STACK_SIZE
    }
}

/// vCPU 1's stack.
static SECONDARY_STACK: Stack = Stack::new();

/// The top of vCPU 1's stack.
pub fn secondary_stack_top() -> usize {
    SECONDARY_STACK.top()
}

/// A flag or small value one vCPU publishes to another.
pub struct Mailbox(AtomicU64);

impl Mailbox {
    /// An empty mailbox (0).
    pub const fn new() -> Self {
        Self(AtomicU64::new(0))
    }
    /// Publishes `value`.
    pub fn set(&self, value: u64) {
        self.0.store(value, Ordering::SeqCst);
    }
    /// The value published.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    /// Waits up to `micros` for the value to become `value`; whether it did.
    pub fn wait_for(&self, value: u64, micros: u64) -> bool {
        wait_until(micros, || self.get() == value)
    }
}

/// Spins (no WFI: a held-back interrupt must not be hidden by a wake-up) until `done` holds
/// or `micros` have passed; whether `done` held.
pub fn wait_until(micros: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = timer::counter() + micros_to_ticks(micros);
    loop {
        if done() {
            return true;
        }
        if timer::counter() >= deadline {
            return false;
        }
        keel_guest::cpu::spin_hint();
    }
}

/// Counter ticks in `micros` microseconds.
pub fn micros_to_ticks(micros: u64) -> u64 {
    timer::frequency() * micros / 1_000_000
}

/// Spins (no WFI: a held-back interrupt must not be hidden by a wake-up) for `micros`.
pub fn spin_for(micros: u64) {
    wait_until(micros, || false);
}

/// The running vCPU's index (MPIDR_EL1.Aff0).
pub fn this_vcpu() -> usize {
    (keel_guest::cpu::mpidr() & 0xff) as usize
}

fn handle_irq(intid: IntId) {
    let vcpu = this_vcpu();
    let Some(counts) = TAKEN.get(vcpu) else {
        return;
    };
    if intid < 16 {
        let slot = &counts[intid as usize];
        slot.store(slot.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    } else if intid == layout::VTIMER_INTID {
        let slot = &counts[16];
        slot.store(slot.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        match TIMER_ACTION[vcpu].load(Ordering::Relaxed) {
            TIMER_CPU_OFF => keel_guest::psci::cpu_off(),
            TIMER_RESET => keel_guest::system_reset(),
            _ => timer::disable(),
        }
    }
}

/// Brings up this vCPU's GIC interface with every SGI and the virtual timer enabled, the
/// counting handler installed, and IRQs still masked; clears this vCPU's counts.
pub fn init_interrupts(vcpu: usize) -> PrivateInterrupts {
    for slot in &TAKEN[vcpu] {
        slot.store(0, Ordering::Relaxed);
    }
    let interrupts = PrivateInterrupts::for_cpu(vcpu as u64).expect("the GIC has every vCPU");
    if vcpu == 0 {
        DISTRIBUTOR.enable();
    }
    interrupts.wake();
    init_cpu_interface();
    for intid in 0..16 {
        interrupts.enable(intid, PRIORITY);
    }
    interrupts.enable(layout::VTIMER_INTID, PRIORITY);
    set_irq_handler(handle_irq);
    interrupts
}

/// How many times `vcpu` took SGI `intid`.
pub fn sgi_taken(vcpu: usize, intid: usize) -> u32 {
    TAKEN[vcpu][intid].load(Ordering::Relaxed)
}

/// How many times `vcpu` took its virtual timer interrupt.
pub fn timer_taken(vcpu: usize) -> u32 {
    TAKEN[vcpu][16].load(Ordering::Relaxed)
}

/// Arms the virtual timer `micros` from now (interrupt unmasked at the timer).
pub fn arm_timer(micros: u64) {
    timer::set_deadline(timer::counter() + micros_to_ticks(micros));
    timer::enable();
}

/// Arms the timer 100 µs ahead with IRQs unmasked and waits up to 20 ms: whether it fired.
pub fn timer_works(vcpu: usize) -> bool {
    TIMER_ACTION[vcpu].store(TIMER_COUNT, Ordering::Relaxed);
    let before = timer_taken(vcpu);
    arm_timer(100);
    keel_guest::cpu::enable_irqs();
    let fired = wait_until(20_000, || timer_taken(vcpu) != before);
    keel_guest::cpu::disable_irqs();
    fired
}

pub use keel_core::rng::Rng;
