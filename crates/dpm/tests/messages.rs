//! One style for everything dpm tells a user (issue 36): in ordinary use a
//! warning is a `dpm: warning: …` line like the ones dpm prints itself —
//! no timestamp, level column or span fields; `-v` (or `DPM_LOG`) asks for
//! the diagnostic format with them. Each fact is said once (also
//! binding.rs: the no-GPU error; pmix_guard.rs: a refused libpmix).

mod common;

use common::{Dpm, Output};

/// A rank that sends one unknown PMI command and waits for its answer:
/// dpm answers with an error and warns (a malformed request never passes
/// silently). bash, not sh: dash redirects only descriptors 0–9, and
/// `PMI_FD` is whichever descriptor the rank's socket has.
fn unknown_command(verbose: bool) -> Output {
    let rank = r#"printf 'cmd=nonsense\n' >&$PMI_FD; read -r answer <&$PMI_FD; echo "answered: $answer""#;
    let mut args = vec!["-n", "1", "bash", "-c", rank];
    if verbose {
        args.insert(0, "-v");
    }
    Dpm::run(args).output()
}

#[test]
fn a_warning_in_ordinary_use_is_one_plain_dpm_line() {
    let out = unknown_command(false);
    out.assert_success().assert_stdout_contains("answered: cmd=");
    let err = out.stderr_str();
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("unknown command")).collect();
    assert_eq!(warnings.len(), 1, "said once\n{}", out.describe());
    let line = warnings[0];
    assert!(line.starts_with("dpm: warning: unknown command 'nonsense'"), "{line}");
    assert!(line.ends_with("(job 0, rank 0, conn 0)"), "the event's own fields, plainly: {line}");
    for bad in [" WARN ", "node{", "host=", "job=", "Z "] {
        assert!(!line.contains(bad), "{bad:?} in {line:?}");
    }
    assert!(err.lines().all(|l| l.starts_with("dpm: ")), "every line dpm's own\n{}", out.describe());
}

#[test]
fn with_v_the_same_warning_has_the_diagnostic_format() {
    let out = unknown_command(true);
    out.assert_success();
    let err = out.stderr_str();
    let line = err.lines().find(|l| l.contains("unknown command 'nonsense'")).unwrap_or_else(|| panic!("no warning\n{}", out.describe()));
    assert!(line.contains(" WARN ") && line.contains("node{"), "level and span: {line}");
    assert!(line.starts_with(|c: char| c.is_ascii_digit()) && line.contains('T'), "a timestamp first: {line}");
    assert!(!line.starts_with("dpm: "), "{line}");
}

/// A command's error is said in the same style, whatever name dpm runs
/// under: `dpm: error: …`, then (for a usage error) where the help is.
#[test]
fn an_error_is_one_dpm_error_line() {
    let out = Dpm::run(["-n", "2", "/nonexistent/program"]).output();
    out.assert_code(127);
    let err = out.stderr_str();
    let first = err.lines().next().unwrap_or_default();
    assert!(first.starts_with("dpm: error: ") && first.contains("/nonexistent/program"), "{}", out.describe());
    let usage = Dpm::run(["-n", "0", "true"]).output();
    usage.assert_code(2);
    let lines: Vec<String> = usage.stderr_str().lines().map(str::to_string).collect();
    assert!(lines.first().is_some_and(|l| l.starts_with("dpm: error: ")), "{}", usage.describe());
    assert_eq!(lines.last().map(String::as_str), Some("Try 'dpm run --help'."), "{}", usage.describe());
}
