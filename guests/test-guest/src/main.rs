//! Keel's test guest: periodic ticks with console echo and a control loop, hostile actions,
//! SGIs between two vCPUs, and micro-benchmarks.
//!
//! The same image runs as a Keel VM and natively on bare QEMU (`keel.native`); see
//! [`options`] for the boot arguments it understands.
#![no_std]
#![no_main]

mod bench;
mod channels;
mod control;
mod edu;
mod hostile;
mod interrupts;
mod manager;
mod messages;
mod options;
mod rtc;
mod sgi;
mod shares;
mod storm;
mod task_reuse;
mod ticks;
mod trace_reader;
mod walk;

use keel_guest::bootargs::BootArgs;
use keel_guest::devicetree::{boot_info, device_tree_at};
use keel_guest::entry_check::take_entry_state;
use keel_guest::environment::{set_environment, Environment};
use keel_guest::gic;
use keel_guest::{keel_version, println, system_off, vm_id};

use crate::options::{Mode, Options};

keel_guest::entry!(main);

fn main(device_tree_address: usize) -> ! {
    // SAFETY: the address is x0 at entry, where the loader (QEMU or Keel) put the blob, which
    // nothing ever writes.
    let device_tree = unsafe { device_tree_at(device_tree_address) };
    let (tree, info) = match device_tree.and_then(|tree| Ok((tree, boot_info(&tree)?))) {
        Ok(found) => found,
        Err(error) => {
            println!("test-guest: unreadable device tree at {device_tree_address:#x}: {error}");
            system_off();
        }
    };
    let options = match Options::parse(BootArgs::new(info.bootargs)) {
        Ok(options) => options,
        Err(error) => {
            println!("test-guest: {error}");
            system_off();
        }
    };

    let vcpu = if options.native {
        set_environment(Environment::Native);
        println!("test-guest: native mode {}", options.mode);
        0
    } else {
        set_environment(Environment::Keel);
        let (vm, vcpu) = vm_id();
        // Whether Keel entered this vCPU in its documented state (checked by the SDK's boot code).
        let entry = take_entry_state(vcpu as usize);
        match keel_version() {
            Ok(version) => println!(
                "test-guest: vm {vm} vcpu {vcpu} keel {version} mode {} entry {entry}",
                options.mode
            ),
            Err(error) => println!(
                "test-guest: vm {vm} vcpu {vcpu} keel {error:?} mode {} entry {entry}",
                options.mode
            ),
        }
        vcpu
    };

    // The GICv3 runs print nothing more, so that their output stays as it was.
    if let gic::Description::V2 {
        distributor,
        cpu_interface,
    } = gic::selected()
    {
        println!(
            "test-guest: GICv2 (from the device tree): distributor {distributor:#x}, CPU interface {cpu_interface:#x}"
        );
    }
    let Some(private_interrupts) = interrupts::init(vcpu) else {
        println!("test-guest: the GIC has no CPU interface for vcpu {vcpu}");
        system_off();
    };
    match options.mode {
        Mode::Ticks => ticks::run(&options, &info, &private_interrupts),
        Mode::Bench => bench::run(options.native, &private_interrupts),
        Mode::Spin => loop {
            core::hint::spin_loop();
        },
        Mode::Job => shares::job(options.work_us, options.report_every_seconds),
        Mode::Share => shares::share(options.report_every_seconds),
        Mode::Work => shares::work(options.iterations, options.start_ms, options.print_ms),
        Mode::Messages => messages::run(BootArgs::new(info.bootargs)),
        Mode::Channel => channels::run(BootArgs::new(info.bootargs), &private_interrupts),
        Mode::Rtc => rtc::run(&tree, BootArgs::new(info.bootargs), &private_interrupts),
        Mode::Edu => edu::run(&tree, BootArgs::new(info.bootargs), &private_interrupts),
        Mode::TraceReader => trace_reader::run(BootArgs::new(info.bootargs)),
        Mode::Manager => manager::run(BootArgs::new(info.bootargs)),
        Mode::TaskReuse => task_reuse::run(BootArgs::new(info.bootargs)),
        Mode::Sgi => sgi::run(BootArgs::new(info.bootargs), &private_interrupts),
        Mode::Walk => walk::run(BootArgs::new(info.bootargs)),
        Mode::Pingpong => shares::pingpong(
            info.bootargs.contains("keel.pingpong=measure"),
            info.bootargs.split_whitespace().any(|t| t == "keel.fp"),
        ),
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    keel_guest::fatal::fatal_panic(info)
}
