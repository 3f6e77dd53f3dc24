//! Starting one rank: socketpair for PMI, pipes for stdio, its job's process
//! group, and death with its daemon.
//!
//! Processes are started the way glibc's `posix_spawn` does it — a
//! `clone(CLONE_VM | CLONE_VFORK)` child that sets itself up and `execve`s —
//! and not with `fork`: after each `fork` the parent re-faults its pages
//! copy-on-write, which made starting 256 ranks take twice as long as
//! `posix_spawn`. `posix_spawn` itself cannot set `PR_SET_PDEATHSIG`, hence
//! this file. Everything the child needs (paths, argv, envp) is prepared before
//! the clone; the child makes only raw syscalls and reports a failure through
//! memory it shares with the parent, which sleeps until the child has exec'd or
//! exited.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, Ordering};

use dpm_proto::AppSpec;

/// A started process and the parent's ends of its channels.
pub struct Started {
    pub pid: i32,
    /// The process group it was put in.
    pub pgid: i32,
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

/// An app's program, arguments and environment as C strings, built once and
/// shared by all its ranks.
pub struct PreparedApp {
    exe: CString,
    wdir: CString,
    args: Vec<CString>,
    env: Vec<CString>,
}

impl PreparedApp {
    pub fn new(app: &AppSpec) -> io::Result<Self> {
        Ok(PreparedApp {
            exe: cstring(OsStr::new(&app.exe).as_bytes())?,
            wdir: cstring(app.wdir.as_bytes())?,
            args: app.argv.iter().map(|a| cstring(a.as_bytes())).collect::<io::Result<_>>()?,
            env: app.env.iter().map(|(k, v)| cstring(format!("{k}={v}").as_bytes())).collect::<io::Result<_>>()?,
        })
    }
}

/// What the child needs, prepared by the parent (the child may not allocate).
struct ChildSetup<'a> {
    exe: &'a CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    wdir: &'a CString,
    pgid: libc::pid_t,
    parent: libc::pid_t,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    /// The child's end of the PMI socketpair, kept open across exec.
    pmi: RawFd,
    /// errno of the step that failed in the child; 0 if it exec'd.
    error: AtomicI32,
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "argument or variable contains a NUL byte"))
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair fills two fds we then own.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Start a process of `app` in process group `pgid` (0: a new group led by the child).
pub fn spawn_proc(app: &PreparedApp, pmi: PmiEnv, pgid: i32, with_stdin: bool) -> io::Result<Started> {
    let (pmi_parent, pmi_child) = if pmi.socketpair { socketpair().map(|(a, b)| (Some(a), Some(b)))? } else { (None, None) };
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (in_r, in_w) = if with_stdin {
        let (r, w) = pipe()?;
        (r, Some(w))
    } else {
        // SAFETY: open(2) of a constant path; we own the result.
        let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        (unsafe { OwnedFd::from_raw_fd(fd) }, None)
    };
    let pmi_fd = pmi_child.as_ref().map_or(-1, |fd| fd.as_raw_fd());

    // argv and envp as C arrays; the CStrings live until the child has exec'd.
    let mut own: Vec<CString> = Vec::with_capacity(pmi.vars.len() + 1);
    for (k, v) in &pmi.vars {
        own.push(cstring(format!("{k}={v}").as_bytes())?);
    }
    if pmi_fd >= 0 {
        own.push(cstring(format!("PMI_FD={pmi_fd}").as_bytes())?);
    }
    let mut argv: Vec<*const libc::c_char> = app.args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = app.env.iter().chain(own.iter()).map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let setup = ChildSetup {
        exe: &app.exe,
        argv,
        envp,
        wdir: &app.wdir,
        pgid,
        parent: std::process::id() as libc::pid_t,
        stdin: in_r.as_raw_fd(),
        stdout: out_w.as_raw_fd(),
        stderr: err_w.as_raw_fd(),
        pmi: pmi_fd,
        error: AtomicI32::new(0),
    };

    let pid = clone_vfork(&setup)?;
    // Also from this side (the usual idiom), so the group is settled whatever
    // the timing; after the child's exec this fails harmlessly with EACCES.
    let pgid = if pgid == 0 { pid } else { pgid };
    // SAFETY: setpgid on our own child.
    unsafe { libc::setpgid(pid, pgid) };
    let error = setup.error.load(Ordering::SeqCst);
    if error != 0 {
        // The child exited without exec'ing: reap it, report why.
        // SAFETY: waitpid on our own child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        return Err(io::Error::from_raw_os_error(error));
    }
    drop((in_r, out_w, err_w, pmi_child));
    Ok(Started { pid, pgid, pidfd: pidfd_open(pid)?, pmi: pmi_parent, stdin: in_w, stdout: out_r, stderr: err_r })
}

/// Size of the child's stack: it only runs `child_main`, a few raw syscalls.
const CHILD_STACK: usize = 64 * 1024;

fn clone_vfork(setup: &ChildSetup) -> io::Result<libc::pid_t> {
    let mut stack = vec![0u8; CHILD_STACK];
    // SAFETY: all signals are blocked around the clone, so no handler of this
    // process can run on the child's stack; the child unblocks them only after
    // resetting every disposition. CLONE_VFORK suspends this thread until the
    // child has exec'd or exited, so `setup` and `stack` outlive its use.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let top = stack.as_mut_ptr().add(CHILD_STACK) as *mut libc::c_void;
        let pid = libc::clone(
            child_main,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            setup as *const ChildSetup as *mut libc::c_void,
        );
        let err = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(err);
        }
        Ok(pid)
    }
}

/// Runs in the child, sharing the parent's memory: raw syscalls only.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's ChildSetup, alive until we exec or exit.
    unsafe {
        let s = &*(arg as *const ChildSetup);
        let fail = |s: &ChildSetup| -> libc::c_int {
            s.error.store(*libc::__errno_location(), Ordering::SeqCst);
            libc::_exit(127)
        };
        // Default dispositions for every signal the daemon handles, then no mask.
        for sig in 1..libc::SIGRTMIN() {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        // Die with the daemon; check it did not die before prctl took hold.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return fail(s);
        }
        if libc::getppid() != s.parent {
            *libc::__errno_location() = libc::ESRCH;
            return fail(s);
        }
        if libc::setpgid(0, s.pgid) != 0 {
            return fail(s);
        }
        if libc::dup2(s.stdin, 0) < 0 || libc::dup2(s.stdout, 1) < 0 || libc::dup2(s.stderr, 2) < 0 {
            return fail(s);
        }
        if s.pmi >= 0 && libc::fcntl(s.pmi, libc::F_SETFD, 0) != 0 {
            return fail(s);
        }
        if libc::chdir(s.wdir.as_ptr()) != 0 {
            return fail(s);
        }
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(s.exe.as_ptr(), s.argv.as_ptr(), s.envp.as_ptr());
        fail(s)
    }
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
