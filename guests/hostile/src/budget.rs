//! Budget attacks (issue 19, item 1): a vCPU with a reservation on a shared pCPU spins for
//! less than its budget and then restarts, over and over, so that a scheduler that gives every
//! start a new job would give it a full budget each time. `budget-reset`: the VM resets
//! itself (SYSTEM_RESET); `budget-cpu-off`: vCPU 0 turns itself off (CPU_OFF) and vCPU 1,
//! pinned on a pCPU of its own, turns it on again (CPU_ON) as soon as AFFINITY_INFO says off.
//!
//! The attacker measures the time it ran with the virtual counter. While it spins it reads the
//! counter back to back: a step of at most [`GAP_MICROS`] is its own running time, a longer
//! one means something else ran meanwhile (the pCPU's other vCPU, Keel switching to it).
//! What it cannot watch (Keel's reset, CPU_OFF and CPU_ON paths, its own boot up to the spin)
//! is left out, so its figure is a lower bound: above its budget share, the scheduler gave it
//! more than its reservation.
//!
//! Its running totals must survive the restarts, resets included, which reload the VM's image
//! (with every static in it). They live in a [`Ledger`] of a few words in the page below the
//! device tree's 2 MiB at the top of the VM's RAM: a reset reloads the image, the device tree,
//! the initrd and the devices and leaves the rest of RAM as it is (`hypervisor/src/vm.rs`,
//! `Reload`), as the test guest's and `timer-reset`'s reset markers rely on. A channel window
//! would also survive (Keel never writes one) but needs a second member VM; console lines
//! per start would be thousands of lines through a 2 KiB buffer. The first start prints
//! `budget: first start ...` and clears nothing else: a ledger lost at a reset would show as a
//! second such line, which the scenario refuses.
//!
//! The attack runs until the virtual counter passes `keel.millis` (default 2000) milliseconds
//! after its first start, spinning `keel.spin` (default 50) µs of its own time per start, and
//! ends with one line, `budget: starts=N clean=N ran_us=N elapsed_us=N restart_us=N jobs=N
//! overruns=N`: starts (boot included), those entered in the documented state, the time it ran
//! spinning, the time from its first start to the end, the time from each restart request to
//! the next start's first counter read (Keel's path, the guest's boot, and whatever else ran),
//! and what Keel counted for it (KEEL_SCHED_STATS) at its last spin's end.

use keel_guest::bootargs::BootArgs;
use keel_guest::cpu::{disable_irqs, enable_irqs, wait_for_interrupt};
use keel_guest::devicetree::BootInfo;
use keel_guest::entry_check::{take_entry_state, EntryState};
use keel_guest::gic::{init_cpu_interface, send_sgi, DISTRIBUTOR};
use keel_guest::psci::{affinity_info, cpu_off, cpu_on};
use keel_guest::{println, system_off, system_reset, timer};

use crate::probe;
use crate::shared::{
    arm_timer, init_interrupts, micros_to_ticks, secondary_stack_top, sgi_taken, this_vcpu,
    Mailbox, Stack,
};

/// Whether `attack` is one of this module's: they report their entry states in their summary
/// (a line per start would be thousands), so `main` leaves them to it.
pub fn reports_own_entries(attack: &str) -> bool {
    matches!(attack, "budget-reset" | "budget-cpu-off")
}

/// The longest counter step, in µs, still counted as the spinner's own running time. A step
/// of the spin loop is a few instructions and a timer interrupt Keel handles without
/// switching a few hundred (under 1 µs at 1 ns per instruction); a switch away and back is at
/// least two switches (about 2.6 µs) and what ran meanwhile.
const GAP_MICROS: u64 = 1;

/// The SGI vCPU 0 raises at vCPU 1 just before its CPU_OFF.
const OFF_SGI: u32 = 7;

/// AFFINITY_INFO's "off".
const AFFINITY_OFF: i64 = 1;

/// "budget!!" in the ledger's first word: the ledger was written by a start of this run.
const LEDGER_MAGIC: u64 = 0x2121_7465_6764_7562;

/// The words of the [`Ledger`].
#[derive(Clone, Copy)]
#[repr(usize)]
enum Field {
    Magic,
    /// Counter at the first start.
    First,
    /// Counter at which the attack ends.
    End,
    /// Counter ticks per start to spin.
    Spin,
    /// Starts, boot included.
    Starts,
    /// Starts entered in the documented state.
    Clean,
    /// Counter ticks run spinning.
    Ran,
    /// Counter ticks from each restart request to the next start.
    Restart,
    /// Counter just before the last restart request.
    LastRequest,
    /// Keel's count of its jobs and of its overruns (KEEL_SCHED_STATS), at its last spin's end.
    Jobs,
    Overruns,
}

/// The attack's running totals, in RAM that a reset does not reload (see the module's doc).
#[derive(Clone, Copy)]
struct Ledger(usize);

/// Where vCPU 0 finds the ledger after a CPU_ON (no reset in that attack: a static survives).
static LEDGER_ADDRESS: Mailbox = Mailbox::new();

impl Ledger {
    /// The ledger of this VM: 4 KiB below the device tree's 2 MiB at the top of its RAM.
    fn of(info: &BootInfo<'_>) -> Option<Self> {
        info.memory
            .map(|memory| Ledger((memory.base + memory.size - (2 << 20) - 4096) as usize))
    }

    fn get(self, field: Field) -> u64 {
        // SAFETY: a word of the VM's own RAM, below its device tree and far above its image,
        // used by nothing else; the MMU is off, so it is Device memory and plain loads see
        // the other vCPU's stores.
        unsafe { core::ptr::read_volatile((self.0 + field as usize * 8) as *const u64) }
    }

    fn set(self, field: Field, value: u64) {
        // SAFETY: as in `get`.
        unsafe { core::ptr::write_volatile((self.0 + field as usize * 8) as *mut u64, value) }
    }

    fn add(self, field: Field, value: u64) {
        self.set(field, self.get(field) + value);
    }

    /// Counts a start at counter `now` entered in `entry`: a restart's time since its
    /// request added up, a start not entered in the documented state reported on its own line.
    fn count_start(self, now: u64, entry: EntryState) {
        if self.get(Field::Starts) != 0 {
            self.add(
                Field::Restart,
                now.saturating_sub(self.get(Field::LastRequest)),
            );
        }
        self.add(Field::Starts, 1);
        if matches!(entry, EntryState::Clean) {
            self.add(Field::Clean, 1);
        } else {
            println!("hostile: vm vcpu {} entry {entry}", this_vcpu());
        }
    }

    /// Spins for this start, adds what it ran, and notes when it asks for its restart.
    fn spin(self) {
        let ran = spin_running(self.get(Field::Spin));
        self.add(Field::Ran, ran);
        if let Ok(stats) = keel_guest::keel::sched_stats() {
            self.set(Field::Jobs, stats.jobs);
            self.set(Field::Overruns, stats.overruns);
        }
        self.set(Field::LastRequest, timer::counter());
    }

    /// The summary line.
    fn report(self, now: u64) {
        let micros = |ticks: u64| ticks * 1_000_000 / timer::frequency();
        println!(
            "budget: starts={} clean={} ran_us={} elapsed_us={} restart_us={} jobs={} overruns={}",
            self.get(Field::Starts),
            self.get(Field::Clean),
            micros(self.get(Field::Ran)),
            micros(now.saturating_sub(self.get(Field::First))),
            micros(self.get(Field::Restart)),
            self.get(Field::Jobs),
            self.get(Field::Overruns)
        );
    }
}

/// Opens the ledger at the first start, or finds it open; `None` (with a FAIL probe) if the
/// device tree has no memory.
fn open_ledger(attack: &str, args: &BootArgs<'_>, info: &BootInfo<'_>, now: u64) -> Option<Ledger> {
    let Some(ledger) = Ledger::of(info) else {
        probe!(attack, false, "no /memory in the device tree");
        return None;
    };
    if ledger.get(Field::Magic) != LEDGER_MAGIC {
        let number = |key: &str, default: u64| {
            args.value(key)
                .and_then(|value| value.parse::<u64>().ok())
                .unwrap_or(default)
        };
        let (millis, spin_micros) = (number("keel.millis", 2000), number("keel.spin", 50));
        for field in [
            Field::Starts,
            Field::Clean,
            Field::Ran,
            Field::Restart,
            Field::Jobs,
            Field::Overruns,
        ] {
            ledger.set(field, 0);
        }
        ledger.set(Field::First, now);
        ledger.set(Field::End, now + micros_to_ticks(millis * 1000));
        ledger.set(Field::Spin, micros_to_ticks(spin_micros));
        ledger.set(Field::Magic, LEDGER_MAGIC);
        println!("budget: first start, {spin_micros} us of spinning per start for {millis} ms");
    }
    Some(ledger)
}

/// Spins until it has run `ticks` counter ticks by its own reckoning (steps longer than
/// [`GAP_MICROS`] not counted); returns the ticks it ran.
fn spin_running(ticks: u64) -> u64 {
    let gap = micros_to_ticks(GAP_MICROS);
    let mut ran = 0;
    let mut last = timer::counter();
    while ran < ticks {
        let now = timer::counter();
        let step = now - last;
        if step <= gap {
            ran += step;
        }
        last = now;
    }
    ran
}

/// `budget-reset`: each start spins, then resets the VM; the start after the end reports.
pub fn reset(args: &BootArgs<'_>, info: &BootInfo<'_>) {
    let now = timer::counter();
    let Some(ledger) = open_ledger("budget-reset", args, info, now) else {
        return;
    };
    ledger.count_start(now, take_entry_state(0));
    if now >= ledger.get(Field::End) {
        ledger.report(now);
        // A later run of this image in the same RAM starts a new ledger.
        ledger.set(Field::Magic, 0);
        return;
    }
    ledger.spin();
    system_reset();
}

/// vCPU 0's stack for its starts by CPU_ON (its boot stack is the image's).
static VCPU0_STACK: Stack = Stack::new();

/// `budget-cpu-off`: vCPU 0 (here, at its boot) starts vCPU 1, the restarter, then spins and
/// turns itself off; each CPU_ON runs [`restarted`]. Returns only if vCPU 1 cannot start.
pub fn cpu_off_attack(args: &BootArgs<'_>, info: &BootInfo<'_>) {
    let now = timer::counter();
    let Some(ledger) = open_ledger("budget-cpu-off", args, info, now) else {
        return;
    };
    LEDGER_ADDRESS.set(ledger.0 as u64);
    ledger.count_start(now, take_entry_state(0));
    keel_guest::boot::set_secondary_main(restarted);
    if let Err(error) = cpu_on(1, secondary_stack_top()) {
        probe!("budget-cpu-off", false, "CPU_ON of vCPU 1 returned {error}");
        return;
    }
    spin_and_turn_off(ledger)
}

/// The CPU_ON entry of both vCPUs in `budget-cpu-off`.
fn restarted(_stack_top: usize) -> ! {
    let ledger = Ledger(LEDGER_ADDRESS.get() as usize);
    if this_vcpu() == 0 {
        ledger.count_start(timer::counter(), take_entry_state(0));
        spin_and_turn_off(ledger)
    }
    println!("hostile: vm vcpu 1 entry {}", take_entry_state(1));
    restart_vcpu0(ledger)
}

/// vCPU 0: spins, tells vCPU 1 it is turning off (an SGI), and turns off.
fn spin_and_turn_off(ledger: Ledger) -> ! {
    init_cpu_interface();
    ledger.spin();
    send_sgi(OFF_SGI, 1 << 1);
    cpu_off()
}

/// Sleeps (WFI, IRQs masked, woken by an SGI or the virtual timer `micros` ahead) until
/// `done` holds, at most `limit_micros`; whether it held. Sleeping rather than spinning
/// matters: under `-icount` QEMU runs the pCPUs in turn, so a busy pCPU 2 would hold up pCPU 1.
fn sleep_until(mut done: impl FnMut() -> bool, micros: u64, limit_micros: u64) -> bool {
    let limit = timer::counter() + micros_to_ticks(limit_micros);
    let mut step = micros;
    loop {
        if done() {
            return true;
        }
        if timer::counter() >= limit {
            return false;
        }
        arm_timer(step);
        wait_for_interrupt();
        // Take what woke it: the handler counts it (and turns the timer off).
        enable_irqs();
        disable_irqs();
        // Polling: back off up to 64 µs, so a vCPU 0 held up between its SGI and its
        // CPU_OFF costs pCPU 2 a few wake-ups only.
        step = (step * 2).min(micros.max(64));
    }
}

/// vCPU 1: each time vCPU 0 says it turns off, waits for AFFINITY_INFO to say off and turns
/// it on again; after the end, reports and powers the VM off.
fn restart_vcpu0(ledger: Ledger) -> ! {
    // vCPU 0 never sets up interrupts in this attack, so the distributor's group enable is
    // this vCPU's to set: without it neither vCPU 0's SGI nor this vCPU's own virtual timer
    // is ever delivered, and a wait that vCPU 0's SGI does not end (vCPU 0 preempted between
    // its SGI and its CPU_OFF) never ends either, as it would not on bare metal.
    DISTRIBUTOR.enable();
    init_interrupts(1);
    let mut seen = sgi_taken(1, OFF_SGI as usize);
    loop {
        // vCPU 0's SGI, or (looked at once a millisecond, in case the SGI was lost) vCPU 0 off.
        let signalled = sleep_until(
            || sgi_taken(1, OFF_SGI as usize) != seen || affinity_info(0) == AFFINITY_OFF,
            1000,
            1_000_000,
        );
        seen = sgi_taken(1, OFF_SGI as usize);
        // Between its SGI and its CPU_OFF: a few instructions, unless it is preempted there.
        if !signalled || !sleep_until(|| affinity_info(0) == AFFINITY_OFF, 2, 100_000) {
            probe!("budget-cpu-off", false, "vCPU 0 did not turn off");
            break;
        }
        if timer::counter() >= ledger.get(Field::End) {
            break;
        }
        if let Err(error) = cpu_on(0, VCPU0_STACK.top()) {
            probe!("budget-cpu-off", false, "CPU_ON of vCPU 0 returned {error}");
            break;
        }
    }
    ledger.report(timer::counter());
    ledger.set(Field::Magic, 0);
    println!("attack budget-cpu-off: done");
    system_off()
}
