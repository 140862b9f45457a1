//! cargo-fuzz entry for keel_core::fuzz::smmu_event.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| keel_core::fuzz::smmu_event(data));
