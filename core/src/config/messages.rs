//! The rules of a VM's `messages` table: queue depth, message size, the interrupt that signals a
//! message, which VMs may send, and the room all queues take in Keel's message pool.

use std::ops::RangeInclusive;

use super::error::{ConfigErrorKind, Problem, Subject};
use super::model::{Messages, Vm};
use super::schema::VmTable;
use crate::abi::layout::{UART_INTID, VIRTIO_INTID};
use crate::devices::vgic::NR_IRQS;
use crate::ipc::MAX_MESSAGE;
use crate::system::{MAX_MESSAGE_POOL, MAX_QUEUE_DEPTH};

/// Software-generated interrupts: any vCPU's to raise (GICv3 spec, 2.2 "INTIDs").
const SGIS: RangeInclusive<i64> = 0..=15;
/// Private peripheral interrupts: the timers' and the GIC maintenance interrupt, never a
/// message's (GICv3 spec, 2.2 "INTIDs").
const PPIS: RangeInclusive<i64> = 16..=31;
/// Shared peripheral interrupts Keel's vGIC implements.
const SPIS: RangeInclusive<i64> = 32..=(NR_IRQS as i64 - 1);

// The refusals spell these ranges out (`Problem::MessageInterrupt*`).
const _: () = assert!(NR_IRQS == 128);

/// A VM's `messages` (`console`: whether it has the PL011), reported under `subject`;
/// its rings start after those of the `earlier` VMs; `names` are the names of every VM in the
/// file, in order (a sender may come later than the VM). The pool's limit is checked once the
/// VM is complete, by [`check_pool`].
pub fn check_messages(
    table: &VmTable,
    subject: &Subject,
    console: bool,
    earlier: &[Vm],
    names: &[&str],
) -> Result<Option<Messages>, ConfigErrorKind> {
    let Some(messages) = &table.messages else {
        return Ok(None);
    };
    let at = |field: &'static str, problem: Problem| ConfigErrorKind::Invalid {
        subject: subject.clone(),
        field,
        problem,
    };

    let depth = u16::try_from(messages.depth)
        .ok()
        .filter(|depth| (1..=MAX_QUEUE_DEPTH).contains(&usize::from(*depth)))
        .ok_or_else(|| {
            at(
                "messages.depth",
                Problem::QueueDepthOutOfRange {
                    value: messages.depth,
                    max: MAX_QUEUE_DEPTH,
                },
            )
        })?;
    let size = u16::try_from(messages.size)
        .ok()
        .filter(|size| (1..=MAX_MESSAGE).contains(&usize::from(*size)))
        .ok_or_else(|| {
            at(
                "messages.size",
                Problem::MessageSizeOutOfRange {
                    value: messages.size,
                    max: MAX_MESSAGE,
                },
            )
        })?;
    let intid = check_interrupt(messages.interrupt, console)
        .map_err(|problem| at("messages.interrupt", problem))?;

    // An empty `from` is refused once every VM is read, unless the VM manages one (its queue
    // then takes Keel's notices): [`super::health::check_managers`].
    let mut senders = Vec::with_capacity(messages.from.len());
    for (position, name) in messages.from.iter().enumerate() {
        let problem = |problem| at("messages.from", problem);
        let Some(id) = names.iter().position(|other| other == name) else {
            return Err(problem(Problem::UnknownVm { name: name.clone() }));
        };
        if messages.from[..position].contains(name) {
            return Err(problem(Problem::VmListedTwice { name: name.clone() }));
        }
        senders.push(u8::try_from(id).expect("MAX_VMS fits a u8"));
    }

    Ok(Some(Messages {
        depth,
        size,
        intid,
        senders,
        pool_offset: earlier.iter().map(Vm::message_pool_len).sum(),
    }))
}

/// The interrupt a message (or a channel's doorbell) raises: an SGI or an implemented SPI, not
/// the console's when the VM has one.
pub(super) fn check_interrupt(intid: i64, console: bool) -> Result<u32, Problem> {
    if PPIS.contains(&intid) {
        return Err(Problem::MessageInterruptIsPpi { intid });
    }
    if !SGIS.contains(&intid) && !SPIS.contains(&intid) {
        return Err(Problem::MessageInterruptOutOfRange { intid });
    }
    let intid = u32::try_from(intid).expect("an SGI or SPI fits a u32");
    if console && intid == UART_INTID {
        return Err(Problem::MessageInterruptIsConsole { intid });
    }
    Ok(intid)
}

/// Whether the message pool still fits with `vm`'s rings (laid out after the earlier VMs',
/// at its `pool_offset`), reported under `subject`.
pub fn check_pool(vm: &Vm, subject: &Subject) -> Result<(), ConfigErrorKind> {
    let Some(messages) = &vm.messages else {
        return Ok(());
    };
    let total = messages.pool_offset + vm.message_pool_len();
    if total > MAX_MESSAGE_POOL {
        return Err(ConfigErrorKind::Invalid {
            subject: subject.clone(),
            field: "messages",
            problem: Problem::MessagePoolTooLarge {
                total,
                max: MAX_MESSAGE_POOL,
            },
        });
    }
    Ok(())
}

/// VM `index`'s `virtio_console` (its `messages` already checked), reported under `subject`:
/// the peer (by id) is another VM, which this VM takes messages from, and the VM's message
/// interrupt is not the console's. Whether the peer takes messages from this VM is checked
/// once every VM is known ([`check_virtio_peers`]).
pub fn check_virtio_console(
    table: &VmTable,
    index: usize,
    subject: &Subject,
    messages: Option<&Messages>,
    names: &[&str],
) -> Result<Option<u8>, ConfigErrorKind> {
    let Some(console) = &table.virtio_console else {
        return Ok(None);
    };
    let at = |field: &'static str, problem: Problem| ConfigErrorKind::Invalid {
        subject: subject.clone(),
        field,
        problem,
    };
    let peer = &console.peer;
    let Some(id) = names.iter().position(|name| name == peer) else {
        return Err(at(
            "virtio_console.peer",
            Problem::UnknownVm { name: peer.clone() },
        ));
    };
    if id == index {
        return Err(at(
            "virtio_console.peer",
            Problem::VirtioPeerIsItself { name: peer.clone() },
        ));
    }
    let id = u8::try_from(id).expect("MAX_VMS fits a u8");
    let Some(messages) = messages.filter(|messages| messages.senders.contains(&id)) else {
        return Err(at(
            "virtio_console.peer",
            Problem::VirtioInputNotAllowed { peer: peer.clone() },
        ));
    };
    if messages.intid == VIRTIO_INTID {
        return Err(at(
            "messages.interrupt",
            Problem::InterruptIsVirtio {
                intid: messages.intid,
            },
        ));
    }
    Ok(Some(id))
}

/// Every VM with a virtio console: its peer takes messages from it.
pub fn check_virtio_peers(vms: &[Vm]) -> Result<(), ConfigErrorKind> {
    for vm in vms {
        let Some(peer) = vm.virtio_console else {
            continue;
        };
        let peer = &vms[usize::from(peer)];
        let takes = peer
            .messages
            .as_ref()
            .is_some_and(|messages| messages.senders.contains(&(vm.id as u8)));
        if !takes {
            return Err(ConfigErrorKind::Invalid {
                subject: Subject::Vm(vm.name.clone()),
                field: "virtio_console.peer",
                problem: Problem::VirtioOutputNotAllowed {
                    peer: peer.name.clone(),
                },
            });
        }
    }
    Ok(())
}
