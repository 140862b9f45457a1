//! A pinned pCPU's run loop: starting its vCPU, parking it when it stops, and idling while it
//! is off or its VM has ended. Parking on a shared pCPU hands the pCPU back to its run loop
//! ([`super::stop_running`]).

use core::sync::atomic::Ordering;

use keel_core::abi::MaskedSite;

use super::{run_loop, stop_running};
use crate::arch::cpu;
use crate::vm::{self, VmState};
use crate::{irq, lifecycle, vcpu};

/// Enters vCPU `vcpu` of VM `id` at `entry` with `x0`, from its power-on state.
pub fn start(id: usize, vcpu: usize, entry: u64, x0: u64) -> ! {
    vcpu::prepare(id, vcpu);
    if vcpu == 0 {
        vcpu::announce_start(id);
    }
    vm::this_cpu().in_guest.store(true, Ordering::SeqCst);
    crate::trace::record(crate::trace::Kind::SwitchIn, id, vcpu, 0, 0);
    if !vm::vm(id).may_enter() {
        // A start taken just before its VM's reset began: the reset starts vCPU 0 afresh.
        park();
    }
    vcpu::enter(entry, x0)
}

/// Stops running guest code on this pCPU: waits, serving interrupts, until the vCPU is
/// started (again) by PSCI CPU_ON. Never returns.
pub fn park() -> ! {
    park_with(true)
}

/// [`park`] for a task deleted from another pCPU while it ran here: its delete marked its
/// vCPU off already, and by now that vCPU may be a new task's, launched, whose power is not
/// this one's to change.
pub fn park_deleted() -> ! {
    park_with(false)
}

fn park_with(power_off: bool) -> ! {
    cpu::disable_irqs();
    vm::this_cpu().in_guest.store(false, Ordering::Release);
    if let Some((id, vcpu)) = vm::current() {
        irq::discard_vcpu_interrupts(id, vcpu, vm::this_cpu().generation.load(Ordering::Relaxed));
        // Only On becomes Off: a start requested meanwhile (CPU_ON, reset) must survive.
        if power_off {
            vm::vm(id).power_off_if_on(vcpu);
        }
    }
    if vm::this_cpu_is_shared() {
        stop_running()
    }
    idle()
}

/// The idle loop of a pCPU: serve interrupts; start the pinned vCPU when asked to.
pub fn idle() -> ! {
    loop {
        if let Some((id, vcpu)) = vm::current() {
            let vm = vm::vm(id);
            // A restart of its VM asked from elsewhere: vCPU 0's pCPU reloads it.
            if crate::config::HEALTH && vcpu == 0 {
                lifecycle::take_restart_here(id);
            }
            if vm.state() == VmState::Running {
                if let Some((entry, context)) = vm.take_start(vcpu) {
                    start(id, vcpu, entry, context);
                }
            }
        }
        vm::masked().end();
        cpu::wait_for_interrupt();
        vm::masked().begin(MaskedSite::Idle);
        let _ = irq::handle_pending();
    }
}

/// First run of this pCPU's vCPU: vCPU 0 boots the VM's image; others wait for CPU_ON. A
/// shared pCPU enters its run loop.
pub fn run_this_cpu() -> ! {
    if vm::this_cpu_is_shared() {
        run_loop()
    }
    match vm::current() {
        Some((id, 0)) => {
            let desc = vm::desc(id);
            start(id, 0, desc.image_ipa.0, desc.dtb_ipa.0)
        }
        _ => idle(),
    }
}
