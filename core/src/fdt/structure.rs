//! Walking the structure block (§5.4): tokens, the one-time validation, and finding nodes and properties.

use super::bytes::{align4, read_u32, widen};
use super::{Fdt, FdtError, Node};

/// Structure block tokens (§5.4.1).
pub(super) const FDT_BEGIN_NODE: u32 = 0x1;
pub(super) const FDT_END_NODE: u32 = 0x2;
pub(super) const FDT_PROP: u32 = 0x3;
pub const FDT_NOP: u32 = 0x4;
pub(super) const FDT_END: u32 = 0x9;

/// One structure block token (§5.4.1), borrowed from the blob.
#[derive(Clone, Copy)]
pub(super) enum Token<'a> {
    BeginNode(&'a str),
    EndNode,
    Property { name_offset: usize, value: &'a [u8] },
    Nop,
    End,
}

impl<'a> Fdt<'a> {
    /// The error for a bad token at `offset` in the structure block.
    pub(super) fn bad_structure(&self, offset: usize) -> FdtError {
        FdtError::BadStructure(self.structure_offset.saturating_add(offset))
    }

    /// Decodes the token at `offset` and returns it with the offset of the next one (§5.4.1).
    pub(super) fn token(&self, offset: usize) -> Result<(Token<'a>, usize), FdtError> {
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
    pub(super) fn string(&self, name_offset: usize) -> Result<&'a str, FdtError> {
        let bad = FdtError::BadString(name_offset);
        let rest = self.strings.get(name_offset..).ok_or(bad)?;
        let length = rest.iter().position(|&b| b == 0).ok_or(bad)?;
        core::str::from_utf8(rest.get(..length).ok_or(bad)?).map_err(|_| bad)
    }

    /// Walks the structure block once; returns the offset of the root's `FDT_BEGIN_NODE`.
    pub(super) fn validate(&self) -> Result<usize, FdtError> {
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
    pub(super) fn skip_nops(&self, mut offset: usize) -> Result<usize, FdtError> {
        loop {
            match self.token(offset)? {
                (Token::Nop, next) => offset = next,
                _ => return Ok(offset),
            }
        }
    }

    /// The offset just after the `FDT_END_NODE` closing the node that begins at `begin`.
    pub(super) fn node_end(&self, begin: usize) -> Result<usize, FdtError> {
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
    pub(super) fn node_at(
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
    pub(super) fn descend_to(&self, begin: usize) -> Result<Node<'a>, FdtError> {
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
    pub(super) fn find_property(
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

#[cfg(test)]
mod tests {
    extern crate std;

    use super::super::tests::{regs, Builder};
    use super::*;
    use std::string::String;

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
}
