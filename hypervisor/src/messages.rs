//! The message hypercalls (KEEL_MSG_SEND, KEEL_MSG_RECV): a send copies the message from the
//! sender's memory into the destination's queue ([`crate::ipc`]) and raises the VM's message
//! interrupt at that vCPU, unless the destination's virtio console takes it as input; a
//! receive copies the next message out into the receiver's memory, and lets a virtio console
//! whose output waited for room in that queue go on.
//!
//! Locks: none of its own; each queue's lock for one copy, then the console's or the vGIC's
//! (see [`crate::ipc`] and [`crate::devices::virtio`]), never together (the crate's
//! [lock order](crate#lock-order)).
//!
//! Guest memory is reached only through [`vm::guest_bytes`], which checks the whole range
//! against the VM's own regions first.

use keel_core::addr::GuestPhysAddr;
use keel_core::ipc::{self, MessageError, ReceiveRequest, Received, SendRequest, Sender};

use crate::arch::vectors::GuestRegs;
use crate::config::SYSTEM;
use crate::devices::virtio;
use crate::ipc::Outcome;
use crate::irq::{self, Raised};
use crate::vm;

/// KEEL_MSG_SEND from vCPU `vcpu` of VM `id`: the number of messages queued at the
/// destination, and what the raised message interrupt asks of the sender's trap exit.
pub fn send(id: usize, vcpu: usize, request: &SendRequest) -> Result<(u64, Raised), MessageError> {
    let (to, to_vcpu, grant) = ipc::destination(SYSTEM.vms, id, request)?;
    let len = request.len as usize;
    let message = message_bytes(id, request.buffer, len, false).ok_or(MessageError::BadBuffer)?;
    let from = Sender {
        vm: id as u16,
        vcpu: vcpu as u16,
    };
    let queued = crate::ipc::enqueue(from, to, to_vcpu, message)?;
    if virtio::feeds_console(to, to_vcpu) {
        // The destination's virtio console takes it as input: no message interrupt.
        virtio::input_queued(to);
        return Ok((queued, Raised::Elsewhere));
    }
    // The message interrupt is raised at the receiving vCPU (nothing for a task: it polls).
    let raised = irq::raise_and_kick(to, to_vcpu, grant.intid, id, vcpu);
    Ok((queued, raised))
}

/// KEEL_MSG_RECV from vCPU `vcpu` of VM `id`. A buffer too small is refused with the
/// message's length, which stays queued. Inlined in its two callers (the hypercall, and
/// [`complete_waiting_receive`]): a call of its own cost each delivery about 50 instructions.
#[inline(always)]
pub fn receive(
    id: usize,
    vcpu: usize,
    request: &ReceiveRequest,
) -> Result<Outcome, (MessageError, u64)> {
    let refused = |error| (error, 0);
    let grant = vm::desc(id)
        .messages
        .ok_or(refused(MessageError::NotAllowed))?;
    // Keel writes at most the largest message the queue takes, so only that much of the
    // buffer has to be the caller's.
    let writable = request.capacity.min(u64::from(grant.size)) as usize;
    let buffer = message_bytes(id, request.buffer, writable, true)
        .ok_or(refused(MessageError::BadBuffer))?;
    let outcome = crate::ipc::receive(id, vcpu, buffer, request.wait_until)?;
    if let Outcome::Took(_) = outcome {
        // Room was made: a virtio console whose output waited for it goes on.
        virtio::peer_received(id);
    }
    Ok(outcome)
}

/// KEEL_MSG_RECV's answer for a message taken: x1..x3 = sender's VM and vCPU, messages
/// left; returns x0 (its length).
#[inline(always)]
pub fn answer_took(got: &Received, regs: &mut GuestRegs) -> u64 {
    regs.x[1] = u64::from(got.from.vm);
    regs.x[2] = u64::from(got.from.vcpu);
    regs.x[3] = got.left as u64;
    got.len as u64
}

/// A vCPU switched in from a wait in KEEL_MSG_RECV (PC on its HVC, registers the call's
/// arguments): a message queued for it meanwhile is taken here, as the repeated call would
/// take it, so that the delivery costs no second trap; returns whether it was (the caller
/// then moves the PC past the HVC). Without one (an interrupt or the timeout ended the
/// wait), or with any refusal, nothing changes: the HVC runs again and answers as always.
pub fn complete_waiting_receive(id: usize, vcpu: usize, regs: &mut GuestRegs) -> bool {
    let Some(args) = regs.x.first_chunk::<8>() else {
        return false;
    };
    if args[0] as u32 != keel_core::abi::KEEL_MSG_RECV {
        return false;
    }
    let request = ReceiveRequest::from_regs(args);
    let Ok(Outcome::Took(got)) = receive(id, vcpu, &request) else {
        return false;
    };
    regs.x[0] = answer_took(&got, regs);
    crate::trace::record(
        keel_core::trace::Kind::MessageReceive,
        id,
        vcpu,
        0,
        got.len as u32,
    );
    true
}

/// `len` bytes of VM `id`'s memory at `ipa`, if they lie wholly in one of its regions (its RAM
/// alone when Keel is to write them). Nothing is looked up for an empty message.
fn message_bytes(id: usize, ipa: u64, len: usize, write: bool) -> Option<&'static mut [u8]> {
    if len == 0 {
        return Some(&mut []);
    }
    let desc = vm::desc(id);
    let ipa = GuestPhysAddr(ipa);
    if write && !desc.memory.contains_range(ipa, len as u64) {
        return None;
    }
    vm::guest_bytes(desc, ipa, len)
}
