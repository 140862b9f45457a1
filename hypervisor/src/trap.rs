//! Traps from guests: the Rust side of the EL2 vectors. A synchronous exception is decoded
//! from ESR_EL2 and either emulated (the guest continues) or ends the VM with a diagnostic.

use keel_core::abi::{self, psci, CallError, MaskedSite};
use keel_core::cpu_features;
use keel_core::devices::DeviceError;
use keel_core::esr::{sysregs, DataAbort, Esr, ExceptionClass, SysRegAccess};
use keel_core::health::{Action, Event};
use keel_core::hypercall::{self, Call};
use keel_core::ratelimit::DiagnosticKind;
use keel_core::text::{Fill, Hex, Out, Show};

use crate::arch::cpu;
use crate::arch::regs::{read_id_register, read_sysreg};
use crate::arch::vectors::{self, GuestRegs};
use crate::vm::{self, VcpuPower};
use crate::{health, irq, keel_println_limited, lifecycle, sched, trace, vcpu};

/// Why a VM is stopped.
enum Fault {
    /// A guest-physical access no memory or device answers.
    Stage2 { ipa: u64, write: bool, size: u8 },
    /// A data abort without a valid instruction syndrome (e.g. a load pair to a device);
    /// `permission_write`: a permission fault on a write, which the syndrome tells even so.
    NoSyndrome { ipa: u64, permission_write: bool },
    /// An instruction fetch outside the VM's memory.
    Fetch { ipa: u64 },
    /// A device model refused the access.
    Device {
        device: &'static str,
        ipa: u64,
        error: DeviceError,
    },
    /// A system register Keel does not give guests.
    SysReg(SysRegAccess),
    /// The guest reported an exception it cannot handle.
    GuestCrash { esr: u64, elr: u64, far: u64 },
    /// An exception class Keel does not expect from a guest.
    Unexpected,
    /// A write to a channel's memory through the VM's read-only window on it (a stage-2
    /// permission fault; see [`Fault::named_by_channel`]); `size` is `None` for an instruction
    /// without syndrome (STP, STR with writeback, STR Q, STXR, atomics).
    ReadOnlyChannel {
        channel: &'static str,
        ipa: u64,
        size: Option<u8>,
    },
}

impl Fault {
    /// The fault as VM `id`'s diagnostic names it: a write that faulted in one of its
    /// read-only channel windows is a write to that channel, not an access outside its memory.
    fn named_by_channel(self, id: usize) -> Fault {
        match self {
            Fault::Stage2 {
                ipa,
                write: true,
                size,
            } => match crate::channel::read_only_window_at(id, ipa) {
                Some(channel) => Fault::ReadOnlyChannel {
                    channel,
                    ipa,
                    size: Some(size),
                },
                None => self,
            },
            Fault::NoSyndrome {
                ipa,
                permission_write: true,
            } => match crate::channel::read_only_window_at(id, ipa) {
                Some(channel) => Fault::ReadOnlyChannel {
                    channel,
                    ipa,
                    size: None,
                },
                None => self,
            },
            other => other,
        }
    }
}

impl Show for Fault {
    fn show(&self, out: &mut dyn Out) {
        match *self {
            Fault::Stage2 { ipa, write, size } => Fill(
                "stage-2 fault: {}-byte {} at IPA {}, outside its memory and devices",
                &[&size, &if write { "write" } else { "read" }, &Hex(ipa, 0)],
            )
            .show(out),
            Fault::NoSyndrome { ipa, .. } => Fill(
                "stage-2 fault at IPA {} with no instruction syndrome",
                &[&Hex(ipa, 0)],
            )
            .show(out),
            Fault::Fetch { ipa } => Fill(
                "stage-2 fault: instruction fetch at IPA {}, outside its memory",
                &[&Hex(ipa, 0)],
            )
            .show(out),
            Fault::Device { device, ipa, error } => {
                Fill("{} at IPA {}: {}", &[&device, &Hex(ipa, 0), &error]).show(out)
            }
            Fault::SysReg(access) => {
                let direction = if access.read { "read of" } else { "write to" };
                Fill(
                    "illegal system register access: {} {}",
                    &[&direction, &access.reg],
                )
                .show(out)
            }
            Fault::GuestCrash { esr, elr, far } => Fill(
                "guest reported a fatal exception: ESR_EL1 {} ({}) at ELR_EL1 {}, FAR_EL1 {}",
                &[
                    &Hex(esr, 8),
                    &Esr(esr).class().description(),
                    &Hex(elr, 0),
                    &Hex(far, 0),
                ],
            )
            .show(out),
            Fault::Unexpected => out.put("unexpected exception"),
            Fault::ReadOnlyChannel { channel, ipa, size } => {
                out.put("stage-2 permission fault: ");
                if let Some(size) = size {
                    keel_core::text!(out, size, "-byte ");
                }
                Fill(
                    "write at IPA {}, in its read-only window of channel '{}'",
                    &[&Hex(ipa, 0), &channel],
                )
                .show(out);
                if size.is_none() {
                    out.put(" (an instruction without syndrome: size unknown)");
                }
            }
        }
    }
}

/// What to do after a trap.
enum Next {
    /// Back to the guest.
    Resume,
    /// Back to the guest after re-evaluating virtual interrupts.
    ResumeWithInterrupts,
    /// The VM is stopped.
    Stop(Fault),
    /// The VM powered itself off.
    PowerOff,
    /// The VM asked for a reset.
    Reset,
    /// This vCPU turned itself off.
    VcpuOff,
    /// WFI (or CPU_SUSPEND) on a shared pCPU: give the pCPU away unless an interrupt waits.
    Wait,
    /// KEEL_YIELD on a shared pCPU: give the pCPU away.
    Yield,
    /// A vCPU on this shared pCPU woke: the scheduler may pick it over the caller.
    Reschedule,
    /// KEEL_MSG_RECV found nothing: wait (as WFI does) until an interrupt or a message, or
    /// until the virtual counter reaches this value; the call is repeated after.
    WaitMessage(u64),
}

/// A synchronous exception from a guest. The hot traps are told apart from ESR_EL2 (read once)
/// in the first instructions: a hypercall answered with a constant is answered here, and
/// KEEL_YIELD on a shared pCPU given to the scheduler; other hypercalls go to
/// [`hypercall_trap`]; a data abort (a device access) to [`data_abort_trap`]; a write of
/// ICC_SGI1R_EL1 to [`sgi1r_trap`]; everything else to [`other_trap`]. Each of those is
/// a function of its own, so that this one keeps a small frame.
#[unsafe(no_mangle)]
extern "C" fn keel_guest_sync(regs: &mut GuestRegs) {
    vm::masked().begin(MaskedSite::GuestTrap);
    guest_sync(regs);
    trace::record(trace::Kind::ExitEnd, usize::from(trace::NO_VM), 0, 0, 0);
    vm::masked().end();
}

/// Records a guest exit in the trace: its exception class, and the hypercall's function id,
/// the faulting page (aborts) or the syndrome's ISS.
#[inline(never)]
fn trace_exit(id: usize, vcpu: usize, esr: Esr, regs: &GuestRegs) {
    let class = esr.ec();
    let arg = if class == ExceptionClass::HVC64 {
        regs.x[0] as u32
    } else if class == ExceptionClass::DATA_ABORT_LOWER
        || esr.class() == ExceptionClass::InstructionAbortLower
    {
        (faulting_ipa() >> 12) as u32
    } else {
        (esr.0 & 0x1ff_ffff) as u32
    };
    trace::record(trace::Kind::Exit, id, vcpu, (esr.0 >> 26) as u8 & 0x3f, arg);
}

#[inline(always)]
fn guest_sync(regs: &mut GuestRegs) {
    let esr = Esr(read_sysreg!("esr_el2"));
    let Some((id, vcpu)) = vm::current() else {
        sched::pinned::park()
    };
    if trace::ON {
        trace_exit(id, vcpu, esr, regs);
    }
    // The two hot classes are tested on the raw code, without the class table.
    let class = esr.ec();
    if class == ExceptionClass::HVC64 {
        if vm::this_cpu_is_shared() && regs.x[0] as u32 == abi::KEEL_YIELD {
            // KEEL_YIELD on a shared pCPU, the switch path's own call, before any decode.
            regs.x[0] = 0;
            sched::give_away(true);
            return;
        }
        match hypercall::constant_answer(regs.x[0]) {
            Some(value) => regs.x[0] = value,
            None => hypercall_trap(id, vcpu, esr, regs),
        }
    } else if class == ExceptionClass::DATA_ABORT_LOWER {
        data_abort_trap(id, vcpu, esr, regs);
    } else if let Some(register) = esr.sysreg_write_of(sysregs::ICC_SGI1R_EL1) {
        sgi1r_trap(id, vcpu, register, regs);
    } else {
        other_trap(id, vcpu, esr, regs);
    }
}

/// A hypercall other than the constant ones.
#[inline(never)]
fn hypercall_trap(id: usize, vcpu: usize, esr: Esr, regs: &mut GuestRegs) {
    match hypercall(id, vcpu, regs) {
        Next::Resume => {}
        Next::Yield => sched::give_away(true),
        Next::Wait => wait(id, vcpu),
        Next::WaitMessage(until) => wait_for_message(id, vcpu, until, regs),
        Next::Reschedule => sched::reschedule(false),
        next => finish(id, vcpu, esr, next, regs),
    }
}

/// A write of ICC_SGI1R_EL1 from x`register` (trapped to EL2 while HCR_EL2.IMO is set, GICv3
/// 12.2.22): the guest sends SGIs ([`send_virtual_sgi`]).
#[inline(never)]
fn sgi1r_trap(id: usize, vcpu: usize, register: u8, regs: &GuestRegs) {
    let raised_here = send_virtual_sgi(id, vcpu, regs.get(register));
    vectors::skip_instruction();
    if raised_here {
        irq::sync_list_registers();
    }
}

/// A data abort from the guest: an access to an emulated device, or a fault that stops the VM
/// ([`data_abort`]; the stop is out of line, so that the access path carries no [`Next`]).
#[inline(never)]
fn data_abort_trap(id: usize, vcpu: usize, esr: Esr, regs: &mut GuestRegs) {
    // The dispatcher calls it for EC 0x24 only.
    match data_abort(id, vcpu, esr.data_abort_syndrome(), regs) {
        Ok(false) => {}
        Ok(true) => irq::sync_list_registers(),
        Err(fault) => stop(id, vcpu, esr, fault, regs),
    }
}

/// Stops the VM for `fault` (see [`finish`]).
#[cold]
#[inline(never)]
fn stop(id: usize, vcpu: usize, esr: Esr, fault: Fault, regs: &mut GuestRegs) {
    finish(id, vcpu, esr, Next::Stop(fault), regs);
}

#[inline(never)]
fn other_trap(id: usize, vcpu: usize, esr: Esr, regs: &mut GuestRegs) {
    let next = match esr.class() {
        ExceptionClass::Smc64 => {
            keel_println_limited!(
                DiagnosticKind::Smc,
                id,
                "vm '{}': SMC (function {}) not forwarded: answered NOT_SUPPORTED";
                vm::desc(id).name,
                Hex(u64::from(regs.x[0] as u32), 8),
            );
            regs.x[0] = CallError::NotSupported.to_x0();
            vectors::skip_instruction();
            Next::Resume
        }
        ExceptionClass::SysReg64 => match esr.sysreg() {
            Some(access) => system_register(id, access, regs),
            None => Next::Stop(Fault::Unexpected),
        },
        ExceptionClass::InstructionAbortLower => Next::Stop(Fault::Fetch {
            ipa: faulting_ipa(),
        }),
        ExceptionClass::WfiWfe => {
            vectors::skip_instruction();
            if esr.wfx() != Some(false) {
                Next::Resume
            } else if vm::this_cpu_is_shared() {
                Next::Wait
            } else {
                if !crate::arch::gic::any_interrupt_listed() {
                    vm::masked().end();
                    crate::arch::cpu::wait_for_interrupt();
                    vm::masked().begin(MaskedSite::GuestTrap);
                }
                Next::Resume
            }
        }
        ExceptionClass::FpAccess if vm::this_cpu_is_shared() => {
            sched::fp_trap();
            Next::Resume
        }
        _ => Next::Stop(Fault::Unexpected),
    };
    match next {
        Next::Resume => {}
        Next::Wait => wait(id, vcpu),
        next => finish(id, vcpu, esr, next, regs),
    }
}

/// WFI or CPU_SUSPEND on a shared pCPU: the vCPU gives the pCPU away unless an interrupt
/// waits for it already (then it resumes at once, as WFI would).
fn wait(id: usize, vcpu: usize) {
    if !sched::running_has_work(id, vcpu) {
        sched::give_away(false);
    }
}

/// KEEL_MSG_RECV with nothing queued: the call is repeated when the vCPU runs again (its PC
/// is put back on the HVC), after it waited as WFI does: on a shared pCPU it gives the pCPU
/// away until an interrupt, a message or the timeout wakes it; on a pinned one the pCPU
/// sleeps until a physical interrupt (a sender's kick, or Keel's timer set for the timeout),
/// and takes a message queued by then without the guest's second call.
fn wait_for_message(id: usize, vcpu: usize, until: u64, regs: &mut GuestRegs) {
    vectors::repeat_call();
    if vm::this_cpu_is_shared() {
        if !sched::running_has_work(id, vcpu) {
            sched::give_away_until(until);
        }
    } else if !crate::arch::gic::any_interrupt_listed() {
        crate::timers::set(crate::timers::Deadline::MessageWait, until);
        vm::masked().end();
        crate::arch::cpu::wait_for_interrupt();
        vm::masked().begin(MaskedSite::GuestTrap);
        crate::timers::set(crate::timers::Deadline::MessageWait, u64::MAX);
        // What woke the pCPU (a sender's kick, the timeout) is served here, as the IRQ the
        // guest's return would take at once: one exception fewer per delivery.
        guest_irq();
        // A message queued meanwhile is taken now, as the repeated call would take it: a
        // second exception fewer (as a shared pCPU does at switch-in).
        if crate::messages::complete_waiting_receive(id, vcpu, regs) {
            vectors::skip_instruction();
        }
    }
}

/// Carries out what a trap asked for beyond resuming. The hot exits of a shared pCPU (WFI,
/// KEEL_YIELD) are taken before it: moving a `Next` here costs a `memcpy`.
#[inline(never)]
fn finish(id: usize, vcpu: usize, esr: Esr, next: Next, regs: &mut GuestRegs) {
    match next {
        Next::Resume => {}
        Next::Wait => wait(id, vcpu),
        Next::Yield => sched::give_away(true),
        Next::WaitMessage(until) => wait_for_message(id, vcpu, until, regs),
        Next::Reschedule => sched::reschedule(false),
        Next::ResumeWithInterrupts => irq::sync_list_registers(),
        Next::Stop(fault) => {
            let fault = fault.named_by_channel(id);
            let pc = vectors::guest_pc();
            let reason: &[&dyn Show] = &[
                &fault,
                &Fill(" (ESR {}, PC {})", &[&Hex(esr.0, 8), &Hex(pc, 0)]),
            ];
            end_by_policy(id, Event::Fault, &reason)
        }
        Next::PowerOff => end_by_policy(id, Event::PowerOff, &"powered off"),
        Next::Reset => match if health::ON {
            health::decide(id, Event::Reset, &"reset")
        } else {
            Action::Restart
        } {
            Action::Restart => {
                if lifecycle::reset_begin(id) {
                    if vm::this_cpu_is_shared() {
                        sched::reload(id);
                    }
                    lifecycle::reload_here(id);
                }
                sched::pinned::park();
            }
            action => {
                health::stop(id, action, Event::Reset, &"reset");
                park_after_line()
            }
        },
        Next::VcpuOff => {
            vm::vm(id).set_vcpu_power(vcpu, VcpuPower::Off);
            sched::pinned::park();
        }
    }
}

/// A fault or power-off of VM `id` from its own vCPU: its health policy decides (one line)
/// whether it stops or restarts ([`lifecycle::restart`]: its vCPU 0's pCPU reloads it); this
/// vCPU parks either way.
fn end_by_policy(id: usize, event: Event, reason: &dyn Show) -> ! {
    if !health::ON {
        // Without health monitoring, today's action: the VM stops (or is off).
        health::stop(id, Action::Stop, event, reason);
        park_after_line()
    }
    let action = health::decide(id, event, reason);
    match action {
        Action::Restart => {
            // The line, the restart's start and the switch after it: three masked stretches.
            let _ = irq::serve_between_steps(MaskedSite::GuestTrap);
            lifecycle::restart(id);
            park_after_line()
        }
        _ => {
            health::stop(id, action, event, reason);
            park_after_line()
        }
    }
}

/// IRQs (and FIQs) taken while a guest ran (the trap's frame is not needed: an interrupt
/// changes no general register).
#[unsafe(no_mangle)]
extern "C" fn keel_guest_irq(_frame: &mut GuestRegs) {
    vm::masked().begin(MaskedSite::GuestIrq);
    // The trace's exit record is the first interrupt's, written once it is acknowledged.
    guest_irq();
    trace::record(trace::Kind::ExitEnd, usize::from(trace::NO_VM), 0, 0, 0);
    vm::masked().end();
}

#[inline(always)]
fn guest_irq() {
    let handled = irq::handle_pending_from_guest();
    // A VM ended or reset by another pCPU comes with a kick, as does a vCPU woken on a shared
    // pCPU: only then can the running vCPU have to stop or give way.
    if handled.reschedule {
        if !vcpu::still_valid() {
            sched::pinned::park();
        }
        if vm::this_cpu_is_shared() {
            sched::reschedule(handled.sync);
        }
    }
    if handled.sync {
        irq::sync_list_registers();
    }
}

/// An SError from a guest: contained to its VM.
#[unsafe(no_mangle)]
extern "C" fn keel_guest_serror(regs: &mut GuestRegs) {
    vm::masked().begin(MaskedSite::GuestTrap);
    let Some((id, vcpu)) = vm::current() else {
        sched::pinned::park()
    };
    finish(
        id,
        vcpu,
        Esr(read_sysreg!("esr_el2")),
        Next::Stop(Fault::Unexpected),
        regs,
    );
}

/// An interrupt while Keel itself ran (the idle loop).
#[unsafe(no_mangle)]
extern "C" fn keel_hyp_irq() {
    let _ = irq::handle_pending();
}

/// The faulting guest-physical address of a stage-2 abort (HPFAR_EL2.FIPA and FAR_EL2's page offset).
fn faulting_ipa() -> u64 {
    ((read_sysreg!("hpfar_el2") & 0x0fff_ffff_fff0) << 8) | (read_sysreg!("far_el2") & 0xfff)
}

fn hypercall(id: usize, vcpu: usize, regs: &mut GuestRegs) -> Next {
    let Some(args) = regs.x.first_chunk::<8>() else {
        return Next::Stop(Fault::Unexpected);
    };
    let call = hypercall::decode(args);
    let vm = vm::vm(id);
    let vcpus = vm::desc(id).pcpus.len();
    let result = match call {
        Call::KeelVersion => abi::KEEL_VERSION_VALUE,
        Call::KeelVmId => {
            regs.x[1] = vcpu as u64;
            u64::from(vm::vm_id(id).0)
        }
        Call::KeelYield if vm::this_cpu_is_shared() => {
            regs.x[0] = 0;
            return Next::Yield;
        }
        Call::PsciCpuSuspend if vm::this_cpu_is_shared() => {
            regs.x[0] = 0;
            return Next::Wait;
        }
        Call::KeelYield | Call::PsciCpuSuspend => 0,
        Call::KeelSchedStats => match sched::stats(id, vcpu) {
            Some(stats) => {
                regs.x[1] = stats.deadline_misses;
                regs.x[2] = stats.overruns;
                regs.x[3] = crate::arch::timer::ticks_to_ns(stats.worst_response);
                stats.jobs
            }
            None => CallError::NotSupported.to_x0(),
        },
        Call::TaskCreate(request) => {
            vm::masked().at(MaskedSite::Task);
            sched::tasks::create(id, &request)
        }
        Call::TaskLaunch { handle, release } => {
            vm::masked().at(MaskedSite::Task);
            sched::tasks::launch(id, handle, release)
        }
        Call::TaskDelete(handle) => match sched::tasks::delete(id, vcpu, handle) {
            sched::tasks::After::Resume(x0) => x0,
            sched::tasks::After::Stop => return Next::VcpuOff,
        },
        Call::TaskWait => match sched::tasks::may_wait(id, vcpu) {
            Ok(()) => {
                regs.x[0] = 0;
                return Next::Yield;
            }
            Err(error) => error.to_x0(),
        },
        Call::TaskStats(handle) => sched::tasks::stats(id, handle, regs),
        Call::MsgSend(request) => match crate::messages::send(id, vcpu, &request) {
            Ok((queued, raised)) => {
                trace::record(
                    trace::Kind::MessageSend,
                    id,
                    vcpu,
                    0,
                    (request.vm as u32) << 16 | (request.len as u32 & 0xffff),
                );
                regs.x[0] = queued;
                return after_raise(raised);
            }
            Err(error) => error.code() as u64,
        },
        Call::ChannelNotify(request) => match crate::channel::notify(id, vcpu, &request) {
            Ok((rung, raised)) => {
                trace::record(trace::Kind::Doorbell, id, vcpu, 0, request.channel as u32);
                regs.x[0] = rung;
                return after_raise(raised);
            }
            Err(error) => error.code() as u64,
        },
        Call::MsgRecv(request) => match crate::messages::receive(id, vcpu, &request) {
            Ok(crate::ipc::Outcome::Took(got)) => {
                let answer = crate::messages::answer_took(&got, regs);
                trace::record(trace::Kind::MessageReceive, id, vcpu, 0, answer as u32);
                answer
            }
            Ok(crate::ipc::Outcome::Wait(until)) => return Next::WaitMessage(until),
            Err((error, len)) => {
                regs.x[1] = len;
                error.code() as u64
            }
        },
        Call::TraceMark(value) => {
            trace::record(trace::Kind::Mark, id, vcpu, 0, value);
            0
        }
        Call::TraceRead {
            pcpu,
            from,
            buffer,
            len,
        } => trace_read(id, pcpu, from, buffer, len, regs),
        Call::Watchdog | Call::Manager { .. } if !health::ON => CallError::NotSupported.to_x0(),
        Call::Watchdog => match crate::health::keep_watchdog(id) {
            Ok(period) => period,
            Err(error) => error.to_x0(),
        },
        Call::Manager { function, args } => {
            let results = crate::manager::call(id, vcpu, function, &args);
            regs.x[1] = results[1];
            regs.x[2] = results[2];
            regs.x[3] = results[3];
            results[0]
        }
        Call::MaskedStretch { pcpu, reset } => {
            crate::masked::query(id, pcpu, reset, regs, |pcpu| &vm::percpu(pcpu).masked)
        }
        Call::KeelCrash { esr, elr, far } => {
            return Next::Stop(Fault::GuestCrash { esr, elr, far })
        }
        Call::SmcccVersion => abi::SMCCC_VERSION_1_1,
        Call::SmcccArchFeatures(function) => hypercall::smccc_arch_features(function),
        Call::PsciVersion => psci::VERSION_1_1,
        Call::PsciFeatures(function) => hypercall::psci_features(function),
        Call::PsciMigrateInfoType => psci::TOS_NOT_PRESENT_MP,
        Call::PsciCpuOn {
            target,
            entry,
            context,
        } => {
            let target_vcpu = (target & 0xff) as usize;
            let entry_region = vm::desc(id).region_of(keel_core::addr::GuestPhysAddr(entry), 4);
            if target & !0xff != 0 || target_vcpu >= vcpus {
                CallError::InvalidParameters.to_x0()
            } else if entry_region.is_none() {
                CallError::InvalidAddress.to_x0()
            } else {
                match vm.request_start(target_vcpu, entry, context) {
                    Ok(()) => {
                        vm::kick_vcpu(id, target_vcpu);
                        0
                    }
                    Err(VcpuPower::On) => CallError::AlreadyOn.to_x0(),
                    Err(_) => (-5i64) as u64, // ON_PENDING
                }
            }
        }
        Call::PsciCpuOff => return Next::VcpuOff,
        Call::PsciAffinityInfo { target, level } => {
            let target_vcpu = (target & 0xff) as usize;
            if level != 0 || target & !0xff != 0 || target_vcpu >= vcpus {
                CallError::InvalidParameters.to_x0()
            } else {
                match vm.vcpu_power(target_vcpu) {
                    VcpuPower::On => 0,
                    VcpuPower::Off => 1,
                    VcpuPower::Pending => 2,
                }
            }
        }
        Call::PsciSystemOff => return Next::PowerOff,
        Call::PsciSystemReset => return Next::Reset,
        Call::Unknown(_) => CallError::NotSupported.to_x0(),
    };
    regs.x[0] = result;
    Next::Resume
}

/// KEEL_TRACE_READ (see [`abi::KEEL_TRACE_READ`]): x0 the records copied, x1-x3 the first's
/// index, the head and the first's offset in the buffer.
fn trace_read(id: usize, pcpu: u64, from: u64, buffer: u64, len: u64, regs: &mut GuestRegs) -> u64 {
    let desc = vm::desc(id);
    if !desc.trace_reader {
        return CallError::Denied.to_x0();
    }
    if !trace::ON || pcpu >= u64::from(crate::config::SYSTEM.pcpus) {
        return CallError::NotSupported.to_x0();
    }
    let len = len.min((abi::TRACE_READ_MAX * keel_core::trace::RECORD_BYTES) as u64);
    let Some(out) = vm::guest_bytes(desc, keel_core::addr::GuestPhysAddr(buffer), len as usize)
    else {
        return CallError::InvalidAddress.to_x0();
    };
    match trace::read(pcpu as usize, from, out, abi::TRACE_READ_MAX) {
        Some(copied) => {
            regs.x[1] = copied.first;
            regs.x[2] = copied.head;
            regs.x[3] = copied.offset;
            copied.count
        }
        None => CallError::NotSupported.to_x0(),
    }
}

/// The trap exit a raised virtual interrupt asks for (a message sent, a doorbell rung).
fn after_raise(raised: irq::Raised) -> Next {
    match raised {
        irq::Raised::Here => Next::ResumeWithInterrupts,
        irq::Raised::Elsewhere => Next::Resume,
        irq::Raised::WokeHere => Next::Reschedule,
    }
}

/// A trapped system register access other than a write of ICC_SGI1R_EL1 (taken before, by
/// [`sgi1r_trap`]).
fn system_register(id: usize, access: SysRegAccess, regs: &mut GuestRegs) -> Next {
    let reg = access.reg;
    if access.read && cpu_features::is_id_register(reg.op0, reg.op1, reg.crn, reg.crm) {
        // ID registers (HCR_EL2.TID3): the hardware's, less what Keel does not virtualize.
        let register = cpu_features::IdRegister {
            crm: reg.crm,
            op2: reg.op2,
        };
        let features = cpu_features::GuestFeatures {
            pmu: vm::desc(id).pmu,
            sve: !vm::shares_a_pcpu(id),
        };
        let hardware = read_id_register(reg.crm, reg.op2);
        regs.set(
            access.register,
            cpu_features::guest_view(register, hardware, features),
        );
        vectors::skip_instruction();
        return Next::Resume;
    }
    if [sysregs::DC_ISW, sysregs::DC_CSW, sysregs::DC_CISW].contains(&access.reg) {
        // Set/way maintenance (trapped by HCR_EL2.TSW): an invalidate alone could discard
        // lines another VM dirtied, so every form is done as clean and invalidate.
        cpu::clean_invalidate_set_way(regs.get(access.register));
        vectors::skip_instruction();
        return Next::Resume;
    }
    if access.reg.op0 == 2 {
        // Debug and OS-lock registers (op0 = 2, trapped by MDCR_EL2.TDA/TDOSA/TDRA): Keel
        // gives guests no self-hosted debug, so they read as zero and ignore writes, except
        // OSLSR_EL1, which reports an OS lock that is implemented and unlocked (OSLM = 0b10).
        if access.read {
            let value = if access.reg == sysregs::OSLSR_EL1 {
                0b1000
            } else {
                0
            };
            regs.set(access.register, value);
        }
        vectors::skip_instruction();
        return Next::Resume;
    }
    Next::Stop(Fault::SysReg(access))
}

/// Emulates a write of ICC_SGI1R_EL1 (GICv3 12.2.22): vCPU `i` has affinity 0.0.0.i.
/// Returns whether the SGI is pending for the calling vCPU itself.
fn send_virtual_sgi(id: usize, vcpu: usize, value: u64) -> bool {
    let intid = ((value >> 24) & 0xf) as u32;
    let broadcast = value & (1 << 40) != 0;
    let upper_affinity =
        (value >> 16) & 0xff | ((value >> 32) & 0xff) << 8 | ((value >> 48) & 0xff) << 16;
    let range_selector = ((value >> 44) & 0xf) as usize;
    let vcpus = vm::desc(id).pcpus.len();
    let mut targets = 0u64;
    for target in 0..vcpus {
        let selected = if broadcast {
            target != vcpu
        } else {
            upper_affinity == 0
                && target / 16 == range_selector
                && value & (1 << (target % 16)) != 0
        };
        if selected {
            targets |= 1 << target;
        }
    }
    if targets == 0 {
        return false;
    }
    {
        let mut vgic = vm::vm(id).vgic.lock();
        for target in (0..vcpus).filter(|t| targets & (1 << t) != 0) {
            vgic.raise(target, intid);
        }
    }
    vm::kick_vcpus_but(id, targets, vcpu);
    targets & (1 << vcpu) != 0
}

/// Emulates a data abort's access (from vCPU `vcpu` of VM `id`) to the device whose window
/// holds it, or to the management window of a manager VM (tried after the devices: it is
/// rarely used, so the devices' accesses pay nothing for it). Returns whether the guest's
/// virtual interrupts must be looked at again (a store, which may change an interrupt's
/// state), or the fault that stops the VM.
#[inline(always)]
fn data_abort(
    id: usize,
    vcpu: usize,
    abort: DataAbort,
    regs: &mut GuestRegs,
) -> Result<bool, Fault> {
    let ipa = faulting_ipa();
    if !abort.isv {
        return Err(Fault::NoSyndrome {
            ipa,
            permission_write: abort.permission_fault_write() == Some(true),
        });
    }
    let size = abort.access_size;
    let write = abort
        .write
        .then(|| regs.get(abort.register) & abort.access_mask());
    let loaded = match crate::devices::access(vm::desc(id), id, ipa, size, write) {
        Some(Ok(loaded)) => loaded,
        Some(Err((device, error))) => return Err(Fault::Device { device, ipa, error }),
        None => match crate::manager_window::access(id, vcpu, ipa, size, write) {
            Some(Ok(loaded)) => loaded,
            Some(Err(error)) => {
                return Err(Fault::Device {
                    device: crate::manager_window::NAME,
                    ipa,
                    error,
                })
            }
            None => {
                return Err(Fault::Stage2 {
                    ipa,
                    write: abort.write,
                    size,
                })
            }
        },
    };
    if !abort.write {
        regs.set(abort.register, abort.loaded_value(loaded));
    }
    vectors::skip_instruction();
    Ok(abort.write)
}

/// Parks this vCPU after its VM ended with Keel's line: the interrupts that came meanwhile are
/// served first, so that the line and the switch to another vCPU (on a shared pCPU) are two
/// masked stretches, not one (`bench masked`: the budget-reset attacker's SYSTEM_OFF was 2,325
/// instructions in one). What they ask of the scheduler it sees as it runs anyway.
fn park_after_line() -> ! {
    let _ = irq::serve_between_steps(MaskedSite::GuestTrap);
    sched::pinned::park()
}
