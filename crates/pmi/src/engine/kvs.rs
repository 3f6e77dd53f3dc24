//! The engine's KVS side: the node's collectives (fence, ring) going up and
//! coming back, KVS messages from other daemons, and the store's actions.
//!
//! A KVS message can reach a node before its job does: a rank of another
//! node puts a key this node owns (`--kvs dkvs`) or asks it for one, and
//! that message overtakes this node's `Launch` — e.g. node 0 of a tree reads
//! its own `Launch`, starts its ranks and serves their puts before it reads
//! the next frame from its parent, which is node 2's `Launch` it must pass
//! on. Dropping it lost the put (or the get's answer) and hung the job's
//! next fence; it is held instead ([`EarlyKvs`]) and delivered when the job
//! arrives.

use std::collections::{HashSet, VecDeque};

use dpm_kvs::remote::KvsMsg;
use dpm_kvs::ring::{split, RingSegment, RingSlot};
use dpm_kvs::store::Action;
use dpm_kvs::{JobId, KeyValues};

use super::{Effect, Engine};
use crate::limits::{EARLY_KVS_MAX, ENDED_JOBS_REMEMBERED};
use crate::reply::Reply;

/// KVS messages for jobs this node has not been given yet, oldest first,
/// and the jobs that ended here (whose late messages are dropped, not held).
#[derive(Default)]
pub(super) struct EarlyKvs {
    held: VecDeque<KvsMsg>,
    ended: VecDeque<JobId>,
    /// Jobs whose held messages were dropped at the limit (each logged
    /// once; forgotten when the job comes or ends, and all at once if they
    /// grow to [`ENDED_JOBS_REMEMBERED`], after which they may be logged again).
    warned: HashSet<JobId>,
}

impl EarlyKvs {
    fn hold(&mut self, msg: KvsMsg) {
        let job = msg.job();
        if self.ended.contains(&job) {
            tracing::debug!(%job, "KVS message for a job that ended on this node dropped");
            return;
        }
        if self.held.len() >= EARLY_KVS_MAX {
            if let Some(old) = self.held.pop_front() {
                if self.warned.len() >= ENDED_JOBS_REMEMBERED {
                    self.warned.clear();
                }
                if self.warned.insert(old.job()) {
                    tracing::warn!(job = %old.job(), limit = EARLY_KVS_MAX, "KVS messages for a job not on this node yet: too many held, the oldest dropped");
                }
            }
        }
        self.held.push_back(msg);
    }

    /// Everything held for `job`, in arrival order.
    pub(super) fn take(&mut self, job: JobId) -> Vec<KvsMsg> {
        self.warned.remove(&job);
        if self.held.is_empty() {
            return Vec::new();
        }
        let (mine, rest): (Vec<KvsMsg>, Vec<KvsMsg>) = std::mem::take(&mut self.held).into_iter().partition(|m| m.job() == job);
        self.held = rest.into();
        mine
    }

    /// `job` ended here: what is held for it and what comes later is dropped.
    pub(super) fn ended(&mut self, job: JobId) {
        self.held.retain(|m| m.job() != job);
        self.warned.remove(&job);
        if self.ended.len() >= ENDED_JOBS_REMEMBERED {
            self.ended.pop_front();
        }
        self.ended.push_back(job);
    }
}

impl Engine {
    /// Send this node's `FenceIn` once every local rank is in the fence and
    /// every put sent to an owner is acknowledged.
    pub(super) fn maybe_enter_fence(&mut self, job_id: JobId) {
        let Some(job) = self.jobs.get_mut(&job_id) else { return };
        if job.fence_sent || job.in_fence.len() < job.setup.local_ranks.len() || !job.store.fence_ready() {
            return;
        }
        job.fence_sent = true;
        let puts = job.store.take_fence_puts();
        self.effects.push(Effect::FenceIn { job: job_id, epoch: job.store.epoch(), count: job.in_fence.len() as u32, puts });
    }

    /// The launcher completed fence `epoch` of `job`; `delta` is what it
    /// broadcast (every put under allgather, dense and unhinted ones under auto).
    pub fn fence_done(&mut self, job_id: JobId, epoch: u64, delta: KeyValues) {
        let Some(job) = self.jobs.get_mut(&job_id) else { return };
        if epoch != job.store.epoch() {
            tracing::warn!(%job_id, epoch, expected = job.store.epoch(), "fence completion for the wrong epoch ignored");
            return;
        }
        job.store.fence_done(delta);
        job.fence_sent = false;
        for conn in std::mem::take(&mut job.in_fence) {
            self.finish_deferred(conn, &Reply::BarrierOut);
        }
        self.flush_store(job_id);
    }

    /// Ring `seq` of `job` completed: `slot` is this node's place in it.
    pub fn ring_out(&mut self, job_id: JobId, seq: u64, slot: &RingSlot) {
        let Some(job) = self.jobs.get_mut(&job_id) else { return };
        if seq != job.ring_seq || job.in_ring.len() < job.setup.local_ranks.len() {
            tracing::warn!(%job_id, seq, expected = job.ring_seq, "ring answer for a ring not in progress ignored");
            return;
        }
        job.ring_seq += 1;
        let size = job.setup.size;
        let entrants = std::mem::take(&mut job.in_ring);
        let ones: Vec<RingSegment> = entrants.iter().map(|(_, _, v)| RingSegment::one(v.as_str())).collect();
        for ((_, conn, _), mine) in entrants.into_iter().zip(split(slot, &ones)) {
            self.finish_deferred(conn, &Reply::Ring { rank: mine.offset, size, left: mine.left, right: mine.right });
        }
    }

    /// A KVS message from another daemon (a get to serve, an answer, a put
    /// to keep as the key's owner, an acknowledgement).
    /// One that arrives before its job is held until [`Engine::add_job`]
    /// (see [`EarlyKvs`]); one for a job that ended here is dropped.
    pub fn kvs_msg(&mut self, msg: KvsMsg) {
        let job_id = msg.job();
        let Some(job) = self.jobs.get_mut(&job_id) else {
            self.early.hold(msg);
            return;
        };
        job.store.on_msg(msg);
        self.flush_store(job_id);
        self.maybe_enter_fence(job_id);
    }

    /// Carry out what the job's store asked for: answers to local gets, and
    /// messages to other daemons.
    pub(super) fn flush_store(&mut self, job_id: JobId) {
        let Some(job) = self.jobs.get_mut(&job_id) else { return };
        let actions = job.store.take_actions();
        let mut parked = job.claim.take();
        let before = parked.as_ref().map_or(0, Vec::len);
        for action in actions {
            match action {
                Action::Answer(conn, Some(v)) if !v.is_empty() => self.finish_deferred(conn, &Reply::Value(v)),
                // Not there yet in a job awaiting its claim: parked for it.
                Action::Answer(conn, _) if parked.is_some() => parked.get_or_insert_with(Vec::new).push(conn),
                Action::Answer(conn, _) => {
                    let key = self.conns.get(&conn).and_then(|c| c.waiting.as_ref()).and_then(|d| d.key.clone()).unwrap_or_default();
                    self.finish_deferred(conn, &Reply::Error(format!("key '{key}' not found")));
                }
                Action::Send(to, msg) => self.effects.push(Effect::Kvs { to, msg }),
            }
        }
        let more = parked.as_ref().map_or(0, Vec::len) > before;
        if let Some(job) = self.jobs.get_mut(&job_id) {
            job.claim = parked;
        }
        if more {
            self.parked(job_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The jobs whose dropped messages were logged never outgrow their
    /// bound, however many jobs' messages overflow the hold; a job that
    /// comes or ends is forgotten.
    #[test]
    fn the_jobs_logged_for_drops_are_bounded() {
        let mut early = EarlyKvs::default();
        let jobs = (ENDED_JOBS_REMEMBERED * 2) as u64;
        for i in 0..EARLY_KVS_MAX as u64 + jobs {
            // Each message past the limit drops the oldest, of a new job each time.
            early.hold(KvsMsg::PutAck { job: JobId(i as u32), id: i });
            assert!(early.warned.len() <= ENDED_JOBS_REMEMBERED);
        }
        assert_eq!(early.held.len(), EARLY_KVS_MAX);
        assert!(!early.warned.is_empty());
        let last = JobId((jobs - 1) as u32);
        early.warned.insert(last);
        assert_eq!(early.take(last).len(), 0, "dropped long ago");
        assert!(!early.warned.contains(&last));
    }
}
