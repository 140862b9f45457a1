//! Shared-memory channels' doorbells (KEEL_CHANNEL_NOTIFY): which members a ring reaches,
//! checked against the configuration, each refusal with its own code.
//!
//! A channel ([`ChannelDesc`]) is memory its member VMs map at build time; Keel never reads or
//! writes it. The only run-time service is the doorbell: a member raises the channel's
//! interrupt at one other member, or at every other member.

use crate::abi::CallError;
use crate::system::ChannelDesc;

/// KEEL_CHANNEL_NOTIFY's `x2` that rings every member but the caller.
pub const EVERY_OTHER_MEMBER: u64 = u64::MAX;

/// Most members a channel may have: every VM of the system.
const MAX_MEMBERS: usize = crate::system::MAX_VMS;

/// Why a doorbell is refused; each has its own code and rings nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelError {
    /// The caller is not a member of the channel.
    NotMember,
    /// No channel has that id, or the channel no member at that position.
    NoSuchChannel,
    /// The member rung (or, for every other member, each of them) is stopped: powered off or
    /// stopped by Keel.
    PeerStopped,
}

impl ChannelError {
    /// Every refusal.
    pub const ALL: [ChannelError; 3] = [
        ChannelError::NotMember,
        ChannelError::NoSuchChannel,
        ChannelError::PeerStopped,
    ];

    /// The value returned in x0: DENIED for a non-member, the message services' "destination
    /// stopped" for a stopped peer, and a code of its own for an unknown channel or member.
    pub const fn code(self) -> i64 {
        match self {
            ChannelError::NotMember => CallError::Denied as i64,
            ChannelError::NoSuchChannel => -38,
            ChannelError::PeerStopped => crate::ipc::MessageError::DestinationStopped.code(),
        }
    }

    /// The refusal x0 holds, if it holds one.
    pub fn from_x0(x0: u64) -> Option<ChannelError> {
        Self::ALL
            .into_iter()
            .find(|error| error.code() == x0 as i64)
    }
}

/// KEEL_CHANNEL_NOTIFY's arguments, as the guest gave them (unchecked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotifyRequest {
    /// The channel's id: its index among the `[[channel]]` tables.
    pub channel: u64,
    /// The member to ring (its position in the channel's `vms`), or [`EVERY_OTHER_MEMBER`].
    pub member: u64,
}

/// The members a doorbell rings, by position in the channel's `members`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peers(u32);

impl Peers {
    /// The positions, in order.
    pub fn positions(self) -> impl Iterator<Item = usize> {
        (0..MAX_MEMBERS).filter(move |&position| self.0 & (1 << position) != 0)
    }
}

/// The channel a doorbell names and the members it rings, once checked against the
/// configuration, in this order, each refusal its own code: an unknown channel, a caller not
/// among its members, an unknown member. The caller may ring itself by its own position.
/// Whether the peers run is the caller's to check.
pub fn peers<'a>(
    channels: &'a [ChannelDesc],
    caller: usize,
    request: &NotifyRequest,
) -> Result<(&'a ChannelDesc, Peers), ChannelError> {
    let channel = usize::try_from(request.channel)
        .ok()
        .and_then(|id| channels.get(id))
        .ok_or(ChannelError::NoSuchChannel)?;
    let me = channel.position_of(caller).ok_or(ChannelError::NotMember)?;
    let count = channel.members.len().min(MAX_MEMBERS);
    let everyone = (1u32 << count) - 1;
    let mask = if request.member == EVERY_OTHER_MEMBER {
        everyone & !(1 << me)
    } else {
        usize::try_from(request.member)
            .ok()
            .filter(|&position| position < count)
            .map(|position| 1 << position)
            .ok_or(ChannelError::NoSuchChannel)?
    };
    Ok((channel, Peers(mask)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::{GuestPhysAddr, PhysAddr};
    use crate::system::ChannelMember;

    const fn member(vm: u8) -> ChannelMember {
        ChannelMember {
            vm,
            ipa: GuestPhysAddr(0x7000_0000),
            writable: true,
        }
    }

    static TRIO: [ChannelMember; 3] = [member(2), member(0), member(3)];
    static PAIR: [ChannelMember; 2] = [member(1), member(2)];

    fn channels() -> [ChannelDesc; 2] {
        let channel = |name, members| ChannelDesc {
            name,
            phys: PhysAddr(0x5f00_0000),
            size: 0x1_0000,
            intid: 10,
            members,
        };
        [channel("trio", &TRIO[..]), channel("pair", &PAIR[..])]
    }

    fn rung(caller: usize, channel: u64, member: u64) -> Result<(usize, Vec<usize>), ChannelError> {
        let channels = channels();
        let request = NotifyRequest { channel, member };
        peers(&channels, caller, &request).map(|(desc, peers)| {
            let id = channels.iter().position(|c| c.name == desc.name).unwrap();
            (id, peers.positions().collect())
        })
    }

    #[test]
    fn a_member_rings_one_member_or_every_other() {
        assert_eq!(rung(0, 0, 0), Ok((0, vec![0])));
        assert_eq!(rung(0, 0, 2), Ok((0, vec![2])));
        assert_eq!(rung(0, 0, EVERY_OTHER_MEMBER), Ok((0, vec![0, 2])));
        assert_eq!(rung(3, 0, EVERY_OTHER_MEMBER), Ok((0, vec![0, 1])));
        assert_eq!(rung(2, 1, EVERY_OTHER_MEMBER), Ok((1, vec![0])));
        assert_eq!(rung(1, 1, 1), Ok((1, vec![1])));
        // Its own position rings itself.
        assert_eq!(rung(0, 0, 1), Ok((0, vec![1])));
    }

    #[test]
    fn refusals_come_in_order_each_with_its_own_code() {
        // An unknown channel before membership: nothing is said about channels that do not exist.
        assert_eq!(rung(5, 2, 0), Err(ChannelError::NoSuchChannel));
        assert_eq!(rung(0, u64::MAX, 0), Err(ChannelError::NoSuchChannel));
        // Not a member, whatever member it names.
        assert_eq!(rung(1, 0, 0), Err(ChannelError::NotMember));
        assert_eq!(rung(1, 0, 9), Err(ChannelError::NotMember));
        assert_eq!(rung(0, 1, EVERY_OTHER_MEMBER), Err(ChannelError::NotMember));
        // A member that does not exist.
        assert_eq!(rung(0, 0, 3), Err(ChannelError::NoSuchChannel));
        assert_eq!(rung(0, 0, u64::MAX - 1), Err(ChannelError::NoSuchChannel));
        assert_eq!(rung(1, 1, 2), Err(ChannelError::NoSuchChannel));
    }

    #[test]
    fn codes_are_distinct_and_round_trip() {
        assert_eq!(ChannelError::NotMember.code(), -3);
        assert_eq!(ChannelError::NoSuchChannel.code(), -38);
        assert_eq!(ChannelError::PeerStopped.code(), -36);
        for error in ChannelError::ALL {
            assert_eq!(ChannelError::from_x0(error.code() as u64), Some(error));
        }
        assert_eq!(ChannelError::from_x0(0), None);
        // Distinct from every code of the other services, but those it shares on purpose.
        for message in crate::ipc::MessageError::ALL {
            if message.code() == ChannelError::NoSuchChannel.code() {
                panic!("{message:?} has the code of NoSuchChannel");
            }
        }
        for task in crate::tasks::TaskError::ALL {
            assert_ne!(task.code(), ChannelError::NoSuchChannel.code(), "{task:?}");
        }
    }
}
