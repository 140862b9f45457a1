//! A manager VM: reads, launches and deletes another partition's tasks (M5150: the GPOS
//! launches the real-time application), and prints what Keel answers. Keel allows it only
//! to the VMs the partition's `tasks.managers` names.

use keel_guest::task::{self, Task};
use keel_guest::timer;
use keel_guest::{println, system_off};

use crate::{sleep_until, Clock};

/// Waits two seconds (the partition creates its tasks meanwhile), then acts on the tasks of
/// VM `vm` (its argument).
pub fn run(vm: &str) -> ! {
    let Ok(vm) = vm.parse::<u64>() else {
        println!("manage: control.manage={vm}: not a VM id");
        system_off();
    };
    let clock = Clock::new();
    sleep_until(timer::counter() + clock.us(2_000_000));
    for index in 0..3 {
        let handle = Task(vm << 8 | index);
        match task::stats(handle) {
            Ok(stats) => println!(
                "manage: stats {:#x}: jobs={} misses={}",
                handle.0, stats.jobs, stats.deadline_misses
            ),
            Err(error) => println!(
                "manage: stats {:#x}: error {error:?} ({})",
                handle.0,
                error.code()
            ),
        }
    }
    let first = Task(vm << 8);
    let launched = task::launch(first, 0);
    println!("manage: launch {:#x}: {launched:?}", first.0);
    let last = Task(vm << 8 | 2);
    let deleted = task::delete(last);
    println!("manage: delete {:#x}: {deleted:?}", last.0);
    let again = task::stats(last).map(|s| s.jobs);
    println!("manage: stats {:#x} after delete: {again:?}", last.0);
    println!("manage: done");
    system_off();
}
