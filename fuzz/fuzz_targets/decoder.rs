//! cargo fuzz target `decoder`: the body is `dpm_pmi::fuzzing::decoder` (shared
//! with the stable-toolchain run in crates/pmi/tests/fuzz_smoke.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dpm_pmi::fuzzing::decoder(data));
