//! Keel's hostile guest: attacks on what Keel promises every guest, each run by
//! `keel.attack=<name>` next to a victim VM, each probe printed as `probe <name>: ok ...` or
//! `probe <name>: FAIL ...` and the run ended by `attack <name>: done` and SYSTEM_OFF.
//!
//! | attack | what it tries |
//! | --- | --- |
//! | `sgi-self` | 16 distinct SGIs (and one twice) raised at itself with IRQs masked: more pending than list registers |
//! | `sgi-cross` | vCPU 0 raises 16 SGIs at vCPU 1 while vCPU 1 has IRQs masked |
//! | `sgi-foreign` | SGIs at vCPUs the VM does not have; on a GICv2, vCPU 0 writes its banked SGI/PPI registers and vCPU 1's must be untouched (see [`sgi_foreign`]) |
//! | `timer-cpu-off` | CPU_OFF with the virtual timer interrupt pending, then active; CPU_ON must give a working timer |
//! | `timer-reset` | SYSTEM_RESET with the timer interrupt active, then pending, then a clean one; the timer must work after each |
//! | `pmu-reset` | with `pmu = true`: fills every PMU register and lets the counters count, then CPU_OFF/CPU_ON and SYSTEM_RESET; each start must find the PMU clean (see [`pmu`]) |
//! | `ro-channel-owner`, `ro-channel-stores` | stores without instruction syndrome (STP, STR with writeback, STR Q, STXR, SWP) into a read-only channel window, its owner checking nothing landed (see [`ro_channel`]) |
//! | `flood` | prints and issues SMCs flat out for `keel.millis` milliseconds |
//! | `forge` | prints lines made to pass for Keel's or another VM's, with CR and ANSI escapes |
//! | `calls` | unknown and malformed hypercalls and SMCs, PSCI on invalid CPUs and entry points, CPU_ON/CPU_OFF cycles and races |
//! | `reset-loop` | resets itself right after every boot for `keel.millis` ms (default 250), pauses, and resets once more; reports its boots (see [`reset_loop`]) |
//! | `manager-storm` | as the manager of VM `keel.managed`, stops, starts and restarts it from both vCPUs for `keel.millis` ms (default 1000), never reading Keel's notices; then pauses, and starts and stops it once more (see [`manager_storm`]) |
//! | `foreign-records` | KEEL_MASKED_STRETCH (read, reset) of the victim's pCPU and every pCPU not its own, KEEL_TASK_STATS of the other VMs' task handles: each must be refused; its own pCPUs must still answer (see [`foreign_records`]) |
//! | `budget-reset` | on a shared pCPU with a reservation: spins `keel.spin` µs (default 50), resets the VM, and again, for `keel.millis` ms (default 2000); reports the time it ran (see [`budget`]) |
//! | `budget-cpu-off` | the same with CPU_OFF of vCPU 0 and a CPU_ON from vCPU 1 on another pCPU as soon as AFFINITY_INFO says off |
//! | `probe` | one access outside what the VM owns (`keel.probe=<kind>:<address>`, see [`access`]) |
//!
//! Every vCPU start (boot, CPU_ON, reset) also reports what the SDK's entry check found (the
//! budget attacks, which start thousands of times, count them in their summary line).
#![no_std]
#![no_main]

mod access;
mod budget;
mod calls;
mod console_attacks;
mod foreign_records;
mod interrupts;
mod lifecycle;
mod manager_storm;
mod pmu;
mod reset_loop;
mod ro_channel;
mod sgi_foreign;
mod shared;

use keel_guest::bootargs::BootArgs;
use keel_guest::devicetree::{boot_info, device_tree_at, BootInfo};
use keel_guest::entry_check::take_entry_state;
use keel_guest::environment::{set_environment, Environment};
use keel_guest::{println, system_off, vm_id};

keel_guest::entry!(main);

/// Reports a probe's outcome on one line.
#[macro_export]
macro_rules! probe {
    ($name:expr, $ok:expr, $($detail:tt)*) => {{
        let verdict = if $ok { "ok" } else { "FAIL" };
        keel_guest::println!("probe {}: {} {}", $name, verdict, format_args!($($detail)*));
    }};
}

fn main(device_tree_address: usize) -> ! {
    set_environment(Environment::Keel);
    keel_guest::boot::set_secondary_main(lifecycle::secondary_main);
    // SAFETY: x0 at entry is where Keel put the device tree, which nothing writes.
    let device_tree = unsafe { device_tree_at(device_tree_address) };
    let info = match device_tree.and_then(|tree| boot_info(&tree)) {
        Ok(info) => info,
        Err(error) => {
            println!("hostile: unreadable device tree: {error}");
            system_off();
        }
    };
    let args = BootArgs::new(info.bootargs);
    let Some(attack) = args.value("keel.attack") else {
        println!("hostile: no keel.attack=<name> on the command line");
        system_off();
    };
    // `reset-loop` starts thousands of times: it reports its entry states itself.
    if !budget::reports_own_entries(attack) && attack != "reset-loop" {
        let (vm, vcpu) = vm_id();
        println!(
            "hostile: vm {vm} vcpu {vcpu} entry {}",
            take_entry_state(vcpu as usize)
        );
    }
    run(attack, &args, &info);
    println!("attack {attack}: done");
    system_off()
}

fn run(attack: &str, args: &BootArgs<'_>, info: &BootInfo<'_>) {
    match attack {
        "sgi-self" => interrupts::sgi_self(),
        "sgi-cross" => interrupts::sgi_cross(),
        "sgi-foreign" => sgi_foreign::sgi_foreign(),
        "timer-cpu-off" => lifecycle::timer_cpu_off(),
        "timer-reset" => lifecycle::timer_reset(info),
        "pmu-reset" => pmu::pmu_reset(info),
        "ro-channel-owner" => ro_channel::owner(args),
        "ro-channel-stores" => ro_channel::stores(args),
        "flood" => console_attacks::flood(args),
        "forge" => console_attacks::forge(),
        "calls" => calls::calls(),
        "reset-loop" => reset_loop::reset_loop(args, info),
        "manager-storm" => manager_storm::manager_storm(args),
        "foreign-records" => foreign_records::foreign_records(args),
        "budget-reset" => budget::reset(args, info),
        "budget-cpu-off" => budget::cpu_off_attack(args, info),
        "probe" => match args.value("keel.probe") {
            Some(spec) => access::probe(spec),
            None => println!("hostile: keel.attack=probe needs keel.probe=<kind>:<address>"),
        },
        other => println!("hostile: unknown attack '{other}'"),
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    keel_guest::fatal::fatal_panic(info)
}
