//! Upcalls from the PMIx library, as owned Rust values with completion handles.
//!
//! Owns: [`Upcall`] (every argument copied out of the library's memory on
//! its thread) and the completion handles ([`OpDone`], [`ModexDone`],
//! [`LookupDone`], [`SpawnDone`], [`InfoDone`]). Threading rule: a handle may be completed
//! from any thread (the event loop's, normally); it calls the library's
//! callback exactly once — `complete` consumes it, and dropping an
//! uncompleted handle answers `PMIX_ERR_LOST_CONNECTION`-style failure
//! (`PMIX_ERROR`), so no client ever waits forever on a forgotten upcall.
use crate::ffi::*;
use crate::info::{copy_str, InfoList, Proc, Value};
use libc::c_void;

/// One request from the library. The host answers through `done`.
#[derive(Debug)]
pub enum Upcall {
    /// A client connected (after `PMIx_Init`); answer SUCCESS to accept it.
    ClientConnected {
        proc_: Proc,
        done: OpDone,
    },
    /// `PMIx_Log` of a client: `data` holds the channels and what to log
    /// (`pmix.log.stderr`, `pmix.log.stdout`: text); answer SUCCESS once taken.
    Log {
        proc_: Proc,
        data: Vec<(String, Value)>,
        done: OpDone,
    },
    /// A client called `PMIx_Finalize`.
    ClientFinalized {
        proc_: Proc,
        done: OpDone,
    },
    /// `PMIx_Abort` (MPI_Abort): `procs` empty means the caller's whole job.
    Abort {
        proc_: Proc,
        status: i32,
        message: String,
        procs: Vec<Proc>,
        done: OpDone,
    },
    /// A fence across nodes: `data` is this node's blob; answer with all nodes' blobs concatenated.
    Fence {
        procs: Vec<Proc>,
        info: Vec<(String, Value)>,
        data: Vec<u8>,
        done: ModexDone,
    },
    /// Another node's client wants `proc_`'s data (`PMIx_server_dmodex_request` there).
    DirectModex {
        proc_: Proc,
        info: Vec<(String, Value)>,
        done: ModexDone,
    },
    Publish {
        proc_: Proc,
        info: Vec<(String, Value)>,
        done: OpDone,
    },
    Lookup {
        proc_: Proc,
        keys: Vec<String>,
        info: Vec<(String, Value)>,
        done: LookupDone,
    },
    Unpublish {
        proc_: Proc,
        keys: Vec<String>,
        info: Vec<(String, Value)>,
        done: OpDone,
    },
    Spawn {
        proc_: Proc,
        job_info: Vec<(String, Value)>,
        apps: Vec<App>,
        done: SpawnDone,
    },
    Connect {
        procs: Vec<Proc>,
        info: Vec<(String, Value)>,
        done: OpDone,
    },
    Disconnect {
        procs: Vec<Proc>,
        info: Vec<(String, Value)>,
        done: OpDone,
    },
    /// `PMIx_Group_construct` or `PMIx_Group_destruct` of group `id`, once
    /// every local member has called: `members` as the library lists them
    /// (sorted), `info` the members' directives together, for a construct
    /// with this node's `PMIX_GROUP_ENDPT_DATA` (its members' data).
    Group {
        op: GroupOp,
        id: String,
        members: Vec<Proc>,
        info: Vec<(String, Value)>,
        done: InfoDone,
    },
    /// Not an upcall: the library's answer to the host's
    /// [`crate::PmixServer::dmodex_request`] with this `token`.
    DmodexAnswer {
        token: u64,
        status: i32,
        data: Vec<u8>,
    },
}

/// A group operation (`pmix_group_operation_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupOp {
    Construct,
    Destruct,
}

/// One application of a spawn request.
#[derive(Debug, Clone, PartialEq)]
pub struct App {
    pub cmd: String,
    pub argv: Vec<String>,
    pub env: Vec<String>,
    pub cwd: Option<String>,
    pub maxprocs: i32,
    pub info: Vec<(String, Value)>,
}

/// The library's callback and its argument, called at most once.
struct Pending<F: Copy> {
    cb: Option<F>,
    cbdata: *mut c_void,
}

// SAFETY: the callback is a plain C function of the library and cbdata its
// opaque token; the library expects them from any thread (it thread-shifts
// into its own progress thread before touching its state).
unsafe impl<F: Copy> Send for Pending<F> {}

impl<F: Copy> Pending<F> {
    fn new(cb: Option<F>, cbdata: *mut c_void) -> Self {
        Pending { cb, cbdata }
    }
    fn take(&mut self) -> Option<(F, *mut c_void)> {
        self.cb.take().map(|cb| (cb, self.cbdata))
    }
    /// Forgets the callback: used when the upcall is refused synchronously
    /// (the library then never expects the callback).
    fn disarm(&mut self) {
        self.cb = None;
    }
}

/// What every completion handle shares: construction from the library's
/// callback and token, disarming, and a Debug that shows whether it is pending.
macro_rules! handle_common {
    ($t:ident, $cbfunc:ty) => {
        impl $t {
            pub(crate) fn new(cb: $cbfunc, cbdata: *mut c_void) -> Self {
                $t(Pending::new(cb, cbdata))
            }
            pub(crate) fn disarm(&mut self) {
                self.0.disarm()
            }
        }
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(concat!(stringify!($t), "(pending: "))?;
                write!(f, "{})", self.0.cb.is_some())
            }
        }
    };
}

type OpCb = unsafe extern "C" fn(pmix_status_t, *mut c_void);
type ModexCb = unsafe extern "C" fn(pmix_status_t, *const libc::c_char, usize, *mut c_void, pmix_release_cbfunc_t, *mut c_void);
type LookupCb = unsafe extern "C" fn(pmix_status_t, *mut pmix_pdata_t, usize, *mut c_void);
type SpawnCb = unsafe extern "C" fn(pmix_status_t, *mut libc::c_char, *mut c_void);
type InfoCb = unsafe extern "C" fn(pmix_status_t, *mut pmix_info_t, usize, *mut c_void, pmix_release_cbfunc_t, *mut c_void);

/// Completion of an upcall answered by a status only.
pub struct OpDone(Pending<OpCb>);
handle_common!(OpDone, pmix_op_cbfunc_t);

impl OpDone {
    /// Answers with `status` (`PMIX_SUCCESS` or a `PMIX_ERR_…`).
    pub fn complete(mut self, status: i32) {
        self.fire(status)
    }
    fn fire(&mut self, status: i32) {
        if let Some((cb, cbdata)) = self.0.take() {
            // SAFETY: the library's op callback with its own token, once.
            unsafe { cb(status, cbdata) }
        }
    }
}

impl Drop for OpDone {
    fn drop(&mut self) {
        self.fire(PMIX_ERROR)
    }
}

/// Completion of a fence or direct-modex upcall: answers with bytes.
pub struct ModexDone(Pending<ModexCb>);
handle_common!(ModexDone, pmix_modex_cbfunc_t);

unsafe extern "C" fn release_bytes(cbdata: *mut c_void) {
    // SAFETY: cbdata is the Box<Vec<u8>> leaked in ModexDone::fire.
    drop(unsafe { Box::from_raw(cbdata.cast::<Vec<u8>>()) });
}

impl ModexDone {
    /// Answers with `status` and `data` (for a fence: every node's blob, concatenated).
    pub fn complete(mut self, status: i32, data: Vec<u8>) {
        self.fire(status, data)
    }
    fn fire(&mut self, status: i32, data: Vec<u8>) {
        let Some((cb, cbdata)) = self.0.take() else { return };
        let data = Box::new(data);
        let (ptr, len) = (data.as_ptr().cast::<libc::c_char>(), data.len());
        let keep = Box::into_raw(data).cast::<c_void>();
        // SAFETY: the library reads `len` bytes at `ptr` and calls
        // release_bytes(keep) once it is done with them, which frees the box.
        unsafe { cb(status, ptr, len, cbdata, Some(release_bytes), keep) }
    }
}

impl Drop for ModexDone {
    fn drop(&mut self) {
        self.fire(PMIX_ERROR, Vec::new())
    }
}

/// Completion of a lookup: answers with (publisher, key, value) triples.
pub struct LookupDone(Pending<LookupCb>);
handle_common!(LookupDone, pmix_lookup_cbfunc_t);

impl LookupDone {
    /// Answers `status` with the found data (empty with `PMIX_ERR_NOT_FOUND`).
    /// Values must be strings, integers, booleans, procs or bytes.
    pub fn complete(mut self, status: i32, found: Vec<(Proc, String, Value)>) {
        self.fire(status, found)
    }
    fn fire(&mut self, status: i32, found: Vec<(Proc, String, Value)>) {
        let Some((cb, cbdata)) = self.0.take() else { return };
        // The values are built in an InfoList (which owns their strings) and
        // copied into pdata; the library packs the pdata during the call
        // (v5.0.9 pmix_server.c lookup_cbfunc), so they may die after it.
        let mut values = InfoList::new();
        let mut pdata = Vec::with_capacity(found.len());
        for (proc_, key, value) in found {
            if values.push(&key, value).is_err() {
                continue;
            }
            let mut key_c = [0; KEY_LEN];
            copy_str(&mut key_c, &key);
            pdata.push((proc_.to_c(), key_c));
        }
        let mut raw: Vec<pmix_pdata_t> = Vec::with_capacity(pdata.len());
        let infos = values.as_mut_ptr();
        for (i, (proc_, key)) in pdata.into_iter().enumerate() {
            // SAFETY: infos holds exactly pdata.len() entries (pushed above in lockstep).
            let value = unsafe { (*infos.add(i)).value };
            raw.push(pmix_pdata_t { proc_, key, value });
        }
        let ptr = if raw.is_empty() { std::ptr::null_mut() } else { raw.as_mut_ptr() };
        // SAFETY: the library's lookup callback, once; `raw` and `values`
        // outlive the call (it copies what it keeps).
        unsafe { cb(status, ptr, raw.len(), cbdata) }
    }
}

impl Drop for LookupDone {
    fn drop(&mut self) {
        self.fire(PMIX_ERROR, Vec::new())
    }
}

/// Completion of a spawn: answers with the new job's namespace.
pub struct SpawnDone(Pending<SpawnCb>);
handle_common!(SpawnDone, pmix_spawn_cbfunc_t);

impl SpawnDone {
    /// Answers `status` and the spawned namespace (empty on failure).
    pub fn complete(mut self, status: i32, nspace: &str) {
        self.fire(status, nspace)
    }
    fn fire(&mut self, status: i32, nspace: &str) {
        let Some((cb, cbdata)) = self.0.take() else { return };
        let mut ns = [0; NSPACE_LEN];
        copy_str(&mut ns, nspace);
        // SAFETY: the library's spawn callback, once; ns outlives the call.
        unsafe { cb(status, ns.as_mut_ptr(), cbdata) }
    }
}

impl Drop for SpawnDone {
    fn drop(&mut self) {
        self.fire(PMIX_ERROR, "")
    }
}

/// Completion of an upcall answered with infos (the group upcall).
pub struct InfoDone(Pending<InfoCb>);
handle_common!(InfoDone, pmix_info_cbfunc_t);

/// An info answer kept until the library releases it: the list, and the
/// byte objects' contents copied into `malloc`'d memory, by index. The
/// library may take such contents for itself — v5.0.9's group completion
/// (`_grpcbfunc`) loads `PMIX_GROUP_ENDPT_DATA` into a buffer with
/// `PMIX_LOAD_BUFFER`, which `free`s it later and sets the info's pointer to
/// NULL — so each is freed here only if the info still points at it.
struct InfoAnswer {
    list: InfoList,
    malloced: Vec<(usize, *mut libc::c_char)>,
}

impl InfoAnswer {
    fn new(mut list: InfoList) -> Box<InfoAnswer> {
        let mut malloced = Vec::new();
        for (i, info) in list.infos_mut().iter_mut().enumerate() {
            if info.value.type_ != PMIX_BYTE_OBJECT {
                continue;
            }
            // SAFETY: a byte object's union member, as its type says.
            let bo = unsafe { info.value.data.bo };
            if bo.bytes.is_null() || bo.size == 0 {
                continue;
            }
            // SAFETY: malloc of a non-zero size; on success the copy writes
            // exactly `size` bytes from the list's own (live) buffer.
            let copy = unsafe { libc::malloc(bo.size) }.cast::<libc::c_char>();
            if copy.is_null() {
                continue;
            }
            // SAFETY: both are valid for `size` bytes and do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(bo.bytes, copy, bo.size) };
            info.value.data.bo.bytes = copy;
            malloced.push((i, copy));
        }
        Box::new(InfoAnswer { list, malloced })
    }
}

impl Drop for InfoAnswer {
    fn drop(&mut self) {
        let infos = self.list.infos_mut();
        for &(i, copy) in &self.malloced {
            // SAFETY: reading the byte object the index names (set above).
            if unsafe { infos[i].value.data.bo.bytes } == copy {
                // SAFETY: malloc'd above and not taken by the library.
                unsafe { libc::free(copy.cast()) };
            }
        }
    }
}

unsafe extern "C" fn release_infos(cbdata: *mut c_void) {
    // SAFETY: cbdata is the Box<InfoAnswer> leaked in InfoDone::fire.
    drop(unsafe { Box::from_raw(cbdata.cast::<InfoAnswer>()) });
}

impl InfoDone {
    /// Answers `status` with `infos` (a value that cannot be built — a
    /// string with a NUL byte — answers `PMIX_ERROR` without infos).
    pub fn complete(mut self, status: i32, infos: Vec<(String, Value)>) {
        self.fire(status, infos)
    }
    fn fire(&mut self, status: i32, infos: Vec<(String, Value)>) {
        let Some((cb, cbdata)) = self.0.take() else { return };
        let mut list = InfoList::new();
        let mut status = status;
        for (key, value) in infos {
            if let Err(e) = list.push(&key, value) {
                tracing::warn!("PMIx answer not sent: {e}");
                (list, status) = (InfoList::new(), PMIX_ERROR);
                break;
            }
        }
        let mut answer = InfoAnswer::new(list);
        let (ptr, len) = (answer.list.as_mut_ptr(), answer.list.len());
        let keep = Box::into_raw(answer).cast::<c_void>();
        // SAFETY: the library reads the `len` infos at `ptr` (they point
        // into the boxed answer) and calls release_infos(keep) once done
        // with them, which frees the box.
        unsafe { cb(status, ptr, len, cbdata, Some(release_infos), keep) }
    }
}

impl Drop for InfoDone {
    fn drop(&mut self) {
        self.fire(PMIX_ERROR, Vec::new())
    }
}

impl Upcall {
    /// Forgets the completion: the upcall was refused synchronously.
    pub(crate) fn disarm(&mut self) {
        match self {
            Upcall::ClientConnected { done, .. }
            | Upcall::ClientFinalized { done, .. }
            | Upcall::Abort { done, .. }
            | Upcall::Publish { done, .. }
            | Upcall::Unpublish { done, .. }
            | Upcall::Connect { done, .. }
            | Upcall::Disconnect { done, .. } => done.disarm(),
            Upcall::Fence { done, .. } | Upcall::DirectModex { done, .. } => done.disarm(),
            Upcall::Lookup { done, .. } => done.disarm(),
            Upcall::Spawn { done, .. } => done.disarm(),
            Upcall::Group { done, .. } => done.disarm(),
            Upcall::DmodexAnswer { .. } => {}
            // `log` returns nothing: its callback is its only answer, so a
            // refused one still fires it (an error, when the handle drops).
            Upcall::Log { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

    static CALLS: AtomicUsize = AtomicUsize::new(0);
    static LAST: AtomicI32 = AtomicI32::new(1);

    unsafe extern "C" fn record(status: pmix_status_t, _cbdata: *mut c_void) {
        CALLS.fetch_add(1, Ordering::SeqCst);
        LAST.store(status, Ordering::SeqCst);
    }

    #[test]
    fn op_completes_once_and_drop_answers_error() {
        let done = OpDone::new(Some(record), std::ptr::null_mut());
        done.complete(PMIX_SUCCESS);
        assert_eq!((CALLS.load(Ordering::SeqCst), LAST.load(Ordering::SeqCst)), (1, PMIX_SUCCESS));
        drop(OpDone::new(Some(record), std::ptr::null_mut()));
        assert_eq!((CALLS.load(Ordering::SeqCst), LAST.load(Ordering::SeqCst)), (2, PMIX_ERROR));
        let mut refused = OpDone::new(Some(record), std::ptr::null_mut());
        refused.disarm();
        drop(refused);
        assert_eq!(CALLS.load(Ordering::SeqCst), 2);
    }

    static INFO_CALLS: AtomicUsize = AtomicUsize::new(0);
    /// Each answer seen: its status and infos.
    type Seen = Vec<(i32, Vec<(String, Value)>)>;
    static INFO_SEEN: std::sync::Mutex<Seen> = std::sync::Mutex::new(Vec::new());

    unsafe extern "C" fn record_infos(
        status: pmix_status_t,
        info: *mut pmix_info_t,
        n: usize,
        _: *mut c_void,
        release: pmix_release_cbfunc_t,
        keep: *mut c_void,
    ) {
        INFO_CALLS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the handle passes `n` valid infos, alive until released.
        let infos = unsafe { crate::info::read_infos(info, n) };
        INFO_SEEN.lock().unwrap().push((status, infos));
        // Take the byte objects' contents as v5.0.9's group completion does
        // (PMIX_LOAD_BUFFER, later freed): the release must not free them again.
        for i in 0..n {
            // SAFETY: `n` valid infos; a byte object's member as its type says.
            unsafe {
                let value = &mut (*info.add(i)).value;
                if value.type_ == PMIX_BYTE_OBJECT && !value.data.bo.bytes.is_null() {
                    libc::free(value.data.bo.bytes.cast());
                    value.data.bo.bytes = std::ptr::null_mut();
                    value.data.bo.size = 0;
                }
            }
        }
        // SAFETY: the release callback and its token, once, as the library does.
        unsafe { release.expect("a release callback")(keep) }
    }

    #[test]
    fn info_answers_once_with_its_infos_and_drop_answers_error() {
        let members = Value::Procs(vec![Proc { nspace: "ns".into(), rank: 1 }]);
        let answer =
            vec![("pmix.grp.mbrs".to_string(), members), ("pmix.grp.ctxid".into(), Value::U64(5)), ("pmix.grp.endpt".into(), Value::Bytes(vec![1, 2]))];
        InfoDone::new(Some(record_infos), std::ptr::null_mut()).complete(PMIX_SUCCESS, answer.clone());
        drop(InfoDone::new(Some(record_infos), std::ptr::null_mut()));
        let bad = vec![("k".to_string(), Value::String("a\0b".into()))];
        InfoDone::new(Some(record_infos), std::ptr::null_mut()).complete(PMIX_SUCCESS, bad);
        assert_eq!(INFO_CALLS.load(Ordering::SeqCst), 3);
        let seen = INFO_SEEN.lock().unwrap().clone();
        assert_eq!(seen, vec![(PMIX_SUCCESS, answer), (PMIX_ERROR, vec![]), (PMIX_ERROR, vec![])], "an answer that cannot be built is an error");
    }
}
