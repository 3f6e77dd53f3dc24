//! Chooses the calibration `dpm model` embeds: this machine's measured one
//! (`bench/model/calibration/polyglot.json`, written by `bench/model`) when
//! the workspace has it, else the committed sample beside this crate.

use std::path::Path;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let measured = Path::new(&dir).join("../../bench/model/calibration/polyglot.json");
    let sample = Path::new(&dir).join("calibration/sample.json");
    println!("cargo:rerun-if-changed={}", measured.display());
    println!("cargo:rerun-if-changed={}", sample.display());
    let chosen = if measured.is_file() { measured } else { sample };
    println!("cargo:rustc-env=DPM_CALIBRATION_FILE={}", chosen.display());
}
