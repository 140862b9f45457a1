//! The `[[vm.passthrough]]` rules: each board device a VM is given, found by its path in the
//! board's device tree (directly under the root or under `simple-bus` nodes), its registers
//! translated to physical addresses, its interrupts and node resolved, and refused (naming
//! the VM and the device) when it is disabled, Keel's, another VM's, in RAM, in the way of what
//! the VM already sees, or able to master DMA with no SMMU Keel drives in front of it (unless
//! a VM mapped 1:1 accepts that: `unisolated_dma`).
//!
//! What each device is, as the board's device tree says, is read in `board`.

use super::board::{
    bridge_windows, dma_master, interrupt_map, interrupts, keels_own, smmu_phandle, smmu_streams,
    Board, InterruptMap, Windows,
};
use super::board_nodes::{BoardNodes, Untranslatable};
use super::device_node::{copy_device, CopyOf};
use super::error::AddressRange;
use super::model::{Iommu, Passthrough, Vm, IPA_BITS, PAGE_SIZE, VM_DEVICE_PHANDLE_BASE};
use super::passthrough_problem::PassthroughProblem;
use super::schema::{PassthroughTable, VmTable};
use crate::abi::layout;
use crate::addr::{GuestPhysAddr, MemoryRegion, PhysAddr};
use crate::board::BoardDesc;
use crate::devices::vgic::REDISTRIBUTOR_SIZE;
use crate::fdt::Fdt;
use crate::smmu::{arrays_needed, StreamAssignment};
use crate::system::{MAX_STREAMS, MAX_STREAM_ARRAYS, MAX_STREAM_RANGES};

/// A VM's `[[vm.passthrough]]` tables resolved against the board's tree: `vm` is the VM checked
/// so far (its memory, flash and emulated devices), `earlier` the VMs before it, `ram` the
/// board's RAM, `iommu` the SMMU Keel drives (a DMA master needs one in front of it, or a VM
/// mapped 1:1 that accepts its DMA unisolated).
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
    let desc = board.desc();
    let fdt = board.tree()?;
    let nodes = BoardNodes::new(&fdt).map_err(|error| PassthroughProblem::BoardTree {
        error: error.to_string(),
    })?;
    let smmu = match iommu {
        Some(iommu) => smmu_phandle(&fdt, iommu),
        None => None,
    };
    let board = BoardView {
        fdt: &fdt,
        nodes: &nodes,
        desc,
        ram,
        smmu,
    };
    let mut next_phandle = VM_DEVICE_PHANDLE_BASE;
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
        let device = resolve(&board, entry, &mut next_phandle)?;
        check_unisolated_dma(&device, vm)?;
        check_guest_view(&device, vm, &devices)?;
        check_interrupts(&device, vm, earlier, &devices)?;
        check_streams(&device, earlier, &devices)?;
        devices.push(device);
        check_stream_arrays(earlier, &devices)?;
    }
    Ok(devices)
}

/// The board as [`resolve`] reads it.
struct BoardView<'b, 'a> {
    /// Its device tree.
    fdt: &'b Fdt<'a>,
    /// That tree walked ([`BoardNodes`]).
    nodes: &'b BoardNodes<'a>,
    /// The board Keel is built for.
    desc: &'static BoardDesc,
    /// Its RAM (`[system] ram`).
    ram: AddressRange,
    /// The phandle of the SMMU Keel drives, if it drives one.
    smmu: Option<u32>,
}

/// A device whose DMA the configuration accepts unisolated (`unisolated_dma`): not one the SMMU
/// Keel drives guards, and given to a VM mapped 1:1 (memory, and flash if it has one; not
/// coloured, which scatters its pages), so that the addresses its driver gives it (the VM's
/// IPAs) are the physical addresses it reaches.
fn check_unisolated_dma(device: &Passthrough, vm: &Vm) -> Result<(), PassthroughProblem> {
    if !device.unisolated_dma {
        return Ok(());
    }
    if !device.streams.is_empty() {
        return Err(PassthroughProblem::UnisolatedButGuarded {
            path: device.path.clone(),
        });
    }
    if vm.colours.is_coloured() {
        return Err(PassthroughProblem::UnisolatedColoured {
            path: device.path.clone(),
        });
    }
    let flash = vm.flash.map(|flash| ("flash", 0, flash.phys));
    for (what, ipa, phys) in [("memory", vm.ipa, vm.phys)].into_iter().chain(flash) {
        if ipa != phys {
            return Err(PassthroughProblem::NotOneToOne {
                path: device.path.clone(),
                what,
                ipa,
                phys,
            });
        }
    }
    Ok(())
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

/// The node at `path`: directly under the root, or under one or more `simple-bus` nodes;
/// its index in `nodes`.
fn find_device(
    nodes: &BoardNodes,
    desc: &BoardDesc,
    path: &str,
) -> Result<usize, PassthroughProblem> {
    let not_top_level = || PassthroughProblem::NotTopLevel {
        path: path.to_string(),
    };
    let relative = path
        .strip_prefix('/')
        .filter(|relative| relative.split('/').all(|name| !name.is_empty()))
        .ok_or_else(not_top_level)?;
    let mut at = 0;
    for (depth, name) in relative.split('/').enumerate() {
        if depth > 0 {
            let bus = nodes.entry(at).ok_or_else(not_top_level)?;
            let is_bus = bus.node.is_compatible("simple-bus").map_err(|error| {
                PassthroughProblem::BoardTree {
                    error: error.to_string(),
                }
            })?;
            if !is_bus {
                return Err(not_top_level());
            }
        }
        at = nodes
            .child(at, name)
            .ok_or_else(|| PassthroughProblem::NotFound {
                path: path.to_string(),
                board: desc.name,
            })?;
    }
    Ok(at)
}

/// A bus address of device `path` that does not translate, as its refusal.
fn untranslatable(path: &str, why: Untranslatable) -> PassthroughProblem {
    match why {
        Untranslatable::NoRanges { bus } => PassthroughProblem::BusWithoutRanges {
            path: path.to_string(),
            bus,
        },
        Untranslatable::Outside { bus, address, size } => PassthroughProblem::OutsideBusRanges {
            path: path.to_string(),
            bus,
            range: AddressRange {
                start: address,
                end: address.saturating_add(size),
            },
        },
        Untranslatable::Tree(error) => PassthroughProblem::Node {
            path: path.to_string(),
            why: error.to_string(),
        },
    }
}

/// One device from the board's tree: found, enabled, not Keel's, its DMA guarded (or accepted
/// unisolated), its registers translated to physical addresses and placed, its interrupts
/// read and its node copied for the VM (phandles inside it from `next_phandle` up).
fn resolve(
    board: &BoardView,
    entry: &PassthroughTable,
    next_phandle: &mut u32,
) -> Result<Passthrough, PassthroughProblem> {
    let (fdt, nodes) = (board.fdt, board.nodes);
    let path = entry.path.as_str();
    let index = find_device(nodes, board.desc, path)?;
    let bad_tree = |error: crate::fdt::FdtError| PassthroughProblem::Node {
        path: path.to_string(),
        why: error.to_string(),
    };
    let (Some(found), Some(bus)) = (nodes.entry(index), nodes.parent(index)) else {
        return Err(PassthroughProblem::NotTopLevel {
            path: path.to_string(),
        });
    };
    let node = found.node;
    if let Some(status) = node.property_str("status").map_err(bad_tree)? {
        if status != "okay" && status != "ok" {
            return Err(PassthroughProblem::Disabled {
                path: path.to_string(),
                status: status.to_string(),
            });
        }
    }
    if let Some(what) = keels_own(nodes, index, fdt, board.desc).map_err(bad_tree)? {
        return Err(PassthroughProblem::Keels {
            path: path.to_string(),
            what,
        });
    }
    let streams = dma_streams(&node, nodes, index, entry, board.smmu)?;
    let reg = node
        .reg()
        .map_err(bad_tree)?
        .ok_or_else(|| PassthroughProblem::NoRegisters {
            path: path.to_string(),
        })?;
    let mut physical = Vec::new();
    for (address, size) in reg {
        let base = nodes
            .to_physical(bus, address, size)
            .map_err(|why| untranslatable(path, why))?;
        physical.push((base, size));
    }
    let first = physical.first().map_or(0, |&(address, _)| address);
    // With `ipa` the regions move together: the first to `ipa`, the others after it as on the
    // board.
    let shift = entry.ipa.map_or(0, |ipa| ipa.wrapping_sub(first));
    let mut regions = Vec::new();
    let mut reg_entries = Vec::new();
    for &(address, size) in &physical {
        let ipa = address.wrapping_add(shift);
        regions.push(device_region(board, index, path, address, size, ipa)?);
        reg_entries.push((ipa, size));
    }
    if regions.is_empty() {
        return Err(PassthroughProblem::NoRegisters {
            path: path.to_string(),
        });
    }
    let mut rewritten = vec![reg_property(&reg_entries)];
    // A host bridge's windows (`ranges`) are its registers too: mapped where the board has
    // them; one beyond the guest-physical space (QEMU's 64-bit window) is left out of the
    // VM's tree as well.
    if let Some(Windows { windows, ranges }) =
        bridge_windows(nodes, index).map_err(|why| untranslatable(path, why))?
    {
        if entry.ipa.is_some() {
            return Err(PassthroughProblem::Node {
                path: path.to_string(),
                why: "'ipa' cannot move a node with 'ranges' (its windows stay where the board \
                      has them)"
                    .into(),
            });
        }
        for (address, size) in windows {
            regions.push(device_region(board, index, path, address, size, address)?);
        }
        rewritten.push(("ranges".to_string(), ranges));
    }
    let (interrupts, map) = match interrupt_map(&node, fdt, board.desc, path)? {
        Some(InterruptMap { interrupts, map }) => (interrupts, Some(map)),
        None => (self::interrupts(nodes, index, fdt, board.desc, path)?, None),
    };
    rewritten.extend(map.map(|map| ("interrupt-map".to_string(), map)));
    let copy = CopyOf {
        path,
        unit: regions.first().map_or(0, |region| region.ipa.0),
        rewritten: &rewritten,
        rates: &entry.clocks,
    };
    let node = copy_device(nodes, index, &copy, next_phandle)?;
    Ok(Passthrough {
        path: path.to_string(),
        regions,
        interrupts,
        node,
        streams,
        unisolated_dma: entry.unisolated_dma,
    })
}

/// The SMMU streams of device `index` (`node`) if it masters DMA: those through which the SMMU
/// Keel drives (phandle `smmu`) sees it, within Keel's stream table; none if it masters no
/// DMA, or if no SMMU Keel drives guards it and its table accepts that (`unisolated_dma`).
fn dma_streams(
    node: &crate::fdt::Node,
    nodes: &BoardNodes,
    index: usize,
    entry: &PassthroughTable,
    smmu: Option<u32>,
) -> Result<Vec<(u32, u32)>, PassthroughProblem> {
    let path = entry.path.as_str();
    let bad_tree = |error: crate::fdt::FdtError| PassthroughProblem::Node {
        path: path.to_string(),
        why: error.to_string(),
    };
    let Some(what) = dma_master(nodes, index).map_err(bad_tree)? else {
        return Ok(Vec::new());
    };
    let streams = match smmu {
        Some(smmu) => smmu_streams(node, smmu).map_err(bad_tree)?,
        None => Vec::new(),
    };
    let Some(first) = streams.iter().map(|&(first, _)| first).min() else {
        // Unguarded: refused, unless the configuration accepts it (and the VM is 1:1, which
        // `check_unisolated_dma` sees to).
        if entry.unisolated_dma {
            return Ok(Vec::new());
        }
        return Err(PassthroughProblem::DmaUnguarded {
            path: path.to_string(),
            what,
        });
    };
    let covered: Vec<(u32, u32)> = streams
        .iter()
        .filter(|&&(first, _)| first < MAX_STREAMS)
        .map(|&(first, last)| (first, last.min(MAX_STREAMS - 1)))
        .collect();
    if covered.is_empty() {
        return Err(PassthroughProblem::StreamsBeyond {
            path: path.to_string(),
            first,
            max: MAX_STREAMS,
        });
    }
    Ok(covered)
}

/// One register region of device `path` (node `index`), at physical `address` of `size` bytes,
/// seen by the VM at `ipa`, as stage 2 maps it: whole pages from a page boundary on the board
/// and where the VM sees it, not empty, clear of the board's RAM; a region that ends inside a
/// page is mapped with the rest of that page, if no other node's registers are there.
fn device_region(
    board: &BoardView,
    index: usize,
    path: &str,
    address: u64,
    size: u64,
    ipa: u64,
) -> Result<MemoryRegion, PassthroughProblem> {
    let range = AddressRange::new(address, size).ok_or_else(|| PassthroughProblem::Node {
        path: path.to_string(),
        why: format!("region at {address:#x} of {size:#x} bytes wraps"),
    })?;
    if !address.is_multiple_of(PAGE_SIZE) || size == 0 {
        return Err(PassthroughProblem::Unaligned {
            path: path.to_string(),
            range,
        });
    }
    let mapped = size
        .checked_next_multiple_of(PAGE_SIZE)
        .and_then(|mapped| AddressRange::new(address, mapped))
        .ok_or_else(|| PassthroughProblem::Node {
            path: path.to_string(),
            why: format!("region at {address:#x} of {size:#x} bytes wraps"),
        })?;
    if mapped.end != range.end {
        let rest = AddressRange {
            start: range.end,
            end: mapped.end,
        };
        let sharing = board
            .nodes
            .physical_regions(index)
            .into_iter()
            .find(|&(base, length, _)| {
                AddressRange::new(base, length.max(1)).is_some_and(|other| other.overlaps(&rest))
            });
        if let Some((_, _, other)) = sharing {
            return Err(PassthroughProblem::PageShared {
                path: path.to_string(),
                range,
                page: mapped,
                other: other.to_string(),
            });
        }
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
    if mapped.overlaps(&board.ram) {
        return Err(PassthroughProblem::InRam {
            path: path.to_string(),
            range,
            ram: board.ram,
        });
    }
    Ok(MemoryRegion {
        ipa: GuestPhysAddr(ipa),
        phys: PhysAddr(address),
        size: mapped.size(),
    })
}

/// `reg` for the VM's tree: the device's register regions (IPA and size as the board gives it)
/// (the root's `#address-cells` and `#size-cells` are 2 in the VM's tree).
fn reg_property(entries: &[(u64, u64)]) -> (String, Vec<u8>) {
    let value = entries
        .iter()
        .flat_map(|&(ipa, size)| ipa.to_be_bytes().into_iter().chain(size.to_be_bytes()))
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
