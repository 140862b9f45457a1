//! Links the hypervisor at its load address and brings in the compiled system configuration.

use std::{env, fs, path::PathBuf};

fn main() {
    let dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed=link.ld");
    println!("cargo:rerun-if-env-changed=KEEL_CONFIG_RS");
    println!("cargo:rerun-if-env-changed=KEEL_GIC");
    println!("cargo:rerun-if-env-changed=KEEL_LINK_ADDRESS");

    // `cargo xtask build` sets KEEL_GIC=2 for a board with a GICv2 (the GICv3 driver is the
    // default) and KEEL_LINK_ADDRESS to where the board's loader puts Keel's image (the
    // configuration's hypervisor region + 2 MiB; QEMU virt's 0x4020_0000 by default).
    println!("cargo:rerun-if-env-changed=KEEL_UART");
    println!("cargo:rustc-check-cfg=cfg(keel_gic_v2)");
    println!("cargo:rustc-check-cfg=cfg(keel_uart_cadence)");
    // KEEL_UART=cadence for a board whose console is a Cadence UART (a PL011 by default).
    match env::var("KEEL_UART").as_deref() {
        Ok("cadence") => println!("cargo:rustc-cfg=keel_uart_cadence"),
        Ok("pl011") | Err(_) => {}
        Ok(other) => panic!("KEEL_UART must be pl011 or cadence, not {other:?}"),
    }
    match env::var("KEEL_GIC").as_deref() {
        Ok("2") => println!("cargo:rustc-cfg=keel_gic_v2"),
        Ok("3") | Err(_) => {}
        Ok(other) => panic!("KEEL_GIC must be 2 or 3, not {other:?}"),
    }
    let link_address = match env::var("KEEL_LINK_ADDRESS") {
        Ok(text) => {
            let digits = text.trim_start_matches("0x");
            u64::from_str_radix(digits, 16)
                .unwrap_or_else(|e| panic!("KEEL_LINK_ADDRESS {text:?} is not hexadecimal: {e}"))
        }
        Err(_) => 0x4020_0000,
    };
    assert!(
        link_address % 0x20_0000 == 0,
        "KEEL_LINK_ADDRESS {link_address:#x} is not 2 MiB aligned"
    );
    let script = fs::read_to_string(dir.join("link.ld"))
        .unwrap()
        .replace("LINK_ADDRESS", &format!("{link_address:#x}"));
    let linked = out_dir.join("link.ld");
    fs::write(&linked, script).unwrap();
    println!("cargo:rustc-link-arg-bins=-T{}", linked.display());

    // `cargo xtask build` points KEEL_CONFIG_RS at the configuration compiler's output. Without it
    // (plain `cargo build`/`clippy` of this crate) the image has no VM and powers off at once.
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("system.rs");
    let source = match env::var("KEEL_CONFIG_RS") {
        Ok(path) => {
            println!("cargo:rerun-if-changed={path}");
            fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read KEEL_CONFIG_RS {path}: {e}"))
        }
        Err(_) => EMPTY_SYSTEM.to_string(),
    };
    fs::write(out, source).unwrap();
}

const EMPTY_SYSTEM: &str = r#"
/// No configuration was compiled in.
pub static SYSTEM: keel_core::system::SystemDesc = keel_core::system::SystemDesc {
    name: "empty",
    board: keel_core::board::QEMU_VIRT,
    ram_base: keel_core::addr::PhysAddr(0x4000_0000),
    ram_size: 0x4000_0000,
    pcpus: 1,
    policies: &[keel_core::sched::Policy::Pinned],
    switch_cost_ns: 0,
    vms: &[],
    channels: &[],
    iommu: None,
};
pub const MESSAGE_POOL: usize = 0;
pub const TRACE_RING_BYTES: usize = 0;
pub const TRACE_RINGS: usize = 0;
pub const HEALTH: bool = false;
pub const SHARED_PCPUS: bool = false;
pub const COLOURED_TABLES: usize = 0;
pub const STAGE2_TABLES: usize = 0;
pub const SMMU_TABLES: usize = 0;
pub const KEEL_COLOURS: keel_core::colour::Colours = keel_core::colour::Colours { mask: 0, count: 0 };
pub const KEEL_REGION: (u64, u64) = (0, 0);
"#;
