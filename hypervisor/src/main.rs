//! Keel: a static-partitioning, real-time hypervisor for 64-bit Arm, entered at EL2.
//!
//! # Layers
//!
//! Keel's modules form layers, from the hardware at the bottom to the trap dispatcher at the
//! top: state first (VMs, pCPUs), then the mechanisms on it (vCPU entry, interrupt delivery,
//! message queues), the devices and services built on those, the scheduler that runs it all,
//! and the dispatcher of guest exits. A module refers only to modules of lower layers, so a
//! reader can take them in this order and find each module's foundations already read;
//! `cargo xtask test` checks it (`xtask/src/layers.rs` reads the list below, one line per
//! module). Two narrow interfaces reach up: a guest entry ([`arch::vectors::enter_guest`],
//! [`arch::vectors::resume_guest`]) takes its caller's last step as a function (always
//! inlined: the end of the masked stretch, no cost), and interrupt delivery wakes a vCPU
//! sharing this pCPU through the scheduler's function that `main` installs at boot
//! ([`irq::set_wake_here`] with `sched::wake_here`: an indirect call, 7 instructions more
//! per wake), and the SMMU's interrupt reaches health's [`health::serve_device_faults`]
//! the same way ([`irq::set_device_faults`]), as each pCPU's health deadline reaches
//! [`health::serve`] ([`irq::set_health`]).
//!
//! - layer 0, `arch`: the hardware at EL2, all of Keel's `asm!`: boot, MMU, exception
//!   vectors, GICv3 and the list registers, timers, stage 2, PSCI, vCPU contexts, the PMU.
//!   Refers to nothing of Keel.
//! - layer 0, `config`: the system tables the configuration compiler emitted (data only).
//! - layer 1, `platform`: the board's facts from the device tree, read once at boot.
//! - layer 1, `colouring`: coloured memory: Keel's windows on the coloured VMs' RAM, and Keel
//!   itself copied to its colours' frames, once at boot.
//! - layer 1, `tables`: the pools of the VMs' stage-2 and SMMU stage-1 tables, sized by the
//!   configuration and cut into each VM's share, handed out once at boot.
//! - layer 1, `timers`: each pCPU's timer queue on its EL2 timer.
//! - layer 1, `trace`: each pCPU's ring of trace records (on when the configuration asks).
//! - layer 1, `masked`: the record of a pCPU's longest interrupts-masked stretch and where it
//!   was (each pCPU's kept in its state in `vm`, beside what a trap reads first).
//! - layer 2, `console`: Keel's own lines (limited per kind and VM, `keel_println_limited!`;
//!   unlimited only for a pCPU's boot and the operator, `keel_println!`) and the physical UART
//!   shared by the VMs' consoles (its flush armed in the timer queue).
//! - layer 3, `vm`: the state of VMs and pCPUs: each VM's life-cycle state, vCPU power, vGIC
//!   and PL011 models and task table; each pCPU's vCPU, list-register bookkeeping and
//!   masked-stretch record, why it must look at its vCPUs again, and the kick that tells it;
//!   the one checked access to guest memory.
//! - layer 4, `vcpu`: a vCPU's start on a pinned pCPU (its EL2 and GIC state, the start
//!   line) and the entry into the guest.
//! - layer 4, `irq`: physical interrupts at EL2 and virtual interrupt delivery (list
//!   registers, raising an interrupt and kicking its vCPU's pCPU). Up: the wake-here function.
//! - layer 5, `ipc`: the message queues: each destination's bounded queue, a copy into it
//!   (raising the receiver's interrupt), a copy out of it.
//! - layer 6, `devices`: the emulated devices behind one interface: the GICv3 distributor and
//!   redistributors, the PL011, the virtio console (its port backed by message queues), the
//!   SP805 watchdog (its reset output a VM's watchdog expiry).
//! - layer 6, `iommu`: DMA isolation: the SMMU's stream table from the VMs' assigned devices,
//!   their streams cut off and given back, its faults read.
//! - layer 7, `messages`: KEEL_MSG_SEND and KEEL_MSG_RECV (a message for a VM whose virtio
//!   console feeds on it goes to the console).
//! - layer 7, `channel`: channel doorbells.
//! - layer 7, `lifecycle`: building, stopping, powering off and resetting VMs; a reload in
//!   bounded steps.
//! - layer 8, `health`: health events decided by each VM's policy, said, sent to its
//!   managers and carried out (stop, restart); watchdogs; the misses the scheduler notes.
//! - layer 9, `sched`: what runs on each pCPU: a pinned vCPU's start, park and idle loop; a
//!   shared pCPU's run loop, switches and scheduler; the task services.
//! - layer 10, `manager`: a manager VM's services (KEEL_VM_*) on the VMs it manages.
//! - layer 11, `manager_window`: the management window of a manager VM (its registers, the
//!   services and KEEL_MSG_RECV through them), mapped only in a VM that manages another.
//! - layer 12, `trap`: the dispatcher of guest exits: hypercalls, system registers, data
//!   aborts, interrupts.
//! - layer 13, `main`: boot, each pCPU's bring-up, and the wiring of the upward interfaces.
//!
//! # Lock order
//!
//! Every lock is the arch layer's [`cpu::Mutex`], a ticket lock: pCPUs are served in the
//! order they asked, so a pCPU waits for at most one hold of each other pCPU, and each hold
//! below is bounded. No lock is held while a pCPU enters a guest, waits for an interrupt,
//! waits for a device (the SMMU's CMD_SYNC, the UART) or waits for another VM (a stop's wait
//! for the VM's vCPUs to leave the guest), and no two locks of one kind (two VMs' vGICs, two
//! queues, two task tables, two pCPUs' schedulers) are held together. A lock is taken only
//! with none held, or under locks listed before it:
//!
//! 1. A VM's task table ([`vm::task_table`], one per VM): its own task services and its
//!    managers' (KEEL_TASK_LAUNCH, _DELETE and _STATS on its tasks, KEEL_VM_RESOURCES), its
//!    reset or end. Held for one service, the task's pCPU's scheduler (2) under it.
//! 2. A shared pCPU's scheduler and vCPU contexts (`sched`'s `SharedCpu`, one per pCPU): the
//!    pCPU itself, in short sections and never while running a guest; the task services of
//!    any VM with a task there (an admission over the pCPU's 8 slots at most); a manager's
//!    KEEL_VM_SCHED_STATS.
//! 3. A VM's device models (one each per VM), in this order: its virtio console
//!    ([`devices::virtio::console`]), its PL011 ([`vm::Vm::uart`]), its SP805
//!    ([`devices::sp805::watchdog`]). Taken by its vCPUs' traps (one register, or one
//!    virtqueue step of at most 4 KiB), by pCPU 0 delivering console input (the PL011), by
//!    its virtio console's peer (input queued, output retried after a receive), by its reset
//!    (all of them, then its vGIC).
//! 4. A message queue ([`ipc`], one per destination vCPU or task): every sender the
//!    destination's `messages` table admits, Keel's health notices, a virtio console's
//!    output, the receiver, the reset of the destination's VM, a task's creation or deletion.
//!    Held for one copy of at most `keel_core::ipc::MAX_MESSAGE` bytes (4 KiB) or a clear;
//!    the receiver's interrupt is raised after it is released.
//! 5. A VM's vGIC ([`vm::Vm::vgic`], one per VM): its vCPUs' traps (one register), the pCPU
//!    running one of its vCPUs (its virtual timer, its list registers refilled: at most 16),
//!    whoever raises one of its interrupts (senders of messages and doorbells, health
//!    notices, a peer's virtio console, console input), its reset (bounded by its
//!    interrupts).
//! 6. Leaves, under which nothing is taken:
//!    - a VM's health record (`health`, one per VM): its own traps, its vCPU 0's pCPU
//!      (watchdog, misses), a scheduler noting its misses (under 2), its managers (a
//!      request, KEEL_VM_STATUS); one decision over at most 16 remembered times;
//!    - a VM's management-window registers (`manager_window`, one per VM): its own vCPUs, for
//!      one register (released during the call a FUNCTION write makes);
//!    - a VM's reload progress (`lifecycle`, one per VM): the resetting pCPU alone;
//!    - the SMMU (`arch::smmu`, one for the system): any pCPU stopping or restarting a VM with
//!      DMA-capable devices, the pCPU taking the SMMU's interrupt; held for one step (32
//!      stream table entries rewritten, at most 9 commands queued, one look at CMDQ_CONS, or
//!      at most 32 fault records read), never while a CMD_SYNC is waited for;
//!    - the console (`console`, one for the system): the multiplexer's lock, taken by the
//!      console pCPU (0) for one step (16 bytes pulled from the VMs' queues, or 48 written to
//!      the UART, which it never waits for), for reading console input, and by any pCPU for
//!      the copy of one of Keel's lines (at most 256 bytes); the rate limiter's lock, for
//!      one check. A VM's console output takes neither: its output queue is lock-free (one
//!      producer, its vCPUs under its PL011 lock (3); one consumer, the multiplexer's
//!      holder).
//!
//! Without locks: each pCPU's trace ring (written by that pCPU alone; a manager's
//! KEEL_TRACE_READ copies it, reading its head before and after), a manager's health
//! request (claimed by one compare-and-swap: a second manager is refused, not kept waiting),
//! watchdog expiries, kicks and vCPU power (atomics).
#![no_std]
#![no_main]

mod arch;
mod channel;
mod colouring;
mod console;
mod devices;
mod health;
mod iommu;
mod ipc;
mod irq;
mod lifecycle;
mod manager;
mod manager_window;
mod masked;
mod messages;
mod platform;
mod sched;
mod tables;
mod timers;
mod trace;
mod trap;
mod vcpu;
mod vm;

/// The system configuration, compiled on the host by `cargo xtask build`.
mod config {
    /// `static $name`: the bytes of the file at `path` (a guest's image, initrd or device
    /// tree), in the guests' images' section: outside a coloured Keel's range, where it was
    /// loaded (Keel reads them only to load or reload a VM).
    #[allow(
        unused_macros,
        reason = "a system without VMs (build.rs's own) embeds no file"
    )]
    macro_rules! guest_bytes {
        ($name:ident, $path:literal) => {
            #[unsafe(link_section = ".guest_images")]
            static $name: [u8; include_bytes!($path).len()] = *include_bytes!($path);
        };
    }

    include!(concat!(env!("OUT_DIR"), "/system.rs"));
}

use core::sync::atomic::Ordering;

use arch::{boot, cpu, gic, mmu, psci, uart::Uart, vectors};
use keel_core::abi::layout;
use keel_core::fdt;
use keel_core::text::{Fill, Hex, List, Show};

use config::SYSTEM;
use console::{Boot, VmLabel};
use platform::Platform;

/// Reads the device tree at `address` into a slice, checking its header first.
fn device_tree(address: u64) -> Result<&'static [u8], platform::BootError> {
    if address == 0 {
        return Err(platform::BootError::NoDeviceTree);
    }
    // SAFETY: the loader passed a device tree at `address` (in RAM, identity-mapped as normal
    // memory); only its 40-byte header is read before its own size is known.
    let header = unsafe { core::slice::from_raw_parts(address as *const u8, 40) };
    let size = fdt::total_size(header)?;
    // SAFETY: as above, for the size the header declares; nothing writes the blob while Keel
    // reads it (VM images are loaded only after the platform has been read).
    Ok(unsafe { core::slice::from_raw_parts(address as *const u8, size) })
}

/// Zeroes the platform's `/chosen/rng-seed` and `kaslr-seed` once Keel has its key: the blob
/// may lie in memory a VM is given, and no guest may learn the seed its own are derived from.
fn scrub_platform_seeds(address: u64) {
    let Ok(blob) = device_tree(address) else {
        return;
    };
    let Ok(Some(chosen)) = fdt::Fdt::new(blob).and_then(|tree| tree.find_node("/chosen")) else {
        return;
    };
    for name in ["rng-seed", "kaslr-seed"] {
        if let Ok(Some(value)) = chosen.property(name) {
            let offset = value.as_ptr() as u64 - address;
            // SAFETY: the value lies inside the device tree blob in RAM (identity-mapped normal
            // memory); nothing reads these bytes again once the platform has been read.
            unsafe { core::ptr::write_bytes((address + offset) as *mut u8, 0, value.len()) };
        }
    }
}

/// The UART to report a board mismatch on: the board's, if it is of the kind Keel was built
/// to drive, or else `fallback`.
fn platform_uart(platform: &Platform, fallback: Uart) -> Uart {
    if platform.uart_kind == SYSTEM.board.uart {
        // SAFETY: the device tree names this UART, of the kind Keel drives, as the console.
        unsafe { Uart::new(platform.uart) }
    } else {
        fallback
    }
}

fn boot_failure(boot: Boot, uart: Uart, parts: &[&dyn Show]) -> ! {
    console::init_early(uart);
    keel_println!(boot, "boot error: ", parts);
    psci::system_off()
}

/// Entry of the boot pCPU from `_start`, with the device tree address.
#[unsafe(no_mangle)]
extern "C" fn keel_primary_main(dtb: u64) -> ! {
    let boot = Boot::bring_up();
    mmu::build(SYSTEM.ram_base.0, SYSTEM.ram_size);
    mmu::enable();
    vectors::install();
    timers::init();

    // SAFETY: the UART the board Keel was built for usually has, used only to report a device
    // tree Keel cannot read.
    let fallback = unsafe { Uart::new(SYSTEM.board.early_uart) };
    let platform = match device_tree(dtb).and_then(Platform::from_dtb) {
        Ok(platform) => platform::record(platform),
        Err(error) => boot_failure(boot, fallback, &[&error]),
    };
    scrub_platform_seeds(dtb);
    if platform.gic_version != SYSTEM.board.gic || platform.uart_kind != SYSTEM.board.uart {
        let uart = platform_uart(platform, fallback);
        boot_failure(
            boot,
            uart,
            &[&Fill(
                "Keel was built for board {} ({}, {}) but this device tree has a {} and a {}",
                &[
                    &SYSTEM.board.name,
                    &SYSTEM.board.gic.name(),
                    &SYSTEM.board.uart.name(),
                    &platform.gic_version.name(),
                    &platform.uart_kind.name(),
                ],
            )],
        );
    }
    // SAFETY: the device tree names this UART, of the kind Keel drives, as the board's
    // console; Keel is its only user.
    let uart = unsafe { Uart::new(platform.uart) };
    console::init_early(uart);
    check_configuration(boot, platform)
        .unwrap_or_else(|()| boot_failure(boot, uart, &[&"configuration does not fit this board"]));

    keel_println!(
        boot,
        "Keel {} on '{}' (board {}: {} at {}, {} at {}): {} pCPUs, RAM {}+{}, configuration '{}' with {} VMs";
        env!("CARGO_PKG_VERSION"),
        platform.model,
        SYSTEM.board.name,
        platform.gic_version.name(),
        Hex(platform.gic.distributor, 0),
        platform.uart_kind.name(),
        Hex(platform.uart, 0),
        platform.cpu_count,
        Hex(platform.ram_base, 0),
        Hex(platform.ram_size, 0),
        SYSTEM.name,
        SYSTEM.vms.len(),
    );

    // SAFETY: the distributor address comes from the device tree.
    let distributor = gic::install(unsafe { gic::Distributor::new(platform.gic.distributor) });
    distributor.enable_spi(platform.uart_intid, platform.cpus[0]);

    match colouring::colour_keel() {
        Ok(Some(map)) => keel_println!(
            boot,
            "Keel coloured: colour mask {} of {}, its {} bytes in frames from {} to {}";
            Hex(map.colours.mask, 0),
            map.colours.count,
            map.coloured_size(),
            Hex(map.frames, 0),
            Hex(map.frames + map.span().unwrap_or(0), 0),
        ),
        Ok(None) => {}
        Err(error) => boot_failure(boot, uart, &[&"Keel's colours: ", &error]),
    }
    if let Err(error) = colouring::build_windows() {
        boot_failure(boot, uart, &[&"coloured VMs: ", &error]);
    }
    vm::assign_pcpus();
    irq::set_wake_here(sched::wake_here);
    let mut names = [""; vm::MAX_VMS];
    let mut consoles = [false; vm::MAX_VMS];
    for (index, desc) in SYSTEM.vms.iter().enumerate() {
        names[index] = desc.name;
        consoles[index] = desc.console;
        if let Err(error) = lifecycle::build(index) {
            boot_failure(
                boot,
                uart,
                &[&Fill(
                    "vm '{}': cannot build its stage-2 map: {}",
                    &[&desc.name, &error],
                )],
            );
        }
        keel_println!(
            boot,
            "{}: {} MiB at IPA {} (PA {}), pCPUs {}, image {} bytes at {}";
            VmLabel(desc.name, index),
            desc.memory.size >> 20,
            Hex(desc.memory.ipa.0, 0),
            Hex(desc.memory.phys.0, 0),
            List(desc.pcpus),
            desc.image.len(),
            Hex(desc.image_ipa.0, 0),
        );
        if let Some(flash) = desc.flash {
            keel_println!(
                boot,
                "{}: {} MiB of flash at IPA {} (PA {}), device tree at {}";
                VmLabel(desc.name, index),
                flash.size >> 20,
                Hex(flash.ipa.0, 0),
                Hex(flash.phys.0, 0),
                Hex(desc.dtb_ipa.0, 0),
            );
        }
    }
    if let Err(error) = iommu::init() {
        boot_failure(boot, uart, &[&"SMMU: ", &error]);
    }
    if let Some(iommu) = &SYSTEM.iommu {
        irq::set_device_faults(health::serve_device_faults);
        for intid in [iommu.event_intid, iommu.gerror_intid] {
            distributor.reset_spi(intid, false, platform.cpus[0]);
            distributor.set_spi_enabled(intid, true);
        }
    }
    ipc::init();
    health::init();
    irq::set_health(health::serve);
    if trace::ON {
        let (address, rings, bytes) = trace::rings();
        keel_println!(
            boot,
            "trace: {} rings of {} bytes at {}, one per pCPU";
            rings,
            bytes,
            Hex(address, 0),
        );
    }
    let raw_console = SYSTEM.vms.iter().position(|desc| desc.raw_console);
    console::init(
        uart,
        &names[..SYSTEM.vms.len()],
        &consoles[..SYSTEM.vms.len()],
        raw_console,
    );
    if let Some(index) = raw_console {
        keel_println!(
            boot,
            VmLabel(names[index], index),
            ": console output raw while it has the input focus, which starts there (Ctrl-A r: escaped)"
        );
    }
    if SYSTEM.vms.is_empty() {
        keel_println!(boot, "no VM configured: powering off");
        console::flush_before_power_off();
        psci::system_off();
    }

    for index in 1..SYSTEM.pcpus as usize {
        if let Err(error) = boot::start_secondary(index, platform.cpus[index]) {
            keel_println!(
                boot,
                "pCPU {} (MPIDR {}) did not start: PSCI error {}";
                index,
                Hex(platform.cpus[index], 0),
                error,
            );
        }
    }
    cpu_main(0, boot)
}

/// Entry of a secondary pCPU started with PSCI CPU_ON.
#[unsafe(no_mangle)]
extern "C" fn keel_secondary_main(index: usize) -> ! {
    mmu::enable();
    vectors::install();
    cpu_main(index, Boot::bring_up())
}

fn check_configuration(boot: Boot, platform: &Platform) -> Result<(), ()> {
    let mut fits = true;
    if SYSTEM.pcpus as usize > platform.cpu_count {
        keel_println!(
            boot,
            "configuration '{}' needs {} pCPUs, the board has {}";
            SYSTEM.name,
            SYSTEM.pcpus,
            platform.cpu_count,
        );
        fits = false;
    }
    let ram_end = platform.ram_base + platform.ram_size;
    for desc in SYSTEM.vms {
        for (what, region) in [("memory", Some(desc.memory)), ("flash", desc.flash)] {
            let Some(region) = region else {
                continue;
            };
            let (start, end) = (region.phys.0, region.phys.0 + region.size);
            if start < platform.ram_base || end > ram_end {
                keel_println!(
                    boot,
                    "vm '{}': {} {}..{} is outside the board's RAM {}..{}";
                    desc.name,
                    what,
                    Hex(start, 0),
                    Hex(end, 0),
                    Hex(platform.ram_base, 0),
                    Hex(ram_end, 0),
                );
                fits = false;
            }
        }
    }
    if fits {
        Ok(())
    } else {
        Err(())
    }
}

/// Common per-pCPU bring-up, then run this pCPU's vCPU (or idle). `boot` is this pCPU's: it
/// is not passed on to what runs guests.
fn cpu_main(index: usize, boot: Boot) -> ! {
    trace::init();
    let platform = platform::get();
    let this = vm::percpu(index);
    this.mpidr.store(cpu::mpidr(), Ordering::Relaxed);
    // SAFETY: the redistributor region comes from the device tree.
    let redistributor = unsafe { gic::Redistributor::find(&platform.gic, cpu::mpidr()) };
    let Some(redistributor) = redistributor else {
        keel_println!(boot, "pCPU {}: no GIC redistributor for MPIDR {}"; index, Hex(cpu::mpidr(), 0));
        cpu::halt()
    };
    redistributor.init();
    for intid in [
        vm::KICK_SGI,
        layout::MAINTENANCE_INTID,
        layout::HYP_TIMER_INTID,
    ] {
        redistributor.enable_private(intid);
    }
    this.redistributor.call_once(|| redistributor);
    gic::init_cpu_interface(&platform.gic);
    if vm::this_cpu_is_shared() {
        // Guest settings that do not change between the vCPUs placed here.
        arch::guest::configure_pcpu(false, true);
        vectors::install_shared();
        sched::init(index, boot);
    }
    sched::pinned::run_this_cpu()
}

/// Rust panics in Keel: report and stop this pCPU (the other pCPUs' VMs keep running). The
/// message is shown when it is a plain string; one with arguments (a failed bounds check) is
/// left out, as `core::fmt` is not in Keel's image: the location names the check.
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let (file, line, column) = info
        .location()
        .map_or(("?", 0, 0), |at| (at.file(), at.line(), at.column()));
    console::emergency_line(&[&Fill(
        "PANIC on pCPU {}: panicked at {}:{}:{}: {} (ELR_EL2 {}, ESR_EL2 {}, FAR_EL2 {})",
        &[
            &cpu::index(),
            &file,
            &line,
            &column,
            &info
                .message()
                .as_str()
                .unwrap_or("(a message with arguments)"),
            &Hex(arch::regs::read_sysreg!("elr_el2"), 0),
            &Hex(arch::regs::read_sysreg!("esr_el2"), 0),
            &Hex(arch::regs::read_sysreg!("far_el2"), 0),
        ],
    )]);
    cpu::halt()
}

/// An exception taken by Keel itself: a bug. Report where it happened and stop this pCPU.
#[unsafe(no_mangle)]
extern "C" fn keel_hyp_fault() -> ! {
    let esr = arch::regs::read_sysreg!("esr_el2");
    console::emergency_line(&[&Fill(
        "FATAL exception in Keel on pCPU {}: ESR_EL2 {} ({}), ELR_EL2 {}, FAR_EL2 {}",
        &[
            &cpu::index(),
            &Hex(esr, 8),
            &keel_core::esr::Esr(esr),
            &Hex(arch::regs::read_sysreg!("elr_el2"), 0),
            &Hex(arch::regs::read_sysreg!("far_el2"), 0),
        ],
    )]);
    cpu::halt()
}
