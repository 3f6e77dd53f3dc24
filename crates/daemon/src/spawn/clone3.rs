//! `clone3(CLONE_VM | CLONE_VFORK | CLONE_CLEAR_SIGHAND | CLONE_PIDFD)`:
//! the kernel gives the child default dispositions for every signal this
//! process handles, at the clone and atomically, and the parent the child's
//! pidfd.
//!
//! Why: a child that shares the daemon's memory must run none of the
//! daemon's signal handlers between unblocking its signals and its `execve`.
//! With plain `clone` the child copies the handler table and must reset it
//! itself, one `rt_sigaction` per signal (29 a process) whether or not the
//! signal has a handler: which ones have cannot be learned ahead without a
//! race, because libraries install handlers at any time (tokio when a
//! signal is first awaited, libpmix and its libevent when loaded, the
//! latter also removing them again). `CLONE_CLEAR_SIGHAND` resets exactly
//! the handled ones, as of the clone itself. Ignored signals stay ignored;
//! they run no code, so which are ignored may be learned ahead
//! ([`Ignored::now`]) and the child resets those (the daemon's `SIGPIPE`).
//!
//! glibc exports no `clone3` wrapper, and a raw `syscall` cannot give the
//! child a stack of its own, so the call is a few lines of assembly on
//! x86-64 (as glibc's internal `__clone3`). Elsewhere, or where the kernel
//! (before 5.5) or a seccomp filter refuses `clone3`, starts use `clone`
//! and the child resets every signal ([`available`] says which).

use std::sync::atomic::{AtomicU8, Ordering};

/// The signals ignored (`SIG_IGN`) in this process: bit `n - 1` for signal `n`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ignored(pub u64);

impl Ignored {
    /// Ask the kernel, signal by signal (a read-only `rt_sigaction` each),
    /// for the standard signals, the ones a child of plain `clone` resets
    /// (real-time signals ignored here stay ignored in a rank, as they
    /// always did). Learned once per batch of starts: a signal ignored
    /// after this is inherited ignored by the batch's processes, which is
    /// harmless (nothing runs), and no library of the daemon ignores one
    /// at run time.
    pub fn now() -> Ignored {
        let mut mask = 0u64;
        for sig in (1..libc::SIGRTMIN()).filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP) {
            // SAFETY: sigaction with a null new action only reads the
            // disposition into `old`, a plain C struct zeroed first.
            let ignored = unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
            };
            if ignored {
                mask |= 1 << (sig - 1);
            }
        }
        Ignored(mask)
    }

    pub fn contains(self, sig: i32) -> bool {
        (1..=64).contains(&sig) && self.0 & (1 << (sig - 1)) != 0
    }
}

/// `struct clone_args` as of Linux 5.3 (`CLONE_ARGS_SIZE_VER0`).
#[cfg(target_arch = "x86_64")]
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
}

#[cfg(target_arch = "x86_64")]
const CLONE_PIDFD: u64 = 0x1000;
#[cfg(target_arch = "x86_64")]
const CLONE_CLEAR_SIGHAND: u64 = 0x1_0000_0000;

const UNKNOWN: u8 = 0;
#[cfg(target_arch = "x86_64")]
const WORKS: u8 = 1;
const REFUSED: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether starts may try `clone3` (not yet refused here).
pub fn available() -> bool {
    cfg!(target_arch = "x86_64") && STATE.load(Ordering::Relaxed) != REFUSED
}

/// Use plain `clone` from now on in this process, as where the kernel
/// refuses `clone3` (for tests of that path).
pub fn use_clone_only() {
    STATE.store(REFUSED, Ordering::Relaxed);
}

/// Start `child(arg)` on `stack` (its lowest address and size) as a
/// `CLONE_VM | CLONE_VFORK` child with cleared signal handlers; returns
/// once it has exec'd or exited: `Ok(Some((pid, pidfd)))`, `Ok(None)` when
/// the kernel refuses `clone3` here (use `clone`; remembered), or the error.
///
/// # Safety
/// As for `clone(CLONE_VM | CLONE_VFORK)`: `child` must only make raw
/// system calls and end in `execve` or `_exit`; `stack` must be writable
/// for `size` bytes, and `arg` valid, until this returns; every signal
/// must be blocked on the calling thread.
#[cfg(target_arch = "x86_64")]
pub unsafe fn clone_vfork(
    child: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
    stack: *mut u8,
    size: usize,
) -> std::io::Result<Option<(libc::pid_t, std::os::fd::OwnedFd)>> {
    use std::os::fd::FromRawFd;
    let mut pidfd: libc::c_int = -1;
    let args = CloneArgs {
        flags: libc::CLONE_VM as u64 | libc::CLONE_VFORK as u64 | CLONE_CLEAR_SIGHAND | CLONE_PIDFD,
        pidfd: &mut pidfd as *mut libc::c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack as u64,
        stack_size: size as u64,
        ..CloneArgs::default()
    };
    let ret: i64;
    // SAFETY (the caller's contract above): the parent takes the jump and
    // leaves with the result in rax (rcx and r11 are the syscall's). The
    // child starts on its own stack (the kernel sets rsp to its top), with
    // the parent's registers: r12 and r13 (preserved across the syscall)
    // hold the argument and the function it calls; it never comes back
    // here: `child` execs or exits, and its return value is exited with.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "and rsp, -16",
            "mov rdi, r12",
            "call r13",
            "mov edi, eax",
            "mov eax, {exit}",
            "syscall",
            "ud2",
            "2:",
            exit = const libc::SYS_exit,
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") &args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") arg,
            in("r13") child,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    if ret < 0 {
        let errno = -ret as i32;
        // Not this kernel's (ENOSYS, or EINVAL before 5.5's flag) or a
        // seccomp filter's refusal (ENOSYS or EPERM): `clone` from now on.
        if matches!(errno, libc::ENOSYS | libc::EINVAL | libc::EPERM) && STATE.load(Ordering::Relaxed) != WORKS {
            STATE.store(REFUSED, Ordering::Relaxed);
            return Ok(None);
        }
        return Err(std::io::Error::from_raw_os_error(errno));
    }
    STATE.store(WORKS, Ordering::Relaxed);
    // SAFETY: CLONE_PIDFD: the kernel stored a new fd, ours alone.
    Ok(Some((ret as libc::pid_t, unsafe { std::os::fd::OwnedFd::from_raw_fd(pidfd) })))
}

/// Not x86-64: never called ([`available`] is false).
///
/// # Safety
/// None needed: it does nothing.
#[cfg(not(target_arch = "x86_64"))]
pub unsafe fn clone_vfork(
    _child: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    _arg: *mut libc::c_void,
    _stack: *mut u8,
    _size: usize,
) -> std::io::Result<Option<(libc::pid_t, std::os::fd::OwnedFd)>> {
    STATE.store(REFUSED, Ordering::Relaxed);
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::Ignored;

    #[test]
    fn ignored_signals_are_learned_and_handled_or_default_ones_are_not() {
        // SAFETY: changing dispositions of signals no other test here uses.
        unsafe {
            libc::signal(libc::SIGURG, libc::SIG_IGN);
            libc::signal(libc::SIGWINCH, libc::SIG_DFL);
        }
        let ignored = Ignored::now();
        assert!(ignored.contains(libc::SIGURG));
        assert!(!ignored.contains(libc::SIGWINCH));
        assert!(!ignored.contains(libc::SIGKILL));
        assert!(!ignored.contains(0) && !ignored.contains(65));
    }
}
