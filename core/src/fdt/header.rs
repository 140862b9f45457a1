//! The blob header (§5.2): [`total_size`], [`Fdt::new`] with its checks, and the header's fields.

use core::fmt;

use super::bytes::{read_u32, widen};
use super::iter::MemoryReservations;
use super::structure::Token;
use super::FdtError;

/// `magic` of the header (§5.2).
pub(super) const MAGIC: u32 = 0xd00d_feed;
/// Size of a version 16 header, which lacks `size_dt_struct` (§5.2).
pub(super) const HEADER_SIZE_V16: usize = 36;
/// Size of a version 17 header (§5.2).
pub(super) const HEADER_SIZE_V17: usize = 40;
/// Oldest `version` understood: the structure block layout is unchanged since 16 (§5.2).
pub(super) const OLDEST_VERSION: u32 = 16;
/// Newest format this reader implements; blobs whose `last_comp_version` is newer are refused.
pub(super) const NEWEST_VERSION: u32 = 17;

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

/// A flattened device tree blob whose header and structure block have been checked (§5).
#[derive(Clone, Copy)]
pub struct Fdt<'a> {
    /// The blob, cut to `totalsize`.
    pub(super) blob: &'a [u8],
    /// The structure block; token offsets below are relative to it.
    pub(super) structure: &'a [u8],
    /// Where the structure block starts in the blob, for error messages.
    pub(super) structure_offset: usize,
    /// The strings block.
    pub(super) strings: &'a [u8],
    /// Byte offset of the memory reservation block in the blob.
    pub(super) reservations_offset: usize,
    /// Offset of the root node's `FDT_BEGIN_NODE` token.
    pub(super) root_begin: usize,
    /// The root node's name (empty in practice).
    pub(super) root_name: &'a str,
    /// Offset of the first token after the root node's name.
    pub(super) root_properties: usize,
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
}

impl fmt::Debug for Fdt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fdt")
            .field("version", &self.version())
            .field("total_size", &self.blob.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::super::tests::{sample, Builder};
    use super::*;
    use std::vec::Vec;

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
}
