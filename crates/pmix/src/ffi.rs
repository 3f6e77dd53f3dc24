//! The C interface of OpenPMIx's server library, declared by hand.
//!
//! Owns: the few types, constants and function signatures dpm uses, each
//! written from OpenPMIx 5.0.9's `include/pmix_common.h.in` and
//! `include/pmix_server.h` (tag v5.0.9; the wheel bundles 5.0.11, same ABI
//! series) and checked below with size/offset asserts against the layouts
//! derived from those headers for x86_64/aarch64 Linux (LP64).
//! Not here: loading the library (`library.rs`) and any safe wrapper.
#![allow(non_camel_case_types)]

use libc::{c_char, c_int, c_void, gid_t, size_t, uid_t};
use std::mem::{offset_of, size_of};

pub type pmix_status_t = c_int;
pub type pmix_rank_t = u32;
pub type pmix_data_type_t = u16;
pub type pmix_info_directives_t = u32;

/// `PMIX_MAX_NSLEN` (255) + 1.
pub const NSPACE_LEN: usize = 256;
/// `PMIX_MAX_KEYLEN` (511) + 1.
pub const KEY_LEN: usize = 512;

pub const PMIX_RANK_UNDEF: pmix_rank_t = u32::MAX;
pub const PMIX_RANK_WILDCARD: pmix_rank_t = u32::MAX - 1;

// Status codes (pmix_common.h.in, "PMIx ERROR CONSTANTS").
pub const PMIX_SUCCESS: pmix_status_t = 0;
pub const PMIX_ERROR: pmix_status_t = -1;
pub const PMIX_ERR_TIMEOUT: pmix_status_t = -24;
pub const PMIX_ERR_BAD_PARAM: pmix_status_t = -27;
pub const PMIX_ERR_INIT: pmix_status_t = -31;
pub const PMIX_ERR_NOT_FOUND: pmix_status_t = -46;
pub const PMIX_ERR_NOT_SUPPORTED: pmix_status_t = -47;
pub const PMIX_ERR_LOST_CONNECTION: pmix_status_t = -61;
/// Returned by a non-blocking call that completed at once: no callback follows.
pub const PMIX_OPERATION_SUCCEEDED: pmix_status_t = -157;

// Data types (pmix_common.h.in, "PMIx DATA TYPES").
pub const PMIX_UNDEF: pmix_data_type_t = 0;
pub const PMIX_BOOL: pmix_data_type_t = 1;
pub const PMIX_STRING: pmix_data_type_t = 3;
pub const PMIX_SIZE: pmix_data_type_t = 4;
pub const PMIX_INT: pmix_data_type_t = 6;
pub const PMIX_INT32: pmix_data_type_t = 9;
pub const PMIX_INT64: pmix_data_type_t = 10;
pub const PMIX_UINT: pmix_data_type_t = 11;
pub const PMIX_UINT16: pmix_data_type_t = 13;
pub const PMIX_UINT32: pmix_data_type_t = 14;
pub const PMIX_UINT64: pmix_data_type_t = 15;
pub const PMIX_STATUS: pmix_data_type_t = 20;
pub const PMIX_PROC: pmix_data_type_t = 22;
pub const PMIX_INFO: pmix_data_type_t = 24;
pub const PMIX_BYTE_OBJECT: pmix_data_type_t = 27;
pub const PMIX_DATA_ARRAY: pmix_data_type_t = 39;
pub const PMIX_PROC_RANK: pmix_data_type_t = 40;

/// `pmix_proc_t`: a namespace (NUL-padded) and a rank.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_proc_t {
    pub nspace: [c_char; NSPACE_LEN],
    pub rank: pmix_rank_t,
}

/// `pmix_byte_object_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_byte_object_t {
    pub bytes: *mut c_char,
    pub size: size_t,
}

/// `pmix_data_array_t`.
#[repr(C)]
pub struct pmix_data_array_t {
    pub type_: pmix_data_type_t,
    pub size: size_t,
    pub array: *mut c_void,
}

/// The members of `pmix_value_t`'s union that dpm reads or writes. The
/// largest member in the header is `pmix_envar_t` (two pointers and a char:
/// 24 bytes), which `_envar` stands for, so the size matches.
#[repr(C)]
#[derive(Clone, Copy)]
pub union pmix_value_data {
    pub flag: bool,
    pub string: *mut c_char,
    pub size: size_t,
    pub integer: c_int,
    pub int32: i32,
    pub int64: i64,
    pub uint: u32,
    pub uint16: u16,
    pub uint32: u32,
    pub uint64: u64,
    pub status: pmix_status_t,
    pub rank: pmix_rank_t,
    pub proc_: *mut pmix_proc_t,
    pub bo: pmix_byte_object_t,
    pub darray: *mut pmix_data_array_t,
    pub _envar: [u64; 3],
}

/// `pmix_value_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_value_t {
    pub type_: pmix_data_type_t,
    pub data: pmix_value_data,
}

/// `pmix_info_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_info_t {
    pub key: [c_char; KEY_LEN],
    pub flags: pmix_info_directives_t,
    pub value: pmix_value_t,
}

/// `pmix_pdata_t` (lookup results).
#[repr(C)]
pub struct pmix_pdata_t {
    pub proc_: pmix_proc_t,
    pub key: [c_char; KEY_LEN],
    pub value: pmix_value_t,
}

/// `pmix_app_t` (spawn requests).
#[repr(C)]
pub struct pmix_app_t {
    pub cmd: *mut c_char,
    pub argv: *mut *mut c_char,
    pub env: *mut *mut c_char,
    pub cwd: *mut c_char,
    pub maxprocs: c_int,
    pub info: *mut pmix_info_t,
    pub ninfo: size_t,
}

// Callbacks the host calls back (pmix_common.h.in / pmix_server.h).
pub type pmix_op_cbfunc_t = Option<unsafe extern "C" fn(pmix_status_t, *mut c_void)>;
pub type pmix_release_cbfunc_t = Option<unsafe extern "C" fn(*mut c_void)>;
pub type pmix_modex_cbfunc_t = Option<unsafe extern "C" fn(pmix_status_t, *const c_char, size_t, *mut c_void, pmix_release_cbfunc_t, *mut c_void)>;
pub type pmix_lookup_cbfunc_t = Option<unsafe extern "C" fn(pmix_status_t, *mut pmix_pdata_t, size_t, *mut c_void)>;
/// The header's `pmix_nspace_t` parameter is an array, passed as a pointer.
pub type pmix_spawn_cbfunc_t = Option<unsafe extern "C" fn(pmix_status_t, *mut c_char, *mut c_void)>;

// Upcalls (`pmix_server_*_fn_t`), the host's side of `pmix_server_module_t`.
pub type ClientFn = unsafe extern "C" fn(*const pmix_proc_t, *mut c_void, pmix_op_cbfunc_t, *mut c_void) -> pmix_status_t;
pub type AbortFn =
    unsafe extern "C" fn(*const pmix_proc_t, *mut c_void, c_int, *const c_char, *mut pmix_proc_t, size_t, pmix_op_cbfunc_t, *mut c_void) -> pmix_status_t;
pub type FenceFn =
    unsafe extern "C" fn(*const pmix_proc_t, size_t, *const pmix_info_t, size_t, *mut c_char, size_t, pmix_modex_cbfunc_t, *mut c_void) -> pmix_status_t;
pub type DmodexFn = unsafe extern "C" fn(*const pmix_proc_t, *const pmix_info_t, size_t, pmix_modex_cbfunc_t, *mut c_void) -> pmix_status_t;
pub type PublishFn = unsafe extern "C" fn(*const pmix_proc_t, *const pmix_info_t, size_t, pmix_op_cbfunc_t, *mut c_void) -> pmix_status_t;
pub type LookupFn = unsafe extern "C" fn(*const pmix_proc_t, *mut *mut c_char, *const pmix_info_t, size_t, pmix_lookup_cbfunc_t, *mut c_void) -> pmix_status_t;
pub type UnpublishFn = unsafe extern "C" fn(*const pmix_proc_t, *mut *mut c_char, *const pmix_info_t, size_t, pmix_op_cbfunc_t, *mut c_void) -> pmix_status_t;
pub type SpawnFn =
    unsafe extern "C" fn(*const pmix_proc_t, *const pmix_info_t, size_t, *const pmix_app_t, size_t, pmix_spawn_cbfunc_t, *mut c_void) -> pmix_status_t;
pub type ConnectFn = unsafe extern "C" fn(*const pmix_proc_t, size_t, *const pmix_info_t, size_t, pmix_op_cbfunc_t, *mut c_void) -> pmix_status_t;
/// `pmix_server_log_fn_t` (v2): returns nothing; the callback says done.
pub type LogFn = unsafe extern "C" fn(*const pmix_proc_t, *const pmix_info_t, size_t, *const pmix_info_t, size_t, pmix_op_cbfunc_t, *mut c_void);
/// `pmix_info_cbfunc_t`: a status, result infos, and a release callback for them.
pub type pmix_info_cbfunc_t = Option<unsafe extern "C" fn(pmix_status_t, *mut pmix_info_t, size_t, *mut c_void, pmix_release_cbfunc_t, *mut c_void)>;
/// `pmix_server_grp_fn_t` (v4): the operation (`pmix_group_operation_t`:
/// [`PMIX_GROUP_CONSTRUCT`], [`PMIX_GROUP_DESTRUCT`]), the group's id, its
/// members and the directives; answered through an info callback.
pub type GroupFn =
    unsafe extern "C" fn(c_int, *mut c_char, *const pmix_proc_t, size_t, *const pmix_info_t, size_t, pmix_info_cbfunc_t, *mut c_void) -> pmix_status_t;
/// `pmix_group_operation_t` (an enum: an int in the C ABI).
pub const PMIX_GROUP_CONSTRUCT: c_int = 0;
pub const PMIX_GROUP_DESTRUCT: c_int = 1;
/// `pmix_server_job_control_fn_t` (v2): requestor, targets, directives.
pub type JobControlFn =
    unsafe extern "C" fn(*const pmix_proc_t, *const pmix_proc_t, size_t, *const pmix_info_t, size_t, pmix_info_cbfunc_t, *mut c_void) -> pmix_status_t;

/// `pmix_server_module_t`: 30 function pointers in v5.0.9 (v6 appends
/// more). The library reads only as far as its own version knows, so the
/// tail is zero padding (NULL = "not supported") up to 64 slots, so a newer
/// library never reads past the struct (seen on this machine: a host built
/// on 4.2.2's struct runs on the 5.0.11 library only when zero-padded).
#[repr(C)]
pub struct pmix_server_module_t {
    pub client_connected: Option<ClientFn>,
    pub client_finalized: Option<ClientFn>,
    pub abort: Option<AbortFn>,
    pub fence_nb: Option<FenceFn>,
    pub direct_modex: Option<DmodexFn>,
    pub publish: Option<PublishFn>,
    pub lookup: Option<LookupFn>,
    pub unpublish: Option<UnpublishFn>,
    pub spawn: Option<SpawnFn>,
    pub connect: Option<ConnectFn>,
    pub disconnect: Option<ConnectFn>,
    /// register_events, deregister_events, listener (v1); notify_event,
    /// query, tool_connected (v2): left NULL.
    pub _unsupported: [*const c_void; 6],
    /// Slot 17 (v2): `PMIx_Log` of a client — Open MPI's help and error
    /// messages (`opal_show_help`) come this way, not on the rank's stderr.
    pub log: Option<LogFn>,
    /// Slot 18 (v2): allocate, left NULL.
    pub _allocate: *const c_void,
    /// Slot 19 (v2): `PMIx_Job_control` of a client. Its mere presence
    /// matters: only then does the library keep a client's cleanup
    /// requests (`PMIX_REGISTER_CLEANUP`: Open MPI's btl/sm segments).
    pub job_control: Option<JobControlFn>,
    /// Slots 20-24: monitor (v2); get_credential, validate_credential,
    /// iof_pull, push_stdin (v3): left NULL.
    pub _unsupported_v3: [*const c_void; 5],
    /// Slot 25 (v4): `PMIx_Group_construct`/`destruct` once every local
    /// member has called (Open MPI's `MPI_Comm_create_from_group`,
    /// `MPI_Intercomm_create_from_groups`, sessions).
    pub group: Option<GroupFn>,
    /// fabric, client_connected2 (v4), session_control (v5): left NULL.
    pub _unused: [*const c_void; MODULE_SLOTS - 26],
}
pub const MODULE_SLOTS: usize = 64;

// Server API (pmix_server.h) and helpers (pmix.h), resolved with dlsym.
pub type ServerInitFn = unsafe extern "C" fn(*mut pmix_server_module_t, *mut pmix_info_t, size_t) -> pmix_status_t;
pub type ServerFinalizeFn = unsafe extern "C" fn() -> pmix_status_t;
pub type RegisterNspaceFn = unsafe extern "C" fn(*const c_char, c_int, *mut pmix_info_t, size_t, pmix_op_cbfunc_t, *mut c_void) -> pmix_status_t;
pub type DeregisterNspaceFn = unsafe extern "C" fn(*const c_char, pmix_op_cbfunc_t, *mut c_void);
pub type RegisterClientFn = unsafe extern "C" fn(*const pmix_proc_t, uid_t, gid_t, *mut c_void, pmix_op_cbfunc_t, *mut c_void) -> pmix_status_t;
pub type DeregisterClientFn = unsafe extern "C" fn(*const pmix_proc_t, pmix_op_cbfunc_t, *mut c_void);
pub type SetupForkFn = unsafe extern "C" fn(*const pmix_proc_t, *mut *mut *mut c_char) -> pmix_status_t;
pub type DmodexResponseFn = Option<unsafe extern "C" fn(pmix_status_t, *mut c_char, size_t, *mut c_void)>;
pub type DmodexRequestFn = unsafe extern "C" fn(*const pmix_proc_t, DmodexResponseFn, *mut c_void) -> pmix_status_t;
pub type GenerateFn = unsafe extern "C" fn(*const c_char, *mut *mut c_char) -> pmix_status_t;
pub type ErrorStringFn = unsafe extern "C" fn(pmix_status_t) -> *const c_char;

// Layouts derived from the v5.0.9 headers (LP64): any drift fails the build.
const _: () = {
    assert!(size_of::<pmix_proc_t>() == 260);
    assert!(size_of::<pmix_byte_object_t>() == 16);
    assert!(size_of::<pmix_data_array_t>() == 24);
    assert!(size_of::<pmix_value_data>() == 24);
    assert!(size_of::<pmix_value_t>() == 32);
    assert!(offset_of!(pmix_value_t, data) == 8);
    assert!(offset_of!(pmix_info_t, flags) == 512);
    assert!(offset_of!(pmix_info_t, value) == 520);
    assert!(size_of::<pmix_info_t>() == 552);
    assert!(offset_of!(pmix_pdata_t, key) == 260);
    assert!(offset_of!(pmix_pdata_t, value) == 776);
    assert!(size_of::<pmix_pdata_t>() == 808);
    assert!(offset_of!(pmix_app_t, maxprocs) == 32);
    assert!(offset_of!(pmix_app_t, info) == 40);
    assert!(size_of::<pmix_app_t>() == 56);
    assert!(offset_of!(pmix_server_module_t, spawn) == 8 * 8);
    assert!(offset_of!(pmix_server_module_t, disconnect) == 10 * 8);
    assert!(offset_of!(pmix_server_module_t, log) == 17 * 8);
    assert!(offset_of!(pmix_server_module_t, job_control) == 19 * 8);
    assert!(offset_of!(pmix_server_module_t, group) == 25 * 8);
    assert!(size_of::<pmix_server_module_t>() == MODULE_SLOTS * 8);
};
