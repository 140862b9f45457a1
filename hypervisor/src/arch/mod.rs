//! The architecture layer: the only place with `asm!`, `unsafe` and raw hardware access.
//! It refers to nothing else of Keel (the bottom layer, see `main.rs`): where Keel's work must
//! run inside an arch sequence (the end of a masked stretch before a guest entry), the caller
//! passes it in.

pub mod aarch64;
pub use aarch64::*;
