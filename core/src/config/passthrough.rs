//! The `[[vm.passthrough]]` rules: each board device a VM is given, found by its path in the
//! board's device tree, its registers, interrupts and node resolved, and refused (naming the
//! VM and the device) when it is Keel's, another VM's, in RAM, in the way of what the VM
//! already sees, or able to master DMA with no SMMU in front of it.
//!
//! What each device is, as the board's device tree says, is read in `board`.

use super::board::{
    bridge_windows, copy_node, dma_master, interrupt_map, interrupts, keels_own, smmu_phandle,
    smmu_streams, Board, InterruptMap, Windows,
};
use super::error::AddressRange;
use super::model::{Iommu, Passthrough, Vm, IPA_BITS, PAGE_SIZE};
use super::passthrough_problem::PassthroughProblem;
use super::schema::{PassthroughTable, VmTable};
use crate::abi::layout;
use crate::addr::{GuestPhysAddr, MemoryRegion, PhysAddr};
use crate::devices::vgic::REDISTRIBUTOR_SIZE;
use crate::fdt::Fdt;
use crate::smmu::{arrays_needed, StreamAssignment};
use crate::system::{MAX_STREAMS, MAX_STREAM_ARRAYS, MAX_STREAM_RANGES};

/// A VM's `[[vm.passthrough]]` tables resolved against the board's tree: `vm` is the VM checked
/// so far (its memory, flash and emulated devices), `earlier` the VMs before it, `ram` the
/// board's RAM, `iommu` the SMMU Keel drives (a DMA master needs one in front of it).
pub(super) fn check_passthrough(
    table: &VmTable,
    vm: &Vm,
    earlier: &[Vm],
    ram: AddressRange,
    board: &mut Board,
    iommu: Option<&Iommu>,
) -> Result<Vec<Passthrough>, PassthroughProblem> {
    if table.passthrough.is_empty() {
        return Ok(Vec::new());
    }
    let fdt = board.tree()?;
    let smmu = match iommu {
        Some(iommu) => smmu_phandle(&fdt, iommu),
        None => None,
    };
    let mut devices: Vec<Passthrough> = Vec::with_capacity(table.passthrough.len());
    for (position, entry) in table.passthrough.iter().enumerate() {
        let path = entry.path.clone();
        if table.passthrough[..position]
            .iter()
            .any(|other| other.path == path)
        {
            return Err(PassthroughProblem::ListedTwice { path });
        }
        if let Some(other) = earlier
            .iter()
            .find(|other| other.passthrough.iter().any(|device| device.path == path))
        {
            return Err(PassthroughProblem::AssignedTwice {
                path,
                other: other.name.clone(),
            });
        }
        let device = resolve(&fdt, entry, ram, smmu)?;
        check_guest_view(&device, vm, &devices)?;
        check_interrupts(&device, vm, earlier, &devices)?;
        check_streams(&device, earlier, &devices)?;
        devices.push(device);
        check_stream_arrays(earlier, &devices)?;
    }
    Ok(devices)
}

/// The streams of the VMs so far (`earlier`, and this one's `devices`, the last of which is
/// checked) are at most [`MAX_STREAM_RANGES`] ranges, and fit the level-2 arrays Keel's stream
/// table has
/// ([`MAX_STREAM_ARRAYS`]: one per VM owning whole blocks of 256 streams, one per block split).
fn check_stream_arrays(earlier: &[Vm], devices: &[Passthrough]) -> Result<(), PassthroughProblem> {
    let vms = earlier
        .iter()
        .map(|vm| vm.passthrough.as_slice())
        .chain([devices]);
    let assignments: Vec<StreamAssignment> = vms
        .enumerate()
        .flat_map(|(vm, devices)| {
            devices.iter().flat_map(move |device| {
                device
                    .streams
                    .iter()
                    .map(move |&(first, last)| StreamAssignment { first, last, vm })
            })
        })
        .collect();
    if let Some(device) = devices.last() {
        if assignments.len() > MAX_STREAM_RANGES {
            return Err(PassthroughProblem::StreamRanges {
                path: device.path.clone(),
                ranges: assignments.len(),
                max: MAX_STREAM_RANGES,
            });
        }
    }
    let needed = arrays_needed(&assignments);
    match devices.last() {
        Some(device) if needed > MAX_STREAM_ARRAYS => Err(PassthroughProblem::StreamArrays {
            path: device.path.clone(),
            needed,
            max: MAX_STREAM_ARRAYS,
        }),
        _ => Ok(()),
    }
}

/// One device from the board's tree: found, not Keel's, its registers and interrupts read.
fn resolve(
    fdt: &Fdt,
    entry: &PassthroughTable,
    ram: AddressRange,
    smmu: Option<u32>,
) -> Result<Passthrough, PassthroughProblem> {
    let path = entry.path.as_str();
    let not_found = || PassthroughProblem::NotFound {
        path: path.to_string(),
    };
    let name = path
        .strip_prefix('/')
        .filter(|name| !name.is_empty() && !name.contains('/'))
        .ok_or_else(|| PassthroughProblem::NotTopLevel {
            path: path.to_string(),
        })?;
    let node = fdt
        .root()
        .child(name)
        .map_err(|error| PassthroughProblem::BoardTree {
            error: error.to_string(),
        })?
        .filter(|node| node.name() == name)
        .ok_or_else(not_found)?;
    let bad_tree = |error: crate::fdt::FdtError| PassthroughProblem::Node {
        path: path.to_string(),
        why: error.to_string(),
    };
    if let Some(what) = keels_own(&node).map_err(bad_tree)? {
        return Err(PassthroughProblem::Keels {
            path: path.to_string(),
            what,
        });
    }
    let streams = match dma_master(&node).map_err(bad_tree)? {
        None => Vec::new(),
        Some(what) => {
            let unguarded = || PassthroughProblem::DmaUnguarded {
                path: path.to_string(),
                what,
            };
            let streams = smmu_streams(&node, smmu.ok_or_else(unguarded)?).map_err(bad_tree)?;
            let first = streams.iter().map(|&(first, _)| first).min();
            let covered: Vec<(u32, u32)> = streams
                .iter()
                .filter(|&&(first, _)| first < MAX_STREAMS)
                .map(|&(first, last)| (first, last.min(MAX_STREAMS - 1)))
                .collect();
            match (first, covered.is_empty()) {
                (None, _) => return Err(unguarded()),
                (Some(first), true) => {
                    return Err(PassthroughProblem::StreamsBeyond {
                        path: path.to_string(),
                        first,
                        max: MAX_STREAMS,
                    })
                }
                (Some(_), false) => covered,
            }
        }
    };
    let mut regions = Vec::new();
    let reg = node
        .reg()
        .map_err(bad_tree)?
        .ok_or_else(|| PassthroughProblem::NoRegisters {
            path: path.to_string(),
        })?;
    let first = reg.clone().next().map_or(0, |(address, _)| address);
    // With `ipa` the regions move together: the first to `ipa`, the others after it as on the
    // board.
    let shift = entry.ipa.map_or(0, |ipa| ipa.wrapping_sub(first));
    for (address, size) in reg {
        regions.push(device_region(
            path,
            address,
            size,
            address.wrapping_add(shift),
            ram,
        )?);
    }
    if regions.is_empty() {
        return Err(PassthroughProblem::NoRegisters {
            path: path.to_string(),
        });
    }
    let mut rewritten = vec![reg_property(&regions)];
    // A host bridge's windows (`ranges`) are its registers too: mapped where the board has
    // them; one beyond the guest-physical space (QEMU's 64-bit window) is left out of the
    // VM's tree as well.
    if let Some(Windows { windows, ranges }) = bridge_windows(&node).map_err(bad_tree)? {
        if entry.ipa.is_some() {
            return Err(PassthroughProblem::Node {
                path: path.to_string(),
                why: "'ipa' cannot move a node with 'ranges' (its windows stay where the board \
                      has them)"
                    .into(),
            });
        }
        for (address, size) in windows {
            regions.push(device_region(path, address, size, address, ram)?);
        }
        rewritten.push(("ranges".to_string(), ranges));
    }
    let (interrupts, map) = match interrupt_map(&node, fdt, path)? {
        Some(InterruptMap { interrupts, map }) => (interrupts, Some(map)),
        None => (self::interrupts(&node, fdt, path)?, None),
    };
    rewritten.extend(map.map(|map| ("interrupt-map".to_string(), map)));
    let node = copy_node(&node, fdt, path, regions.first(), &rewritten)?;
    Ok(Passthrough {
        path: path.to_string(),
        regions,
        interrupts,
        node,
        streams,
    })
}

/// One register region of device `path`, at `address` of `size` bytes on the board, seen by
/// the VM at `ipa`: whole pages on the board and where the VM sees it (stage 2 maps pages),
/// not empty, and clear of the board's RAM (`ram`).
fn device_region(
    path: &str,
    address: u64,
    size: u64,
    ipa: u64,
    ram: AddressRange,
) -> Result<MemoryRegion, PassthroughProblem> {
    let range = AddressRange::new(address, size).ok_or_else(|| PassthroughProblem::Node {
        path: path.to_string(),
        why: format!("region at {address:#x} of {size:#x} bytes wraps"),
    })?;
    if !address.is_multiple_of(PAGE_SIZE) || !size.is_multiple_of(PAGE_SIZE) || size == 0 {
        return Err(PassthroughProblem::Unaligned {
            path: path.to_string(),
            range,
        });
    }
    if !ipa.is_multiple_of(PAGE_SIZE) {
        return Err(PassthroughProblem::Unaligned {
            path: path.to_string(),
            range: AddressRange {
                start: ipa,
                end: ipa.saturating_add(size),
            },
        });
    }
    if range.overlaps(&ram) {
        return Err(PassthroughProblem::InRam {
            path: path.to_string(),
            range,
            ram,
        });
    }
    Ok(MemoryRegion {
        ipa: GuestPhysAddr(ipa),
        phys: PhysAddr(address),
        size,
    })
}

/// `reg` for the VM's tree: the device's register regions at the VM's IPAs (the root's
/// `#address-cells` and `#size-cells` are 2, in the VM's tree as in the board's).
fn reg_property(regions: &[MemoryRegion]) -> (String, Vec<u8>) {
    let value = regions
        .iter()
        .flat_map(|region| {
            region
                .ipa
                .0
                .to_be_bytes()
                .into_iter()
                .chain(region.size.to_be_bytes())
        })
        .collect();
    ("reg".to_string(), value)
}

/// What VM `vm` already sees in its guest-physical space, each with its name in messages:
/// its memory, its flash, the emulated GIC, PL011, virtio console and SP805 it has.
fn guest_view(vm: &Vm) -> Vec<(String, AddressRange)> {
    let range = |start: u64, size: u64| AddressRange {
        start,
        end: start.saturating_add(size),
    };
    let mut view = vec![
        ("its memory".to_string(), range(vm.ipa, vm.size)),
        (
            "the emulated GIC distributor".to_string(),
            range(layout::GICD_BASE, layout::GICD_SIZE),
        ),
        (
            "the emulated GIC redistributors".to_string(),
            range(
                layout::GICR_BASE,
                REDISTRIBUTOR_SIZE * vm.vcpu_count() as u64,
            ),
        ),
    ];
    if let Some(flash) = vm.flash {
        view.push(("its flash".to_string(), range(0, flash.size)));
    }
    if vm.console {
        view.push((
            "the emulated PL011".to_string(),
            range(layout::UART_BASE, layout::UART_SIZE),
        ));
    }
    if vm.virtio_console.is_some() {
        view.push((
            "the virtio console".to_string(),
            range(layout::VIRTIO_BASE, PAGE_SIZE),
        ));
    }
    if vm.watchdog_device {
        view.push((
            "the emulated SP805".to_string(),
            range(layout::WATCHDOG_BASE, layout::WATCHDOG_SIZE),
        ));
    }
    view
}

/// `device`'s regions as VM `vm` sees them: inside the IPA space, clear of what it already
/// sees and of its other devices (`devices`).
fn check_guest_view(
    device: &Passthrough,
    vm: &Vm,
    devices: &[Passthrough],
) -> Result<(), PassthroughProblem> {
    let mut view = guest_view(vm);
    for other in devices {
        for region in &other.regions {
            view.push((
                format!("the registers of '{}' at", other.path),
                AddressRange {
                    start: region.ipa.0,
                    end: region.ipa.0 + region.size,
                },
            ));
        }
    }
    for region in &device.regions {
        let range = AddressRange::new(region.ipa.0, region.size)
            .filter(|range| range.end <= 1 << IPA_BITS)
            .ok_or_else(|| PassthroughProblem::BeyondIpaSpace {
                path: device.path.clone(),
                range: AddressRange {
                    start: region.ipa.0,
                    end: region.ipa.0.saturating_add(region.size),
                },
                bits: IPA_BITS,
            })?;
        if let Some((what, other)) = view.iter().find(|(_, other)| other.overlaps(&range)) {
            return Err(PassthroughProblem::IpaOverlaps {
                path: device.path.clone(),
                range,
                what: what.clone(),
                other: *other,
            });
        }
    }
    Ok(())
}

/// `device`'s interrupts: none that VM `vm` has already (its console's, its virtio console's,
/// its message interrupt, another of its devices'), nor one an earlier VM's device has.
fn check_interrupts(
    device: &Passthrough,
    vm: &Vm,
    earlier: &[Vm],
    devices: &[Passthrough],
) -> Result<(), PassthroughProblem> {
    for interrupt in &device.interrupts {
        let intid = interrupt.intid;
        let other = if vm.console && intid == layout::UART_INTID {
            Some("the emulated PL011's interrupt".to_string())
        } else if vm.virtio_console.is_some() && intid == layout::VIRTIO_INTID {
            Some("the virtio console's interrupt".to_string())
        } else if vm
            .messages
            .as_ref()
            .is_some_and(|messages| messages.intid == intid)
        {
            Some("its message interrupt".to_string())
        } else {
            devices
                .iter()
                .chain(earlier.iter().flat_map(|other| &other.passthrough))
                .find(|other| other.interrupts.iter().any(|i| i.intid == intid))
                .map(|other| format!("the interrupt of '{}'", other.path))
        };
        if let Some(other) = other {
            return Err(PassthroughProblem::InterruptTaken {
                path: device.path.clone(),
                intid,
                other,
            });
        }
    }
    Ok(())
}

/// `device`'s streams: none that an earlier device of this VM or of another VM has (a stream
/// translates with one VM's memory map).
fn check_streams(
    device: &Passthrough,
    earlier: &[Vm],
    devices: &[Passthrough],
) -> Result<(), PassthroughProblem> {
    for &(first, last) in &device.streams {
        let owners = devices
            .iter()
            .map(|other| (other, None))
            .chain(earlier.iter().flat_map(|vm| {
                vm.passthrough
                    .iter()
                    .map(move |other| (other, Some(vm.name.as_str())))
            }));
        for (other, vm) in owners {
            if let Some(&(other_first, other_last)) = other
                .streams
                .iter()
                .find(|&&(other_first, other_last)| other_first <= last && first <= other_last)
            {
                return Err(PassthroughProblem::StreamsTaken {
                    path: device.path.clone(),
                    first: first.max(other_first),
                    last: last.min(other_last),
                    other: vm.unwrap_or("this").to_string(),
                });
            }
        }
    }
    Ok(())
}
