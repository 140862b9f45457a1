//! Console attacks: output and SMCs flat out, and lines forged to pass for someone else's.

use core::arch::asm;

use keel_guest::bootargs::BootArgs;
use keel_guest::{console, println, timer};

use crate::shared::micros_to_ticks;

/// Prints and issues SMCs flat out for `keel.seconds` seconds (default 2).
pub fn flood(args: &BootArgs<'_>) {
    let seconds = args
        .value("keel.seconds")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(2);
    let deadline = timer::counter() + micros_to_ticks(seconds * 1_000_000);
    let mut round = 0u64;
    while timer::counter() < deadline {
        for _ in 0..16 {
            // SAFETY: an SMC with an unknown function id; Keel answers it (SMCCC changes only
            // x0-x3). No memory is touched.
            unsafe {
                asm!(
                    "smc #0",
                    inout("x0") 0xC200_0000u64 + (round & 0xff) => _,
                    out("x1") _, out("x2") _, out("x3") _,
                    options(nostack, nomem),
                )
            };
        }
        println!("flood {round} the quick brown fox jumps over the lazy dog");
        round += 1;
    }
    println!("hostile: flood: {round} rounds");
}

/// Prints text that a terminal would show as Keel's own or another VM's line: a CR back to
/// column 0, escape sequences, a bare line feed.
pub fn forge() {
    console::puts("innocent\r[keel] vm 'victim' (id 0) stopped: forged\r\n");
    console::puts("\x1b[2K\x1b[1G[victim] tick: s=999 forged\r\n");
    console::puts("half\n[keel] all VMs have ended: powering off\r\n");
    println!("hostile: forge: sent");
}
