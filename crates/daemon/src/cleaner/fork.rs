//! The cleaner started as a fork of the node's process, without an exec
//! ([`prefork`]): what a one-node `dpm run` uses, as the first thing it does
//! once it knows it runs its node itself and before any thread starts, and
//! what each `dpm daemon` does once it has taken its secret out of the
//! environment.
//!
//! An exec of this binary (the path in [`super::process`]) cost a cold
//! `dpm run -n 1 /bin/true` about a quarter of its CPU (issue 37: the
//! dynamic loading and start of a 38 MB binary, a thread to start it and a
//! second fork), where a fork of a process that has not yet started its
//! runtime copies little. What the exec used to sort out is done by hand
//! in the child:
//! - descriptors: the pipe's read end becomes stdin, `/dev/null` stdout,
//!   stderr stays (for its warnings); every other descriptor is closed,
//!   those the process inherited without close-on-exec too;
//! - its name: `ps` shows `dpm clean-up-after <pid>` as before (the
//!   command line is pointed at a new string with `PR_SET_MM_MAP`, which
//!   needs no privilege; where the kernel refuses it, the command line
//!   stays the launcher's) and its `comm` is `dpm-cleaner`;
//! - its session: its own, as before, so a Ctrl-C or Ctrl-Z at the
//!   terminal does not reach it.
//!
//! It is the node's child (no second fork: nothing in dpm waits for every
//! child, only for the pids it started), and it is reaped by init once the
//! node's process is gone, which is also when it reads end of file.

use std::io::PipeWriter;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::sync::Mutex;

/// A cleaner forked ahead of its node ([`prefork`]), until the node takes it.
static PREPARED: Mutex<Option<PipeWriter>> = Mutex::new(None);

/// The pipe to a cleaner [`prefork`] started, if any (taken once).
pub(super) fn take_prepared() -> Option<PipeWriter> {
    PREPARED.lock().ok()?.take()
}

/// Start this process's cleaner now as a fork, if cleaners are enabled and
/// the process is single-threaded (checked: otherwise nothing is done, and
/// the node starts its cleaner by an exec as before). The node's
/// [`super::process::Link::start`] then takes it.
pub fn prefork() {
    if !super::process::enabled() || !single_threaded() {
        return;
    }
    let Ok((reader, writer)) = std::io::pipe() else { return };
    let node_pid = std::process::id();
    // SAFETY: the process is single-threaded (checked above), so the child
    // may run any code: no lock is held by a thread that is not there.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Parent { .. }) => {
            drop(reader);
            if let Ok(mut prepared) = PREPARED.lock() {
                *prepared = Some(writer);
            }
        }
        Ok(nix::unistd::ForkResult::Child) => {
            drop(writer);
            let code = match become_cleaner(reader.into_raw_fd(), node_pid) {
                Ok(()) => super::process::serve(node_pid),
                Err(e) => {
                    tracing::warn!(node_pid, "cleaner: cannot set up its descriptors ({e}); not cleaning up");
                    1
                }
            };
            // SAFETY: `_exit` ends this child without running the exit
            // handlers or flushing the buffers it inherited from the node.
            unsafe { libc::_exit(code) }
        }
        Err(e) => tracing::warn!("cannot start the cleaner (shared memory of jobs is not removed if dpm is killed): {e}"),
    }
}

/// Whether this process has one thread (`/proc/self/stat`'s 20th field).
fn single_threaded() -> bool {
    std::fs::read_to_string("/proc/self/stat").ok().and_then(|s| stat_field(&s, 20)).is_some_and(|n| n == 1)
}

/// Field `n` (1-based, as proc(5) numbers them) of a `/proc/<pid>/stat`
/// line, for the numeric fields after the command name.
fn stat_field(stat: &str, n: usize) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(n.checked_sub(3)?)?.parse().ok()
}

/// In the child: its descriptors and its name ([`super::process::serve`]
/// gives it its own session).
fn become_cleaner(reader: i32, node_pid: u32) -> nix::Result<()> {
    if reader != 0 {
        nix::unistd::dup2(reader, 0)?;
    }
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").map_err(|e| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0)))?;
    nix::unistd::dup2(null.as_raw_fd(), 1)?;
    drop(null);
    close_from(3);
    retitle(node_pid);
    Ok(())
}

/// Close every descriptor from `first` on.
fn close_from(first: u32) {
    // SAFETY: close_range(2) takes plain integers and only closes
    // descriptors; nothing in this single-threaded child still uses one of
    // them (the Rust objects that owned them were dropped or forgotten).
    let closed = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0) } == 0;
    if closed {
        return;
    }
    // Kernels before 5.9: the descriptors listed in /proc/self/fd (the
    // directory's own among them, which fails harmlessly).
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<i32> = dir.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).filter(|&fd: &i32| fd >= first as i32).collect();
    for fd in fds {
        let _ = nix::unistd::close(fd);
    }
}

/// `struct prctl_mm_map` of `<linux/prctl.h>`.
#[repr(C)]
struct MmMap {
    start_code: u64,
    end_code: u64,
    start_data: u64,
    end_data: u64,
    start_brk: u64,
    brk: u64,
    start_stack: u64,
    arg_start: u64,
    arg_end: u64,
    env_start: u64,
    env_end: u64,
    auxv: *mut u64,
    auxv_size: u32,
    exe_fd: u32,
}

/// Show `dpm clean-up-after <node_pid>` in `ps` (the command line) and
/// `dpm-cleaner` in `top` (`comm`). Best effort: a kernel that refuses
/// leaves the launcher's command line.
fn retitle(node_pid: u32) {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"dpm-cleaner".as_ptr()) };
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return };
    let field = |n| stat_field(&stat, n);
    let (Some(start_code), Some(end_code), Some(start_stack)) = (field(26), field(27), field(28)) else { return };
    let (Some(start_data), Some(end_data), Some(start_brk), Some(env_start), Some(env_end)) = (field(45), field(46), field(47), field(50), field(51)) else {
        return;
    };
    // The new command line lives for the rest of the process.
    let title: &'static [u8] = Vec::leak(format!("dpm\0{}\0{node_pid}\0", super::process::SUBCOMMAND).into_bytes());
    let arg_start = title.as_ptr() as u64;
    // SAFETY: sbrk(0) only reads the current program break.
    let brk = unsafe { libc::sbrk(0) } as u64;
    let map = MmMap {
        start_code,
        end_code,
        start_data,
        end_data,
        start_brk,
        brk: brk.max(start_brk),
        start_stack,
        arg_start,
        arg_end: arg_start + title.len() as u64,
        env_start,
        env_end,
        auxv: std::ptr::null_mut(),
        auxv_size: 0,
        exe_fd: u32::MAX,
    };
    // SAFETY: PR_SET_MM_MAP reads `size_of::<MmMap>()` bytes of `map`, a
    // `prctl_mm_map` laid out as the kernel's; every address in it is this
    // process's own as the kernel reported it, except the command line's,
    // which points at `title`, leaked above. No auxiliary vector
    // (`auxv_size` 0) and no new executable (`exe_fd` -1) are given.
    unsafe {
        libc::prctl(libc::PR_SET_MM, libc::PR_SET_MM_MAP, &map as *const MmMap, std::mem::size_of::<MmMap>(), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_as_proc_5_numbers_them() {
        let stat = "42 (a) b) c) S 1 42 42 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 3 0";
        assert_eq!(stat_field(stat, 4), Some(1));
        assert_eq!(stat_field(stat, 5), Some(42));
        assert_eq!(stat_field(stat, 20), Some(3));
        assert_eq!(stat_field(stat, 3), None, "the state is not numeric");
        assert_eq!(stat_field(stat, 2), None);
        assert_eq!(stat_field(stat, 99), None);
        assert_eq!(stat_field("garbage", 20), None);
    }

    #[test]
    fn this_test_process_is_seen_with_its_threads() {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let threads = std::fs::read_dir("/proc/self/task").unwrap().count() as u64;
        // The harness may start or end a thread in between: within one.
        assert!(stat_field(&stat, 20).unwrap().abs_diff(threads) <= 1, "{stat}");
    }
}
