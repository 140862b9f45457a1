//! The board's device tree as the configuration compiler reads it: the SMMU Keel drives
//! (`[system] iommu`) and, for each device a VM is given, what Keel needs of its node: whether
//! it is Keel's own or a DMA master (and its SMMU streams), its interrupts (`interrupts`, or a
//! host bridge's `interrupt-map`), a bridge's windows (`ranges`) and the node the VM's device
//! tree gets. The rules that judge them are in `passthrough`.
//!
//! The board's device tree is the one the board hands Keel (QEMU `virt`'s, dumped by xtask
//! with the machine options Keel runs under): the compiler reads it only when a VM is given
//! a device or an SMMU is named, and the hypervisor never parses it for this.

use super::model::{DeviceInterrupt, DeviceNode, Iommu, IPA_BITS, VM_GIC_PHANDLE};
use super::passthrough_problem::PassthroughProblem;
use crate::abi::layout;
use crate::addr::MemoryRegion;
use crate::board::BoardDesc;
use crate::devices::vgic::NR_IRQS;
use crate::fdt::{Fdt, Node};

/// The device tree of board `board` as the compiler is given it, for a machine with an SMMUv3
/// in front of its PCI host bridge or without (the argument; only QEMU `virt` has one):
/// `Err` says why there is none.
pub type BoardTree<'a> = &'a dyn Fn(&'static BoardDesc, bool) -> Result<Vec<u8>, String>;

/// What [`no_board_tree`] answers: the compiler then skips the board's checks, and any
/// `[[vm.passthrough]]` is refused.
const NO_BOARD_TREE: &str = "no board device tree was given to the configuration compiler";

/// A board without a device tree (the host tests of rules that do not depend on the board).
pub fn no_board_tree(_board: &'static BoardDesc, _smmu: bool) -> Result<Vec<u8>, String> {
    Err(NO_BOARD_TREE.to_string())
}

/// The board as the rules read it: its device tree, read at most once, for the machine the
/// configuration runs on (with an SMMU when `[system] iommu` names one).
pub(crate) struct Board<'a> {
    desc: &'static BoardDesc,
    source: BoardTree<'a>,
    smmu: bool,
    blob: Option<Vec<u8>>,
}

impl<'a> Board<'a> {
    /// Board `desc` as `source` gives it, with an SMMU or without.
    pub(super) fn new(desc: &'static BoardDesc, source: BoardTree<'a>, smmu: bool) -> Self {
        Self {
            desc,
            source,
            smmu,
            blob: None,
        }
    }

    /// The board's device tree.
    pub(super) fn tree(&mut self) -> Result<Fdt<'_>, PassthroughProblem> {
        if self.blob.is_none() {
            let blob = (self.source)(self.desc, self.smmu)
                .map_err(|error| PassthroughProblem::BoardTree { error })?;
            self.blob = Some(blob);
        }
        Fdt::new(self.blob.as_deref().unwrap_or_default()).map_err(|error| {
            PassthroughProblem::BoardTree {
                error: error.to_string(),
            }
        })
    }
}

/// The IOMMUs `[system] iommu` may name.
const KNOWN_IOMMUS: &[&str] = &["smmuv3"];

/// `[system] iommu`: the board's SMMUv3 (its registers and its event queue and global error
/// interrupts), if the configuration names one.
pub(super) fn check_iommu(
    iommu: Option<&str>,
    board: &mut Board,
) -> Result<Option<Iommu>, PassthroughProblem> {
    let Some(name) = iommu else {
        return Ok(None);
    };
    if !KNOWN_IOMMUS.contains(&name) {
        return Err(PassthroughProblem::UnknownIommu {
            value: name.to_string(),
        });
    }
    let fdt = board.tree()?;
    let bad = |why: &str| PassthroughProblem::Smmu {
        why: why.to_string(),
    };
    let node = fdt
        .find_compatible("arm,smmu-v3")
        .map_err(|error| bad(&error.to_string()))?
        .ok_or_else(|| bad("the board's device tree has no arm,smmu-v3 node"))?;
    let (phys, size) = node
        .reg()
        .map_err(|error| bad(&error.to_string()))?
        .and_then(|mut reg| reg.next())
        .ok_or_else(|| bad("its node has no registers"))?;
    let names: Vec<&str> = node
        .strings("interrupt-names")
        .map_err(|error| bad(&error.to_string()))?
        .map(Iterator::collect)
        .unwrap_or_default();
    let cells: Vec<u32> = node
        .interrupts()
        .map_err(|error| bad(&error.to_string()))?
        .map(Iterator::collect)
        .unwrap_or_default();
    let intid = |name: &str| {
        let position = names.iter().position(|n| *n == name)?;
        let specifier = cells.chunks_exact(GIC_INTERRUPT_CELLS).nth(position)?;
        (specifier[0] == GIC_SPI).then_some(specifier[1] + 32)
    };
    let (Some(event_intid), Some(gerror_intid)) = (intid("eventq"), intid("gerror")) else {
        return Err(bad("its node names no eventq and gerror SPIs"));
    };
    Ok(Some(Iommu {
        path: format!("/{}", node.name()),
        phys,
        size,
        event_intid,
        gerror_intid,
    }))
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

/// What Keel uses `node` as, if it is Keel's: the interrupt controller, the SMMU, the timer,
/// PSCI, the UART of its console (the PL011 at [`layout::UART_BASE`]), memory or CPUs.
pub(super) fn keels_own(node: &Node) -> Result<Option<&'static str>, crate::fdt::FdtError> {
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
pub(super) fn dma_master(node: &Node) -> Result<Option<&'static str>, crate::fdt::FdtError> {
    if node.property_str("device_type")? == Some("pci") {
        return Ok(Some("a PCI host bridge"));
    }
    if node.property("iommus")?.is_some() || node.property("iommu-map")?.is_some() {
        return Ok(Some("the board puts it behind an IOMMU"));
    }
    Ok(None)
}

/// The phandle of the board's SMMU, `iommu` (the node Keel drives).
pub(super) fn smmu_phandle(fdt: &Fdt, iommu: &Iommu) -> Option<u32> {
    let node = fdt.find_node(&iommu.path).ok()??;
    node.property_u32("phandle").ok()?
}

/// The streams through which the SMMU with phandle `smmu` sees `node`'s DMA, each `(first,
/// last)`: from `iommu-map` (a PCI host bridge: `<rid-base iommu sid-base length>` entries,
/// requester ID = stream ID as on QEMU `virt`) or `iommus` (`<iommu sid>`, one-cell
/// specifiers). Entries for another IOMMU are not Keel's to program and are skipped.
pub(super) fn smmu_streams(
    node: &Node,
    smmu: u32,
) -> Result<Vec<(u32, u32)>, crate::fdt::FdtError> {
    let mut streams = Vec::new();
    if let Some(cells) = node.property_cells("iommu-map")? {
        let cells: Vec<u32> = cells.collect();
        for entry in cells.chunks_exact(4) {
            let &[_, phandle, first, length] = entry else {
                continue;
            };
            if phandle == smmu && length > 0 {
                streams.push((first, first.saturating_add(length - 1)));
            }
        }
    }
    if let Some(cells) = node.property_cells("iommus")? {
        let cells: Vec<u32> = cells.collect();
        for entry in cells.chunks_exact(2) {
            if let &[phandle, stream] = entry {
                if phandle == smmu {
                    streams.push((stream, stream));
                }
            }
        }
    }
    Ok(streams)
}

/// A host bridge's windows from its `ranges` (§2.3.8: child address, parent address, size;
/// the child's cells per the node's `#address-cells`, the parent's the root's 2, sizes per
/// the node's `#size-cells`): the parent ranges inside the guest-physical space, and the
/// `ranges` value the VM's tree gets (the entries of those alone). `None` without `ranges`.
pub(super) fn bridge_windows(node: &Node) -> Result<Option<Windows>, crate::fdt::FdtError> {
    let Some(cells) = node.property_cells("ranges")? else {
        return Ok(None);
    };
    let child_cells = node.property_u32("#address-cells")?.unwrap_or(2) as usize;
    let size_cells = node.property_u32("#size-cells")?.unwrap_or(1) as usize;
    let cells: Vec<u32> = cells.collect();
    let entry_cells = child_cells + 2 + size_cells;
    let number = |cells: &[u32]| cells.iter().fold(0u64, |n, &c| n << 32 | u64::from(c));
    let mut windows = Vec::new();
    let mut kept = Vec::new();
    for entry in cells.chunks_exact(entry_cells.max(1)) {
        let parent = number(&entry[child_cells..child_cells + 2]);
        let size = number(&entry[child_cells + 2..]);
        if parent.saturating_add(size) <= 1 << IPA_BITS {
            windows.push((parent, size));
            kept.extend(entry.iter().flat_map(|cell| cell.to_be_bytes()));
        }
    }
    Ok(Some(Windows {
        windows,
        ranges: kept,
    }))
}

/// A host bridge's windows ([`bridge_windows`]).
pub(super) struct Windows {
    /// Each window inside the guest-physical space: base and size, physical (= guest-physical).
    pub windows: Vec<(u64, u64)>,
    /// The `ranges` value of the VM's copy of the node: those windows' entries.
    pub ranges: Vec<u8>,
}

/// A host bridge's legacy interrupts ([`interrupt_map`]).
pub(super) struct InterruptMap {
    /// The SPIs its map names, each once.
    pub interrupts: Vec<DeviceInterrupt>,
    /// The `interrupt-map` value of the VM's copy of the node.
    pub map: Vec<u8>,
}

/// A host bridge's legacy interrupts from its `interrupt-map` (the PCI binding: child unit
/// address and interrupt, then the parent's phandle, unit address and specifier): the GIC's
/// SPIs they name (each once), and the map for the VM's tree, every parent phandle the VM's
/// GIC's ([`VM_GIC_PHANDLE`]). `None` without `interrupt-map`.
pub(super) fn interrupt_map(
    node: &Node,
    fdt: &Fdt,
    path: &str,
) -> Result<Option<InterruptMap>, PassthroughProblem> {
    let refuse = |why: String| PassthroughProblem::Interrupt {
        path: path.to_string(),
        why,
    };
    let bad_tree = |error: crate::fdt::FdtError| refuse(error.to_string());
    let Some(cells) = node.property_cells("interrupt-map").map_err(bad_tree)? else {
        return Ok(None);
    };
    let gic = gic_phandle(fdt).map_err(bad_tree)?;
    let gic_node = fdt.find_compatible("arm,gic-v3").map_err(bad_tree)?;
    let parent_address = match gic_node {
        Some(gic) => gic
            .property_u32("#address-cells")
            .map_err(bad_tree)?
            .unwrap_or(0),
        None => 0,
    } as usize;
    let child_cells = node
        .property_u32("#address-cells")
        .map_err(bad_tree)?
        .unwrap_or(2) as usize
        + node
            .property_u32("#interrupt-cells")
            .map_err(bad_tree)?
            .unwrap_or(1) as usize;
    let cells: Vec<u32> = cells.collect();
    let entry_cells = child_cells + 1 + parent_address + GIC_INTERRUPT_CELLS;
    if !cells.len().is_multiple_of(entry_cells) {
        return Err(refuse(format!(
            "'interrupt-map' has {} cells, not a multiple of {entry_cells}",
            cells.len()
        )));
    }
    let mut interrupts: Vec<DeviceInterrupt> = Vec::new();
    let mut map = Vec::with_capacity(cells.len() * 4);
    for entry in cells.chunks_exact(entry_cells) {
        if Some(entry[child_cells]) != gic {
            return Err(refuse(
                "its interrupt-map names another interrupt controller than the GIC".into(),
            ));
        }
        let specifier = &entry[entry_cells - GIC_INTERRUPT_CELLS..];
        let interrupt = spi(specifier[0], specifier[1], specifier[2]).map_err(refuse)?;
        if !interrupts
            .iter()
            .any(|known| known.intid == interrupt.intid)
        {
            interrupts.push(interrupt);
        }
        for (position, &cell) in entry.iter().enumerate() {
            let cell = if position == child_cells {
                VM_GIC_PHANDLE
            } else {
                cell
            };
            map.extend(cell.to_be_bytes());
        }
    }
    Ok(Some(InterruptMap { interrupts, map }))
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
pub(super) fn interrupts(
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
        if let &[kind, number, flags] = specifier {
            found.push(spi(kind, number, flags).map_err(refuse)?);
        }
    }
    Ok(found)
}

/// The interrupt a GIC specifier `<kind number flags>` names, if Keel can forward it: an SPI
/// below the virtual GIC's [`NR_IRQS`] (the VM sees the board's INTID), level-high or
/// edge-rising; otherwise why not.
fn spi(kind: u32, number: u32, flags: u32) -> Result<DeviceInterrupt, String> {
    if kind != GIC_SPI {
        return Err(format!(
            "PPI {number} (a private interrupt of each CPU; only SPIs are forwarded)"
        ));
    }
    let intid = number.saturating_add(32);
    if intid as usize >= NR_IRQS {
        return Err(format!(
            "INTID {intid} is beyond the {NR_IRQS} interrupts of Keel's virtual GIC"
        ));
    }
    let level = match flags & IRQ_TYPE_MASK {
        IRQ_TYPE_LEVEL_HIGH => true,
        IRQ_TYPE_EDGE_RISING => false,
        other => {
            return Err(format!(
                "INTID {intid} has trigger type {other} (the GIC takes level-high (4) or \
                 edge-rising (1))"
            ))
        }
    };
    Ok(DeviceInterrupt { intid, level })
}

/// The VM's copy of `node`: the board's properties but those in [`DROPPED_PROPERTIES`], those
/// in `rewritten` replaced by their new values (`reg` at the VM's IPAs, a bridge's `ranges`
/// and `interrupt-map`), named after its first region (`first`), and its fixed clock's
/// frequency if it names one.
pub(super) fn copy_node(
    node: &Node,
    fdt: &Fdt,
    path: &str,
    first: Option<&MemoryRegion>,
    rewritten: &[(String, Vec<u8>)],
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
        let value = match rewritten.iter().find(|(name, _)| name == property.name) {
            Some((_, value)) => value.clone(),
            None => property.value.to_vec(),
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
    let unit = first.map_or(0, |region| region.ipa.0);
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

/// The board's own facts against the system: its device tree has the interrupt controller and
/// the UART Keel is built to drive on it, RAM that holds `[system] ram`, and at least `pcpus`
/// CPUs. Skipped without a device tree ([`no_board_tree`]: host tests of other rules).
pub(super) fn check_board(board: &mut Board, ram: (u64, u64), pcpus: u32) -> Result<(), String> {
    let desc = board.desc;
    let fdt = match board.tree() {
        Ok(fdt) => fdt,
        Err(PassthroughProblem::BoardTree { error }) if error == NO_BOARD_TREE => return Ok(()),
        Err(problem) => return Err(problem.to_string()),
    };
    let found = |compatibles: &[&str]| -> Result<bool, String> {
        for compatible in compatibles {
            if fdt
                .find_compatible(compatible)
                .map_err(|e| e.to_string())?
                .is_some()
            {
                return Ok(true);
            }
        }
        Ok(false)
    };
    if !found(desc.gic.compatibles())? {
        return Err(format!(
            "its device tree has no {} (compatible {}), the interrupt controller Keel drives on it",
            desc.gic.name(),
            desc.gic.compatibles().join(" or ")
        ));
    }
    if !found(desc.uart.compatibles())? {
        return Err(format!(
            "its device tree has no {} (compatible {}) for Keel's console",
            desc.uart.name(),
            desc.uart.compatibles().join(" or ")
        ));
    }
    let mut banks = Vec::new();
    for node in fdt.root().children() {
        let node = node.map_err(|e| e.to_string())?;
        if node
            .property_str("device_type")
            .map_err(|e| e.to_string())?
            != Some("memory")
        {
            continue;
        }
        if let Some(reg) = node.reg().map_err(|e| e.to_string())? {
            banks.extend(reg);
        }
    }
    let (base, size) = ram;
    let end = base.saturating_add(size);
    // A bank of size 0 is one the board's firmware fills in at boot (the Raspberry Pi's): the
    // RAM cannot be checked here, and Keel checks it at boot against what the firmware wrote.
    let filled_at_boot = !banks.is_empty() && banks.iter().all(|&(_, length)| length == 0);
    if !filled_at_boot
        && !banks
            .iter()
            .any(|&(bank, length)| bank <= base && end <= bank.saturating_add(length))
    {
        let shown: Vec<String> = banks
            .iter()
            .map(|&(bank, length)| format!("{bank:#x}..{:#x}", bank.saturating_add(length)))
            .collect();
        return Err(format!(
            "ram {base:#x}..{end:#x} is not inside one of its memory banks ({})",
            if shown.is_empty() {
                "none".to_string()
            } else {
                shown.join(", ")
            }
        ));
    }
    let mut cpus = 0;
    if let Some(node) = fdt.find_node("/cpus").map_err(|e| e.to_string())? {
        for child in node.children() {
            let child = child.map_err(|e| e.to_string())?;
            if child
                .property_str("device_type")
                .map_err(|e| e.to_string())?
                == Some("cpu")
            {
                cpus += 1;
            }
        }
    }
    if pcpus > cpus {
        return Err(format!("pcpus = {pcpus}, but it has {cpus} CPUs"));
    }
    Ok(())
}
