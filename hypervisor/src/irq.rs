//! Physical interrupts at EL2 and the delivery of virtual interrupts through list registers.
//!
//! Keel's interrupts: SGI 0 (kick: re-evaluate this pCPU's vCPU), PPI 25 (GIC maintenance),
//! PPI 26 (EL2 physical timer: console partial-line flush), PPI 27 (the running guest's
//! virtual timer, forwarded with a hardware-linked list register) and the UART's SPI.

use core::sync::atomic::Ordering;

use keel_core::abi::layout;
use keel_core::console::Input;

use crate::arch::gic;
use crate::vm::{self, VmState};
use crate::{console, keel_println};

/// The SGI one pCPU sends another to make it look at its vCPU again.
pub const KICK_SGI: u32 = 0;

/// Handles every pending physical interrupt. Runs with IRQs masked at EL2.
pub fn handle_pending() {
    loop {
        let intid = gic::acknowledge();
        if intid >= gic::SPECIAL_INTID {
            break;
        }
        gic::end_of_interrupt(intid);
        if intid == layout::VTIMER_INTID {
            virtual_timer();
            continue;
        }
        match intid {
            layout::HYP_TIMER_INTID => console::flush_partial(),
            // The maintenance interrupt stays asserted until its cause (an EOI'd or underflowing
            // list register) is dealt with: sync now, or it would fire again at once.
            layout::MAINTENANCE_INTID => sync_list_registers(),
            KICK_SGI => {}
            _ if intid == crate::uart_intid() => console_input(),
            _ => {}
        }
        gic::deactivate(intid);
    }
}

/// The guest's virtual timer fired: mark it pending in its vGIC. The physical interrupt
/// stays active until the guest's EOI deactivates it through the hardware-linked list register.
fn virtual_timer() {
    let running = vm::current().filter(|&(id, _)| vm::vm(id).state() == VmState::Running);
    match running {
        Some((id, vcpu)) => {
            if let Some(devices) = vm::vm(id).devices.lock().as_mut() {
                devices.vgic.raise(vcpu, layout::VTIMER_INTID);
            }
        }
        None => {
            // No guest to take it: silence the timer on this pCPU.
            if let Some(redistributor) = vm::this_cpu().redistributor.get() {
                redistributor.disable_private(layout::VTIMER_INTID);
            }
            gic::deactivate(layout::VTIMER_INTID);
        }
    }
}

fn console_input() {
    let received = console::receive();
    for input in &received.inputs[..received.count] {
        match *input {
            Input::Deliver { vm: id, byte } => deliver_input(id, byte),
            Input::Focus(id) => keel_println!("input focus: vm '{}' (id {})", console::focus_name(id), id),
            Input::PowerOff => {
                keel_println!("power off requested from the console");
                crate::arch::psci::system_off();
            }
            Input::Help => keel_println!("Ctrl-A then: 0-9 focus VM, n next VM, x power off, Ctrl-A a literal Ctrl-A"),
            Input::Nothing => {}
        }
    }
}

fn deliver_input(id: usize, byte: u8) {
    if vm::vm(id).state() != VmState::Running {
        return;
    }
    let target = {
        let mut guard = vm::vm(id).devices.lock();
        let Some(devices) = guard.as_mut() else { return };
        let overrun = devices.uart.receive(byte).is_err();
        devices.vgic.set_level(layout::UART_INTID, devices.uart.interrupt_level());
        let target = devices.vgic.spi_target(layout::UART_INTID);
        if overrun {
            drop(guard);
            keel_println!("vm '{}': console input overrun, byte refused (the guest is not reading)", vm::desc(id).name);
        }
        target
    };
    vm::kick_vcpu(id, target);
}

/// Brings the list registers of this pCPU's vCPU up to date with its vGIC: takes back the
/// interrupts the guest has finished with and lists the highest-priority pending ones.
/// With more pending than list registers, asks for an underflow maintenance interrupt.
pub fn sync_list_registers() {
    let Some((id, vcpu)) = vm::current() else { return };
    let cpu = vm::this_cpu();
    let mut guard = vm::vm(id).devices.lock();
    let Some(devices) = guard.as_mut() else { return };
    let vgic = &mut devices.vgic;
    let mut listed = cpu.listed.load(Ordering::Relaxed);
    // A list register is done with once its state is invalid. ICH_ELRSR_EL2 does not count one
    // that still requests an EOI maintenance interrupt as empty, so read the state itself.
    for lr in 0..gic::list_registers() {
        let bit = 1u64 << lr;
        if listed & bit == 0 {
            continue;
        }
        let value = gic::read_lr(lr);
        if gic::list_register_is_invalid(value) {
            vgic.unlisted(vcpu, value as u32, false, false);
            gic::write_lr(lr, 0);
            listed &= !bit;
        }
    }
    for lr in 0..gic::list_registers() {
        let bit = 1u64 << lr;
        if listed & bit != 0 {
            continue;
        }
        let Some((intid, priority, group1)) = vgic.next_pending(vcpu) else { break };
        let physical = (intid == layout::VTIMER_INTID).then_some(layout::VTIMER_INTID);
        // Level-sensitive SPIs ask for a maintenance interrupt on EOI so the line is re-sampled.
        let eoi_maintenance = intid >= 32;
        gic::write_lr(lr, gic::list_register_value(intid, priority, group1, physical, eoi_maintenance));
        vgic.mark_listed(vcpu, intid);
        listed |= bit;
    }
    gic::set_underflow_interrupt(vgic.next_pending(vcpu).is_some());
    cpu.listed.store(listed, Ordering::Relaxed);
}
