//! dpm inside PBS/Torque, LSF and Grid Engine allocations, compared with Hydra
//! (`.venv/bin/mpiexec.hydra`, MPICH 5.0.2) on the same environment.
//!
//! Neither batch system has a free implementation, so each test sets the
//! allocation's variables itself (a node file naming this host and
//! `127.0.0.2` — another host to both launchers, still this machine) and puts
//! stand-in agents where the batch system's would be: `blaunch` in a
//! temporary `LSF_BINDIR`, `pbs_tmrsh` and `ssh` (Hydra's agent under PBS
//! without TM) first on `PATH`. A stand-in writes its name and arguments to a
//! log and runs the command here, with its stdin and stdout, as the real
//! agent would on the named host. The tests then check that dpm places ranks
//! exactly as Hydra does (Hydra's `-verbose` proxy arguments against dpm's
//! `--report-placement`), with and without `-n`, and that the remote daemons
//! went through the agent while this host's were forked.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::{hello, hostname, hydra, placement, Dpm, Output, TempDir, MARKER_VAR};

/// A stand-in agent: logs `NAME ARGS…`, skips its options and the host,
/// then runs the rest as a shell command (Hydra quotes the proxy's path).
const STAND_IN: &str = r#"#!/bin/sh
echo "$(basename "$0") $*" >> "$AGENT_LOG"
while [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done
shift
exec sh -c "$*"
"#;

/// A temporary batch environment: a directory with the stand-in agents and
/// the allocation's files, and the agents' log.
struct Batch {
    dir: TempDir,
}

impl Batch {
    fn new() -> Batch {
        let dir = TempDir::new("dpm-batch");
        for agent in ["blaunch", "pbs_tmrsh", "ssh"] {
            let path = dir.path.join(agent);
            fs::write(&path, STAND_IN).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        Batch { dir }
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.path.join(name);
        fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    fn log_path(&self) -> String {
        self.dir.path.join("agents.log").display().to_string()
    }

    /// The agents' log lines so far, and a fresh log.
    fn take_log(&self) -> Vec<String> {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        let _ = fs::remove_file(self.log_path());
        text.lines().map(String::from).collect()
    }

    /// `PATH` with the stand-ins first.
    fn path_var(&self) -> String {
        format!("{}:{}", self.dir.path_str(), std::env::var("PATH").unwrap_or_default())
    }

    /// `cmd` with this environment (`vars`) and the stand-ins found first;
    /// dpm's own processes carry the run's marker too, so the leftover check
    /// covers agents and daemons, not only ranks.
    fn env(&self, cmd: Dpm, vars: &[(&str, &str)]) -> Dpm {
        let marker = cmd.marker().to_string();
        let mut cmd = cmd.env("PATH", &self.path_var()).env("AGENT_LOG", &self.log_path()).env(MARKER_VAR, &marker);
        for (k, v) in vars {
            cmd = cmd.env(k, v);
        }
        cmd
    }
}

/// Ranks "0-1,3" as a list.
fn expand(ranks: &str) -> Vec<u32> {
    ranks
        .split(',')
        .flat_map(|part| match part.split_once('-') {
            Some((a, b)) => (a.parse().unwrap()..=b.parse().unwrap()).collect::<Vec<u32>>(),
            None => vec![part.parse().unwrap()],
        })
        .collect()
}

/// Where dpm's job 0 ran: (host, ranks) per node, from `--report-placement`.
fn dpm_placement(out: &Output) -> Vec<(String, Vec<u32>)> {
    placement(&out.stderr_str()).into_iter().filter(|(job, _, _)| *job == 0).map(|(_, ranks, host)| (host, expand(&ranks))).collect()
}

/// Where Hydra's ranks ran: (host, ranks) per proxy, from `-verbose`'s
/// "Arguments being passed to proxy" lines; and its process mapping.
fn hydra_placement(out: &Output) -> (Vec<(String, Vec<u32>)>, String) {
    let text = out.stdout_str() + &out.stderr_str();
    let mut proxies = Vec::new();
    let mut mapping = String::new();
    for line in text.lines().filter(|l| l.contains("--hostname ") && l.contains("--exec-rank ")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |flag: &str| words.iter().position(|w| *w == flag).map(|i| words[i + 1]).unwrap_or_else(|| panic!("no {flag} in {line}"));
        // One block per executable segment; a run beyond the slots wraps
        // around, giving a proxy a second block of ranks.
        let mut ranks: Vec<u32> = Vec::new();
        for (i, _) in words.iter().enumerate().filter(|(_, w)| **w == "--exec-rank") {
            let first: u32 = words[i + 1].parse().unwrap();
            let at = i + words[i..].iter().position(|w| *w == "--exec-proc-count").unwrap_or_else(|| panic!("no --exec-proc-count in {line}"));
            let count: u32 = words[at + 1].parse().unwrap();
            ranks.extend(first..first + count);
        }
        ranks.sort_unstable();
        mapping = after("--pmi-process-mapping").to_string();
        proxies.push((after("--hostname").to_string(), ranks));
    }
    assert!(!proxies.is_empty(), "no proxy arguments in Hydra's -verbose output\n{}", out.describe());
    (proxies, mapping)
}

/// dpm's process mapping for a placement (nodes in order, block-wise).
fn mapping_of(placement: &[(String, Vec<u32>)]) -> String {
    let counts: Vec<usize> = placement.iter().map(|(_, r)| r.len()).collect();
    if counts.iter().all(|&c| c == counts[0]) {
        format!("(vector,(0,{},{}))", counts.len(), counts[0])
    } else {
        format!("(vector,{})", counts.iter().enumerate().map(|(i, c)| format!("({i},1,{c})")).collect::<Vec<_>>().join(","))
    }
}

/// The hosts an agent was asked for, by agent name, in the log lines.
fn agent_hosts(log: &[String], agent: &str) -> Vec<String> {
    log.iter()
        .filter_map(|l| l.strip_prefix(&format!("{agent} ")))
        .map(|rest| rest.split_whitespace().find(|w| !w.starts_with('-')).unwrap_or_default().to_string())
        .collect()
}

/// Run dpm and Hydra in the same allocation with `args`, and compare where
/// the ranks went; returns dpm's output and the two agent logs.
fn compare(batch: &Batch, vars: &[(&str, &str)], args: &[&str]) -> (Output, Vec<String>, Vec<String>) {
    let mut dpm_args = vec!["--report-placement"];
    dpm_args.extend_from_slice(args);
    let dpm = batch.env(Dpm::run(&dpm_args), vars).output();
    dpm.assert_success();
    let dpm_log = batch.take_log();
    let mut hydra_args = vec!["-verbose"];
    hydra_args.extend_from_slice(args);
    let hydra = common::hydra_output(|| batch.env(Dpm::mpiexec(&hydra(), &hydra_args), vars));
    hydra.assert_success();
    let hydra_log = batch.take_log();
    let (theirs, their_mapping) = hydra_placement(&hydra);
    let ours = dpm_placement(&dpm);
    assert_eq!(ours, theirs, "placement of {args:?}: dpm (left) vs Hydra (right)\n{}\n{}", dpm.describe(), hydra.describe());
    // Hydra's mapping string for uneven nodes is its own shorthand; the
    // placements above are equal, and so is an even mapping's string.
    if their_mapping.starts_with("(vector,(0,") && their_mapping.ends_with("))") && their_mapping.matches('(').count() == 2 {
        assert_eq!(mapping_of(&ours), their_mapping, "process mapping of {args:?}");
    }
    (dpm, dpm_log, hydra_log)
}

fn hello_lines(out: &Output) -> usize {
    out.lines().iter().filter(|l| l.starts_with("hello from rank")).count()
}

#[test]
fn pbs_nodefile_places_ranks_as_hydra_and_starts_remote_daemons_through_pbs_tmrsh() {
    let batch = Batch::new();
    let me = hostname();
    let nodefile = batch.file("nodes", &format!("{me}\n{me}\n127.0.0.2\n127.0.0.2\n"));
    let vars = [("PBS_NODEFILE", nodefile.as_str())];
    let hello = hello();
    // No -n: one rank per slot, as Hydra.
    let (out, ours, theirs) = compare(&batch, &vars, &[&hello]);
    assert_eq!(hello_lines(&out), 4, "{}", out.describe());
    out.assert_stderr_contains(&format!("dpm: nodes from the pbs allocation (PBS_NODEFILE={nodefile}): 2 nodes, 4 slots"));
    // dpm: pbs_tmrsh for the other host only (this one forked); Hydra
    // 5.0.2 (no TM) its ssh, also for the other host only.
    assert_eq!(agent_hosts(&ours, "pbs_tmrsh"), ["127.0.0.2"], "{ours:?}");
    assert!(ours.iter().all(|l| l.starts_with("pbs_tmrsh ") && l.contains(" daemon --node 1 ")), "{ours:?}");
    assert_eq!(agent_hosts(&theirs, "ssh"), ["127.0.0.2"], "{theirs:?}");
    // -n 3: two here, one there.
    let (out, ours, _) = compare(&batch, &vars, &["-n", "3", &hello]);
    assert_eq!(hello_lines(&out), 3, "{}", out.describe());
    assert_eq!(agent_hosts(&ours, "pbs_tmrsh"), ["127.0.0.2"]);
    // A documented difference (docs/batch.md): the allocated slots are the
    // universe size (Hydra leaves it unset without -usize).
    let out = batch.env(Dpm::run(["-n", "2", &common::program("universe")]), &vars).output();
    out.assert_success().assert_stdout_contains("rank 0 universe flag=1 size=4");
}

#[test]
fn lsf_mcpu_hosts_places_ranks_as_hydra_and_starts_remote_daemons_through_blaunch() {
    let batch = Batch::new();
    let me = hostname();
    let hosts = format!("{me} 1 127.0.0.2 3");
    let bindir = batch.dir.path_str();
    let vars = [("LSF_BINDIR", bindir.as_str()), ("LSB_MCPU_HOSTS", hosts.as_str())];
    let hello = hello();
    let (out, ours, theirs) = compare(&batch, &vars, &[&hello]);
    assert_eq!(hello_lines(&out), 4, "{}", out.describe());
    out.assert_stderr_contains(&format!("daemons through {bindir}/blaunch"));
    assert_eq!(agent_hosts(&ours, "blaunch"), ["127.0.0.2"], "{ours:?}");
    assert_eq!(agent_hosts(&theirs, "blaunch"), ["127.0.0.2"], "Hydra starts its remote proxy through blaunch too: {theirs:?}");
    let (_, ours, _) = compare(&batch, &vars, &["-n", "2", &hello]);
    assert_eq!(agent_hosts(&ours, "blaunch"), ["127.0.0.2"]);
}

#[test]
fn grid_engine_pe_hostfile_places_ranks_as_hydra_and_starts_remote_daemons_through_qrsh() {
    let batch = Batch::new();
    let me = hostname();
    // $SGE_ROOT/bin/$ARC/qrsh: where both launchers look first.
    let arch = batch.dir.path.join("bin/lx-amd64");
    fs::create_dir_all(&arch).unwrap();
    fs::write(arch.join("qrsh"), STAND_IN).unwrap();
    fs::set_permissions(arch.join("qrsh"), fs::Permissions::from_mode(0o755)).unwrap();
    let pe = batch.file("pe_hostfile", &format!("{me} 1 all.q@{me} UNDEFINED\n127.0.0.2 3 all.q@127.0.0.2 UNDEFINED\n"));
    let root = batch.dir.path_str();
    let vars = [("PE_HOSTFILE", pe.as_str()), ("SGE_ROOT", root.as_str()), ("ARC", "lx-amd64")];
    let hello = hello();
    // No -n: one rank per slot; then -n 2 and -n 5 (beyond the slots, round again).
    for args in [vec![hello.as_str()], vec!["-n", "2", &hello], vec!["-n", "5", &hello]] {
        let (out, ours, theirs) = compare(&batch, &vars, &args);
        out.assert_stderr_contains(&format!("dpm: nodes from the sge allocation (PE_HOSTFILE={pe}): 2 nodes, 4 slots"));
        assert_eq!(agent_hosts(&ours, "qrsh"), ["127.0.0.2"], "{ours:?}");
        assert!(ours.iter().all(|l| l.starts_with("qrsh -inherit -V 127.0.0.2 ")), "{ours:?}");
        assert_eq!(agent_hosts(&theirs, "qrsh"), ["127.0.0.2"], "Hydra starts its remote proxy through qrsh too: {theirs:?}");
    }
}

#[test]
fn the_tree_fans_out_through_the_agent_and_sigterm_or_sigint_ends_every_agent() {
    let batch = Batch::new();
    let me = hostname();
    let hosts = format!("{me} 1 127.0.0.2 1 127.0.0.3 1");
    let bindir = batch.dir.path_str();
    let vars = [("LSF_BINDIR", bindir.as_str()), ("LSB_MCPU_HOSTS", hosts.as_str())];
    // A chain: the launcher forks node 0 (this host), which starts node 1
    // through blaunch, which starts node 2 through blaunch.
    let out = batch.env(Dpm::run(["--tree-fanout", "1", "--report-placement", &hello()]), &vars).output();
    out.assert_success();
    assert_eq!(hello_lines(&out), 3, "{}", out.describe());
    let log = batch.take_log();
    assert_eq!(agent_hosts(&log, "blaunch"), ["127.0.0.2", "127.0.0.3"], "{log:?}");
    // SIGTERM or SIGINT (Ctrl-C) while ranks run: dpm ends, and with it
    // every agent, daemon and rank (all carry the marker; `wait` fails on
    // any left).
    for (signal, code) in [("TERM", 143), ("INT", 130)] {
        let running = batch.env(Dpm::run(["-n", "3", "/bin/sleep", "300"]), &vars).spawn();
        common::wait_for_ranks(running.marker(), "/bin/sleep", 3);
        assert_eq!(agent_hosts(&batch.take_log(), "blaunch").len(), 2);
        running.signal(signal);
        let out = running.wait();
        assert_eq!(out.code(), code, "SIG{signal}\n{}", out.describe());
    }
}

#[test]
fn precedence_hosts_over_rmk_over_detection() {
    let batch = Batch::new();
    let me = hostname();
    let nodefile = batch.file("nodes", &format!("{me}\n127.0.0.2\n"));
    let pe = batch.file("pe", &format!("{me} 2 all.q@{me} UNDEFINED\n"));
    let sge_root = batch.dir.path_str();
    let vars = [("PBS_NODEFILE", nodefile.as_str()), ("PE_HOSTFILE", pe.as_str()), ("SGE_ROOT", sge_root.as_str()), ("ARC", "lx-amd64")];
    // Detected: Grid Engine before PBS, as Hydra's order.
    let out = batch.env(Dpm::run(["--report-placement", &hello()]), &vars).output();
    out.assert_success().assert_stderr_contains(&format!("dpm: nodes from the sge allocation (PE_HOSTFILE={pe}): 1 node, 2 slots"));
    // -rmk (and HYDRA_RMK) choose another.
    let out = batch.env(Dpm::run(["-rmk", "pbs", "--report-placement", &hello()]), &vars).output();
    out.assert_success().assert_stderr_contains("dpm: nodes from the pbs allocation");
    assert_eq!(dpm_placement(&out), [(me.clone(), vec![0]), ("127.0.0.2".to_string(), vec![1])]);
    let out = batch.env(Dpm::run(["--report-placement", &hello()]), &vars).env("HYDRA_RMK", "pbs").output();
    out.assert_success().assert_stderr_contains("dpm: nodes from the pbs allocation");
    // -rmk user: no allocation, this machine alone.
    let out = batch.env(Dpm::run(["-rmk", "user", "--report-placement", &hello()]), &vars).output();
    out.assert_success();
    assert!(!out.stderr_str().contains("allocation"), "{}", out.describe());
    assert_eq!(hello_lines(&out), 1);
    // -hosts wins over all of them, and starts no agent.
    batch.take_log();
    let out = batch.env(Dpm::run(["-hosts", "localhost", "-rmk", "pbs", "-n", "2", "--report-placement", &hello()]), &vars).output();
    out.assert_success();
    assert_eq!(dpm_placement(&out), [("localhost".to_string(), vec![0, 1])]);
    assert!(batch.take_log().is_empty());
}

#[test]
fn bad_allocations_are_usage_errors() {
    let batch = Batch::new();
    let empty = batch.file("empty", "# nothing\n\n");
    // (arguments, environment, the error's text)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (&[], &[("PBS_NODEFILE", "/nonexistent/nodefile")], "PBS_NODEFILE=/nonexistent/nodefile: cannot read it"),
        (&[], &[("PBS_NODEFILE", &empty)], "names no host"),
        (&[], &[("LSF_BINDIR", "/x"), ("LSB_MCPU_HOSTS", "a 2 b")], "LSB_MCPU_HOSTS line 1: 'a 2 b': expected pairs"),
        (&[], &[("LSF_BINDIR", "/x"), ("LSB_MCPU_HOSTS", "a none")], "host a: bad slot count 'none'"),
        (&["-rmk", "sge"], &[], "-rmk sge: no Grid Engine allocation here (PE_HOSTFILE not set)"),
        (&["-rmk", "cobalt"], &[], "'-rmk cobalt': unknown resource manager 'cobalt'"),
        (&[], &[("HYDRA_LAUNCHER", "rsh")], "HYDRA_LAUNCHER: unknown launcher 'rsh'"),
    ];
    for (args, vars, message) in cases {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["-n", "1", "/bin/true"]);
        let out = batch.env(Dpm::run(&all), vars).output();
        out.assert_code(2).assert_stderr_contains(message);
    }
}

#[test]
fn a_launcher_by_name_or_variable_uses_that_agent() {
    let batch = Batch::new();
    let bindir = batch.dir.path_str();
    // -launcher lsf with a host list: blaunch for the other host (a slot
    // each: daemons start only where ranks are).
    let out = batch.env(Dpm::run(["-launcher", "lsf", "-hosts", "localhost:1,127.0.0.2:1", "-n", "2", &hello()]), &[("LSF_BINDIR", &bindir)]).output();
    out.assert_success();
    assert_eq!(agent_hosts(&batch.take_log(), "blaunch"), ["127.0.0.2"]);
    // HYDRA_LAUNCHER=sge with HYDRA_LAUNCHER_EXEC: that program, with qrsh's flags.
    let exec = format!("{bindir}/pbs_tmrsh");
    let out =
        batch.env(Dpm::run(["-hosts", "localhost:1,127.0.0.2:1", "-n", "2", &hello()]), &[("HYDRA_LAUNCHER", "sge"), ("HYDRA_LAUNCHER_EXEC", &exec)]).output();
    out.assert_success();
    let log = batch.take_log();
    assert!(log.len() == 1 && log[0].starts_with("pbs_tmrsh -inherit -V 127.0.0.2 "), "{log:?}");
    // HYDRA_LAUNCHER_AUTOFORK=0: this machine's daemon through the agent too,
    // even for a one-node allocation.
    let me = hostname();
    let hosts = format!("{me} 2");
    let vars = [("LSF_BINDIR", bindir.as_str()), ("LSB_MCPU_HOSTS", hosts.as_str()), ("HYDRA_LAUNCHER_AUTOFORK", "0")];
    let out = batch.env(Dpm::run([hello()]), &vars).output();
    out.assert_success();
    assert_eq!(hello_lines(&out), 2, "{}", out.describe());
    assert_eq!(agent_hosts(&batch.take_log(), "blaunch"), [me]);
}

#[test]
fn dpm_boot_inside_an_allocation_takes_its_hosts_and_status_names_it() {
    let batch = Batch::new();
    let me = hostname();
    let nodefile = batch.file("nodes", &format!("{me}\n{me}\n127.0.0.2\n127.0.0.2\n"));
    let dir = std::env::temp_dir().join(common::unique("dpm-boot-test"));
    let out = std::process::Command::new(common::dpm_bin())
        .arg("boot")
        .env("DPM_RUNTIME_DIR", &dir)
        .env_remove("DPM_BOOT")
        .env("PBS_NODEFILE", &nodefile)
        .env("PATH", batch.path_var())
        .env("AGENT_LOG", batch.log_path())
        .output()
        .expect("run dpm boot");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "dpm boot failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    let pid = stdout.split("(pid ").nth(1).and_then(|s| s.split(')').next()).and_then(|p| p.parse().ok()).expect("dpm boot's pid");
    let mut boot = common::boot::Boot { dir, pid, up: true };
    let status = boot.status();
    let expected = format!("nodes from the pbs allocation (PBS_NODEFILE={nodefile}): 2 nodes, 4 slots; daemons through {}/pbs_tmrsh", batch.dir.path_str());
    assert!(status.contains(&expected), "{status}");
    assert!(status.lines().any(|l| l.starts_with("1 ") && l.contains("127.0.0.2") && l.contains(" 2 ")), "{status}");
    assert_eq!(agent_hosts(&batch.take_log(), "pbs_tmrsh"), ["127.0.0.2"]);
    // A run through the boot uses the allocation's nodes (and starts no agent).
    let out = boot.run(&["--report-placement", "-n", "4", &hello()]).output();
    out.assert_success();
    assert_eq!(dpm_placement(&out), [(me, vec![0, 1]), ("127.0.0.2".to_string(), vec![2, 3])]);
    assert!(batch.take_log().is_empty());
    assert!(boot.down().status.success());
}
