//! Starting one rank: socketpair for PMI, pipes for stdio, its own session
//! (or a given process group), and death with its daemon.
//!
//! Processes are started the way glibc's `posix_spawn` does it — a
//! `clone(CLONE_VM | CLONE_VFORK)` child that sets itself up and `execve`s
//! (with `clone3`'s `CLONE_CLEAR_SIGHAND` where it can: [`clone3`]) —
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

use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
use nix::unistd::Pid;

use dpm_proto::AppSpec;

use crate::node::StartError;

pub mod clone3;

pub use clone3::Ignored;

/// What the starts of one batch share, learned once for the batch: this
/// process's id (each child checks that its parent is still this process)
/// and the signals it ignores. (`getpid` a start was a system call a rank.)
#[derive(Clone, Copy, Debug)]
pub struct Batch {
    pub pid: libc::pid_t,
    pub ignored: Ignored,
}

impl Batch {
    pub fn now() -> Batch {
        Batch { pid: std::process::id() as libc::pid_t, ignored: Ignored::now() }
    }
}

/// A started process and the parent's ends of its channels (`pmi`,
/// `stdout` and `stderr` already non-blocking, for the node's event loop).
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmiEnv {
    /// `PMI_FD` mode: create a socketpair and pass its child end.
    pub socketpair: bool,
    pub vars: Vec<(String, String)>,
    /// Its CPU and memory binding, set in the child before `exec`.
    pub affinity: Option<Affinity>,
    /// Held for a debugger (MPIR launch mode): the process is left stopped
    /// (SIGSTOP) at the first instruction of its program ([`hold_at_exec`]);
    /// whoever started the job continues it with SIGCONT.
    pub hold: bool,
}

/// A process's binding as the kernel takes it: masks of 64-bit words (bit
/// `n % 64` of word `n / 64` is CPU or NUMA node `n`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Affinity {
    /// `sched_setaffinity`'s mask (`None`: not bound).
    pub cpus: Option<Vec<u64>>,
    /// `set_mempolicy(MPOL_BIND)`'s node mask (`None`: not bound).
    pub mems: Option<Vec<u64>>,
}

/// An app's program, arguments and environment as C strings, built once and
/// shared by all its ranks.
pub struct PreparedApp {
    spec: AppSpec,
    exe: CString,
    wdir: CString,
    /// `wdir` is this process's working directory (the same file when the
    /// app was prepared): the child, which inherits it, need not `chdir`.
    in_wdir: bool,
    args: Vec<CString>,
    env: Vec<CString>,
}

impl PreparedApp {
    pub fn new(app: &AppSpec) -> io::Result<Self> {
        Ok(PreparedApp {
            spec: app.clone(),
            exe: cstring(OsStr::new(&app.exe).as_bytes())?,
            wdir: cstring(app.wdir.as_bytes())?,
            in_wdir: same_file(std::path::Path::new(&app.wdir), std::path::Path::new(".")),
            args: app.argv.iter().map(|a| cstring(a.as_bytes())).collect::<io::Result<_>>()?,
            // A link secret never reaches a rank, whatever the launcher sent.
            env: with_node_env(app, std::env::vars_os())
                .iter()
                .filter(|(k, _)| !dpm_proto::auth::is_secret_var(k))
                .map(|(k, v)| cstring(format!("{k}={v}").as_bytes()))
                .collect::<io::Result<_>>()?,
        })
    }

    /// The app as the launcher described it.
    pub fn spec(&self) -> &AppSpec {
        &self.spec
    }
}

/// The app's environment; with [`AppSpec::node_env`], set over `node` (this
/// daemon's own, as Hydra's proxy passes its own on under `-genvnone`), less
/// an outer launcher's PMI variables and names or values that are not UTF-8.
fn with_node_env(app: &AppSpec, node: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>) -> Vec<(String, String)> {
    if !app.node_env {
        return app.env.clone();
    }
    let outer = |k: &str| k.starts_with("PMI_") || k.starts_with("PMIX_") || k == "MPI_LOCALNRANKS" || k == "MPI_LOCALRANKID";
    let mut env: Vec<(String, String)> = node
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| !outer(k) && !app.env.iter().any(|(set, _)| set == k))
        .collect();
    env.extend(app.env.iter().cloned());
    env
}

/// What the child needs, prepared by the parent (the child may not allocate).
struct ChildSetup<'a> {
    exe: &'a CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    wdir: &'a CString,
    /// The child is there already: no `chdir`.
    in_wdir: bool,
    pgid: libc::pid_t,
    parent: libc::pid_t,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    /// The child's end of the PMI socketpair, kept open across exec.
    pmi: RawFd,
    /// CPU mask for `sched_setaffinity` (null: unbound) and its length in words.
    cpus: (*const u64, usize),
    /// Node mask for `set_mempolicy(MPOL_BIND)` (null: unbound) and its words.
    mems: (*const u64, usize),
    /// With `pgid` 0: found a session (`setsid`), else only a group.
    own_session: bool,
    /// Set every signal to its default disposition: the kernel did not
    /// clear the handlers (plain `clone`).
    reset_all: bool,
    /// The signals ignored in this process, for the child to reset (with
    /// `clone3`, which leaves them ignored).
    ignored: Ignored,
    /// Ask to be traced by the starting thread before `exec`, so that the
    /// exec stops it ([`hold_at_exec`]).
    hold: bool,
    /// errno of the step that failed in the child; 0 if it exec'd.
    error: AtomicI32,
}

/// The session layout (`bench/startup/sessions`, docs/benchmarks.md "Session
/// layout: results", docs/guide.md "Troubleshooting"):
/// `DPM_RANK_SESSION=group` in the environment of the process that runs the
/// node makes each rank that would found a session of its own lead only a
/// process group of its own, in the node's session (the same groups, so the
/// same signals and clean-up; under the kernel's autogroup scheduler the
/// ranks then share the node's CPU share instead of one each). Anything
/// else, or unset: a session per rank, as Hydra's proxy makes.
pub const RANK_SESSION_VAR: &str = "DPM_RANK_SESSION";

/// Read once per process.
fn rank_sessions() -> bool {
    static OWN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| std::env::var_os(RANK_SESSION_VAR).is_none_or(|v| v != "group"))
}

/// Both paths name one file now (device and inode); `false` when either
/// cannot be read.
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

thread_local! {
    /// `/dev/null` for the starts of this thread's processes without
    /// stdin, opened once (close-on-exec) in the thread's fd table.
    static DEV_NULL: std::cell::OnceCell<OwnedFd> = const { std::cell::OnceCell::new() };
}

/// This thread's `/dev/null` ([`DEV_NULL`]).
fn dev_null() -> io::Result<RawFd> {
    DEV_NULL.with(|cell| {
        if let Some(fd) = cell.get() {
            return Ok(fd.as_raw_fd());
        }
        // std opens with O_CLOEXEC.
        let fd = OwnedFd::from(std::fs::File::open("/dev/null")?);
        Ok(cell.get_or_init(|| fd).as_raw_fd())
    })
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "argument or variable contains a NUL byte"))
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

/// O_NONBLOCK as the only status flag of a fresh pipe or socket end (the
/// parent's: the child's end is another open file description and stays
/// blocking).
fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    Ok(())
}

fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType};
    Ok(nix::sys::socket::socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::SOCK_CLOEXEC)?)
}

/// A failed start as the launcher reports it. Running out of file
/// descriptors says which limit and how to raise it: each rank costs the
/// daemon four (PMI socket, stdout, stderr, pidfd) for its whole life.
pub fn start_error(e: io::Error) -> StartError {
    let errno = e.raw_os_error().unwrap_or(0);
    if errno != libc::EMFILE && errno != libc::ENFILE {
        return StartError::from(e);
    }
    let limit = match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            format!(" (RLIMIT_NOFILE: soft {soft}, hard {})", if hard == libc::RLIM_INFINITY { "unlimited".to_string() } else { hard.to_string() })
        }
        Err(_) => String::new(),
    };
    let what = if errno == libc::ENFILE { "the system ran out of open files" } else { "the daemon ran out of file descriptors" };
    StartError {
        errno,
        message: format!(
            "{what}{limit}; each rank takes four: raise the limit with `ulimit -n` (up to the hard limit) before starting dpm, or run fewer ranks per node"
        ),
    }
}

/// Start a process of `app` in process group `pgid` (0: a new session and
/// group led by the child), with what its batch of starts learned ([`Batch::now`]).
pub fn spawn_proc(app: &PreparedApp, pmi: &PmiEnv, pgid: i32, with_stdin: bool, batch: Batch) -> io::Result<Started> {
    let (pmi_parent, pmi_child) = if pmi.socketpair { socketpair().map(|(a, b)| (Some(a), Some(b)))? } else { (None, None) };
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (in_r, in_w) = if with_stdin {
        let (r, w) = pipe()?;
        (Some(r), Some(w))
    } else {
        (None, None)
    };
    let stdin = match &in_r {
        Some(r) => r.as_raw_fd(),
        None => dev_null()?,
    };
    // The parent's ends, here on the starting thread and not on the node's
    // loop: one fcntl each (the loop would check each pipe and read its
    // flags first). Before the clone, so that a failure leaves no process.
    for fd in pmi_parent.iter().chain([&out_r, &err_r]) {
        set_nonblocking(fd)?;
    }
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
    let mut setup = ChildSetup {
        exe: &app.exe,
        argv,
        envp,
        wdir: &app.wdir,
        in_wdir: app.in_wdir,
        pgid,
        parent: batch.pid,
        stdin,
        stdout: out_w.as_raw_fd(),
        stderr: err_w.as_raw_fd(),
        pmi: pmi_fd,
        cpus: mask_ptr(pmi.affinity.as_ref().and_then(|a| a.cpus.as_deref())),
        mems: mask_ptr(pmi.affinity.as_ref().and_then(|a| a.mems.as_deref())),
        own_session: rank_sessions(),
        reset_all: true,
        ignored: batch.ignored,
        hold: pmi.hold,
        error: AtomicI32::new(0),
    };

    let (pid, pidfd) = clone_vfork(&mut setup)?;
    // CLONE_VFORK: this thread resumes only once the child has exec'd or
    // failed, so its setsid/setpgid has happened.
    let pgid = if pgid == 0 { pid } else { pgid };
    let error = setup.error.load(Ordering::SeqCst);
    if error != 0 {
        // The child exited without exec'ing: reap it, report why.
        let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
        return Err(io::Error::from_raw_os_error(error));
    }
    drop((in_r, out_w, err_w, pmi_child));
    if pmi.hold {
        hold_at_exec(pid)?;
    }
    let pidfd = match pidfd {
        Some(fd) => fd,
        None => pidfd_open(pid)?,
    };
    Ok(Started { pid, pgid, pidfd, pmi: pmi_parent, stdin: in_w, stdout: out_r, stderr: err_r })
}

/// A mask's address and length for the child (null: none).
fn mask_ptr(mask: Option<&[u64]>) -> (*const u64, usize) {
    mask.map_or((std::ptr::null(), 0), |m| (m.as_ptr(), m.len()))
}

/// `set_mempolicy`'s mode binding memory to the given nodes.
const MPOL_BIND: libc::c_int = 2;

/// Size of the child's stack: it only runs `child_main`, a few raw syscalls.
const CHILD_STACK: usize = 64 * 1024;

thread_local! {
    /// This thread blocks every signal for good ([`block_signals_here`]).
    static ALL_BLOCKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Block every signal on the calling thread for the rest of its life (a
/// spawner thread): its starts then skip blocking and restoring them around
/// each clone, two system calls per process.
pub fn block_signals_here() -> io::Result<()> {
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), None)?;
    ALL_BLOCKED.with(|b| b.set(true));
    Ok(())
}

/// Clone the child and wait for its exec: its pid, and its pidfd when the
/// kernel made one ([`clone3`]).
fn clone_vfork(setup: &mut ChildSetup) -> io::Result<(libc::pid_t, Option<OwnedFd>)> {
    // The child's stack, uninitialised: only the child writes to it.
    let mut stack: Vec<u8> = Vec::with_capacity(CHILD_STACK);
    let blocked = ALL_BLOCKED.with(|b| b.get());
    let mut old = SigSet::empty();
    if !blocked {
        pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::all()), Some(&mut old))?;
    }
    // SAFETY: all signals are blocked around the clone (here, or on this
    // thread for good: `blocked`), so no handler of this process can run on
    // the child's stack; the child unblocks them only after its handlers
    // are default (cleared by the kernel with `clone3`, else reset by the
    // child: `reset_all`). CLONE_VFORK suspends this thread until the child
    // has exec'd or exited, so `setup` and `stack` outlive its use; the
    // child reads `setup` only.
    let result = unsafe {
        let base = stack.as_mut_ptr();
        let cloned = if clone3::available() {
            setup.reset_all = false;
            clone3::clone_vfork(child_main, setup as *mut ChildSetup as *mut libc::c_void, base, CHILD_STACK)
        } else {
            Ok(None)
        };
        match cloned {
            Ok(Some((pid, pidfd))) => Ok((pid, Some(pidfd))),
            Err(e) => Err(e),
            Ok(None) => {
                setup.reset_all = true;
                let arg = setup as *mut ChildSetup as *mut libc::c_void;
                let top = base.add(CHILD_STACK) as *mut libc::c_void;
                let pid = libc::clone(child_main, top, libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD, arg);
                if pid < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok((pid, None))
                }
            }
        }
    };
    if !blocked {
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }
    result
}

/// Runs in the child, sharing the parent's memory: raw syscalls only (no
/// nix wrappers either: nothing here may allocate or touch shared state but
/// `error`).
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's ChildSetup, alive until we exec or exit.
    unsafe {
        let s = &*(arg as *const ChildSetup);
        let fail = |s: &ChildSetup| -> libc::c_int {
            s.error.store(*libc::__errno_location(), Ordering::SeqCst);
            libc::_exit(127)
        };
        // Default dispositions for every signal the daemon handles, then no
        // mask: with `clone3` the kernel cleared the handlers and the
        // ignored ones are reset here; with `clone`, every one.
        for sig in 1..=64 {
            let reset = if s.reset_all { sig < libc::SIGRTMIN() } else { s.ignored.contains(sig) };
            if reset && sig != libc::SIGKILL && sig != libc::SIGSTOP {
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
        // pgid 0: a session of its own (the kernel's autogroup scheduler then
        // gives it its own CPU share, as Hydra's ranks get; see the node
        // reactor's launch), and so a group led by itself.
        // (`own_session` false: a group of its own in the node's session.)
        let grouped = match (s.pgid, s.own_session) {
            (0, true) => libc::setsid(),
            (0, false) => libc::setpgid(0, 0),
            (pgid, _) => libc::setpgid(0, pgid),
        };
        if grouped < 0 {
            return fail(s);
        }
        if libc::dup2(s.stdin, 0) < 0 || libc::dup2(s.stdout, 1) < 0 || libc::dup2(s.stderr, 2) < 0 {
            return fail(s);
        }
        // Nothing else of the starting thread's fd table goes through the
        // exec, even an fd a library opened without close-on-exec (a small
        // spawn is started from the node's own table: StartBy::NodeThread).
        // Best effort: kernels before 5.11 lack the flag.
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
        if s.pmi >= 0 && libc::fcntl(s.pmi, libc::F_SETFD, 0) != 0 {
            return fail(s);
        }
        if !s.in_wdir && libc::chdir(s.wdir.as_ptr()) != 0 {
            return fail(s);
        }
        // The binding (`-bind-to`, `-membind`): inherited through the exec.
        if !s.cpus.0.is_null() && libc::syscall(libc::SYS_sched_setaffinity, 0, s.cpus.1 * 8, s.cpus.0) != 0 {
            return fail(s);
        }
        // maxnode counts bits plus one (the kernel reads maxnode - 1).
        if !s.mems.0.is_null() && libc::syscall(libc::SYS_set_mempolicy, MPOL_BIND, s.mems.0, (s.mems.1 * 64 + 1) as libc::c_ulong) != 0 {
            return fail(s);
        }
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // Held for a debugger: the starting thread becomes our tracer, and
        // the exec below stops us (SIGTRAP) before the program's first
        // instruction, until that thread leaves us stopped (`hold_at_exec`).
        if s.hold && libc::ptrace(libc::PTRACE_TRACEME, 0, std::ptr::null_mut::<libc::c_void>(), std::ptr::null_mut::<libc::c_void>()) != 0 {
            return fail(s);
        }
        libc::execve(s.exe.as_ptr(), s.argv.as_ptr(), s.envp.as_ptr());
        fail(s)
    }
}

/// A child started with `hold` has exec'd and stops (or is stopping) at
/// the exec's SIGTRAP, traced by this thread (the one that cloned it):
/// wait for that stop and detach with SIGSTOP, which leaves it stopped at
/// its program's first instruction, untraced, for a debugger to attach to
/// (as Slurm holds tasks for TotalView). A child that died meanwhile is
/// left for its reaper (`WNOWAIT`).
fn hold_at_exec(pid: libc::pid_t) -> io::Result<()> {
    loop {
        // SAFETY: waitid fills `info`; a zeroed siginfo_t is a valid initial
        // value. WNOWAIT: nothing is consumed (an exit stays for the pidfd's
        // reaper); the stop is looked at only.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags = libc::WEXITED | libc::WSTOPPED | libc::WNOWAIT | libc::__WALL;
        // SAFETY: a plain syscall on our own child, into `info` above.
        if unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) } != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if !matches!(info.si_code, libc::CLD_TRAPPED | libc::CLD_STOPPED) {
            return Ok(());
        }
        // The stop is ours to take: consume it, then detach, stopped.
        let mut taken: libc::siginfo_t = info;
        // SAFETY: as above; the child is stopped, so this returns at once.
        unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut taken, libc::WSTOPPED | libc::WNOHANG | libc::__WALL) };
        return match nix::sys::ptrace::detach(Pid::from_raw(pid), nix::sys::signal::Signal::SIGSTOP) {
            // ESRCH: killed meanwhile; its reaper hears of it.
            Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
            Err(e) => Err(e.into()),
        };
    }
}

pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open (which nix does not wrap) is a plain syscall; on
    // success the kernel returns a new fd that nothing else owns.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: see above: a fresh fd, ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Reap the process behind `pidfd` if it has ended. With `keep`, only read
/// its status and leave the zombie: a process-group leader stays in the
/// table so that its group id cannot be reused before the job's final kill.
/// (Raw `waitid`: nix's `WaitStatus` cannot hold a death by a real-time
/// signal, which dpm reports like any other.)
pub fn reap(pidfd: &OwnedFd, keep: bool) -> io::Result<Option<dpm_proto::ExitStatus>> {
    // SAFETY: waitid fills `info`; a zeroed siginfo_t is a valid initial value.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WEXITED | libc::WNOHANG | if keep { libc::WNOWAIT } else { 0 };
        let rc = libc::waitid(libc::P_PIDFD, pidfd.as_raw_fd() as libc::id_t, &mut info, flags);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_env_is_the_base_under_genvnone() {
        let node = || [("PATH", "/bin"), ("HOME", "/n"), ("PMI_FD", "3"), ("X", "node")].map(|(k, v)| (k.into(), v.into())).into_iter();
        let mut app = AppSpec { exe: "/bin/true".into(), argv: vec![], env: vec![("X".into(), "set".into())], wdir: "/".into(), node_env: false };
        assert_eq!(with_node_env(&app, node()), vec![("X".to_string(), "set".to_string())]);
        app.node_env = true;
        let want: Vec<(String, String)> = [("PATH", "/bin"), ("HOME", "/n"), ("X", "set")].map(|(k, v)| (k.to_string(), v.to_string())).to_vec();
        assert_eq!(with_node_env(&app, node()), want);
    }
}
