//! The VM's copy of a board device's node: what of the board's node (and of its child nodes)
//! the VM's device tree keeps, what it leaves out, what it rewrites (registers at the VM's
//! IPAs, clocks as fixed clocks of the VM's tree, references inside the device renumbered), and
//! what it cannot keep: a reference to a node outside the device, a child's interrupts, a clock
//! whose rate neither the board nor the configuration gives.
//!
//! A device tree does not say which properties hold phandles; the ones Keel knows are listed
//! here ([`DROPPED_PROPERTIES`], [`INNER_REFERENCES`], [`OUTER_REFERENCES`]), and any other
//! property is copied as the board has it.

use std::collections::BTreeMap;

use super::board_nodes::BoardNodes;
use super::frequency::FrequencyText;
use super::model::DeviceNode;
use super::passthrough_problem::PassthroughProblem;
use crate::fdt::FdtError;

/// Properties the VM's copy leaves out: they wire the device into the board (its phandle, its
/// interrupt controller, IOMMU and MSI controller, its power domain, resets, pin control and
/// clock set-up, all the board's and its firmware's), which the VM's tree describes its own
/// way or not at all. A node's phandle comes back, renumbered, if the device refers to it.
const DROPPED_PROPERTIES: &[&str] = &[
    "phandle",
    "linux,phandle",
    "interrupt-parent",
    "iommus",
    "iommu-map",
    "iommu-map-mask",
    "msi-map",
    "msi-map-mask",
    "msi-parent",
    "power-domains",
    "power-domain-names",
    "resets",
    "reset-names",
    "assigned-clocks",
    "assigned-clock-rates",
    "assigned-clock-parents",
];

/// Properties left out by prefix: pin control (`pinctrl-names`, `pinctrl-0`, ...).
const DROPPED_PREFIXES: &[&str] = &["pinctrl-"];

/// Properties of one phandle that may name a node inside the device (a MAC's `phy-handle`
/// naming the PHY on its MDIO bus): kept, renumbered, when they do.
const INNER_REFERENCES: &[&str] = &["phy-handle", "pcs-handle"];

/// Properties that refer to other nodes of the board (the first cell a phandle), which the
/// VM's tree does not have: a device with one is refused. A child's `clocks` is one too (the
/// device's own become fixed clocks).
const OUTER_REFERENCES: &[&str] = &[
    "phys",
    "dmas",
    "gpios",
    "nvmem-cells",
    "memory-region",
    "mboxes",
    "syscon",
    "interconnects",
    "sram",
    "interrupts-extended",
    "pwms",
    "io-channels",
    "hwlocks",
    "thermal-sensors",
    "operating-points-v2",
    "remote-endpoint",
];

/// Suffixes of properties that refer to other nodes (`reset-gpios`, `vdd-supply`).
const OUTER_REFERENCE_SUFFIXES: &[&str] = &["-gpios", "-gpio", "-supply"];

/// How deep below the device its child nodes may nest (a PHY on a MAC's MDIO bus is one
/// level; an `mdio` node with PHYs, two).
const MAX_CHILD_DEPTH: usize = 4;

/// What the VM's copy of a device is made from, besides the board's node.
pub(super) struct CopyOf<'r> {
    /// The device's path, as the configuration gives it.
    pub path: &'r str,
    /// Where the VM sees its first register region: the node's unit address.
    pub unit: u64,
    /// Properties of the device's node replaced by new values (`reg` at the VM's IPAs, a
    /// bridge's `ranges` and `interrupt-map`).
    pub rewritten: &'r [(String, Vec<u8>)],
    /// The rates the configuration gives its clocks (`clocks = { name = "frequency" }`).
    pub rates: &'r BTreeMap<String, FrequencyText>,
}

/// The VM's copy of node `index` (the device) and its children; the phandles it renumbers are
/// taken from `next_phandle` up (each VM's devices share one run of them).
pub(super) fn copy_device(
    nodes: &BoardNodes,
    index: usize,
    copy: &CopyOf,
    next_phandle: &mut u32,
) -> Result<DeviceNode, PassthroughProblem> {
    let path = copy.path;
    let bad_tree = |error: FdtError| PassthroughProblem::Node {
        path: path.to_string(),
        why: error.to_string(),
    };
    let subtree = subtree(nodes, index, path)?;
    let renumbered = inner_targets(nodes, &subtree, next_phandle).map_err(bad_tree)?;
    let clocks = device_clocks(nodes, index, path, copy.rates)?;
    build(nodes, index, index, copy, &subtree, &renumbered, clocks)
}

/// The device's nodes, itself first, then its descendants in blob order; refused if they nest
/// deeper than [`MAX_CHILD_DEPTH`].
fn subtree(nodes: &BoardNodes, index: usize, path: &str) -> Result<Vec<usize>, PassthroughProblem> {
    let found: Vec<usize> = nodes.subtree(index).collect();
    if found
        .iter()
        .any(|&node| nodes.depth_below(node, index) > MAX_CHILD_DEPTH)
    {
        return Err(PassthroughProblem::Node {
            path: path.to_string(),
            why: format!("its child nodes nest deeper than {MAX_CHILD_DEPTH} levels"),
        });
    }
    Ok(found)
}

/// The nodes of the device that its [`INNER_REFERENCES`] name, each with its new phandle.
fn inner_targets(
    nodes: &BoardNodes,
    subtree: &[usize],
    next_phandle: &mut u32,
) -> Result<Vec<(usize, u32)>, FdtError> {
    let mut renumbered: Vec<(usize, u32)> = Vec::new();
    for &node in subtree {
        let Some(entry) = nodes.entry(node) else {
            continue;
        };
        for name in INNER_REFERENCES {
            let Some(target) = inner_target(nodes, entry.node.property(name)?, subtree) else {
                continue;
            };
            if !renumbered.iter().any(|&(known, _)| known == target) {
                renumbered.push((target, *next_phandle));
                *next_phandle = next_phandle.saturating_add(1);
            }
        }
    }
    Ok(renumbered)
}

/// The node of the device that a one-phandle `value` names, if it names one.
fn inner_target(nodes: &BoardNodes, value: Option<&[u8]>, subtree: &[usize]) -> Option<usize> {
    let &[a, b, c, d] = value? else {
        return None;
    };
    let target = nodes.by_phandle(u32::from_be_bytes([a, b, c, d]))?;
    subtree.contains(&target).then_some(target)
}

/// The VM's copy of node `node` of the device `device` (itself or a child), with its children.
fn build(
    nodes: &BoardNodes,
    device: usize,
    node: usize,
    copy: &CopyOf,
    subtree: &[usize],
    renumbered: &[(usize, u32)],
    clocks: Vec<u32>,
) -> Result<DeviceNode, PassthroughProblem> {
    let path = copy.path;
    let bad_tree = |error: FdtError| PassthroughProblem::Node {
        path: path.to_string(),
        why: error.to_string(),
    };
    let Some(entry) = nodes.entry(node) else {
        return Err(PassthroughProblem::Node {
            path: path.to_string(),
            why: "its node cannot be read".to_string(),
        });
    };
    let top = node == device;
    // A child by its path below the device (`ethernet-phy@c`).
    let child = (!top).then(|| {
        let device_path = nodes.entry(device).map_or("", |device| device.path);
        entry
            .path
            .strip_prefix(device_path)
            .unwrap_or(entry.path)
            .trim_start_matches('/')
            .to_string()
    });
    let mut properties = Vec::new();
    for property in entry.node.properties() {
        let property = property.map_err(bad_tree)?;
        let name = property.name;
        if DROPPED_PROPERTIES.contains(&name)
            || DROPPED_PREFIXES
                .iter()
                .any(|prefix| name.starts_with(prefix))
            || (top && name == "clocks")
        {
            continue;
        }
        if top {
            if let Some((_, value)) = copy.rewritten.iter().find(|(known, _)| known == name) {
                properties.push((name.to_string(), value.clone()));
                continue;
            }
        }
        if !top && (name == "interrupts" || name == "interrupts-extended") {
            return Err(PassthroughProblem::ChildInterrupts {
                path: path.to_string(),
                child: child.unwrap_or_default(),
            });
        }
        if INNER_REFERENCES.contains(&name) {
            let target = inner_target(nodes, Some(property.value), subtree);
            if let Some(&(_, phandle)) =
                target.and_then(|target| renumbered.iter().find(|&&(known, _)| known == target))
            {
                properties.push((name.to_string(), phandle.to_be_bytes().to_vec()));
                continue;
            }
        }
        if INNER_REFERENCES.contains(&name)
            || OUTER_REFERENCES.contains(&name)
            || OUTER_REFERENCE_SUFFIXES
                .iter()
                .any(|suffix| name.ends_with(suffix))
            || name == "clocks"
        {
            let first = property
                .value
                .first_chunk::<4>()
                .map(|cell| u32::from_be_bytes(*cell));
            let target = match first
                .and_then(|phandle| nodes.by_phandle(phandle))
                .and_then(|index| nodes.entry(index))
            {
                Some(target) => format!("'{}'", target.path),
                None => match first {
                    Some(phandle) => format!("phandle {phandle}"),
                    None => "nothing".to_string(),
                },
            };
            return Err(PassthroughProblem::Reference {
                path: path.to_string(),
                child,
                property: name.to_string(),
                target,
            });
        }
        properties.push((name.to_string(), property.value.to_vec()));
    }
    if let Some(&(_, phandle)) = renumbered.iter().find(|&&(known, _)| known == node) {
        properties.push(("phandle".to_string(), phandle.to_be_bytes().to_vec()));
    }
    let mut children = Vec::new();
    for &child in subtree {
        if nodes.parent(child) == Some(node) {
            children.push(build(
                nodes,
                device,
                child,
                copy,
                subtree,
                renumbered,
                Vec::new(),
            )?);
        }
    }
    let name = if top {
        format!("{}@{:x}", entry.node.base_name(), copy.unit)
    } else {
        entry.node.name().to_string()
    };
    Ok(DeviceNode {
        name,
        properties,
        clocks,
        children,
    })
}

/// The frequency of each entry of node `index`'s `clocks`, in order: the rate the
/// configuration gives it by name (`rates`), else the board's `fixed-clock`'s; refused for a
/// clock that has neither, and for a rate given to a clock the device does not have. A clock
/// is named by its `clock-names` entry, or else by its position (`"0"`, `"1"`, ...).
fn device_clocks(
    nodes: &BoardNodes,
    index: usize,
    path: &str,
    rates: &BTreeMap<String, FrequencyText>,
) -> Result<Vec<u32>, PassthroughProblem> {
    let bad = |why: String| PassthroughProblem::Node {
        path: path.to_string(),
        why,
    };
    let bad_tree = |error: FdtError| bad(error.to_string());
    let Some(entry) = nodes.entry(index) else {
        return Ok(Vec::new());
    };
    let names: Vec<&str> = entry
        .node
        .strings("clock-names")
        .map_err(bad_tree)?
        .map(Iterator::collect)
        .unwrap_or_default();
    let cells: Vec<u32> = entry
        .node
        .property_cells("clocks")
        .map_err(bad_tree)?
        .map(Iterator::collect)
        .unwrap_or_default();
    // Each entry: its name, its provider and whether its specifier has cells.
    let mut clocks: Vec<(String, usize, bool)> = Vec::new();
    let mut rest = cells.as_slice();
    while let Some((&phandle, tail)) = rest.split_first() {
        let position = clocks.len();
        let provider = nodes.by_phandle(phandle).ok_or_else(|| {
            bad(format!(
                "'clocks' entry {position} names phandle {phandle}, which no node of the board's \
                 device tree has"
            ))
        })?;
        let specifier = match nodes.entry(provider) {
            Some(provider) => provider
                .node
                .property_u32("#clock-cells")
                .map_err(bad_tree)?
                .unwrap_or(0) as usize,
            None => 0,
        };
        rest = tail
            .get(specifier..)
            .ok_or_else(|| bad(format!("'clocks' ends inside entry {position}")))?;
        let name = names
            .get(position)
            .map_or_else(|| position.to_string(), |name| name.to_string());
        clocks.push((name, provider, specifier > 0));
    }
    if let Some(unknown) = rates
        .keys()
        .find(|&given| !clocks.iter().any(|(name, _, _)| name == given))
    {
        return Err(PassthroughProblem::UnknownClock {
            path: path.to_string(),
            clock: unknown.clone(),
            known: clocks.iter().map(|(name, _, _)| name.clone()).collect(),
        });
    }
    let mut rates_hz = Vec::with_capacity(clocks.len());
    for (name, provider, has_cells) in &clocks {
        let hz = match rates.get(name) {
            Some(text) => text
                .hz()
                .map_err(|error| PassthroughProblem::ClockFrequency {
                    path: path.to_string(),
                    clock: name.clone(),
                    error,
                })?,
            None => fixed_clock_hz(nodes, *provider, *has_cells).ok_or_else(|| {
                let provider = nodes.entry(*provider);
                PassthroughProblem::ClockRate {
                    path: path.to_string(),
                    clock: name.clone(),
                    provider: provider.map_or_else(String::new, |p| p.path.to_string()),
                    compatible: provider
                        .and_then(|p| p.node.property_str("compatible").ok().flatten())
                        .map(str::to_string),
                }
            })?,
        };
        rates_hz.push(hz);
    }
    Ok(rates_hz)
}

/// The frequency of the board's clock `provider` if it is a `fixed-clock` (one clock, no
/// specifier cells, its `clock-frequency` one cell).
fn fixed_clock_hz(nodes: &BoardNodes, provider: usize, has_cells: bool) -> Option<u32> {
    let node = nodes.entry(provider)?.node;
    if has_cells || !node.is_compatible("fixed-clock").ok()? {
        return None;
    }
    node.property_u32("clock-frequency").ok()?
}
