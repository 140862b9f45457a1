//! Running a pinned vCPU on this pCPU: starting it, and idling while it is off or its VM has ended.

use core::sync::atomic::Ordering;

use keel_core::abi::layout;
use keel_core::ratelimit::DiagnosticKind;
use keel_core::system::WfiPolicy;

use crate::arch::{boot, cpu, guest, timer, vectors};
use crate::vm::{self, VmState};
use crate::{irq, keel_println_limited};

/// Enters vCPU `vcpu` of VM `id` at `entry` with `x0`, from its power-on state.
pub fn start(id: usize, vcpu: usize, entry: u64, x0: u64) -> ! {
    let desc = vm::desc(id);
    let this = vm::this_cpu();
    guest::prepare(
        desc.id.0 + 1,
        vm::vm(id).stage2_root(),
        vcpu,
        desc.wfi == WfiPolicy::Trap,
        desc.pmu,
    );
    this.listed.store(0, Ordering::Relaxed);
    this.forget_timer_lr();
    this.generation
        .store(vm::vm(id).generation(), Ordering::Relaxed);
    // A clean start: the vCPU's redistributor in its reset state, and the virtual timer's
    // physical interrupt neither active nor pending from an earlier run on this pCPU.
    vm::vm(id).vgic.lock().reset_vcpu(vcpu);
    if let Some(redistributor) = this.redistributor.get() {
        redistributor.clear_active_private(layout::VTIMER_INTID);
        redistributor.enable_private(layout::VTIMER_INTID);
    }
    if vcpu == 0 {
        announce_start(id);
    }
    this.in_guest.store(true, Ordering::SeqCst);
    if !vm::vm(id).may_enter() {
        // A start taken just before its VM's reset began: the reset starts vCPU 0 afresh.
        park();
    }
    let mut regs = vectors::GuestRegs::default();
    regs.x[0] = x0;
    vectors::enter_guest(
        &regs,
        entry,
        boot::stack_top(cpu::index()),
        crate::masked::end,
    )
}

/// Says that VM `id` starts (its vCPU 0), with the time since power-on, so boot times under
/// Keel can count what came before the guest. A guest can start its vCPU 0 at will (reset,
/// CPU_OFF and CPU_ON), so the line is rate-limited; the first boot's is always printed.
pub fn announce_start(id: usize) {
    let micros = u128::from(timer::now()) * 1_000_000 / u128::from(timer::frequency().max(1));
    keel_println_limited!(
        DiagnosticKind::Start,
        id,
        "vm '{}' (id {id}) starts at {}.{:06} s",
        vm::desc(id).name,
        micros / 1_000_000,
        micros % 1_000_000
    );
}

/// Whether the vCPU on this pCPU may keep running: its VM runs and has not been reset under it.
pub fn still_valid() -> bool {
    match vm::current() {
        Some((id, _)) => {
            let vm = vm::vm(id);
            vm.state() == VmState::Running
                && vm.generation() == vm::this_cpu().generation.load(Ordering::Relaxed)
        }
        None => false,
    }
}

/// Stops running guest code on this pCPU: waits, serving interrupts, until the vCPU is
/// started (again) by PSCI CPU_ON. Never returns.
pub fn park() -> ! {
    cpu::disable_irqs();
    vm::this_cpu().in_guest.store(false, Ordering::Release);
    if let Some((id, vcpu)) = vm::current() {
        irq::discard_vcpu_interrupts(id, vcpu, vm::this_cpu().generation.load(Ordering::Relaxed));
        // Only On becomes Off: a start requested meanwhile (CPU_ON, reset) must survive.
        vm::vm(id).power_off_if_on(vcpu);
    }
    if vm::this_cpu_is_shared() {
        crate::sched::stop_running()
    }
    idle()
}

/// The idle loop of a pCPU: serve interrupts; start the pinned vCPU when asked to.
pub fn idle() -> ! {
    loop {
        if let Some((id, vcpu)) = vm::current() {
            let vm = vm::vm(id);
            if vm.state() == VmState::Running {
                if let Some((entry, context)) = vm.take_start(vcpu) {
                    start(id, vcpu, entry, context);
                }
            }
        }
        crate::masked::end();
        cpu::wait_for_interrupt();
        crate::masked::begin(keel_core::abi::MaskedSite::Idle);
        let _ = irq::handle_pending();
    }
}

/// First run of this pCPU's vCPU: vCPU 0 boots the VM's image; others wait for CPU_ON. A
/// shared pCPU enters its run loop.
pub fn run_this_cpu() -> ! {
    if vm::this_cpu_is_shared() {
        crate::sched::run_loop()
    }
    match vm::current() {
        Some((id, 0)) => {
            let desc = vm::desc(id);
            start(id, 0, desc.image_ipa.0, desc.dtb_ipa.0)
        }
        _ => idle(),
    }
}
