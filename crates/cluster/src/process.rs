//! Scripted processes: what runs on a cluster's nodes instead of MPI programs.
//!
//! A [`Script`] is a list of [`Step`]s a rank performs in order, most of them
//! PMI-1 requests spoken on its connection exactly as MPICH's simple PMI
//! client writes them (`docs/pmi-wire.md` §6): `Init` is MPICH's
//! start sequence (init, maxes, appnum, kvsname, and for a spawned process
//! the `PARENT_ROOT_PORT_NAME` get), `Barrier` is `barrier_in`, `Spawn` is one
//! `mcmd=spawn` block. A [`Proc`] runs one script: it hands the cluster the
//! bytes to write and takes the node's reply lines, one request in flight at
//! a time, so a test can check what the real node reactor answered.
//!
//! `Init2` speaks PMI-2 instead (MPICH's `pmi_v2.c`: the PMI-1-framed init,
//! `fullinit`, `job-getid`), and every later step then uses PMI-2 frames;
//! `Ring` (Slurm's `PMIX_Ring`) exists only there.
//!
//! Keys and values may name the rank: `{rank}`, `{size}`, `{next}` (the
//! next rank, cyclic) and `{prev}` are replaced before a request is sent.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// One thing a scripted rank does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// MPICH's PMI-1 start: init, get_maxes, get_appnum, get_my_kvsname, and
    /// (when `PMI_SPAWNED=1`) the get of `PARENT_ROOT_PORT_NAME`.
    Init,
    /// MPICH's PMI-2 start; later steps speak PMI-2.
    Init2,
    Put(String, String),
    /// `barrier_in`, answered by `barrier_out` when the job's fence completes.
    Barrier,
    /// A get; the value (or the error) is recorded under the key.
    Get(String),
    /// A get of the key with `{i}` replaced by each rank of the job in turn
    /// (paper 004's all-to-all pattern), from `next` on; values are not kept
    /// (that would grow as ranks²), failures count in `errors`.
    GetAll {
        key: String,
        next: u32,
    },
    /// `MPI_Comm_spawn` of `n` processes of `/bin/true <script>` (the script
    /// registered under that name runs in them), with the parent port preput.
    Spawn {
        n: u32,
        script: String,
    },
    /// The rest of `MPI_Comm_spawn` after the PMI answer: the parent's
    /// accept, which waits (no PMI) until every rank of the job its last
    /// `Spawn` started has come to its `Finalize` or ended. A child script's
    /// steps before `Finalize` stand for its `MPI_Init`, at whose end MPICH's
    /// children connect to the parent. dpm answers a spawn before the
    /// children start (`run::spawn::answers_before_start`), so without it a
    /// scripted parent would go on long before a real one.
    Accept,
    /// PMI-2 `ring` with this value: records `ring-rank`, `ring-size`,
    /// `ring-left` and `ring-right`.
    Ring(String),
    /// `MPI_Publish_name` / `MPI_Lookup_name` (a lookup records the port under the service name).
    Publish(String, String),
    Lookup(String),
    Finalize,
    /// `MPI_Abort(code)`: no reply comes; the process then waits to be killed.
    Abort(i32),
    /// Write a line to stdout.
    Print(String),
    /// Virtual time passes (computation).
    Work(Duration),
    /// Exit with this code (ends the script; closes PMI and output).
    Exit(i32),
    /// Die of this signal.
    Die(i32),
    /// Wait forever (until killed).
    Hang,
    /// From now on SIGTERM (and SIGINT, SIGHUP) do not end the process: only SIGKILL does.
    IgnoreTerm,
    /// Open MPI 5's `MPI_Init` served PMI-1/2 (no `PMIX_NAMESPACE`): it
    /// connects to the PMIx server `PMIX_SERVER_URI41` names (a node's
    /// watch, `dpm_daemon::pmix_watch`) and waits there for an answer that
    /// never comes; a connection closed fails its init (exit 1). With no
    /// server there it runs as a singleton: prints `rank 0 of 1`, exits 0.
    OpenMpiInit,
}

/// A named list of steps.
pub type Script = Vec<Step>;

/// Shorthands for scripts.
pub fn put(k: &str, v: &str) -> Step {
    Step::Put(k.into(), v.into())
}
pub fn get(k: &str) -> Step {
    Step::Get(k.into())
}
/// Every rank's key: `key` names the rank as `{i}`.
pub fn get_all(key: &str) -> Step {
    Step::GetAll { key: key.into(), next: 0 }
}

/// What a process asks the cluster to do next.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Write these bytes on the PMI connection (one request), then wait for a reply.
    Request(Vec<u8>),
    /// Write these bytes (an abort: no reply), then go on at once.
    Send(Vec<u8>),
    Print(String),
    Sleep(Duration),
    Exit(i32),
    Die(i32),
    /// Nothing more until killed.
    Wait,
    /// Wait until the job this process spawned last is up ([`Step::Accept`]).
    Accept,
    /// Only SIGKILL ends it from now on; then go on.
    IgnoreTerm,
    /// Connect to the PMIx server at this URI, if any ([`Step::OpenMpiInit`]).
    PmixConnect(Option<String>),
}

/// One scripted rank's progress.
pub struct Proc {
    pub job_size: u32,
    pub rank: u32,
    pub spawned: bool,
    pub kvsname: String,
    /// Speaking PMI-2 (after `Init2`'s first exchange).
    v2: bool,
    /// Reply bytes not yet a whole line or frame.
    inbox: Vec<u8>,
    steps: VecDeque<Step>,
    /// The rest of the current step's requests (`Init` is several).
    pending: VecDeque<String>,
    /// The step that owns the request in flight.
    current: Option<Step>,
    /// Every reply line received, in order.
    pub replies: Vec<String>,
    /// Values got by `Get` / `Lookup` (an error reply records `Err(line)`).
    pub values: HashMap<String, Result<String, String>>,
    /// Replies with `rc≠0` to anything else.
    pub errors: Vec<String>,
    /// It has come to its `Finalize`: whatever it did before (MPI_Init) is done.
    pub finalizing: bool,
    /// `PMIX_SERVER_URI41` of its environment ([`Step::OpenMpiInit`]).
    pmix_uri: Option<String>,
}

impl Proc {
    pub fn new(script: &Script, env: &[(String, String)]) -> Self {
        let var = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        Proc {
            job_size: var("PMI_SIZE").and_then(|v| v.parse().ok()).unwrap_or(1),
            rank: var("PMI_RANK").and_then(|v| v.parse().ok()).unwrap_or(0),
            spawned: var("PMI_SPAWNED") == Some("1"),
            kvsname: String::new(),
            v2: false,
            inbox: Vec::new(),
            steps: script.iter().cloned().collect(),
            pending: VecDeque::new(),
            current: None,
            replies: Vec::new(),
            values: HashMap::new(),
            errors: Vec::new(),
            finalizing: false,
            pmix_uri: var("PMIX_SERVER_URI41").map(String::from),
        }
    }

    /// `{rank}` & co. replaced.
    fn fill(&self, text: &str) -> String {
        let size = self.job_size.max(1);
        text.replace("{rank}", &self.rank.to_string())
            .replace("{size}", &size.to_string())
            .replace("{next}", &((self.rank + 1) % size).to_string())
            .replace("{prev}", &((self.rank + size - 1) % size).to_string())
    }

    /// The next thing to do, once the previous request (if any) was answered.
    pub fn next_action(&mut self) -> Action {
        if let Some(line) = self.pending.pop_front() {
            return Action::Request(line.into_bytes());
        }
        self.current = None;
        let Some(step) = self.steps.pop_front() else { return Action::Exit(0) };
        self.finalizing |= step == Step::Finalize;
        let kvs = self.kvsname.clone();
        let requests: Vec<String> = match &step {
            Step::Init => {
                let mut r = vec![
                    "cmd=init pmi_version=1 pmi_subversion=1\n".to_string(),
                    "cmd=get_maxes\n".into(),
                    "cmd=get_appnum\n".into(),
                    "cmd=get_my_kvsname\n".into(),
                ];
                if self.spawned {
                    // The kvsname is known only from the reply before it.
                    r.push("GET_PARENT\n".into());
                }
                r
            }
            Step::Init2 => {
                vec!["cmd=init pmi_version=2 pmi_subversion=0\n".to_string(), frame2(&format!("cmd=fullinit;pmirank={};", self.rank)), frame2("cmd=job-getid;")]
            }
            Step::Put(k, v) if self.v2 => vec![frame2(&format!("cmd=kvs-put;key={};value={};", self.fill(k), self.fill(v)))],
            Step::Put(k, v) => vec![format!("cmd=put kvsname={kvs} key={} value={}\n", self.fill(k), self.fill(v))],
            Step::Barrier if self.v2 => vec![frame2("cmd=kvs-fence;")],
            Step::Barrier => vec!["cmd=barrier_in\n".into()],
            Step::Get(k) if self.v2 => vec![frame2(&format!("cmd=kvs-get;jobid={kvs};srcid=-1;key={};", self.fill(k)))],
            Step::Get(k) => vec![format!("cmd=get kvsname={kvs} key={}\n", self.fill(k))],
            Step::GetAll { next, .. } if *next >= self.job_size => return self.next_action(),
            Step::GetAll { key, next } => {
                // One get now; the rest of the ranks after its reply.
                self.steps.push_front(Step::GetAll { key: key.clone(), next: next + 1 });
                let key = self.fill(&key.replace("{i}", &next.to_string()));
                match self.v2 {
                    true => vec![frame2(&format!("cmd=kvs-get;jobid={kvs};srcid={next};key={key};"))],
                    false => vec![format!("cmd=get kvsname={kvs} key={key}\n")],
                }
            }
            Step::Ring(v) => vec![frame2(&format!("cmd=ring;ring-count=1;ring-left={v};ring-right={v};", v = self.fill(v)))],
            Step::Spawn { n, script } => vec![format!(
                "mcmd=spawn\nnprocs={n}\nexecname=/bin/true\ntotspawns=1\nspawnssofar=1\nargcnt=1\narg1={script}\n\
                 preput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=port-of-{kvs}-{}\ninfo_num=0\nendcmd\n",
                self.rank
            )],
            Step::Publish(service, port) => vec![format!("cmd=publish_name service={service} port={}\n", self.fill(port))],
            Step::Lookup(service) => vec![format!("cmd=lookup_name service={service}\n")],
            Step::Finalize if self.v2 => vec![frame2("cmd=finalize;")],
            Step::Finalize => vec!["cmd=finalize\n".into()],
            Step::Abort(code) => {
                let code = *code;
                self.current = Some(step);
                return Action::Send(format!("cmd=abort exitcode={code}\n").into_bytes());
            }
            Step::Print(text) => return Action::Print(self.fill(text)),
            Step::Work(d) => return Action::Sleep(*d),
            Step::Exit(code) => return Action::Exit(*code),
            Step::Die(sig) => return Action::Die(*sig),
            Step::Hang => return Action::Wait,
            Step::Accept => return Action::Accept,
            Step::IgnoreTerm => return Action::IgnoreTerm,
            Step::OpenMpiInit => return Action::PmixConnect(self.pmix_uri.clone()),
        };
        self.current = Some(step);
        self.pending = requests.into();
        self.next_action()
    }

    /// Bytes from the node: the replies they complete, in order (a PMI-1
    /// line, or a PMI-2 frame once PMI-2 is spoken).
    pub fn take_replies(&mut self, bytes: &[u8]) -> Vec<String> {
        self.inbox.extend_from_slice(bytes);
        let mut out = Vec::new();
        loop {
            let taken = if self.v2 {
                let len = std::str::from_utf8(self.inbox.get(..6).unwrap_or_default()).ok().and_then(|l| l.trim().parse::<usize>().ok());
                match len {
                    Some(len) if self.inbox.len() >= 6 + len => Some((6, 6 + len)),
                    _ => None,
                }
            } else {
                self.inbox.iter().position(|&b| b == b'\n').map(|at| (0, at + 1))
            };
            let Some((start, end)) = taken else { return out };
            let msg: Vec<u8> = self.inbox.drain(..end).skip(start).collect();
            let text = String::from_utf8_lossy(&msg).trim_end().to_string();
            // PMI-2's first exchange is PMI-1-framed; after it, frames.
            if text.starts_with("cmd=response_to_init") && text.contains("pmi_version=2") {
                self.v2 = true;
            }
            out.push(text);
        }
    }

    /// A reply from the node to the request in flight.
    pub fn reply(&mut self, line: &str) {
        self.replies.push(line.to_string());
        let fields = parse(line);
        let ok = fields.get("rc").is_none_or(|rc| rc == "0");
        if let Some(ring) = fields.get("cmd").filter(|c| *c == "ring-response") {
            let _ = ring;
            for key in ["ring-rank", "ring-size", "ring-left", "ring-right"] {
                self.values.insert(key.into(), fields.get(key).cloned().ok_or_else(|| line.to_string()));
            }
        }
        if let Some(jobid) = fields.get("jobid").filter(|_| fields.get("cmd").map(String::as_str) == Some("job-getid-response")) {
            self.kvsname = jobid.clone();
        }
        if let Some(kvs) = fields.get("kvsname").filter(|_| fields.get("cmd").map(String::as_str) == Some("my_kvsname")) {
            self.kvsname = kvs.clone();
            if let Some(first) = self.pending.front_mut().filter(|l| l.as_str() == "GET_PARENT\n") {
                *first = format!("cmd=get kvsname={kvs} key=PARENT_ROOT_PORT_NAME\n");
            }
        }
        let key = match &self.current {
            Some(Step::Get(k)) => Some(self.fill(k)),
            Some(Step::Lookup(s)) => Some(s.clone()),
            Some(Step::Init) if fields.get("cmd").map(String::as_str) == Some("get_result") => Some("PARENT_ROOT_PORT_NAME".into()),
            Some(Step::Ring(_)) => None,
            _ => None,
        };
        match key {
            Some(key) => {
                let value = fields.get("value").or_else(|| fields.get("port")).cloned();
                self.values.insert(key, value.filter(|_| ok).ok_or_else(|| line.to_string()));
            }
            None if !ok => self.errors.push(line.to_string()),
            None => {}
        }
    }
}

/// `cmd=x a=b c=d` (PMI-1: values hold no bare spaces) or `cmd=x;a=b;`
/// (PMI-2) as a map.
pub fn parse(line: &str) -> HashMap<String, String> {
    let fields: Vec<&str> = if line.contains(';') { line.split(';').collect() } else { line.split_whitespace().collect() };
    fields.into_iter().filter_map(|f| f.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A PMI-2 frame: the 6-character length, then the message.
fn frame2(msg: &str) -> String {
    format!("{:<6}{msg}", msg.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(rank: u32, size: u32, spawned: bool) -> Vec<(String, String)> {
        let mut e = vec![("PMI_RANK".to_string(), rank.to_string()), ("PMI_SIZE".to_string(), size.to_string())];
        if spawned {
            e.push(("PMI_SPAWNED".into(), "1".into()));
        }
        e
    }

    #[test]
    fn init_speaks_mpichs_start_sequence_and_a_spawned_child_asks_for_its_parent() {
        let mut p = Proc::new(&vec![Step::Init], &env(0, 2, true));
        let mut sent = Vec::new();
        let replies = [
            "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1",
            "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024",
            "cmd=appnum rc=0 appnum=0",
            "cmd=my_kvsname rc=0 kvsname=kvs_1",
            "cmd=get_result rc=0 value=port-x",
        ];
        for r in replies {
            match p.next_action() {
                Action::Request(b) => sent.push(String::from_utf8(b).unwrap()),
                other => panic!("{other:?}"),
            }
            p.reply(r);
        }
        assert_eq!(sent.last().unwrap(), "cmd=get kvsname=kvs_1 key=PARENT_ROOT_PORT_NAME\n");
        assert_eq!(p.values["PARENT_ROOT_PORT_NAME"], Ok("port-x".into()));
        assert_eq!(p.next_action(), Action::Exit(0));
    }

    #[test]
    fn keys_name_the_rank_and_errors_are_kept() {
        let mut p = Proc::new(&vec![put("bc-{rank}", "addr-{rank}"), get("bc-{next}")], &env(2, 3, false));
        p.kvsname = "k".into();
        assert_eq!(p.next_action(), Action::Request(b"cmd=put kvsname=k key=bc-2 value=addr-2\n".to_vec()));
        p.reply("cmd=put_result rc=0");
        assert_eq!(p.next_action(), Action::Request(b"cmd=get kvsname=k key=bc-0\n".to_vec()));
        p.reply("cmd=get_result rc=1 msg=key_not_found");
        assert!(p.values["bc-0"].is_err());
    }
}
