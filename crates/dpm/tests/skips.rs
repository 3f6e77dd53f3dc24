//! A test that cannot run fails under `CI=true` and says why (issue 36):
//! a root-only test of this suite (`hardening_pmi.rs`'s other-user test),
//! run as user `nobody`, fails loudly with the reason when `CI=true`, and
//! otherwise passes with a `SKIPPED:` line that it also records in
//! `$DPM_TEST_SKIPS` (the file `scripts/test.sh` lists at the end). Root
//! is needed to run it as another user.

mod common;

use std::path::PathBuf;
use std::process::Command;

/// The newest built `hardening_pmi` test binary beside this one.
fn sibling(name: &str) -> PathBuf {
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&deps)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(&format!("{name}-")) && !n.contains('.')))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| panic!("no {name} test binary in {} (cargo test builds it with this one)", deps.display())).1
}

#[test]
fn a_root_only_test_run_as_another_user_fails_under_ci_and_is_listed_otherwise() {
    use std::os::unix::fs::PermissionsExt;
    if !common::root_to_act_as_another_user("a_root_only_test_run_as_another_user_fails_under_ci") {
        return;
    }
    let dir = common::TempDir::new("dpm-skips");
    std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o777)).unwrap();
    let exe = dir.path.join("hardening_pmi");
    std::fs::copy(sibling("hardening_pmi"), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let skips = dir.path.join("skips.txt");
    let name = "another_user_cannot_use_a_jobs_pmi_port_nor_a_second_connection_a_bound_rank";
    let run = |ci: &str| {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "env", "-i", "HOME=/tmp", "PATH=/usr/bin:/bin"])
            .arg(format!("CI={ci}"))
            .arg(format!("DPM_TEST_SKIPS={}", skips.display()))
            .arg(&exe)
            .args([name, "--exact", "--nocapture"])
            .output()
            .expect("setpriv");
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
    };
    let (code, text) = run("true");
    assert_ne!(code, Some(0), "under CI=true it must fail:\n{text}");
    assert!(text.contains("CI must run this, but it cannot run here") && text.contains("needs root to act as another user"), "{text}");
    let (code, text) = run("false");
    assert_eq!(code, Some(0), "without CI it passes, saying why it did not run:\n{text}");
    assert!(text.contains(&format!("SKIPPED: {name}")) && text.contains("1 passed"), "{text}");
    let listed = std::fs::read_to_string(&skips).unwrap();
    assert_eq!(listed.lines().filter(|l| l.starts_with(&format!("SKIPPED: {name}: needs root"))).count(), 2, "{listed}");
}
