//! The architecture layer: the only place with `asm!`, `unsafe` and raw hardware access.

pub mod aarch64;
pub use aarch64::*;
