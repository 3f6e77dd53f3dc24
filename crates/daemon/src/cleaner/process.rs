//! The cleaner's process plumbing: the node's end ([`Link`]: start the
//! cleaner, write notes, wait for it at a normal end) and the cleaner's own
//! loop ([`main`]: read notes until end of file, then [`clean_up`]).
//!
//! The cleaner is this same binary (`/proc/self/exe clean-up-after <pid>`),
//! started only when the binary said it has that subcommand ([`enable`]; a
//! test binary running a node starts none). Its stdin is the read end of a
//! pipe whose write end (close-on-exec, like every fd Rust opens) only the
//! node's process holds: ranks, forked daemons and the cleaner itself never
//! inherit it, so end of file comes exactly when that process is gone.
//!
//! A `dpm run` and each `dpm daemon` fork it instead, before any thread
//! starts ([`super::fork::prefork`]: no exec, the same name in `ps`). Otherwise it
//! is started off the node's thread (an exec costs milliseconds; the
//! notes wait in the pipe meanwhile) and is not the node's child: the
//! process dpm starts forks the cleaner proper into a session of its own and
//! exits, so dpm's children are its daemons and ranks only, nobody waits for
//! the cleaner, and a Ctrl-C or Ctrl-Z at the terminal does not reach it.
//! At a normal end it reads end of file with nothing to do and exits within
//! milliseconds of dpm.

use std::io::{BufRead, PipeWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use super::{clean_up, CleanupEffects, Ledger, Note, NoteError, MAX_LINE};

/// The subcommand the binary runs the cleaner as.
pub const SUBCOMMAND: &str = "clean-up-after";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// This binary runs [`main`] as `SUBCOMMAND <pid>`: nodes may start cleaners.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether [`enable`] was called.
pub(super) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The node's end of its cleaner.
pub struct Link {
    pipe: Option<PipeWriter>,
    /// The thread starting the cleaner, until [`Link::finish`].
    starter: Option<std::thread::JoinHandle<()>>,
    /// Notes kept from [`Link::hold`] to [`Link::release`].
    held: Option<String>,
}

impl Link {
    /// Start this process's cleaner, or take the one [`super::fork::prefork`]
    /// started; `None` if cleaners are not enabled or it cannot start (said
    /// in the log: the node runs on without one).
    pub fn start() -> Option<Link> {
        if let Some(pipe) = super::fork::take_prepared() {
            return Some(Link { pipe: Some(pipe), starter: None, held: None });
        }
        if !enabled() {
            return None;
        }
        let warn = |e: std::io::Error| tracing::warn!("cannot start the cleaner (shared memory of jobs is not removed if dpm is killed): {e}");
        let (reader, writer) = std::io::pipe().map_err(warn).ok()?;
        let span = tracing::Span::current();
        let starter = std::thread::Builder::new().name("dpm-cleaner".into()).spawn(move || {
            use std::os::unix::process::CommandExt;
            let _in = span.enter();
            let mut command = Command::new("/proc/self/exe");
            command.arg0("dpm").args([SUBCOMMAND, &std::process::id().to_string()]).stdin(reader).stdout(Stdio::null()).stderr(Stdio::inherit());
            // It forks the cleaner proper and exits at once.
            match command.spawn().and_then(|mut first| first.wait()) {
                Ok(status) if status.success() => {}
                Ok(status) => tracing::warn!("the cleaner did not start: {status}"),
                Err(e) => warn(e),
            }
            // Dropping the command closes this process's copy of the read end.
        });
        match starter {
            Ok(starter) => Some(Link { pipe: Some(writer), starter: Some(starter), held: None }),
            Err(e) => {
                warn(e);
                None
            }
        }
    }

    /// Tell the cleaner (at [`Link::release`] if held). A cleaner that went
    /// away is said once, then left.
    pub fn note(&mut self, note: &Note) {
        match self.held.as_mut() {
            Some(held) => held.push_str(&note.encode()),
            None => self.write(note.encode().as_bytes()),
        }
    }

    /// Keep the notes that follow until [`Link::release`]: a burst of them
    /// (the groups of a batch of started processes) goes in one write, and
    /// the cleaner wakes once for it.
    pub fn hold(&mut self) {
        self.held.get_or_insert_with(String::new);
    }

    /// Write the notes kept since [`Link::hold`].
    pub fn release(&mut self) {
        if let Some(held) = self.held.take().filter(|h| !h.is_empty()) {
            self.write(held.as_bytes());
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        let Some(pipe) = self.pipe.as_mut() else { return };
        if let Err(e) = pipe.write_all(bytes) {
            tracing::warn!("the cleaner is gone ({e}): shared memory of jobs is not removed if dpm is killed");
            self.pipe = None;
        }
    }

    /// A normal end: close the pipe (the cleaner, with every job ended, has
    /// nothing to do and exits) and reap the process that started it if it
    /// is done. One still starting is not waited for: this process is about
    /// to exit, and a short run (`dpm run -n 1 /bin/true`) ended several
    /// milliseconds after its rank only because it waited here for the
    /// cleaner's exec of this 37 MB binary (issue 37). The cleaner reads
    /// the notes left in the pipe and its end of file as it would have, and
    /// the process that started it, orphaned, is reaped by init.
    pub fn finish(mut self) {
        self.release();
        drop(self.pipe.take());
        if let Some(starter) = self.starter.take().filter(|s| s.is_finished()) {
            let _ = starter.join();
        }
    }
}

/// The cleaner's effects on the real system.
struct Real {
    /// The node's process, now gone.
    node_pid: u32,
}

impl CleanupEffects for Real {
    fn kill_group(&mut self, pgid: i32) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(-pgid), nix::sys::signal::Signal::SIGKILL);
    }

    fn group_alive(&mut self, pgid: i32) -> bool {
        // EPERM: the id now names another user's group, not this job's.
        if nix::sys::signal::kill(nix::unistd::Pid::from_raw(-pgid), None).is_err() {
            return false;
        }
        // Killed ranks are reparented to an init that may reap them late:
        // a group of zombies creates nothing.
        let Ok(procs) = std::fs::read_dir("/proc") else { return true };
        procs.flatten().any(|e| std::fs::read_to_string(e.path().join("stat")).is_ok_and(|stat| live_member(&stat, pgid)))
    }

    fn now(&mut self) -> Instant {
        Instant::now()
    }

    fn sleep(&mut self, for_: Duration) {
        std::thread::sleep(for_);
    }

    fn remove_mpich(&mut self, kvsname: &str) -> usize {
        crate::mpich_shm::remove_segments(Path::new("/dev/shm"), kvsname)
    }

    fn remove_ucx(&mut self, since: SystemTime) -> usize {
        crate::ucx_shm::remove_orphans(Path::new("/dev/shm"), since)
    }

    fn remove_pmix_dirs(&mut self) -> usize {
        use std::os::unix::fs::MetadataExt;
        let uid = nix::unistd::getuid().as_raw();
        let ours = |m: &std::fs::Metadata| m.is_dir() && m.uid() == uid;
        // node::pmix_host names the jobs' dpm.<uid>.<node pid>.<job's public name>.
        let prefix = format!("dpm.{uid}.{}.", self.node_pid);
        let shm = std::fs::read_dir("/dev/shm")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .filter(|e| e.metadata().is_ok_and(|m| ours(&m)))
            .filter(|e| std::fs::remove_dir_all(e.path()).is_ok())
            .count();
        shm + self.remove_pmix_server_dir()
    }

    fn remove_pmix_server_dir(&mut self) -> usize {
        use std::os::unix::fs::MetadataExt;
        let uid = nix::unistd::getuid().as_raw();
        // The PMIx server's own directory (its namespaces' stores), as
        // node::pmix_host makes it; symlink_metadata: never followed.
        let server = std::env::temp_dir().join(format!("dpm-pmix.{}", self.node_pid));
        let ours = std::fs::symlink_metadata(&server).is_ok_and(|m| m.is_dir() && m.uid() == uid);
        usize::from(ours && std::fs::remove_dir_all(&server).is_ok())
    }
}

/// Whether a `/proc/<pid>/stat` line is of a live (not zombie) process in group `pgid`.
fn live_member(stat: &str, pgid: i32) -> bool {
    crate::proc_stat::parse(stat).is_some_and(|s| s.pgrp == Some(pgid) && !s.ended())
}

/// Read one line of at most [`MAX_LINE`] bytes into `line` (without its
/// newline); `Ok(None)` at end of file. A longer line is read through and
/// reported as [`NoteError::TooLong`].
fn read_note_line(input: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<Option<Result<(), NoteError>>> {
    line.clear();
    let mut too_long = false;
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            return Ok(if line.is_empty() && !too_long { None } else { Some(Ok(())) });
        }
        let (take, ended) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let body = &chunk[..if ended { take - 1 } else { take }];
        if line.len() + body.len() > MAX_LINE {
            too_long = true;
        } else if !too_long {
            line.extend_from_slice(body);
        }
        input.consume(take);
        if ended {
            return Ok(Some(if too_long { Err(NoteError::TooLong) } else { Ok(()) }));
        }
    }
}

/// The cleaner (`dpm clean-up-after <pid>`): keep the notes from stdin
/// until it closes, then clean up after the jobs not ended. Returns the exit
/// status.
pub fn main(node_pid: u32) -> i32 {
    // SAFETY: `dpm clean-up-after` is single-threaded here (nothing before
    // this in its main starts a thread), so the child may run on freely.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Parent { .. }) => return 0,
        Ok(nix::unistd::ForkResult::Child) => {}
        Err(e) => tracing::warn!(node_pid, "cleaner: cannot fork ({e}); cleaning up as dpm's child"),
    }
    serve(node_pid)
}

/// The cleaner's life once it is its own process with the notes on stdin:
/// keep them until end of file, then clean up. Returns the exit status.
pub(super) fn serve(node_pid: u32) -> i32 {
    // Its own session: a Ctrl-C or Ctrl-Z at the terminal is for dpm and
    // the ranks, not for the one that cleans up after them.
    let _ = nix::unistd::setsid();
    let mut ledger = Ledger::default();
    let mut input = std::io::stdin().lock();
    let mut line = Vec::new();
    loop {
        match read_note_line(&mut input, &mut line) {
            Ok(None) => break,
            Ok(Some(read)) => {
                let applied = read.and_then(|()| Note::parse(&String::from_utf8_lossy(&line))).and_then(|note| ledger.apply(note, SystemTime::now()));
                if let Err(e) = applied {
                    tracing::warn!(node_pid, "cleaner: {e}");
                }
            }
            Err(e) => {
                tracing::warn!(node_pid, "cleaner: cannot read the notes ({e}); cleaning up now");
                break;
            }
        }
    }
    let cleaned = clean_up(&ledger, &mut Real { node_pid });
    if cleaned.jobs > 0 {
        tracing::info!(node_pid, ?cleaned, "cleaned up after the jobs of a dpm process that ended without doing so");
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<Result<String, NoteError>> {
        let mut reader = std::io::BufReader::with_capacity(16, input);
        let mut line = Vec::new();
        let mut out = Vec::new();
        while let Some(read) = read_note_line(&mut reader, &mut line).unwrap() {
            out.push(read.map(|()| String::from_utf8_lossy(&line).into_owned()));
        }
        out
    }

    #[test]
    fn a_group_of_zombies_is_not_alive() {
        assert!(live_member("42 (a b) c) S 1 42 42 0 -1", 42));
        assert!(!live_member("42 (a b) c) Z 1 42 42 0 -1", 42));
        assert!(!live_member("43 (x) R 42 42 42 0 -1", 41));
        assert!(!live_member("garbage", 42));
    }

    #[test]
    fn lines_are_split_bounded_and_a_last_unended_one_counts() {
        let long = "x".repeat(MAX_LINE + 1);
        let input = format!("job a\n{long}\ngroup a 12\nend a");
        assert_eq!(lines(input.as_bytes()), [Ok("job a".to_string()), Err(NoteError::TooLong), Ok("group a 12".to_string()), Ok("end a".to_string())]);
        assert!(lines(b"").is_empty());
    }
}
