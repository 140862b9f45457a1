//! The rules of a `[[channel]]` table: its name, its physical memory (in RAM, no VM's and no
//! other channel's), its doorbell interrupt, and each member VM's window on it.

use super::error::{AddressRange, Backing, ConfigErrorKind, Problem, Subject};
use super::messages::check_interrupt;
use super::model::{Channel, ChannelMember, Vm};
use super::schema::{ChannelMemberTable, ChannelTable};
use super::validate::{check_ipa, check_region};
use crate::abi::layout::UART_INTID;
use crate::system::MAX_CHANNELS;

/// Every `[[channel]]` table, in file order, against the validated `vms`, the board's `ram` and
/// Keel's region (`hypervisor`).
pub fn check_channels(
    tables: &[ChannelTable],
    vms: &[Vm],
    ram: AddressRange,
    hypervisor: AddressRange,
) -> Result<Vec<Channel>, ConfigErrorKind> {
    if tables.len() > MAX_CHANNELS {
        return Err(ConfigErrorKind::TooManyChannels {
            count: tables.len(),
            max: MAX_CHANNELS,
        });
    }
    let mut channels: Vec<Channel> = Vec::with_capacity(tables.len());
    for (index, table) in tables.iter().enumerate() {
        let channel = check_channel(table, index, vms, &channels, ram, hypervisor)?;
        channels.push(channel);
    }
    Ok(channels)
}

/// Whether `name` may name a device-tree node without a unit address (Devicetree
/// Specification 0.4, 2.2.1): the guests' device trees describe a channel as
/// `/keel-channels/<name>`.
fn is_node_name(name: &str) -> bool {
    let mut characters = name.chars();
    characters.next().is_some_and(|c| c.is_ascii_alphabetic())
        && characters.all(|c| c.is_ascii_alphanumeric() || ",._+-".contains(c))
        && name.len() <= 31
}

/// The memory a channel takes: `[phys, phys + size)`.
fn memory_of(channel: &Channel) -> AddressRange {
    AddressRange {
        start: channel.phys,
        end: channel.phys + channel.size,
    }
}

/// All rules of one `[[channel]]`, in the order its fields are documented, against the VMs and
/// the channels before it (`earlier`).
fn check_channel(
    table: &ChannelTable,
    index: usize,
    vms: &[Vm],
    earlier: &[Channel],
    ram: AddressRange,
    hypervisor: AddressRange,
) -> Result<Channel, ConfigErrorKind> {
    let invalid =
        |subject: &Subject, field: &'static str, problem: Problem| ConfigErrorKind::Invalid {
            subject: subject.clone(),
            field,
            problem,
        };
    if table.name.is_empty() {
        return Err(invalid(
            &Subject::UnnamedChannel(index),
            "name",
            Problem::EmptyName,
        ));
    }
    let subject = Subject::Channel(table.name.clone());
    if !is_node_name(&table.name) {
        return Err(invalid(
            &subject,
            "name",
            Problem::ChannelNameNotANodeName {
                name: table.name.clone(),
            },
        ));
    }
    if let Some(first) = earlier.iter().position(|other| other.name == table.name) {
        return Err(invalid(
            &subject,
            "name",
            Problem::DuplicateChannelName {
                first,
                second: index,
            },
        ));
    }
    let at = |field: &'static str, problem: Problem| invalid(&subject, field, problem);

    let memory = check_memory(table, vms, earlier, ram, hypervisor)
        .map_err(|problem| at("memory", problem))?;
    let intid =
        check_interrupt(table.interrupt, false).map_err(|problem| at("interrupt", problem))?;

    if table.vms.len() < 2 {
        return Err(at(
            "vms",
            Problem::TooFewMembers {
                count: table.vms.len(),
            },
        ));
    }
    let mut members: Vec<ChannelMember> = Vec::with_capacity(table.vms.len());
    for (position, entry) in table.vms.iter().enumerate() {
        let Some(vm) = vms.iter().find(|vm| vm.name == entry.vm) else {
            return Err(at(
                "vms",
                Problem::UnknownVm {
                    name: entry.vm.clone(),
                },
            ));
        };
        if table.vms[..position]
            .iter()
            .any(|other| other.vm == entry.vm)
        {
            return Err(at(
                "vms",
                Problem::VmListedTwice {
                    name: entry.vm.clone(),
                },
            ));
        }
        let member_subject = Subject::ChannelMember {
            channel: table.name.as_str().into(),
            vm: vm.name.as_str().into(),
        };
        let member = check_member(entry, vm, memory.size(), earlier)
            .map_err(|(field, problem)| invalid(&member_subject, field, problem))?;
        members.push(member);
    }

    for member in &members {
        let vm = &vms[usize::from(member.vm)];
        if vm.console && intid == UART_INTID {
            return Err(at(
                "interrupt",
                Problem::ChannelInterruptIsConsole {
                    intid,
                    vm: vm.name.clone(),
                },
            ));
        }
        if vm.virtio_console.is_some() && intid == crate::abi::layout::VIRTIO_INTID {
            return Err(at("interrupt", Problem::InterruptIsVirtio { intid }));
        }
        if vm.messages.as_ref().is_some_and(|m| m.intid == intid) {
            return Err(at(
                "interrupt",
                Problem::ChannelInterruptIsMessages {
                    intid,
                    vm: vm.name.clone(),
                },
            ));
        }
        if let Some(device) = vm
            .passthrough
            .iter()
            .find(|device| device.interrupts.iter().any(|i| i.intid == intid))
        {
            return Err(at(
                "interrupt",
                Problem::ChannelInterruptIsDevice {
                    intid,
                    vm: vm.name.clone(),
                    path: device.path.clone(),
                },
            ));
        }
    }

    Ok(Channel {
        name: table.name.clone(),
        phys: memory.start,
        size: memory.size(),
        intid,
        members,
    })
}

/// Where a channel's memory may lie: shaped as any region, inside RAM, clear of Keel, of every
/// VM's memory and flash, and of the earlier channels.
fn check_memory(
    table: &ChannelTable,
    vms: &[Vm],
    earlier: &[Channel],
    ram: AddressRange,
    hypervisor: AddressRange,
) -> Result<AddressRange, Problem> {
    let range = check_region(&table.memory)?;
    if !ram.contains(&range) {
        return Err(Problem::OutsideRam { range, ram });
    }
    if range.overlaps(&hypervisor) {
        return Err(Problem::OverlapsHypervisor { range, hypervisor });
    }
    for vm in vms {
        for (other_what, phys, size) in vm.backing() {
            let other_range = AddressRange {
                start: phys,
                end: phys + size,
            };
            if range.overlaps(&other_range) {
                return Err(Problem::OverlapsVm {
                    range,
                    other: vm.name.clone(),
                    other_what,
                    other_range,
                });
            }
        }
    }
    if let Some(other) = earlier
        .iter()
        .find(|other| range.overlaps(&memory_of(other)))
    {
        return Err(Problem::OverlapsChannel {
            range,
            other: other.name.clone(),
            other_range: memory_of(other),
        });
    }
    Ok(range)
}

/// One member's entry: its access, and its window of `size` bytes: a valid guest-physical range
/// clear of the VM's own memory and flash and of its windows of the `earlier` channels.
fn check_member(
    entry: &ChannelMemberTable,
    vm: &Vm,
    size: u64,
    earlier: &[Channel],
) -> Result<ChannelMember, (&'static str, Problem)> {
    let writable = match entry.access.as_str() {
        "rw" => true,
        "ro" => false,
        value => {
            return Err((
                "access",
                Problem::UnknownAccess {
                    value: value.to_string(),
                },
            ))
        }
    };
    let ipa = |problem| ("ipa", problem);
    let range = check_ipa(entry.ipa, size, "window").map_err(ipa)?;
    for (what, other_range) in own_ranges(vm) {
        if range.overlaps(&other_range) {
            return Err(ipa(Problem::WindowOverlapsOwn {
                range,
                what,
                other_range,
            }));
        }
    }
    for device in &vm.passthrough {
        for region in &device.regions {
            let other_range = AddressRange {
                start: region.ipa.0,
                end: region.ipa.0 + region.size,
            };
            if range.overlaps(&other_range) {
                return Err(ipa(Problem::WindowOverlapsDevice {
                    range,
                    path: device.path.clone(),
                    other_range,
                }));
            }
        }
    }
    let id = u8::try_from(vm.id).expect("MAX_VMS fits a u8");
    for other in earlier {
        let Some(window) = other.members.iter().find(|member| member.vm == id) else {
            continue;
        };
        let other_range = AddressRange {
            start: window.ipa,
            end: window.ipa + other.size,
        };
        if range.overlaps(&other_range) {
            return Err(ipa(Problem::WindowOverlapsChannel {
                range,
                other: other.name.clone(),
                other_range,
            }));
        }
    }
    Ok(ChannelMember {
        vm: id,
        ipa: range.start,
        writable,
    })
}

/// The VM's own guest-physical ranges: its memory, then its flash at IPA 0.
fn own_ranges(vm: &Vm) -> impl Iterator<Item = (Backing, AddressRange)> + '_ {
    let range = |region: crate::addr::MemoryRegion| AddressRange {
        start: region.ipa.0,
        end: region.ipa.0 + region.size,
    };
    core::iter::once((Backing::Memory, range(vm.memory_region()))).chain(
        vm.flash_region()
            .map(|flash| (Backing::Flash, range(flash))),
    )
}
