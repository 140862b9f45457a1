//! Links the hypervisor at its load address and brings in the compiled system configuration.

use std::{env, fs, path::PathBuf};

fn main() {
    let dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    println!(
        "cargo:rustc-link-arg-bins=-T{}",
        dir.join("link.ld").display()
    );
    println!("cargo:rerun-if-changed=link.ld");
    println!("cargo:rerun-if-env-changed=KEEL_CONFIG_RS");

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
    ram_base: keel_core::addr::PhysAddr(0x4000_0000),
    ram_size: 0,
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
"#;
