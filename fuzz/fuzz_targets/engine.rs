//! cargo fuzz target `engine`: the body is `dpm_pmi::fuzzing::engine` (shared
//! with the stable-toolchain run in crates/pmi/tests/fuzz_smoke.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dpm_pmi::fuzzing::engine(data));
