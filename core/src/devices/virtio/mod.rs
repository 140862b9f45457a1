//! Virtio devices over MMIO (virtio 1.2): the transport, split virtqueues, the console, and
//! the guest-memory access they go through.

pub mod console;
pub mod memory;
pub mod mmio;
pub mod queue;

#[cfg(test)]
mod tests;

pub use console::{Effect, VirtioConsole};
pub use memory::{GuestMemory, MemoryError};
pub use queue::QueueError;
