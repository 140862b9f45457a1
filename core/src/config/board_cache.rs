//! The board's last-level cache as its device tree describes it: the unified cache node of the
//! highest level (Devicetree Specification, "Multi-level and Shared Cache Nodes": `compatible =
//! "cache"`, `cache-level`, `cache-unified`) and its `cache-size`, `cache-sets` and
//! `cache-line-size` (or `cache-block-size`, which a line size only overrides).
//!
//! The CPUs' `next-level-cache` phandles lead to the same node; scanning every node and taking
//! the highest level is enough, and reads a level-3 cache outside `/cpus` as well.

use super::board_nodes::BoardNodes;
use crate::colour::CacheGeometry;
use crate::fdt::{Fdt, FdtError, Node};

/// The levels of cache a last-level cache may be: a level 1 is split and private to its CPU.
const LEVELS: core::ops::RangeInclusive<u32> = 2..=3;

/// The board's last-level cache: its node's path and its geometry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BoardCache {
    /// Its node in the board's device tree.
    pub path: String,
    /// Its size, ways and line size.
    pub geometry: CacheGeometry,
}

/// The unified cache of the highest level in `fdt` (the first in the tree of that level), or
/// what the tree lacks, as a clause that follows "the board's device tree".
pub(super) fn last_level_cache(fdt: &Fdt) -> Result<BoardCache, String> {
    let nodes = BoardNodes::new(fdt).map_err(|error| format!("cannot be read: {error}"))?;
    let mut found: Option<(u32, usize)> = None;
    for index in nodes.indices() {
        let Some(entry) = nodes.entry(index) else {
            continue;
        };
        let Some(level) = unified_level(&entry.node)
            .map_err(|error| format!("cannot be read at '{}': {error}", entry.path))?
        else {
            continue;
        };
        if found.is_none_or(|(highest, _)| level > highest) {
            found = Some((level, index));
        }
    }
    let Some(entry) = found.and_then(|(_, index)| nodes.entry(index)) else {
        return Err(
            "has no unified level-2 or level-3 cache node (compatible \"cache\", cache-unified)"
                .to_string(),
        );
    };
    let path = entry.path.to_string();
    let node = entry.node;
    let read = |name: &str| -> Result<Option<u32>, String> {
        node.property_u32(name)
            .map_err(|error| format!("cannot be read at '{path}': {error}"))
    };
    let missing = |name: &str| format!("gives its cache node '{path}' no {name}");
    let size = read("cache-size")?.ok_or_else(|| missing("cache-size"))?;
    let sets = read("cache-sets")?.ok_or_else(|| missing("cache-sets"))?;
    let line = match read("cache-line-size")? {
        Some(line) => line,
        None => read("cache-block-size")?.ok_or_else(|| missing("cache-line-size"))?,
    };
    let way_bytes = u64::from(sets) * u64::from(line);
    let size = u64::from(size);
    let ways = (way_bytes != 0 && size.is_multiple_of(way_bytes))
        .then(|| u32::try_from(size / way_bytes).ok())
        .flatten()
        .ok_or_else(|| {
            format!(
                "gives its cache node '{path}' a cache-size of {size} bytes, not a whole number \
                 of ways of cache-sets {sets} × cache-line-size {line}"
            )
        })?;
    Ok(BoardCache {
        path,
        geometry: CacheGeometry { size, ways, line },
    })
}

/// The level of `node` if it is a unified cache of one of the [`LEVELS`].
fn unified_level(node: &Node) -> Result<Option<u32>, FdtError> {
    if !node.is_compatible("cache")? || node.property("cache-unified")?.is_none() {
        return Ok(None);
    }
    Ok(node
        .property_u32("cache-level")?
        .filter(|level| LEVELS.contains(level)))
}
