//! Iterators over string lists, cells, `reg` entries, properties, children,
//! compatible nodes and memory reservations, all borrowed from the blob.

use super::bytes::{read_u64, split_once};
use super::node::Property;
use super::structure::Token;
use super::{Fdt, FdtError, Node};

/// Splits a `<stringlist>` value; `None` if it is not NUL-terminated UTF-8.
pub(super) fn string_list(value: &[u8]) -> Option<StringList<'_>> {
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
        match split_once(rest, 0) {
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
    pub(super) bytes: &'a [u8],
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
    pub(super) bytes: &'a [u8],
    pub(super) address_cells: u32,
    pub(super) size_cells: u32,
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
    pub(super) fdt: Fdt<'a>,
    pub(super) offset: usize,
    pub(super) done: bool,
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
    pub(super) fdt: Fdt<'a>,
    /// The parent's properties offset, given to each child.
    pub(super) parent: usize,
    pub(super) offset: usize,
    pub(super) done: bool,
}

impl<'a> Children<'a> {
    /// The next child and the offset just after it.
    pub(super) fn next_with_end(&mut self) -> Option<Result<(Node<'a>, usize), FdtError>> {
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
    pub(super) fdt: Fdt<'a>,
    pub(super) compatible: &'b str,
    pub(super) offset: usize,
    pub(super) done: bool,
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
    pub(super) blob: &'a [u8],
    pub(super) offset: usize,
    pub(super) done: bool,
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
