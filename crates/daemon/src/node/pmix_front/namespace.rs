//! The namespace a PMIx job is registered under on a node: its nodes in
//! node order, its apps, its universe and its parent ([`job_spec`]), and the
//! same for another job's namespace a connect registers ([`map_spec`]).

use std::path::PathBuf;

use dpm_kvs::NodeId;
use dpm_pmix::{JobSpec, NodeRanks};
use dpm_proto::{JobMap, LaunchJob};

use super::spawn::PARENT_RANK_KEY;

/// The namespace of a launch as the node's PMIx server registers it: nodes
/// in node order; this node's hostname and the directories are the driver's
/// to fill in (the library compares with its own `gethostname`), the others
/// are named `dpm-node<k>` (only distinctness matters to the library).
pub fn job_spec(launch: &LaunchJob, node: NodeId) -> JobSpec {
    let map = JobMap {
        job: launch.job,
        kvsname: launch.kvsname.clone(),
        node_of: launch.node_of.clone(),
        appnums: launch.appnums.clone(),
        universe_size: launch.universe_size,
    };
    JobSpec { parent: parent(launch), ..map_spec(&map, launch.size, node) }
}

/// The namespace of a job as `node` registers it (see [`job_spec`]); a node
/// that hosts none of its ranks (a connect's other job) is an extra entry
/// without ranks, last, so the other nodes keep their ids.
pub(super) fn map_spec(map: &JobMap, size: u32, node: NodeId) -> JobSpec {
    let mut nodes: Vec<(NodeId, Vec<u32>)> = Vec::new();
    for (rank, &n) in map.node_of.iter().enumerate() {
        match nodes.iter_mut().find(|(m, _)| *m == n) {
            Some((_, ranks)) => ranks.push(rank as u32),
            None => nodes.push((n, vec![rank as u32])),
        }
    }
    if nodes.is_empty() {
        // A launch without a node map (one node): every rank here.
        nodes.push((node, (0..size).collect()));
    }
    nodes.sort_by_key(|(n, _)| *n);
    if !nodes.iter().any(|(n, _)| *n == node) {
        nodes.push((node, Vec::new()));
    }
    let this_node = nodes.iter().position(|(n, _)| *n == node).unwrap_or(0);
    let mut app_sizes: Vec<u32> = Vec::new();
    for &appnum in &map.appnums {
        let i = usize::try_from(appnum).unwrap_or(0);
        if app_sizes.len() <= i {
            app_sizes.resize(i + 1, 0);
        }
        app_sizes[i] += 1;
    }
    app_sizes.retain(|&n| n > 0);
    if app_sizes.is_empty() {
        app_sizes.push(size);
    }
    let size: u32 = app_sizes.iter().sum();
    JobSpec {
        nspace: map.kvsname.clone(),
        job_id: map.job.0.to_string(),
        nodes: nodes.into_iter().map(|(n, ranks)| NodeRanks { hostname: format!("dpm-node{n}"), ranks }).collect(),
        this_node,
        app_sizes,
        universe_size: u32::try_from(map.universe_size).unwrap_or(0).max(size),
        tmpdir: PathBuf::new(),
        nsdir: PathBuf::new(),
        parent: None,
        // The driver's side decides (it knows the CPUs and the other jobs).
        oversubscribed: false,
        node_rank_base: 0,
        places: Default::default(),
    }
}

/// The process that spawned the job: the spawner's namespace and the rank
/// the spawn's preput names ([`PARENT_RANK_KEY`]; rank 0 if none).
fn parent(launch: &LaunchJob) -> Option<dpm_pmix::Proc> {
    let nspace = launch.spawner.clone()?;
    let rank = launch.preput.iter().find(|(k, _)| k == PARENT_RANK_KEY).and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    Some(dpm_pmix::Proc { nspace, rank })
}
