//! Fallible, panic-free reader for flattened device tree blobs (Devicetree Specification v0.4, chapter 5).
//!
//! [`Fdt::new`] checks the header (§5.2) and walks the whole structure block once (§5.4),
//! so a malformed blob is rejected with a clear [`FdtError`] before anything else reads
//! it. Every later lookup still checks every index and returns `Result`: no input can
//! make this module panic, and every loop advances through the finite structure block,
//! so no input can make it hang. Nothing is allocated and no depth limit applies: the
//! parent of a node is found again by descending from the root when it is needed.

mod bytes;
mod error;
mod header;
mod iter;
mod node;
mod structure;
#[cfg(test)]
pub(crate) mod tests;

pub use error::FdtError;
pub use header::{total_size, Fdt};
pub use iter::{
    CellIter, Children, CompatibleNodes, MemoryReservations, Properties, RegIter, StringList,
};
pub use node::{Node, Property};
pub use structure::FDT_NOP;
