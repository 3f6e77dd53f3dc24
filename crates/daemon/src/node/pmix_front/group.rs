//! PMIx groups on the node (`PMIx_Group_construct`/`destruct`: Open MPI's
//! `MPI_Comm_create_from_group`, `MPI_Intercomm_create_from_groups` and
//! communicators of MPI sessions). The library calls the host once every
//! local member of the group has called, with this node's members' data
//! (`PMIX_GROUP_ENDPT_DATA`: their endpoints, and the group info Open MPI
//! attaches, its local communicator index).
//!
//! As PRRTE serves it (`pmix_server_group_fn`): a destruct, and a construct
//! that asks neither for a context id nor for a barrier, or that the
//! library marks `PMIX_GROUP_LOCAL_ONLY`, is complete once the local
//! members have called (answered here, no members returned). Any other
//! construct is the launcher's collective over the nodes hosting the
//! members (the `connect` path, [`CollectiveKind::Group`], keyed by the
//! group's id too), under the same rules as a fence: it completes when
//! every such node has contributed, fails on every node that contributed
//! when a member's job ends first, and honours `PMIX_TIMEOUT`. The answer
//! is the membership as the library listed it, the context id when asked
//! (unique in the tree) and every node's data in node order, which the
//! library unpacks as its own (one server's blob is a sequence of typed
//! byte objects, so concatenated blobs read as one); the namespaces of
//! member jobs this node hosts no rank of are registered first, as for a
//! connect.

use dpm_pmix::{PMIX_SUCCESS, RANK_WILDCARD};
use dpm_proto::{CollectiveKind, GroupSpec};

use super::{PmixAnswer, PmixFront, PmixRequest};
use crate::node::requests::Requests;
use crate::node::NodeEffects;

/// The directives of a group construct that decide how it is served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupDirectives {
    /// `PMIX_GROUP_ASSIGN_CONTEXT_ID`.
    pub context_id: bool,
    /// `PMIX_GROUP_LOCAL_ONLY`: every member is on this node, no id asked.
    pub local_only: bool,
    /// `PMIX_EMBED_BARRIER`.
    pub barrier: bool,
}

/// A group operation's answer: the final membership, the context id, and
/// every node's data (all empty for an operation complete on this node).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupAnswer {
    pub members: Vec<(String, u32)>,
    pub context_id: Option<u64>,
    pub data: Vec<u8>,
}

/// The ranks of each namespace in `members` (sorted), but for namespaces
/// listed by wildcard (every rank): what a node sends when it does not know
/// every namespace's size; the launcher takes a complete list as the whole
/// job, as it takes an omitted one.
pub(super) fn listed(members: &[(String, u32)]) -> Vec<(String, Vec<u32>)> {
    let mut by_nspace: std::collections::BTreeMap<&str, Vec<u32>> = std::collections::BTreeMap::new();
    for (ns, rank) in members {
        by_nspace.entry(ns.as_str()).or_default().push(*rank);
    }
    by_nspace
        .into_iter()
        .filter(|(_, ranks)| !ranks.contains(&RANK_WILDCARD))
        .map(|(ns, mut ranks)| {
            ranks.sort_unstable();
            ranks.dedup();
            (ns.to_string(), ranks)
        })
        .collect()
}

impl PmixFront {
    /// Group `id`'s operation; every local member of `members` has called.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn group(
        &mut self,
        fx: &mut (impl NodeEffects + ?Sized),
        requests: &mut Requests,
        construct: bool,
        id: String,
        members: Vec<(String, u32)>,
        directives: GroupDirectives,
        data: Vec<u8>,
        req: PmixRequest,
    ) {
        let d = directives;
        if !construct || d.local_only || (!d.context_id && !d.barrier) {
            tracing::debug!(group = %dpm_pmi::sanitize::escape(&id), construct, "PMIx group operation complete on this node");
            return fx.pmix_answer(req, PmixAnswer::Group(PMIX_SUCCESS, GroupAnswer::default()));
        }
        let parts = self.participants(&members).unwrap_or_else(|| listed(&members));
        let group = GroupSpec { id, context_id: d.context_id };
        self.connect(fx, requests, &members, CollectiveKind::Group, data, parts, Some(group), req);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_ranks_are_sorted_per_namespace_and_wildcards_are_whole() {
        let members = vec![("b".to_string(), 3), ("a".into(), 1), ("b".into(), 0), ("c".into(), RANK_WILDCARD), ("a".into(), 1)];
        assert_eq!(listed(&members), vec![("a".to_string(), vec![1]), ("b".into(), vec![0, 3])]);
        assert!(listed(&[]).is_empty());
    }
}
