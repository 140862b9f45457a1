//! Shared-memory channels at run time: the doorbell (KEEL_CHANNEL_NOTIFY). A channel's memory
//! is mapped into each member's stage 2 when the VM is built ([`crate::lifecycle::build`])
//! and never touched by Keel; a doorbell raises the channel's interrupt in the members it
//! names.
//!
//! Locks: none of its own; each peer's vGIC lock in turn, for one raise
//! ([`irq::raise_and_kick`]; the crate's [lock order](crate#lock-order)).

use keel_core::addr::GuestPhysAddr;
use keel_core::channel::{self, ChannelError, NotifyRequest};

use crate::config::SYSTEM;
use crate::irq::{self, Raised};
use crate::vm::{self, VmState};

/// KEEL_CHANNEL_NOTIFY from vCPU `vcpu` of VM `id`: raises the channel's interrupt in each
/// member the request names that runs (an SGI at its vCPU 0, an SPI at the vCPU it routes it
/// to) and kicks that vCPU's pCPU. Returns how many members were rung and what the raises ask
/// of the caller's trap exit; refused as [`ChannelError::PeerStopped`] when no member named
/// runs (powered off or stopped by Keel).
pub fn notify(
    id: usize,
    vcpu: usize,
    request: &NotifyRequest,
) -> Result<(u64, Raised), ChannelError> {
    let (channel, peers) = channel::peers(SYSTEM.channels, id, request)?;
    let mut rung = 0;
    let mut raised = Raised::Elsewhere;
    for member in peers
        .positions()
        .filter_map(|position| channel.members.get(position))
    {
        let to = usize::from(member.vm);
        if vm::vm(to).state() != VmState::Running {
            continue;
        }
        // Only the caller ringing itself is `Here`, and that rings no one else: the strongest
        // of the answers is all the trap exit needs.
        raised = raised.max(irq::raise_and_kick(to, 0, channel.intid, id, vcpu));
        rung += 1;
    }
    if rung == 0 {
        return Err(ChannelError::PeerStopped);
    }
    Ok((rung, raised))
}

/// The channel whose read-only window VM `id` sees at `ipa`, if one is there (a guest write
/// there is a stage-2 permission fault, which stops the VM naming the channel).
pub fn read_only_window_at(id: usize, ipa: u64) -> Option<&'static str> {
    SYSTEM
        .channels_of(id)
        .find(|(channel, member)| {
            !member.writable
                && channel
                    .window(member)
                    .translate(GuestPhysAddr(ipa))
                    .is_some()
        })
        .map(|(channel, _)| channel.name)
}
