//! The cleaner: what is left of a node's jobs goes even when the dpm process
//! that runs the node dies by `SIGKILL`, and nobody is left to clean.
//!
//! Each dpm process that runs a node (the launcher with its in-process node,
//! a `dpm daemon`, a boot) starts one small cleaner process (`dpm
//! clean-up-after <pid>`, [`process`]) whose stdin is a pipe only the node
//! holds the other end of. The node writes a [`Note`] for each job that
//! arrives (`job`), each process group it starts (`group`), and each job it
//! has cleaned up itself (`end`); the cleaner keeps them in a [`Ledger`].
//! End of file means the node is gone: if it ended normally every job was
//! ended and the cleaner exits at once; otherwise [`clean_up`] kills what is
//! left of the recorded groups, waits until they are empty, and removes the
//! jobs' MPICH segments, UCX segments no process holds (written since the
//! earliest such job arrived) and the node's PMIx backing directories.
//! Nothing of another live job is touched: MPICH segments are named by the
//! job's kvsname, UCX's go only when no process holds them
//! ([`crate::ucx_shm`]), and the PMIx directories carry the dead node's pid.

mod fork;
pub mod process;

pub use fork::prefork;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// Jobs one cleaner keeps at once (a node's live jobs); more are refused.
pub const MAX_JOBS: usize = 65_536;
/// Process groups one job may record (its ranks on this node).
pub const MAX_GROUPS: usize = 1 << 20;
/// A note's line, at most (a kvsname is at most 256 bytes).
pub const MAX_LINE: usize = 512;
/// How long [`clean_up`] waits for killed groups to be empty before it
/// removes their segments anyway.
pub const GROUPS_GONE_WITHIN: Duration = Duration::from_secs(3);

/// One line from the node to its cleaner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// A job with this kvsname has ranks on the node.
    Job { kvsname: String },
    /// A rank of the job leads this process group.
    Group { kvsname: String, pgid: i32 },
    /// The node ended the job and cleaned up after it.
    End { kvsname: String },
}

/// Why a line is not a [`Note`], or cannot be kept.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    #[error("a note line longer than {MAX_LINE} bytes")]
    TooLong,
    #[error("not a cleaner note: {0:?}")]
    Malformed(String),
    #[error("a group of job {0}, which the cleaner does not know")]
    UnknownJob(String),
    #[error("more than {MAX_JOBS} jobs at once")]
    TooManyJobs,
    #[error("more than {MAX_GROUPS} process groups in job {0}")]
    TooManyGroups(String),
}

/// A kvsname fit for a note: non-empty, at most 256 bytes, printable, no spaces.
fn valid_kvsname(name: &str) -> bool {
    !name.is_empty() && name.len() <= 256 && name.bytes().all(|b| b.is_ascii_graphic())
}

impl Note {
    /// The note as one line, newline included.
    pub fn encode(&self) -> String {
        match self {
            Note::Job { kvsname } => format!("job {kvsname}\n"),
            Note::Group { kvsname, pgid } => format!("group {kvsname} {pgid}\n"),
            Note::End { kvsname } => format!("end {kvsname}\n"),
        }
    }

    /// Parse one line (without its newline).
    pub fn parse(line: &str) -> Result<Note, NoteError> {
        if line.len() > MAX_LINE {
            return Err(NoteError::TooLong);
        }
        let bad = || NoteError::Malformed(line.chars().take(80).collect());
        let mut words = line.split(' ');
        let (kind, kvsname) = (words.next().ok_or_else(bad)?, words.next().filter(|k| valid_kvsname(k)).ok_or_else(bad)?.to_string());
        let note = match kind {
            "job" => Note::Job { kvsname },
            "end" => Note::End { kvsname },
            "group" => {
                let pgid = words.next().and_then(|p| p.parse::<i32>().ok()).filter(|&p| p > 1).ok_or_else(bad)?;
                Note::Group { kvsname, pgid }
            }
            _ => return Err(bad()),
        };
        match words.next() {
            Some(_) => Err(bad()),
            None => Ok(note),
        }
    }
}

/// A job the node has not ended yet.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    arrived: SystemTime,
    groups: Vec<i32>,
}

/// The node's jobs that are not ended yet, as the notes told.
#[derive(Debug, Default)]
pub struct Ledger {
    jobs: BTreeMap<String, Entry>,
}

impl Ledger {
    /// Take one note, read at `now`.
    pub fn apply(&mut self, note: Note, now: SystemTime) -> Result<(), NoteError> {
        match note {
            Note::Job { kvsname } => {
                if !self.jobs.contains_key(&kvsname) && self.jobs.len() >= MAX_JOBS {
                    return Err(NoteError::TooManyJobs);
                }
                self.jobs.entry(kvsname).or_insert(Entry { arrived: now, groups: Vec::new() });
            }
            Note::Group { kvsname, pgid } => {
                let Some(entry) = self.jobs.get_mut(&kvsname) else { return Err(NoteError::UnknownJob(kvsname)) };
                if entry.groups.len() >= MAX_GROUPS {
                    return Err(NoteError::TooManyGroups(kvsname));
                }
                entry.groups.push(pgid);
            }
            Note::End { kvsname } => {
                self.jobs.remove(&kvsname);
            }
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

/// What [`clean_up`] acts through (the real one in [`process`]; tests record).
pub trait CleanupEffects {
    /// `kill(-pgid, SIGKILL)`.
    fn kill_group(&mut self, pgid: i32);
    /// Whether any process is still in the group.
    fn group_alive(&mut self, pgid: i32) -> bool;
    fn now(&mut self) -> std::time::Instant;
    fn sleep(&mut self, for_: Duration);
    /// Remove the job's MPICH segments; how many went.
    fn remove_mpich(&mut self, kvsname: &str) -> usize;
    /// Remove UCX segments written since `since` that no process holds.
    fn remove_ucx(&mut self, since: SystemTime) -> usize;
    /// Remove the dead node's PMIx backing directories (and its server's).
    fn remove_pmix_dirs(&mut self) -> usize;
    /// Remove the dead node's PMIx server directory alone.
    fn remove_pmix_server_dir(&mut self) -> usize;
}

/// What [`clean_up`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cleaned {
    pub jobs: usize,
    pub groups_killed: usize,
    /// Groups still not empty after [`GROUPS_GONE_WITHIN`].
    pub groups_left: usize,
    pub mpich: usize,
    pub ucx: usize,
    pub pmix_dirs: usize,
}

/// The node is gone: clean up after every job it did not end.
pub fn clean_up(ledger: &Ledger, fx: &mut impl CleanupEffects) -> Cleaned {
    let mut done = Cleaned { jobs: ledger.jobs.len(), ..Cleaned::default() };
    if ledger.is_empty() {
        // Every job ended, but a PMIx server the node did not get to stop
        // (or could not) must not outlive it.
        done.pmix_dirs = fx.remove_pmix_server_dir();
        return done;
    }
    let mut groups: Vec<i32> = ledger.jobs.values().flat_map(|e| e.groups.iter().copied()).collect();
    groups.sort_unstable();
    groups.dedup();
    for &pgid in &groups {
        fx.kill_group(pgid);
    }
    done.groups_killed = groups.len();
    // Segments go once no rank can create one again.
    let deadline = fx.now() + GROUPS_GONE_WITHIN;
    loop {
        groups.retain(|&g| fx.group_alive(g));
        if groups.is_empty() || fx.now() >= deadline {
            break;
        }
        fx.sleep(Duration::from_millis(10));
    }
    done.groups_left = groups.len();
    for kvsname in ledger.jobs.keys() {
        done.mpich += fx.remove_mpich(kvsname);
    }
    if let Some(since) = ledger.jobs.values().map(|e| e.arrived).min() {
        done.ucx = fx.remove_ucx(since);
    }
    done.pmix_dirs = fx.remove_pmix_dirs();
    done
}

#[cfg(test)]
mod tests;
