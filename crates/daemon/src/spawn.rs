//! Forking one rank: socketpair for PMI, pipes for stdio, its job's process
//! group, and death with its daemon.
//!
//! `std::process::Command` does the fork/exec and reports exec failures
//! (ENOENT, EACCES) as errors from `spawn`, so a bad program is an error at
//! launch, not a mysterious exit. The `pre_exec` hook runs in the child between
//! fork and exec and may only make async-signal-safe calls.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};

use dpm_proto::ProcSpec;

/// A started process and the parent's ends of its channels.
pub struct Started {
    pub pid: i32,
    pub pidfd: OwnedFd,
    pub pmi: Option<OwnedFd>,
    pub stdin: Option<OwnedFd>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// Extra environment for one process, beyond its spec.
pub struct PmiEnv {
    /// `PMI_FD` mode: create a socketpair and pass its child end.
    pub socketpair: bool,
    pub vars: Vec<(String, String)>,
}

/// Fork and exec `spec` in process group `pgid` (0: a new group led by the child).
pub fn spawn_proc(spec: &ProcSpec, pmi: PmiEnv, pgid: i32, with_stdin: bool) -> io::Result<Started> {
    let (parent_end, child_end) = if pmi.socketpair {
        let (a, b) = socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::SOCK_CLOEXEC)
            .map_err(io::Error::from)?;
        (Some(a), Some(b))
    } else {
        (None, None)
    };
    let mut cmd = Command::new(&spec.exe);
    if let Some(arg0) = spec.argv.first() {
        cmd.arg0(arg0);
    }
    cmd.args(spec.argv.iter().skip(1))
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .envs(pmi.vars.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.wdir)
        .stdin(if with_stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(pgid);
    let child_fd: RawFd = child_end.as_ref().map_or(-1, |fd| fd.as_raw_fd());
    if child_fd >= 0 {
        cmd.env("PMI_FD", child_fd.to_string());
    }
    let parent_pid = std::process::id() as i32;
    // SAFETY: the closure only makes async-signal-safe libc calls.
    unsafe {
        cmd.pre_exec(move || {
            // Die with the daemon; check the parent did not die before prctl took hold.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || libc::getppid() != parent_pid {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            // The rank keeps its end of the socketpair across exec.
            if child_fd >= 0 && libc::fcntl(child_fd, libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // Start from a clean signal state whatever the daemon did.
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    drop(child_end);
    let pid = child.id() as i32;
    let take = |fd: Option<OwnedFd>| fd.expect("piped");
    let stdout = take(child.stdout.take().map(OwnedFd::from));
    let stderr = take(child.stderr.take().map(OwnedFd::from));
    let stdin = child.stdin.take().map(OwnedFd::from);
    // The child is reaped through its pidfd, never through `Child::wait`.
    drop(child);
    Ok(Started { pid, pidfd: pidfd_open(pid)?, pmi: parent_end, stdin, stdout, stderr })
}

pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; on success the kernel returns a new fd we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Reap the process behind `pidfd` if it has ended.
pub fn reap(pidfd: &OwnedFd) -> io::Result<Option<dpm_proto::ExitStatus>> {
    // SAFETY: waitid fills `info`; a zeroed siginfo_t is a valid initial value.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(libc::P_PIDFD, pidfd.as_raw_fd() as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG);
        if rc != 0 {
            let err = io::Error::last_os_error();
            // Not our child (an adopted singleton): it ended, status unknown;
            // its PMI state decides how the exit is judged.
            if err.raw_os_error() == Some(libc::ECHILD) {
                return Ok(Some(dpm_proto::ExitStatus::Code(0)));
            }
            return Err(err);
        }
        if info.si_pid() == 0 {
            return Ok(None);
        }
        let status = info.si_status();
        Ok(Some(match info.si_code {
            libc::CLD_EXITED => dpm_proto::ExitStatus::Code(status),
            _ => dpm_proto::ExitStatus::Signal(status),
        }))
    }
}
