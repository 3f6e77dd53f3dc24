//! Hydra options dpm once accepted and ignored, each now doing what
//! `.venv/bin/mpiexec.hydra` (MPICH 5.0.2) does, run under both: `-iface`
//! (and `HYDRA_IFACE`), `-enable-x`/`-disable-x`, `-binding`, and
//! `-nameserver-none` (which Hydra does not know).

mod common;

use common::{cannot_run, hydra, under_hydra, unique, Dpm, Output, TempFile, LOCAL_SSH};

const VAR: &str = "MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE";

/// The value of `VAR` in the `env` output of `out`'s single rank.
fn iface_var(out: &Output) -> Option<String> {
    out.lines().iter().find_map(|l| l.strip_prefix(&format!("{VAR}=")).map(String::from))
}

#[test]
fn iface_gives_every_rank_hydras_variable_over_genv() {
    // The flag, the variable, and over -genv and -genvnone: the interface wins.
    let cases: [&[&str]; 3] = [&["-iface", "lo"], &["-genv", VAR, "eth9", "-iface", "lo"], &["-genvnone", "-iface", "lo"]];
    for args in cases {
        let mut all = args.to_vec();
        all.extend(["-n", "1", "/usr/bin/env"]);
        let dpm = Dpm::run(&all).output();
        dpm.assert_success();
        assert_eq!(iface_var(&dpm).as_deref(), Some("lo"), "dpm {args:?}\n{}", dpm.describe());
        let hydra = under_hydra(&all);
        assert_eq!(iface_var(&hydra).as_deref(), Some("lo"), "Hydra {args:?}\n{}", hydra.describe());
    }
    let dpm = Dpm::run(["-n", "1", "/usr/bin/env"]).env("HYDRA_IFACE", "lo").output();
    assert_eq!(iface_var(&dpm).as_deref(), Some("lo"), "dpm, HYDRA_IFACE=lo\n{}", dpm.describe());
    let hydra = common::hydra_output(|| Dpm::mpiexec(&hydra(), ["-n", "1", "/usr/bin/env"]).env("HYDRA_IFACE", "lo"));
    assert_eq!(iface_var(&hydra).as_deref(), Some("lo"), "Hydra, HYDRA_IFACE=lo\n{}", hydra.describe());
    // Without it, neither sets the variable.
    let plain = Dpm::run(["-n", "1", "/usr/bin/env"]).output();
    assert_eq!(iface_var(&plain), None, "{}", plain.describe());
}

#[test]
fn a_missing_interface_is_refused_before_anything_runs() {
    let args = ["-iface", "dpm-no-such0", "-n", "1", "/bin/echo", "ran"];
    let dpm = Dpm::run(args).output();
    dpm.assert_code(2).assert_stdout_lacks("ran");
    dpm.assert_stderr_contains("dpm: error: -iface dpm-no-such0: no network interface 'dpm-no-such0' with an IPv4 address on this host");
    // Hydra refuses too (exit 255, "unable to find interface"), also before the program runs.
    let hydra = under_hydra(&args);
    assert_ne!(hydra.code(), 0, "{}", hydra.describe());
    hydra.assert_stdout_lacks("ran").assert_stderr_contains("unable to find interface dpm-no-such0");
    // The variable is checked as the flag is.
    let by_var = Dpm::run(["-n", "1", "/bin/echo", "ran"]).env("HYDRA_IFACE", "dpm-no-such0").output();
    by_var.assert_code(2).assert_stdout_lacks("ran");
}

/// A non-loopback interface of this machine with an IPv4 address, and that
/// address (`ip -o -4 addr`).
fn other_interface() -> Option<(String, String)> {
    let out = std::process::Command::new("ip").args(["-o", "-4", "addr", "show"]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let words: Vec<&str> = l.split_whitespace().collect();
        let (name, addr) = (words.get(1)?, words.get(3)?);
        let addr = addr.split('/').next()?;
        (*name != "lo").then(|| (name.to_string(), addr.to_string()))
    })
}

#[test]
fn the_pmi_port_is_on_the_interfaces_address_as_under_hydra() {
    let Some((name, ip)) = other_interface() else {
        cannot_run("the_pmi_port_is_on_the_interfaces_address", "no network interface but lo with an IPv4 address (ip -o -4 addr)");
        return;
    };
    let show = ["sh", "-c", "echo $PMI_PORT"];
    // Two daemons (each resolves the interface itself) and the one inside dpm.
    for nodes in [&["--virtual-nodes", "2", "-ppn", "1", "-n", "2"][..], &["-n", "1"][..]] {
        let mut args = vec!["-iface", &name, "--pmi-port"];
        args.extend(nodes);
        args.extend(show);
        let dpm = Dpm::run(&args).output();
        dpm.assert_success();
        assert!(!dpm.lines().is_empty() && dpm.lines().iter().all(|l| l.starts_with(&format!("{ip}:"))), "{nodes:?}\n{}", dpm.describe());
    }
    let hydra = under_hydra(&["-iface", &name, "-pmi-port", "-n", "1", "sh", "-c", "echo $PMI_PORT"]);
    assert!(hydra.lines().iter().all(|l| l.starts_with(&format!("{ip}:"))) && !hydra.lines().is_empty(), "Hydra\n{}", hydra.describe());
    // Real ranks reach their server there and wire up.
    let out = Dpm::run(["-iface", &name, "--pmi-port", "--virtual-nodes", "2", "-ppn", "1", "-n", "2", &common::hello()]).output();
    out.assert_success();
    assert_eq!(out.lines().len(), 2, "{}", out.describe());
}

/// A stand-in ssh ([`LOCAL_SSH`]) that first writes its arguments to `log`.
fn logging_ssh(log: &str) -> TempFile {
    let body = LOCAL_SSH.strip_prefix("#!/bin/sh\n").expect("a shell script");
    TempFile::new("dpm-x-ssh", format!("#!/bin/sh\necho \"$*\" >> '{log}'\n{body}").as_bytes(), 0o755)
}

/// The X forwarding flags (`-X`, `-x`) each ssh start was given.
fn x_flags(log: &str) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let _ = std::fs::remove_file(log);
    text.lines().map(|l| l.split_whitespace().filter(|w| matches!(*w, "-X" | "-x")).collect::<Vec<_>>().join(" ")).collect()
}

#[test]
fn x_forwarding_reaches_ssh_as_under_hydra() {
    let log = std::env::temp_dir().join(unique("dpm-x-log")).display().to_string();
    let ssh = logging_ssh(&log);
    for (flag, want) in [(None, "-x"), (Some("-disable-x"), "-x"), (Some("-enable-x"), "-X")] {
        let tail = ["-hosts", "dpm-x-node:1", "-n", "1", "/bin/true"];
        let mut dpm_args = vec!["-launcher", "ssh", "--ssh-command", ssh.path.to_str().unwrap()];
        let mut hydra_args = vec!["-launcher", "ssh", "-launcher-exec", ssh.path.to_str().unwrap()];
        dpm_args.extend(flag);
        hydra_args.extend(flag);
        dpm_args.extend(tail);
        hydra_args.extend(tail);
        Dpm::run(&dpm_args).output().assert_success();
        assert_eq!(x_flags(&log), [want], "dpm {flag:?}");
        under_hydra(&hydra_args).assert_success();
        assert_eq!(x_flags(&log), [want], "Hydra {flag:?}");
    }
}

#[test]
fn binding_is_bind_to_as_in_hydra() {
    let args = ["-binding", "core", "-n", "2", "grep", "Cpus_allowed_list", "/proc/self/status"];
    let sorted = |out: &Output| {
        let mut l = out.lines();
        l.sort();
        l
    };
    let dpm = Dpm::run(args).output();
    dpm.assert_success();
    let hydra = under_hydra(&args);
    assert_eq!(sorted(&dpm), sorted(&hydra), "dpm\n{}\nHydra\n{}", dpm.describe(), hydra.describe());
    // One CPU each, none shared (on a machine of one CPU they would share it).
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus > 1 {
        let got = sorted(&dpm);
        assert!(got.windows(2).all(|w| w[0] != w[1]) && got.iter().all(|l| !l.contains(['-', ','])), "{}", dpm.describe());
    }
    // A bad object is refused by both.
    let bad = ["-binding", "dpm-bogus", "-n", "1", "/bin/echo", "ran"];
    Dpm::run(bad).output().assert_code(2).assert_stdout_lacks("ran");
    let hydra = under_hydra(&bad);
    assert_ne!(hydra.code(), 0, "{}", hydra.describe());
}

#[test]
fn nameserver_none_is_no_option_of_hydras_nor_dpms() {
    let args = ["-nameserver-none", "-n", "1", "/bin/echo", "ran"];
    let dpm = Dpm::run(args).output();
    dpm.assert_code(2).assert_stdout_lacks("ran").assert_stderr_contains("unknown option '-nameserver-none'");
    let hydra = under_hydra(&args);
    assert_ne!(hydra.code(), 0, "{}", hydra.describe());
    hydra.assert_stdout_lacks("ran").assert_stderr_contains("unrecognized argument nameserver-none");
}

#[test]
fn no_option_is_listed_as_ignored() {
    let help = Dpm::run(["--help"]).output();
    help.assert_success();
    let text = help.stdout_str();
    assert!(!text.to_lowercase().contains("ignored, with a warning"), "{text}");
    for option in ["-iface IF", "-enable-x", "-disable-x", "-bind-to, -binding"] {
        assert!(text.contains(option), "--help lacks {option}\n{text}");
    }
}

#[test]
fn a_boots_iface_reaches_its_runs() {
    // The interface is the boot's: its runs' ranks get the variable, and
    // --pmi-port listens on its address (here lo's, the one interface sure
    // to exist; the_pmi_port_is_on_the_interfaces_address covers another).
    let boot = common::boot::Boot::start(&["-iface", "lo"]);
    let out = boot.run(&["--pmi-port", "-n", "1", "/usr/bin/env"]).output();
    out.assert_success();
    assert_eq!(iface_var(&out).as_deref(), Some("lo"), "{}", out.describe());
    assert!(out.lines().iter().any(|l| l.starts_with("PMI_PORT=127.0.0.1:")), "{}", out.describe());
    // A run's own -iface makes it a run of its own daemons (the boot's are
    // the boot's): its rank is no child of the boot server, as a plain run's is.
    let parent = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["-n", "1", "sh", "-c", "echo parent $PPID"]);
        let out = boot.run(&all).output();
        out.assert_success();
        out.lines().iter().find_map(|l| l.strip_prefix("parent ").and_then(|p| p.parse::<u32>().ok())).unwrap_or_else(|| panic!("{}", out.describe()))
    };
    assert_eq!(parent(&[]), boot.pid, "a plain run goes through the boot");
    assert_ne!(parent(&["-iface", "lo"]), boot.pid, "a run with -iface runs its own daemon");
}
