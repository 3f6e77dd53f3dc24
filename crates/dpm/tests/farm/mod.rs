//! The render farm's test helpers (examples/renderfarm under `dpm run`),
//! shared by `renderfarm.rs` and `renderfarm_boot.rs`.

#![allow(dead_code)] // each test crate uses its own part

use std::path::Path;
use std::time::Duration;

use crate::common::{repo_root, Dpm, Output};

pub const SCENE: &str = "/usr/share/doc/povray/examples/advanced/glasschess/glasschess.pov";
pub const WATCHDOG: Duration = Duration::from_secs(180);

/// True when povray and the scene are installed; panics under CI=true when not.
pub fn povray_present() -> bool {
    let povray = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join("povray").is_file())).unwrap_or(false);
    if povray && Path::new(SCENE).is_file() {
        return true;
    }
    let what = "povray or its glass chess scene is missing (./scripts/setup.sh installs povray povray-examples)";
    crate::common::cannot_run("the render farm tests", what);
    false
}

/// `dpm run DPM_ARGS... .venv/bin/python SCRIPT ARGS...` (SCRIPT in examples/renderfarm).
pub fn python(dpm_args: &[&str], script: &str, args: &[&str]) -> Dpm {
    let python = repo_root().join(".venv/bin/python");
    assert!(python.is_file(), "{} is missing: run ./scripts/setup.sh", python.display());
    let script = repo_root().join("examples/renderfarm").join(script);
    let mut all: Vec<String> = dpm_args.iter().map(|s| s.to_string()).collect();
    all.push(python.to_string_lossy().into_owned());
    all.push(script.to_string_lossy().into_owned());
    all.extend(args.iter().map(|s| s.to_string()));
    Dpm::run(all).watchdog(WATCHDOG)
}

/// `dpm run DPM_ARGS... .venv/bin/python farm.py --nice 10 --progress plain FARM_ARGS...`
pub fn farm_cmd(dpm_args: &[&str], farm_args: &[&str]) -> Dpm {
    let mut args = vec!["--nice", "10", "--progress", "plain"];
    args.extend_from_slice(farm_args);
    python(dpm_args, "farm.py", &args)
}

pub fn farm(dpm_args: &[&str], farm_args: &[&str]) -> Output {
    farm_cmd(dpm_args, farm_args).output()
}

/// The run succeeded, its image passed `--check`, and every tile was rendered.
pub fn assert_checked(out: &Output, tiles: usize) {
    out.assert_success();
    out.assert_stdout_contains("farm: check: pixel-identical to a plain povray render");
    out.assert_stdout_contains(&format!("farm: rendered {tiles} tiles in "));
    out.assert_stdout_lacks("FAILED");
}
