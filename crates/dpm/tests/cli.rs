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
    assert!(out.lines().iter().any(|l| l.trim_start().starts_with("run ")), "no 'run' command in dpm --help\n{}", out.describe());
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
fn no_option_is_accepted_and_ignored() {
    // Hydra's options act (tests/hydra_net_options.rs); none warns that it is ignored.
    for args in
        [&["-iface", "lo", "-disable-x", "-n", "1", "/bin/true"][..], &["-rmk", "user", "-n", "1", "/bin/true"], &["-bind-to", "core", "-n", "1", "/bin/true"]]
    {
        let out = Dpm::run(args).output();
        out.assert_success();
        assert!(!out.stderr_str().contains("ignored"), "{args:?}\n{}", out.describe());
    }
}

#[test]
fn durations_out_of_range_are_usage_errors_not_panics() {
    // Each of these panicked (exit 101) when the duration was built.
    let cases: &[&[&str]] = &[
        &["run", "--kill-grace", "1e300", "/bin/true"],
        &["run", "--kill-grace", "inf", "/bin/true"],
        &["run", "--kill-grace", "nan", "/bin/true"],
        &["run", "--kill-grace", "-1", "/bin/true"],
        &["run", "--timeout", "18446744073709551615", "/bin/true"],
        &["run", "--connect-timeout", "18446744073709551615", "/bin/true"],
    ];
    for args in cases {
        let out = Dpm::raw(*args).env("DPM_NO_BOOT", "1").output();
        out.assert_code(2);
        out.assert_stderr_contains("not a number of seconds (0 to 1000000000)");
    }
    for (var, value) in [("MPIEXEC_TIMEOUT", "18446744073709551615"), ("DPM_CONNECT_TIMEOUT", "18446744073709551615")] {
        let out = Dpm::run(["-n", "1", "/bin/true"]).env(var, value).output();
        out.assert_code(2);
        out.assert_stderr_contains(&format!("{var}={value}: not a number of seconds"));
    }
    // The largest accepted values still run.
    Dpm::run(["--timeout", "1000000000", "--kill-grace", "1e9", "-n", "1", "/bin/true"]).output().assert_success();
}

#[test]
fn boot_help_lists_its_options() {
    let out = Dpm::raw(["boot", "--help"]).output();
    out.assert_success();
    let text = out.stdout_str();
    assert!(text.starts_with("Usage: dpm boot"), "{}", out.describe());
    for option in ["-hosts", "-f", "--virtual-nodes", "-launcher", "--ssh-command", "--bind", "--connect-timeout", "--tree-fanout", "--foreground", "-v"] {
        assert!(text.contains(option), "dpm boot --help does not mention {option}\n{}", out.describe());
    }
    let out = Dpm::raw(["boot", "-n", "2"]).output();
    out.assert_code(2);
    out.assert_stderr_contains("unknown option '-n'");
    out.assert_stderr_contains("dpm boot --help");
}

#[test]
fn the_open_file_limit_is_raised_to_the_hard_limit() {
    // Ranks inherit the limit of the daemon that starts them (here inside dpm
    // run): with a soft limit of 256, they must see the hard one.
    let script = format!("ulimit -S -n 256 && echo hard=$(ulimit -H -n) && exec {} run -n 1 sh -c 'echo soft=$(ulimit -S -n)'", common::dpm_bin());
    let out = std::process::Command::new("sh").args(["-c", &script]).env("DPM_NO_BOOT", "1").output().expect("run sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let hard = stdout.lines().find_map(|l| l.strip_prefix("hard=")).expect("hard limit");
    assert_ne!(hard, "256", "the hard limit itself is 256: the test proves nothing");
    assert!(stdout.contains(&format!("soft={hard}")), "{stdout}");
}

/// `DPM_LOG` is a comma-separated list of `target=level` and `level`: a
/// target's events show at its level, other targets' only at the bare
/// level; a list that does not parse leaves the default (warnings).
#[test]
fn dpm_log_selects_targets_and_levels() {
    let stderr = |filter: &str| {
        let out = Dpm::run(["-n", "1", "true"]).env("DPM_LOG", filter).output();
        out.assert_success();
        out.stderr_str()
    };
    // "launched" is the node's (dpm_daemon), "job ended" the launcher's.
    let daemon = stderr("dpm_daemon=debug");
    assert!(daemon.contains("launched job=job 0") && !daemon.contains("job ended"), "DPM_LOG=dpm_daemon=debug:\n{daemon}");
    let launcher = stderr("dpm_launcher=debug,warn");
    assert!(launcher.contains("job ended") && !launcher.contains("launched job"), "DPM_LOG=dpm_launcher=debug,warn:\n{launcher}");
    let all = stderr("debug");
    assert!(all.contains("launched job=job 0") && all.contains("job ended"), "DPM_LOG=debug:\n{all}");
    for quiet in ["dpm_nothing=trace", "dpm_daemon[span]=debug"] {
        let text = stderr(quiet);
        assert!(!text.contains("DEBUG"), "DPM_LOG={quiet}:\n{text}");
    }
}
