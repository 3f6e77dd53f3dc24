use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime};

use super::*;

#[test]
fn notes_round_trip_and_bad_lines_are_refused() {
    for note in [Note::Job { kvsname: "kvs_1_2_0".into() }, Note::Group { kvsname: "kvs_1_2_0".into(), pgid: 4242 }, Note::End { kvsname: "kvs_1_2_0".into() }]
    {
        let line = note.encode();
        assert!(line.ends_with('\n'));
        assert_eq!(Note::parse(line.trim_end_matches('\n')), Ok(note));
    }
    for bad in ["", "job", "job ", "job a b", "group a", "group a x", "group a 1", "group a -5", "kill a", "end a\tb", "job a\u{7f}"] {
        assert!(matches!(Note::parse(bad), Err(NoteError::Malformed(_))), "{bad:?} was taken");
    }
    assert!(matches!(Note::parse(&format!("job {}", "k".repeat(257))), Err(NoteError::Malformed(_))));
    assert_eq!(Note::parse(&"k".repeat(MAX_LINE + 1)), Err(NoteError::TooLong));
}

/// Records the cleanup; groups die after `dies_after` polls.
struct Recorder {
    now: Instant,
    killed: Vec<i32>,
    alive: HashSet<i32>,
    /// Groups that never empty.
    stuck: HashSet<i32>,
    polls: usize,
    dies_after: usize,
    mpich: Vec<String>,
    ucx_since: Vec<SystemTime>,
    pmix: usize,
    pmix_server: usize,
    /// Liveness polls made when the first segment was removed.
    polls_at_removal: Option<usize>,
}

impl Recorder {
    fn new(dies_after: usize) -> Self {
        Recorder {
            now: Instant::now(),
            killed: Vec::new(),
            alive: HashSet::new(),
            stuck: HashSet::new(),
            polls: 0,
            dies_after,
            mpich: Vec::new(),
            ucx_since: Vec::new(),
            pmix: 0,
            pmix_server: 0,
            polls_at_removal: None,
        }
    }
}

impl CleanupEffects for Recorder {
    fn kill_group(&mut self, pgid: i32) {
        self.killed.push(pgid);
        self.alive.insert(pgid);
    }
    fn group_alive(&mut self, pgid: i32) -> bool {
        self.polls += 1;
        self.stuck.contains(&pgid) || (self.alive.contains(&pgid) && self.polls <= self.dies_after)
    }
    fn now(&mut self) -> Instant {
        self.now
    }
    fn sleep(&mut self, for_: Duration) {
        self.now += for_;
    }
    fn remove_mpich(&mut self, kvsname: &str) -> usize {
        self.polls_at_removal.get_or_insert(self.polls);
        self.mpich.push(kvsname.to_string());
        1
    }
    fn remove_ucx(&mut self, since: SystemTime) -> usize {
        self.ucx_since.push(since);
        2
    }
    fn remove_pmix_dirs(&mut self) -> usize {
        self.pmix += 1;
        0
    }
    fn remove_pmix_server_dir(&mut self) -> usize {
        self.pmix_server += 1;
        0
    }
}

fn ledger(notes: &[(Note, SystemTime)]) -> Ledger {
    let mut ledger = Ledger::default();
    for (note, at) in notes {
        ledger.apply(note.clone(), *at).unwrap();
    }
    ledger
}

fn job(k: &str) -> Note {
    Note::Job { kvsname: k.into() }
}
fn group(k: &str, pgid: i32) -> Note {
    Note::Group { kvsname: k.into(), pgid }
}
fn end(k: &str) -> Note {
    Note::End { kvsname: k.into() }
}

#[test]
fn a_normal_end_leaves_nothing_to_do() {
    let t = SystemTime::now();
    let l = ledger(&[(job("a"), t), (group("a", 100), t), (group("a", 101), t), (end("a"), t)]);
    let mut fx = Recorder::new(0);
    assert_eq!(clean_up(&l, &mut fx), Cleaned::default());
    assert!(fx.killed.is_empty() && fx.mpich.is_empty() && fx.ucx_since.is_empty() && fx.pmix == 0);
    // Only a PMIx server's directory the node left (it ended every job).
    assert_eq!(fx.pmix_server, 1);
}

#[test]
fn after_a_kill_the_jobs_not_ended_are_cleaned_once_their_groups_are_empty() {
    let t0 = SystemTime::now();
    let t1 = t0 + Duration::from_secs(5);
    let l = ledger(&[
        (job("a"), t0),
        (group("a", 100), t0),
        (job("b"), t1),
        (group("b", 200), t1),
        (group("b", 201), t1),
        (job("c"), t1),
        (group("c", 300), t1),
        (end("c"), t1),
    ]);
    let mut fx = Recorder::new(6);
    let done = clean_up(&l, &mut fx);
    assert_eq!(fx.killed, [100, 200, 201], "only the groups of jobs not ended are killed");
    assert!(fx.polls_at_removal.is_some_and(|p| p > fx.dies_after), "segments went while ranks could still make them");
    assert_eq!(fx.mpich, ["a", "b"]);
    assert_eq!(fx.ucx_since, [t0], "UCX files since the earliest job not ended");
    assert_eq!(fx.pmix, 1);
    assert_eq!(done, Cleaned { jobs: 2, groups_killed: 3, groups_left: 0, mpich: 2, ucx: 2, pmix_dirs: 0 });
}

#[test]
fn a_group_that_never_empties_delays_the_removal_a_bounded_time() {
    let t = SystemTime::now();
    let l = ledger(&[(job("a"), t), (group("a", 100), t), (group("a", 101), t)]);
    let mut fx = Recorder::new(0);
    fx.stuck.insert(101);
    let start = fx.now;
    let done = clean_up(&l, &mut fx);
    assert_eq!(done.groups_left, 1);
    assert_eq!(fx.mpich, ["a"]);
    let waited = fx.now - start;
    assert!(waited >= GROUPS_GONE_WITHIN && waited < GROUPS_GONE_WITHIN + Duration::from_millis(20), "waited {waited:?}");
}

#[test]
fn the_ledger_refuses_what_it_cannot_keep() {
    let t = SystemTime::now();
    let mut l = Ledger::default();
    assert_eq!(l.apply(group("x", 5), t), Err(NoteError::UnknownJob("x".into())));
    l.apply(job("x"), t).unwrap();
    // A job told twice keeps its first arrival.
    l.apply(job("x"), t + Duration::from_secs(9)).unwrap();
    assert_eq!(l.jobs["x"].arrived, t);
    for i in 1..MAX_JOBS {
        l.apply(job(&format!("j{i}")), t).unwrap();
    }
    assert_eq!(l.apply(job("one-more"), t), Err(NoteError::TooManyJobs));
    l.apply(end("j1"), t).unwrap();
    l.apply(job("one-more"), t).unwrap();
    l.jobs.get_mut("x").unwrap().groups = vec![2; MAX_GROUPS];
    assert_eq!(l.apply(group("x", 5), t), Err(NoteError::TooManyGroups("x".into())));
}
