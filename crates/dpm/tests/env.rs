//! The ranks' environment and working directory: -genv/-env, the
//! -genvall/-genvnone/-genvlist modes and their per-segment forms, the PMI_*
//! variables dpm sets (and the inherited ones it must drop), and -wdir.

mod common;

use std::collections::BTreeMap;

use common::{program, Dpm, Output};

/// Parse env_print's `rank R NAME=value` / `rank R NAME unset` lines into
/// (rank, name) → Some(value) / None. `-l` prefixes are stripped.
fn env_of(out: &Output) -> BTreeMap<(u32, String), Option<String>> {
    out.assert_success();
    let mut map = BTreeMap::new();
    for line in out.lines() {
        let line = match line.strip_prefix('[') {
            Some(rest) => rest.split_once("] ").map_or(line.clone(), |(_, l)| l.to_string()),
            None => line,
        };
        let Some(rest) = line.strip_prefix("rank ") else { panic!("unexpected line {line:?}\n{}", out.describe()) };
        let (rank, what) = rest.split_once(' ').unwrap_or_else(|| panic!("bad line {line:?}"));
        let rank: u32 = rank.parse().unwrap_or_else(|_| panic!("bad rank in {line:?}"));
        let entry = if let Some(name) = what.strip_suffix(" unset") {
            (name.to_string(), None)
        } else {
            let (k, v) = what.split_once('=').unwrap_or_else(|| panic!("bad line {line:?}"));
            (k.to_string(), Some(v.to_string()))
        };
        map.insert((rank, entry.0), entry.1);
    }
    map
}

fn value(map: &BTreeMap<(u32, String), Option<String>>, rank: u32, name: &str) -> Option<String> {
    match map.get(&(rank, name.to_string())) {
        Some(v) => v.clone(),
        None => panic!("env_print printed nothing about {name} for rank {rank}: {map:?}"),
    }
}

#[test]
fn genv_reaches_every_rank_and_launcher_env_is_inherited() {
    let out = Dpm::run(["-genv", "DPM_T_X", "1", "-n", "2", &program("env_print"), "DPM_T_X", "DPM_T_OUTSIDE"]).env("DPM_T_OUTSIDE", "outside").output();
    let env = env_of(&out);
    for r in 0..2 {
        assert_eq!(value(&env, r, "DPM_T_X").as_deref(), Some("1"), "{}", out.describe());
        assert_eq!(value(&env, r, "DPM_T_OUTSIDE").as_deref(), Some("outside"), "{}", out.describe());
    }
}

#[test]
fn genv_value_with_spaces_and_equals() {
    let out = Dpm::run(["-genv", "DPM_T_X", "a b=c  d", "-n", "1", &program("env_print"), "DPM_T_X"]).output();
    assert_eq!(value(&env_of(&out), 0, "DPM_T_X").as_deref(), Some("a b=c  d"), "{}", out.describe());
}

#[test]
fn genv_overrides_the_launcher_environment() {
    let out = Dpm::run(["-genv", "DPM_T_X", "from-genv", "-n", "1", &program("env_print"), "DPM_T_X"]).env("DPM_T_X", "from-launcher").output();
    assert_eq!(value(&env_of(&out), 0, "DPM_T_X").as_deref(), Some("from-genv"), "{}", out.describe());
}

/// `dpm run` with its daemon on another node (a made-up host reached
/// through [`common::LOCAL_SSH`], whose environment is a login's:
/// `DPM_T_NODE=login`, `PATH`, `HOME`).
/// The script goes with the returned file: keep it until the run's end.
fn on_a_node(args: &[&str]) -> (common::TempFile, Dpm) {
    let ssh = common::local_ssh();
    let mut all = vec!["-launcher".to_string(), "ssh".into(), "--ssh-command".into(), ssh.path_str(), "-hosts".into(), "dpm-env-node:4".into()];
    all.extend(args.iter().map(|a| a.to_string()));
    (ssh, Dpm::run(all))
}

/// Hydra's meaning: -genvnone stops dpm's environment from travelling to the
/// ranks; a node's own (its daemon's: a login's over ssh) stays theirs.
#[test]
fn genvnone_passes_none_of_the_launcher_environment_and_keeps_the_node_s() {
    let (_ssh, dpm) = on_a_node(&["-genvnone", "-genv", "DPM_T_X", "1", "-n", "2", &program("env_print"), "DPM_T_X", "DPM_T_OUTSIDE", "DPM_T_NODE", "PATH"]);
    let out = dpm.env("DPM_T_OUTSIDE", "outside").output();
    let env = env_of(&out);
    let path = std::env::var("PATH").ok();
    for r in 0..2 {
        assert_eq!(value(&env, r, "DPM_T_X").as_deref(), Some("1"), "{}", out.describe());
        assert_eq!(value(&env, r, "DPM_T_OUTSIDE"), None, "-genvnone passed a variable on\n{}", out.describe());
        assert_eq!(value(&env, r, "DPM_T_NODE").as_deref(), Some("login"), "-genvnone lost the node's environment\n{}", out.describe());
        assert_eq!(value(&env, r, "PATH"), path, "{}", out.describe());
    }
    // By default the ranks get dpm's environment (exactly: see docs/hydra.md).
    let (_ssh, dpm) = on_a_node(&["-n", "1", &program("env_print"), "DPM_T_OUTSIDE", "DPM_T_NODE"]);
    let out = dpm.env("DPM_T_OUTSIDE", "outside").output();
    let env = env_of(&out);
    assert_eq!(value(&env, 0, "DPM_T_OUTSIDE").as_deref(), Some("outside"), "{}", out.describe());
}

#[test]
fn genvlist_passes_only_the_listed_variables() {
    let (_ssh, dpm) = on_a_node(&["-genvlist", "DPM_T_A,DPM_T_C", "-n", "2", &program("env_print"), "DPM_T_A", "DPM_T_B", "DPM_T_C", "DPM_T_NODE"]);
    let out = dpm.env("DPM_T_A", "aa").env("DPM_T_B", "bb").env("DPM_T_C", "cc").output();
    let env = env_of(&out);
    for r in 0..2 {
        assert_eq!(value(&env, r, "DPM_T_A").as_deref(), Some("aa"), "{}", out.describe());
        assert_eq!(value(&env, r, "DPM_T_B"), None, "{}", out.describe());
        assert_eq!(value(&env, r, "DPM_T_C").as_deref(), Some("cc"), "{}", out.describe());
        assert_eq!(value(&env, r, "DPM_T_NODE").as_deref(), Some("login"), "{}", out.describe());
    }
}

#[test]
fn genvlist_single_name() {
    let (_ssh, dpm) = on_a_node(&["-genvlist", "DPM_T_A", "-n", "1", &program("env_print"), "DPM_T_A", "DPM_T_B"]);
    let out = dpm.env("DPM_T_A", "aa").env("DPM_T_B", "bb").output();
    let env = env_of(&out);
    assert_eq!(value(&env, 0, "DPM_T_A").as_deref(), Some("aa"), "{}", out.describe());
    assert_eq!(value(&env, 0, "DPM_T_B"), None, "{}", out.describe());
}

/// On dpm's own machine the node's environment is dpm's: -genvnone hides
/// nothing there (as under Hydra, whose local proxy inherits mpiexec's).
#[test]
fn genvnone_on_this_machine_keeps_its_environment_as_under_hydra() {
    let out = Dpm::run(["-genvnone", "-n", "1", &program("env_print"), "DPM_T_OUTSIDE"]).env("DPM_T_OUTSIDE", "outside").output();
    assert_eq!(value(&env_of(&out), 0, "DPM_T_OUTSIDE").as_deref(), Some("outside"), "{}", out.describe());
}

#[test]
fn per_segment_env_stays_in_its_segment() {
    let p = program("env_print");
    let out = Dpm::run([
        "-l", "-genv", "DPM_T_G", "global", "-n", "1", "-env", "DPM_T_S", "first", &p, "DPM_T_S", "DPM_T_G", ":", "-n", "2", "-env", "DPM_T_S", "second",
        "-env", "DPM_T_G", "local", &p, "DPM_T_S", "DPM_T_G", ":", "-n", "1", &p, "DPM_T_S", "DPM_T_G",
    ])
    .output();
    let env = env_of(&out);
    assert_eq!(value(&env, 0, "DPM_T_S").as_deref(), Some("first"), "{}", out.describe());
    assert_eq!(value(&env, 0, "DPM_T_G").as_deref(), Some("global"), "{}", out.describe());
    for r in 1..3 {
        assert_eq!(value(&env, r, "DPM_T_S").as_deref(), Some("second"), "{}", out.describe());
        assert_eq!(value(&env, r, "DPM_T_G").as_deref(), Some("local"), "-env must override -genv\n{}", out.describe());
    }
    assert_eq!(value(&env, 3, "DPM_T_S"), None, "{}", out.describe());
    assert_eq!(value(&env, 3, "DPM_T_G").as_deref(), Some("global"), "{}", out.describe());
}

#[test]
fn per_segment_envnone_envlist_envall() {
    let p = program("env_print");
    let (_ssh, dpm) = on_a_node(&[
        "-l",
        "-genvnone",
        "-n",
        "1",
        "-envlist",
        "DPM_T_A",
        &p,
        "DPM_T_A",
        "DPM_T_B",
        ":",
        "-n",
        "1",
        "-envall",
        &p,
        "DPM_T_A",
        "DPM_T_B",
        ":",
        "-n",
        "1",
        &p,
        "DPM_T_A",
        "DPM_T_B",
    ]);
    let out = dpm.env("DPM_T_A", "aa").env("DPM_T_B", "bb").output();
    let env = env_of(&out);
    assert_eq!(value(&env, 0, "DPM_T_A").as_deref(), Some("aa"), "-envlist\n{}", out.describe());
    assert_eq!(value(&env, 0, "DPM_T_B"), None, "-envlist\n{}", out.describe());
    assert_eq!(value(&env, 1, "DPM_T_A").as_deref(), Some("aa"), "-envall\n{}", out.describe());
    assert_eq!(value(&env, 1, "DPM_T_B").as_deref(), Some("bb"), "-envall\n{}", out.describe());
    assert_eq!(value(&env, 2, "DPM_T_A"), None, "-genvnone\n{}", out.describe());
    assert_eq!(value(&env, 2, "DPM_T_B"), None, "-genvnone\n{}", out.describe());
}

#[test]
fn per_segment_envnone() {
    let p = program("env_print");
    let (_ssh, dpm) = on_a_node(&["-l", "-n", "1", "-envnone", &p, "DPM_T_A", ":", "-n", "1", &p, "DPM_T_A"]);
    let out = dpm.env("DPM_T_A", "aa").output();
    let env = env_of(&out);
    assert_eq!(value(&env, 0, "DPM_T_A"), None, "{}", out.describe());
    assert_eq!(value(&env, 1, "DPM_T_A").as_deref(), Some("aa"), "{}", out.describe());
}

#[test]
fn pmi_variables_are_set_and_inherited_ones_dropped() {
    let out = Dpm::run(["-n", "3", &program("env_print"), "PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_FOO", "PMI_PORT"])
        .env("PMI_FOO", "inherited")
        .env("PMI_RANK", "77")
        .env("PMI_SIZE", "99")
        .env("PMI_PORT", "127.0.0.1:1")
        .output();
    let env = env_of(&out);
    for r in 0..3 {
        assert_eq!(value(&env, r, "PMI_RANK"), Some(r.to_string()), "{}", out.describe());
        assert_eq!(value(&env, r, "PMI_SIZE").as_deref(), Some("3"), "{}", out.describe());
        let fd = value(&env, r, "PMI_FD").unwrap_or_else(|| panic!("PMI_FD unset\n{}", out.describe()));
        assert!(fd.parse::<u32>().is_ok(), "PMI_FD={fd}");
        assert_eq!(value(&env, r, "PMI_FOO"), None, "an inherited PMI_ variable was passed on\n{}", out.describe());
        assert_eq!(value(&env, r, "PMI_PORT"), None, "an inherited PMI_PORT was passed on\n{}", out.describe());
    }
}

#[test]
fn wdir_sets_the_working_directory() {
    for flag in ["-wdir", "-dir"] {
        let out = Dpm::run([flag, "/tmp", "-n", "2", &program("env_print")]).output();
        let env = env_of(&out);
        for r in 0..2 {
            assert_eq!(value(&env, r, "cwd").as_deref(), Some("/tmp"), "with {flag}\n{}", out.describe());
        }
    }
}

#[test]
fn default_working_directory_is_dpms() {
    let out = Dpm::run(["-n", "1", &program("env_print")]).output();
    let cwd = std::env::current_dir().expect("cwd");
    assert_eq!(value(&env_of(&out), 0, "cwd").as_deref(), Some(cwd.to_str().unwrap()), "{}", out.describe());
}

#[test]
fn wdir_per_segment() {
    let p = program("env_print");
    let out = Dpm::run(["-l", "-n", "1", "-wdir", "/tmp", &p, ":", "-n", "1", "-wdir", "/", &p]).output();
    let env = env_of(&out);
    assert_eq!(value(&env, 0, "cwd").as_deref(), Some("/tmp"), "{}", out.describe());
    assert_eq!(value(&env, 1, "cwd").as_deref(), Some("/"), "{}", out.describe());
}

#[test]
fn wdir_that_does_not_exist_fails_cleanly() {
    let out = Dpm::run(["-wdir", "/nonexistent/dpm-test-dir", "-n", "2", "/bin/true"]).output();
    assert_ne!(out.code(), 0, "{}", out.describe());
    out.assert_stderr_contains("/nonexistent/dpm-test-dir");
}
