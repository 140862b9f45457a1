//! The manager's storm (`keel.mode=manager keel.managed=<vm id> keel.storm=<ms>`): restarts,
//! stops and starts the managed VM as fast as Keel answers, from vCPU 0 and from vCPU 1 (started
//! with CPU_ON) at once, for `keel.storm` milliseconds of the counter; optionally with
//! `keel.storm-pause=<us>` between two calls of a vCPU. vCPU 0 also takes the notices Keel
//! sends after each request (without waiting for them). Then, one line per vCPU and a summary:
//!
//! - `manager: storm vcpu=<v> restart ok=<n> refused=<n> stop ok=<n> refused=<n> start ok=<n> refused=<n>`
//! - `manager: storm vm=<id> ms=<ms> calls=<n> restarts=<n> notices=<n>` (restarts: as
//!   KEEL_VM_STATUS counts them, the VM's own included)
//!
//! then the managed VM is stopped (asked again while Keel says a request is under way),
//! `manager: storm done`, and SYSTEM_OFF. The storm is the interference source of the
//! `pinned-storm` and `pinned-both` scenarios and of `cargo xtask bench console`.
//!
//! The guest runs with its MMU off: the vCPUs share only plain stores (each counter is one
//! vCPU's), no read-modify-write atomics.

use core::sync::atomic::{AtomicU64, Ordering};

use keel_guest::abi::CallError;
use keel_guest::bootargs::BootArgs;
use keel_guest::health::{self, VmStatus, KEEL_SENDER};
use keel_guest::message::receive;
use keel_guest::psci::{cpu_off, cpu_on};
use keel_guest::{println, system_off, timer};

/// The three calls, in the order each vCPU cycles through them (vCPU 1 a step ahead).
const OPERATIONS: [&str; 3] = ["restart", "stop", "start"];

/// Each vCPU's counts: per operation, the calls Keel answered 0 and those it refused.
static COUNTS: [[[AtomicU64; 2]; 3]; 2] =
    [const { [const { [const { AtomicU64::new(0) }; 2] }; 3] }; 2];
/// The storm's target, end (counter) and pause between calls (counter ticks), set by vCPU 0
/// before it starts vCPU 1.
static TARGET: AtomicU64 = AtomicU64::new(0);
static UNTIL: AtomicU64 = AtomicU64::new(0);
static PAUSE: AtomicU64 = AtomicU64::new(0);
/// Set by vCPU 1 once its part is over and its counts are final.
static SECOND_DONE: AtomicU64 = AtomicU64::new(0);

/// vCPU 1's stack.
const STACK_SIZE: usize = 16 * 1024;
#[repr(C, align(16))]
struct Stack(core::cell::UnsafeCell<[u8; STACK_SIZE]>);
// SAFETY: Rust code never reads or writes the bytes; the stack is vCPU 1's alone, started once.
unsafe impl Sync for Stack {}
static SECOND_STACK: Stack = Stack(core::cell::UnsafeCell::new([0; STACK_SIZE]));

/// Calls `operation` (an index into [`OPERATIONS`]) on VM `vm`.
fn call(operation: usize, vm: u64) -> Result<(), CallError> {
    match operation {
        0 => health::restart(vm),
        1 => health::stop(vm),
        _ => health::start(vm),
    }
}

/// One vCPU's part: the calls in turn until the counter reaches [`UNTIL`]; vCPU 0 takes the
/// notices queued after each call. Returns the notices taken.
fn storm(vcpu: usize) -> u64 {
    let vm = TARGET.load(Ordering::Relaxed);
    let until = UNTIL.load(Ordering::Relaxed);
    let pause = PAUSE.load(Ordering::Relaxed);
    let counts = &COUNTS[vcpu];
    let mut notices = 0;
    let mut buffer = [0u8; 64];
    let mut step = vcpu;
    while timer::counter() < until {
        let operation = step % OPERATIONS.len();
        let outcome = usize::from(call(operation, vm).is_err());
        let count = &counts[operation][outcome];
        count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        step += 1;
        if vcpu == 0 {
            while let Ok(message) = receive(&mut buffer, 0) {
                notices += u64::from(message.vm == u64::from(KEEL_SENDER));
            }
        }
        // Spun, not slept: the SDK's sleep serves vCPU 0's timer only. A spin-wait hint at
        // least once between calls, as a retry loop has (under QEMU's one-thread round robin
        // it ends this vCPU's turn; on hardware it costs nothing).
        let resume = timer::counter() + pause;
        loop {
            keel_guest::cpu::spin_hint();
            if timer::counter() >= resume {
                break;
            }
        }
    }
    notices
}

/// vCPU 1's entry: its part, then CPU_OFF.
fn second(_stack_top: usize) -> ! {
    storm(1);
    SECOND_DONE.store(1, Ordering::Release);
    cpu_off()
}

fn line(vcpu: usize) {
    let n =
        |operation: usize, outcome: usize| COUNTS[vcpu][operation][outcome].load(Ordering::Relaxed);
    println!(
        "manager: storm vcpu={vcpu} restart ok={} refused={} stop ok={} refused={} start ok={} refused={}",
        n(0, 0),
        n(0, 1),
        n(1, 0),
        n(1, 1),
        n(2, 0),
        n(2, 1)
    );
}

/// Stops VM `vm` at the end, asking again (every millisecond, for at most a second) while
/// Keel says a request is under way.
fn stop_at_end(vm: u64) {
    let frequency = timer::frequency();
    let give_up = timer::counter() + frequency;
    loop {
        let stopped = health::stop(vm).is_ok()
            && health::status(vm).is_ok_and(|s| s.state != VmStatus::Running);
        if stopped {
            return;
        }
        if timer::counter() >= give_up {
            println!("manager: storm: vm={vm} not stopped after 1 s");
            return;
        }
        timer::sleep_until(timer::counter() + frequency / 1000);
    }
}

/// The storm on VM `vm` for `millis` milliseconds (vCPU 0), then SYSTEM_OFF.
pub fn run(vm: u64, millis: u64, args: &BootArgs<'_>) -> ! {
    let frequency = timer::frequency();
    let pause_us = args
        .value("keel.storm-pause")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    TARGET.store(vm, Ordering::Relaxed);
    PAUSE.store(pause_us * frequency / 1_000_000, Ordering::Relaxed);
    UNTIL.store(
        timer::counter() + millis * frequency / 1000,
        Ordering::Release,
    );
    keel_guest::boot::set_secondary_main(second);
    let two = match cpu_on(1, SECOND_STACK.0.get() as usize + STACK_SIZE) {
        Ok(()) => true,
        Err(error) => {
            println!("manager: storm: vcpu 1 not started (PSCI {error}): vcpu 0 alone");
            false
        }
    };
    let mut notices = storm(0);
    if two {
        // vCPU 1 ends with its call under way at the deadline: a few microseconds.
        let give_up = timer::counter() + frequency;
        while SECOND_DONE.load(Ordering::Acquire) == 0 && timer::counter() < give_up {
            keel_guest::cpu::spin_hint();
        }
    }
    let mut buffer = [0u8; 64];
    while let Ok(message) = receive(&mut buffer, 0) {
        notices += u64::from(message.vm == u64::from(KEEL_SENDER));
    }
    line(0);
    if two {
        line(1);
    }
    let calls: u64 = COUNTS
        .iter()
        .flatten()
        .flatten()
        .map(|count| count.load(Ordering::Relaxed))
        .sum();
    let restarts = health::status(vm).map_or(0, |status| status.restarts);
    println!(
        "manager: storm vm={vm} ms={millis} calls={calls} restarts={restarts} notices={notices}"
    );
    stop_at_end(vm);
    println!("manager: storm done");
    system_off()
}
