//! What the boot tests of the in-process cluster share.

use std::time::Duration;

use dpm_cluster::{Cluster, Step};
use dpm_kvs::JobId;

/// How long in virtual time a run may take before a test gives up.
pub const LIMIT: Duration = Duration::from_secs(60);

/// A job computing `ms` between its init and a barrier, then ending well.
pub fn work(ms: u64) -> Vec<Step> {
    vec![Step::Init, Step::Work(Duration::from_millis(ms)), Step::Barrier, Step::Print("done".into()), Step::Finalize, Step::Exit(0)]
}

/// The nodes of `job`'s ranks, in rank order.
pub fn nodes(c: &Cluster, job: JobId) -> Vec<usize> {
    c.ranks(job).iter().map(|p| p.node).collect()
}
