//! `manager-storm` (issue 39): the VM manages VM `keel.managed` (its `[vm.health] managers`)
//! and asks Keel to stop it, start it and restart it, in turn, from both its vCPUs, each a call
//! every [`NAP_MICROS`], for `keel.millis` milliseconds (default 1000) of virtual time, never
//! reading the notices Keel sends it (its queue is soon full). A call every 100 µs is flat out
//! for Keel's part (a request waits for the last one to be done: a restart's reload of the
//! managed VM takes about 5 ms); the naps, in WFI, leave QEMU's time to the managed VM's pCPU
//! under `-icount`, where two vCPUs calling without a pause took nearly all of it (4 stops in a
//! second). Keel's lines about the managed VM (its stops, restarts
//! and starts, and the notices the full queue refuses) must stay a few a second each, with a
//! count of those left out, whatever the manager does.
//!
//! After the storm the VM waits until the managed VM is stopped (its last request done), pauses
//! [`PAUSE_MILLIS`], longer than Keel's one-second rate window, then starts it once more and
//! stops it: Keel's lines about that start and stop carry the counts of the storm's last
//! window. Then it prints `probe manager-storm: ok calls=N ok=N at_ms=N`: the calls made (from
//! both vCPUs), those answered OK, and the virtual time at the end (CNTVCT, which is the
//! machine's: Keel's CNTVOFF is zero), and says done.

use keel_guest::bootargs::BootArgs;
use keel_guest::cpu::{disable_irqs, wait_for_interrupt};
use keel_guest::gic::{acknowledge, end_of_interrupt};
use keel_guest::health::{self, VmStatus};
use keel_guest::{println, timer};

use crate::lifecycle::{start_secondary, stop_secondary, SecondaryTask};
use crate::probe;
use crate::reset_loop::pause;
use crate::shared::{init_interrupts, micros_to_ticks, this_vcpu, Mailbox};

/// How long the VM pauses after the storm before its last start and stop: more than Keel's
/// rate window.
const PAUSE_MILLIS: u64 = 1_100;

/// How long each vCPU sleeps after each call.
const NAP_MICROS: u64 = 100;

/// The managed VM, and the counter value at which the storm ends, for vCPU 1.
static MANAGED: Mailbox = Mailbox::new();
static UNTIL: Mailbox = Mailbox::new();
/// vCPU 1's calls and those answered OK, published when its storm ends; then [`DONE`] is 1.
static CALLS: Mailbox = Mailbox::new();
static OKS: Mailbox = Mailbox::new();
static DONE: Mailbox = Mailbox::new();

/// Stops, starts and restarts VM `vm` in turn (each vCPU from its own place in the turn) until
/// the counter reaches `until`: the calls made and those answered OK.
fn storm(vm: u64, until: u64) -> (u64, u64) {
    let (mut calls, mut oks) = (0, 0);
    let mut turn = this_vcpu();
    init_interrupts(turn);
    disable_irqs();
    while timer::counter() < until {
        nap(NAP_MICROS);
        let outcome = match turn % 3 {
            0 => health::stop(vm),
            1 => health::start(vm),
            _ => health::restart(vm),
        };
        calls += 1;
        oks += u64::from(outcome.is_ok());
        turn += 1;
    }
    (calls, oks)
}

/// vCPU 1's part (started by [`manager_storm`]): the storm, its counts published.
pub fn storm_secondary() {
    let (calls, oks) = storm(MANAGED.get(), UNTIL.get());
    CALLS.set(calls);
    OKS.set(oks);
    DONE.set(1);
}

/// Sleeps `micros` in WFI (IRQs masked), woken by the virtual timer, whose interrupt is then
/// acknowledged (left pending, it would end every later WFI at once).
fn nap(micros: u64) {
    let at = timer::counter() + micros_to_ticks(micros);
    timer::set_deadline(at);
    timer::enable();
    while timer::counter() < at {
        wait_for_interrupt();
    }
    timer::disable();
    while let Some(interrupt) = acknowledge() {
        end_of_interrupt(interrupt);
    }
}

/// Waits until VM `vm` is in `state`, asking with `ask` (answered OK once the request is made;
/// refused while another is under way) every millisecond until it is; whether it got there
/// within `millis`.
fn bring_to(
    vm: u64,
    state: VmStatus,
    ask: fn(u64) -> Result<(), keel_guest::abi::CallError>,
    millis: u64,
) -> bool {
    let deadline = timer::counter() + micros_to_ticks(millis * 1000);
    while timer::counter() < deadline {
        if health::status(vm).is_ok_and(|status| status.state == state) {
            return true;
        }
        let _ = ask(vm);
        nap(1000);
    }
    false
}

/// Runs the attack (see the module's doc).
pub fn manager_storm(args: &BootArgs<'_>) {
    let Some(vm) = args
        .value("keel.managed")
        .and_then(|value| value.parse::<u64>().ok())
    else {
        probe!("manager-storm", false, "keel.managed=<vm id> is missing");
        return;
    };
    let millis = args
        .value("keel.millis")
        .and_then(|value| value.parse::<u64>().ok())
        .unwrap_or(1000);
    println!(
        "hostile: manager-storm: stop, start and restart vm {vm} from 2 vCPUs for {millis} ms"
    );
    let until = timer::counter() + micros_to_ticks(millis * 1000);
    MANAGED.set(vm);
    UNTIL.set(until);
    DONE.set(0);
    if !start_secondary(SecondaryTask::ManagerStorm) {
        return;
    }
    let (mut calls, mut oks) = storm(vm, until);
    if !DONE.wait_for(1, 1_000_000) {
        probe!("manager-storm", false, "vCPU 1 did not end its storm");
        return;
    }
    calls += CALLS.get();
    oks += OKS.get();
    stop_secondary();
    let stopped = bring_to(vm, VmStatus::Stopped, health::stop, 2000);
    pause(PAUSE_MILLIS * 1000);
    let started = bring_to(vm, VmStatus::Running, health::start, 2000);
    let stopped_again = bring_to(vm, VmStatus::Stopped, health::stop, 2000);
    let at_ms = timer::counter() * 1000 / timer::frequency();
    probe!(
        "manager-storm",
        stopped && started && stopped_again && oks > 0,
        "calls={calls} ok={oks} at_ms={at_ms}"
    );
}
