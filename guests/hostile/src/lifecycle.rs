//! vCPU life-cycle attacks: CPU_OFF and SYSTEM_RESET with the virtual timer interrupt in flight
//! (pending or active in a list register). Each start must begin from a clean interrupt and
//! timer state: afterwards the virtual timer must fire again.

use core::sync::atomic::Ordering;

use keel_guest::cpu::{disable_irqs, enable_irqs};
use keel_guest::devicetree::BootInfo;
use keel_guest::entry_check::take_entry_state;
use keel_guest::gic::irq_pending;
use keel_guest::psci::{affinity_info, cpu_off, cpu_on};
use keel_guest::{println, system_reset};

use crate::probe;
use crate::shared::{
    arm_timer, init_interrupts, secondary_stack_top, spin_for, timer_works, wait_until, Mailbox,
    TIMER_ACTION, TIMER_CPU_OFF, TIMER_RESET,
};

/// What vCPU 1 does when started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum SecondaryTask {
    /// Wait to be told to turn off.
    Idle = 0,
    /// Be the target of `sgi-cross`.
    SgiTarget = 1,
    /// Let the timer interrupt become pending (IRQs masked), then CPU_OFF.
    TimerPendingOff = 2,
    /// Take the timer interrupt and CPU_OFF inside the handler.
    TimerActiveOff = 3,
    /// Check that the timer fires; report in [`RESULT`].
    TimerCheck = 4,
    /// Turn off now.
    Off = 5,
    /// Storm the managed VM with stops, starts and restarts (`manager-storm`).
    ManagerStorm = 6,
    /// Be the other vCPU of `sgi-foreign`'s banked registers (GICv2).
    BankedTarget = 7,
}

/// vCPU 1's task, set by vCPU 0 before CPU_ON and to [`SecondaryTask::Off`] to stop it.
pub static TASK: Mailbox = Mailbox::new();
/// vCPU 1's answer: 0 none yet, 1 yes, 2 no.
static RESULT: Mailbox = Mailbox::new();

/// AFFINITY_INFO's "off".
const AFFINITY_OFF: i64 = 1;

/// Starts vCPU 1 on `task`; false (with a FAIL probe) if CPU_ON refuses.
pub fn start_secondary(task: SecondaryTask) -> bool {
    TASK.set(task as u64);
    RESULT.set(0);
    match cpu_on(1, secondary_stack_top()) {
        Ok(()) => true,
        Err(error) => {
            probe!("cpu-on", false, "CPU_ON of vCPU 1 returned {error}");
            false
        }
    }
}

/// Waits up to 100 ms for vCPU 1 to be off; whether it is.
fn wait_secondary_off() -> bool {
    wait_until(100_000, || affinity_info(1) == AFFINITY_OFF)
}

/// Tells vCPU 1 to turn off and waits until it has.
pub fn stop_secondary() {
    TASK.set(SecondaryTask::Off as u64);
    if !wait_secondary_off() {
        probe!("cpu-off", false, "vCPU 1 did not turn off");
    }
}

/// vCPU 1's entry (the SDK's CPU_ON entry calls it on its stack).
pub fn secondary_main(_stack_top: usize) -> ! {
    println!("hostile: vm vcpu 1 entry {}", take_entry_state(1));
    let task = TASK.get();
    if task == SecondaryTask::SgiTarget as u64 {
        crate::interrupts::sgi_target();
    } else if task == SecondaryTask::TimerPendingOff as u64 {
        init_interrupts(1);
        disable_irqs();
        arm_timer(10);
        // Keel lists the timer interrupt once it fires: ISR_EL1.I then shows it pending.
        RESULT.set(if wait_until(10_000, irq_pending) {
            1
        } else {
            2
        });
        cpu_off();
    } else if task == SecondaryTask::TimerActiveOff as u64 {
        init_interrupts(1);
        TIMER_ACTION[1].store(TIMER_CPU_OFF, Ordering::Relaxed);
        RESULT.set(1);
        arm_timer(10);
        enable_irqs();
        spin_for(20_000);
        // The handler should have turned this vCPU off.
        RESULT.set(2);
        disable_irqs();
    } else if task == SecondaryTask::TimerCheck as u64 {
        init_interrupts(1);
        RESULT.set(if timer_works(1) { 1 } else { 2 });
    } else if task == SecondaryTask::ManagerStorm as u64 {
        crate::manager_storm::storm_secondary();
    } else if task == SecondaryTask::BankedTarget as u64 {
        crate::sgi_foreign::banked_target();
    }
    while TASK.get() != SecondaryTask::Off as u64 {
        keel_guest::cpu::spin_hint();
    }
    cpu_off()
}

/// CPU_OFF with the timer interrupt pending, then active; after each, CPU_ON and check that
/// the timer fires.
pub fn timer_cpu_off() {
    init_interrupts(0);
    for (variant, task) in [
        ("pending", SecondaryTask::TimerPendingOff),
        ("active", SecondaryTask::TimerActiveOff),
    ] {
        if !start_secondary(task) {
            return;
        }
        let off = wait_secondary_off();
        let in_flight = RESULT.get() == 1;
        probe!(
            format_args!("cpu-off-with-timer-{variant}"),
            off && in_flight,
            "vCPU 1 {} with its timer interrupt {}",
            if off {
                "turned off"
            } else {
                "did not turn off"
            },
            if in_flight {
                variant
            } else {
                "never in flight"
            }
        );
        if !start_secondary(SecondaryTask::TimerCheck) {
            return;
        }
        let answered = RESULT.wait_for(1, 100_000) || RESULT.get() == 2;
        probe!(
            format_args!("timer-after-cpu-off-{variant}"),
            RESULT.get() == 1,
            "after CPU_ON the virtual timer {}",
            if !answered {
                "check never answered"
            } else if RESULT.get() == 1 {
                "fires"
            } else {
                "is dead"
            }
        );
        stop_secondary();
    }
}

/// Where the reset count lives: the last words below the device tree's 2 MiB at the top of
/// RAM, which a reset does not reload.
pub(crate) fn reset_count_address(info: &BootInfo<'_>) -> Option<usize> {
    info.memory
        .map(|memory| (memory.base + memory.size - (2 << 20) - 16) as usize)
}

/// Magic in the word before the count, so that stale RAM is not taken for a count.
const COUNT_MAGIC: u64 = 0x686f_7374_696c_6521;

pub(crate) fn read_reset_count(address: usize) -> u64 {
    // SAFETY: two words of the VM's own RAM below its device tree, used by nothing else.
    let (magic, count) = unsafe {
        (
            core::ptr::read_volatile(address as *const u64),
            core::ptr::read_volatile((address + 8) as *const u64),
        )
    };
    if magic == COUNT_MAGIC {
        count
    } else {
        0
    }
}

pub(crate) fn write_reset_count(address: usize, count: u64) {
    // SAFETY: as in `read_reset_count`.
    unsafe {
        core::ptr::write_volatile(address as *mut u64, COUNT_MAGIC);
        core::ptr::write_volatile((address + 8) as *mut u64, count);
    }
}

/// SYSTEM_RESET with the timer interrupt active (inside its handler), then pending (IRQs
/// masked), then with nothing in flight; after each reset the timer must fire.
pub fn timer_reset(info: &BootInfo<'_>) {
    let Some(address) = reset_count_address(info) else {
        probe!("timer-reset", false, "no /memory in the device tree");
        return;
    };
    let resets = read_reset_count(address);
    init_interrupts(0);
    let step = |name: &str| {
        probe!(name, timer_works(0), "the virtual timer after the reset");
    };
    match resets {
        0 => {
            write_reset_count(address, 1);
            TIMER_ACTION[0].store(TIMER_RESET, Ordering::Relaxed);
            arm_timer(10);
            enable_irqs();
            spin_for(20_000);
            disable_irqs();
            probe!("reset-with-timer-active", false, "the timer never fired");
        }
        1 => {
            step("timer-after-reset-active");
            write_reset_count(address, 2);
            disable_irqs();
            arm_timer(10);
            probe!(
                "reset-with-timer-pending",
                wait_until(10_000, irq_pending),
                "the timer interrupt is pending at the reset"
            );
            system_reset();
        }
        2 => {
            step("timer-after-reset-pending");
            write_reset_count(address, 3);
            keel_guest::timer::disable();
            system_reset();
        }
        _ => {
            step("timer-after-clean-reset");
            write_reset_count(address, 0);
        }
    }
}
