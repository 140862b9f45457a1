//! Why a device tree blob, or a lookup in it, was refused.

use core::fmt;

use super::header::{NEWEST_VERSION, OLDEST_VERSION};
use crate::text::{Hex, Out, Show};

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
    /// A path given to [`Fdt::find_node`](super::Fdt::find_node) does not start with `/` (§2.2.3).
    BadPath,
}

impl Show for FdtError {
    fn show(&self, out: &mut dyn Out) {
        let hex = |offset: usize| Hex(offset as u64, 0);
        match *self {
            Self::BadMagic => out.put("not a device tree blob: bad magic (expected 0xd00dfeed)"),
            Self::Truncated { needed, available } => crate::text!(
                out,
                "device tree blob truncated: needs ",
                needed,
                " bytes, ",
                available,
                " given"
            ),
            Self::BadVersion {
                version,
                last_compatible,
            } => crate::text!(
                out,
                "unsupported device tree version ",
                version,
                " (last compatible ",
                last_compatible,
                "); versions ",
                OLDEST_VERSION,
                "..=",
                NEWEST_VERSION,
                " are supported"
            ),
            Self::BadLayout(what) => crate::text!(out, "bad device tree header: ", what),
            Self::BadStructure(offset) => crate::text!(
                out,
                "malformed device tree structure at byte offset ",
                hex(offset)
            ),
            Self::BadString(name_offset) => crate::text!(
                out,
                "bad property name at strings block offset ",
                hex(name_offset)
            ),
            Self::BadNodeName(offset) => crate::text!(
                out,
                "node name at byte offset ",
                hex(offset),
                " is not valid UTF-8"
            ),
            Self::BadValue { offset, expected } => crate::text!(
                out,
                "property at byte offset ",
                hex(offset),
                " is not ",
                expected
            ),
            Self::UnsupportedCells {
                address_cells,
                size_cells,
            } => crate::text!(
                out,
                "unsupported #address-cells = ",
                address_cells,
                ", #size-cells = ",
                size_cells,
                " (1-2 address and 0-2 size cells are supported)"
            ),
            Self::BadPath => out.put("device tree path must start with '/'"),
        }
    }
}

impl fmt::Display for FdtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::text::fmt(self, f)
    }
}

impl core::error::Error for FdtError {}
