//! Starting a process on the calling thread, as the node's own thread starts
//! a small spawn's processes ([`dpm_daemon::node::StartBy::NodeThread`]):
//! from the caller's whole fd table, not a spawner thread's nearly empty
//! one. The child gets its program, arguments, environment, directory, stdio
//! and PMI socket, in a session of its own, and no other fd of the caller,
//! even one opened without close-on-exec; a step that fails in the child is
//! the start's error.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use dpm_daemon::spawn::{reap, PmiEnv, PreparedApp, Started};
use dpm_daemon::spawner::{start, SpawnTask};
use dpm_proto::{AppSpec, ExitStatus};

fn task(exe: &str, script: &str, wdir: &str, pmi: PmiEnv) -> SpawnTask {
    let argv = vec!["sh".to_string(), "-c".into(), script.into()];
    let spec = AppSpec { exe: exe.into(), argv, env: vec![("GREETING".into(), "hello".into())], wdir: wdir.into(), node_env: false };
    SpawnTask { app: Arc::new(PreparedApp::new(&spec).unwrap()), env: pmi, pgid: 0, with_stdin: false }
}

/// The parent's ends come non-blocking (for the node's event loop).
fn nonblocking(fd: &OwnedFd) -> bool {
    let flags = nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL).unwrap();
    nix::fcntl::OFlag::from_bits_truncate(flags).contains(nix::fcntl::OFlag::O_NONBLOCK)
}

/// Read to end of file, blocking (the end is made blocking first).
fn read_all(fd: &OwnedFd) -> String {
    nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty())).unwrap();
    let mut out = String::new();
    std::fs::File::from(fd.try_clone().unwrap()).read_to_string(&mut out).unwrap();
    out
}

/// Wait for the process to end and reap it.
fn wait(s: &Started) -> ExitStatus {
    loop {
        if let Some(status) = reap(&s.pidfd, false).unwrap() {
            return status;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn a_process_started_here_gets_what_it_was_given_and_no_other_fd() {
    // An fd without close-on-exec, as a library might leave one.
    let (leak_r, _leak_w) = nix::unistd::pipe().unwrap();
    nix::fcntl::fcntl(leak_r.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty())).unwrap();
    // Fields 1 and 6 of /proc/self/stat (here the shell's): pid and session.
    // A program the shell starts lists its own fds: what a program started
    // there inherits (the shell keeps fds of its own while it redirects or
    // builds a pipeline, close-on-exec).
    let script = "read pid comm state ppid pgrp sid rest < /proc/self/stat; echo \"$GREETING $PMI_RANK $(pwd) $sid\"; \
                  ls -l /proc/self/fd >&2; exit 3";
    let pmi = PmiEnv { socketpair: true, vars: vec![("PMI_RANK".into(), "5".into())], affinity: None, hold: false };
    let s = start(&task("/bin/sh", script, "/tmp", pmi)).unwrap();
    assert_eq!(s.pgid, s.pid, "the child leads its own session and group");
    let pmi = s.pmi.as_ref().expect("a PMI socket");
    assert!([pmi, &s.stdout, &s.stderr].into_iter().all(nonblocking), "the parent's ends are non-blocking");
    let out = read_all(&s.stdout);
    assert_eq!(out.split_whitespace().collect::<Vec<_>>(), ["hello", "5", "/tmp", &s.pid.to_string()], "{out:?}");
    // stdio, and the PMI socket (PMI_FD) as the next free fd of the caller's
    // table; not the leaked pipe.
    // `ls -l` lines end `<fd> -> <target>`; its own directory fd is left out.
    let listing = read_all(&s.stderr);
    let mut fds: Vec<i32> = listing
        .lines()
        .filter_map(|line| line.split_once(" -> "))
        .filter(|(_, target)| !(target.starts_with("/proc/") && target.ends_with("/fd")))
        .map(|(left, _)| left.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    fds.sort_unstable();
    assert_eq!(&fds[..3], [0, 1, 2]);
    assert!(!fds.contains(&leak_r.as_raw_fd()), "the caller's fd {} reached the child: {fds:?}", leak_r.as_raw_fd());
    assert_eq!(fds.len(), 4, "stdio and the PMI socket only: {fds:?}");
    assert_eq!(wait(&s), ExitStatus::Code(3));
}

#[test]
fn a_step_that_fails_in_the_child_is_the_starts_error() {
    let none = || PmiEnv { socketpair: false, vars: vec![], affinity: None, hold: false };
    let missing = start(&task("/nonexistent/program", "exit 0", "/", none()));
    assert_eq!(missing.err().and_then(|e| e.raw_os_error()), Some(libc::ENOENT), "program");
    let no_dir = start(&task("/bin/sh", "exit 0", "/nonexistent/dir", none()));
    assert_eq!(no_dir.err().and_then(|e| e.raw_os_error()), Some(libc::ENOENT), "directory");
    let ok = start(&task("/bin/sh", "exit 0", "/", none())).unwrap();
    assert_eq!(wait(&ok), ExitStatus::Code(0));
}

mod signals_at_start;

#[test]
fn a_started_program_has_default_dispositions_and_no_mask() {
    signals_at_start::a_started_program_has_default_dispositions_and_no_mask();
}

#[test]
fn no_handler_of_the_parent_runs_in_a_starting_child() {
    signals_at_start::no_handler_of_the_parent_runs_in_a_starting_child();
}

#[test]
fn a_process_started_in_the_callers_own_directory_is_there() {
    // The child inherits the directory instead of changing to it.
    let here = std::env::current_dir().unwrap();
    let none = PmiEnv { socketpair: false, vars: vec![], affinity: None, hold: false };
    let s = start(&task("/bin/sh", "pwd -P", here.to_str().unwrap(), none)).unwrap();
    assert_eq!(read_all(&s.stdout).trim_end(), here.canonicalize().unwrap().to_str().unwrap());
    assert_eq!(wait(&s), ExitStatus::Code(0));
}
