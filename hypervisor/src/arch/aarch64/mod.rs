//! AArch64 at EL2: boot, MMU, vectors, traps, GICv3, generic timer, PSCI.

pub mod boot;
pub mod context;
pub mod cpu;
pub mod gic;
pub mod guest;
mod mem;
pub mod mmio;
pub mod mmu;
pub mod pmu;
pub mod psci;
pub mod regs;
pub mod smmu;
pub mod stage2;
pub mod timer;
pub mod uart;
pub mod vectors;
