//! What a started process gets of the starting process's signal state, on
//! whichever path the start takes (`clone3` with the kernel clearing the
//! handlers, or plain `clone` with the child resetting them): no handler
//! of the parent runs in the child while it shares the parent's memory, and
//! the program starts with every signal at its default and none blocked.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use dpm_daemon::spawn::{reap, PmiEnv, PreparedApp, Started};
use dpm_daemon::spawner::{start, SpawnTask};
use dpm_proto::{AppSpec, ExitStatus};

fn task(argv: &[&str], pgid: i32) -> SpawnTask {
    let spec = AppSpec { exe: argv[0].into(), argv: argv.iter().map(|a| a.to_string()).collect(), env: vec![], wdir: "/".into(), node_env: false };
    let env = PmiEnv { socketpair: false, vars: vec![], affinity: None, hold: false };
    SpawnTask { app: Arc::new(PreparedApp::new(&spec).unwrap()), env, pgid, with_stdin: false }
}

fn wait(s: &Started) -> ExitStatus {
    loop {
        if let Some(status) = reap(&s.pidfd, false).unwrap() {
            return status;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

fn read_all(fd: &OwnedFd) -> String {
    nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty())).unwrap();
    let mut out = String::new();
    std::fs::File::from(fd.try_clone().unwrap()).read_to_string(&mut out).unwrap();
    out
}

static HANDLED: AtomicUsize = AtomicUsize::new(0);

extern "C" fn count(_: libc::c_int) {
    HANDLED.fetch_add(1, Ordering::SeqCst);
}

/// The parent ignores one signal and handles another: the program starts
/// with neither (and nothing blocked).
pub fn a_started_program_has_default_dispositions_and_no_mask() {
    // SAFETY: `count` only touches an atomic; SIGUSR2 ignored, SIGUSR1
    // handled in this test process only.
    unsafe {
        libc::signal(libc::SIGUSR2, libc::SIG_IGN);
        libc::signal(libc::SIGUSR1, count as extern "C" fn(libc::c_int) as libc::sighandler_t);
    }
    let s = start(&task(&["/bin/grep", "-E", "^Sig(Blk|Ign|Cgt):", "/proc/self/status"], 0)).unwrap();
    let out = read_all(&s.stdout);
    assert_eq!(wait(&s), ExitStatus::Code(0));
    let field = |name: &str| {
        let line = out.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in {out:?}"));
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    assert_eq!(field("SigBlk:"), 0, "{out}");
    // Signals 32 and 33 are the C library's own (glibc refuses to touch
    // them): what the test runner left there is inherited as it is.
    let libc_own = 3u64 << 31;
    assert_eq!(field("SigIgn:") & !libc_own, 0, "an ignored signal stayed ignored: {out}");
    // grep may catch signals of its own, never one it inherited.
    assert_eq!(field("SigCgt:") & (1 << (libc::SIGUSR1 - 1)), 0, "{out}");
}

/// Processes started into a group that is being sent a signal this process
/// handles: a child that shares this process's memory must never run the
/// handler (it would count here).
pub fn no_handler_of_the_parent_runs_in_a_starting_child() {
    // SAFETY: `count` only touches an atomic.
    unsafe { libc::signal(libc::SIGWINCH, count as extern "C" fn(libc::c_int) as libc::sighandler_t) };
    // The group: a sleeping leader (SIGWINCH's default is to ignore it), in
    // this session (a process joins only a group of its own session).
    use std::os::unix::process::CommandExt;
    let mut leader = std::process::Command::new("/bin/sleep").arg("30").process_group(0).spawn().unwrap();
    let pgid = leader.id() as i32;
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut sent = 0u64;
            while !stop.load(Ordering::SeqCst) {
                // SAFETY: kill(2) with a group id; no memory is passed.
                unsafe { libc::kill(-pgid, libc::SIGWINCH) };
                sent += 1;
            }
            sent
        })
    };
    let before = HANDLED.load(Ordering::SeqCst);
    for _ in 0..200 {
        let s = start(&task(&["/bin/true"], pgid)).unwrap();
        assert_eq!(s.pgid, pgid, "started into the leader's group");
        assert_eq!(wait(&s), ExitStatus::Code(0));
    }
    stop.store(true, Ordering::SeqCst);
    let sent = sender.join().unwrap();
    assert!(sent > 0);
    assert_eq!(HANDLED.load(Ordering::SeqCst), before, "a starting child ran this process's handler ({sent} signals sent)");
    leader.kill().unwrap();
    leader.wait().unwrap();
}
