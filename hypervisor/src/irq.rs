//! Physical interrupts at EL2 and the delivery of virtual interrupts through list registers.
//!
//! Keel's interrupts: SGI 0 (kick: re-evaluate this pCPU's vCPUs), PPI 25 (GIC maintenance),
//! PPI 26 (EL2 physical timer: the pCPU's timer queue, see [`crate::timers`]), PPI 27 (the
//! running guest's virtual timer, forwarded with a hardware-linked list register) and the
//! UART's SPI. The SPIs of the board devices given to VMs are forwarded the timer's way: a
//! hardware-linked list register, the guest's EOI deactivating the physical interrupt
//! ([`forward`]).
//!
//! What the interrupts mean for a shared pCPU's scheduler is marked in [`crate::vm`]
//! ([`vm::mark_stale`]) and returned ([`Handled`]) for the caller to act on; the one call that
//! reaches the scheduler, waking a vCPU that shares this pCPU when an interrupt is raised for
//! it, goes through the function it installs at boot ([`set_wake_here`]).

use core::sync::atomic::{AtomicPtr, AtomicU8, Ordering};

use keel_core::abi::layout;
use keel_core::console::Input;
use keel_core::devices::vgic::NR_IRQS;
use keel_core::ratelimit::DiagnosticKind;

use crate::arch::gic;
use crate::console::VmLabel;
use crate::timers::{self, Deadline};
use crate::vm::{self, VmState};
use crate::{console, keel_println, keel_println_limited, trace};

/// What the physical interrupts handled mean for the vCPU on this pCPU.
#[derive(Clone, Copy, Debug, Default)]
pub struct Handled {
    /// Its vCPU may have new virtual interrupts to list ([`sync_list_registers`]).
    pub sync: bool,
    /// A shared pCPU's scheduler has something to look at: a deadline passed or a vCPU
    /// placed here was kicked ([`crate::sched::reschedule`]).
    pub reschedule: bool,
}

/// A poll point between two bounded steps of a long operation at `site` (a VM's reload; a
/// console line and the vCPU switch after it, [`hyp_timer`]): the interrupts that arrived are
/// served, which ends the interrupts-masked stretch ([`crate::masked`]); the next step begins
/// a new one. Out of line, so that an instruction trace finds it (`cargo xtask bench masked`).
#[inline(never)]
pub fn serve_between_steps(site: keel_core::abi::MaskedSite) -> Handled {
    // The stretch so far ends here; serving what is pending begins the next one (so that a
    // poll point inside that serving, a console flush's, ends a stretch that began here).
    vm::masked().end();
    vm::masked().begin(site);
    handle_pending()
}

/// [`serve_between_steps`] at the current stretch's site, for a caller that cannot take
/// what it served (a console line's poll point, see [`hyp_timer`]; a health event's steps,
/// whose caller reschedules or parks after them).
pub fn serve_here() {
    let _ = serve_between_steps(vm::masked().site());
}

/// Handles every pending physical interrupt. Runs with IRQs masked at EL2.
pub fn handle_pending() -> Handled {
    let intid = gic::acknowledge();
    if intid < gic::SPECIAL_INTID {
        trace::record(trace::Kind::PhysIrq, usize::from(trace::NO_VM), 0, 0, intid);
    }
    handle_from(intid, Handled::default())
}

/// [`handle_pending`] for an interrupt taken while a guest ran, with the virtual timer's fast
/// path inlined in the caller: when it is the timer that fired and [`relist_timer`] lists it
/// again, nothing else is called.
#[inline(always)]
pub fn handle_pending_from_guest() -> Handled {
    let intid = gic::acknowledge();
    if trace::ON {
        trace_exit_irq(intid);
    }
    if intid == layout::VTIMER_INTID {
        gic::end_of_interrupt(intid);
        if relist_timer() {
            return Handled::default();
        }
        return Handled {
            sync: !virtual_timer(),
            reschedule: false,
        };
    }
    handle_from(intid, Handled::default())
}

/// Handles `intid`, just acknowledged, then every other pending interrupt, adding to `handled`.
#[inline(never)]
fn handle_from(first: u32, mut handled: Handled) -> Handled {
    let mut intid = first;
    loop {
        if intid >= gic::SPECIAL_INTID {
            break;
        }
        if intid != first {
            trace::record(trace::Kind::PhysIrq, usize::from(trace::NO_VM), 0, 0, intid);
        }
        gic::end_of_interrupt(intid);
        if intid == layout::VTIMER_INTID {
            // The fast path: back to the guest at once. Anything else pending is taken as
            // soon as the guest runs again (the physical IRQ is still asserted).
            if !relist_timer() {
                handled.sync |= !virtual_timer();
            }
            return handled;
        }
        if let Some(id) = forwarded_to(intid) {
            // Left active: the guest's EOI deactivates it.
            match forward(id, intid) {
                Forwarded::Listed => {}
                Forwarded::Raised(raised) => {
                    handled.sync = true;
                    handled.reschedule |= raised == Raised::WokeHere;
                }
            }
            intid = gic::acknowledge();
            continue;
        }
        // Anything but Keel's own timer may have raised a virtual interrupt for the running
        // vCPU (the timer's deadlines wake other vCPUs, through the scheduler).
        handled.sync |= intid != layout::HYP_TIMER_INTID;
        match intid {
            layout::HYP_TIMER_INTID => {
                let timer = hyp_timer();
                handled.reschedule |= timer.reschedule;
                handled.sync |= timer.sync;
            }
            // The maintenance interrupt stays asserted until its cause (an EOI'd or underflowing
            // list register) is dealt with: sync now, or it would fire again at once.
            layout::MAINTENANCE_INTID => sync_list_registers(),
            vm::KICK_SGI => {
                if crate::config::HEALTH && vm::this_cpu().watchdog_moved.load(Ordering::Acquire) {
                    vm::rearm_watchdogs();
                }
                vm::mark_stale(vm::Stale::Kicked);
                handled.reschedule = true;
            }
            _ if intid == crate::platform::uart_intid() => console_input(),
            _ if is_smmu_interrupt(intid) => {
                if let Some(serve) = hook(&DEVICE_FAULTS) {
                    serve();
                }
            }
            _ => {}
        }
        gic::deactivate(intid);
        intid = gic::acknowledge();
    }
    handled
}

/// The EL2 timer fired: serves the deadlines that are due (see [`crate::timers`]). Returns
/// whether the scheduler's own are among them (`reschedule`), and what the interrupts served
/// at the console's poll points (see below) mean.
#[inline(never)]
fn hyp_timer() -> Handled {
    let now = crate::arch::timer::now();
    let due = timers::take_due(now);
    let scheduling =
        timers::is_due(due, Deadline::Schedule) || timers::is_due(due, Deadline::VirtualTimers);
    let mut handled = Handled {
        sync: false,
        reschedule: scheduling,
    };
    if timers::is_due(due, Deadline::Console) {
        // The console's work (a vCPU start's line made, then queued; or the UART written) is
        // a masked stretch of its own: a poll point follows it (and the making of a start
        // line), so that it is never in one stretch with a vCPU switch or another deadline's
        // work. What the poll inside the console served is not known here: after a start
        // line, the vCPU's interrupts and the scheduler are looked at again.
        let start_line = console::flush_partial(serve_here);
        let served = serve_between_steps(vm::masked().site());
        handled.sync |= served.sync || start_line;
        handled.reschedule |= served.reschedule || start_line;
        if console::take_input_report(now) {
            report_refused_input();
        }
    }
    if timers::is_due(due, Deadline::VirtualTimers) {
        vm::mark_stale(vm::Stale::TimerDue);
    }
    if crate::config::HEALTH && timers::is_due(due, Deadline::Health) {
        // A VM stopped or restarted here stops its vCPU on this pCPU at once (a pinned one
        // parks, a shared one's scheduler takes the kick).
        if let Some(serve) = hook(&HEALTH) {
            serve();
        }
        handled.reschedule = true;
        handled.sync = true;
    }
    handled
}

/// The fast path of the virtual timer: it fired again, and nothing changed since Keel listed
/// it last in list register `lr` (no other list register write on this pCPU, no guest write
/// to its VM's vGIC: the cache in [`vm::PerCpu::timer_lr`] is cleared or outdated by both).
/// The guest has finished with that interrupt (the register is invalid: its EOI deactivated
/// the physical one, which is why it could fire again), so the vGIC's view (listed, enabled,
/// this priority and group) still holds: the same value goes back in the same register.
/// Returns false when [`virtual_timer`] must decide.
#[inline(always)]
fn relist_timer() -> bool {
    let cpu = vm::this_cpu();
    let cache = cpu.timer_lr.load(Ordering::Relaxed);
    let Some(lr) = ((cache & 0xff) as usize).checked_sub(1) else {
        return false;
    };
    let Some((id, _)) = vm::current() else {
        return false;
    };
    // The register holds the timer's value (hardware-linked, so no EOI maintenance request):
    // it is empty in ICH_ELRSR_EL2 exactly when its state is invalid.
    if (cache >> 32) as u32 != vm::vm(id).gic_writes.load(Ordering::Relaxed)
        || !gic::list_register_is_empty(lr)
    {
        return false;
    }
    gic::write_lr_at(lr, cpu.timer_lr_value.load(Ordering::Relaxed));
    if trace::ON {
        trace_relisted_timer(id);
    }
    true
}

/// The timer's fast path in the trace: the guest finished its last interrupt (its EOI) and
/// the next is listed, hardware-linked: one record says both.
#[inline(never)]
fn trace_relisted_timer(id: usize) {
    let vcpu = vm::current().map_or(0, |(_, vcpu)| vcpu);
    let detail = trace::INJECT_HARDWARE | trace::INJECT_AFTER_EOI;
    trace::record(trace::Kind::Inject, id, vcpu, detail, layout::VTIMER_INTID);
}

/// An interrupt taken while a guest ran, in the trace: the exit of the vCPU it interrupted,
/// with the INTID acknowledged.
#[inline(never)]
fn trace_exit_irq(intid: u32) {
    let (id, vcpu) = vm::current().unwrap_or((usize::from(trace::NO_VM), 0));
    trace::record(trace::Kind::Exit, id, vcpu, trace::EXIT_IRQ, intid);
}

/// A list register written or taken back, in the trace, for the vCPU on this pCPU.
#[inline(never)]
fn trace_list_register(kind: trace::Kind, intid: u32, hardware: bool) {
    let (id, vcpu) = vm::current().unwrap_or((usize::from(trace::NO_VM), 0));
    trace::record(kind, id, vcpu, u8::from(hardware), intid);
}

/// The guest's virtual timer fired. The physical interrupt stays active until the guest's EOI
/// deactivates it through the hardware-linked list register. In the common case (the timer
/// enabled in the vGIC, a list register free) it is listed at once; returns false when a
/// full [`sync_list_registers`] is needed instead.
#[inline(never)]
fn virtual_timer() -> bool {
    let running = vm::current().filter(|&(id, _)| vm::vm(id).state() == VmState::Running);
    match running {
        Some((id, vcpu)) => {
            let mut vgic = vm::vm(id).vgic.lock();
            let vgic = &mut *vgic;
            vgic.raise(vcpu, layout::VTIMER_INTID);
            let cpu = vm::this_cpu();
            match list_now(vgic, cpu, vcpu, layout::VTIMER_INTID) {
                None => {
                    // The timer's cached list register may be one just taken back: forgotten,
                    // so that the cache only ever names a register in `listed` (a switch saves
                    // only those).
                    cpu.forget_timer_lr();
                    false
                }
                Some((lr, value)) => {
                    let generation = vm::vm(id).gic_writes.load(Ordering::Relaxed);
                    cpu.timer_lr_value.store(value, Ordering::Relaxed);
                    cpu.timer_lr.store(
                        u64::from(generation) << 32 | (lr as u64 + 1),
                        Ordering::Relaxed,
                    );
                    true
                }
            }
        }
        None => {
            // No guest to take it: silence the timer on this pCPU.
            let cpu = vm::this_cpu();
            if let Some(redistributor) = cpu.redistributor.get() {
                redistributor.disable_private(layout::VTIMER_INTID);
                cpu.vtimer_on.store(false, Ordering::Relaxed);
            }
            gic::deactivate(layout::VTIMER_INTID);
            true
        }
    }
}

/// Lists interrupt `intid`, raised in `vgic` for `vcpu` (the vCPU on this pCPU, `cpu`), in a
/// free list register at once, if it is deliverable now and a register is free (the list
/// registers the guest has finished with taken back first): the register and its value.
/// Otherwise `None`, and a full [`sync_list_registers`] must decide.
#[inline(always)]
fn list_now(
    vgic: &mut keel_core::devices::vgic::Vgic,
    cpu: &vm::PerCpu,
    vcpu: usize,
    intid: u32,
) -> Option<(usize, u64)> {
    let list_registers = gic::list_registers();
    let listed = reclaim_finished(vgic, vcpu, cpu.listed.load(Ordering::Relaxed));
    let free = !listed & ((1u64 << list_registers) - 1);
    let (listed, done) = match (free, vgic.take_if_deliverable(vcpu, intid)) {
        (0, _) | (_, None) => (listed, None),
        (free, Some((priority, group1))) => {
            let lr = free.trailing_zeros() as usize;
            (
                listed | (1 << lr),
                Some((lr, list(lr, intid, priority, group1))),
            )
        }
    };
    cpu.listed.store(listed, Ordering::Relaxed);
    done
}

/// The virtual timer of the vCPU just loaded on this shared pCPU expired while it was
/// switched out: its interrupt is listed now, as [`virtual_timer`] would list it when the
/// physical one fired right after the entry, which saves that second exception. The physical
/// interrupt is made active first, as the acknowledge would: the guest's EOI deactivates it
/// through the hardware-linked list register.
pub fn list_expired_timer() {
    let Some(redistributor) = vm::this_cpu().redistributor.get() else {
        return;
    };
    redistributor.set_active_private(layout::VTIMER_INTID);
    if !virtual_timer() {
        sync_list_registers();
    }
}

/// Writes virtual interrupt `intid` as pending into list register `lr`. The virtual timer and
/// the SPIs of assigned devices are linked to their physical interrupt (the guest's EOI
/// deactivates it); emulated SPIs ask for a maintenance interrupt on EOI so their line is
/// re-sampled.
fn list(lr: usize, intid: u32, priority: u8, group1: bool) -> u64 {
    let physical =
        (intid == layout::VTIMER_INTID || forwarded_to(intid).is_some()).then_some(intid);
    let eoi_maintenance = intid >= 32 && physical.is_none();
    let value = gic::list_register_value(intid, priority, group1, physical, eoi_maintenance);
    gic::write_lr(lr, value);
    if trace::ON {
        trace_list_register(trace::Kind::Inject, intid, physical.is_some());
    }
    value
}

/// Takes back the list registers in `listed` whose interrupt the guest has finished (state
/// invalid) and returns the rest. ICH_ELRSR_EL2 does not count a register that still requests
/// an EOI maintenance interrupt as empty, so the state is read from each register.
fn reclaim_finished(vgic: &mut keel_core::devices::vgic::Vgic, vcpu: usize, listed: u64) -> u64 {
    let mut remaining = listed;
    let mut scan = listed;
    while scan != 0 {
        let lr = scan.trailing_zeros() as usize;
        scan &= scan - 1;
        let value = gic::read_lr(lr);
        if gic::list_register_is_invalid(value) {
            if trace::ON {
                trace_list_register(trace::Kind::Eoi, value as u32, false);
            }
            vgic.unlisted(vcpu, value as u32, false, false);
            gic::write_lr(lr, 0);
            remaining &= !(1 << lr);
        }
    }
    remaining
}

/// The VM (id + 1; 0: none) each physical SPI of an assigned device is forwarded to. Written
/// by pCPU 0 at boot ([`claim_device_interrupts`]) before any other pCPU starts, then only
/// read; all zeros (in .bss) before.
static FORWARDED: [AtomicU8; NR_IRQS] = [const { AtomicU8::new(0) }; NR_IRQS];

/// The VM physical interrupt `intid` is forwarded to, if it is an assigned device's.
#[inline(always)]
fn forwarded_to(intid: u32) -> Option<usize> {
    let owner = FORWARDED.get(intid as usize)?.load(Ordering::Relaxed);
    usize::from(owner).checked_sub(1)
}

/// Takes the interrupts of VM `id`'s assigned devices for forwarding to it (at boot, by pCPU 0,
/// when the VM is built).
pub fn claim_device_interrupts(id: usize) {
    for device in vm::desc(id).devices {
        for interrupt in device.interrupts {
            if let Some(owner) = FORWARDED.get(interrupt.intid as usize) {
                owner.store(id as u8 + 1, Ordering::Relaxed);
            }
        }
    }
}

/// Puts the physical interrupts of VM `id`'s assigned devices in their reset state: disabled
/// until its guest enables them, neither pending nor active, routed to its vCPU 0's pCPU. At
/// its build, its reset and when it ends (a guest gone with one active would leave the line
/// dead). No lock is held.
pub fn reset_device_interrupts(id: usize) {
    let desc = vm::desc(id);
    let Some(distributor) = gic::distributor() else {
        return;
    };
    let mpidr = pcpu_affinity(desc.pcpus.first().copied().unwrap_or(0));
    for device in desc.devices {
        for interrupt in device.interrupts {
            distributor.reset_spi(interrupt.intid, interrupt.level, mpidr);
        }
    }
}

/// After a guest write to VM `id`'s distributor: the physical interrupts of its assigned
/// devices are enabled as its vGIC enables them, and routed to the pCPU of the vCPU its
/// GICD_IROUTER names. The vGIC is read under its lock, the GIC written after.
pub fn mirror_device_interrupts(id: usize) {
    let desc = vm::desc(id);
    let Some(distributor) = gic::distributor() else {
        return;
    };
    for device in desc.devices {
        for interrupt in device.interrupts {
            let intid = interrupt.intid;
            let (enabled, vcpu) = {
                let vgic = vm::vm(id).vgic.lock_cold();
                (vgic.is_enabled(0, intid), vgic.spi_target(intid))
            };
            let pcpu = desc.pcpus.get(vcpu).copied().unwrap_or(0);
            distributor.route_spi(intid, pcpu_affinity(pcpu));
            distributor.set_spi_enabled(intid, enabled);
        }
    }
}

/// The affinity (MPIDR) of pCPU `pcpu`, as the board's device tree gave it.
fn pcpu_affinity(pcpu: u32) -> u64 {
    let cpus = &crate::platform::get().cpus;
    cpus.get(pcpu as usize).copied().unwrap_or(cpus[0])
}

/// Physical SPI `intid` of a device assigned to VM `id` arrived: acknowledged, its priority
/// dropped, and left active, it is raised in the VM's vGIC for the vCPU the guest routes it
/// to, whose pCPU is told (the physical route follows that vCPU, so it is mostly this one).
/// Listed hardware-linked ([`list`]), the guest's EOI deactivates it, and only then can the
/// device interrupt again: a device raising its line flat out gets one interrupt per guest
/// EOI. For a VM that no longer runs, the interrupt is disabled and deactivated; its next
/// start or reset sets it up again.
fn forward(id: usize, intid: u32) -> Forwarded {
    if vm::vm(id).state() != VmState::Running {
        if let Some(distributor) = gic::distributor() {
            distributor.set_spi_enabled(intid, false);
            distributor.deactivate_spi(intid);
        }
        return Forwarded::Raised(Raised::Elsewhere);
    }
    let (current, vcpu) = vm::current().unwrap_or((usize::MAX, 0));
    if current == id {
        // The common case (the physical route follows the vCPU the guest routes it to): listed
        // at once, as the virtual timer is, without a full look at the vGIC.
        let mut vgic = vm::vm(id).vgic.lock();
        let vgic = &mut *vgic;
        vgic.raise(vcpu, intid);
        let cpu = vm::this_cpu();
        // Another list register written: the timer's cached one may be the one reused.
        cpu.forget_timer_lr();
        if list_now(vgic, cpu, vcpu, intid).is_some() {
            return Forwarded::Listed;
        }
    }
    Forwarded::Raised(raise_and_kick(id, 0, intid, current, vcpu))
}

/// What forwarding a device's interrupt did ([`forward`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Forwarded {
    /// Listed for the vCPU on this pCPU: nothing more to do.
    Listed,
    /// Raised in the vGIC; the raise's outcome.
    Raised(Raised),
}

/// The physical UART's receive interrupt: its bytes read through the multiplexer (Ctrl-A
/// escapes taken there, under the console lock), then carried out in order with no lock held.
#[cold]
#[inline(never)]
fn console_input() {
    let received = console::receive();
    // The operator's commands (Ctrl-A) are answered without a limit: a person types them.
    let operator = received.operator();
    let mut refused = false;
    for input in received.inputs.iter().take(received.count) {
        match *input {
            Input::Deliver { vm: id, byte } => refused |= deliver_input(id, byte),
            Input::Focus(id) => {
                keel_println!(operator, "input focus: ", VmLabel(console::focus_name(id), id))
            }
            Input::PowerOff => {
                keel_println!(operator, "power off requested from the console");
                crate::console::flush_before_power_off();
                crate::arch::psci::system_off();
            }
            Input::Raw(id, raw) => keel_println!(
                operator,
                VmLabel(console::focus_name(id), id),
                ": console output ",
                if raw {
                    "raw (its control characters reach the terminal; Ctrl-A r again to end)"
                } else {
                    "escaped"
                }
            ),
            Input::Help => keel_println!(
                operator,
                "Ctrl-A then: 0-9 focus VM, n next VM, r raw output for the focused VM, x power off, Ctrl-A a literal Ctrl-A"
            ),
            Input::Nothing => {}
        }
    }
    if refused {
        console::input_refused();
    }
}

/// Delivers console input `byte` to VM `id`'s PL011: into its receive FIFO, or the input
/// queue behind it, which the guest's reads of UARTDR feed the FIFO from. Its interrupt's
/// level is given to the vGIC, and its vCPU kicked, only when it rises: while input waits the
/// line stays asserted, and the guest's reads keep it so. Returns whether the queue, full,
/// refused it (counted in the model, said by [`report_refused_input`]). Input for a VM that
/// does not run is discarded, as its console would be.
///
/// Locks: the VM's PL011, then its vGIC (see [`crate::vm`]); the console lock is not held.
fn deliver_input(id: usize, byte: u8) -> bool {
    if vm::vm(id).state() != VmState::Running {
        return false;
    }
    let (refused, raised) = {
        let mut uart = vm::vm(id).uart.lock_cold();
        let before = uart.interrupt_level();
        let refused = uart.receive(byte).is_err();
        let raised = (!before && uart.interrupt_level()).then(|| {
            let mut vgic = vm::vm(id).vgic.lock_cold();
            vgic.set_level(layout::UART_INTID, true);
            vgic.spi_target(layout::UART_INTID)
        });
        (refused, raised)
    };
    if let Some(target) = raised {
        vm::kick_vcpu(id, target);
    }
    refused
}

/// Says, for each VM with a console, how many bytes of console input its full queue refused
/// since it was last said: one rate-limited line each (the count given back to its model if
/// the line is left out, to be said with the next), a poll point after each. Called from the
/// EL2 timer's console deadline when [`console::take_input_report`] says it is due.
#[cold]
#[inline(never)]
fn report_refused_input() {
    for id in 0..crate::config::SYSTEM.vms.len() {
        let desc = vm::desc(id);
        if !desc.console {
            continue;
        }
        let dropped = vm::vm(id).uart.lock_cold().take_dropped();
        if dropped == 0 {
            continue;
        }
        let said = keel_println_limited!(
            DiagnosticKind::InputOverrun,
            id,
            "vm '{}': console input queue full, {} bytes dropped (the guest is not reading)";
            desc.name,
            dropped,
        );
        if !said {
            vm::vm(id).uart.lock_cold().restore_dropped(dropped);
            console::input_refused();
        }
        serve_here();
    }
}

/// vCPU `vcpu` of VM `id` stops on this pCPU (CPU_OFF, reset, VM stopped): its list registers
/// and virtual timer are discarded. The vGIC takes back the VM's SPIs they held (still
/// pending if they were; not active, since the vCPU that had them active is gone), unless the
/// VM was reset since the vCPU started (`generation`): its vGIC is then a new one. Its SGIs
/// and PPIs need nothing here: every start resets the vCPU's redistributor. The
/// virtual timer's physical interrupt, active while its hardware-linked list register waited
/// for the guest's EOI, is deactivated, or it would never be signalled on this pCPU again.
pub fn discard_vcpu_interrupts(id: usize, vcpu: usize, generation: u32) {
    let cpu = vm::this_cpu();
    cpu.forget_timer_lr();
    crate::arch::guest::stop_virtual_timer();
    {
        let mut vgic = vm::vm(id).vgic.lock_cold();
        if vm::vm(id).generation() == generation {
            let vgic = &mut *vgic;
            let mut scan = cpu.listed.load(Ordering::Relaxed);
            while scan != 0 {
                let lr = scan.trailing_zeros() as usize;
                scan &= scan - 1;
                let value = gic::read_lr(lr);
                let intid = value as u32;
                if intid >= 32 {
                    vgic.unlisted(vcpu, intid, gic::list_register_is_pending(value), false);
                    // A forwarded interrupt its guest took and will never end: the physical
                    // one is deactivated here (one still pending is listed again later, and
                    // its EOI then deactivates it).
                    if forwarded_to(intid).is_some() && gic::list_register_is_active(value) {
                        if let Some(distributor) = gic::distributor() {
                            distributor.deactivate_spi(intid);
                        }
                    }
                }
            }
        }
    }
    gic::reset_virtual_interface();
    cpu.listed.store(0, Ordering::Relaxed);
    if let Some(redistributor) = cpu.redistributor.get() {
        redistributor.disable_private(layout::VTIMER_INTID);
        redistributor.clear_active_private(layout::VTIMER_INTID);
        cpu.vtimer_on.store(false, Ordering::Relaxed);
    }
}

/// Brings the list registers of this pCPU's vCPU up to date with its vGIC: takes back the
/// interrupts the guest has finished with and lists the highest-priority pending ones.
/// With more pending than list registers, asks for an underflow maintenance interrupt
/// (see [`keel_core::devices::vgic::Vgic::fill_list_registers`]).
pub fn sync_list_registers() {
    let Some((id, vcpu)) = vm::current() else {
        return;
    };
    let cpu = vm::this_cpu();
    cpu.forget_timer_lr();
    let mut vgic = vm::vm(id).vgic.lock();
    let vgic = &mut *vgic;
    let list_registers = gic::list_registers();
    let listed = reclaim_finished(vgic, vcpu, cpu.listed.load(Ordering::Relaxed));
    let (listed, waiting) = vgic.fill_list_registers(
        vcpu,
        listed,
        list_registers,
        |lr, intid, priority, group1| {
            list(lr, intid, priority, group1);
        },
    );
    gic::set_underflow_interrupt(waiting);
    cpu.listed.store(listed, Ordering::Relaxed);
}

/// The scheduler's "wake here" (`sched::wake_here`, installed once at boot by [`set_wake_here`]
/// before any guest runs): vCPU `vcpu` of VM `id`, placed on this shared pCPU and not running,
/// wakes if it waits and now has something to take; returns whether it woke. The one place
/// this layer reaches up to the scheduler. Null until installed; only [`set_wake_here`] stores
/// it (an atomic pointer rather than a `spin::Once`: no second copy of `Once`'s code).
static WAKE_HERE: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Installs the scheduler's [`WAKE_HERE`] function (at boot, before any guest runs).
pub fn set_wake_here(wake: fn(usize, usize) -> bool) {
    WAKE_HERE.store(wake as *mut (), Ordering::Release);
}

/// Health's "device faults" (`health::serve_device_faults`, installed once at boot
/// by [`set_device_faults`] before any guest runs): the SMMU's interrupt came, its faults stop
/// the VMs they name. The second place this layer reaches up. Null until installed.
static DEVICE_FAULTS: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Installs the life cycle's [`DEVICE_FAULTS`] function (at boot, before any guest runs).
pub fn set_device_faults(serve: fn()) {
    DEVICE_FAULTS.store(serve as *mut (), Ordering::Release);
}

/// Health's service of expired watchdogs and noted events (`health::serve`, installed once at
/// boot by [`set_health`]): this pCPU's health deadline came. The third place this layer
/// reaches up. Null until installed.
static HEALTH: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Installs health's [`HEALTH`] function (at boot, before any guest runs).
pub fn set_health(serve: fn()) {
    HEALTH.store(serve as *mut (), Ordering::Release);
}

/// The function installed in `slot` ([`DEVICE_FAULTS`], [`HEALTH`]), if any.
fn hook(slot: &AtomicPtr<()>) -> Option<fn()> {
    let hook = slot.load(Ordering::Acquire);
    // SAFETY: a non-null hook was stored by `set_device_faults` or `set_health` from a `fn()`, which has the
    // size of a pointer.
    (!hook.is_null()).then(|| unsafe { core::mem::transmute::<*mut (), fn()>(hook) })
}

/// Whether `intid` is one of the SMMU's interrupts (its event queue's or its global errors').
fn is_smmu_interrupt(intid: u32) -> bool {
    crate::config::SYSTEM
        .iommu
        .as_ref()
        .is_some_and(|iommu| intid == iommu.event_intid || intid == iommu.gerror_intid)
}

/// The installed [`WAKE_HERE`] function, if any.
fn wake_here() -> Option<fn(usize, usize) -> bool> {
    let wake = WAKE_HERE.load(Ordering::Acquire);
    // SAFETY: a non-null WAKE_HERE was stored by `set_wake_here` from a
    // `fn(usize, usize) -> bool`, which has the size of a pointer.
    (!wake.is_null())
        .then(|| unsafe { core::mem::transmute::<*mut (), fn(usize, usize) -> bool>(wake) })
}

/// What raising a virtual interrupt asks of the raiser's trap exit ([`raise_and_kick`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Raised {
    /// Nothing here: the target is on another pCPU (kicked), it need not wake, or it is a
    /// task (tasks take no interrupts; they poll).
    Elsewhere,
    /// The target shares this pCPU and woke: the scheduler decides whether it preempts.
    WokeHere,
    /// The interrupt is for the raiser itself: its list registers need an update.
    Here,
}

/// Raises virtual interrupt `intid` of VM `to` for its vCPU `to_vcpu` (an SPI: for the vCPU
/// the VM routes it to) on behalf of vCPU `vcpu` of VM `id` (a message sent, a doorbell rung),
/// and tells the target's pCPU: another pCPU gets the kick SGI, a target that shares this
/// pCPU is woken in place. A task takes no interrupts: nothing is raised for it.
///
/// Locks: the target VM's vGIC alone, and not while kicking.
pub fn raise_and_kick(to: usize, to_vcpu: usize, intid: u32, id: usize, vcpu: usize) -> Raised {
    if to_vcpu >= vm::desc(to).pcpus.len() {
        return Raised::Elsewhere;
    }
    let target = {
        let mut vgic = vm::vm(to).vgic.lock();
        vgic.raise(to_vcpu, intid);
        if intid < 32 {
            to_vcpu
        } else {
            vgic.spi_target(intid)
        }
    };
    if (to, target) == (id, vcpu) {
        Raised::Here
    } else if vm::desc(to).pcpus.get(target) == Some(&(crate::arch::cpu::index() as u32))
        && vm::this_cpu_is_shared()
    {
        if wake_here().is_some_and(|wake| wake(to, target)) {
            Raised::WokeHere
        } else {
            Raised::Elsewhere
        }
    } else {
        vm::kick_vcpu(to, target);
        Raised::Elsewhere
    }
}
