//! The `group` upcall (slot 25, PMIx v4): `PMIx_Group_construct` and
//! `PMIx_Group_destruct` of the node's clients, handed to the host as
//! [`Upcall::Group`] once every local member has called; the host answers
//! with infos ([`crate::InfoDone`]). What the answer holds and when: dpm's
//! node reactor (`node/pmix_front/group.rs`).
use crate::ffi::*;
use crate::info::{read_infos, Value};
use crate::server::{cstr, procs, send};
use crate::upcall::{GroupOp, InfoDone, Upcall};
use libc::{c_char, c_int, c_void};

/// `PMIx_Group_construct`/`PMIx_Group_destruct`: the library calls once
/// every local member has (v5.0.9 `pmix_server_grpconstruct`); the host
/// answers with the group's membership, its context id when asked
/// (`PMIX_GROUP_ASSIGN_CONTEXT_ID`) and every node's `PMIX_GROUP_ENDPT_DATA`.
pub(crate) unsafe extern "C" fn group(
    op: c_int,
    grp: *mut c_char,
    ps: *const pmix_proc_t,
    np: usize,
    directives: *const pmix_info_t,
    nd: usize,
    cb: pmix_info_cbfunc_t,
    cbdata: *mut c_void,
) -> pmix_status_t {
    // Never refused synchronously: v5.0.9's `pmix_server_grpconstruct`
    // then answers only the member whose call completed the local set and
    // drops the others' requests unanswered (they wait for ever — the hang
    // of a host without this upcall). Refusals go through the callback
    // (the handle's drop answers `PMIX_ERROR`), which answers every member.
    let done = InfoDone::new(cb, cbdata);
    let op = match op {
        PMIX_GROUP_CONSTRUCT => GroupOp::Construct,
        PMIX_GROUP_DESTRUCT => GroupOp::Destruct,
        _ => return PMIX_SUCCESS,
    };
    // SAFETY: valid arguments from the library, copied here.
    let (id, members, info) = unsafe { (cstr(grp), procs(ps, np), read_infos(directives, nd)) };
    if complete_here(op, &info) {
        // As PRRTE answers: done, synchronously. An answer through the
        // callback would be wrong here: for a destruct, v5.0.9 then calls
        // this upcall a second time with the same tracker (its local branch
        // falls through to the global one), and completing both frees the
        // tracker twice and wedges the library's progress thread.
        let mut done = done;
        done.disarm();
        return PMIX_OPERATION_SUCCEEDED;
    }
    // No host listening: the upcall (with its handle) is dropped, answering an error.
    let _ = send(Upcall::Group { op, id, members, info, done });
    PMIX_SUCCESS
}

/// A flag directive is set: true, or present without a value (`PMIX_INFO_TRUE`).
fn flag(info: &[(String, Value)], key: &str) -> bool {
    info.iter().any(|(k, v)| k == key && matches!(v, Value::Bool(true) | Value::Other(PMIX_UNDEF)))
}

/// PRRTE's rule (`pmix_server_group_fn`): a destruct, and a construct that
/// asks neither for a context id (`PMIX_GROUP_ASSIGN_CONTEXT_ID`) nor for a
/// barrier (`PMIX_EMBED_BARRIER`) or that the library marks local
/// (`PMIX_GROUP_LOCAL_ONLY`), is complete once the local members called.
fn complete_here(op: GroupOp, info: &[(String, Value)]) -> bool {
    op == GroupOp::Destruct || flag(info, "pmix.grp.lcl") || !(flag(info, "pmix.grp.actxid") || flag(info, "pmix.embed.barrier"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::host_module;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn group_is_offered_and_refuses_an_unknown_operation_through_its_callback() {
        let group = host_module().group.expect("offered: else every group construct fails as unsupported");
        static GROUP_ANSWERED: AtomicBool = AtomicBool::new(false);
        unsafe extern "C" fn answered(_: pmix_status_t, _: *mut pmix_info_t, _: usize, _: *mut c_void, _: pmix_release_cbfunc_t, _: *mut c_void) {
            GROUP_ANSWERED.store(true, Ordering::SeqCst);
        }
        let id = std::ffi::CString::new("g").unwrap();
        // SAFETY: valid id; no members or directives; an operation the library never passes.
        let status = unsafe { group(7, id.as_ptr().cast_mut(), std::ptr::null(), 0, std::ptr::null(), 0, Some(answered), std::ptr::null_mut()) };
        // A synchronous refusal would leave every local member but one waiting.
        assert_eq!(status, PMIX_SUCCESS);
        assert!(GROUP_ANSWERED.load(Ordering::SeqCst), "refused through the callback, which answers every local member");
    }

    #[test]
    fn destructs_and_constructs_without_id_or_barrier_complete_on_the_node() {
        let on = |k: &str| vec![(k.to_string(), Value::Bool(true))];
        assert!(complete_here(GroupOp::Destruct, &on("pmix.grp.actxid")));
        assert!(complete_here(GroupOp::Construct, &[]));
        assert!(complete_here(GroupOp::Construct, &[("pmix.grp.actxid".into(), Value::Bool(false))]));
        assert!(!complete_here(GroupOp::Construct, &on("pmix.grp.actxid")));
        assert!(!complete_here(GroupOp::Construct, &[("pmix.embed.barrier".into(), Value::Other(PMIX_UNDEF))]), "a flag without a value is set");
        let mut local = on("pmix.grp.actxid");
        local.extend(on("pmix.grp.lcl"));
        assert!(complete_here(GroupOp::Construct, &local));
    }
}
