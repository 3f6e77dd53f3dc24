//! A boot that grows and shrinks: `dpm boot --add` joins daemons to the
//! running tree (later runs take ranks there), `dpm boot --drain` stops
//! placing on hosts (their daemons leave once empty; `--force` kills their
//! ranks now); a booted run without `-n` runs one rank per slot (or per
//! host, where the slots were not given), as Hydra does.

mod common;

use common::boot::Boot;
use common::hostname;

/// The hosts `--report-placement` names for a run's ranks.
fn hosts_of(stderr: &str) -> Vec<String> {
    common::placement(stderr).into_iter().map(|p| p.2).collect()
}

fn said(out: &std::process::Output) -> String {
    format!("status {}\n--- stdout ---\n{}--- stderr ---\n{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The status line of the node on `host`.
fn node_line(status: &str, host: &str) -> Option<String> {
    status.lines().find(|l| l.split_whitespace().nth(1) == Some(host)).map(String::from)
}

/// Wait (a hang guard, not a clock) until `host`'s status line says `word`.
fn wait_for_state(boot: &Boot, host: &str, word: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let status = boot.status();
        if node_line(&status, host).is_some_and(|l| l.ends_with(word)) {
            return status;
        }
        assert!(std::time::Instant::now() < deadline, "{host} never became {word}:\n{status}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn an_added_host_takes_ranks_and_status_shows_it() {
    let boot = Boot::start(&["--virtual-nodes", "1"]);
    let host = hostname();
    let slots = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = slots.to_string();
    // Node 0 full: the next run has only the added host's slots.
    let mut filler = boot.run(&["-n", &n, "sleep", "60"]).spawn();
    filler.wait_for_procs(slots);
    let added = format!("{host}-added");
    let out = boot.boot_command(&["--add", "-hosts", &format!("{added}:2")]);
    assert!(out.status.success(), "{}", said(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("node 1 ({added}) joined with 2 slot(s)")), "{}", said(&out));
    let status = boot.status();
    assert!(node_line(&status, &added).is_some_and(|l| l.split_whitespace().nth(2) == Some("2")), "{status}");
    let run = boot.run(&["--report-placement", "-n", "2", &common::hello()]).output();
    run.assert_success();
    let hosts = hosts_of(&run.stderr_str());
    assert!(!hosts.is_empty() && hosts.iter().all(|h| *h == added), "not on the added host: {hosts:?}\n{}", run.describe());
    assert_eq!(run.stdout_str().lines().filter(|l| l.starts_with("hello from")).count(), 2, "{}", run.describe());
    // A host that is up already is refused, and nothing changes.
    let again = boot.boot_command(&["--add", "-hosts", &added]);
    assert_eq!(again.status.code(), Some(1), "{}", said(&again));
    assert!(String::from_utf8_lossy(&again.stderr).contains("is in the tree already"), "{}", said(&again));
    filler.signal("TERM");
    let _ = filler.wait_unchecked();
}

#[test]
fn an_added_host_whose_daemon_cannot_start_is_refused_and_leaves_nothing() {
    let boot = Boot::start(&["--virtual-nodes", "1"]);
    let out = boot.boot_command(&["--add", "-hosts", "nowhere-host:2", "-launcher", "ssh", "--ssh-command", "false"]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("dpm: error:") && err.contains("cannot add nowhere-host"), "{}", said(&out));
    let status = boot.status();
    assert!(node_line(&status, "nowhere-host").is_none(), "a node that never joined is listed:\n{status}");
    // The boot goes on.
    boot.run(&["-n", "1", "true"]).output().assert_success();
    // Usage errors: nothing to add, --force alone.
    for args in [&["--add"][..], &["--force"][..], &["--add", "-hosts", "x", "--drain", "y"][..]] {
        let out = boot.boot_command(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", said(&out));
    }
}

#[test]
fn a_drained_host_takes_no_ranks_and_its_daemon_leaves_when_empty() {
    let boot = Boot::start(&["--virtual-nodes", "3"]);
    let host = hostname();
    let (v0, v1, v2) = (format!("{host}-v0"), format!("{host}-v1"), format!("{host}-v2"));
    let slots = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = slots.to_string();
    let mut busy = boot.run(&["--report-placement", "-n", &n, "sleep", "60"]).spawn();
    busy.wait_for_procs(slots);
    let out = boot.boot_command(&["--drain", &format!("{v0},{v2}")]);
    assert!(out.status.success(), "{}", said(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("node 0 ({v0}) draining: it takes no new ranks")), "{}", said(&out));
    assert!(text.contains(&format!("node 2 ({v2}) drained: its daemon left")), "{}", said(&out));
    let status = boot.status();
    assert!(node_line(&status, &v0).is_some_and(|l| l.ends_with("draining")), "{status}");
    assert!(node_line(&status, &v2).is_some_and(|l| l.ends_with("released")), "{status}");
    // Every later rank goes to the one node left, beyond its slots too.
    let more = (slots + 1).to_string();
    let run = boot.run(&["--report-placement", "-n", &more, "true"]).output();
    run.assert_success();
    let hosts = hosts_of(&run.stderr_str());
    assert!(!hosts.is_empty() && hosts.iter().all(|h| *h == v1), "a drained host took ranks: {hosts:?}\n{}", run.describe());
    // Without -n: one rank per node that takes ranks (virtual nodes' slots are guessed).
    let run = boot.run(&["--report-placement", "true"]).output();
    run.assert_success();
    assert_eq!(hosts_of(&run.stderr_str()), vec![v1.clone()], "{}", run.describe());
    // The draining node's ranks finish: then its daemon leaves.
    busy.signal("TERM");
    assert_eq!(busy.wait_unchecked().code(), 128 + 15);
    wait_for_state(&boot, &v0, "released");
    // The last node is not drained (dpm down ends a boot).
    let out = boot.boot_command(&["--drain", &v1]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    let out = boot.boot_command(&["--drain", "no-such-host"]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    boot.run(&["-n", "1", "true"]).output().assert_success();
}

#[test]
fn drain_force_ends_the_ranks_there_as_a_killed_rank_ends_a_run() {
    let boot = Boot::start(&["--virtual-nodes", "2"]);
    let host = hostname();
    let slots = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = slots.to_string();
    let mut victim = boot.run(&["--report-placement", "-n", &n, "sleep", "60"]).spawn();
    victim.wait_for_procs(slots);
    let mut bystander = boot.run(&["--report-placement", "-n", &n, "sleep", "60"]).spawn();
    bystander.wait_for_procs(slots);
    let v0 = format!("{host}-v0");
    let out = boot.boot_command(&["--drain", &v0, "--force"]);
    assert!(out.status.success(), "{}", said(&out));
    let out = victim.wait_unchecked();
    assert_eq!(out.code(), 128 + 9, "{}", out.describe());
    out.assert_stderr_contains(&format!("node 0 ({v0}) is drained with --force"));
    assert!(hosts_of(&out.stderr_str()).iter().all(|h| *h == v0), "{}", out.describe());
    wait_for_state(&boot, &v0, "released");
    assert_eq!(common::marked_procs(bystander.marker()).len(), slots, "the other run's ranks were touched");
    bystander.signal("TERM");
    assert_eq!(bystander.wait_unchecked().code(), 128 + 15);
}

#[test]
fn a_booted_run_without_n_runs_one_rank_per_slot_as_hydra_does() {
    // Slots given: one rank per slot (Hydra: `-hosts localhost:2,127.0.0.1:3` and no -n runs 5).
    let host = hostname();
    let boot = Boot::start(&["-hosts", &format!("{host}:2"), "-launcher", "fork"]);
    let run = boot.run(&["--report-placement", &common::hello()]).output();
    run.assert_success();
    assert_eq!(run.stdout_str().lines().filter(|l| l.starts_with("hello from")).count(), 2, "{}", run.describe());
    let hydra = common::under_hydra(&["-hosts", "localhost:2,127.0.0.1:3", "hostname"]);
    assert_eq!(hydra.stdout_str().lines().count(), 5, "Hydra's own count\n{}", hydra.describe());
}

#[test]
fn a_run_going_grows_into_a_host_added_while_it_runs() {
    // Two slots: the parent and one child fill them (a soft spawn, no
    // oversubscription). Then a host of two slots is added: the same run's
    // next soft spawn gets two more children there, while the first child
    // still holds its slot. The run's MPI_UNIVERSE_SIZE stays what it was
    // at its start; what its spawns may take follows the boot.
    let host = hostname();
    let boot = Boot::start(&["-hosts", &format!("{host}:2"), "-launcher", "fork"]);
    let flag = std::env::temp_dir().join(common::unique("dpm-grow-flag"));
    let script = common::repo_root().join("tests/programs/grow_spawn.py");
    let mut run = boot
        .run(&["--no-oversubscribe", "--report-placement", "-n", "1", &common::venv_python(), &script.to_string_lossy(), &flag.to_string_lossy(), "4"])
        .spawn();
    run.wait_for_lines("first ", 1);
    let added = format!("{host}-added");
    let out = boot.boot_command(&["--add", "-hosts", &format!("{added}:2")]);
    assert!(out.status.success(), "{}", said(&out));
    std::fs::write(&flag, b"").expect("create the flag file");
    let out = run.wait();
    let _ = std::fs::remove_file(&flag);
    out.assert_stdout_contains("first 1\n");
    out.assert_stdout_contains("second 2\n");
    // The second spawn's two children are on the added host.
    let placed = common::placement(&out.stderr_str());
    let last = placed.last().map(|p| (p.1.as_str(), p.2.as_str()));
    assert_eq!(last, Some(("0-1", added.as_str())), "{placed:?}\n{}", out.describe());
}

#[test]
fn the_rendezvous_file_is_rewritten_as_hosts_join_drain_and_leave() {
    let host = hostname();
    let boot = Boot::start(&["-hosts", &format!("{host}:2"), "-launcher", "fork"]);
    assert_eq!(boot.rendezvous_nodes(), vec![(host.clone(), 2, "up".to_string())]);
    let added = format!("{host}-added");
    let out = boot.boot_command(&["--add", "-hosts", &format!("{added}:3")]);
    assert!(out.status.success(), "{}", said(&out));
    assert_eq!(boot.rendezvous_nodes(), vec![(host.clone(), 2, "up".to_string()), (added.clone(), 3, "up".to_string())]);
    // A rank holds the added host while it drains: listed as draining.
    let mut busy = boot.run(&["-n", "5", "sleep", "60"]).spawn();
    busy.wait_for_procs(5);
    let out = boot.boot_command(&["--drain", &added]);
    assert!(out.status.success(), "{}", said(&out));
    assert_eq!(boot.rendezvous_nodes()[1], (added.clone(), 3, "draining".to_string()));
    // Its ranks end: the node leaves (in that event, no poll) and is no longer listed.
    busy.signal("TERM");
    let _ = busy.wait_unchecked();
    wait_for_state(&boot, &added, "released");
    assert_eq!(boot.rendezvous_nodes(), vec![(host, 2, "up".to_string())]);
    // Only the file itself: nothing it was written through is left beside it.
    let names: Vec<String> = std::fs::read_dir(&boot.dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
}

/// `dpm boot ARGS` against `boot`, its stderr read as it comes (a line at a time, by a thread).
fn boot_command_live(boot: &Boot, args: &[&str]) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(common::dpm_bin())
        .arg("boot")
        .args(args)
        .env("DPM_RUNTIME_DIR", &boot.dir)
        .env_remove("DPM_BOOT")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run dpm boot");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

#[test]
fn add_with_the_manual_launcher_prints_the_daemons_command_and_waits_for_it() {
    let boot = Boot::start(&["--virtual-nodes", "1"]);
    let host = hostname();
    let manual = format!("{host}-manual");
    let (add, lines) = boot_command_live(&boot, &["--add", "-hosts", &format!("{manual}:2"), "-launcher", "manual", "--connect-timeout", "120"]);
    // The command for node 1 (the boot's second node), as the manual launcher prints it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = Vec::new();
    let command = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = lines.recv_timeout(left).unwrap_or_else(|_| panic!("no daemon command printed: {seen:?}"));
        if let Some(cmd) = line.strip_prefix(&format!("dpm:   node 1 ({manual}): ")) {
            break cmd.to_string();
        }
        seen.push(line);
    };
    assert!(command.contains(" daemon --connect ") && command.ends_with("--node 1"), "{command}");
    assert!(seen.iter().any(|l| l.contains("waiting up to 120 s for 1 daemon")), "{seen:?}");
    // The user runs it (here: this test).
    let mut daemon = std::process::Command::new("sh").args(["-c", &command]).spawn().expect("run the printed command");
    let out = add.wait_with_output().expect("dpm boot --add");
    let rest: Vec<String> = lines.try_iter().collect();
    assert!(out.status.success(), "{}\n{}", said(&out), rest.join("\n"));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("node 1 ({manual}) joined with 2 slot(s)")), "{}", said(&out));
    // It takes ranks: node 0 full, the next run goes there.
    let slots = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut filler = boot.run(&["-n", &slots.to_string(), "sleep", "60"]).spawn();
    filler.wait_for_procs(slots);
    let run = boot.run(&["--report-placement", "-n", "2", &common::hello()]).output();
    run.assert_success();
    assert_eq!(hosts_of(&run.stderr_str()), vec![manual.clone()], "{}", run.describe());
    filler.signal("TERM");
    let _ = filler.wait_unchecked();
    // Drained, the daemon started by hand is told to leave, and does.
    let out = boot.boot_command(&["--drain", &manual]);
    assert!(out.status.success(), "{}", said(&out));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = daemon.try_wait().expect("wait for the daemon") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = daemon.kill();
            panic!("the manual daemon did not leave when drained:\n{}", boot.status());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn add_waits_as_long_as_connect_timeout_says_and_refuses_bad_values() {
    let boot = Boot::start(&["--virtual-nodes", "1"]);
    // Nobody runs the printed command: refused after a second, nothing left behind.
    let out = boot.boot_command(&["--add", "-hosts", "nobody-starts-it:1", "-launcher", "manual", "--connect-timeout", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nobody-starts-it") && err.contains("did not connect within 1 s"), "{}", said(&out));
    assert!(node_line(&boot.status(), "nobody-starts-it").is_none(), "{}", boot.status());
    // A launch agent that starts nothing and stays (a hung ssh): the same bound.
    let agent = common::TempFile::new("dpm-silent-ssh", b"#!/bin/sh\nexec sleep 5\n", 0o755);
    let out = boot.boot_command(&["--add", "-hosts", "silent-host:1", "-launcher", "ssh", "--ssh-command", &agent.path_str(), "--connect-timeout", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("did not start: no answer within 1 s"), "{}", said(&out));
    // Bad values are usage errors.
    for args in [&["--connect-timeout", "0"][..], &["--connect-timeout", "soon"][..]] {
        let mut all = vec!["--add", "-hosts", "x:1"];
        all.extend_from_slice(args);
        let out = boot.boot_command(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", said(&out));
    }
    let out = std::process::Command::new(common::dpm_bin())
        .args(["boot", "--add", "-hosts", "x:1"])
        .env("DPM_RUNTIME_DIR", &boot.dir)
        .env("DPM_CONNECT_TIMEOUT", "later")
        .output()
        .expect("run dpm boot");
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    boot.run(&["-n", "1", "true"]).output().assert_success();
}
