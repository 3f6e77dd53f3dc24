//! Hydra's last options, each run under dpm and under `.venv/bin/mpiexec.hydra`
//! (MPICH 5.0.2) and compared: `-prepend-pattern`, `-print-all-exitcodes`,
//! `-info`, `-skip-launch-node`, `-order-nodes`, `-rankmap`, and what the
//! ranks' environment holds under `-genvnone`/`-genvlist`. Several nodes
//! are host names that a stand-in ssh (a script this test writes) "reaches"
//! by running the remote command on this machine: both launchers start
//! their remote parts through it, so the placement each chooses is seen
//! with nothing leaving the machine.

mod common;

use common::{hostname, hydra, placement, under_hydra, Dpm, Output, TempFile};

/// The same command line under dpm and Hydra, with remote nodes started
/// through [`common::LOCAL_SSH`] when `hosts` is given.
struct Pair {
    ssh: TempFile,
}

impl Pair {
    fn new() -> Pair {
        Pair { ssh: common::local_ssh() }
    }

    fn dpm(&self, hosts: Option<&str>, args: &[&str]) -> Output {
        let mut all: Vec<String> = Vec::new();
        if let Some(h) = hosts {
            all.extend(["-launcher", "ssh", "--ssh-command", &self.ssh.path_str(), "-hosts", h].map(String::from));
        }
        all.extend(args.iter().map(|a| a.to_string()));
        Dpm::run(&all).output()
    }

    fn hydra(&self, hosts: Option<&str>, args: &[&str]) -> Output {
        let mut all: Vec<String> = Vec::new();
        if let Some(h) = hosts {
            all.extend(["-launcher", "ssh", "-launcher-exec", &self.ssh.path_str(), "-hosts", h].map(String::from));
        }
        all.extend(args.iter().map(|a| a.to_string()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        under_hydra(&all)
    }
}

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

// ---- -prepend-pattern ---------------------------------------------------------------

#[test]
fn prepend_pattern_prefixes_every_line_as_hydra_does() {
    let pair = Pair::new();
    let args = ["-prepend-pattern", "<%r %g %p %h %%> ", "-n", "3", "/bin/sh", "-c", "echo one; echo two"];
    let hosts = "dpm-node-a:1,dpm-node-b:2";
    let dpm = pair.dpm(Some(hosts), &args);
    dpm.assert_success();
    let want: Vec<String> = sorted(
        [(0, 0, "dpm-node-a"), (1, 1, "dpm-node-b"), (2, 1, "dpm-node-b")]
            .iter()
            .flat_map(|(r, p, h)| ["one", "two"].map(|w| format!("<{r} 0 {p} {h} %> {w}")))
            .collect(),
    );
    assert_eq!(sorted(dpm.lines()), want, "{}", dpm.describe());
    let hydra = pair.hydra(Some(hosts), &args);
    assert_eq!(sorted(hydra.lines()), want, "Hydra differs\n{}", hydra.describe());
    // An empty pattern prefixes nothing, under both.
    let args = ["-prepend-pattern", "", "-n", "1", "/bin/echo", "bare"];
    assert_eq!(pair.dpm(None, &args).lines(), ["bare"]);
    assert_eq!(pair.hydra(None, &args).lines(), ["bare"]);
}

#[test]
fn a_bad_prepend_pattern_is_a_usage_error() {
    // Hydra fails at the first line of output ("unrecognized pattern specifier"); dpm before anything runs.
    let out = Dpm::run(["-prepend-pattern", "%x", "-n", "1", "/bin/echo", "ran"]).output();
    out.assert_code(2).assert_stdout_lacks("ran");
    out.assert_stderr_contains("'-prepend-pattern %x': unknown specifier '%x'");
    let hydra = under_hydra(&["-prepend-pattern", "%x", "-n", "1", "/bin/echo", "ran"]);
    assert_ne!(hydra.code(), 0, "{}", hydra.describe());
}

// ---- -print-all-exitcodes --------------------------------------------------------------

#[test]
fn print_all_exitcodes_lists_every_wait_status_node_by_node_as_hydra_does() {
    let pair = Pair::new();
    let me = hostname();
    // -disable-auto-cleanup: every rank ends by itself (no kill races the exits).
    let args = ["-print-all-exitcodes", "-disable-auto-cleanup", "-n", "3", "/bin/sh", "-c", "exit $PMI_RANK"];
    let want = vec![format!("[mpiexec@{me}] Exit codes: [dpm-node-a] 0"), "[dpm-node-b] 256,512".to_string()];
    let hosts = "dpm-node-a:1,dpm-node-b:2";
    let dpm = pair.dpm(Some(hosts), &args);
    assert_eq!(dpm.lines(), want, "{}", dpm.describe());
    assert_ne!(dpm.code(), 0);
    let hydra = pair.hydra(Some(hosts), &args);
    assert_eq!(hydra.lines(), want, "Hydra differs\n{}", hydra.describe());
    // One node.
    let args = ["-print-all-exitcodes", "-disable-auto-cleanup", "-n", "2", "/bin/sh", "-c", "exit $((PMI_RANK * 3))"];
    let want = vec![format!("[mpiexec@{me}] Exit codes: [{me}] 0,768")];
    for out in [pair.dpm(None, &args), pair.hydra(None, &args)] {
        assert_eq!(out.lines(), want, "{}", out.describe());
    }
    // A rank killed by a signal: its number, as wait(2) gives it (Hydra 5.0.2's
    // mpiexec itself fails an assertion on this one).
    let args = ["-print-all-exitcodes", "-disable-auto-cleanup", "-n", "2", "/bin/sh", "-c", "[ $PMI_RANK = 1 ] && kill -USR1 $$; exit 0"];
    let out = pair.dpm(None, &args);
    assert_eq!(out.lines(), [format!("[mpiexec@{me}] Exit codes: [{me}] 0,10")], "{}", out.describe());
    // Without the option, nothing of the kind.
    pair.dpm(None, &["-n", "1", "/bin/true"]).assert_success().assert_stdout_lacks("Exit codes");
}

// ---- -info --------------------------------------------------------------------------------

#[test]
fn info_prints_build_details_and_runs_nothing() {
    for out in [Dpm::run(["-info", "-n", "1", "/bin/echo", "RAN"]).output(), under_hydra(&["-info", "-n", "1", "/bin/echo", "RAN"])] {
        out.assert_success().assert_stdout_lacks("RAN");
        out.assert_stdout_contains("build details:");
        for row in ["Version:", "Launchers available:", "Topology libraries available:", "Resource management kernels available:"] {
            out.assert_stdout_contains(row);
        }
    }
    let out = Dpm::raw(["run", "-info"]).output();
    out.assert_success().assert_stdout_contains(concat!("Version:                                 ", env!("CARGO_PKG_VERSION")));
    out.assert_stdout_contains("Launchers available:                     fork ssh");
}

// ---- -genvnone / -genvlist -------------------------------------------------------------

const SHOW_ENV: &str = "echo PATH=$PATH; echo HOME=$HOME; echo KEPT=$DPM_T_KEPT; echo SET=$DPM_T_SET";

#[test]
fn genvnone_and_genvlist_keep_the_node_s_own_environment_as_under_hydra() {
    let path = std::env::var("PATH").unwrap_or_default();
    let home = std::env::var("HOME").unwrap_or_default();
    let want = [format!("PATH={path}"), format!("HOME={home}"), "KEPT=node".into(), "SET=given".into()];
    for mode in [&["-genvnone"][..], &["-genvlist", "DPM_T_OTHER"], &["-envnone"]] {
        let mut args: Vec<&str> = vec!["-genv", "DPM_T_SET", "given"];
        let local = mode[0] == "-envnone";
        if !local {
            args.extend(mode);
        }
        args.extend(["-n", "1"]);
        if local {
            args.extend(mode);
        }
        args.extend(["/bin/sh", "-c", SHOW_ENV]);
        let dpm = Dpm::run(&args).env("DPM_T_KEPT", "node").output();
        assert_eq!(dpm.lines(), want, "{mode:?}\n{}", dpm.describe());
        let hydra = common::hydra_output(|| Dpm::mpiexec(&hydra(), &args).env("DPM_T_KEPT", "node"));
        assert_eq!(hydra.lines(), want, "{mode:?}: Hydra differs\n{}", hydra.describe());
    }
    // On daemons of their own (forked), and for a spawned job's environment too: the node's.
    let out = Dpm::run(["-genvnone", "--virtual-nodes", "2", "-n", "2", "/bin/sh", "-c", SHOW_ENV]).env("DPM_T_KEPT", "node").output();
    let one = [format!("PATH={path}"), format!("HOME={home}"), "KEPT=node".into(), "SET=".into()];
    let want2 = sorted(one.iter().chain(&one).cloned().collect());
    assert_eq!(sorted(out.lines()), want2, "{}", out.describe());
}

// ---- -skip-launch-node, -order-nodes, -rankmap ---------------------------------------

/// Each rank's host, by rank: Hydra's ranks say theirs (`PMI_HOSTNAME`, the
/// host name as listed); dpm says where it placed them (`--report-placement`).
fn hosts_by_rank(pair: &Pair, hosts: &str, args: &[&str], n: usize) -> (Vec<String>, Vec<String>) {
    let n_text = n.to_string();
    let mut d: Vec<&str> = args.to_vec();
    d.extend(["--report-placement", "-n", &n_text, "/bin/true"]);
    let dpm = pair.dpm(Some(hosts), &d);
    dpm.assert_success();
    let mut by_rank = vec![String::new(); n];
    for (_, ranks, host) in placement(&dpm.stderr_str()) {
        for part in ranks.split(',') {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            let (a, b) = (a.parse::<usize>().unwrap(), b.parse::<usize>().unwrap());
            for slot in &mut by_rank[a..=b] {
                *slot = host.clone();
            }
        }
    }
    let mut h: Vec<&str> = args.to_vec();
    h.extend(["-n", &n_text, "/bin/sh", "-c", "echo $PMI_RANK $PMI_HOSTNAME"]);
    let hydra = pair.hydra(Some(hosts), &h);
    hydra.assert_success();
    let mut hydra_by_rank = vec![String::new(); n];
    for line in hydra.lines() {
        let (r, host) = line.split_once(' ').expect("rank host");
        hydra_by_rank[r.parse::<usize>().unwrap()] = host.to_string();
    }
    (by_rank, hydra_by_rank)
}

#[test]
fn order_nodes_sorts_the_list_by_slots_as_hydra_does() {
    let pair = Pair::new();
    let hosts = "dpm-node-a:1,dpm-node-b:3,dpm-node-c:2";
    let (dpm, hydra) = hosts_by_rank(&pair, hosts, &["-order-nodes", "descending"], 6);
    assert_eq!(dpm, ["dpm-node-b", "dpm-node-b", "dpm-node-b", "dpm-node-c", "dpm-node-c", "dpm-node-a"]);
    assert_eq!(dpm, hydra, "Hydra differs");
    let (dpm, hydra) = hosts_by_rank(&pair, hosts, &["-order-nodes", "ASCENDING"], 3);
    assert_eq!(dpm, ["dpm-node-a", "dpm-node-c", "dpm-node-c"]);
    assert_eq!(dpm, hydra, "Hydra differs");
    let out = Dpm::run(["-order-nodes", "sideways", "-n", "1", "/bin/true"]).output();
    out.assert_code(2).assert_stderr_contains("'-order-nodes sideways': not a sort order (ASCENDING or DESCENDING)");
}

#[test]
fn rankmap_places_each_rank_on_its_node_as_hydra_does() {
    let pair = Pair::new();
    let hosts = "dpm-node-a:2,dpm-node-b:2";
    // Shorter than the job: repeated from its first entry on node 0.
    let (dpm, hydra) = hosts_by_rank(&pair, hosts, &["-rankmap", "1,0,1"], 4);
    assert_eq!(dpm, ["dpm-node-b", "dpm-node-a", "dpm-node-b", "dpm-node-a"]);
    assert_eq!(dpm, hydra, "Hydra differs");
    let (dpm, hydra) = hosts_by_rank(&pair, hosts, &["-rankmap", "(vector,(1,1,3),0)"], 4);
    assert_eq!(dpm, ["dpm-node-b", "dpm-node-b", "dpm-node-b", "dpm-node-a"]);
    assert_eq!(dpm, hydra, "Hydra differs");
    // A node the list does not have (Hydra crashes on it: SIGSEGV).
    let out = Dpm::run(["-hosts", "localhost:2", "-rankmap", "0,1", "-n", "2", "/bin/echo", "ran"]).output();
    out.assert_code(2).assert_stdout_lacks("ran");
    out.assert_stderr_contains("-rankmap 0,1: node 1 is not in the node list (1 node)");
    let out = Dpm::run(["-rankmap", "0,(1", "-n", "2", "/bin/true"]).output();
    out.assert_code(2).assert_stderr_contains("-rankmap 0,(1: expected ','");
}

#[test]
fn skip_launch_node_runs_nothing_here_as_hydra_does() {
    let pair = Pair::new();
    let me = hostname();
    let hosts = format!("{me}:2,dpm-node-b:2");
    let (dpm, hydra) = hosts_by_rank(&pair, &hosts, &["-skip-launch-node"], 2);
    assert_eq!(dpm, ["dpm-node-b", "dpm-node-b"]);
    assert_eq!(dpm, hydra, "Hydra differs");
    // Nothing left: an error under both.
    let out = Dpm::run(["-skip-launch-node", "-n", "1", "/bin/echo", "ran"]).output();
    out.assert_code(2).assert_stdout_lacks("ran");
    out.assert_stderr_contains("-skip-launch-node: no node is left once this machine's are skipped");
    let hydra = under_hydra(&["-skip-launch-node", "-n", "1", "/bin/echo", "ran"]);
    assert_ne!(hydra.code(), 0, "{}", hydra.describe());
    hydra.assert_stdout_lacks("ran");
}
