//! One access a VM must not get away with, named by `keel.probe=<kind>:<address>`: Keel stops
//! the VM with a diagnostic naming it (or the guest's own vector reports an access the
//! architecture makes UNDEFINED at EL1), and nothing else is disturbed.
//!
//! | kind | access |
//! | --- | --- |
//! | `read8`, `read32`, `read64`, `write32`, `write64` | a load or store at the address |
//! | `fetch` | a branch to the address |
//! | `sysreg` | the system register access named by the address field (see [`sysreg`]) |
//!
//! The GIC system registers (`icc_*`) exist on a GICv3 only: on a GICv2 the guest says so and
//! makes the access anyway, which is UNDEFINED at EL1 (its own vector reports it, and Keel
//! stops the VM), the containment the attack matrix expects there.

use core::arch::asm;
use core::ptr::{read_volatile, write_volatile};

use keel_guest::gic::{self, Version};
use keel_guest::println;

/// Performs the probe `spec` (`kind:hex`); returns only if the VM survived it.
pub fn probe(spec: &str) {
    let Some((kind, argument)) = spec.split_once(':') else {
        println!("hostile: bad keel.probe '{spec}': expected kind:address");
        return;
    };
    if kind == "sysreg" {
        sysreg(argument);
        return;
    }
    let digits = argument.trim_start_matches("0x");
    let Ok(address) = u64::from_str_radix(digits, 16) else {
        println!("hostile: bad address in keel.probe '{spec}'");
        return;
    };
    println!("hostile: probe {kind} at {address:#x}");
    // SAFETY: (all arms) deliberately hostile: the address is outside anything this guest
    // owns, so no Rust object lives there; the point is that Keel refuses the access.
    unsafe {
        match kind {
            "read8" => println!("hostile: read {:#x}", read_volatile(address as *const u8)),
            "read32" => println!("hostile: read {:#x}", read_volatile(address as *const u32)),
            "read64" => println!("hostile: read {:#x}", read_volatile(address as *const u64)),
            "write32" => write_volatile(address as *mut u32, 0x6b65_656c),
            "write64" => write_volatile(address as *mut u64, 0x6b65_656c_6b65_656c),
            "fetch" => {
                let target: extern "C" fn() = core::mem::transmute(address as usize);
                target();
            }
            _ => println!("hostile: unknown probe kind '{kind}'"),
        }
    }
    println!("hostile: probe survived");
}

/// The system register accesses a guest is not given, by name.
fn sysreg(name: &str) {
    println!("hostile: probe sysreg {name}");
    if name.starts_with("icc_") && gic::version() == Version::V2 {
        println!(
            "hostile: {name} is a GICv3 CPU interface register: on this GICv2 it is UNDEFINED at EL1"
        );
    }
    let mut value: u64 = 0;
    // SAFETY: (all arms) deliberately hostile accesses to single system registers; no memory
    // is touched. Each traps to Keel (or is UNDEFINED at EL1), which must stop the VM.
    unsafe {
        match name {
            "actlr_el1-write" => asm!("msr actlr_el1, {}", in(reg) 0u64, options(nomem, nostack)),
            "actlr_el1-read" => asm!("mrs {}, actlr_el1", out(reg) value, options(nomem, nostack)),
            "pmccntr_el0" => asm!("mrs {}, pmccntr_el0", out(reg) value, options(nomem, nostack)),
            "pmcr_el0-write" => asm!("msr pmcr_el0, {}", in(reg) 1u64, options(nomem, nostack)),
            "cntp_ctl_el0" => asm!("mrs {}, cntp_ctl_el0", out(reg) value, options(nomem, nostack)),
            "cntp_cval_el0-write" => {
                asm!("msr cntp_cval_el0, {}", in(reg) 0u64, options(nomem, nostack))
            }
            "hcr_el2" => asm!("mrs {}, hcr_el2", out(reg) value, options(nomem, nostack)),
            "vttbr_el2-write" => asm!("msr vttbr_el2, {}", in(reg) 0u64, options(nomem, nostack)),
            "icc_sgi0r_el1" => {
                asm!("msr s3_0_c12_c11_7, {}", in(reg) 0xffffu64, options(nomem, nostack))
            }
            "icc_asgi1r_el1" => {
                asm!("msr s3_0_c12_c11_6, {}", in(reg) 0xffffu64, options(nomem, nostack))
            }
            "cpuactlr_el1" => {
                asm!("mrs {}, s3_1_c15_c2_0", out(reg) value, options(nomem, nostack))
            }
            "l2ctlr_el1-write" => {
                asm!("msr s3_1_c11_c0_2, {}", in(reg) 0u64, options(nomem, nostack))
            }
            _ => {
                println!("hostile: unknown system register probe '{name}'");
                return;
            }
        }
    }
    println!("hostile: probe survived, read {value:#x}");
}
