//! The PMIx server: one per process, its upcall trampolines and the host calls.
//!
//! Owns: [`PmixServer`] (init/finalize, namespace and client registration,
//! `setup_fork`, direct-modex requests) and the `extern "C"` upcalls.
//! Threading: the library runs its own progress thread and calls the
//! upcalls there; each one copies its arguments into an [`Upcall`], hands
//! it to the host's [`UpcallSink`] (the host's own unbounded channel,
//! straight from the library's thread, or [`PmixServer::init`]'s) and
//! returns at once — it never blocks (flux-core #3536/#3858, ompi#11938).
//! The channel is unbounded because a bound would have to block or drop in
//! the upcall; its length is bounded by the clients' outstanding requests
//! (each blocks until answered).
//! The host calls (`register_*`, `setup_fork`) are made from the event
//! loop's side and wait for the library's completion callback (at most
//! [`CALL_TIMEOUT`]); they must never be made inside an upcall.
//! Not here: what the answers are (dpm's node reactor decides).
use crate::ffi::*;
use crate::info::{bytes, read_argv, read_infos, InfoList, Proc, Value};
use crate::library::Api;
use crate::upcall::*;
use crate::PmixError;
use libc::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// How long a host call waits for the library's completion callback.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Set by the first `init`, never cleared: OpenPMIx supports one
/// `PMIx_server_init` per process (not even after finalize).
static STARTED: AtomicBool = AtomicBool::new(false);
/// Where the upcalls go; `None` before init and after finalize.
static SINK: Mutex<Option<UpcallSink>> = Mutex::new(None);

/// Takes each upcall on the library's thread, without blocking: `Ok`
/// once the host has it (it answers it later, or its handle's drop
/// does), or the upcall back when no host listens any more.
pub type UpcallSink = Box<dyn Fn(Upcall) -> Result<(), Upcall> + Send>;

/// The running server. Dropping it finalizes the library: do that only
/// after every client has exited.
pub struct PmixServer {
    api: Api,
    dir: PathBuf,
    finalized: bool,
}

impl std::fmt::Debug for PmixServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmixServer").field("library", &self.api.path).field("dir", &self.dir).finish()
    }
}

impl PmixServer {
    /// Starts the library's server with its rendezvous files and sockets
    /// under `dir` (created 0700 if missing; must be private to the user).
    /// Returns the server and the upcall queue.
    pub fn init(api: Api, dir: &Path) -> Result<(PmixServer, UnboundedReceiver<Upcall>), PmixError> {
        let (tx, rx) = unbounded_channel();
        let server = Self::init_with(api, dir, channel_sink(tx))?;
        Ok((server, rx))
    }

    /// [`PmixServer::init`] with the upcalls handed to `sink` on the
    /// library's thread (a host's own event channel: no second queue).
    pub fn init_with(api: Api, dir: &Path, sink: UpcallSink) -> Result<PmixServer, PmixError> {
        if STARTED.swap(true, Ordering::SeqCst) {
            return Err(PmixError::AlreadyRunning);
        }
        private_dir(dir)?;
        *SINK.lock().unwrap_or_else(|e| e.into_inner()) = Some(sink);
        let mut module = Box::new(host_module());
        let dir_s = dir.to_string_lossy().into_owned();
        let mut infos = InfoList::new();
        infos.push("pmix.srvr.tmpdir", Value::String(dir_s.clone()))?;
        infos.push("pmix.sys.tmpdir", Value::String(dir_s))?;
        // PMIX_SERVER_SHARE_TOPOLOGY: the library exports the node's hwloc
        // topology it discovers at init (as XML and as a shared-memory
        // segment, `hwloc.sm` in `dir`) in every job's data; Open MPI's ranks
        // adopt it (`opal_hwloc_base_get_topology`) instead of each
        // discovering it again from /sys.
        infos.push("pmix.srvr.share", Value::Bool(true))?;
        // SAFETY: module and infos are valid for the call; the library copies
        // the module's function pointers (the box is leaked anyway below, so
        // it would stay valid if a version kept the pointer).
        let status = unsafe { (api.server_init)(&mut *module, infos.as_mut_ptr(), infos.len()) };
        Box::leak(module);
        if status != PMIX_SUCCESS {
            *SINK.lock().unwrap_or_else(|e| e.into_inner()) = None;
            return Err(call_error(&api, "PMIx_server_init", status));
        }
        tracing::info!(library = %api.path.display(), dir = %dir.display(), "PMIx server started");
        Ok(PmixServer { api, dir: dir.to_owned(), finalized: false })
    }

    /// The directory holding the server's rendezvous files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The library's name for a status code.
    pub fn status_name(&self, status: i32) -> String {
        self.api.status_name(status)
    }

    /// Registers a job's namespace with `nlocalprocs` = its ranks on this node.
    pub fn register_nspace(&self, job: &crate::JobSpec) -> Result<(), PmixError> {
        let mut infos = job.info_list()?;
        let ns = c_nspace(&job.nspace)?;
        let nlocal = job.local_ranks().len() as c_int;
        let (infos_ptr, ninfo) = (infos.as_mut_ptr(), infos.len());
        self.wait_op(
            "PMIx_server_register_nspace",
            |cb, cbdata| {
                // SAFETY: ns and infos outlive the wait for the completion (or are leaked on timeout, below).
                unsafe { (self.api.register_nspace)(ns.as_ptr(), nlocal, infos_ptr, ninfo, cb, cbdata) }
            },
            infos,
        )
    }

    /// Forgets a namespace (after its clients are gone).
    pub fn deregister_nspace(&self, nspace: &str) -> Result<(), PmixError> {
        let ns = c_nspace(nspace)?;
        self.wait_op(
            "PMIx_server_deregister_nspace",
            |cb, cbdata| {
                // SAFETY: ns is a valid C string; the call has no result.
                unsafe { (self.api.deregister_nspace)(ns.as_ptr(), cb, cbdata) };
                PMIX_SUCCESS
            },
            ns.clone(),
        )
    }

    /// Registers a local client before it is forked (its uid/gid may connect).
    pub fn register_client(&self, proc_: &Proc, uid: u32, gid: u32) -> Result<(), PmixError> {
        let p = Box::new(proc_.to_c());
        let pp: *const pmix_proc_t = &*p;
        self.wait_op(
            "PMIx_server_register_client",
            |cb, cbdata| {
                // SAFETY: pp is valid while `p` lives (kept until completion); no server object.
                unsafe { (self.api.register_client)(pp, uid, gid, std::ptr::null_mut(), cb, cbdata) }
            },
            p,
        )
    }

    /// Forgets a client (after it exited).
    pub fn deregister_client(&self, proc_: &Proc) -> Result<(), PmixError> {
        let p = Box::new(proc_.to_c());
        let pp: *const pmix_proc_t = &*p;
        self.wait_op(
            "PMIx_server_deregister_client",
            |cb, cbdata| {
                // SAFETY: pp is valid while `p` lives.
                unsafe { (self.api.deregister_client)(pp, cb, cbdata) };
                PMIX_SUCCESS
            },
            p,
        )
    }

    /// The environment variables (`NAME=value` split) a registered client needs.
    pub fn setup_fork(&self, proc_: &Proc) -> Result<Vec<(String, String)>, PmixError> {
        let p = proc_.to_c();
        let mut env: *mut *mut c_char = std::ptr::null_mut();
        // SAFETY: p is valid; env starts NULL and the library appends to it
        // with malloc/realloc, so it is ours to free with libc::free.
        let status = unsafe { (self.api.setup_fork)(&p, &mut env) };
        // SAFETY: env is NULL or the library's NULL-terminated argv.
        let vars = unsafe { read_argv(env) };
        free_argv(env);
        if status != PMIX_SUCCESS {
            return Err(call_error(&self.api, "PMIx_server_setup_fork", status));
        }
        Ok(vars.into_iter().filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))).collect())
    }

    /// Asks the library for a local client's data on behalf of another node
    /// (`PMIx_server_dmodex_request`); the answer comes on the upcall queue
    /// as [`Upcall::DmodexAnswer`] with `token` (once the client has
    /// committed it, if it has not yet).
    pub fn dmodex_request(&self, proc_: &Proc, token: u64) -> Result<(), PmixError> {
        let p = proc_.to_c();
        let cbdata = Box::into_raw(Box::new(token)).cast::<c_void>();
        // SAFETY: p is valid for the call (the library copies it); cbdata is
        // the boxed token that dmodex_answer frees once.
        let status = unsafe { (self.api.dmodex_request)(&p, Some(dmodex_answer), cbdata) };
        if status != PMIX_SUCCESS {
            // SAFETY: no callback follows a refused request: free the box made above.
            drop(unsafe { Box::from_raw(cbdata.cast::<u64>()) });
            return Err(call_error(&self.api, "PMIx_server_dmodex_request", status));
        }
        Ok(())
    }

    /// Finalizes the library; only after every client has exited.
    pub fn finalize(mut self) -> Result<(), PmixError> {
        self.finalize_once()
    }

    fn finalize_once(&mut self) -> Result<(), PmixError> {
        if std::mem::replace(&mut self.finalized, true) {
            return Ok(());
        }
        // SAFETY: the server was initialized by this object.
        let status = unsafe { (self.api.server_finalize)() };
        *SINK.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if status != PMIX_SUCCESS {
            return Err(call_error(&self.api, "PMIx_server_finalize", status));
        }
        Ok(())
    }

    /// Runs a non-blocking call and waits for its op callback. `keep` holds
    /// what the call points into; on timeout it is leaked with the token, as
    /// the library may still use them.
    fn wait_op<K>(&self, call: &'static str, start: impl FnOnce(pmix_op_cbfunc_t, *mut c_void) -> pmix_status_t, keep: K) -> Result<(), PmixError> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<pmix_status_t>(1);
        let token = Box::into_raw(Box::new(tx)).cast::<c_void>();
        let status = start(Some(op_signal), token);
        let status = match status {
            PMIX_SUCCESS => match rx.recv_timeout(CALL_TIMEOUT) {
                Ok(status) => status,
                Err(_) => {
                    std::mem::forget(keep);
                    return Err(PmixError::Timeout { call, secs: CALL_TIMEOUT.as_secs() });
                }
            },
            other => {
                // No callback follows a synchronous answer: free the token.
                // SAFETY: token is the box made above, not handed out any more.
                drop(unsafe { Box::from_raw(token.cast::<std::sync::mpsc::SyncSender<pmix_status_t>>()) });
                if other == PMIX_OPERATION_SUCCEEDED {
                    PMIX_SUCCESS
                } else {
                    other
                }
            }
        };
        drop(keep);
        if status == PMIX_SUCCESS {
            Ok(())
        } else {
            Err(call_error(&self.api, call, status))
        }
    }
}

impl Drop for PmixServer {
    fn drop(&mut self) {
        if let Err(e) = self.finalize_once() {
            tracing::warn!("{e}");
        }
    }
}

unsafe extern "C" fn dmodex_answer(status: pmix_status_t, data: *mut c_char, size: usize, cbdata: *mut c_void) {
    // SAFETY: cbdata is the boxed token of dmodex_request, called back once.
    let token = *unsafe { Box::from_raw(cbdata.cast::<u64>()) };
    let data = if data.is_null() || size == 0 {
        Vec::new()
    } else {
        // SAFETY: the library passes `size` readable bytes at `data` for the call.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) }.to_vec()
    };
    deliver(Upcall::DmodexAnswer { token, status, data });
}

unsafe extern "C" fn op_signal(status: pmix_status_t, cbdata: *mut c_void) {
    // SAFETY: cbdata is the boxed sender made by wait_op, given to one call
    // whose callback runs once.
    let tx = unsafe { Box::from_raw(cbdata.cast::<std::sync::mpsc::SyncSender<pmix_status_t>>()) };
    let _ = tx.try_send(status);
}

fn call_error(api: &Api, call: &'static str, status: pmix_status_t) -> PmixError {
    PmixError::Call { call, status, name: api.status_name(status) }
}

fn c_nspace(nspace: &str) -> Result<std::ffi::CString, PmixError> {
    if nspace.is_empty() || nspace.len() >= NSPACE_LEN {
        return Err(PmixError::Invalid { what: "namespace", detail: format!("{nspace:?} must be 1..255 bytes") });
    }
    std::ffi::CString::new(nspace).map_err(|e| PmixError::Invalid { what: "namespace", detail: e.to_string() })
}

fn free_argv(argv: *mut *mut c_char) {
    if argv.is_null() {
        return;
    }
    let mut i = 0;
    // SAFETY: a NULL-terminated malloc'd array of malloc'd strings.
    unsafe {
        while !(*argv.add(i)).is_null() {
            libc::free((*argv.add(i)).cast());
            i += 1;
        }
        libc::free(argv.cast());
    }
}

/// The upcalls dpm offers the library (NULL: not supported).
pub(crate) fn host_module() -> pmix_server_module_t {
    pmix_server_module_t {
        client_connected: Some(client_connected),
        client_finalized: Some(client_finalized),
        abort: Some(abort),
        fence_nb: Some(fence_nb),
        direct_modex: Some(direct_modex),
        publish: Some(publish),
        lookup: Some(lookup),
        unpublish: Some(unpublish),
        spawn: Some(spawn),
        connect: Some(connect),
        disconnect: Some(disconnect),
        _unsupported: [std::ptr::null(); 6],
        log: Some(log),
        _allocate: std::ptr::null(),
        job_control: Some(job_control),
        _unsupported_v3: [std::ptr::null(); 5],
        group: Some(crate::group::group),
        _unused: [std::ptr::null(); MODULE_SLOTS - 26],
    }
}

/// Creates `dir` (0700) or checks an existing one is a directory owned by us and not group/world accessible.
fn private_dir(dir: &Path) -> Result<(), PmixError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let err = |source| PmixError::TmpDir { path: dir.to_owned(), source };
    if !dir.exists() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err)?;
    }
    let meta = std::fs::metadata(dir).map_err(err)?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        let detail = std::io::Error::other("not a directory private to this user (want 0700, owned by us)");
        return Err(err(detail));
    }
    Ok(())
}

/// Hands an upcall to the host. Returns PMIX_SUCCESS (the host will
/// complete it) or, with no host listening, refuses it synchronously.
fn deliver(upcall: Upcall) -> pmix_status_t {
    match send(upcall) {
        Ok(()) => PMIX_SUCCESS,
        Err(mut upcall) => {
            upcall.disarm();
            PMIX_ERR_NOT_SUPPORTED
        }
    }
}

/// Hands an upcall to the host, or gives it back when no host listens.
pub(crate) fn send(upcall: Upcall) -> Result<(), Upcall> {
    let guard = SINK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(sink) = guard.as_ref() else { return Err(upcall) };
    sink(upcall)
}

/// A sink that queues the upcalls on `tx`.
fn channel_sink(tx: UnboundedSender<Upcall>) -> UpcallSink {
    Box::new(move |upcall| tx.send(upcall).map_err(|tokio::sync::mpsc::error::SendError(upcall)| upcall))
}

/// # Safety (all upcalls): the library passes valid arrays of the given
/// lengths and NUL-terminated strings, alive for the call; we copy them.
pub(crate) unsafe fn procs(ptr: *const pmix_proc_t, n: usize) -> Vec<Proc> {
    // SAFETY: see above.
    (0..n).map(|i| unsafe { Proc::from_c(ptr.add(i)) }).collect()
}

pub(crate) unsafe fn cstr(ptr: *const c_char) -> String {
    // SAFETY: see above.
    if ptr.is_null() {
        String::new()
    } else {
        unsafe { std::ffi::CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
    }
}

unsafe extern "C" fn client_connected(p: *const pmix_proc_t, _obj: *mut c_void, cb: pmix_op_cbfunc_t, cbdata: *mut c_void) -> pmix_status_t {
    // SAFETY: valid proc from the library.
    deliver(Upcall::ClientConnected { proc_: unsafe { Proc::from_c(p) }, done: OpDone::new(cb, cbdata) })
}

unsafe extern "C" fn client_finalized(p: *const pmix_proc_t, _obj: *mut c_void, cb: pmix_op_cbfunc_t, cbdata: *mut c_void) -> pmix_status_t {
    // SAFETY: valid proc from the library.
    deliver(Upcall::ClientFinalized { proc_: unsafe { Proc::from_c(p) }, done: OpDone::new(cb, cbdata) })
}

unsafe extern "C" fn abort(
    p: *const pmix_proc_t,
    _obj: *mut c_void,
    status: c_int,
    msg: *const c_char,
    targets: *mut pmix_proc_t,
    n: usize,
    cb: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    // SAFETY: valid arguments from the library, copied here.
    let (proc_, message, procs) = unsafe { (Proc::from_c(p), cstr(msg), procs(targets, n)) };
    deliver(Upcall::Abort { proc_, status, message, procs, done: OpDone::new(cb, cbdata) })
}

unsafe extern "C" fn fence_nb(
    ps: *const pmix_proc_t,
    np: usize,
    info: *const pmix_info_t,
    ni: usize,
    data: *mut c_char,
    nd: usize,
    cb: pmix_modex_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    // SAFETY: valid arguments from the library, copied here.
    let (procs, info, data) = unsafe { (procs(ps, np), read_infos(info, ni), bytes(data, nd)) };
    deliver(Upcall::Fence { procs, info, data, done: ModexDone::new(cb, cbdata) })
}

unsafe extern "C" fn direct_modex(p: *const pmix_proc_t, info: *const pmix_info_t, ni: usize, cb: pmix_modex_cbfunc_t, cbdata: *mut c_void) -> pmix_status_t {
    // SAFETY: valid arguments from the library, copied here.
    let (proc_, info) = unsafe { (Proc::from_c(p), read_infos(info, ni)) };
    deliver(Upcall::DirectModex { proc_, info, done: ModexDone::new(cb, cbdata) })
}

unsafe extern "C" fn publish(p: *const pmix_proc_t, info: *const pmix_info_t, ni: usize, cb: pmix_op_cbfunc_t, cbdata: *mut c_void) -> pmix_status_t {
    // SAFETY: valid arguments from the library, copied here.
    let (proc_, info) = unsafe { (Proc::from_c(p), read_infos(info, ni)) };
    deliver(Upcall::Publish { proc_, info, done: OpDone::new(cb, cbdata) })
}

unsafe extern "C" fn lookup(
    p: *const pmix_proc_t,
    keys: *mut *mut c_char,
    info: *const pmix_info_t,
    ni: usize,
    cb: pmix_lookup_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    // SAFETY: valid arguments from the library, copied here.
    let (proc_, keys, info) = unsafe { (Proc::from_c(p), read_argv(keys), read_infos(info, ni)) };
    deliver(Upcall::Lookup { proc_, keys, info, done: LookupDone::new(cb, cbdata) })
}

unsafe extern "C" fn unpublish(
    p: *const pmix_proc_t,
    keys: *mut *mut c_char,
    info: *const pmix_info_t,
    ni: usize,
    cb: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    // SAFETY: valid arguments from the library, copied here.
    let (proc_, keys, info) = unsafe { (Proc::from_c(p), read_argv(keys), read_infos(info, ni)) };
    deliver(Upcall::Unpublish { proc_, keys, info, done: OpDone::new(cb, cbdata) })
}

unsafe extern "C" fn spawn(
    p: *const pmix_proc_t,
    job_info: *const pmix_info_t,
    ni: usize,
    apps: *const pmix_app_t,
    na: usize,
    cb: pmix_spawn_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    // SAFETY: valid arguments from the library, copied here.
    let (proc_, job_info) = unsafe { (Proc::from_c(p), read_infos(job_info, ni)) };
    let apps = (0..na)
        .map(|i| {
            // SAFETY: apps holds na valid pmix_app_t.
            let a = unsafe { &*apps.add(i) };
            // SAFETY: the app's strings and arrays are valid or NULL.
            unsafe {
                App {
                    cmd: cstr(a.cmd),
                    argv: read_argv(a.argv),
                    env: read_argv(a.env),
                    cwd: (!a.cwd.is_null()).then(|| cstr(a.cwd)),
                    maxprocs: a.maxprocs,
                    info: read_infos(a.info, a.ninfo),
                }
            }
        })
        .collect();
    deliver(Upcall::Spawn { proc_, job_info, apps, done: SpawnDone::new(cb, cbdata) })
}

unsafe extern "C" fn connect(
    ps: *const pmix_proc_t,
    np: usize,
    info: *const pmix_info_t,
    ni: usize,
    cb: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    // SAFETY: valid arguments from the library, copied here.
    let (procs, info) = unsafe { (procs(ps, np), read_infos(info, ni)) };
    deliver(Upcall::Connect { procs, info, done: OpDone::new(cb, cbdata) })
}

unsafe extern "C" fn disconnect(
    ps: *const pmix_proc_t,
    np: usize,
    info: *const pmix_info_t,
    ni: usize,
    cb: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    // SAFETY: valid arguments from the library, copied here.
    let (procs, info) = unsafe { (procs(ps, np), read_infos(info, ni)) };
    deliver(Upcall::Disconnect { procs, info, done: OpDone::new(cb, cbdata) })
}

unsafe extern "C" fn log(
    p: *const pmix_proc_t,
    data: *const pmix_info_t,
    nd: usize,
    _directives: *const pmix_info_t,
    _ndirs: usize,
    cb: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) {
    // SAFETY: valid arguments from the library, copied here.
    let (proc_, data) = unsafe { (Proc::from_c(p), read_infos(data, nd)) };
    // A refused delivery has answered through the handle's drop already.
    let _ = deliver(Upcall::Log { proc_, data, done: OpDone::new(cb, cbdata) });
}

/// `PMIx_Job_control` of a client, as far as the library passes it on.
/// The library serves a client's cleanup requests itself
/// (`PMIX_REGISTER_CLEANUP`, `…_CLEANUP_DIR`, `PMIX_CLEANUP_*`: it removes
/// the paths when the client is deregistered or its connection is lost)
/// and answers them without calling the host — but only when the host has
/// this upcall: without one it refuses every job-control request, cleanup
/// included. Open MPI registers each btl/sm segment it creates
/// (`sm_segment.<host>.<uid>.<jobid>.<n>`, 16 MiB) this way, for the
/// resource manager to remove; prterun does, and dpm's node left the ones
/// outside its per-job directory behind (a job naming its own
/// `btl_sm_backing_directory`). What reaches this function (kill, signal,
/// checkpoint…) dpm does not serve: refused at once, the callback never
/// called (the library then frees the request itself).
unsafe extern "C" fn job_control(
    p: *const pmix_proc_t,
    _targets: *const pmix_proc_t,
    _nt: usize,
    directives: *const pmix_info_t,
    nd: usize,
    _cb: pmix_info_cbfunc_t,
    _cbdata: *mut c_void,
) -> pmix_status_t {
    // SAFETY: valid arguments from the library, copied here.
    let (proc_, directives) = unsafe { (Proc::from_c(p), read_infos(directives, nd)) };
    let keys: Vec<&str> = directives.iter().map(|(k, _)| k.as_str()).collect();
    tracing::debug!(nspace = %proc_.nspace, rank = proc_.rank, ?keys, "PMIx_Job_control refused: not supported");
    PMIX_ERR_NOT_SUPPORTED
}

#[cfg(test)]
mod tests {
    use super::*;

    static ANSWERED: AtomicBool = AtomicBool::new(false);

    unsafe extern "C" fn answered(_: pmix_status_t, _: *mut pmix_info_t, _: usize, _: *mut c_void, _: pmix_release_cbfunc_t, _: *mut c_void) {
        ANSWERED.store(true, Ordering::SeqCst);
    }

    #[test]
    fn job_control_is_offered_and_refuses_what_the_library_passes_on() {
        let job_control = host_module().job_control.expect("offered: else the library refuses cleanup requests too");
        let requestor = Proc { nspace: "kvs_1_0_0".into(), rank: 0 }.to_c();
        let mut directives = InfoList::new();
        directives.push("pmix.jctrl.kill", Value::Bool(true)).unwrap();
        // SAFETY: valid proc and infos for the call; no targets.
        let status = unsafe { job_control(&requestor, std::ptr::null(), 0, directives.as_mut_ptr(), directives.len(), Some(answered), std::ptr::null_mut()) };
        assert_eq!(status, PMIX_ERR_NOT_SUPPORTED);
        assert!(!ANSWERED.load(Ordering::SeqCst), "a refused request is not answered through the callback too");
    }
}
