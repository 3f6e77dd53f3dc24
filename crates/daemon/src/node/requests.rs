//! [`Requests`]: the node's questions up to the launcher ([`RequestId`])
//! that wait for an answer, by who asked, so that each answer goes back to
//! the front end that asked it and to no other.

use std::collections::HashMap;

use dpm_pmi::ConnId;
use dpm_proto::RequestId;

/// Who asked the launcher a question: the answer goes back to the same
/// front end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Asker {
    /// A PMI-1/2 connection (the engine answers it).
    Pmi(ConnId),
    /// The PMIx front end, which keeps the waiting upcall by request.
    Pmix,
}

/// The requests up to the launcher still unanswered, and the next id.
#[derive(Default)]
pub(super) struct Requests {
    open: HashMap<RequestId, Asker>,
    next: u64,
}

impl Requests {
    /// A new request, answered to `asker`.
    pub(super) fn open(&mut self, asker: Asker) -> RequestId {
        let id = RequestId(self.next);
        self.next += 1;
        self.open.insert(id, asker);
        id
    }

    /// The launcher answered `id`: who asked, unless it was answered before.
    pub(super) fn answered(&mut self, id: RequestId) -> Option<Asker> {
        self.open.remove(&id)
    }

    /// Who asked `id`, while it is open.
    pub(super) fn asker(&self, id: RequestId) -> Option<Asker> {
        self.open.get(&id).copied()
    }
}
