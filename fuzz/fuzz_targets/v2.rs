//! cargo fuzz target `v2`: the body is `dpm_pmi::fuzzing::v2` (shared
//! with the stable-toolchain run in crates/pmi/tests/fuzz_smoke.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dpm_pmi::fuzzing::v2(data));
