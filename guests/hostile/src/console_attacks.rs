//! Console attacks: output and SMCs flat out, and lines forged to pass for someone else's.

use core::arch::asm;

use keel_guest::bootargs::BootArgs;
use keel_guest::{console, println, timer};

use crate::shared::micros_to_ticks;

/// Prints and issues SMCs flat out for `keel.millis` milliseconds (default 300), waits past
/// Keel's one-second rate-limit window, then issues one more SMC (whose diagnostic carries the
/// count of those left out).
pub fn flood(args: &BootArgs<'_>) {
    let millis = args
        .value("keel.millis")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(300);
    let deadline = timer::counter() + micros_to_ticks(millis * 1_000);
    let mut round = 0u64;
    while timer::counter() < deadline {
        for _ in 0..16 {
            smc(0xC200_0000 + (round & 0xff));
        }
        println!("flood {round} the quick brown fox jumps over the lazy dog");
        round += 1;
    }
    println!("hostile: flood: {round} rounds");
    // Sleep (WFI, woken by the virtual timer with IRQs masked) rather than spin: idle virtual
    // time costs the emulator nothing.
    crate::shared::init_interrupts(crate::shared::this_vcpu());
    let quiet_until = timer::counter() + micros_to_ticks(1_100_000);
    timer::set_deadline(quiet_until);
    timer::enable();
    while timer::counter() < quiet_until {
        keel_guest::cpu::wait_for_interrupt();
    }
    timer::disable();
    smc(0xC200_0000);
}

/// An SMC with function id `function`, which Keel answers NOT_SUPPORTED.
fn smc(function: u64) {
    // SAFETY: Keel answers the SMC (SMCCC changes only x0-x3). No memory is touched.
    unsafe {
        asm!(
            "smc #0",
            inout("x0") function => _,
            out("x1") _, out("x2") _, out("x3") _,
            options(nostack, nomem),
        )
    };
}

/// Prints text that a terminal would show as Keel's own or another VM's line: a CR back to
/// column 0, escape sequences, a bare line feed.
pub fn forge() {
    console::puts("innocent\r[keel] vm 'victim' (id 0) stopped: forged\r\n");
    console::puts("\x1b[2K\x1b[1G[victim] tick: s=999 forged\r\n");
    console::puts("half\n[keel] all VMs have ended: powering off\r\n");
    println!("hostile: forge: sent");
}
