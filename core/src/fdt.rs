//! Fallible, panic-free reader for flattened device tree blobs (Devicetree Specification v0.4, chapter 5).
//!
//! [`Fdt::new`] checks the header (§5.2) and walks the whole structure block once (§5.4),
//! so a malformed blob is rejected with a clear [`FdtError`] before anything else reads
//! it. Every later lookup still checks every index and returns `Result`: no input can
//! make this module panic, and every loop advances through the finite structure block,
//! so no input can make it hang. Nothing is allocated and no depth limit applies: the
//! parent of a node is found again by descending from the root when it is needed.

use core::fmt;

/// `magic` of the header (§5.2).
const MAGIC: u32 = 0xd00d_feed;
/// Size of a version 16 header, which lacks `size_dt_struct` (§5.2).
const HEADER_SIZE_V16: usize = 36;
/// Size of a version 17 header (§5.2).
const HEADER_SIZE_V17: usize = 40;
/// Oldest `version` understood: the structure block layout is unchanged since 16 (§5.2).
const OLDEST_VERSION: u32 = 16;
/// Newest format this reader implements; blobs whose `last_comp_version` is newer are refused.
const NEWEST_VERSION: u32 = 17;

/// Structure block tokens (§5.4.1).
const FDT_BEGIN_NODE: u32 = 0x1;
const FDT_END_NODE: u32 = 0x2;
const FDT_PROP: u32 = 0x3;
const FDT_NOP: u32 = 0x4;
const FDT_END: u32 = 0x9;

/// Default `#address-cells` and `#size-cells` when a node does not say (§2.3.5).
const DEFAULT_ADDRESS_CELLS: u32 = 2;
const DEFAULT_SIZE_CELLS: u32 = 1;

/// Why a blob or a lookup in it was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdtError {
    /// The blob does not start with the magic 0xd00dfeed (§5.2).
    BadMagic,
    /// The blob is shorter than its header or its `totalsize` field needs.
    Truncated {
        /// Bytes the header says the blob has.
        needed: usize,
        /// Bytes actually given.
        available: usize,
    },
    /// `version` is below 16 or `last_comp_version` above 17 (§5.2).
    BadVersion {
        /// The header's `version`.
        version: u32,
        /// The header's `last_comp_version`.
        last_compatible: u32,
    },
    /// A header field puts a block outside the blob, over the header, or misaligned (§5.2).
    BadLayout(&'static str),
    /// Malformed or unexpected structure block token at this byte offset of the blob (§5.4).
    BadStructure(usize),
    /// A property's name offset does not name a NUL-terminated UTF-8 string
    /// inside the strings block (§5.5); the value is the name offset.
    BadString(usize),
    /// The node name at this byte offset of the blob is not UTF-8 (§2.2.1).
    BadNodeName(usize),
    /// The value of the property whose token is at this byte offset of the blob
    /// does not have the form its type needs (§2.2.4).
    BadValue {
        /// Byte offset of the property's `FDT_PROP` token in the blob.
        offset: usize,
        /// What the value should have been.
        expected: &'static str,
    },
    /// `reg` needs 1 or 2 address cells and 0, 1 or 2 size cells (§2.3.5, §2.3.6).
    UnsupportedCells {
        /// The parent's `#address-cells`.
        address_cells: u32,
        /// The parent's `#size-cells`.
        size_cells: u32,
    },
    /// A path given to [`Fdt::find_node`] does not start with `/` (§2.2.3).
    BadPath,
}

impl fmt::Display for FdtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BadMagic => write!(f, "not a device tree blob: bad magic (expected 0xd00dfeed)"),
            Self::Truncated { needed, available } => {
                write!(
                    f,
                    "device tree blob truncated: needs {needed} bytes, {available} given"
                )
            }
            Self::BadVersion {
                version,
                last_compatible,
            } => write!(
                f,
                "unsupported device tree version {version} (last compatible {last_compatible}); \
                 versions {OLDEST_VERSION}..={NEWEST_VERSION} are supported"
            ),
            Self::BadLayout(what) => write!(f, "bad device tree header: {what}"),
            Self::BadStructure(offset) => {
                write!(
                    f,
                    "malformed device tree structure at byte offset {offset:#x}"
                )
            }
            Self::BadString(name_offset) => {
                write!(
                    f,
                    "bad property name at strings block offset {name_offset:#x}"
                )
            }
            Self::BadNodeName(offset) => {
                write!(f, "node name at byte offset {offset:#x} is not valid UTF-8")
            }
            Self::BadValue { offset, expected } => {
                write!(f, "property at byte offset {offset:#x} is not {expected}")
            }
            Self::UnsupportedCells {
                address_cells,
                size_cells,
            } => write!(
                f,
                "unsupported #address-cells = {address_cells}, #size-cells = {size_cells} \
                 (1-2 address and 0-2 size cells are supported)"
            ),
            Self::BadPath => write!(f, "device tree path must start with '/'"),
        }
    }
}

impl core::error::Error for FdtError {}

/// Reads the big-endian `u32` at `offset`, if the slice holds it.
fn read_u32(bytes: &[u8], offset: usize) -> Option<u32> {
    let end = offset.checked_add(4)?;
    let &[a, b, c, d] = bytes.get(offset..end)? else {
        return None;
    };
    Some(u32::from_be_bytes([a, b, c, d]))
}

/// Reads the big-endian `u64` at `offset`, if the slice holds it.
fn read_u64(bytes: &[u8], offset: usize) -> Option<u64> {
    let high = read_u32(bytes, offset)?;
    let low = read_u32(bytes, offset.checked_add(4)?)?;
    Some(u64::from(high) << 32 | u64::from(low))
}

/// Rounds up to the 4-byte token alignment (§5.4.1), `None` on overflow.
fn align4(offset: usize) -> Option<usize> {
    offset.checked_add(3).map(|o| o & !3)
}

/// Widens a header field; a value that does not fit fails every later bounds check.
fn widen(value: u32) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

/// Reads `magic` and `totalsize` from the start of a blob (§5.2), so that a caller
/// holding only a pointer can build a slice of the right length. Needs 8 bytes.
pub fn total_size(header: &[u8]) -> Result<usize, FdtError> {
    let truncated = FdtError::Truncated {
        needed: 8,
        available: header.len(),
    };
    if read_u32(header, 0).ok_or(truncated)? != MAGIC {
        return Err(FdtError::BadMagic);
    }
    let total = widen(read_u32(header, 4).ok_or(truncated)?);
    if total < HEADER_SIZE_V16 {
        return Err(FdtError::BadLayout("totalsize is smaller than the header"));
    }
    Ok(total)
}

/// One structure block token (§5.4.1), borrowed from the blob.
#[derive(Clone, Copy)]
enum Token<'a> {
    BeginNode(&'a str),
    EndNode,
    Property { name_offset: usize, value: &'a [u8] },
    Nop,
    End,
}

/// A property of a node: its name and raw big-endian value (§2.2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Property<'a> {
    /// The property name, from the strings block.
    pub name: &'a str,
    /// The raw value.
    pub value: &'a [u8],
}

/// A flattened device tree blob whose header and structure block have been checked (§5).
#[derive(Clone, Copy)]
pub struct Fdt<'a> {
    /// The blob, cut to `totalsize`.
    blob: &'a [u8],
    /// The structure block; token offsets below are relative to it.
    structure: &'a [u8],
    /// Where the structure block starts in the blob, for error messages.
    structure_offset: usize,
    /// The strings block.
    strings: &'a [u8],
    /// Byte offset of the memory reservation block in the blob.
    reservations_offset: usize,
    /// Offset of the root node's `FDT_BEGIN_NODE` token.
    root_begin: usize,
    /// The root node's name (empty in practice).
    root_name: &'a str,
    /// Offset of the first token after the root node's name.
    root_properties: usize,
}

impl<'a> Fdt<'a> {
    /// Checks the header (§5.2): magic, `version` >= 16, every block inside `totalsize`
    /// and aligned; then walks the structure block (§5.4) once, checking each token,
    /// that properties precede child nodes, that nodes nest and that `FDT_END` follows
    /// the root. `blob` may be longer than `totalsize`.
    pub fn new(blob: &'a [u8]) -> Result<Self, FdtError> {
        let total = total_size(blob)?;
        let blob = blob.get(..total).ok_or(FdtError::Truncated {
            needed: total,
            available: blob.len(),
        })?;
        // `total >= HEADER_SIZE_V16`, so fields 0..9 are present.
        let field = |index: usize| read_u32(blob, index * 4).unwrap_or(0);
        let version = field(5);
        let last_compatible = field(6);
        if version < OLDEST_VERSION || last_compatible > NEWEST_VERSION {
            return Err(FdtError::BadVersion {
                version,
                last_compatible,
            });
        }
        let header_size = if version >= 17 {
            HEADER_SIZE_V17
        } else {
            HEADER_SIZE_V16
        };
        if total < header_size {
            return Err(FdtError::BadLayout("totalsize is smaller than the header"));
        }
        let structure_offset = widen(field(2));
        let strings_offset = widen(field(3));
        let reservations_offset = widen(field(4));
        let strings_size = widen(field(8));
        let structure_size = if version >= 17 {
            widen(field(9))
        } else {
            total.saturating_sub(structure_offset)
        };
        if structure_offset < header_size || !structure_offset.is_multiple_of(4) {
            return Err(FdtError::BadLayout(
                "structure block overlaps the header or is unaligned",
            ));
        }
        if reservations_offset < header_size
            || !reservations_offset.is_multiple_of(8)
            || reservations_offset >= total
        {
            return Err(FdtError::BadLayout(
                "memory reservation block overlaps the header, is unaligned or outside the blob",
            ));
        }
        let structure = structure_offset
            .checked_add(structure_size)
            .and_then(|end| blob.get(structure_offset..end))
            .ok_or(FdtError::BadLayout(
                "structure block extends past totalsize",
            ))?;
        let strings = strings_offset
            .checked_add(strings_size)
            .and_then(|end| blob.get(strings_offset..end))
            .ok_or(FdtError::BadLayout("strings block extends past totalsize"))?;
        let mut fdt = Self {
            blob,
            structure,
            structure_offset,
            strings,
            reservations_offset,
            root_begin: 0,
            root_name: "",
            root_properties: 0,
        };
        fdt.root_begin = fdt.validate()?;
        let (Token::BeginNode(name), properties) = fdt.token(fdt.root_begin)? else {
            return Err(fdt.bad_structure(fdt.root_begin));
        };
        fdt.root_name = name;
        fdt.root_properties = properties;
        Ok(fdt)
    }

    /// The blob, cut to its `totalsize`.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.blob
    }

    /// The header's `version` (§5.2).
    pub fn version(&self) -> u32 {
        read_u32(self.blob, 20).unwrap_or(0)
    }

    /// The header's `boot_cpuid_phys`: the `reg` of the boot CPU's node (§5.2).
    pub fn boot_cpu_id(&self) -> u32 {
        read_u32(self.blob, 28).unwrap_or(0)
    }

    /// The memory reservation block's entries (§5.3).
    pub fn reserved_memory(&self) -> MemoryReservations<'a> {
        MemoryReservations {
            blob: self.blob,
            offset: self.reservations_offset,
            done: false,
        }
    }

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
        for component in relative.split('/').filter(|c| !c.is_empty()) {
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

    /// The error for a bad token at `offset` in the structure block.
    fn bad_structure(&self, offset: usize) -> FdtError {
        FdtError::BadStructure(self.structure_offset.saturating_add(offset))
    }

    /// Decodes the token at `offset` and returns it with the offset of the next one (§5.4.1).
    fn token(&self, offset: usize) -> Result<(Token<'a>, usize), FdtError> {
        let bad = || self.bad_structure(offset);
        let tag = read_u32(self.structure, offset).ok_or_else(bad)?;
        let body = offset.checked_add(4).ok_or_else(bad)?;
        let (token, next) = match tag {
            FDT_BEGIN_NODE => {
                let rest = self.structure.get(body..).ok_or_else(bad)?;
                let length = rest.iter().position(|&b| b == 0).ok_or_else(bad)?;
                let name = rest.get(..length).ok_or_else(bad)?;
                let name = core::str::from_utf8(name).map_err(|_| {
                    FdtError::BadNodeName(self.structure_offset.saturating_add(body))
                })?;
                let next = body
                    .checked_add(length)
                    .and_then(|e| align4(e.checked_add(1)?));
                (Token::BeginNode(name), next)
            }
            FDT_END_NODE => (Token::EndNode, Some(body)),
            FDT_PROP => {
                let length = widen(read_u32(self.structure, body).ok_or_else(bad)?);
                let name_offset = widen(
                    read_u32(self.structure, body.checked_add(4).ok_or_else(bad)?)
                        .ok_or_else(bad)?,
                );
                let start = body.checked_add(8).ok_or_else(bad)?;
                let end = start.checked_add(length).ok_or_else(bad)?;
                let value = self.structure.get(start..end).ok_or_else(bad)?;
                (Token::Property { name_offset, value }, align4(end))
            }
            FDT_NOP => (Token::Nop, Some(body)),
            FDT_END => (Token::End, Some(body)),
            _ => return Err(bad()),
        };
        // Padding after the last token may run past an unaligned block end: refuse it.
        match next {
            Some(next) if next <= self.structure.len() => Ok((token, next)),
            _ => Err(bad()),
        }
    }

    /// The property name at `name_offset` in the strings block (§5.5).
    fn string(&self, name_offset: usize) -> Result<&'a str, FdtError> {
        let bad = FdtError::BadString(name_offset);
        let rest = self.strings.get(name_offset..).ok_or(bad)?;
        let length = rest.iter().position(|&b| b == 0).ok_or(bad)?;
        core::str::from_utf8(rest.get(..length).ok_or(bad)?).map_err(|_| bad)
    }

    /// Walks the structure block once; returns the offset of the root's `FDT_BEGIN_NODE`.
    fn validate(&self) -> Result<usize, FdtError> {
        let root = self.skip_nops(0)?;
        let mut offset = root;
        let mut depth: usize = 0;
        // Whether the innermost open node already had a child: properties must come first (§5.4.2).
        let mut had_child = false;
        loop {
            let (token, next) = self.token(offset)?;
            match token {
                Token::BeginNode(_) => {
                    depth += 1;
                    had_child = false;
                }
                Token::EndNode if depth > 0 => {
                    depth -= 1;
                    had_child = true;
                    if depth == 0 {
                        offset = next;
                        break;
                    }
                }
                Token::Property { name_offset, .. } if depth > 0 && !had_child => {
                    self.string(name_offset)?;
                }
                Token::Nop if depth > 0 => {}
                _ => return Err(self.bad_structure(offset)),
            }
            offset = next;
        }
        let end = self.skip_nops(offset)?;
        match self.token(end)? {
            (Token::End, _) => Ok(root),
            _ => Err(self.bad_structure(end)),
        }
    }

    /// The offset of the first token at or after `offset` that is not `FDT_NOP`.
    fn skip_nops(&self, mut offset: usize) -> Result<usize, FdtError> {
        loop {
            match self.token(offset)? {
                (Token::Nop, next) => offset = next,
                _ => return Ok(offset),
            }
        }
    }

    /// The offset just after the `FDT_END_NODE` closing the node that begins at `begin`.
    fn node_end(&self, begin: usize) -> Result<usize, FdtError> {
        let mut offset = begin;
        let mut depth: usize = 0;
        loop {
            let (token, next) = self.token(offset)?;
            match token {
                Token::BeginNode(_) => depth += 1,
                Token::EndNode if depth > 0 => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(next);
                    }
                }
                Token::Property { .. } | Token::Nop if depth > 0 => {}
                _ => return Err(self.bad_structure(offset)),
            }
            offset = next;
        }
    }

    /// The node starting at `begin`, whose parent's properties start at `parent_properties`.
    fn node_at(
        &self,
        begin: usize,
        parent_properties: Option<usize>,
    ) -> Result<Node<'a>, FdtError> {
        match self.token(begin)? {
            (Token::BeginNode(name), properties) => Ok(Node {
                fdt: *self,
                name,
                begin,
                properties,
                parent_properties,
            }),
            _ => Err(self.bad_structure(begin)),
        }
    }

    /// The node starting at `begin`, found by descending from the root so that it
    /// knows its parent. Each step skips earlier siblings once: linear in the blob.
    fn descend_to(&self, begin: usize) -> Result<Node<'a>, FdtError> {
        let mut node = self.root();
        // Each step moves to a child, which begins strictly later: this terminates.
        while node.begin != begin {
            let mut children = node.children();
            node = loop {
                match children.next_with_end() {
                    Some(Ok((child, end))) if child.begin <= begin && begin < end => break child,
                    Some(Ok(_)) => {}
                    Some(Err(error)) => return Err(error),
                    None => return Err(self.bad_structure(begin)),
                }
            };
        }
        Ok(node)
    }

    /// The value of property `name` among the properties starting at `offset` (§5.4.2),
    /// with the offset of its token.
    fn find_property(
        &self,
        mut offset: usize,
        name: &str,
    ) -> Result<Option<(usize, &'a [u8])>, FdtError> {
        loop {
            match self.token(offset)? {
                (Token::Property { name_offset, value }, next) => {
                    if self.string(name_offset)? == name {
                        return Ok(Some((offset, value)));
                    }
                    offset = next;
                }
                (Token::Nop, next) => offset = next,
                (Token::BeginNode(_) | Token::EndNode, _) => return Ok(None),
                (Token::End, _) => return Err(self.bad_structure(offset)),
            }
        }
    }
}

impl fmt::Debug for Fdt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fdt")
            .field("version", &self.version())
            .field("total_size", &self.blob.len())
            .finish_non_exhaustive()
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

/// Whether a node called `name` matches a path component (§2.2.1, §2.2.3).
fn name_matches(name: &str, component: &str) -> bool {
    name == component
        || (!component.contains('@')
            && name
                .split_once('@')
                .is_some_and(|(base, _)| base == component))
}

/// A node of the tree (§2.2), borrowed from the blob.
#[derive(Clone, Copy)]
pub struct Node<'a> {
    fdt: Fdt<'a>,
    name: &'a str,
    /// Offset of the node's `FDT_BEGIN_NODE` token in the structure block.
    begin: usize,
    /// Offset of the first token after the node's name.
    properties: usize,
    /// The parent's `properties`, `None` for the root.
    parent_properties: Option<usize>,
}

impl<'a> Node<'a> {
    /// The full name, `node-name@unit-address` (§2.2.1); empty for the root.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The name without its unit address (§2.2.1).
    pub fn base_name(&self) -> &'a str {
        self.name
            .split_once('@')
            .map_or(self.name, |(base, _)| base)
    }

    /// The unit address after `@`, if the name has one (§2.2.1).
    pub fn unit_address(&self) -> Option<&'a str> {
        self.name.split_once('@').map(|(_, unit)| unit)
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

/// Splits a `<stringlist>` value; `None` if it is not NUL-terminated UTF-8.
fn string_list(value: &[u8]) -> Option<StringList<'_>> {
    let rest = match value.split_last() {
        None => None,
        Some((0, text)) => Some(core::str::from_utf8(text).ok()?),
        Some(_) => return None,
    };
    Some(StringList { rest })
}

/// The strings of a `<stringlist>` property (§2.2.4).
#[derive(Clone, Debug)]
pub struct StringList<'a> {
    /// The strings not yet returned, NUL-separated, without the final NUL.
    rest: Option<&'a str>,
}

impl<'a> Iterator for StringList<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let rest = self.rest?;
        match rest.split_once('\0') {
            Some((first, tail)) => {
                self.rest = Some(tail);
                Some(first)
            }
            None => self.rest.take(),
        }
    }
}

/// Big-endian 32-bit cells of a property value (§2.2.4).
#[derive(Clone, Debug)]
pub struct CellIter<'a> {
    bytes: &'a [u8],
}

impl Iterator for CellIter<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        let (&cell, rest) = self.bytes.split_first_chunk::<4>()?;
        self.bytes = rest;
        Some(u32::from_be_bytes(cell))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let cells = self.bytes.len() / 4;
        (cells, Some(cells))
    }
}

impl ExactSizeIterator for CellIter<'_> {}

/// `(address, size)` entries of a `reg` property (§2.3.6).
#[derive(Clone, Debug)]
pub struct RegIter<'a> {
    bytes: &'a [u8],
    address_cells: u32,
    size_cells: u32,
}

impl RegIter<'_> {
    /// Reads a number of `cells` (0..=2) cells from the front.
    fn take(&mut self, cells: u32) -> Option<u64> {
        let mut number = 0u64;
        for _ in 0..cells {
            let (&cell, rest) = self.bytes.split_first_chunk::<4>()?;
            self.bytes = rest;
            number = number << 32 | u64::from(u32::from_be_bytes(cell));
        }
        Some(number)
    }
}

impl Iterator for RegIter<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        let address = self.take(self.address_cells)?;
        let size = self.take(self.size_cells)?;
        Some((address, size))
    }
}

/// The properties of a node (§5.4.2).
#[derive(Clone, Debug)]
pub struct Properties<'a> {
    fdt: Fdt<'a>,
    offset: usize,
    done: bool,
}

impl<'a> Iterator for Properties<'a> {
    type Item = Result<Property<'a>, FdtError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let result = self.fdt.token(self.offset);
            match result {
                Ok((Token::Property { name_offset, value }, next)) => {
                    self.offset = next;
                    let name = self.fdt.string(name_offset);
                    self.done = name.is_err();
                    return Some(name.map(|name| Property { name, value }));
                }
                Ok((Token::Nop, next)) => self.offset = next,
                Ok((Token::BeginNode(_) | Token::EndNode, _)) => self.done = true,
                Ok((Token::End, _)) => {
                    self.done = true;
                    return Some(Err(self.fdt.bad_structure(self.offset)));
                }
                Err(error) => {
                    self.done = true;
                    return Some(Err(error));
                }
            }
        }
        None
    }
}

/// The child nodes of a node (§5.4.2); stops after the first error.
#[derive(Clone, Debug)]
pub struct Children<'a> {
    fdt: Fdt<'a>,
    /// The parent's properties offset, given to each child.
    parent: usize,
    offset: usize,
    done: bool,
}

impl<'a> Children<'a> {
    /// The next child and the offset just after it.
    fn next_with_end(&mut self) -> Option<Result<(Node<'a>, usize), FdtError>> {
        if self.done {
            return None;
        }
        let result = self.step();
        self.done = !matches!(result, Some(Ok(_)));
        result
    }

    fn step(&mut self) -> Option<Result<(Node<'a>, usize), FdtError>> {
        loop {
            let (token, next) = match self.fdt.token(self.offset) {
                Ok(decoded) => decoded,
                Err(error) => return Some(Err(error)),
            };
            match token {
                Token::Property { .. } | Token::Nop => self.offset = next,
                Token::BeginNode(_) => {
                    let begin = self.offset;
                    let child = self.fdt.node_at(begin, Some(self.parent));
                    let end = self.fdt.node_end(begin);
                    return Some(child.and_then(|child| {
                        let end = end?;
                        self.offset = end;
                        Ok((child, end))
                    }));
                }
                Token::EndNode => return None,
                Token::End => return Some(Err(self.fdt.bad_structure(self.offset))),
            }
        }
    }
}

impl<'a> Iterator for Children<'a> {
    type Item = Result<Node<'a>, FdtError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_with_end()
            .map(|result| result.map(|(node, _)| node))
    }
}

/// Nodes compatible with a string, in blob order (§2.3.1); stops after the first error.
#[derive(Clone, Debug)]
pub struct CompatibleNodes<'a, 'b> {
    fdt: Fdt<'a>,
    compatible: &'b str,
    offset: usize,
    done: bool,
}

impl<'a> CompatibleNodes<'a, '_> {
    fn step(&mut self) -> Result<Option<Node<'a>>, FdtError> {
        loop {
            let begin = self.offset;
            let (token, next) = self.fdt.token(begin)?;
            self.offset = next;
            match token {
                Token::BeginNode(_) => {
                    let Some((offset, value)) = self.fdt.find_property(next, "compatible")? else {
                        continue;
                    };
                    let list = string_list(value).ok_or(FdtError::BadValue {
                        offset: self.fdt.structure_offset.saturating_add(offset),
                        expected: "a list of NUL-terminated UTF-8 strings",
                    })?;
                    if list.clone().any(|c| c == self.compatible) {
                        return self.fdt.descend_to(begin).map(Some);
                    }
                }
                Token::End => return Ok(None),
                Token::EndNode | Token::Property { .. } | Token::Nop => {}
            }
        }
    }
}

impl<'a> Iterator for CompatibleNodes<'a, '_> {
    type Item = Result<Node<'a>, FdtError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let result = self.step().transpose();
        self.done = !matches!(result, Some(Ok(_)));
        result
    }
}

/// Entries `(address, size)` of the memory reservation block (§5.3), up to the
/// terminating zero entry; stops after the first error.
#[derive(Clone, Debug)]
pub struct MemoryReservations<'a> {
    blob: &'a [u8],
    offset: usize,
    done: bool,
}

impl Iterator for MemoryReservations<'_> {
    type Item = Result<(u64, u64), FdtError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let entry = self.offset.checked_add(8).and_then(|size| {
            Some((
                read_u64(self.blob, self.offset)?,
                read_u64(self.blob, size)?,
            ))
        });
        match entry {
            Some((0, 0)) => {
                self.done = true;
                None
            }
            Some(entry) => {
                self.offset = self.offset.saturating_add(16);
                Some(Ok(entry))
            }
            None => {
                self.done = true;
                Some(Err(FdtError::BadLayout(
                    "memory reservation block is not terminated",
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::string::String;
    use std::vec::Vec;

    /// A minimal blob writer for tests (§5): header, reservations, structure, strings.
    struct Builder {
        structure: Vec<u8>,
        strings: Vec<u8>,
        reservations: Vec<(u64, u64)>,
        version: u32,
    }

    impl Builder {
        fn new() -> Self {
            Self {
                structure: Vec::new(),
                strings: Vec::new(),
                reservations: Vec::new(),
                version: 17,
            }
        }

        fn word(&mut self, word: u32) -> &mut Self {
            self.structure.extend_from_slice(&word.to_be_bytes());
            self
        }

        fn pad(&mut self) {
            while !self.structure.len().is_multiple_of(4) {
                self.structure.push(0);
            }
        }

        fn begin(&mut self, name: &str) -> &mut Self {
            self.word(FDT_BEGIN_NODE);
            self.structure.extend_from_slice(name.as_bytes());
            self.structure.push(0);
            self.pad();
            self
        }

        fn end(&mut self) -> &mut Self {
            self.word(FDT_END_NODE)
        }

        fn nop(&mut self) -> &mut Self {
            self.word(FDT_NOP)
        }

        fn prop(&mut self, name: &str, value: &[u8]) -> &mut Self {
            let mut key = name.as_bytes().to_vec();
            key.push(0);
            let name_offset = match self.strings.windows(key.len()).position(|w| w == key) {
                Some(offset) => offset,
                None => {
                    self.strings.extend_from_slice(&key);
                    self.strings.len() - key.len()
                }
            };
            self.word(FDT_PROP)
                .word(value.len() as u32)
                .word(name_offset as u32);
            self.structure.extend_from_slice(value);
            self.pad();
            self
        }

        fn cells(&mut self, name: &str, cells: &[u32]) -> &mut Self {
            let value: Vec<u8> = cells.iter().flat_map(|c| c.to_be_bytes()).collect();
            self.prop(name, &value)
        }

        fn strs(&mut self, name: &str, strings: &[&str]) -> &mut Self {
            let value: Vec<u8> = strings.iter().flat_map(|s| s.bytes().chain([0])).collect();
            self.prop(name, &value)
        }

        fn finish(&mut self) -> Vec<u8> {
            self.word(FDT_END);
            let reservations_offset = HEADER_SIZE_V17;
            let structure_offset = reservations_offset + 16 * (self.reservations.len() + 1);
            let strings_offset = structure_offset + self.structure.len();
            let total = strings_offset + self.strings.len();
            let header = [
                MAGIC,
                total as u32,
                structure_offset as u32,
                strings_offset as u32,
                reservations_offset as u32,
                self.version,
                16,
                0,
                self.strings.len() as u32,
                self.structure.len() as u32,
            ];
            let mut blob: Vec<u8> = header.iter().flat_map(|w| w.to_be_bytes()).collect();
            for &(address, size) in self.reservations.iter().chain([&(0, 0)]) {
                blob.extend_from_slice(&address.to_be_bytes());
                blob.extend_from_slice(&size.to_be_bytes());
            }
            blob.extend_from_slice(&self.structure);
            blob.extend_from_slice(&self.strings);
            blob
        }
    }

    /// A small tree shaped like QEMU's virt machine.
    fn sample() -> Vec<u8> {
        let mut b = Builder::new();
        b.reservations.push((0x4800_0000, 0x1000));
        b.begin("")
            .cells("#address-cells", &[2])
            .cells("#size-cells", &[2])
            .strs("compatible", &["linux,dummy-virt"])
            .nop();
        b.begin("chosen")
            .strs("bootargs", &["console=ttyAMA0 earlycon"])
            .end();
        b.begin("memory@40000000")
            .strs("device_type", &["memory"])
            .cells("reg", &[0, 0x4000_0000, 0, 0x4000_0000])
            .end();
        b.begin("cpus")
            .cells("#address-cells", &[1])
            .cells("#size-cells", &[0]);
        b.begin("cpu@0")
            .strs("compatible", &["arm,cortex-a72"])
            .cells("reg", &[0])
            .end();
        b.nop()
            .begin("cpu@1")
            .strs("compatible", &["arm,cortex-a72"])
            .cells("reg", &[1])
            .end();
        b.end();
        b.begin("pl011@9000000")
            .strs("compatible", &["arm,pl011", "arm,primecell"])
            .cells("reg", &[0, 0x0900_0000, 0, 0x1000])
            .cells("interrupts", &[0, 1, 4])
            .prop("empty", &[])
            .end();
        b.begin("soc")
            .cells("#address-cells", &[1])
            .cells("#size-cells", &[1]);
        b.begin("uart@1000")
            .strs("compatible", &["ns16550a"])
            .cells("reg", &[0x1000, 0x100, 0x2000, 0x200])
            .end();
        b.begin("odd")
            .cells("#address-cells", &[3])
            .begin("x@0")
            .cells("reg", &[0, 0, 0, 1]);
        b.end().end();
        b.end();
        b.end();
        b.finish()
    }

    fn names<'a>(node: &Node<'a>) -> Vec<&'a str> {
        node.children().map(|c| c.unwrap().name()).collect()
    }

    fn regs(node: Node<'_>) -> Vec<(u64, u64)> {
        node.reg().unwrap().unwrap().collect()
    }

    #[test]
    fn header_and_reservations() {
        let blob = sample();
        assert_eq!(total_size(&blob), Ok(blob.len()));
        let mut longer = blob.clone();
        longer.extend_from_slice(&[0xff; 64]);
        let fdt = Fdt::new(&longer).unwrap();
        assert_eq!(fdt.as_bytes().len(), blob.len());
        assert_eq!(fdt.version(), 17);
        assert_eq!(fdt.boot_cpu_id(), 0);
        let reserved: Vec<_> = fdt.reserved_memory().collect();
        assert_eq!(reserved, [Ok((0x4800_0000, 0x1000))]);
    }

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

    #[test]
    fn accepts_version_16_without_structure_size() {
        let mut b = Builder::new();
        b.version = 16;
        b.begin("").begin("chosen").end().end();
        let mut blob = b.finish();
        blob[36..40].copy_from_slice(&[0xff; 4]); // size_dt_struct is not read before v17
        let fdt = Fdt::new(&blob).unwrap();
        assert!(fdt.find_node("/chosen").unwrap().is_some());
    }

    #[test]
    fn rejects_bad_headers() {
        let blob = sample();
        assert_eq!(
            total_size(&blob[..7]),
            Err(FdtError::Truncated {
                needed: 8,
                available: 7
            })
        );
        assert_eq!(
            Fdt::new(&[]).unwrap_err(),
            FdtError::Truncated {
                needed: 8,
                available: 0
            }
        );
        let needed = blob.len();
        assert_eq!(
            Fdt::new(&blob[..needed - 1]).unwrap_err(),
            FdtError::Truncated {
                needed,
                available: needed - 1
            }
        );
        let with = |index: usize, value: u32| {
            let mut blob = blob.clone();
            blob[index * 4..index * 4 + 4].copy_from_slice(&value.to_be_bytes());
            Fdt::new(&blob).unwrap_err()
        };
        assert_eq!(with(0, 0xd00d_feee), FdtError::BadMagic);
        assert_eq!(
            with(1, 8),
            FdtError::BadLayout("totalsize is smaller than the header")
        );
        assert_eq!(
            with(5, 15),
            FdtError::BadVersion {
                version: 15,
                last_compatible: 16
            }
        );
        assert_eq!(
            with(6, 18),
            FdtError::BadVersion {
                version: 17,
                last_compatible: 18
            }
        );
        assert!(matches!(with(2, 42), FdtError::BadLayout(_)));
        assert!(matches!(with(2, 8), FdtError::BadLayout(_)));
        assert!(matches!(with(3, u32::MAX), FdtError::BadLayout(_)));
        assert!(matches!(with(4, 44), FdtError::BadLayout(_)));
        assert!(matches!(with(8, u32::MAX - 2), FdtError::BadLayout(_)));
        assert!(matches!(with(9, 1 << 20), FdtError::BadLayout(_)));
        let message = std::format!("{}", with(0, 0));
        assert_eq!(
            message,
            "not a device tree blob: bad magic (expected 0xd00dfeed)"
        );
    }

    #[test]
    fn rejects_bad_structure() {
        // Property after a child node (§5.4.2).
        let mut b = Builder::new();
        b.begin("").begin("a").end().cells("late", &[1]).end();
        assert!(matches!(
            Fdt::new(&b.finish()),
            Err(FdtError::BadStructure(_))
        ));
        // Unclosed root.
        let mut b = Builder::new();
        b.begin("").begin("a").end();
        assert!(matches!(
            Fdt::new(&b.finish()),
            Err(FdtError::BadStructure(_))
        ));
        // Two roots.
        let mut b = Builder::new();
        b.begin("").end().begin("").end();
        assert!(matches!(
            Fdt::new(&b.finish()),
            Err(FdtError::BadStructure(_))
        ));
        // Property name outside the strings block.
        let mut b = Builder::new();
        b.begin("").cells("x", &[1]).end();
        let mut blob = b.finish();
        let name_offset = blob.len() - 2 - 4 - 4 - 4 - 4; // of END_NODE, END, value, nameoff
        blob[name_offset..name_offset + 4].copy_from_slice(&100u32.to_be_bytes());
        assert_eq!(Fdt::new(&blob).unwrap_err(), FdtError::BadString(100));
        // Non-UTF-8 node name.
        let mut b = Builder::new();
        b.begin("").begin("\u{e9}").end().end();
        let mut blob = b.finish();
        let at = blob.windows(2).position(|w| w == [0xc3, 0xa9]).unwrap();
        blob[at + 1] = 0xff;
        assert_eq!(Fdt::new(&blob).unwrap_err(), FdtError::BadNodeName(at));
    }

    #[test]
    fn deep_and_long_trees_terminate() {
        let mut b = Builder::new();
        b.begin("");
        for _ in 0..3000 {
            b.begin("n");
        }
        b.strs("compatible", &["deepest"]).cells("reg", &[7, 8, 9]);
        for _ in 0..3000 {
            b.end();
        }
        for i in 0..3000 {
            b.begin(&std::format!("s@{i}")).end();
        }
        b.end();
        let blob = b.finish();
        let fdt = Fdt::new(&blob).unwrap();
        let deepest = fdt.find_compatible("deepest").unwrap().unwrap();
        assert_eq!(regs(deepest), [(0x7_0000_0008, 9)]);
        assert_eq!(fdt.root().children().count(), 3001);
        assert_eq!(fdt.find_node("/s@2999").unwrap().unwrap().name(), "s@2999");
        let path: String = (0..3000).map(|_| "/n").collect();
        assert!(fdt.find_node(&path).unwrap().is_some());
    }

    /// Reads everything reachable in `blob`, returning how many nodes were visited.
    fn walk_everything(blob: &[u8]) -> usize {
        let _ = total_size(blob);
        let Ok(fdt) = Fdt::new(blob) else {
            return 0;
        };
        let _ = fdt.reserved_memory().count();
        let mut stack = std::vec![fdt.root()];
        let mut visited = 0;
        while let Some(node) = stack.pop() {
            visited += 1;
            let _ = (node.name(), node.base_name(), node.unit_address());
            for property in node.properties() {
                let Ok(property) = property else { break };
                let _ = node.property(property.name);
                let _ = node.property_str(property.name);
                let _ = node.property_u32(property.name);
                let _ = node.property_u64(property.name);
                let _ = node.strings(property.name).map(|s| s.map(|s| s.count()));
                let _ = node
                    .property_cells(property.name)
                    .map(|c| c.map(|c| c.count()));
            }
            let _ = node.reg().map(|r| r.map(|r| r.count()));
            let _ = node.interrupts().map(|r| r.map(|r| r.count()));
            let _ = node.is_compatible("arm,pl011");
            for child in node.children() {
                let Ok(child) = child else { break };
                stack.push(child);
            }
        }
        for path in ["/", "/chosen", "/memory", "/cpus/cpu@1", "/soc/uart/x"] {
            let _ = fdt
                .find_node(path)
                .map(|n| n.map(|n| n.reg().map(|r| r.map(|r| r.count()))));
        }
        let _ = fdt.compatible_nodes("arm,cortex-a72").count();
        let _ = fdt.find_compatible("ns16550a");
        visited
    }

    #[test]
    fn mutated_blobs_never_panic() {
        let blob = sample();
        assert_eq!(walk_everything(&blob), 11);
        for position in 0..blob.len() {
            for mask in [0x01, 0x04, 0x80, 0xff] {
                let mut mutated = blob.clone();
                mutated[position] ^= mask;
                walk_everything(&mutated);
            }
        }
        for length in 0..blob.len() {
            walk_everything(&blob[..length]);
        }
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut random = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut accepted = 0;
        for _ in 0..4000 {
            let mut mutated = blob.clone();
            for _ in 0..1 + random() % 4 {
                let position = (random() % mutated.len() as u64) as usize;
                // Mostly small values, as header fields and lengths are where bugs hide.
                mutated[position] = match random() % 3 {
                    0 => random() as u8,
                    1 => (random() % 8) as u8,
                    _ => 0xff,
                };
            }
            if walk_everything(&mutated) > 0 {
                accepted += 1;
            }
        }
        assert!(accepted > 0, "some mutations should leave a valid blob");
    }

    /// Runs `program` if it is installed, returning its success.
    fn run(program: &str, args: &[&str]) -> bool {
        std::process::Command::new(program)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    #[test]
    fn reads_a_dtc_compiled_blob() {
        let directory = std::env::temp_dir();
        let source = directory.join(std::format!("keel-fdt-{}.dts", std::process::id()));
        let output = source.with_extension("dtb");
        std::fs::write(
            &source,
            r#"/dts-v1/;
/memreserve/ 0x48000000 0x1000;
/ {
    #address-cells = <2>;
    #size-cells = <2>;
    compatible = "linux,dummy-virt";
    chosen { bootargs = "console=ttyAMA0"; stdout-path = "/pl011@9000000"; };
    memory@40000000 { device_type = "memory"; reg = <0x0 0x40000000 0x0 0x8000000>; };
    cpus {
        #address-cells = <1>;
        #size-cells = <0>;
        cpu@0 { device_type = "cpu"; compatible = "arm,cortex-a72"; reg = <0>; };
        cpu@1 { device_type = "cpu"; compatible = "arm,cortex-a72"; reg = <1>; };
    };
    intc@8000000 {
        compatible = "arm,gic-v3";
        reg = <0x0 0x8000000 0x0 0x10000>, <0x0 0x80a0000 0x0 0xf60000>;
        interrupt-controller;
        #interrupt-cells = <3>;
    };
    pl011@9000000 {
        compatible = "arm,pl011", "arm,primecell";
        reg = <0x0 0x9000000 0x0 0x1000>;
        interrupts = <0 1 4>;
    };
};
"#,
        )
        .unwrap();
        let compiled = run(
            "dtc",
            &[
                "-I",
                "dts",
                "-O",
                "dtb",
                "-o",
                output.to_str().unwrap(),
                source.to_str().unwrap(),
            ],
        );
        let _ = std::fs::remove_file(&source);
        if !compiled {
            std::eprintln!("dtc not available: skipping");
            return;
        }
        let blob = std::fs::read(&output).unwrap();
        let _ = std::fs::remove_file(&output);
        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(
            fdt.reserved_memory().collect::<Vec<_>>(),
            [Ok((0x4800_0000, 0x1000))]
        );
        let chosen = fdt.find_node("/chosen").unwrap().unwrap();
        assert_eq!(chosen.property_str("bootargs"), Ok(Some("console=ttyAMA0")));
        assert_eq!(
            regs(fdt.find_node("/memory").unwrap().unwrap()),
            [(0x4000_0000, 0x800_0000)]
        );
        let gic = fdt.find_compatible("arm,gic-v3").unwrap().unwrap();
        assert_eq!(regs(gic), [(0x800_0000, 0x1_0000), (0x80a_0000, 0xf6_0000)]);
        assert_eq!(gic.property("interrupt-controller"), Ok(Some(&[][..])));
        let uart = fdt.find_compatible("arm,pl011").unwrap().unwrap();
        assert_eq!(
            uart.interrupts().unwrap().unwrap().collect::<Vec<_>>(),
            [0, 1, 4]
        );
        assert_eq!(
            regs(fdt.find_node("/cpus/cpu@1").unwrap().unwrap()),
            [(1, 0)]
        );
        assert_eq!(walk_everything(&blob), 8);
    }

    #[test]
    fn reads_qemu_virt_blob() {
        let output =
            std::env::temp_dir().join(std::format!("keel-virt-{}.dtb", std::process::id()));
        let machine = std::format!(
            "virt,virtualization=on,gic-version=3,dumpdtb={}",
            output.to_str().unwrap()
        );
        let args = [
            "-M",
            &machine,
            "-cpu",
            "cortex-a72",
            "-smp",
            "3",
            "-m",
            "1G",
            "-display",
            "none",
        ];
        if !run("qemu-system-aarch64", &args) {
            std::eprintln!("qemu-system-aarch64 not available: skipping");
            return;
        }
        let blob = std::fs::read(&output).unwrap();
        let _ = std::fs::remove_file(&output);
        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(
            regs(fdt.find_node("/memory").unwrap().unwrap()),
            [(0x4000_0000, 0x4000_0000)]
        );
        let cpus = fdt.find_node("/cpus").unwrap().unwrap();
        let cpu_count = cpus
            .children()
            .filter(|c| c.unwrap().base_name() == "cpu")
            .count();
        assert_eq!(cpu_count, 3);
        assert_eq!(
            regs(fdt.find_node("/cpus/cpu@2").unwrap().unwrap()),
            [(2, 0)]
        );
        let uart = fdt.find_compatible("arm,pl011").unwrap().unwrap();
        assert_eq!(regs(uart)[0], (0x0900_0000, 0x1000));
        let gic = fdt.find_compatible("arm,gic-v3").unwrap().unwrap();
        assert_eq!(regs(gic)[0], (0x0800_0000, 0x1_0000));
        assert!(fdt.find_node("/chosen").unwrap().is_some());
        assert_eq!(fdt.compatible_nodes("virtio,mmio").count(), 32);
        assert!(walk_everything(&blob) > 40);
    }
}
