//! A job's namespace as plain Rust data, and its PMIx registration keys.
//!
//! Owns: [`JobSpec`] (what dpm knows about a job: size, nodes with their
//! ranks, apps, universe, tmpdirs, parent) and the pure translation into the
//! info array `PMIx_server_register_nspace` takes, with the keys Open MPI 5
//! requires (`PMIX_LOCAL_RANK`, `PMIX_JOB_SIZE`, `PMIX_LOCAL_PEERS`, …).
//! Node and proc maps are sent as raw lists ("h1,h2" and "0,1;2,3"), which
//! the library parses itself: `PMIx_generate_regex` may return a binary
//! (zlib) blob, which gains nothing at dpm's scales.
use crate::info::{InfoList, Proc, Value};
use crate::PmixError;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One node of a job: its hostname and the job's ranks on it, ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRanks {
    pub hostname: String,
    pub ranks: Vec<u32>,
}

/// Where a rank of this node runs, as PRRTE tells Open MPI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcPlace {
    /// Not bound: `PMIX_LOCALITY_STRING` registered without a string (the
    /// server forks it and knows, which a missing key would not say).
    Unbound,
    /// Bound: `PMIX_CPUSET` (an hwloc list, "0-1,4") and, if the topology
    /// gave one, `PMIX_LOCALITY_STRING` ("SK0:L30:…", `dpm_binding::locality`).
    Bound { cpuset: String, locality: Option<String> },
}

/// Everything registered for one namespace on one node's server.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// The PMIx namespace (dpm: "dpm.<jobid>"), under 256 bytes.
    pub nspace: String,
    /// The launcher's job id (`PMIX_JOBID`).
    pub job_id: String,
    /// Every node of the job, in node-id order.
    pub nodes: Vec<NodeRanks>,
    /// Which entry of `nodes` this server runs on.
    pub this_node: usize,
    /// Ranks per app, in order (MPMD); ranks are assigned to apps consecutively.
    pub app_sizes: Vec<u32>,
    /// `PMIX_UNIV_SIZE` (>= job size).
    pub universe_size: u32,
    /// The session's top tmpdir (`PMIX_TMPDIR`) and this job's (`PMIX_NSDIR`).
    pub tmpdir: PathBuf,
    pub nsdir: PathBuf,
    /// The process that spawned this job (`PMIX_SPAWNED` + `PMIX_PARENT_ID`).
    pub parent: Option<Proc>,
    /// This node runs more ranks than it has CPUs: `PMIX_NODE_OVERSUBSCRIBED`,
    /// registered only when true (Open MPI checks its presence and then
    /// yields when idle instead of spinning; PRRTE sets it the same way).
    pub oversubscribed: bool,
    /// Ranks of other live jobs on this node: this job's node ranks
    /// (`PMIX_NODE_RANK`, `OMPI_COMM_WORLD_NODE_RANK`) follow theirs, as
    /// PRRTE numbers a spawned job's after its parents'.
    pub node_rank_base: u32,
    /// Where this node's ranks run, by rank (`PMIX_CPUSET`,
    /// `PMIX_LOCALITY_STRING` in their per-process data). Ranks of other
    /// nodes get neither: their daemon binds them, this one does not know
    /// (PRRTE's rule: registering "unbound" for them would be a claim).
    pub places: BTreeMap<u32, ProcPlace>,
}

impl JobSpec {
    /// Total ranks.
    pub fn size(&self) -> u32 {
        self.app_sizes.iter().sum()
    }

    /// The ranks on this server's node.
    pub fn local_ranks(&self) -> &[u32] {
        self.nodes.get(self.this_node).map(|n| n.ranks.as_slice()).unwrap_or(&[])
    }

    /// Checks the spec is self-consistent: ranks 0..size each on exactly one
    /// node, this node exists, names fit.
    pub fn validate(&self) -> Result<(), PmixError> {
        let bad = |detail: String| PmixError::Invalid { what: "job spec", detail };
        let size = self.size();
        if size == 0 || self.app_sizes.contains(&0) {
            return Err(bad("empty job or app".into()));
        }
        if self.nspace.is_empty() || self.nspace.len() >= crate::ffi::NSPACE_LEN {
            return Err(bad(format!("namespace {:?} must be 1..255 bytes", self.nspace)));
        }
        if self.this_node >= self.nodes.len() {
            return Err(bad(format!("this_node {} of {} nodes", self.this_node, self.nodes.len())));
        }
        let mut seen = vec![false; size as usize];
        for node in &self.nodes {
            for &rank in &node.ranks {
                match seen.get_mut(rank as usize) {
                    Some(slot) if !*slot => *slot = true,
                    Some(_) => return Err(bad(format!("rank {rank} on two nodes"))),
                    None => return Err(bad(format!("rank {rank} >= job size {size}"))),
                }
            }
        }
        if let Some(missing) = seen.iter().position(|s| !s) {
            return Err(bad(format!("rank {missing} is on no node")));
        }
        if self.universe_size < size {
            return Err(bad(format!("universe {} < job size {size}", self.universe_size)));
        }
        Ok(())
    }

    /// The node rank of the `local_rank`th rank on node `nodeid`: on this
    /// node after [`JobSpec::node_rank_base`], elsewhere as if alone there.
    fn node_rank(&self, nodeid: usize, local_rank: usize) -> u16 {
        let base = if nodeid == self.this_node { self.node_rank_base as usize } else { 0 };
        u16::try_from(base + local_rank).unwrap_or(u16::MAX)
    }

    fn appnum(&self, rank: u32) -> u32 {
        let mut end = 0;
        for (i, n) in self.app_sizes.iter().enumerate() {
            end += n;
            if rank < end {
                return i as u32;
            }
        }
        0
    }

    /// The (key, value) pairs for `PMIx_server_register_nspace`.
    pub fn infos(&self) -> Result<Vec<(String, Value)>, PmixError> {
        self.validate()?;
        let join = |ranks: &[u32]| ranks.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let local = self.local_ranks();
        let here = &self.nodes[self.this_node];
        // A node without ranks of the job (registering another job's
        // namespace for a connect) is in no map.
        let mapped: Vec<&NodeRanks> = self.nodes.iter().filter(|n| !n.ranks.is_empty()).collect();
        let mut out: Vec<(&str, Value)> = vec![
            ("pmix.jobid", Value::String(self.job_id.clone())),
            ("pmix.job.size", Value::U32(self.size())),
            ("pmix.max.size", Value::U32(self.universe_size)),
            ("pmix.univ.size", Value::U32(self.universe_size)),
            ("pmix.job.napps", Value::U32(self.app_sizes.len() as u32)),
            ("pmix.num.nodes", Value::U32(mapped.len() as u32)),
            ("pmix.nmap", Value::String(mapped.iter().map(|n| n.hostname.as_str()).collect::<Vec<_>>().join(","))),
            ("pmix.pmap", Value::String(mapped.iter().map(|n| join(&n.ranks)).collect::<Vec<_>>().join(";"))),
            ("pmix.hname", Value::String(here.hostname.clone())),
            ("pmix.lpeers", Value::String(join(local))),
            ("pmix.local.size", Value::U32(local.len() as u32)),
            ("pmix.node.size", Value::U32(local.len() as u32)),
            ("pmix.tmpdir", Value::String(self.tmpdir.to_string_lossy().into_owned())),
            ("pmix.nsdir", Value::String(self.nsdir.to_string_lossy().into_owned())),
            ("pmix.tdir.rmclean", Value::Bool(true)),
            ("pmix.spawned", Value::Bool(self.parent.is_some())),
        ];
        if let Some(&leader) = local.first() {
            out.push(("pmix.lldr", Value::Rank(leader)));
        }
        if let Some(parent) = &self.parent {
            out.push(("pmix.parent", Value::Proc(parent.clone())));
        }
        if self.oversubscribed {
            out.push(("pmix.ndosub", Value::Bool(true)));
        }
        let mut first = 0;
        for (appnum, &n) in self.app_sizes.iter().enumerate() {
            out.push((
                "pmix.app.arr",
                Value::Infos(vec![
                    ("pmix.appnum".into(), Value::U32(appnum as u32)),
                    ("pmix.app.size".into(), Value::U32(n)),
                    ("pmix.aldr".into(), Value::Rank(first)),
                ]),
            ));
            first += n;
        }
        for (nodeid, node) in self.nodes.iter().enumerate() {
            for (local_rank, &rank) in node.ranks.iter().enumerate() {
                // PMIX_RANK first: the library keys the array on it.
                let mut data = vec![
                    ("pmix.rank".into(), Value::Rank(rank)),
                    ("pmix.appnum".into(), Value::U32(self.appnum(rank))),
                    ("pmix.lrank".into(), Value::U16(local_rank as u16)),
                    ("pmix.nrank".into(), Value::U16(self.node_rank(nodeid, local_rank))),
                    ("pmix.nodeid".into(), Value::U32(nodeid as u32)),
                    ("pmix.hname".into(), Value::String(node.hostname.clone())),
                ];
                match self.places.get(&rank).filter(|_| nodeid == self.this_node) {
                    Some(ProcPlace::Unbound) => data.push(("pmix.locstr".into(), Value::NoString)),
                    Some(ProcPlace::Bound { cpuset, locality }) => {
                        data.push(("pmix.cpuset".into(), Value::String(cpuset.clone())));
                        if let Some(l) = locality {
                            data.push(("pmix.locstr".into(), Value::String(l.clone())));
                        }
                    }
                    None => {}
                }
                out.push(("pmix.pdata", Value::Infos(data)));
            }
        }
        Ok(out.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    /// The `OMPI_*` variables `mpirun` (PRRTE with Open MPI's personality)
    /// gives local rank `rank` before it starts: its place in the job
    /// (`OMPI_COMM_WORLD_RANK`, `_SIZE`, `_LOCAL_RANK`, `_LOCAL_SIZE`,
    /// `_NODE_RANK`; `OMPI_WORLD_SIZE`, `OMPI_WORLD_LOCAL_SIZE`), the
    /// universe (`OMPI_UNIVERSE_SIZE`) and the number of apps
    /// (`OMPI_NUM_APP_CTX`). Scripts and GPU-selection wrappers read them
    /// before `MPI_Init`. `None` for a rank not on this node.
    pub fn ompi_env(&self, rank: u32) -> Option<Vec<(String, String)>> {
        let local = self.local_ranks();
        let local_rank = local.iter().position(|&r| r == rank)?;
        let vars = [
            ("OMPI_COMM_WORLD_RANK", rank as usize),
            ("OMPI_COMM_WORLD_SIZE", self.size() as usize),
            ("OMPI_WORLD_SIZE", self.size() as usize),
            ("OMPI_COMM_WORLD_LOCAL_RANK", local_rank),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", local.len()),
            ("OMPI_WORLD_LOCAL_SIZE", local.len()),
            ("OMPI_COMM_WORLD_NODE_RANK", usize::from(self.node_rank(self.this_node, local_rank))),
            ("OMPI_UNIVERSE_SIZE", self.universe_size as usize),
            ("OMPI_NUM_APP_CTX", self.app_sizes.len()),
        ];
        Some(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    /// The infos as an owned C array.
    pub fn info_list(&self) -> Result<InfoList, PmixError> {
        let mut list = InfoList::new();
        for (key, value) in self.infos()? {
            list.push(&key, value)?;
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_nodes() -> JobSpec {
        JobSpec {
            nspace: "dpm.1".into(),
            job_id: "1".into(),
            nodes: vec![NodeRanks { hostname: "a".into(), ranks: vec![0, 2] }, NodeRanks { hostname: "b".into(), ranks: vec![1, 3] }],
            this_node: 1,
            app_sizes: vec![3, 1],
            universe_size: 4,
            tmpdir: "/t".into(),
            nsdir: "/t/1".into(),
            parent: None,
            oversubscribed: false,
            node_rank_base: 0,
            places: BTreeMap::new(),
        }
    }

    fn get<'a>(infos: &'a [(String, Value)], key: &str) -> Vec<&'a Value> {
        infos.iter().filter(|(k, _)| k == key).map(|(_, v)| v).collect()
    }

    #[test]
    fn keys_open_mpi_needs_describe_this_node() {
        let infos = two_nodes().infos().unwrap();
        assert_eq!(get(&infos, "pmix.job.size"), [&Value::U32(4)]);
        assert_eq!(get(&infos, "pmix.lpeers"), [&Value::String("1,3".into())]);
        assert_eq!(get(&infos, "pmix.local.size"), [&Value::U32(2)]);
        assert_eq!(get(&infos, "pmix.pmap"), [&Value::String("0,2;1,3".into())]);
        assert_eq!(get(&infos, "pmix.nmap"), [&Value::String("a,b".into())]);
        let procs = get(&infos, "pmix.pdata");
        assert_eq!(procs.len(), 4);
        // rank 3: second on node b, in app 1.
        let Value::Infos(r3) = procs[3] else { panic!("not an array") };
        assert_eq!(r3[0], ("pmix.rank".to_string(), Value::Rank(3)));
        assert!(r3.contains(&("pmix.lrank".to_string(), Value::U16(1))));
        assert!(r3.contains(&("pmix.appnum".to_string(), Value::U32(1))));
        assert!(r3.contains(&("pmix.nodeid".to_string(), Value::U32(1))));
        assert_eq!(get(&infos, "pmix.spawned"), [&Value::Bool(false)]);
        // Only present when oversubscribed: Open MPI tests its presence.
        assert!(get(&infos, "pmix.ndosub").is_empty());
        let infos = JobSpec { oversubscribed: true, ..two_nodes() }.infos().unwrap();
        assert_eq!(get(&infos, "pmix.ndosub"), [&Value::Bool(true)]);
    }

    #[test]
    fn open_mpi_s_variables_for_a_rank_of_this_node() {
        let env: BTreeMap<String, String> = two_nodes().ompi_env(3).unwrap().into_iter().collect();
        let want = [
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("OMPI_WORLD_LOCAL_SIZE", "2"),
            ("OMPI_COMM_WORLD_NODE_RANK", "1"),
            ("OMPI_UNIVERSE_SIZE", "4"),
            ("OMPI_NUM_APP_CTX", "2"),
        ];
        assert_eq!(env, want.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        assert_eq!(two_nodes().ompi_env(0), None, "rank 0 runs on the other node");
        // A spawned job's node ranks follow those of the jobs already there.
        let env = JobSpec { node_rank_base: 3, ..two_nodes() }.ompi_env(3).unwrap();
        assert!(env.contains(&("OMPI_COMM_WORLD_NODE_RANK".into(), "4".into())), "{env:?}");
        assert!(env.contains(&("OMPI_COMM_WORLD_LOCAL_RANK".into(), "1".into())), "{env:?}");
    }

    fn proc_data(infos: &[(String, Value)], rank: u32) -> Vec<(String, Value)> {
        get(infos, "pmix.pdata")
            .into_iter()
            .find_map(|v| match v {
                Value::Infos(d) if d.first() == Some(&("pmix.rank".to_string(), Value::Rank(rank))) => Some(d.clone()),
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn this_nodes_ranks_say_where_they_run_as_prrte_does() {
        let mut spec = two_nodes();
        spec.places.insert(1, ProcPlace::Bound { cpuset: "2-3".into(), locality: Some("SK0:CR1:HT2-3:NM0".into()) });
        spec.places.insert(3, ProcPlace::Unbound);
        // A place for another node's rank is not this server's to say.
        spec.places.insert(0, ProcPlace::Unbound);
        let infos = spec.infos().unwrap();
        let r1 = proc_data(&infos, 1);
        assert!(r1.contains(&("pmix.cpuset".to_string(), Value::String("2-3".into()))));
        assert!(r1.contains(&("pmix.locstr".to_string(), Value::String("SK0:CR1:HT2-3:NM0".into()))));
        let r3 = proc_data(&infos, 3);
        assert!(r3.contains(&("pmix.locstr".to_string(), Value::NoString)));
        assert!(!r3.iter().any(|(k, _)| k == "pmix.cpuset"));
        for rank in [0, 2] {
            assert!(!proc_data(&infos, rank).iter().any(|(k, _)| k == "pmix.cpuset" || k == "pmix.locstr"), "rank {rank}");
        }
    }

    #[test]
    fn inconsistent_specs_are_refused() {
        let mut spec = two_nodes();
        spec.nodes[0].ranks = vec![0, 1];
        assert!(spec.infos().unwrap_err().to_string().contains("rank 1 on two nodes"));
        let mut spec = two_nodes();
        spec.nodes[1].ranks = vec![1];
        assert!(spec.validate().unwrap_err().to_string().contains("rank 3 is on no node"));
        let mut spec = two_nodes();
        spec.this_node = 2;
        assert!(spec.validate().is_err());
        let mut spec = two_nodes();
        spec.universe_size = 2;
        assert!(spec.validate().is_err());
        let mut spec = two_nodes();
        spec.nodes[1].ranks = vec![1, 9];
        assert!(spec.validate().unwrap_err().to_string().contains(">= job size"));
    }
}
