//! Links the sample real-time partition with the SDK's linker script (published by the SDK's build script).

fn main() {
    let script = std::env::var("DEP_KEEL_GUEST_LINKER_SCRIPT")
        .expect("keel-guest publishes its linker script (its `links` key)");
    println!("cargo:rerun-if-env-changed=DEP_KEEL_GUEST_LINKER_SCRIPT");
    println!("cargo:rerun-if-changed={script}");
    println!("cargo:rustc-link-arg-bins=-T{script}");
}
