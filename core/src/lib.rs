//! Keel's portable core: everything that does not touch hardware, tested on the host.
#![cfg_attr(not(any(feature = "std", test)), no_std)]
#![forbid(unsafe_code)]

pub mod abi;
pub mod addr;
pub mod admission;
pub mod board;
pub mod channel;
pub mod colour;
pub mod console;
pub mod console_queue;
pub mod cpu_features;
pub mod devices;
pub mod esr;
pub mod fdt;
pub mod health;
pub mod histogram;
pub mod hypercall;
pub mod ipc;
pub mod keel_map;
pub mod placement;
pub mod ratelimit;
pub mod rng;
pub mod sched;
pub mod seed;
pub mod smmu;
pub mod stage2;
pub mod system;
pub mod table;
pub mod table_pools;
pub mod tasks;
pub mod text;
pub mod ticket;
pub mod trace;
mod translation;
pub mod window;

#[cfg(feature = "std")]
pub mod config;
#[cfg(feature = "std")]
pub mod fuzz;
