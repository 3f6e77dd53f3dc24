//! The command line itself: help, version, usage errors (exit 2) and the
//! options accepted for Hydra compatibility.

mod common;

use common::Dpm;

#[test]
fn run_help_prints_usage_and_exits_zero() {
    for flag in ["--help", "-h", "-help"] {
        let out = Dpm::raw(["run", flag]).output();
        out.assert_success();
        let text = out.stdout_str();
        assert!(text.starts_with("Usage: dpm run "), "with {flag}\n{}", out.describe());
        for option in ["-genv", "-genvnone", "-genvlist", "-wdir", "--timeout", "--pmi-port", "--pmi-trace", "Exit status"] {
            assert!(text.contains(option), "help does not mention {option}\n{}", out.describe());
        }
    }
}

#[test]
fn top_level_help_lists_run() {
    let out = Dpm::raw(["--help"]).output();
    out.assert_success();
    assert!(
        out.lines().iter().any(|l| l.trim_start().starts_with("run ")),
        "no 'run' command in dpm --help\n{}",
        out.describe()
    );
}

#[test]
fn version_is_printed() {
    let out = Dpm::raw(["--version"]).output();
    out.assert_success();
    assert!(out.stdout_str().starts_with("dpm "), "{}", out.describe());
}

#[test]
fn unknown_option_is_a_usage_error() {
    let out = Dpm::raw(["run", "-bogus-option", "-n", "1", "/bin/true"]).output();
    out.assert_code(2);
    out.assert_stderr_contains("unknown option '-bogus-option'");
    out.assert_stderr_contains("dpm run --help");
    assert!(out.stdout.is_empty(), "{}", out.describe());
}

#[test]
fn unknown_subcommand_is_a_usage_error() {
    let out = Dpm::raw(["no-such-subcommand"]).output();
    out.assert_code(2);
    out.assert_stderr_contains("no-such-subcommand");
}

#[test]
fn usage_errors_exit_two() {
    let cases: &[(&[&str], &str)] = &[
        (&["run"], "no program given"),
        (&["run", "-n"], "needs a process count"),
        (&["run", "-n", "x", "/bin/true"], "not a process count"),
        (&["run", "-n", "2"], "without a program"),
        (&["run", "-n", "1", "/bin/true", ":"], "empty segment"),
        (&["run", "--timeout", "soon", "/bin/true"], "not a number of seconds"),
    ];
    for (args, message) in cases {
        let out = Dpm::raw(*args).output();
        out.assert_code(2);
        out.assert_stderr_contains(message);
    }
}

#[test]
fn double_dash_and_equals_forms() {
    let out = Dpm::run(["--np=2", "--label", "/bin/echo", "x"]).output();
    out.assert_success();
    let mut lines = out.lines();
    lines.sort();
    assert_eq!(lines, vec!["[0] x", "[1] x"], "{}", out.describe());
}

#[test]
fn program_arguments_are_not_dpm_options() {
    let out = Dpm::run(["-n", "1", "/bin/echo", "-n", "5", "--label", "-genv"]).output();
    out.assert_success();
    assert_eq!(out.stdout_str(), "5 --label -genv", "{}", out.describe());
}

#[test]
fn this_host_is_accepted() {
    let host = common::hostname();
    for hosts in [host.as_str(), "localhost"] {
        Dpm::run(["-hosts", hosts, "-n", "2", "/bin/true"]).output().assert_success();
    }
}

#[test]
fn compatibility_options_are_accepted() {
    let out = Dpm::run(["-bind-to", "core", "-map-by", "slot", "-ppn", "2", "-print-all-exitcodes", "-n", "2", "/bin/true"]).output();
    out.assert_success();
}

#[test]
fn ignored_options_print_a_warning() {
    // RUN_HELP: "Accepted for compatibility and ignored, with a warning".
    let out = Dpm::run(["-iface", "eth0", "-bind-to", "core", "-n", "1", "/bin/true"]).output();
    out.assert_success();
    out.assert_stderr_contains("-iface");
    out.assert_stderr_contains("-bind-to");
    out.assert_stderr_contains("ignored");
}
