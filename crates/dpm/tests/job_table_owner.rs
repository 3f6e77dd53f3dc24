//! A plain `dpm run`'s job table (`run-<pid>.json`) and its reports (the
//! stacks of SIGQUIT, the PMI states `dpm status --json` asks for with a
//! signal) are its owner's only, by the kernel's word: another user (here
//! `nobody`) cannot read the table, list the run with `dpm status`, or make
//! the run report — also when it claims to be the owner (`USER`, `LOGNAME`,
//! `HOME` of root). A booted run's status is the boot's
//! (`boot.rs`: `other_users_cannot_reach_the_control_socket`).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::{dpm_bin, program, unique, Dpm, TempDir};

/// `args` run as `nobody` (uid and gid 65534, no groups) with the owner's
/// runtime directory named; `lie`: also root's `USER`, `LOGNAME`, `HOME`.
fn as_nobody(args: &[&str], runtime: &std::path::Path, lie: bool) -> std::process::Output {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).args(args).env("DPM_RUNTIME_DIR", runtime);
    if lie {
        c.env("USER", "root").env("LOGNAME", "root").env("HOME", "/root");
    }
    c.output().expect("run setpriv")
}

#[test]
fn only_the_owner_reads_a_plain_runs_table_or_makes_it_report() {
    if !common::root_to_act_as_another_user("only_the_owner_reads_a_plain_runs_table_or_makes_it_report") {
        return;
    }
    let runtime = std::env::temp_dir().join(unique("dpm-owner-rt"));
    let dir = TempDir::new("mpir");
    let mut running = Dpm::run(["-n", "2", &program("mpir_job"), &dir.path_str()]).env("DPM_RUNTIME_DIR", &runtime.to_string_lossy()).spawn();
    running.wait_for_lines("mpir_job world", 2);
    let client = running.pid();
    let file = runtime.join(format!("run-{client}.json"));
    // The owner reads it (so what follows is refused for who asks, not for a missing file).
    let table: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).expect("the owner reads the table")).expect("JSON");
    let states_signal = table["states_signal"].as_i64().unwrap_or_else(|| panic!("no states_signal in {table}"));
    // Even with the directory opened for others to pass through, the table stays the owner's.
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o711)).unwrap();
    let file_text = file.to_string_lossy().to_string();
    for lie in [false, true] {
        let cat = as_nobody(&["/bin/cat", &file_text], &runtime, lie);
        assert!(!cat.status.success(), "nobody read the table (lie: {lie}): {}", String::from_utf8_lossy(&cat.stdout));
        assert!(String::from_utf8_lossy(&cat.stderr).contains("Permission denied"), "{}", String::from_utf8_lossy(&cat.stderr));
        let status = as_nobody(&[dpm_bin(), "status", "--json"], &runtime, lie);
        let (out, err) = (String::from_utf8_lossy(&status.stdout), String::from_utf8_lossy(&status.stderr));
        assert!(!status.status.success() && !out.contains(&client.to_string()), "nobody got the run listed (lie: {lie}): {out}{err}");
        assert!(err.contains("not to you"), "{err}");
        // Neither the stacks (SIGQUIT) nor the PMI states can be asked for.
        for sig in [3, states_signal] {
            let kill = as_nobody(&["/bin/kill", &format!("-{sig}"), &client.to_string()], &runtime, lie);
            assert!(!kill.status.success(), "nobody signalled the run with {sig} (lie: {lie})");
            assert!(String::from_utf8_lossy(&kill.stderr).contains("Operation not permitted"), "{}", String::from_utf8_lossy(&kill.stderr));
        }
    }
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(dir.path.join("go"), b"").expect("write go");
    let out = running.wait();
    out.assert_success();
    for text in [out.stdout_str(), out.stderr_str()] {
        assert!(!text.contains("dpm: rank ") && !text.contains("[rank 0 on"), "the run reported for nobody\n{}", out.describe());
    }
    let _ = std::fs::remove_dir_all(&runtime);
}
