//! The board's device tree as the configuration compiler reads it: the SMMU Keel drives
//! (`[system] iommu`) and, for each device a VM is given, what Keel needs of its node: whether
//! it is Keel's own or a DMA master (and its SMMU streams), its interrupts (`interrupts`, or a
//! host bridge's `interrupt-map`) and a bridge's windows (`ranges`); and the board's own facts
//! (its GIC, UART, RAM and CPUs) against the system. The rules that judge a device are in
//! `passthrough`, the VM's copy of its node in `device_node`, the walk of the tree in
//! `board_nodes`.
//!
//! The board's device tree is the one the board hands Keel (QEMU `virt`'s, dumped by xtask
//! with the machine options Keel runs under, or the DTB a board ships with): the hypervisor
//! never parses it for this.

use super::board_nodes::{number, BoardNodes, Untranslatable};
use super::model::{DeviceInterrupt, Iommu, IPA_BITS, VM_GIC_PHANDLE};
use super::passthrough_problem::PassthroughProblem;
use crate::board::BoardDesc;
use crate::devices::vgic::NR_IRQS;
use crate::fdt::{Fdt, FdtError, Node};

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

    /// The board Keel is built for.
    pub(super) fn desc(&self) -> &'static BoardDesc {
        self.desc
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
    let desc = board.desc;
    let fdt = board.tree()?;
    let bad = |why: &str| PassthroughProblem::Smmu {
        why: why.to_string(),
    };
    let Some(node) = fdt
        .find_compatible("arm,smmu-v3")
        .map_err(|error| bad(&error.to_string()))?
    else {
        return Err(PassthroughProblem::NoSmmu {
            board: desc.name,
            others: other_iommus(&fdt),
        });
    };
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

/// The board's IOMMUs (nodes with `#iommu-cells`), none of them an SMMUv3: each path and
/// first `compatible`, for the message that says Keel drives none of them.
fn other_iommus(fdt: &Fdt) -> Vec<(String, String)> {
    let Ok(nodes) = BoardNodes::new(fdt) else {
        return Vec::new();
    };
    nodes
        .indices()
        .filter_map(|index| {
            let entry = nodes.entry(index)?;
            entry.node.property("#iommu-cells").ok().flatten()?;
            let compatible = entry.node.property_str("compatible").ok().flatten()?;
            Some((entry.path.to_string(), compatible.to_string()))
        })
        .collect()
}

/// GIC interrupt specifier (`arm,gic.yaml` and `arm,gic-v3.yaml` bindings): first cell 0 for
/// an SPI, 1 for a PPI.
const GIC_SPI: u32 = 0;
/// Third cell: edge-triggered, rising.
const IRQ_TYPE_EDGE_RISING: u32 = 1;
/// Third cell: level-sensitive, high.
const IRQ_TYPE_LEVEL_HIGH: u32 = 4;
/// The trigger bits of the third cell (the rest is GICv2's CPU mask).
const IRQ_TYPE_MASK: u32 = 0xf;
/// Cells of one GIC interrupt specifier (both versions).
const GIC_INTERRUPT_CELLS: usize = 3;

/// The board's nodes Keel keeps for itself, by `compatible`, with what Keel uses them as.
const KEELS_OWN: &[(&str, &str)] = &[
    ("arm,gic-v3", "the interrupt controller"),
    ("arm,gic-400", "the interrupt controller"),
    ("arm,cortex-a15-gic", "the interrupt controller"),
    ("arm,cortex-a7-gic", "the interrupt controller"),
    ("arm,gic-v3-its", "the interrupt controller's ITS"),
    ("arm,smmu-v3", "the SMMU"),
    ("arm,armv8-timer", "the architected timer"),
    ("arm,psci-1.0", "PSCI"),
    ("arm,psci-0.2", "PSCI"),
];

/// What Keel uses node `index` as, if it is Keel's: the interrupt controller, the SMMU, the
/// timer, PSCI, the UART of its console ([`console_uart`]), memory or CPUs.
pub(super) fn keels_own(
    nodes: &BoardNodes,
    index: usize,
    fdt: &Fdt,
    desc: &BoardDesc,
) -> Result<Option<&'static str>, FdtError> {
    let Some(entry) = nodes.entry(index) else {
        return Ok(None);
    };
    let node = entry.node;
    for &(compatible, what) in KEELS_OWN {
        if node.is_compatible(compatible)? {
            return Ok(Some(what));
        }
    }
    if console_uart(nodes, fdt, desc)? == Some(index) {
        return Ok(Some("its console's UART"));
    }
    match node.property_str("device_type")? {
        Some("memory") => Ok(Some("RAM")),
        Some("cpu") => Ok(Some("a CPU")),
        _ => Ok(None),
    }
}

/// The UART of Keel's console, as Keel finds it at boot: the node `/chosen/stdout-path` names
/// (directly or through `/aliases`) if it is of the kind Keel drives on board `desc`, else
/// the first node of that kind.
fn console_uart(
    nodes: &BoardNodes,
    fdt: &Fdt,
    desc: &BoardDesc,
) -> Result<Option<usize>, FdtError> {
    let stdout = match fdt.find_node("/chosen")? {
        Some(chosen) => chosen.property_str("stdout-path")?,
        None => None,
    };
    let stdout = stdout.map(|path| path.split(':').next().unwrap_or(path));
    let path = match stdout {
        Some(path) if !path.starts_with('/') => match fdt.find_node("/aliases")? {
            Some(aliases) => aliases.property_str(path)?,
            None => None,
        },
        other => other,
    };
    let is_kind = |index: usize| -> Result<bool, FdtError> {
        let Some(entry) = nodes.entry(index) else {
            return Ok(false);
        };
        for compatible in desc.uart.compatibles() {
            if entry.node.is_compatible(compatible)? {
                return Ok(true);
            }
        }
        Ok(false)
    };
    if let Some(index) = path.and_then(|path| nodes.find_loosely(path)) {
        if is_kind(index)? {
            return Ok(Some(index));
        }
    }
    for index in nodes.indices() {
        if is_kind(index)? {
            return Ok(Some(index));
        }
    }
    Ok(None)
}

/// Device-tree `compatible` strings of devices that master DMA though their nodes need not say
/// so (no `iommus`, `#dma-cells` or `dma-coherent`): Ethernet MACs, USB, SD/eMMC and SATA
/// controllers of the boards Keel knows, and virtio-mmio (QEMU reads and writes guest memory
/// for it). Not every DMA master of every board: see `unisolated_dma` in the configuration
/// reference.
const KNOWN_DMA_MASTERS: &[&str] = &[
    "cdns,gem",
    "cdns,macb",
    "cdns,zynqmp-gem",
    "brcm,genet-v5",
    "brcm,bcm2711-genet-v5",
    "snps,dwc3",
    "generic-xhci",
    "arasan,sdhci-8.9a",
    "brcm,bcm2711-emmc2",
    "brcm,bcm2835-sdhci",
    "generic-ahci",
    "ceva,ahci-1v84",
    "virtio,mmio",
];

/// Why node `index` is taken for a DMA master, if it is one (the first reason that holds): a
/// PCI host bridge (its functions master DMA); a node the board puts behind an IOMMU
/// (`iommus`, `iommu-map`), named if the tree has it; an IOMMU itself (`#iommu-cells`: its
/// table walks read memory); a DMA controller (`#dma-cells`); a node whose DMA is coherent
/// with the CPUs (`dma-coherent`); or one of the [`KNOWN_DMA_MASTERS`].
pub(super) fn dma_master(nodes: &BoardNodes, index: usize) -> Result<Option<String>, FdtError> {
    let Some(entry) = nodes.entry(index) else {
        return Ok(None);
    };
    let node = entry.node;
    if node.property_str("device_type")? == Some("pci") {
        return Ok(Some("a PCI host bridge".to_string()));
    }
    let iommu = match node.property_cells("iommus")? {
        Some(mut cells) => Some(cells.next()),
        None => node
            .property_cells("iommu-map")?
            .map(|mut cells| cells.nth(1)),
    };
    if let Some(phandle) = iommu {
        let named = phandle
            .and_then(|phandle| nodes.by_phandle(phandle))
            .and_then(|index| nodes.entry(index));
        return Ok(Some(match named {
            Some(iommu) => match iommu.node.property_str("compatible")? {
                Some(compatible) => format!(
                    "the board puts it behind the IOMMU '{}' ({compatible})",
                    iommu.path
                ),
                None => format!("the board puts it behind the IOMMU '{}'", iommu.path),
            },
            None => "the board puts it behind an IOMMU".to_string(),
        }));
    }
    if node.property("#iommu-cells")?.is_some() {
        return Ok(Some("an IOMMU (its table walks read memory)".to_string()));
    }
    if node.property("#dma-cells")?.is_some() {
        return Ok(Some("a DMA controller (#dma-cells)".to_string()));
    }
    if node.property("dma-coherent")?.is_some() {
        return Ok(Some(
            "its DMA is coherent with the CPUs (dma-coherent)".to_string(),
        ));
    }
    for compatible in KNOWN_DMA_MASTERS {
        if node.is_compatible(compatible)? {
            return Ok(Some(format!("a known bus master ({compatible})")));
        }
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
pub(super) fn smmu_streams(node: &Node, smmu: u32) -> Result<Vec<(u32, u32)>, FdtError> {
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
/// the child's cells per the node's `#address-cells`, the parent's per its bus's, sizes per
/// the node's `#size-cells`), each parent address translated to a physical one through the
/// buses above: the windows inside the guest-physical space, and the `ranges` value the VM's
/// tree gets (the entries of those alone, the parent address as the root's two cells, where
/// the VM's copy of the node sits). `None` without `ranges`.
pub(super) fn bridge_windows(
    nodes: &BoardNodes,
    index: usize,
) -> Result<Option<Windows>, Untranslatable> {
    let (Some(entry), Some(bus)) = (nodes.entry(index), nodes.parent(index)) else {
        return Ok(None);
    };
    let Some(cells) = entry.node.property_cells("ranges")? else {
        return Ok(None);
    };
    let child_cells = nodes.address_cells(index)? as usize;
    let parent_cells = nodes.address_cells(bus)?;
    let size_cells = nodes.size_cells(index)?;
    if parent_cells > 2 || size_cells > 2 {
        return Err(Untranslatable::Tree(FdtError::UnsupportedCells {
            address_cells: parent_cells,
            size_cells,
        }));
    }
    let (parent_cells, size_cells) = (parent_cells as usize, size_cells as usize);
    let cells: Vec<u32> = cells.collect();
    let entry_cells = child_cells + parent_cells + size_cells;
    let mut windows = Vec::new();
    let mut kept = Vec::new();
    for range in cells.chunks_exact(entry_cells.max(1)) {
        let (child, rest) = range.split_at(child_cells.min(range.len()));
        let (parent, size) = rest.split_at(parent_cells.min(rest.len()));
        let size = number(size);
        let physical = nodes.to_physical(bus, number(parent), size)?;
        if physical.saturating_add(size) <= 1 << IPA_BITS {
            windows.push((physical, size));
            kept.extend(child.iter().flat_map(|cell| cell.to_be_bytes()));
            kept.extend(physical.to_be_bytes());
            kept.extend(
                range[child_cells + parent_cells..]
                    .iter()
                    .flat_map(|cell| cell.to_be_bytes()),
            );
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

/// The board's interrupt controller: the first node of a GIC of the version Keel drives on
/// board `desc`.
fn board_gic<'a>(fdt: &Fdt<'a>, desc: &BoardDesc) -> Result<Option<Node<'a>>, FdtError> {
    for compatible in desc.gic.compatibles() {
        if let Some(node) = fdt.find_compatible(compatible)? {
            return Ok(Some(node));
        }
    }
    Ok(None)
}

/// The phandle of the board's GIC.
fn gic_phandle(fdt: &Fdt, desc: &BoardDesc) -> Result<Option<u32>, FdtError> {
    match board_gic(fdt, desc)? {
        Some(gic) => gic.property_u32("phandle"),
        None => Ok(None),
    }
}

/// A host bridge's legacy interrupts from its `interrupt-map` (the PCI binding: child unit
/// address and interrupt, then the parent's phandle, unit address and specifier): the GIC's
/// SPIs they name (each once), and the map for the VM's tree, every parent phandle the VM's
/// GIC's ([`VM_GIC_PHANDLE`]). `None` without `interrupt-map`.
pub(super) fn interrupt_map(
    node: &Node,
    fdt: &Fdt,
    desc: &BoardDesc,
    path: &str,
) -> Result<Option<InterruptMap>, PassthroughProblem> {
    let refuse = |why: String| PassthroughProblem::Interrupt {
        path: path.to_string(),
        why,
    };
    let bad_tree = |error: FdtError| refuse(error.to_string());
    let Some(cells) = node.property_cells("interrupt-map").map_err(bad_tree)? else {
        return Ok(None);
    };
    let gic = gic_phandle(fdt, desc).map_err(bad_tree)?;
    let parent_address = match board_gic(fdt, desc).map_err(bad_tree)? {
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

/// The phandle of the interrupt controller that node `index`'s interrupts go to: its own
/// `interrupt-parent`, else the nearest ancestor's (§2.4.1).
fn interrupt_parent(nodes: &BoardNodes, index: usize) -> Result<Option<u32>, FdtError> {
    let mut at = Some(index);
    while let Some(node) = at {
        if let Some(entry) = nodes.entry(node) {
            if let Some(phandle) = entry.node.property_u32("interrupt-parent")? {
                return Ok(Some(phandle));
            }
        }
        at = nodes.parent(node);
    }
    Ok(None)
}

/// Node `index`'s interrupts: SPIs of the GIC, level-high or edge-rising, each below the
/// virtual GIC's [`NR_IRQS`] (the VM sees the board's INTID), each once (a ZynqMP GEM names
/// its one SPI once per queue).
pub(super) fn interrupts(
    nodes: &BoardNodes,
    index: usize,
    fdt: &Fdt,
    desc: &BoardDesc,
    path: &str,
) -> Result<Vec<DeviceInterrupt>, PassthroughProblem> {
    let refuse = |why: String| PassthroughProblem::Interrupt {
        path: path.to_string(),
        why,
    };
    let bad_tree = |error: FdtError| refuse(error.to_string());
    let Some(entry) = nodes.entry(index) else {
        return Ok(Vec::new());
    };
    let Some(cells) = entry.node.interrupts().map_err(bad_tree)? else {
        return Ok(Vec::new());
    };
    let parent = interrupt_parent(nodes, index).map_err(bad_tree)?;
    if parent.is_none() || parent != gic_phandle(fdt, desc).map_err(bad_tree)? {
        return Err(refuse("its interrupt parent is not the GIC".to_string()));
    }
    let cells: Vec<u32> = cells.collect();
    if !cells.len().is_multiple_of(GIC_INTERRUPT_CELLS) {
        return Err(refuse(format!(
            "'interrupts' has {} cells, not a multiple of 3",
            cells.len()
        )));
    }
    let mut found: Vec<DeviceInterrupt> = Vec::new();
    for specifier in cells.chunks_exact(GIC_INTERRUPT_CELLS) {
        if let &[kind, number, flags] = specifier {
            let interrupt = spi(kind, number, flags).map_err(refuse)?;
            if !found.iter().any(|known| known.intid == interrupt.intid) {
                found.push(interrupt);
            }
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
