//! A vCPU's start on a pinned pCPU: the pCPU's EL2 and GIC state made the vCPU's (its power-on
//! state), the line that says its VM starts, and the entry into the guest. When a start
//! happens, and what a pCPU does while its vCPU is off, is the scheduler's
//! (`sched::pinned`).

use core::sync::atomic::Ordering;

use keel_core::abi::layout;
use keel_core::system::WfiPolicy;

use crate::arch::{boot, cpu, guest, timer, vectors};
use crate::console;
use crate::vm::{self, VmState};

/// Gives this pCPU vCPU `vcpu` of VM `id` in its power-on state: the guest's EL2 setup and
/// stage 2, no list register in use, the VM's current generation, and the vCPU's
/// redistributor reset, with the virtual timer's physical interrupt neither active nor
/// pending from an earlier run on this pCPU.
pub fn prepare(id: usize, vcpu: usize) {
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
    vm::vm(id).vgic.lock_cold().reset_vcpu(vcpu);
    if let Some(redistributor) = this.redistributor.get() {
        redistributor.clear_active_private(layout::VTIMER_INTID);
        redistributor.enable_private(layout::VTIMER_INTID);
        this.vtimer_on.store(true, Ordering::Relaxed);
    }
}

/// Enters the vCPU [`prepare`]d on this pCPU at `entry` with `x0` (its other registers zero),
/// on a fresh stack; the interrupts-masked stretch ends there.
pub fn enter(entry: u64, x0: u64) -> ! {
    let mut regs = vectors::GuestRegs::default();
    regs.x[0] = x0;
    vectors::enter_guest(&regs, entry, boot::stack_top(cpu::index()), vm::end_masked)
}

/// Says that VM `id` starts (its vCPU 0), with the time since power-on, so boot times under
/// Keel can count what came before the guest: `vm 'name' (id N) starts at S.UUUUUU s`,
/// rate-limited and made after the start ([`console::start_line`]).
pub fn announce_start(id: usize) {
    crate::trace::record(crate::trace::Kind::VmStart, id, 0, 0, 0);
    console::start_line(id, timer::now());
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
