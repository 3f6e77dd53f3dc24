//! What the test tiers of every dpm crate share (a dev-dependency only):
//! how a test that cannot run on this machine — a fixture, a tool, root
//! missing — says so. Never green by skipping: under `CI=true` it fails
//! with the reason.

/// The file `scripts/test.sh` collects skips in (`$DPM_TEST_SKIPS`), one
/// `SKIPPED: what: reason` line each; it lists them at the end of the run.
pub const SKIPS_VAR: &str = "DPM_TEST_SKIPS";

/// A test (or the part of one) that cannot run on this machine: say so
/// loudly (stderr, which libtest shows only for failures or with
/// `--nocapture`), record it in `$DPM_TEST_SKIPS` for `scripts/test.sh`'s
/// summary, and fail under `CI=true` with the reason (CI provides everything
/// the tests need, so a test that cannot run there is a broken set-up,
/// never a pass). The caller returns after it.
pub fn cannot_run(what: &str, reason: &str) {
    let line = format!("SKIPPED: {what}: {reason}");
    eprintln!("\n********\n{line}\n********\n");
    if let Some(file) = std::env::var_os(SKIPS_VAR) {
        use std::io::Write;
        // One write of one line to a file opened for appending: lines of
        // test binaries running at once do not mix.
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI must run this, but it cannot run here: {what}: {reason}");
    }
}

/// Whether the test runs as root, which it needs to act as another user
/// (`setpriv` to `nobody`); when not, [`cannot_run`] says so (a failure
/// under `CI=true`) and the test returns.
pub fn root_to_act_as_another_user(test: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0) {
        return true;
    }
    cannot_run(test, "needs root to act as another user (run the tests as root, as CI does)");
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_is_recorded_and_fails_under_ci() {
        let dir = std::env::temp_dir().join(format!("dpm-test-support-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("skips");
        // A child test process with the variables set, so that this
        // process's environment is left alone.
        let me = std::env::current_exe().unwrap();
        for (ci, ok) in [("false", true), ("true", false)] {
            let status = std::process::Command::new(&me)
                .args(["--exact", "tests::child_that_cannot_run", "--include-ignored", "--test-threads=1"])
                .env(SKIPS_VAR, &file)
                .env("CI", ci)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap();
            assert_eq!(status.success(), ok, "CI={ci}");
        }
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.lines().filter(|l| *l == "SKIPPED: child: no such tool").count(), 2, "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    #[ignore = "run by a_skip_is_recorded_and_fails_under_ci in a child process"]
    fn child_that_cannot_run() {
        cannot_run("child", "no such tool");
    }
}
