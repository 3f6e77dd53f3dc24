//! The node driver's PMIx host: the one [`PmixServer`] of this process
//! (started on the first PMIx job, for that program's own Open MPI), the
//! upcalls' completion handles until the reactor answers them, and what a
//! PMIx job leaves on the node (the server's directory, the ranks'
//! shared-memory segments).
//!
//! Upcalls arrive on the library's thread as owned [`Upcall`]s; a task
//! forwards them into the driver's event channel, where [`PmixHost::accept`]
//! keeps each handle under a [`PmixRequest`] and hands the reactor plain
//! data. Upcalls the front end does not serve yet (spawn, connect,
//! disconnect) are refused at once with `PMIX_ERR_NOT_SUPPORTED`:
//! the client gets an error, never a hang.
//!
//! Open MPI puts its shared-memory segments in `/dev/shm` and leaves them to
//! the resource manager; each PMIx job's ranks here get their own 0700
//! directory for them (`OMPI_MCA_btl_sm_backing_directory`, unless the job
//! sets it), removed with the job.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tokio::sync::mpsc;

use dpm_pmix::{Api, JobSpec, LibrarySearch, LookupDone, ModexDone, OpDone, PmixServer, Proc, Upcall, Value, PMIX_ERR_NOT_SUPPORTED};
use dpm_proto::AppSpec;

use super::{PmixAnswer, PmixEvent, PmixRequest};
use crate::tasks::Event;

/// A handle waiting for the reactor's answer.
enum Pending {
    Op(OpDone),
    Modex(ModexDone),
    /// A lookup and the asking process (named as the publisher in the answer:
    /// the name service keeps no publisher).
    Lookup(LookupDone, Proc),
}

/// The data of a publish: its string values; `pmix.*` keys are directives
/// (range, persistence, timeout), not data.
fn published(info: Vec<(String, Value)>) -> Vec<(String, String)> {
    info.into_iter()
        .filter(|(k, _)| !k.starts_with("pmix."))
        .filter_map(|(k, v)| match v {
            Value::String(s) => Some((k, s)),
            _ => None,
        })
        .collect()
}

/// See the module documentation.
pub(super) struct PmixHost {
    server: Option<PmixServer>,
    events: mpsc::UnboundedSender<Event>,
    pending: HashMap<PmixRequest, Pending>,
    next: u64,
    /// Each job's shared-memory directory, by namespace.
    shm_dirs: HashMap<String, PathBuf>,
}

/// The name the library compares node names with.
fn hostname() -> String {
    nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "localhost".into())
}

fn private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(path)
}

impl PmixHost {
    pub(super) fn new(events: mpsc::UnboundedSender<Event>) -> Self {
        PmixHost { server: None, events, pending: HashMap::new(), next: 0, shm_dirs: HashMap::new() }
    }

    /// The server, started for `app`'s Open MPI if none runs yet.
    fn server(&mut self, app: &AppSpec) -> Result<&PmixServer, String> {
        if self.server.is_none() {
            let var = |name: &str| app.env.iter().find(|(k, _)| k == name).map(|(_, v)| PathBuf::from(v));
            let search = LibrarySearch { explicit: var("DPM_PMIX_LIBRARY"), program: Some(PathBuf::from(&app.exe)), opal_prefix: var("OPAL_PREFIX") };
            let api = Api::load(&search.choose()).map_err(|e| e.to_string())?;
            let dir = std::env::temp_dir().join(format!("dpm-pmix.{}", std::process::id()));
            let (server, mut upcalls) = PmixServer::init(api, &dir).map_err(|e| e.to_string())?;
            let events = self.events.clone();
            crate::spawn_local_here(async move {
                while let Some(upcall) = upcalls.recv().await {
                    if events.send(Event::Pmix(upcall)).is_err() {
                        break;
                    }
                }
            });
            self.server = Some(server);
        }
        Ok(self.server.as_ref().expect("started above"))
    }

    /// [`super::NodeEffects::pmix_register`].
    pub(super) fn register(&mut self, mut job: JobSpec, app: &AppSpec) -> Result<Vec<Vec<(String, String)>>, String> {
        let mut extra = Vec::new();
        if !app.env.iter().any(|(k, _)| k == "OMPI_MCA_btl_sm_backing_directory" || k == "OMPI_MCA_btl_vader_backing_directory") {
            let uid = nix::unistd::getuid().as_raw();
            let dir = PathBuf::from("/dev/shm").join(format!("dpm.{uid}.{}.{}", std::process::id(), job.nspace));
            if private_dir(&dir).is_ok() {
                extra.push(("OMPI_MCA_btl_sm_backing_directory".to_string(), dir.display().to_string()));
                // Removed by forget, which the reactor calls for a failed launch too.
                self.shm_dirs.insert(job.nspace.clone(), dir);
            }
        }
        let server = self.server(app)?;
        let this = job.this_node;
        if let Some(node) = job.nodes.get_mut(this) {
            node.hostname = hostname();
        }
        job.tmpdir = server.dir().to_owned();
        job.nsdir = server.dir().join(&job.nspace);
        // The library keeps the namespace's shared store there (gds/shmem2).
        private_dir(&job.nsdir).map_err(|e| format!("{}: {e}", job.nsdir.display()))?;
        server.register_nspace(&job).map_err(|e| e.to_string())?;
        let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
        let mut envs = Vec::with_capacity(job.local_ranks().len());
        for &rank in job.local_ranks() {
            let proc_ = Proc { nspace: job.nspace.clone(), rank };
            server.register_client(&proc_, uid, gid).map_err(|e| e.to_string())?;
            let mut vars = server.setup_fork(&proc_).map_err(|e| e.to_string())?;
            vars.extend(extra.iter().cloned());
            envs.push(vars);
        }
        Ok(envs)
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
            Upcall::Fence { procs, data, done, .. } => {
                PmixEvent::Fence { procs: procs.into_iter().map(|p| (p.nspace, p.rank)).collect(), data, req: self.keep(Pending::Modex(done)) }
            }
            Upcall::DirectModex { proc_, done, .. } => PmixEvent::DirectModex { nspace: proc_.nspace, rank: proc_.rank, req: self.keep(Pending::Modex(done)) },
            Upcall::DmodexAnswer { token, status, data } => PmixEvent::DmodexAnswer { token, status, data },
            Upcall::Publish { proc_, info, done } => PmixEvent::Publish { nspace: proc_.nspace, pairs: published(info), req: self.keep(Pending::Op(done)) },
            Upcall::Unpublish { proc_, keys, done, .. } => PmixEvent::Unpublish { nspace: proc_.nspace, keys, req: self.keep(Pending::Op(done)) },
            Upcall::Lookup { proc_, keys, done, .. } => {
                let nspace = proc_.nspace.clone();
                PmixEvent::Lookup { nspace, keys, req: self.keep(Pending::Lookup(done, proc_)) }
            }
            Upcall::Connect { done, .. } | Upcall::Disconnect { done, .. } => {
                tracing::warn!("PMIx connect and disconnect are not served by dpm yet");
                done.complete(PMIX_ERR_NOT_SUPPORTED);
                return None;
            }
            Upcall::Spawn { done, .. } => {
                tracing::warn!("PMIx spawn (MPI_Comm_spawn under Open MPI) is not served by dpm yet: the spawn returns an error");
                done.complete(PMIX_ERR_NOT_SUPPORTED, "");
                return None;
            }
        })
    }

    /// [`super::NodeEffects::pmix_answer`].
    pub(super) fn answer(&mut self, req: PmixRequest, answer: PmixAnswer) {
        match (self.pending.remove(&req), answer) {
            (Some(Pending::Op(done)), PmixAnswer::Status(status) | PmixAnswer::Data(status, _) | PmixAnswer::Found(status, _)) => done.complete(status),
            (Some(Pending::Modex(done)), PmixAnswer::Data(status, data)) => done.complete(status, data),
            (Some(Pending::Modex(done)), PmixAnswer::Status(status) | PmixAnswer::Found(status, _)) => done.complete(status, Vec::new()),
            (Some(Pending::Lookup(done, asker)), PmixAnswer::Found(status, found)) => {
                done.complete(status, found.into_iter().map(|(k, v)| (asker.clone(), k, Value::String(v))).collect())
            }
            (Some(Pending::Lookup(done, _)), PmixAnswer::Status(status) | PmixAnswer::Data(status, _)) => done.complete(status, Vec::new()),
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
