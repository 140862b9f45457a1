//! cargo-fuzz entry for keel_core::fuzz::vgic2_mmio.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| keel_core::fuzz::vgic2_mmio(data));
