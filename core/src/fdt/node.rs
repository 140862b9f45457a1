//! Nodes of the tree (§2.2): finding them by path or `compatible`, and reading their properties.

use core::fmt;

use super::bytes::{read_u32, read_u64, split_once};
use super::iter::{
    string_list, CellIter, Children, CompatibleNodes, Properties, RegIter, StringList,
};
use super::{Fdt, FdtError};

/// Default `#address-cells` and `#size-cells` when a node does not say (§2.3.5).
const DEFAULT_ADDRESS_CELLS: u32 = 2;
const DEFAULT_SIZE_CELLS: u32 = 1;

/// A property of a node: its name and raw big-endian value (§2.2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Property<'a> {
    /// The property name, from the strings block.
    pub name: &'a str,
    /// The raw value.
    pub value: &'a [u8],
}

impl<'a> Fdt<'a> {
    /// The root node `/`.
    pub fn root(&self) -> Node<'a> {
        Node {
            fdt: *self,
            name: self.root_name,
            begin: self.root_begin,
            properties: self.root_properties,
            parent_properties: None,
        }
    }

    /// The node at an absolute path such as `/chosen` or `/cpus/cpu@1` (§2.2.3). A
    /// component without `@` also matches a name with a unit address (`memory` finds
    /// `memory@40000000`); the first match in blob order wins. Aliases are not resolved.
    pub fn find_node(&self, path: &str) -> Result<Option<Node<'a>>, FdtError> {
        let relative = path.strip_prefix('/').ok_or(FdtError::BadPath)?;
        let mut node = self.root();
        let mut rest = Some(relative);
        while let Some(text) = rest {
            let (component, tail) =
                split_once(text, b'/').map_or((text, None), |(c, t)| (c, Some(t)));
            rest = tail;
            if component.is_empty() {
                continue;
            }
            match node.child(component)? {
                Some(child) => node = child,
                None => return Ok(None),
            }
        }
        Ok(Some(node))
    }

    /// The first node, in blob order, whose `compatible` list contains `compatible` (§2.3.1).
    pub fn find_compatible(&self, compatible: &str) -> Result<Option<Node<'a>>, FdtError> {
        self.compatible_nodes(compatible).next().transpose()
    }

    /// Every node whose `compatible` list contains `compatible`, in blob order (§2.3.1).
    pub fn compatible_nodes<'b>(&self, compatible: &'b str) -> CompatibleNodes<'a, 'b> {
        CompatibleNodes {
            fdt: *self,
            compatible,
            offset: self.root_begin,
            done: false,
        }
    }
}

/// Whether a node called `name` matches a path component (§2.2.1, §2.2.3).
fn name_matches(name: &str, component: &str) -> bool {
    name == component
        || (!component.bytes().any(|byte| byte == b'@')
            && split_once(name, b'@').is_some_and(|(base, _)| base == component))
}

/// A node of the tree (§2.2), borrowed from the blob.
#[derive(Clone, Copy)]
pub struct Node<'a> {
    pub(super) fdt: Fdt<'a>,
    pub(super) name: &'a str,
    /// Offset of the node's `FDT_BEGIN_NODE` token in the structure block.
    pub(super) begin: usize,
    /// Offset of the first token after the node's name.
    pub(super) properties: usize,
    /// The parent's `properties`, `None` for the root.
    pub(super) parent_properties: Option<usize>,
}

impl<'a> Node<'a> {
    /// The full name, `node-name@unit-address` (§2.2.1); empty for the root.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The name without its unit address (§2.2.1).
    pub fn base_name(&self) -> &'a str {
        split_once(self.name, b'@').map_or(self.name, |(base, _)| base)
    }

    /// The unit address after `@`, if the name has one (§2.2.1).
    pub fn unit_address(&self) -> Option<&'a str> {
        split_once(self.name, b'@').map(|(_, unit)| unit)
    }

    /// The raw value of property `name`, if present (§2.2.4).
    pub fn property(&self, name: &str) -> Result<Option<&'a [u8]>, FdtError> {
        Ok(self
            .fdt
            .find_property(self.properties, name)?
            .map(|(_, value)| value))
    }

    /// A `<string>` property (§2.2.4): the value must end with NUL and be UTF-8;
    /// returns the text before the first NUL.
    pub fn property_str(&self, name: &str) -> Result<Option<&'a str>, FdtError> {
        let Some((offset, value)) = self.fdt.find_property(self.properties, name)? else {
            return Ok(None);
        };
        let bad = self.bad_value(offset, "a NUL-terminated UTF-8 string");
        let (Some(0), Some(length)) = (value.last(), value.iter().position(|&b| b == 0)) else {
            return Err(bad);
        };
        let text = value.get(..length).ok_or(bad)?;
        core::str::from_utf8(text).map(Some).map_err(|_| bad)
    }

    /// A `<u32>` property (§2.2.4): exactly one cell.
    pub fn property_u32(&self, name: &str) -> Result<Option<u32>, FdtError> {
        let Some((offset, value)) = self.fdt.find_property(self.properties, name)? else {
            return Ok(None);
        };
        match *value {
            [a, b, c, d] => Ok(Some(u32::from_be_bytes([a, b, c, d]))),
            _ => Err(self.bad_value(offset, "a single 32-bit cell")),
        }
    }

    /// A `<u64>` property (§2.2.4): two cells, or one cell widened.
    pub fn property_u64(&self, name: &str) -> Result<Option<u64>, FdtError> {
        let Some((offset, value)) = self.fdt.find_property(self.properties, name)? else {
            return Ok(None);
        };
        match value.len() {
            4 => Ok(read_u32(value, 0).map(u64::from)),
            8 => Ok(read_u64(value, 0)),
            _ => Err(self.bad_value(offset, "one or two 32-bit cells")),
        }
    }

    /// A `<stringlist>` property such as `compatible` (§2.2.4, §2.3.1): NUL-terminated
    /// UTF-8 strings; an empty value is an empty list.
    pub fn strings(&self, name: &str) -> Result<Option<StringList<'a>>, FdtError> {
        let Some((offset, value)) = self.fdt.find_property(self.properties, name)? else {
            return Ok(None);
        };
        string_list(value)
            .map(Some)
            .ok_or(self.bad_value(offset, "a list of NUL-terminated UTF-8 strings"))
    }

    /// Whether the `compatible` list contains `compatible` (§2.3.1).
    pub fn is_compatible(&self, compatible: &str) -> Result<bool, FdtError> {
        Ok(self
            .strings("compatible")?
            .is_some_and(|mut list| list.any(|c| c == compatible)))
    }

    /// A `<prop-encoded-array>` of 32-bit cells (§2.2.4).
    pub fn property_cells(&self, name: &str) -> Result<Option<CellIter<'a>>, FdtError> {
        let Some((offset, value)) = self.fdt.find_property(self.properties, name)? else {
            return Ok(None);
        };
        if !value.len().is_multiple_of(4) {
            return Err(self.bad_value(offset, "a whole number of 32-bit cells"));
        }
        Ok(Some(CellIter { bytes: value }))
    }

    /// The raw cells of `interrupts` (§2.4.1); their meaning belongs to the interrupt parent.
    pub fn interrupts(&self) -> Result<Option<CellIter<'a>>, FdtError> {
        self.property_cells("interrupts")
    }

    /// The `(address, size)` pairs of `reg` (§2.3.6), sized by the parent's
    /// `#address-cells` (1 or 2, default 2) and `#size-cells` (0, 1 or 2, default 1)
    /// (§2.3.5). Size is 0 when `#size-cells` is 0, as under `/cpus`.
    pub fn reg(&self) -> Result<Option<RegIter<'a>>, FdtError> {
        let Some((offset, value)) = self.fdt.find_property(self.properties, "reg")? else {
            return Ok(None);
        };
        let (address_cells, size_cells) = match self.parent_properties {
            Some(parent) => {
                let parent = Node {
                    properties: parent,
                    parent_properties: None,
                    ..*self
                };
                let address = parent.property_u32("#address-cells")?;
                let size = parent.property_u32("#size-cells")?;
                (
                    address.unwrap_or(DEFAULT_ADDRESS_CELLS),
                    size.unwrap_or(DEFAULT_SIZE_CELLS),
                )
            }
            None => (DEFAULT_ADDRESS_CELLS, DEFAULT_SIZE_CELLS),
        };
        if !(1..=2).contains(&address_cells) || size_cells > 2 {
            return Err(FdtError::UnsupportedCells {
                address_cells,
                size_cells,
            });
        }
        // Both at most 2, so this cannot overflow.
        let entry_size = (address_cells + size_cells) as usize * 4;
        if !value.len().is_multiple_of(entry_size) {
            return Err(self.bad_value(offset, "a whole number of (address, size) entries"));
        }
        Ok(Some(RegIter {
            bytes: value,
            address_cells,
            size_cells,
        }))
    }

    /// The properties of this node, in blob order (§5.4.2).
    pub fn properties(&self) -> Properties<'a> {
        Properties {
            fdt: self.fdt,
            offset: self.properties,
            done: false,
        }
    }

    /// The child nodes, in blob order (§5.4.2).
    pub fn children(&self) -> Children<'a> {
        Children {
            fdt: self.fdt,
            parent: self.properties,
            offset: self.properties,
            done: false,
        }
    }

    /// The first child matching `name`, with or without unit address as in [`Fdt::find_node`].
    pub fn child(&self, name: &str) -> Result<Option<Node<'a>>, FdtError> {
        for child in self.children() {
            let child = child?;
            if name_matches(child.name, name) {
                return Ok(Some(child));
            }
        }
        Ok(None)
    }

    /// `BadValue` for the property whose token is at `offset` in the structure block.
    fn bad_value(&self, offset: usize, expected: &'static str) -> FdtError {
        FdtError::BadValue {
            offset: self.fdt.structure_offset.saturating_add(offset),
            expected,
        }
    }
}

impl fmt::Debug for Node<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let offset = self.fdt.structure_offset.saturating_add(self.begin);
        f.debug_struct("Node")
            .field("name", &self.name)
            .field("offset", &offset)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::super::tests::{names, regs, sample, Builder};
    use super::*;
    use std::vec::Vec;

    #[test]
    fn finds_nodes_by_path() {
        let blob = sample();
        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(fdt.root().name(), "");
        assert_eq!(
            names(&fdt.root()),
            ["chosen", "memory@40000000", "cpus", "pl011@9000000", "soc"]
        );
        assert_eq!(fdt.find_node("/").unwrap().unwrap().name(), "");
        assert_eq!(fdt.find_node("/chosen").unwrap().unwrap().name(), "chosen");
        assert_eq!(
            fdt.find_node("/memory").unwrap().unwrap().name(),
            "memory@40000000"
        );
        assert_eq!(
            fdt.find_node("/memory@40000000/")
                .unwrap()
                .unwrap()
                .base_name(),
            "memory"
        );
        assert!(fdt.find_node("/memory@0").unwrap().is_none());
        let cpu1 = fdt.find_node("/cpus/cpu@1").unwrap().unwrap();
        assert_eq!((cpu1.name(), cpu1.unit_address()), ("cpu@1", Some("1")));
        assert_eq!(fdt.find_node("/cpus/cpu").unwrap().unwrap().name(), "cpu@0");
        assert!(fdt.find_node("/cpus/cpu@2").unwrap().is_none());
        assert!(fdt.find_node("/nothing/here").unwrap().is_none());
        assert!(
            fdt.find_node("/cpu").unwrap().is_none(),
            "cpu is not a prefix match of cpus"
        );
        assert_eq!(fdt.find_node("chosen").unwrap_err(), FdtError::BadPath);
    }

    #[test]
    fn reads_properties() {
        let blob = sample();
        let fdt = Fdt::new(&blob).unwrap();
        let chosen = fdt.find_node("/chosen").unwrap().unwrap();
        assert_eq!(
            chosen.property_str("bootargs"),
            Ok(Some("console=ttyAMA0 earlycon"))
        );
        assert_eq!(chosen.property("missing"), Ok(None));
        assert_eq!(chosen.property_u32("missing"), Ok(None));
        let root = fdt.root();
        assert_eq!(root.property_u32("#size-cells"), Ok(Some(2)));
        assert_eq!(root.property_u64("#size-cells"), Ok(Some(2)));
        assert_eq!(root.property("#size-cells"), Ok(Some(&[0, 0, 0, 2][..])));
        assert!(matches!(
            chosen.property_u32("bootargs"),
            Err(FdtError::BadValue {
                expected: "a single 32-bit cell",
                ..
            })
        ));
        let uart = fdt.find_node("/pl011").unwrap().unwrap();
        assert_eq!(uart.property("empty"), Ok(Some(&[][..])));
        assert!(matches!(
            uart.property_str("empty"),
            Err(FdtError::BadValue { .. })
        ));
        assert!(matches!(
            uart.property_str("interrupts"),
            Err(FdtError::BadValue { .. })
        ));
        assert_eq!(uart.strings("empty").unwrap().unwrap().count(), 0);
        let compatible: Vec<_> = uart.strings("compatible").unwrap().unwrap().collect();
        assert_eq!(compatible, ["arm,pl011", "arm,primecell"]);
        assert_eq!(uart.property_str("compatible"), Ok(Some("arm,pl011")));
        assert_eq!(uart.is_compatible("arm,primecell"), Ok(true));
        assert_eq!(uart.is_compatible("arm,prime"), Ok(false));
        assert!(matches!(
            uart.strings("interrupts"),
            Err(FdtError::BadValue { .. })
        ));
        let interrupts = uart.interrupts().unwrap().unwrap();
        assert_eq!(interrupts.len(), 3);
        assert_eq!(interrupts.collect::<Vec<_>>(), [0, 1, 4]);
        assert_eq!(chosen.interrupts().unwrap().map(|i| i.count()), None);
        let listed: Vec<_> = uart.properties().map(|p| p.unwrap().name).collect();
        assert_eq!(listed, ["compatible", "reg", "interrupts", "empty"]);
    }

    #[test]
    fn reg_uses_parent_cells() {
        let blob = sample();
        let fdt = Fdt::new(&blob).unwrap();
        let node = |path| fdt.find_node(path).unwrap().unwrap();
        assert_eq!(regs(node("/memory")), [(0x4000_0000, 0x4000_0000)]);
        assert_eq!(regs(node("/pl011")), [(0x0900_0000, 0x1000)]);
        assert_eq!(regs(node("/cpus/cpu@1")), [(1, 0)]);
        assert_eq!(regs(node("/soc/uart")), [(0x1000, 0x100), (0x2000, 0x200)]);
        assert!(node("/chosen").reg().unwrap().is_none());
        assert_eq!(
            node("/soc/odd/x@0").reg().unwrap_err(),
            FdtError::UnsupportedCells {
                address_cells: 3,
                size_cells: 1
            }
        );
    }

    #[test]
    fn reg_defaults_and_bad_lengths() {
        // No #address-cells/#size-cells on the root: 2 and 1 (§2.3.5).
        let mut b = Builder::new();
        b.begin("").begin("dev@1").cells("reg", &[0, 1, 0x10]).end();
        b.begin("bad@1").cells("reg", &[0, 1]).end().end();
        let blob = b.finish();
        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(regs(fdt.find_node("/dev").unwrap().unwrap()), [(1, 0x10)]);
        let bad = fdt.find_node("/bad").unwrap().unwrap();
        assert!(matches!(bad.reg(), Err(FdtError::BadValue { .. })));
    }

    #[test]
    fn finds_compatible_nodes_with_their_parents() {
        let blob = sample();
        let fdt = Fdt::new(&blob).unwrap();
        let uart = fdt.find_compatible("arm,primecell").unwrap().unwrap();
        assert_eq!(uart.name(), "pl011@9000000");
        let soc_uart = fdt.find_compatible("ns16550a").unwrap().unwrap();
        assert_eq!(regs(soc_uart), [(0x1000, 0x100), (0x2000, 0x200)]);
        let cpus: Vec<_> = fdt
            .compatible_nodes("arm,cortex-a72")
            .map(|n| regs(n.unwrap()))
            .collect();
        assert_eq!(cpus, [[(0, 0)], [(1, 0)]]);
        assert!(fdt.find_compatible("arm,pl01").unwrap().is_none());
        assert_eq!(
            fdt.find_compatible("linux,dummy-virt")
                .unwrap()
                .unwrap()
                .name(),
            ""
        );
    }
}
