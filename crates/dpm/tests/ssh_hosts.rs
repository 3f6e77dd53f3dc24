//! Real hosts: `dpm run -launcher ssh -hosts h1,h2,h3,h4` across network
//! namespaces, each with its own sshd, hostname and boot id (see
//! `tests/fixtures/netns_hosts.sh`). dpm runs on h0, the "login node"; its
//! daemons start through ssh on h1..h4 and MPICH's ranks talk to each other
//! over the bridge with its default UCX netmod (UCX's tcp transport on eth0:
//! the per-host boot id makes UCX treat every host as a separate machine, so
//! no shared memory is used between hosts — `ucx_uses_the_network` checks).
//!
//! The addresses (10.77.0.0/24) exist only inside those namespaces: no test
//! traffic can leave this machine.
//!
//! Needs root, `ip netns`, sshd (`openssh-server`). When the fixture cannot be
//! built the test says `SKIPPED: <reason>` loudly and passes — except under
//! `CI=true`, where it fails, because CI must run it.
//!
//! One #[test] runs every scenario in turn with the fixture up once (~1.5 s
//! to build, ~1 s per dpm run: ssh's key exchanges dominate on 2 cores). A
//! failing scenario does not stop the others; the test fails at the end with
//! every failure listed. After each scenario no process may be left on any
//! host but its sshd listener. The fixture is brought down (and checked to be
//! gone) at the end, also when the test panics.

mod common;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::{dpm_bin, hello, program, repo_root, Dpm, FixtureLock, Running, TempFile};

/// A hang guard, not a speed bound: a run whose daemon or host is lost ends
/// well within it (its ranks sleep far longer, so only the loss can end it).
const LOSS_GUARD: Duration = Duration::from_secs(60);

/// A hang guard for the hosts to be clean after a scenario (settling ends
/// as soon as they are).
const SETTLE_GUARD: Duration = Duration::from_secs(30);

fn fixture_script() -> PathBuf {
    repo_root().join("tests/fixtures/netns_hosts.sh")
}

/// A process on one of the fixture's hosts.
#[derive(Debug, Clone)]
struct Proc {
    host: String,
    pid: u32,
    cmd: String,
}

struct Fixture {
    ssh_command: String,
    /// `sh` script: `netns_hosts.sh exec h0 dpm run "$@"` (dpm keeps the pid).
    on_h0: TempFile,
    /// The sshd listeners, the only processes allowed between scenarios.
    listeners: HashSet<u32>,
    /// Holds the fixture's lock: the namespaces have fixed names, so two test
    /// processes (two `cargo test` runs on one machine) take turns.
    lock: Option<FixtureLock>,
    down: bool,
}

fn script(args: &[&str]) -> std::process::Output {
    common::run_fixture(&fixture_script(), args)
}

fn take_lock() -> FixtureLock {
    common::lock_fixture("dpm-netns-hosts.lock", "netns hosts")
}

impl Fixture {
    /// Build the hosts; `Err(reason)` when this machine cannot.
    fn up() -> Result<Fixture, String> {
        let lock = take_lock();
        let info = common::fixture_up(&fixture_script())?;
        let ssh_command = common::fixture_info(&info, "SSH_COMMAND");
        let wrapper = format!("#!/bin/sh\nexec bash '{}' exec h0 '{}' run \"$@\"\n", fixture_script().display(), dpm_bin());
        let on_h0 = TempFile::new("dpm-on-h0", wrapper.as_bytes(), 0o755);
        let mut fx = Fixture { ssh_command, on_h0, listeners: HashSet::new(), lock: Some(lock), down: false };
        let all = fx.procs();
        assert!(all.len() == 4 && all.iter().all(|p| p.cmd.contains("sshd")), "expected exactly the four sshd listeners on a fresh fixture, found {all:?}");
        fx.listeners = all.iter().map(|p| p.pid).collect();
        Ok(fx)
    }

    /// `dpm run -launcher ssh --ssh-command <the fixture's> ARGS` on h0.
    fn dpm(&self, args: &[&str]) -> Dpm {
        let mut all = vec!["-launcher", "ssh", "--ssh-command", &self.ssh_command];
        all.extend_from_slice(args);
        Dpm::mpiexec(&self.on_h0.path, all)
    }

    /// Every process on the hosts but the sshd listeners.
    fn procs(&self) -> Vec<Proc> {
        let out = script(&["pids"]);
        assert!(out.status.success(), "netns_hosts.sh pids: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut parts = l.splitn(3, ' ');
                let host = parts.next()?.to_string();
                let pid = parts.next()?.parse().ok()?;
                let cmd = parts.next().unwrap_or("").trim().to_string();
                Some(Proc { host, pid, cmd })
            })
            .filter(|p| !self.listeners.contains(&p.pid))
            .collect()
    }

    /// Wait up to `grace` for the hosts to be empty; kill and return what is left.
    fn settle(&self, grace: Duration) -> Vec<Proc> {
        let deadline = Instant::now() + grace;
        loop {
            let left = self.procs();
            if left.is_empty() {
                return left;
            }
            if Instant::now() >= deadline {
                for p in &left {
                    common::send_signal(p.pid, "KILL");
                }
                return left;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The pid of the dpm daemon on `host`.
    fn daemon_on(&self, host: &str) -> Option<u32> {
        self.procs().into_iter().find(|p| p.host == host && p.cmd.contains(" daemon --node ")).map(|p| p.pid)
    }

    /// Plug `host` into the bridge or pull its cable.
    fn link(&self, host: &str, up: bool) {
        let out = script(&["link", host, if up { "up" } else { "down" }]);
        assert!(out.status.success(), "netns_hosts.sh link {host}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Tear down and check that nothing of the fixture remains.
    fn down(&mut self) -> Result<(), String> {
        self.down = true;
        let started = Instant::now();
        let out = script(&["down"]);
        let mut problems = Vec::new();
        if !out.status.success() {
            problems.push(format!("netns_hosts.sh down failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let list = Command::new("ip").args(["netns", "list"]).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        let names: Vec<String> = ["hub", "h0", "h1", "h2", "h3", "h4"].iter().map(|h| format!("dpm-{h}")).collect();
        if let Ok(list) = list {
            let left: Vec<&str> = list.lines().filter_map(|l| l.split_whitespace().next()).filter(|n| names.iter().any(|m| m == n)).collect();
            if !left.is_empty() {
                problems.push(format!("namespaces left after down: {left:?}"));
            }
        }
        for n in &names {
            if std::path::Path::new("/etc/netns").join(n).exists() {
                problems.push(format!("/etc/netns/{n} left after down"));
            }
        }
        let state = std::env::temp_dir().join("dpm-netns-hosts");
        if state.exists() {
            problems.push(format!("{} left after down", state.display()));
        }
        eprintln!("fixture down in {:.2} s", started.elapsed().as_secs_f64());
        drop(self.lock.take());
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if !self.down {
            if let Err(e) = self.down() {
                eprintln!("netns hosts fixture: {e}");
            }
        }
    }
}

/// Whether process `pid` (our unreaped child) exits within `limit`.
fn exits_within(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit(')').next().and_then(|s| s.split_whitespace().next()).unwrap_or("Z");
        if state == "Z" || state == "X" {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

fn hello_on_four_hosts(fx: &Fixture) {
    let out = fx.dpm(&["-hosts", "h1,h2,h3,h4", "-ppn", "2", "--report-placement", "-n", "8", &hello()]).output();
    out.assert_success();
    for r in 0..8 {
        out.assert_stdout_contains(&format!("hello from rank {r} of 8 on host h{}: sum of ranks = 28 (expected 28)", r / 2 + 1));
    }
    let expected: Vec<_> = (0..4).map(|k| (0, format!("{}-{}", 2 * k, 2 * k + 1), format!("h{}", k + 1))).collect();
    assert_eq!(common::placement(&out.stderr_str()), expected, "{}", out.describe());
}

fn ring_round_robin(fx: &Fixture) {
    // By node: every ring neighbour is on another host.
    let out = fx.dpm(&["-hosts", "h1,h2,h3,h4", "--map-by", "node", "--report-placement", "-n", "8", &program("ring")]).output();
    out.assert_success();
    out.assert_stdout_contains("ring ok size=8 sum=288");
    let hosts: HashSet<String> = common::placement(&out.stderr_str()).into_iter().map(|p| p.2).collect();
    assert_eq!(hosts.len(), 4, "not on four hosts\n{}", out.describe());
}

/// The fixture's promise: ranks on different hosts use the network.
fn ucx_uses_the_network(fx: &Fixture) {
    // UCX prints its protocol tables on stdout, a few hundred lines.
    let out = fx.dpm(&["-hosts", "h1,h2", "-ppn", "1", "-genv", "UCX_PROTO_INFO", "y", "-n", "2", &program("ring")]).output();
    let stdout = out.stdout_str();
    let short = || format!("status {:?}; stderr:\n{}\nUCX's tables:\n{}", out.status, out.stderr_str(), ucx_summary(&stdout));
    assert_eq!(out.status.code(), Some(0), "{}", short());
    assert!(stdout.contains("ring ok size=2"), "{}", short());
    // "inter-node" tables whose lanes are tcp/eth0; "intra-node" would mean
    // UCX took h1 and h2 for one machine (shared memory, no network).
    assert!(stdout.contains("inter-node") && stdout.contains("tcp/eth0"), "no inter-node tcp/eth0 lanes: {}", short());
    assert!(!stdout.contains("intra-node"), "UCX thinks h1 and h2 are one machine: {}", short());
}

/// Which UCX contexts and transports UCX_PROTO_INFO reported, one line each.
fn ucx_summary(stdout: &str) -> String {
    let mut seen: Vec<String> = Vec::new();
    for l in stdout.lines() {
        let Some((_, rest)) = l.split_once("] ") else { continue };
        let cells: Vec<&str> = rest.split('|').map(str::trim).filter(|c| !c.is_empty()).collect();
        let item = match cells.as_slice() {
            [ctx, _] if ctx.starts_with("ucp_context") => ctx.to_string(),
            [_, _, lane] if lane.contains('/') => format!("  lane {lane}"),
            _ => continue,
        };
        if !seen.contains(&item) {
            seen.push(item);
        }
    }
    seen.join("\n")
}

/// The on-demand KVS designs across real hosts, on a 3-level ssh tree
/// (dpm → h1, h2; h1 → h3, h4): MPICH under dkvs, and under direct a raw
/// PMI-2 client's gets by srcid, through the tree, and one waiting for a put.
fn kvs_designs_across_hosts(fx: &Fixture) {
    let tree = ["-hosts", "h1,h2,h3,h4", "--tree-fanout", "2", "-ppn", "2"];
    let ring = program("ring");
    let out = fx.dpm(&[&tree[..], &["--kvs", "dkvs", "-n", "8", &ring]].concat()).output();
    out.assert_success();
    out.assert_stdout_contains("ring ok size=8 sum=288");
    let ext = program("pmi2_ext");
    let steps = [
        "put:x{r}:v{r}:sparse",
        "fence",
        "get:x{r+1}:{r+1}:v{r+1}",
        "get:x{r-1}:x:v{r-1}",
        "@7/sleep:200",
        "@7/put:late:seven",
        "@0/wget:late:7:seven",
        "fence",
    ];
    let out = fx.dpm(&[&tree[..], &["--kvs", "direct", "-n", "8", &ext], &steps[..]].concat()).output();
    out.assert_success();
    out.assert_stdout_lacks("FAIL");
    out.assert_stdout_contains("ext rank 0 wget late = seven");
    for r in 0..8 {
        out.assert_stdout_contains(&format!("ext ok rank {r}\n"));
    }
}

fn spawn_onto_other_hosts(fx: &Fixture) {
    let out = fx.dpm(&["-hosts", "h1,h2,h3,h4", "--report-placement", "-n", "1", &program("spawn_args"), "3"]).output();
    out.assert_success();
    out.assert_stdout_contains("spawn ok children=3 parents=1");
    out.assert_stdout_lacks("FAIL");
    let placed = common::placement(&out.stderr_str());
    assert!(placed.contains(&(0, "0".into(), "h1".into())), "{}", out.describe());
    let children: Vec<_> = placed.iter().filter(|p| p.0 == 1).collect();
    let count: usize = children.iter().map(|c| c.1.split(',').map(|r| if r.contains('-') { 2 } else { 1 }).sum::<usize>()).sum();
    assert_eq!(count, 3, "{children:?}\n{}", out.describe());
    // The parent's host is the busiest: the children go to the other three.
    assert!(children.iter().all(|c| c.2 != "h1"), "a child landed on the parent's host: {children:?}\n{}", out.describe());
}

/// MPIR attach mode across hosts: gdb attached to `dpm run` on h0 reads
/// the table (tests/mpir.rs has the rest): every rank's live pid, program
/// and host as the host list names it. The daemons' silence timeout is
/// raised, as docs/debugging.md tells a user attaching across hosts to do:
/// the debugger holds `dpm run` while it reads.
fn mpir_attach_across_hosts(fx: &Fixture) {
    let Some(gdb) = common::debugger::gdb() else { return };
    let dir = common::TempDir::new("mpir-ssh");
    let exe = program("mpir_job");
    let mut running = fx.dpm(&["-hosts", "h1,h2", "-ppn", "2", "-n", "4", &exe, &dir.path_str()]).env("DPM_HEARTBEAT_TIMEOUT", "30").spawn();
    running.wait_for_lines("mpir_job world", 4);
    let table = common::debugger::read_table(&gdb, running.pid());
    let live: Vec<String> = table.iter().map(|e| common::debugger::exe_of(e.pid)).collect();
    std::fs::write(dir.path.join("go"), b"").expect("write go");
    let out = running.wait();
    out.assert_success();
    let pids = common::debugger::ready_pids(&out.stdout_str(), "world");
    assert_eq!(table.iter().map(|e| e.pid).collect::<Vec<_>>(), pids, "{table:?}\n{}", out.describe());
    let hosts: Vec<&str> = table.iter().map(|e| e.host.as_str()).collect();
    assert_eq!(hosts, ["h1", "h1", "h2", "h2"], "{table:?}");
    assert!(table.iter().all(|e| e.exe == exe), "{table:?}");
    assert!(live.iter().all(|l| *l == exe), "not every rank was alive in its program when gdb read the table: {live:?}");
}

/// Run a `sh` script of `dpm boot` … `dpm down` on h0 with the fixture's ssh
/// command (no boot of the test's own environment), remove its runtime
/// `dir`, and return its stdout and stderr once it succeeded.
fn boot_script_on_h0(fx: &Fixture, dir: &std::path::Path, script: &str) -> (String, String) {
    let out = Command::new("bash")
        .arg(fixture_script())
        .args(["exec", "h0", "env", &format!("DPM_SSH={}", fx.ssh_command), "DPM_NO_BOOT=", "sh", "-c", script])
        .output()
        .expect("run the fixture");
    let _ = std::fs::remove_dir_all(dir);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "{:?}\n{stdout}\n{stderr}", out.status);
    (stdout, stderr)
}

/// `dpm boot` over ssh from h0: the daemons on h1..h4 start once and serve
/// later runs (MPI across the hosts, a spawn onto the idle hosts); `dpm down`
/// leaves nothing on any host (checked after every scenario).
fn boot_over_ssh(fx: &Fixture) {
    let dir = std::env::temp_dir().join(common::unique("dpm-netns-boot"));
    let script = common::boot_session_script(&dir, "-launcher ssh -hosts h1,h2,h3,h4", 8, 3);
    let (stdout, stderr) = boot_script_on_h0(fx, &dir, &script);
    assert!(stdout.contains("dpm boot: 4 nodes up"), "{stdout}\n{stderr}");
    assert!(stdout.contains("ring ok size=8 sum=288"), "{stdout}\n{stderr}");
    assert!(stdout.contains("spawn ok children=3 parents=1"), "{stdout}\n{stderr}");
    let child_hosts = common::spawned_hosts(&stderr);
    assert!(!child_hosts.is_empty() && child_hosts.iter().all(|h| h != "h1"), "children not on the idle hosts: {child_hosts:?}\n{stderr}");
}

/// Never silent singletons on other hosts: an Open MPI program behind
/// `sh -c '$PROG'` (which `--pmi auto` cannot see, so it is served PMI-1/2
/// and watched) on h1 and h2 is refused loudly — each host's daemon watches
/// on its own loopback; the login node's port would be nothing there, and
/// every rank would run as `rank 0 of 1` — and no process is left (checked
/// after every scenario). With `--pmi pmix` it runs as one job; MPICH behind
/// the same command runs as before.
fn open_mpi_unseen_on_other_hosts(fx: &Fixture) {
    let Some(ompi) = common::ompi_program("hello") else { return };
    let prefix = repo_root().join(".venv-ompi").display().to_string();
    let unseen = |extra: &[&str], prog: &str| {
        let mut args = vec!["-hosts", "h1,h2", "-ppn", "1", "-genv", "PROG", prog, "-genv", "OMPI_MCA_btl", "^ofi"];
        args.extend(extra);
        args.extend(["-n", "2", "sh", "-c", "$PROG"]);
        fx.dpm(&args).output()
    };
    let out = unseen(&[], &ompi);
    out.assert_code(1);
    out.assert_stderr_contains("a rank of 'sh' runs Open MPI, which needs PMIx").assert_stderr_contains("--pmi pmix");
    out.assert_stdout_lacks(" of 1\n");
    let out = unseen(&["--pmi", "pmix", "-genv", "OPAL_PREFIX", &prefix], &ompi);
    out.assert_success().assert_stdout_lacks(" of 1\n");
    for r in 0..2 {
        out.assert_stdout_contains(&format!("rank {r} of 2\n"));
    }
    let out = unseen(&[], &hello());
    out.assert_success();
    for r in 0..2 {
        out.assert_stdout_contains(&format!("hello from rank {r} of 2 on host h{}", r + 1));
    }
}

/// The same through `dpm boot` over ssh: the boot's daemons on h1 and h2
/// watch the unseen program's ranks; the run through the boot fails with
/// the message, and an MPICH run through the same boot goes on.
fn open_mpi_unseen_through_a_boot_over_ssh(fx: &Fixture) {
    let Some(ompi) = common::ompi_program("hello") else { return };
    let dir = std::env::temp_dir().join(common::unique("dpm-netns-boot-unseen"));
    let dpm = dpm_bin();
    let script = format!(
        "export DPM_RUNTIME_DIR='{}'; {dpm} boot -launcher ssh -hosts h1,h2 || exit 9; \
         PROG='{ompi}' OMPI_MCA_btl=^ofi {dpm} run -ppn 1 -n 2 sh -c '$PROG'; echo \"unseen rc=$?\"; \
         PROG='{}' {dpm} run -ppn 1 -n 2 sh -c '$PROG'; echo \"mpich rc=$?\"; {dpm} down",
        dir.display(),
        hello(),
    );
    let (stdout, stderr) = boot_script_on_h0(fx, &dir, &script);
    assert!(stdout.contains("unseen rc=1\n") && !stdout.contains(" of 1\n"), "{stdout}\n{stderr}");
    assert!(stderr.contains("a rank of 'sh' runs Open MPI, which needs PMIx"), "{stdout}\n{stderr}");
    assert!(stdout.contains("mpich rc=0\n") && stdout.contains("hello from rank 1 of 2 on host h2"), "{stdout}\n{stderr}");
}

fn spawn_info_host_names_another_host(fx: &Fixture) {
    let script = "from mpi4py import MPI; import sys, socket\n\
         info = MPI.Info.Create(); info.Set('host', 'h3')\n\
         child = 'from mpi4py import MPI; import socket; p = MPI.Comm.Get_parent(); p.send(socket.gethostname(), dest=0); p.Disconnect()'\n\
         c = MPI.COMM_SELF.Spawn(sys.executable, ['-c', child], 2, info)\n\
         names = [c.recv(source=i) for i in range(2)]\n\
         c.Disconnect(); print('parent on', socket.gethostname(), 'children on', ','.join(names))\n";
    let python = repo_root().join(".venv/bin/python");
    let out = fx.dpm(&["-hosts", "h1,h2,h3,h4", "--report-placement", "-n", "1", python.to_str().unwrap(), "-c", script]).output();
    out.assert_success();
    out.assert_stdout_contains("parent on h1 children on h3,h3");
    let children: Vec<_> = common::placement(&out.stderr_str()).into_iter().filter(|p| p.0 == 1).collect();
    assert_eq!(children, vec![(1, "0-1".to_string(), "h3".to_string())], "{}", out.describe());
}

/// A host that cannot be reached at start: one clear line naming it — the
/// cause, not the tree's start-up timeout —, a non-zero exit, and the
/// daemons already started elsewhere are gone.
fn unreachable_at_start(fx: &Fixture, hosts: &str, bad: &str) {
    let out = fx.dpm(&["-hosts", hosts, "-n", "4", "sleep", "30"]).output();
    assert_ne!(out.code(), 0, "{}", out.describe());
    let err = out.stderr_str();
    let line = err
        .lines()
        .find(|l| l.starts_with("dpm: error:") && l.contains(&format!("({bad})")))
        .unwrap_or_else(|| panic!("no 'dpm: error:' line names {bad}\n{}", out.describe()));
    // Whether ssh is already gone when dpm writes its greeting is a race; the
    // message must not depend on it (EPIPE is not an explanation).
    assert!(
        !line.contains("Broken pipe") && !line.contains("I/O error"),
        "the error for {bad} is a bare I/O error, not a clear 'cannot reach {bad}': {line:?}\n{}",
        out.describe()
    );
    assert!(!err.contains("did not come up within"), "{bad} was given up on at the start-up timeout, not at its failure\n{}", out.describe());
}

fn unresolvable_host(fx: &Fixture) {
    unreachable_at_start(fx, "h1,h9", "h9");
}

fn host_down_at_start(fx: &Fixture) {
    // h5 resolves to an address nobody holds: ssh gives up after ARP does (~3 s).
    unreachable_at_start(fx, "h5,h1", "h5");
}

/// Start `sleep 600` on two ranks per host and wait until all eight run:
/// only a lost node (or the test's SIGTERM) ends the run before the watchdog.
fn eight_sleepers(fx: &Fixture) -> Running {
    let mut run = fx.dpm(&["-hosts", "h1,h2,h3,h4", "-ppn", "2", "-n", "8", "sleep", "600"]).watchdog(LOSS_GUARD + Duration::from_secs(30)).spawn();
    run.wait_for_procs(8);
    run
}

fn killed_daemon(fx: &Fixture) {
    let run = eight_sleepers(fx);
    let victim = fx.daemon_on("h2").unwrap_or_else(|| panic!("no dpm daemon on h2: {:?}", fx.procs()));
    common::send_signal(victim, "KILL");
    let ended = exits_within(run.pid(), LOSS_GUARD);
    let out = run.wait();
    assert!(ended, "the run was still going {LOSS_GUARD:?} after h2's daemon was killed\n{}", out.describe());
    assert_eq!(out.code(), 1, "{}", out.describe());
    out.assert_stderr_contains("node 1 (h2) was lost");
}

fn lost_host(fx: &Fixture) {
    let run = eight_sleepers(fx);
    fx.link("h2", false);
    // Then reconnect h2, so that a SIGTERM can end a run that missed the loss.
    let ended = exits_within(run.pid(), LOSS_GUARD);
    fx.link("h2", true);
    if !ended {
        run.signal("TERM");
    }
    let out = run.wait();
    assert!(ended, "the run was still going {LOSS_GUARD:?} after h2 was cut off (no keepalive reaches a silent host)\n{}", out.describe());
    assert_ne!(out.code(), 0, "{}", out.describe());
    out.assert_stderr_contains("(h2)");
}

/// The run's secret reaches the daemons on the ssh channel: no command line
/// on any host (dpm, the ssh clients, sshd's sessions, the daemons, the
/// ranks) holds a word shaped like it.
fn no_secret_on_any_command_line(fx: &Fixture) {
    let run = eight_sleepers(fx);
    let procs = fx.procs();
    run.signal("TERM");
    let out = run.wait();
    assert_eq!(out.code(), 143, "{}", out.describe());
    let daemons: Vec<&Proc> = procs.iter().filter(|p| p.host != "h0" && p.cmd.contains(" daemon --node ")).collect();
    assert_eq!(daemons.len(), 4, "one daemon per host: {procs:#?}");
    assert!(daemons.iter().all(|p| p.cmd.contains("--secret-stdin")), "daemons not told to read the secret on stdin: {daemons:#?}");
    let shaped: Vec<&Proc> = procs.iter().filter(|p| p.cmd.split(|c: char| !c.is_ascii_hexdigit()).any(|w| w.len() >= 64)).collect();
    assert!(shaped.is_empty(), "secret-shaped words on command lines: {shaped:#?}");
}

#[test]
fn mpich_across_four_ssh_hosts() {
    let mut fx = match Fixture::up() {
        Ok(fx) => fx,
        Err(reason) => return common::fixture_unavailable("netns hosts fixture (ssh_hosts)", &reason),
    };
    let scenarios: [(&str, common::Scenario<Fixture>); 15] = [
        ("hello on four hosts", hello_on_four_hosts),
        ("MPIR: gdb attached to dpm run reads every host's ranks", mpir_attach_across_hosts),
        ("Open MPI unseen on other hosts: refused, never singletons", open_mpi_unseen_on_other_hosts),
        ("Open MPI unseen through a boot over ssh", open_mpi_unseen_through_a_boot_over_ssh),
        ("no secret on any command line", no_secret_on_any_command_line),
        ("ring, round robin over the hosts", ring_round_robin),
        ("KVS designs across the hosts (dkvs, direct)", kvs_designs_across_hosts),
        ("UCX uses the network between hosts", ucx_uses_the_network),
        ("spawn onto other hosts", spawn_onto_other_hosts),
        ("spawn info 'host' names another host", spawn_info_host_names_another_host),
        ("dpm boot over ssh", boot_over_ssh),
        ("unresolvable host at start", unresolvable_host),
        ("host down at start", host_down_at_start),
        ("killed daemon", killed_daemon),
        // The lost host's side ends only when its sshd hears of the closed
        // connection (TCP retransmission once the cable is back).
        ("lost host", lost_host),
    ];
    let mut failures = common::run_scenarios("ssh_hosts", &fx, &scenarios, |fx, name| {
        let left = fx.settle(SETTLE_GUARD);
        (!left.is_empty()).then(|| format!("{name}: processes left on the hosts {SETTLE_GUARD:?} after the run: {left:#?}"))
    });
    if let Err(e) = fx.down() {
        failures.push(format!("fixture down: {e}"));
    }
    assert!(failures.is_empty(), "{} of {} scenarios failed:\n\n{}", failures.len(), scenarios.len(), failures.join("\n\n"));
}
