//! Link authentication and the manual bootstrap.
//!
//! - `-launcher manual`: dpm prints one `dpm daemon --connect` command per
//!   node; the tests run them as a user would (on this machine: the nodes
//!   are `localhost` and `127.0.0.1`) and MPICH runs across the daemons.
//! - Strangers are refused and the launcher keeps waiting: a silent client, a
//!   client sending garbage, a daemon with the wrong secret, a second daemon
//!   for a node already connected.
//! - The secret is on no command line (`/proc/PID/cmdline` is world-readable),
//!   not left in a daemon's `/proc/PID/environ`, and in no rank's environment;
//!   the secret file is gone when the run is (also after a timeout or a
//!   signal).
//!
//! Each manual run uses its own runtime directory (`DPM_RUNTIME_DIR`), so the
//! tests can check what dpm leaves there.

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use common::{dpm_bin, marked_procs, program, unique, Dpm, MARKER_VAR};

/// A `dpm run -launcher manual` whose stderr the test reads as it comes.
struct ManualRun {
    child: Child,
    marker: String,
    runtime_dir: PathBuf,
    lines: Receiver<String>,
    stderr: Vec<String>,
    stdout: Receiver<Vec<u8>>,
    daemons: Vec<Child>,
}

/// One printed command: `DPM_SECRET_FILE=PATH DPM daemon --connect H:P --node N`.
#[derive(Debug)]
struct DaemonCommand {
    node: usize,
    secret_file: PathBuf,
    argv: Vec<String>,
}

impl ManualRun {
    fn start(args: &[&str]) -> ManualRun {
        let marker = unique("dpmtest-auth");
        let runtime_dir = std::env::temp_dir().join(unique("dpm-auth-rt"));
        let mut child = Command::new(dpm_bin())
            .args(["run", "-genv", MARKER_VAR, &marker, "-launcher", "manual"])
            .args(args)
            .env("DPM_RUNTIME_DIR", &runtime_dir)
            .env_remove("DPM_LOG")
            .env_remove("DPM_LAUNCHER")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start dpm");
        let (tx, lines) = mpsc::channel();
        let err = child.stderr.take().expect("piped");
        thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let (tx, stdout) = mpsc::channel();
        let mut out = child.stdout.take().expect("piped");
        thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = out.read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
        ManualRun { child, marker, runtime_dir, lines, stderr: Vec::new(), stdout, daemons: Vec::new() }
    }

    /// Wait (up to 60 s, a hang guard) for a stderr line containing `needle`.
    fn wait_line(&mut self, needle: &str) -> String {
        if let Some(l) = self.stderr.iter().find(|l| l.contains(needle)) {
            return l.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Ok(line) = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            self.stderr.push(line.clone());
            if line.contains(needle) {
                return line;
            }
        }
        panic!("no stderr line with {needle:?} within 60 s; stderr so far:\n{}", self.stderr.join("\n"));
    }

    /// The `n` printed daemon commands (waiting up to 60 s for them).
    fn commands(&mut self, n: usize) -> Vec<DaemonCommand> {
        let printed = |lines: &[String]| lines.iter().filter(|l| l.contains("daemon --connect")).cloned().collect::<Vec<_>>();
        let deadline = Instant::now() + Duration::from_secs(60);
        while printed(&self.stderr).len() < n {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => self.stderr.push(line),
                Err(_) => panic!("dpm did not print {n} daemon commands within 60 s; stderr:\n{}", self.stderr.join("\n")),
            }
        }
        printed(&self.stderr)
            .iter()
            .map(|line| {
                let (_, command) = line.split_once("): ").unwrap_or_else(|| panic!("unexpected command line {line:?}"));
                let mut words = command.split_whitespace();
                let assignment = words.next().expect("VAR=value");
                let secret_file = assignment.strip_prefix("DPM_SECRET_FILE=").unwrap_or_else(|| panic!("{line:?}"));
                let argv: Vec<String> = words.map(String::from).collect();
                let node = argv.iter().position(|w| w == "--node").and_then(|p| argv.get(p + 1)).and_then(|n| n.parse().ok());
                DaemonCommand { node: node.unwrap_or_else(|| panic!("no --node N in {line:?}")), secret_file: PathBuf::from(secret_file), argv }
            })
            .collect()
    }

    /// Run a printed command as the user would, with extra environment.
    fn start_daemon(&mut self, cmd: &DaemonCommand, env: &[(&str, &str)]) -> usize {
        let mut c = Command::new(&cmd.argv[0]);
        c.args(&cmd.argv[1..]).env("DPM_SECRET_FILE", &cmd.secret_file).env_remove("DPM_SECRET").stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        self.daemons.push(c.spawn().expect("start dpm daemon"));
        self.daemons.len() - 1
    }

    fn port(&mut self) -> u16 {
        let line = self.wait_line("listening on ");
        let addr = line.split("listening on ").nth(1).and_then(|r| r.split(';').next()).expect("address");
        addr.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no port in {line:?}"))
    }

    /// Wait for dpm (60 s at most) and for the daemons started by the test.
    fn finish(mut self) -> Finished {
        let status = wait_for(&mut self.child, Duration::from_secs(60)).unwrap_or_else(|| {
            panic!("dpm did not finish within 60 s; stderr so far:\n{}", self.stderr.join("\n"));
        });
        // Hang guards: the readers end at dpm's end of output, at once
        // unless something else holds it open.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(30)) {
            self.stderr.push(line);
        }
        let stdout = String::from_utf8_lossy(&self.stdout.recv_timeout(Duration::from_secs(30)).unwrap_or_default()).into_owned();
        let stderr = self.stderr.join("\n");
        let daemons: Vec<Option<ExitStatus>> = self.daemons.iter_mut().map(|d| wait_for(d, Duration::from_secs(30))).collect();
        let left = common::leftovers_after(&self.marker, common::LEFTOVER_GRACE);
        assert!(left.is_empty(), "ranks left behind: {left:?}\n{stderr}");
        let leftover_files: Vec<_> = fs::read_dir(&self.runtime_dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        Finished { status, stdout, stderr, daemons, leftover_files }
    }
}

impl Drop for ManualRun {
    fn drop(&mut self) {
        for c in self.daemons.iter_mut().chain(std::iter::once(&mut self.child)) {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        common::kill_marked(&self.marker);
        let _ = fs::remove_dir_all(&self.runtime_dir);
    }
}

struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    /// Each daemon's exit status (None: still running 30 s after dpm ended).
    daemons: Vec<Option<ExitStatus>>,
    /// What dpm left in its runtime directory.
    leftover_files: Vec<PathBuf>,
}

impl Finished {
    fn describe(&self) -> String {
        format!("status {:?}, daemons {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}", self.status, self.daemons, self.stdout, self.stderr)
    }
}

fn wait_for(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() > deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

/// Every process whose command line contains `needle`: (pid, command line).
fn cmdlines_containing(needle: &str) -> Vec<(u32, String)> {
    procs()
        .filter_map(|pid| {
            let cmd = String::from_utf8_lossy(&fs::read(format!("/proc/{pid}/cmdline")).ok()?).replace('\0', " ");
            cmd.contains(needle).then_some((pid, cmd))
        })
        .collect()
}

/// The processes below `root` (at any depth) whose command line has a word of
/// 64 hex digits (the shape of a secret).
fn secret_shaped_cmdlines_below(root: u32) -> Vec<(u32, String)> {
    let mut below = vec![root];
    let mut next = 0;
    while next < below.len() {
        let parent = below[next];
        below.extend(procs().filter(|&p| parent_of(p) == Some(parent)));
        next += 1;
    }
    below
        .into_iter()
        .filter_map(|pid| {
            let cmd = String::from_utf8_lossy(&fs::read(format!("/proc/{pid}/cmdline")).ok()?).replace('\0', " ");
            cmd.split(|c: char| !c.is_ascii_hexdigit()).any(|w| w.len() >= 64).then_some((pid, cmd))
        })
        .collect()
}

fn procs() -> impl Iterator<Item = u32> {
    fs::read_dir("/proc").expect("/proc").flatten().filter_map(|e| e.file_name().to_str()?.parse().ok())
}

fn environ(pid: u32) -> String {
    String::from_utf8_lossy(&fs::read(format!("/proc/{pid}/environ")).unwrap_or_default()).replace('\0', "\n")
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn mpich_runs_across_daemons_started_by_hand() {
    let mut run = ManualRun::start(&["-hosts", "localhost,127.0.0.1", "--connect-timeout", "30", "-n", "4", &program("ring")]);
    let cmds = run.commands(2);
    assert_eq!(cmds.iter().map(|c| c.node).collect::<Vec<_>>(), vec![0, 1]);
    // The secret file: private, in a private directory dpm created.
    assert_eq!(mode(&run.runtime_dir), 0o700);
    assert_eq!(mode(&cmds[0].secret_file), 0o600);
    assert!(cmds[0].secret_file.starts_with(&run.runtime_dir));
    let secret = fs::read_to_string(&cmds[0].secret_file).expect("read the secret file").trim().to_string();
    assert_eq!(secret.len(), 64, "{secret:?}");
    assert!(cmds.iter().all(|c| !c.argv.iter().any(|w| w.contains(&secret))), "the secret is in a printed command: {cmds:?}");
    // Node 0 waits longer than a link may stay silent (1.5 s) for node 1:
    // its link must be kept alive meanwhile.
    run.start_daemon(&cmds[0], &[]);
    run.wait_line("node 0 (localhost) connected from");
    thread::sleep(Duration::from_millis(2500));
    run.start_daemon(&cmds[1], &[]);
    run.wait_line("node 1 (127.0.0.1) connected from");
    let out = run.finish();
    assert!(out.status.success(), "{}", out.describe());
    assert!(out.stdout.contains("ring ok size=4 sum="), "{}", out.describe());
    assert!(out.daemons.iter().all(|d| d.is_some_and(|s| s.success())), "the daemons should exit 0 after the run: {}", out.describe());
    assert!(out.leftover_files.is_empty(), "left in the runtime directory: {:?}", out.leftover_files);
}

#[test]
fn strangers_are_refused_and_the_real_daemons_accepted() {
    let mut run = ManualRun::start(&["-hosts", "localhost,127.0.0.1", "--connect-timeout", "30", "-n", "2", &program("ring")]);
    let cmds = run.commands(2);
    let port = run.port();
    // A client that connects and says nothing does not hold up the others.
    let silent = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    // A client sending garbage is dropped, with a log line.
    let mut garbage = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    garbage.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("write");
    garbage.set_read_timeout(Some(Duration::from_secs(60))).unwrap(); // a hang guard
    let mut sink = Vec::new();
    let closed = garbage.read_to_end(&mut sink);
    assert!(closed.is_ok() || closed.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset), "not closed: {closed:?}");
    let line = run.wait_line("refused a connection from 127.0.0.1:");
    assert!(line.contains("frame of") || line.contains("undecodable"), "{line}");
    // A daemon with another secret is refused, and says why.
    let wrong = run.start_daemon(&cmds[0], &[("DPM_SECRET", &"0f".repeat(32))]);
    let status = wait_for(&mut run.daemons[wrong], Duration::from_secs(60)).expect("the refused daemon exits");
    assert_eq!(status.code(), Some(1));
    let line = run.wait_line("authentication failed");
    assert!(line.contains("refused a connection from 127.0.0.1:") && line.contains("node 0"), "{line}");
    // The real one for node 0 is accepted; a second one for node 0 is not.
    run.start_daemon(&cmds[0], &[]);
    run.wait_line("node 0 (localhost) connected from");
    let twin = run.start_daemon(&cmds[0], &[]);
    let status = wait_for(&mut run.daemons[twin], Duration::from_secs(60)).expect("the second node 0 exits");
    assert_eq!(status.code(), Some(1));
    run.wait_line("node 0 is already connected");
    run.start_daemon(&cmds[1], &[]);
    let out = run.finish();
    assert!(out.status.success(), "{}", out.describe());
    assert!(out.stdout.contains("ring ok size=2"), "{}", out.describe());
    // The silent client's connection ended with the listener.
    let mut silent = silent;
    // A hang guard: a read timing out means the connection is still open.
    silent.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let open = loop {
        match silent.read(&mut [0u8; 256]) {
            Ok(0) => break false,
            Ok(_) => continue,
            Err(e) => break matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        }
    };
    assert!(!open, "the silent connection is still open");
    assert!(out.leftover_files.is_empty(), "left in the runtime directory: {:?}", out.leftover_files);
}

/// 64 idle connections (the launcher's handshake slots) do not lock the real
/// daemons out: the silent ones are evicted for newcomers (and dropped after
/// the hello deadline), and a daemon closed before the launcher's hello
/// tries again. They were refused and exited 1, and the run timed out.
#[test]
fn idle_connections_cannot_crowd_out_the_real_daemons() {
    let mut run = ManualRun::start(&["-hosts", "localhost,127.0.0.1", "--connect-timeout", "20", "-n", "2", &program("ring")]);
    let cmds = run.commands(2);
    let port = run.port();
    let idle: Vec<TcpStream> = (0..64).map(|_| TcpStream::connect(("127.0.0.1", port)).expect("connect")).collect();
    // Let the launcher accept them all before the daemons come.
    thread::sleep(Duration::from_millis(300));
    run.start_daemon(&cmds[0], &[]);
    run.start_daemon(&cmds[1], &[]);
    let out = run.finish();
    assert!(out.status.success(), "{}", out.describe());
    assert!(out.stdout.contains("ring ok size=2"), "{}", out.describe());
    assert!(out.daemons.iter().all(|d| d.is_some_and(|s| s.success())), "a daemon failed: {}", out.describe());
    drop(idle);
}

#[test]
fn the_secret_is_on_no_command_line_and_in_no_rank() {
    let mut run = ManualRun::start(&["-hosts", "localhost,127.0.0.1", "-n", "2", "sleep", "3"]);
    let cmds = run.commands(2);
    let secret = fs::read_to_string(&cmds[0].secret_file).expect("read the secret file").trim().to_string();
    // One daemon reads the file, the other gets the secret itself in DPM_SECRET.
    run.start_daemon(&cmds[0], &[]);
    let inline = run.start_daemon(&cmds[1], &[("DPM_SECRET", &secret)]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while marked_procs(&run.marker).len() < 2 {
        assert!(Instant::now() < deadline, "the ranks did not start; stderr:\n{}", run.stderr.join("\n"));
        thread::sleep(Duration::from_millis(20));
    }
    // Everything is up: daemons, ranks. Nothing shows the secret.
    assert_eq!(cmdlines_containing(&secret), vec![], "the secret is on a command line");
    let daemon = run.daemons[inline].id();
    assert!(!environ(daemon).contains(&secret), "the daemon left the secret in its /proc/PID/environ:\n{}", environ(daemon));
    for (pid, _) in marked_procs(&run.marker) {
        let env = environ(pid);
        assert!(!env.contains("DPM_SECRET"), "rank {pid} inherited a secret variable:\n{env}");
    }
    let out = run.finish();
    assert!(out.status.success(), "{}", out.describe());
    assert!(out.leftover_files.is_empty(), "left in the runtime directory: {:?}", out.leftover_files);
}

#[test]
fn forked_daemons_get_the_secret_in_their_environment_only() {
    // A secret in dpm's own environment must not reach the ranks either.
    let mut running =
        Dpm::run(["--virtual-nodes", "2", "-n", "2", "sleep", "3"]).env("DPM_SECRET", &"ab".repeat(32)).env("DPM_SECRET_FILE", "/nonexistent").spawn();
    running.wait_for_procs(2);
    let dpm = running.pid();
    // dpm's other child is its cleaner (forked, named `dpm-cleaner`).
    let cleaner = |p: u32| fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "dpm-cleaner");
    let daemons: Vec<u32> = procs().filter(|&p| parent_of(p) == Some(dpm) && !cleaner(p)).collect();
    assert_eq!(daemons.len(), 2, "two forked daemons below dpm");
    for &d in &daemons {
        // Delivered by the environment, then wiped in place.
        let env = environ(d);
        assert!(env.lines().any(|l| l == format!("DPM_SECRET={}", "0".repeat(64))), "daemon {d}'s environment:\n{env}");
        assert!(!env.contains("DPM_SECRET_FILE"), "daemon {d} inherited DPM_SECRET_FILE:\n{env}");
    }
    assert_eq!(secret_shaped_cmdlines_below(dpm), vec![], "a secret-shaped word on a command line");
    for (pid, _) in marked_procs(running.marker()) {
        assert!(!environ(pid).contains("DPM_SECRET"), "rank {pid} inherited a secret variable:\n{}", environ(pid));
    }
    running.wait().assert_success();
}

#[test]
fn ranks_never_see_a_secret_variable() {
    let out = Dpm::run(["--virtual-nodes", "2", "-n", "2", "env"]).env("DPM_SECRET", &"cd".repeat(32)).env("DPM_SECRET_FILE", "/nonexistent").output();
    out.assert_success();
    out.assert_stdout_contains(&format!("{MARKER_VAR}="));
    out.assert_stdout_lacks("DPM_SECRET");
}

#[test]
fn missing_daemons_are_named_and_nothing_is_left() {
    let mut run = ManualRun::start(&["-hosts", "localhost,127.0.0.1", "--connect-timeout", "2", "-n", "2", "true"]);
    let cmds = run.commands(2);
    run.start_daemon(&cmds[0], &[]);
    let out = run.finish();
    assert_eq!(out.status.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("node 1 (127.0.0.1) did not connect within 2 s"), "{}", out.describe());
    // The daemon that did connect goes when its launcher does.
    assert!(out.daemons[0].is_some(), "node 0's daemon outlived the failed run: {}", out.describe());
    assert!(out.leftover_files.is_empty(), "left in the runtime directory: {:?}", out.leftover_files);
}

#[test]
fn an_interrupted_wait_removes_the_secret_file() {
    let mut run = ManualRun::start(&["-hosts", "localhost", "-n", "1", "true"]);
    let cmds = run.commands(1);
    assert!(cmds[0].secret_file.exists());
    common::send_signal(run.child.id(), "INT");
    let out = run.finish();
    // 128 + SIGINT, as for a run interrupted later (it exited 1).
    assert_eq!(out.status.code(), Some(130), "{}", out.describe());
    assert!(out.stderr.contains("interrupted (SIGINT) while waiting for the daemons"), "{}", out.describe());
    assert!(out.leftover_files.is_empty(), "left in the runtime directory: {:?}", out.leftover_files);
}

#[test]
fn an_unsafe_runtime_directory_or_secret_file_is_refused() {
    let dir = std::env::temp_dir().join(unique("dpm-auth-open-dir"));
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let out = Dpm::run(["-launcher", "manual", "-hosts", "localhost", "-n", "1", "true"]).env("DPM_RUNTIME_DIR", dir.to_str().unwrap()).output();
    let written = fs::read_dir(&dir).unwrap().count();
    fs::remove_dir_all(&dir).unwrap();
    out.assert_code(1);
    out.assert_stderr_contains("(mode 755)");
    assert_eq!(written, 0, "dpm wrote into an unsafe directory");

    // A daemon refuses a secret file others can read, before connecting anywhere.
    let file = common::TempFile::new("dpm-auth-open-secret", "ab".repeat(32).as_bytes(), 0o644);
    let out = Command::new(dpm_bin())
        .args(["daemon", "--connect", "127.0.0.1:9", "--node", "0"])
        .env("DPM_SECRET_FILE", &file.path)
        .env_remove("DPM_SECRET")
        .output()
        .expect("run dpm daemon");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has mode 644") && err.contains("chmod 600"), "{err}");
}

#[test]
fn manual_needs_a_node_list() {
    let out = Dpm::run(["-launcher", "manual", "-n", "1", "true"]).output();
    out.assert_code(2);
    out.assert_stderr_contains("-launcher manual needs the nodes");
}

/// A non-loopback interface of this machine with an IPv4 address, and that
/// address (`ip -o -4 addr`).
fn other_interface() -> Option<(String, String)> {
    let out = Command::new("ip").args(["-o", "-4", "addr", "show"]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let words: Vec<&str> = l.split_whitespace().collect();
        let (name, addr) = (words.get(1)?, words.get(3)?.split('/').next()?);
        (*name != "lo").then(|| (name.to_string(), addr.to_string()))
    })
}

#[test]
fn iface_puts_the_manual_listener_and_the_daemons_pmi_ports_on_its_address() {
    let Some((name, ip)) = other_interface() else {
        common::cannot_run("iface_puts_the_manual_listener_on_its_address", "no network interface but lo with an IPv4 address (ip -o -4 addr)");
        return;
    };
    let mut run = ManualRun::start(&["-iface", &name, "--pmi-port", "-hosts", "dpm-if-a,dpm-if-b", "-ppn", "1", "-n", "2", "sh", "-c", "echo port $PMI_PORT"]);
    let listening = run.wait_line("listening on ");
    assert!(listening.contains(&format!("listening on {ip}:")), "{listening}");
    let commands = run.commands(2);
    for cmd in &commands {
        assert!(cmd.argv.windows(2).any(|w| w[0] == "--iface" && w[1] == name), "{cmd:?}");
        assert!(cmd.argv.iter().any(|w| w.starts_with(&format!("{ip}:"))), "the daemons connect to the interface's address: {cmd:?}");
        run.start_daemon(cmd, &[]);
    }
    let done = run.finish();
    assert!(done.status.success(), "{}", done.describe());
    let ports: Vec<&str> = done.stdout.lines().filter_map(|l| l.strip_prefix("port ")).collect();
    assert!(ports.len() == 2 && ports.iter().all(|p| p.starts_with(&format!("{ip}:"))), "{}", done.describe());
}
