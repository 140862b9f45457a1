//! Hostile actions: a guest trying what Keel must refuse, each named by `keel.hostile=<mode>`.
//!
//! Every one but `smc` should end the VM (Keel stops it, or the guest's own vector reports
//! with KEEL_CRASH); if it returns, the guest says it survived and keeps ticking.

use core::arch::asm;
use core::ptr::{read_volatile, write_volatile};

use keel_guest::abi::psci;
use keel_guest::devicetree::BootInfo;
use keel_guest::gic::DISTRIBUTOR;
use keel_guest::println;

/// Distance past the end of the guest's memory that `write-outside` stores to.
const OUTSIDE_OFFSET: u64 = 0x1000;
/// GICD_ISENABLER1's offset in the distributor (the same on GICv2 and GICv3): set-enable
/// bits of INTIDs 32..63.
const GICD_ISENABLER1: usize = 0x0104;
/// INTID 34's bit in GICD_ISENABLER1: an SPI this guest does not own.
const FOREIGN_SPI_BIT: u32 = 1 << (34 - 32);

/// Performs the hostile action `mode`.
pub fn run(mode: &str, info: &BootInfo<'_>, target: Option<u64>) {
    println!("hostile: {mode}");
    match mode {
        "write-outside" => {
            let Some(memory) = info.memory else {
                println!("hostile: write-outside: the device tree has no /memory");
                return;
            };
            let address = memory.end() + OUTSIDE_OFFSET;
            // SAFETY: deliberately hostile: the address lies beyond the guest's RAM, so no
            // Rust object lives there; the point is to see the store refused.
            unsafe { write_volatile(address as *mut u64, 0x6b65_656c) };
        }
        "read-other" => {
            let Some(address) = target else {
                println!("hostile: read-other: no keel.target");
                return;
            };
            // SAFETY: deliberately hostile: the address belongs to another VM, never to this
            // guest's Rust objects; only a load is made and its value is discarded.
            let value = unsafe { read_volatile(address as *const u64) };
            println!("hostile: read-other read {value:#x}");
        }
        "gic-foreign" => {
            // SAFETY: deliberately hostile: a single aligned store to a distributor register,
            // not to memory.
            unsafe {
                write_volatile(
                    (DISTRIBUTOR.base() + GICD_ISENABLER1) as *mut u32,
                    FOREIGN_SPI_BIT,
                )
            };
        }
        "smc" => {
            let x0: u64;
            // SAFETY: PSCI_VERSION has no side effect; SMCCC changes only x0..x3.
            unsafe {
                asm!(
                    "smc #0",
                    inout("x0") u64::from(psci::VERSION) => x0,
                    out("x1") _, out("x2") _, out("x3") _,
                    options(nostack),
                )
            };
            println!("hostile: smc returned {}", x0 as i64);
            return;
        }
        "el2-reg" => {
            let value: u64;
            // SAFETY: deliberately hostile: reading HCR_EL2 at EL1 is UNDEFINED and goes to
            // the SDK's fatal synchronous vector; no memory is touched.
            unsafe { asm!("mrs {}, hcr_el2", out(reg) value, options(nomem, nostack)) };
            println!("hostile: el2-reg read {value:#x}");
        }
        "sysreg" => {
            // SAFETY: deliberately hostile: the implementation-defined auxiliary control
            // register, which Keel traps (HCR_EL2.TACR) and refuses; no memory is touched.
            unsafe { asm!("msr actlr_el1, {}", in(reg) 0u64, options(nomem, nostack)) };
        }
        "pmu" => {
            let dfr0: u64;
            // SAFETY: reads an ID register; no memory is touched.
            unsafe { asm!("mrs {}, id_aa64dfr0_el1", out(reg) dfr0, options(nomem, nostack)) };
            println!("hostile: pmu: ID_AA64DFR0_EL1.PMUVer {}", (dfr0 >> 8) & 0xf);
            let cycles: u64;
            // SAFETY: deliberately hostile: the cycle counter of a PMU the ID registers said
            // is absent, which Keel traps (MDCR_EL2.TPM) and refuses; no memory is touched.
            unsafe { asm!("mrs {}, pmccntr_el0", out(reg) cycles, options(nomem, nostack)) };
            println!("hostile: pmu read {cycles:#x}");
        }
        unknown => {
            println!("hostile: unknown mode {unknown}");
            return;
        }
    }
    println!("hostile: {mode} survived");
}
