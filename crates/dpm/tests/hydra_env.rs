//! Hydra's environment variables that stand for options, each run under dpm
//! and under `.venv/bin/mpiexec.hydra` (MPICH 5.0.2) and compared:
//! `HYDRA_HOST_FILE`, `HYDRA_ENV`, `HYDRA_DEBUG`, `HYDRA_BINDING`,
//! `HYDRA_LAUNCHER_EXTRA_ARGS`, `MPIEXEC_PORT_RANGE`. Remote nodes are host
//! names a stand-in ssh ([`common::LOCAL_SSH`], logging its arguments)
//! "reaches" by running the command on this machine.

mod common;

use common::{hydra, hydra_output, placement, unique, Dpm, Output, TempFile, LOCAL_SSH};

/// A stand-in ssh that first appends its arguments to a log file.
struct Ssh {
    script: TempFile,
    log: String,
}

impl Ssh {
    fn new() -> Ssh {
        let log = std::env::temp_dir().join(unique("dpm-henv-ssh-log")).display().to_string();
        let body = LOCAL_SSH.strip_prefix("#!/bin/sh\n").expect("a shell script");
        let script = TempFile::new("dpm-henv-ssh", format!("#!/bin/sh\necho \"$*\" >> '{log}'\n{body}").as_bytes(), 0o755);
        Ssh { script, log }
    }

    /// The lines logged since the last call.
    fn take(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let _ = std::fs::remove_file(&self.log);
        text.lines().map(String::from).collect()
    }

    /// `dpm run` through this ssh, with `vars` set.
    fn dpm(&self, args: &[&str], vars: &[(&str, &str)]) -> Output {
        let mut all = vec!["-launcher", "ssh", "--ssh-command", self.script.path.to_str().unwrap()];
        all.extend(args);
        let mut d = Dpm::run(&all);
        for (k, v) in vars {
            d = d.env(k, v);
        }
        d.output()
    }

    /// Hydra's mpiexec through this ssh, with `vars` set.
    fn hydra(&self, args: &[&str], vars: &[(&str, &str)]) -> Output {
        let mut all = vec!["-launcher", "ssh", "-launcher-exec", self.script.path.to_str().unwrap()];
        all.extend(args);
        hydra_output(|| {
            let mut d = Dpm::mpiexec(&hydra(), &all);
            for (k, v) in vars {
                d = d.env(k, v);
            }
            d
        })
    }
}

impl Drop for Ssh {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Each rank's host by rank: dpm's from `--report-placement`.
fn dpm_hosts(out: &Output, n: usize) -> Vec<String> {
    let mut by_rank = vec![String::new(); n];
    for (_, ranks, host) in placement(&out.stderr_str()) {
        for part in ranks.split(',') {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            for slot in &mut by_rank[a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()] {
                *slot = host.clone();
            }
        }
    }
    by_rank
}

/// Each rank's host by rank: Hydra's ranks say theirs (`PMI_HOSTNAME`).
fn hydra_hosts(out: &Output, n: usize) -> Vec<String> {
    let mut by_rank = vec![String::new(); n];
    for line in out.lines() {
        let (r, host) = line.split_once(' ').expect("rank host");
        by_rank[r.parse::<usize>().unwrap()] = host.to_string();
    }
    by_rank
}

const SAY_HOST: [&str; 3] = ["/bin/sh", "-c", "echo $PMI_RANK $PMI_HOSTNAME"];

#[test]
fn hydra_host_file_names_the_nodes_unless_the_command_line_does() {
    let ssh = Ssh::new();
    let file = TempFile::new("dpm-henv-hosts", b"dpm-hf-a:1\n# a comment\ndpm-hf-b:2\n", 0o644);
    let vars = [("HYDRA_HOST_FILE", file.path.to_str().unwrap())];
    let dpm = ssh.dpm(&["--report-placement", "-n", "3", "/bin/true"], &vars);
    dpm.assert_success();
    let hydra = ssh.hydra(&[&["-n", "3"][..], &SAY_HOST].concat(), &vars);
    hydra.assert_success();
    let want = ["dpm-hf-a", "dpm-hf-b", "dpm-hf-b"];
    assert_eq!(dpm_hosts(&dpm, 3), want, "{}", dpm.describe());
    assert_eq!(hydra_hosts(&hydra, 3), want, "Hydra differs\n{}", hydra.describe());
    // -hosts wins over the variable, under both.
    let dpm = ssh.dpm(&["-hosts", "dpm-hf-c", "--report-placement", "-n", "2", "/bin/true"], &vars);
    assert_eq!(dpm_hosts(&dpm, 2), ["dpm-hf-c", "dpm-hf-c"], "{}", dpm.describe());
    let hydra = ssh.hydra(&[&["-hosts", "dpm-hf-c", "-n", "2"][..], &SAY_HOST].concat(), &vars);
    assert_eq!(hydra_hosts(&hydra, 2), ["dpm-hf-c", "dpm-hf-c"], "Hydra differs\n{}", hydra.describe());
    // A file that is not there: a usage error before anything runs (Hydra: "unable to open host file").
    let missing = std::env::temp_dir().join(unique("dpm-henv-none")).display().to_string();
    let vars = [("HYDRA_HOST_FILE", missing.as_str())];
    let dpm = ssh.dpm(&["-n", "1", "/bin/echo", "ran"], &vars);
    dpm.assert_code(2).assert_stdout_lacks("ran").assert_stderr_contains(&format!("dpm: error: HYDRA_HOST_FILE={missing}: cannot read it: "));
    let hydra = ssh.hydra(&["-n", "1", "/bin/echo", "ran"], &vars);
    assert_ne!(hydra.code(), 0, "{}", hydra.describe());
    hydra.assert_stdout_lacks("ran").assert_stderr_contains("unable to open host file");
}

#[test]
fn hydra_env_all_or_none_decides_what_remote_ranks_inherit_as_under_hydra() {
    let ssh = Ssh::new();
    let show = ["-hosts", "dpm-env-node", "-n", "1", "/bin/sh", "-c", "echo KEPT=$DPM_T_KEPT NODE=$DPM_T_NODE"];
    for (value, flag, want) in [
        ("all", None, "KEPT=mine NODE="),
        ("none", None, "KEPT= NODE=login"),
        // The option wins over the variable.
        ("none", Some("-genvall"), "KEPT=mine NODE="),
    ] {
        let args: Vec<&str> = flag.into_iter().chain(show).collect();
        let vars = [("HYDRA_ENV", value), ("DPM_T_KEPT", "mine")];
        let dpm = ssh.dpm(&args, &vars);
        dpm.assert_success();
        assert_eq!(dpm.lines(), [want], "HYDRA_ENV={value} {flag:?}\n{}", dpm.describe());
        let hydra = ssh.hydra(&args, &vars);
        // Hydra's ranks get mpiexec's environment over the login's
        // (docs/hydra.md): only KEPT is compared.
        let kept = |l: &str| l.split(' ').next().unwrap_or_default().to_string();
        assert_eq!(hydra.lines().iter().map(|l| kept(l)).collect::<Vec<_>>(), [kept(want)], "Hydra differs\n{}", hydra.describe());
    }
    // Hydra reads any other value as none; dpm refuses it.
    let dpm = ssh.dpm(&["-n", "1", "/bin/echo", "ran"], &[("HYDRA_ENV", "some")]);
    dpm.assert_code(2).assert_stdout_lacks("ran").assert_stderr_contains("dpm: error: HYDRA_ENV=some: all");
}

#[test]
fn hydra_debug_is_verbose_and_a_bad_boolean_is_refused_by_both() {
    let ssh = Ssh::new();
    let dpm = ssh.dpm(&["-n", "1", "/bin/true"], &[("HYDRA_DEBUG", "1")]);
    dpm.assert_success().assert_stderr_contains("DEBUG");
    let quiet = ssh.dpm(&["-n", "1", "/bin/true"], &[("HYDRA_DEBUG", "no")]);
    quiet.assert_success();
    assert!(!quiet.stderr_str().contains("DEBUG"), "{}", quiet.describe());
    let hydra = ssh.hydra(&["-n", "1", "/bin/true"], &[("HYDRA_DEBUG", "1")]);
    hydra.assert_success().assert_stdout_contains("Proxy launch args");
    let dpm = ssh.dpm(&["-n", "1", "/bin/echo", "ran"], &[("HYDRA_DEBUG", "maybe")]);
    dpm.assert_code(2).assert_stdout_lacks("ran").assert_stderr_contains("dpm: error: HYDRA_DEBUG=maybe: not a boolean");
    let hydra = ssh.hydra(&["-n", "1", "/bin/echo", "ran"], &[("HYDRA_DEBUG", "maybe")]);
    assert_ne!(hydra.code(), 0, "{}", hydra.describe());
    hydra.assert_stdout_lacks("ran").assert_stderr_contains("unable to parse HYDRA_DEBUG");
}

#[test]
fn hydra_binding_binds_as_bind_to_does_under_hydra() {
    let ssh = Ssh::new();
    let sorted = |out: &Output| {
        let mut l = out.lines();
        l.sort();
        l
    };
    let show = ["-n", "2", "grep", "Cpus_allowed_list", "/proc/self/status"];
    for (vars, flag) in [(&[("HYDRA_BINDING", "core")][..], None), (&[("HYDRA_BINDING", "core")][..], Some("-bind-to=none"))] {
        let args: Vec<&str> = flag.into_iter().chain(show).collect();
        let dpm = ssh.dpm(&args, vars);
        dpm.assert_success();
        let hydra_args: Vec<&str> = flag.map(|_| ["-bind-to", "none"]).into_iter().flatten().chain(show).collect();
        let hydra = ssh.hydra(&hydra_args, vars);
        assert_eq!(sorted(&dpm), sorted(&hydra), "{vars:?} {flag:?}\ndpm\n{}\nHydra\n{}", dpm.describe(), hydra.describe());
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus > 1 {
        let bound = sorted(&ssh.dpm(&show, &[("HYDRA_BINDING", "core")]));
        assert!(bound.windows(2).all(|w| w[0] != w[1]) && bound.iter().all(|l| !l.contains(['-', ','])), "{bound:?}");
    }
    let bad = ["-n", "1", "/bin/echo", "ran"];
    let dpm = ssh.dpm(&bad, &[("HYDRA_BINDING", "dpm-bogus")]);
    dpm.assert_code(2).assert_stdout_lacks("ran").assert_stderr_contains("dpm: error: HYDRA_BINDING=dpm-bogus: ");
    let hydra = ssh.hydra(&bad, &[("HYDRA_BINDING", "dpm-bogus")]);
    assert_ne!(hydra.code(), 0, "{}", hydra.describe());
}

#[test]
fn launcher_extra_args_follow_the_launcher_s_own_as_under_hydra() {
    let ssh = Ssh::new();
    let args = ["-hosts", "dpm-xa-node", "-n", "1", "/bin/true"];
    let vars = [("HYDRA_LAUNCHER_EXTRA_ARGS", "-q  -4")];
    ssh.dpm(&args, &vars).assert_success();
    let dpm = ssh.take();
    ssh.hydra(&args, &vars).assert_success();
    let hydra = ssh.take();
    for (who, log) in [("dpm", &dpm), ("Hydra", &hydra)] {
        assert_eq!(log.len(), 1, "{who}: {log:?}");
        assert!(log[0].starts_with("-x -q -4 dpm-xa-node "), "{who}: {log:?}");
    }
}

#[test]
fn the_port_range_bounds_the_port_daemons_connect_to_as_under_hydra() {
    let ssh = Ssh::new();
    // A range of 40 from a port the system just handed out (so likely free).
    let base = std::net::TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port().min(65_000);
    let range = format!("{base}:{}", base + 40);
    let in_range = |port: u16| (base..=base + 40).contains(&port);
    let port_after = |text: &str, marker: &str| -> u16 {
        let rest = text.split(marker).nth(1).unwrap_or_else(|| panic!("no {marker:?} in {text}"));
        let digits: String = rest.split(':').nth(1).unwrap_or_default().chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap_or_else(|_| panic!("no port after {marker:?} in {text}"))
    };
    // Hydra: its proxies connect back to the control port.
    ssh.hydra(&["-hosts", "dpm-pr-node", "-n", "1", "/bin/true"], &[("MPIEXEC_PORT_RANGE", &range)]).assert_success();
    let log = ssh.take().join("\n");
    let port = port_after(&log, "--control-port ");
    assert!(in_range(port), "Hydra's control port {port} outside {range}: {log}");
    // dpm: daemons connect only under -launcher manual; it listens in the range.
    for name in ["MPIEXEC_PORT_RANGE", "MPICH_PORT_RANGE", "MPIR_CVAR_CH3_PORT_RANGE"] {
        let out = Dpm::run(["-launcher", "manual", "--connect-timeout", "1", "-hosts", "dpm-pr-node", "-n", "1", "/bin/true"]).env(name, &range).output();
        assert_ne!(out.code(), 0, "{}", out.describe());
        let port = port_after(&out.stderr_str(), "listening on ");
        assert!(in_range(port), "{name}: dpm's port {port} outside {range}\n{}", out.describe());
    }
    // A range that cannot be read is refused, naming the variable.
    let out = Dpm::run(["-n", "1", "/bin/echo", "ran"]).env("MPIEXEC_PORT_RANGE", "9:8").output();
    out.assert_code(2).assert_stdout_lacks("ran").assert_stderr_contains("dpm: error: MPIEXEC_PORT_RANGE=9:8: ");
}
