//! Answers that complete later: a name-service request or a spawn goes up
//! to the launcher ([`Effect::Name`], [`Effect::Spawn`]) and its reply, with
//! the refusals queued behind it, goes out when the launcher's answer
//! comes back ([`Engine::name_done`], [`Engine::spawn_done`]).

use super::{ConnId, Effect, Engine, NameOp};
use crate::conn::Deferred;
use crate::reply::{Reply, Spawned};
use crate::wire::Version;

impl Engine {
    pub(super) fn defer_name(&mut self, conn: ConnId, version: Version, name: &str, op: NameOp) {
        let c = self.conns.get_mut(&conn).expect("caller checked");
        c.waiting = Some(Deferred { version, request: name.to_string(), key: None });
        self.effects.push(Effect::Name { conn, job: c.job, op });
    }

    /// The launcher's answer to an [`Effect::Name`]: `Ok(Some(port))` for a lookup.
    pub fn name_done(&mut self, conn: ConnId, result: Result<Option<String>, String>) {
        let reply = match result {
            Ok(Some(port)) => Reply::Value(port),
            Ok(None) => Reply::Ok,
            Err(msg) => Reply::Error(msg),
        };
        self.finish_deferred(conn, &reply);
    }

    /// The launcher's answer to an [`Effect::Spawn`]: the new job (its
    /// kvsname and, after a partial `soft` start, each process's code).
    pub fn spawn_done(&mut self, conn: ConnId, result: Result<Spawned, String>) {
        let reply = result.map_or_else(Reply::Error, Reply::Spawned);
        self.finish_deferred(conn, &reply);
    }

    pub(super) fn finish_deferred(&mut self, conn: ConnId, reply: &Reply) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        let Some(d) = c.waiting.take() else { return };
        let queued = c.take_queued();
        self.send(conn, d.version, &d.request, reply);
        for q in queued {
            self.send(conn, q.version, &q.request, &Reply::Error(q.message));
        }
    }
}
