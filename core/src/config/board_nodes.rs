//! The board's device tree walked once for the `[[vm.passthrough]]` rules: every node with its
//! path and its parent, found by path or by phandle, and a node's bus addresses translated to
//! physical ones through the buses above it (`ranges`, Devicetree Specification §2.3.8).
//!
//! The walk keeps its own stack (no recursion), so no tree, however deep, can overflow the
//! compiler's; a tree the reader refuses is an error, never a panic.

use crate::fdt::{Fdt, FdtError, Node};

/// Default `#address-cells` and `#size-cells` when a node does not say (§2.3.5).
const DEFAULT_ADDRESS_CELLS: u32 = 2;
const DEFAULT_SIZE_CELLS: u32 = 1;

/// One node of the board's tree.
#[derive(Clone, Copy)]
pub(super) struct Entry<'a, 'p> {
    /// Its path from the root (`/` for the root).
    pub path: &'p str,
    /// The node.
    pub node: Node<'a>,
}

/// Every node of the board's tree in blob order (depth first: a node's descendants follow it),
/// each with its path, its parent and its depth.
pub(super) struct BoardNodes<'a> {
    nodes: Vec<Walked<'a>>,
}

/// One node as the walk found it.
struct Walked<'a> {
    path: String,
    node: Node<'a>,
    parent: Option<usize>,
    /// 0 for the root.
    depth: usize,
}

/// Why a bus address of a node cannot be translated to a physical one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Untranslatable {
    /// Bus `bus` (a path) has no `ranges`: its children's addresses are not the CPU's.
    NoRanges {
        /// The bus's path.
        bus: String,
    },
    /// `address` (`size` bytes, in bus `bus`'s addresses) is in none of its `ranges`.
    Outside {
        /// The bus's path.
        bus: String,
        /// The address, in the bus's addresses.
        address: u64,
        /// The size of the region.
        size: u64,
    },
    /// The tree cannot be read there (bad cells or values).
    Tree(FdtError),
}

impl From<FdtError> for Untranslatable {
    fn from(error: FdtError) -> Self {
        Self::Tree(error)
    }
}

impl<'a> BoardNodes<'a> {
    /// Walks `fdt` from its root.
    pub fn new(fdt: &Fdt<'a>) -> Result<Self, FdtError> {
        let root = fdt.root();
        let mut nodes = vec![Walked {
            path: "/".to_string(),
            node: root,
            parent: None,
            depth: 0,
        }];
        let mut stack = vec![(0, root.children())];
        while let Some((parent, children)) = stack.last_mut() {
            let parent = *parent;
            let Some(child) = children.next() else {
                stack.pop();
                continue;
            };
            let child = child?;
            let path = match parent {
                0 => format!("/{}", child.name()),
                _ => format!("{}/{}", nodes[parent].path, child.name()),
            };
            nodes.push(Walked {
                path,
                node: child,
                parent: Some(parent),
                depth: stack.len(),
            });
            stack.push((nodes.len() - 1, child.children()));
        }
        Ok(Self { nodes })
    }

    /// Node `index`.
    pub fn entry(&self, index: usize) -> Option<Entry<'a, '_>> {
        self.nodes.get(index).map(|walked| Entry {
            path: walked.path.as_str(),
            node: walked.node,
        })
    }

    /// The parent of node `index` (`None` for the root).
    pub fn parent(&self, index: usize) -> Option<usize> {
        self.nodes.get(index).and_then(|walked| walked.parent)
    }

    /// The child of node `parent` named exactly `name` (unit address included).
    pub fn child(&self, parent: usize, name: &str) -> Option<usize> {
        self.nodes
            .iter()
            .position(|walked| walked.parent == Some(parent) && walked.node.name() == name)
    }

    /// The node at `path` as [`Fdt::find_node`] finds it (and Keel at boot): a component
    /// without `@` also matches a name with a unit address, the first match winning.
    pub fn find_loosely(&self, path: &str) -> Option<usize> {
        let mut at = 0;
        for component in path.strip_prefix('/')?.split('/') {
            if component.is_empty() {
                continue;
            }
            at = self.nodes.iter().position(|walked| {
                walked.parent == Some(at)
                    && (walked.node.name() == component
                        || (!component.contains('@') && walked.node.base_name() == component))
            })?;
        }
        Some(at)
    }

    /// The node whose `phandle` (or older `linux,phandle`) is `phandle`.
    pub fn by_phandle(&self, phandle: u32) -> Option<usize> {
        self.nodes.iter().position(|walked| {
            ["phandle", "linux,phandle"]
                .iter()
                .any(|name| walked.node.property_u32(name).ok().flatten() == Some(phandle))
        })
    }

    /// Node `index` and its descendants: the indices from it up to the next node no deeper
    /// than it (the walk is depth first).
    pub fn subtree(&self, index: usize) -> std::ops::Range<usize> {
        let Some(top) = self.nodes.get(index) else {
            return index..index;
        };
        let end = self
            .nodes
            .iter()
            .enumerate()
            .skip(index + 1)
            .find(|(_, walked)| walked.depth <= top.depth)
            .map_or(self.nodes.len(), |(end, _)| end);
        index..end
    }

    /// How deep node `index` is below node `ancestor` (0 for `ancestor` itself).
    pub fn depth_below(&self, index: usize, ancestor: usize) -> usize {
        match (self.nodes.get(index), self.nodes.get(ancestor)) {
            (Some(node), Some(ancestor)) => node.depth.saturating_sub(ancestor.depth),
            _ => 0,
        }
    }

    /// The indices of every node, in blob order.
    pub fn indices(&self) -> std::ops::Range<usize> {
        0..self.nodes.len()
    }

    /// `#address-cells` of node `index`: the width of its children's addresses.
    pub fn address_cells(&self, index: usize) -> Result<u32, FdtError> {
        match self.entry(index) {
            Some(entry) => Ok(entry
                .node
                .property_u32("#address-cells")?
                .unwrap_or(DEFAULT_ADDRESS_CELLS)),
            None => Ok(DEFAULT_ADDRESS_CELLS),
        }
    }

    /// `#size-cells` of node `index`: the width of its children's sizes.
    pub fn size_cells(&self, index: usize) -> Result<u32, FdtError> {
        match self.entry(index) {
            Some(entry) => Ok(entry
                .node
                .property_u32("#size-cells")?
                .unwrap_or(DEFAULT_SIZE_CELLS)),
            None => Ok(DEFAULT_SIZE_CELLS),
        }
    }

    /// `address` (`size` bytes) as node `index`'s children address it, as a physical address:
    /// through `index`'s `ranges`, then each bus above it up to the root (§2.3.8). An empty
    /// `ranges` maps addresses unchanged; a bus without `ranges` is not memory-mapped.
    pub fn to_physical(
        &self,
        index: usize,
        address: u64,
        size: u64,
    ) -> Result<u64, Untranslatable> {
        let mut address = address;
        let mut bus = index;
        while let Some(parent) = self.parent(bus) {
            address = self.through_ranges(bus, parent, address, size)?;
            bus = parent;
        }
        Ok(address)
    }

    /// `address` in bus `bus`'s child addresses, as its parent `parent` addresses it.
    fn through_ranges(
        &self,
        bus: usize,
        parent: usize,
        address: u64,
        size: u64,
    ) -> Result<u64, Untranslatable> {
        let Some(entry) = self.entry(bus) else {
            return Ok(address);
        };
        let path = || entry.path.to_string();
        let Some(cells) = entry.node.property_cells("ranges")? else {
            return Err(Untranslatable::NoRanges { bus: path() });
        };
        let cells: Vec<u32> = cells.collect();
        if cells.is_empty() {
            return Ok(address);
        }
        let child_cells = self.address_cells(bus)?;
        let parent_cells = self.address_cells(parent)?;
        let size_cells = self.size_cells(bus)?;
        if child_cells > 2 || parent_cells > 2 || size_cells > 2 || child_cells == 0 {
            return Err(Untranslatable::Tree(FdtError::UnsupportedCells {
                address_cells: child_cells.max(parent_cells),
                size_cells,
            }));
        }
        let (child_cells, parent_cells) = (child_cells as usize, parent_cells as usize);
        let entry_cells = child_cells + parent_cells + size_cells as usize;
        let end = address.checked_add(size);
        for range in cells.chunks_exact(entry_cells) {
            let child = number(&range[..child_cells]);
            let target = number(&range[child_cells..child_cells + parent_cells]);
            let length = number(&range[child_cells + parent_cells..]);
            let inside = child <= address
                && end.is_some_and(|end| child.checked_add(length).is_some_and(|top| end <= top));
            if inside {
                return target
                    .checked_add(address - child)
                    .ok_or(Untranslatable::Outside {
                        bus: path(),
                        address,
                        size,
                    });
            }
        }
        Err(Untranslatable::Outside {
            bus: path(),
            address,
            size,
        })
    }

    /// Every register region of every memory-mapped node but those below `except` (its own
    /// included), physical: base, size and the node's path. Nodes whose addresses do not translate
    /// (not memory-mapped, or a tree this reader cannot follow) are left out.
    pub fn physical_regions(&self, except: usize) -> Vec<(u64, u64, &str)> {
        let below = self.subtree(except);
        let mut regions = Vec::new();
        for index in self.indices() {
            if index != except && below.contains(&index) {
                continue;
            }
            let (Some(entry), Some(parent)) = (self.entry(index), self.parent(index)) else {
                continue;
            };
            let Ok(Some(reg)) = entry.node.reg() else {
                continue;
            };
            for (address, size) in reg {
                if let Ok(physical) = self.to_physical(parent, address, size) {
                    regions.push((physical, size, entry.path));
                }
            }
        }
        regions
    }
}

/// A number of one or two big-endian cells (more are refused before this is called).
pub(super) fn number(cells: &[u32]) -> u64 {
    cells.iter().fold(0u64, |n, &c| n << 32 | u64::from(c))
}
