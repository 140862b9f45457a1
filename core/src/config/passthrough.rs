//! The `[[vm.passthrough]]` rules: each board device a VM is given, found by its path in the
//! board's device tree, its registers, interrupts and node resolved, and refused (naming the
//! VM and the device) when it is Keel's, another VM's, in RAM, in the way of what the VM
//! already sees, or able to master DMA with no SMMU in front of it.
//!
//! The board's device tree is the one the board hands Keel (QEMU `virt`'s, dumped by xtask
//! with the machine options Keel runs under): the compiler reads it only when a VM is given
//! a device, and the hypervisor never parses it for this.

use std::fmt;

use super::error::AddressRange;
use super::model::{DeviceInterrupt, DeviceNode, Passthrough, Vm, IPA_BITS, PAGE_SIZE};
use super::schema::{PassthroughTable, VmTable};
use crate::abi::layout;
use crate::addr::{GuestPhysAddr, MemoryRegion, PhysAddr};
use crate::devices::vgic::{NR_IRQS, REDISTRIBUTOR_SIZE};
use crate::fdt::{Fdt, Node};

/// The board's device tree as the compiler is given it: read only when some VM is given a
/// device (`Err`: why there is none).
pub type BoardTree<'a> = &'a dyn Fn() -> Result<Vec<u8>, String>;

/// A board without a device tree: any `[[vm.passthrough]]` is refused.
pub fn no_board_tree() -> Result<Vec<u8>, String> {
    Err("no board device tree was given to the configuration compiler".to_string())
}

/// What a `[[vm.passthrough]]` table breaks; shown after `vm '<name>': passthrough: `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassthroughProblem {
    /// `the board's device tree cannot be read: <error>`.
    BoardTree {
        /// Why.
        error: String,
    },
    /// `'<path>' is not a node directly under the root ('/name@address')`.
    NotTopLevel {
        /// The path given.
        path: String,
    },
    /// `'<path>' is not in the board's device tree`.
    NotFound {
        /// The path given.
        path: String,
    },
    /// `'<path>' is listed twice`.
    ListedTwice {
        /// The path given.
        path: String,
    },
    /// `'<path>' is Keel's own (<what>)`.
    Keels {
        /// The path given.
        path: String,
        /// What Keel uses it as.
        what: &'static str,
    },
    /// `'<path>' has no registers (reg) to map`.
    NoRegisters {
        /// The path given.
        path: String,
    },
    /// `'<path>' region <range> is not 4 KiB aligned (stage 2 maps whole pages)`: on the board,
    /// or where `ipa` puts it.
    Unaligned {
        /// The path given.
        path: String,
        /// The region, physical.
        range: AddressRange,
    },
    /// `'<path>' region <range> lies in RAM <ram>`.
    InRam {
        /// The path given.
        path: String,
        /// The region, physical.
        range: AddressRange,
        /// The board's RAM.
        ram: AddressRange,
    },
    /// `'<path>' at <range> lies beyond the <bits>-bit guest-physical space`.
    BeyondIpaSpace {
        /// The path given.
        path: String,
        /// The region, guest-physical.
        range: AddressRange,
        /// Width of the IPA space.
        bits: u32,
    },
    /// `'<path>' at <range> overlaps <what> <other>`.
    IpaOverlaps {
        /// The path given.
        path: String,
        /// The region, guest-physical.
        range: AddressRange,
        /// What the VM already sees there (`its memory`, `the emulated PL011`, ...).
        what: String,
        /// That range, guest-physical.
        other: AddressRange,
    },
    /// `'<path>' is already given to vm '<other>'`.
    AssignedTwice {
        /// The path given.
        path: String,
        /// The VM it was given to first.
        other: String,
    },
    /// `'<path>' has an interrupt Keel cannot forward: <why>`.
    Interrupt {
        /// The path given.
        path: String,
        /// Why (a PPI, beyond the virtual GIC, a trigger the GIC lacks, another controller).
        why: String,
    },
    /// `'<path>' interrupt <intid> is already <other>`.
    InterruptTaken {
        /// The path given.
        path: String,
        /// The INTID.
        intid: u32,
        /// Who else has it.
        other: String,
    },
    /// `'<path>' can master DMA (<what>) and no SMMU guards it`.
    DmaUnguarded {
        /// The path given.
        path: String,
        /// Why it is taken for a DMA master.
        what: &'static str,
    },
    /// `'<path>': <why>` (a property the VM's copy of the node cannot keep).
    Node {
        /// The path given.
        path: String,
        /// Why.
        why: String,
    },
}

impl fmt::Display for PassthroughProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BoardTree { error } => {
                write!(f, "the board's device tree cannot be read: {error}")
            }
            Self::NotTopLevel { path } => write!(
                f,
                "'{path}' is not a node directly under the root ('/name@address')"
            ),
            Self::NotFound { path } => write!(f, "'{path}' is not in the board's device tree"),
            Self::ListedTwice { path } => write!(f, "'{path}' is listed twice"),
            Self::Keels { path, what } => write!(f, "'{path}' is Keel's own ({what})"),
            Self::NoRegisters { path } => write!(f, "'{path}' has no registers (reg) to map"),
            Self::Unaligned { path, range } => write!(
                f,
                "'{path}' region {range} is not 4 KiB aligned (stage 2 maps whole pages)"
            ),
            Self::InRam { path, range, ram } => {
                write!(f, "'{path}' region {range} lies in RAM {ram}")
            }
            Self::BeyondIpaSpace { path, range, bits } => write!(
                f,
                "'{path}' at {range} lies beyond the {bits}-bit guest-physical space"
            ),
            Self::IpaOverlaps {
                path,
                range,
                what,
                other,
            } => write!(f, "'{path}' at {range} overlaps {what} {other}"),
            Self::AssignedTwice { path, other } => {
                write!(f, "'{path}' is already given to vm '{other}'")
            }
            Self::Interrupt { path, why } => {
                write!(f, "'{path}' has an interrupt Keel cannot forward: {why}")
            }
            Self::InterruptTaken { path, intid, other } => {
                write!(f, "'{path}' interrupt {intid} is already {other}")
            }
            Self::DmaUnguarded { path, what } => {
                write!(f, "'{path}' can master DMA ({what}) and no SMMU guards it")
            }
            Self::Node { path, why } => write!(f, "'{path}': {why}"),
        }
    }
}

/// GIC interrupt specifier (`arm,gic-v3` binding): first cell 0 for an SPI, 1 for a PPI.
const GIC_SPI: u32 = 0;
/// Third cell: edge-triggered, rising.
const IRQ_TYPE_EDGE_RISING: u32 = 1;
/// Third cell: level-sensitive, high.
const IRQ_TYPE_LEVEL_HIGH: u32 = 4;
/// The trigger bits of the third cell (the rest is GICv2's CPU mask).
const IRQ_TYPE_MASK: u32 = 0xf;
/// Cells of one GICv3 interrupt specifier.
const GIC_INTERRUPT_CELLS: usize = 3;

/// Properties of the board's node the VM's copy leaves out: they refer to the board (its
/// phandles, its interrupt controller, its IOMMU and MSI controller), which the VM's tree
/// describes its own way or not at all.
const DROPPED_PROPERTIES: &[&str] = &[
    "phandle",
    "linux,phandle",
    "interrupt-parent",
    "iommus",
    "iommu-map",
    "iommu-map-mask",
    "msi-map",
    "msi-parent",
    "clocks",
];

/// The board's nodes Keel keeps for itself, by `compatible`, with what Keel uses them as.
const KEELS_OWN: &[(&str, &str)] = &[
    ("arm,gic-v3", "the interrupt controller"),
    ("arm,gic-v3-its", "the interrupt controller's ITS"),
    ("arm,smmu-v3", "the SMMU"),
    ("arm,armv8-timer", "the architected timer"),
    ("arm,psci-1.0", "PSCI"),
    ("arm,psci-0.2", "PSCI"),
];

/// A VM's `[[vm.passthrough]]` tables resolved against the board's tree (`board`, read once
/// and kept in `tree` for the next VMs): `vm` is the VM checked so far (its memory, flash and
/// emulated devices), `earlier` the VMs before it, `ram` the board's RAM.
pub(super) fn check_passthrough(
    table: &VmTable,
    vm: &Vm,
    earlier: &[Vm],
    ram: AddressRange,
    tree: &mut Option<Vec<u8>>,
    board: BoardTree,
) -> Result<Vec<Passthrough>, PassthroughProblem> {
    if table.passthrough.is_empty() {
        return Ok(Vec::new());
    }
    if tree.is_none() {
        let blob = board().map_err(|error| PassthroughProblem::BoardTree { error })?;
        *tree = Some(blob);
    }
    let blob = tree.as_deref().unwrap_or_default();
    let fdt = Fdt::new(blob).map_err(|error| PassthroughProblem::BoardTree {
        error: error.to_string(),
    })?;
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
        let device = resolve(&fdt, entry, ram)?;
        check_guest_view(&device, vm, &devices)?;
        check_interrupts(&device, vm, earlier, &devices)?;
        devices.push(device);
    }
    Ok(devices)
}

/// One device from the board's tree: found, not Keel's, its registers and interrupts read.
fn resolve(
    fdt: &Fdt,
    entry: &PassthroughTable,
    ram: AddressRange,
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
    if let Some(what) = dma_master(&node).map_err(bad_tree)? {
        return Err(PassthroughProblem::DmaUnguarded {
            path: path.to_string(),
            what,
        });
    }
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
        // Where the VM sees it (moved by `ipa`) is mapped by whole pages too.
        let ipa = address.wrapping_add(shift);
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
        regions.push(MemoryRegion {
            ipa: GuestPhysAddr(ipa),
            phys: PhysAddr(address),
            size,
        });
    }
    if regions.is_empty() {
        return Err(PassthroughProblem::NoRegisters {
            path: path.to_string(),
        });
    }
    let interrupts = interrupts(&node, fdt, path)?;
    let node = copy_node(&node, fdt, path, &regions)?;
    Ok(Passthrough {
        path: path.to_string(),
        regions,
        interrupts,
        node,
    })
}

/// What Keel uses `node` as, if it is Keel's: the interrupt controller, the SMMU, the timer,
/// PSCI, the UART of its console (the PL011 at [`layout::UART_BASE`]), memory or CPUs.
fn keels_own(node: &Node) -> Result<Option<&'static str>, crate::fdt::FdtError> {
    for &(compatible, what) in KEELS_OWN {
        if node.is_compatible(compatible)? {
            return Ok(Some(what));
        }
    }
    if node.is_compatible("arm,pl011")?
        && node
            .reg()?
            .and_then(|mut reg| reg.next())
            .is_some_and(|(address, _)| address == layout::UART_BASE)
    {
        return Ok(Some("its console's UART"));
    }
    match node.property_str("device_type")? {
        Some("memory") => Ok(Some("RAM")),
        Some("cpu") => Ok(Some("a CPU")),
        _ => Ok(None),
    }
}

/// Why `node` is taken for a DMA master, if it is one: a PCI host bridge (its functions
/// master DMA), or a node the board puts behind an IOMMU (`iommus`, `iommu-map`).
fn dma_master(node: &Node) -> Result<Option<&'static str>, crate::fdt::FdtError> {
    if node.property_str("device_type")? == Some("pci") {
        return Ok(Some("a PCI host bridge"));
    }
    if node.property("iommus")?.is_some() || node.property("iommu-map")?.is_some() {
        return Ok(Some("the board puts it behind an IOMMU"));
    }
    Ok(None)
}

/// The phandle of the board's interrupt controller that `node`'s interrupts go to: its own
/// `interrupt-parent`, else the nearest ancestor's (here: the root's).
fn interrupt_parent(node: &Node, fdt: &Fdt) -> Result<Option<u32>, crate::fdt::FdtError> {
    match node.property_u32("interrupt-parent")? {
        Some(phandle) => Ok(Some(phandle)),
        None => fdt.root().property_u32("interrupt-parent"),
    }
}

/// The phandle of the board's GIC.
fn gic_phandle(fdt: &Fdt) -> Result<Option<u32>, crate::fdt::FdtError> {
    match fdt.find_compatible("arm,gic-v3")? {
        Some(gic) => gic.property_u32("phandle"),
        None => Ok(None),
    }
}

/// `node`'s interrupts: SPIs of the GIC, level-high or edge-rising, each below the virtual
/// GIC's [`NR_IRQS`] (the VM sees the board's INTID).
fn interrupts(
    node: &Node,
    fdt: &Fdt,
    path: &str,
) -> Result<Vec<DeviceInterrupt>, PassthroughProblem> {
    let refuse = |why: String| PassthroughProblem::Interrupt {
        path: path.to_string(),
        why,
    };
    let bad_tree = |error: crate::fdt::FdtError| refuse(error.to_string());
    let Some(cells) = node.interrupts().map_err(bad_tree)? else {
        return Ok(Vec::new());
    };
    let parent = interrupt_parent(node, fdt).map_err(bad_tree)?;
    if parent.is_none() || parent != gic_phandle(fdt).map_err(bad_tree)? {
        return Err(refuse("its interrupt parent is not the GIC".to_string()));
    }
    let cells: Vec<u32> = cells.collect();
    if !cells.len().is_multiple_of(GIC_INTERRUPT_CELLS) {
        return Err(refuse(format!(
            "'interrupts' has {} cells, not a multiple of 3",
            cells.len()
        )));
    }
    let mut found = Vec::new();
    for specifier in cells.chunks_exact(GIC_INTERRUPT_CELLS) {
        let &[kind, number, flags] = specifier else {
            continue;
        };
        if kind != GIC_SPI {
            return Err(refuse(format!(
                "PPI {number} (a private interrupt of each CPU; only SPIs are forwarded)"
            )));
        }
        let intid = number.saturating_add(32);
        if intid as usize >= NR_IRQS {
            return Err(refuse(format!(
                "INTID {intid} is beyond the {NR_IRQS} interrupts of Keel's virtual GIC"
            )));
        }
        let level = match flags & IRQ_TYPE_MASK {
            IRQ_TYPE_LEVEL_HIGH => true,
            IRQ_TYPE_EDGE_RISING => false,
            other => {
                return Err(refuse(format!(
                    "INTID {intid} has trigger type {other} (the GIC takes level-high (4) or \
                     edge-rising (1))"
                )))
            }
        };
        found.push(DeviceInterrupt { intid, level });
    }
    Ok(found)
}

/// The VM's copy of `node`: the board's properties but those in [`DROPPED_PROPERTIES`], `reg`
/// at the VM's IPAs (`regions`), and its fixed clock's frequency if it names one.
fn copy_node(
    node: &Node,
    fdt: &Fdt,
    path: &str,
    regions: &[MemoryRegion],
) -> Result<DeviceNode, PassthroughProblem> {
    let refuse = |why: String| PassthroughProblem::Node {
        path: path.to_string(),
        why,
    };
    let mut properties = Vec::new();
    for property in node.properties() {
        let property = property.map_err(|error| refuse(error.to_string()))?;
        if DROPPED_PROPERTIES.contains(&property.name) {
            continue;
        }
        let value = if property.name == "reg" {
            // The root's #address-cells and #size-cells are 2, as the VM's tree has them.
            regions
                .iter()
                .flat_map(|region| {
                    region
                        .ipa
                        .0
                        .to_be_bytes()
                        .into_iter()
                        .chain(region.size.to_be_bytes())
                })
                .collect()
        } else {
            property.value.to_vec()
        };
        properties.push((property.name.to_string(), value));
    }
    let clock_hz = match node
        .property_cells("clocks")
        .map_err(|error| refuse(error.to_string()))?
    {
        None => None,
        Some(mut clocks) => {
            let (Some(phandle), None) = (clocks.next(), clocks.next()) else {
                return Err(refuse(
                    "'clocks' names more than one clock (the VM gets one fixed clock)".into(),
                ));
            };
            Some(fixed_clock_hz(fdt, phandle).ok_or_else(|| {
                refuse(format!(
                    "'clocks' names phandle {phandle}, not a fixed clock the VM's tree can copy"
                ))
            })?)
        }
    };
    let unit = regions.first().map_or(0, |region| region.ipa.0);
    Ok(DeviceNode {
        name: format!("{}@{unit:x}", node.base_name()),
        properties,
        clock_hz,
    })
}

/// The frequency of the board's `fixed-clock` node with `phandle`, if it is one.
fn fixed_clock_hz(fdt: &Fdt, phandle: u32) -> Option<u32> {
    fdt.compatible_nodes("fixed-clock")
        .filter_map(Result::ok)
        .find(|clock| clock.property_u32("phandle").ok().flatten() == Some(phandle))
        .and_then(|clock| clock.property_u32("clock-frequency").ok().flatten())
}

/// What VM `vm` already sees in its guest-physical space, each with its name in messages:
/// its memory, its flash, the emulated GIC, PL011 and virtio console it has.
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
