//! A shared last-level cache for QEMU: a TCG plugin that feeds every guest load and store to
//! RAM into one set-associative, physically indexed cache with LRU sets, shared by all vCPUs,
//! and reports each vCPU's hits, misses and the cache colours it touched. QEMU has no cache
//! timing; this shows from outside what cache colouring does to who evicts whom.
//!
//! # Arguments
//! Each is one QEMU `arg=` (QEMU passes them as separate `key=value` strings):
//! `-plugin file=libkeel_llc_model.so,arg=size=1048576,arg=ways=16,arg=line=64,arg=out=/tmp/llc.txt`.
//!
//! | argument | meaning |
//! | --- | --- |
//! | `size=BYTES`, `ways=N`, `line=BYTES` | the cache (required; powers of two, as Keel colours them: [`keel_core::colour::CacheGeometry`]) |
//! | `out=PATH` | the report's file (created or emptied); without it, QEMU's log (`-d plugin`) |
//! | `range=NAME:0xSTART-0xEND` | also count the lookups in `START..END` (END not included) under NAME; several allowed |
//! | `exclude=0xSTART-0xEND` | count the lookups in `START..END` apart, as `excluded` (Keel's own image); several allowed |
//! | `interval=N` | after every N lookups of all vCPUs together, an interval line per vCPU |
//!
//! Numbers are decimal, or hexadecimal after `0x`. A bad argument stops QEMU at start with a
//! message naming it.
//!
//! # Report
//! One line each, fields `key=value` separated by spaces:
//!
//! ```text
//! llc size=1048576 ways=16 line=64 sets=1024 colours=16
//! llc interval vcpu=0 accesses=812 misses=31
//! llc vcpu=0 accesses=A hits=H misses=M misses_per_1000=X.XXX colours=0-3,8 excluded=E excluded_misses=EM
//! llc range=NAME accesses=A hits=H misses=M misses_per_1000=X.XXX
//! ```
//!
//! The header comes first (at QEMU's start), interval lines as intervals end, and the summary
//! when QEMU exits (written by QEMU's exit, so a QEMU killed by SIGKILL writes none; SIGTERM
//! and a guest's power-off do): a `vcpu` line for each vCPU, by QEMU's vCPU index, which is
//! Keel's pCPU number, then a `range` line for each `range=` in the order given.
//!
//! - An *access* is one lookup of one line: a load or store that spans two lines counts two.
//!   One that spans two pages counts only its lines in the first: QEMU gives the physical
//!   address of its first byte, and the next virtual page may be any physical page.
//! - `accesses`, `hits`, `misses` of a vCPU and of an interval leave out the excluded ranges;
//!   `excluded` and `excluded_misses` are the lookups in them. A range counts all lookups in
//!   it, of every vCPU, excluded or not.
//! - `colours` lists the colours of the lines the vCPU's (not excluded) lookups touched, in
//!   the form of Xen's `llc-colors` (`none` for none): colour = (address / 4096) mod colours,
//!   colours = size / ways / 4096.
//! - `interval` lines count the lookups since the previous interval.
//!
//! # What is modelled
//! Guest data loads and stores to RAM (not to I/O), by physical address, as QEMU's TCG
//! reports them: not instruction fetches, translation table walks or device DMA. The model
//! only counts: it never changes what the guest computes, only how fast QEMU runs it.
//!
//! `model` (the cache and counters), `args` and `report` are plain Rust, tested on the host;
//! `plugin` is the FFI to QEMU.

pub mod args;
pub mod model;
pub mod report;

// The FFI refers to QEMU's own functions, which only QEMU's binary defines: it is left out of
// the host tests' executables, which could not link it.
#[cfg(not(test))]
mod plugin;
