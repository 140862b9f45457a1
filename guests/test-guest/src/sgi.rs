//! `keel.mode=sgi`: SGIs back and forth between two vCPUs, on whichever GIC the device tree
//! names. vCPU 0 starts vCPU 1 (PSCI CPU_ON); then, `keel.rounds` times (default 100), vCPU 0
//! sends vCPU 1 SGI [`PING`] and vCPU 1's IRQ handler answers with SGI [`PONG`], each taken
//! through the SDK's IRQ vector. It prints one line and powers off:
//!
//! `sgi: 100 of 100 round trips between vCPU 0 and vCPU 1 (GICv2), vCPU 1 took 100 pings`
//!
//! It needs only PSCI, the GIC and the console, so it runs natively (`keel.native`, QEMU
//! `-smp 2`) as well as in a Keel VM with two vCPUs.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, Ordering};

use keel_guest::bootargs::BootArgs;
use keel_guest::cpu::{enable_irqs, spin_hint, wait_for_interrupt};
use keel_guest::exceptions::set_irq_handler;
use keel_guest::gic::{self, send_sgi, IntId};
use keel_guest::{println, psci, system_off, timer};

use crate::interrupts::{self, PRIORITY};

/// The SGI vCPU 0 sends.
const PING: IntId = 1;
/// The SGI vCPU 1 answers with.
const PONG: IntId = 2;
/// How long vCPU 0 waits for vCPU 1 to start, and for each answer, in ms.
const TIMEOUT_MS: u64 = 100;

/// Pings vCPU 1 took; written by its IRQ handler only.
static PINGS: AtomicU32 = AtomicU32::new(0);
/// Pongs vCPU 0 took; written by its IRQ handler only.
static PONGS: AtomicU32 = AtomicU32::new(0);
/// Set by vCPU 1 once it takes SGIs.
static READY: AtomicU32 = AtomicU32::new(0);

/// Bytes of vCPU 1's stack.
const STACK_SIZE: usize = 16 * 1024;

/// vCPU 1's stack, 16-byte aligned.
#[repr(C, align(16))]
struct Stack(UnsafeCell<[u8; STACK_SIZE]>);

// SAFETY: Rust code never reads or writes the bytes; the stack is vCPU 1's alone, started once.
unsafe impl Sync for Stack {}

static SECONDARY_STACK: Stack = Stack(UnsafeCell::new([0; STACK_SIZE]));

fn handle_irq(intid: IntId) {
    if intid == PING {
        PINGS.store(PINGS.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        send_sgi(PONG, 1 << 0);
    } else if intid == PONG {
        PONGS.store(PONGS.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
}

/// Waits until `done` holds or `ms` milliseconds passed; whether it held.
fn wait_until(ms: u64, done: impl Fn() -> bool) -> bool {
    let deadline = timer::counter() + ms * timer::frequency() / 1000;
    while !done() {
        if timer::counter() >= deadline {
            return false;
        }
        spin_hint();
    }
    true
}

/// vCPU 0's part (its interrupts brought up by `main`): starts vCPU 1, then the round trips.
pub fn run(args: BootArgs<'_>, own: &gic::PrivateInterrupts) -> ! {
    let rounds = args
        .value("keel.rounds")
        .and_then(|value| value.parse::<u32>().ok())
        .unwrap_or(100);
    set_irq_handler(handle_irq);
    own.enable(PONG, PRIORITY);
    keel_guest::boot::set_secondary_main(secondary);
    let top = SECONDARY_STACK.0.get() as usize + STACK_SIZE;
    if let Err(error) = psci::cpu_on(1, top) {
        println!("sgi: CPU_ON of vCPU 1 returned {error}");
        system_off();
    }
    if !wait_until(TIMEOUT_MS, || READY.load(Ordering::Relaxed) == 1) {
        println!("sgi: vCPU 1 never got ready");
        system_off();
    }
    enable_irqs();
    let mut answered = 0;
    for round in 1..=rounds {
        send_sgi(PING, 1 << 1);
        if !wait_until(TIMEOUT_MS, || PONGS.load(Ordering::Relaxed) >= round) {
            break;
        }
        answered = round;
    }
    println!(
        "sgi: {answered} of {rounds} round trips between vCPU 0 and vCPU 1 ({}), vCPU 1 took {} pings",
        gic::version(),
        PINGS.load(Ordering::Relaxed)
    );
    system_off()
}

/// vCPU 1: brings up its interrupts, takes pings and answers them.
fn secondary(_stack_top: usize) -> ! {
    let Some(own) = interrupts::init(1) else {
        println!("sgi: the GIC has no CPU interface for vCPU 1");
        system_off();
    };
    own.enable(PING, PRIORITY);
    READY.store(1, Ordering::Relaxed);
    enable_irqs();
    loop {
        wait_for_interrupt();
    }
}
