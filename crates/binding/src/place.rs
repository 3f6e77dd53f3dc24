//! A node's binder: the policy applied to the node's topology, restricted
//! to the CPUs the daemon itself may use (its own affinity: a Slurm step's
//! or a cgroup's cpuset is never left), handing out objects to ranks.
//!
//! A job's ranks take the mapping's units (one unit: the CPUs of a rank)
//! in order: local rank i gets unit i, cyclically, as Hydra does — counted
//! over the units no live rank holds first, so that a job started while
//! others run (another run of a boot) lands on free objects. A spawned
//! job's ranks take the units with the fewest live ranks on them instead,
//! so that they land on objects no live rank holds while there are any.
//! Every unit handed out is held until [`Binder::release`] (the rank's
//! exit). Ranks that share CPUs with other live ranks are reported in one
//! warning per job (not with `:overload-allowed`).

use std::collections::BTreeMap;

use crate::cpuset::CpuSet;
use crate::gpu::{self, Gpu};
use crate::policy::{BindPolicy, Effective, Level, MapBy};
use crate::topology::{Kind, Topology};

/// Why a job's ranks cannot be bound as asked on this node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    #[error("the topology's CPUs ({topology}) and the CPUs dpm may use here ({allowed}) have none in common")]
    NoCpus { topology: String, allowed: String },
    #[error("-bind-to {level}: this node's topology has no {level} among the CPUs dpm may use ({allowed})")]
    NoObjects { level: &'static str, allowed: String },
    #[error("-bind-to user: CPUs {list} are not among the CPUs dpm may use here ({allowed})")]
    UserOutside { list: String, allowed: String },
    #[error("--gpus-per-rank {asked}: this node's topology shows no GPU (hwloc found no cuda, nvml, rsmi or ze device)")]
    NoGpus { asked: u32 },
    #[error("--gpus-per-rank {asked}: this node has only {present} GPU(s)")]
    TooFewGpus { asked: u32, present: usize },
    /// A rank's unit (`:pe=M` cores, `--cpus-per-rank M` hardware threads)
    /// is larger than the node (prterun: "mapping too low").
    #[error("{what} {asked}: this node has only {present} {level}(s) dpm may use (CPUs {allowed}); add :overload-allowed to -bind-to to share them")]
    TooFewCpus { what: &'static str, asked: u32, present: usize, level: &'static str, allowed: String },
    /// `ppr:N:OBJ` with more ranks per object than it has units to bind
    /// them to (prterun: "too many procs").
    #[error("-map-by ppr:{per}:{group}: a {group} here has only {units} {level}(s) to bind ranks to; add :oversubscribe to -map-by (or :overload-allowed to -bind-to) to share them, or -bind-to none")]
    PprTooMany { per: u32, group: &'static str, units: usize, level: &'static str },
}

/// Where one rank runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankBinding {
    /// Its CPUs (`None`: not bound).
    pub cpus: Option<CpuSet>,
    /// The NUMA nodes its memory is bound to (`None`: not bound).
    pub mems: Option<CpuSet>,
    /// Indices into [`Binder::gpus`].
    pub gpus: Vec<usize>,
    /// Variables for its environment (`CUDA_VISIBLE_DEVICES`…).
    pub env: Vec<(String, String)>,
    /// What `--report-bindings` says after "Rank N ": `bound to
    /// package[0][core:L0] (cpus 0)`, or Open MPI's words for none.
    pub report: String,
}

/// A job's ranks on this node, in their local order, and at most one
/// warning about sharing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobBindings {
    pub ranks: Vec<RankBinding>,
    pub warnings: Vec<String>,
}

/// A node's binding state (see the module documentation).
#[derive(Clone, Debug)]
pub struct Binder {
    topo: Topology,
    allowed: CpuSet,
    allowed_mems: Option<CpuSet>,
    held: BTreeMap<u32, u32>,
    gpus: Vec<Gpu>,
    gpu_held: Vec<u32>,
}

impl Binder {
    /// `affinity`: the CPUs this daemon may use (its own mask); `mems`: the
    /// NUMA nodes it may use, if known (`Mems_allowed_list`).
    pub fn new(topo: Topology, affinity: &CpuSet, mems: Option<CpuSet>) -> Result<Binder, BindError> {
        let allowed = topo.pus().intersection(affinity);
        if allowed.is_empty() {
            return Err(BindError::NoCpus { topology: topo.pus().to_list(), allowed: affinity.to_list() });
        }
        let gpus = gpu::gpus(&topo);
        let gpu_held = vec![0; gpus.len()];
        Ok(Binder { topo, allowed, allowed_mems: mems, held: BTreeMap::new(), gpus, gpu_held })
    }

    pub fn allowed(&self) -> &CpuSet {
        &self.allowed
    }

    pub fn gpus(&self) -> &[Gpu] {
        &self.gpus
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// How many live ranks hold CPU `cpu`.
    pub fn holders(&self, cpu: u32) -> u32 {
        self.held.get(&cpu).copied().unwrap_or(0)
    }

    /// The objects of `kind` with the allowed part of their CPUs, empty ones left out.
    fn restricted(&self, kind: Kind) -> Vec<CpuSet> {
        self.topo.of_kind(kind).map(|(_, o)| o.cpuset.intersection(&self.allowed)).filter(|s| !s.is_empty()).collect()
    }

    /// The units of a policy, in mapping order (empty: ranks are not bound).
    pub fn units(&self, policy: &BindPolicy) -> Result<Vec<CpuSet>, BindError> {
        let allowed = || self.allowed.to_list();
        let (level, count) = match policy.effective() {
            Effective::None => return Ok(Vec::new()),
            Effective::RoundRobin => return Ok(self.allowed.iter().map(CpuSet::single).collect()),
            Effective::User(lists) => {
                return lists
                    .iter()
                    .map(|l| {
                        let r = l.intersection(&self.allowed);
                        if r.is_empty() {
                            Err(BindError::UserOutside { list: l.to_list(), allowed: allowed() })
                        } else {
                            Ok(r)
                        }
                    })
                    .collect()
            }
            Effective::Objects { level, count } => (level, count as usize),
        };
        let objs = self.restricted(level.kind());
        if objs.is_empty() {
            if policy.if_supported {
                return Ok(Vec::new());
            }
            return Err(BindError::NoObjects { level: level.name(), allowed: allowed() });
        }
        let chunks = |members: &[CpuSet]| -> Vec<CpuSet> {
            members
                .chunks(count)
                .map(|c| {
                    let mut u = CpuSet::new();
                    c.iter().for_each(|s| u.union_with(s));
                    u
                })
                .collect()
        };
        let grouped = |group: Level| -> Vec<Vec<CpuSet>> {
            self.restricted(group.kind()).iter().map(|g| objs.iter().filter(|o| o.first().is_some_and(|c| g.contains(c))).cloned().collect()).collect()
        };
        // Requests that cannot be met are refused unless sharing is asked for.
        if !policy.overload_allowed {
            let what = if policy.pe.is_some() { Some("-map-by :pe=") } else { policy.cpus_per_rank.map(|_| "--cpus-per-rank") };
            if let Some(what) = what.filter(|_| count > objs.len()) {
                return Err(BindError::TooFewCpus { what, asked: count as u32, present: objs.len(), level: level.name(), allowed: allowed() });
            }
            if let MapBy::Ppr { per, level: group } = policy.map {
                // Only where the binding's objects lie inside the group: a
                // binding above it (`ppr:2:core` bound to the socket) binds
                // each rank to the object that holds its group, shared by design.
                let groups = self.restricted(group.kind());
                let fewest = grouped(group)
                    .iter()
                    .zip(groups.iter())
                    .filter(|(m, g)| m.iter().all(|o| o.is_subset(g)))
                    .map(|(m, _)| chunks(m).len())
                    .filter(|&n| n > 0)
                    .min();
                if let Some(units) = fewest.filter(|&u| per as usize > u) {
                    return Err(BindError::PprTooMany { per, group: group.name(), units, level: level.name() });
                }
            }
        }
        Ok(match policy.map {
            MapBy::Ppr { per, level: group } => {
                let mut units = Vec::new();
                for (g, members) in self.restricted(group.kind()).iter().zip(grouped(group)) {
                    if members.is_empty() {
                        // The binding's object holds the group: each of its
                        // ranks is bound to that object.
                        if let Some(o) = objs.iter().find(|o| o.intersects(g)) {
                            units.extend(std::iter::repeat_n(o.clone(), per as usize));
                        }
                    } else {
                        units.extend(chunks(&members).into_iter().take(per as usize));
                    }
                }
                units
            }
            MapBy::Object(group) => {
                let groups: Vec<Vec<CpuSet>> = grouped(group).iter().map(|m| chunks(m)).filter(|c| !c.is_empty()).collect();
                if groups.iter().all(|g| g.len() <= 1) {
                    chunks(&objs)
                } else {
                    // Round-robin over the groups: the first unit of each, then the second…
                    let mut units = Vec::new();
                    for i in 0..groups.iter().map(Vec::len).max().unwrap_or(0) {
                        units.extend(groups.iter().filter_map(|g| g.get(i).cloned()));
                    }
                    units
                }
            }
            MapBy::Slot => chunks(&objs),
        })
    }

    /// Bind `n` ranks of a job (`spawned`: take the least held units).
    pub fn bind(&mut self, policy: &BindPolicy, n: usize, spawned: bool) -> Result<JobBindings, BindError> {
        if policy.gpus_per_rank > 0 {
            if self.gpus.is_empty() {
                return Err(BindError::NoGpus { asked: policy.gpus_per_rank });
            }
            if policy.gpus_per_rank as usize > self.gpus.len() {
                return Err(BindError::TooFewGpus { asked: policy.gpus_per_rank, present: self.gpus.len() });
            }
        }
        let units = self.units(policy)?;
        let level = match policy.effective() {
            Effective::Objects { level, .. } => Some(level),
            _ => None,
        };
        // A user's lists may overlap on purpose: only reusing one is sharing.
        let user = matches!(policy.effective(), Effective::User(_));
        let mut out = JobBindings::default();
        let (mut shared, mut shared_gpus) = (0, 0);
        // A first job takes the units in mapping order, those no live rank
        // holds first (another run of a boot holds some); with none held,
        // that is the mapping order itself. A user's lists stay as given.
        let order: Vec<usize> = if user { (0..units.len()).collect() } else { self.free_first(&units) };
        for i in 0..n {
            let cpus = if units.is_empty() {
                None
            } else {
                let pick = if spawned {
                    let load = |u: &CpuSet| (u.iter().map(|c| self.holders(c)).max().unwrap_or(0), u.iter().map(|c| self.holders(c)).sum::<u32>());
                    (0..units.len()).min_by_key(|&k| (load(&units[k]), k)).unwrap_or(0)
                } else {
                    order[i % order.len()]
                };
                let unit = units[pick].clone();
                let reused = if user && !spawned { i >= units.len() } else { unit.iter().any(|c| self.holders(c) > 0) };
                if reused {
                    shared += 1;
                }
                for c in unit.iter() {
                    *self.held.entry(c).or_default() += 1;
                }
                Some(unit)
            };
            let mems = policy.membind.and_then(|(mlevel, count)| self.membind(mlevel, count as usize, cpus.as_ref(), i));
            let gpus = self.pick_gpus(policy.gpus_per_rank as usize, cpus.as_ref(), &mut shared_gpus);
            let env = gpu::env(&gpus.iter().map(|&g| &self.gpus[g]).collect::<Vec<_>>());
            let report = self.report(cpus.as_ref(), mems.as_ref(), &gpus, level);
            out.ranks.push(RankBinding { cpus, mems, gpus, env, report });
        }
        if shared > 0 && !policy.overload_allowed {
            out.warnings.push(format!(
                "{shared} of {n} rank(s) share CPUs with other live ranks here ({} binding unit(s) among CPUs {}): oversubscribed",
                units.len(),
                self.allowed.to_list()
            ));
        }
        if shared_gpus > 0 {
            out.warnings.push(format!("{shared_gpus} of {n} rank(s) share GPUs with other live ranks here ({} GPU(s)): oversubscribed", self.gpus.len()));
        }
        Ok(out)
    }

    /// The indices of `units`: those none of whose CPUs a live rank holds,
    /// in mapping order, then the rest, least held first (stable).
    fn free_first(&self, units: &[CpuSet]) -> Vec<usize> {
        let load = |u: &CpuSet| u.iter().map(|c| self.holders(c)).max().unwrap_or(0);
        let mut order: Vec<usize> = (0..units.len()).collect();
        order.sort_by_key(|&k| load(&units[k]));
        order
    }

    /// The NUMA nodes of the `level` objects a rank's CPUs touch (an
    /// unbound rank: the i-th group of `count` such objects).
    fn membind(&self, level: Level, count: usize, cpus: Option<&CpuSet>, i: usize) -> Option<CpuSet> {
        let objs: Vec<_> = self.topo.of_kind(level.kind()).map(|(_, o)| o).filter(|o| o.cpuset.intersects(&self.allowed) || o.cpuset.is_empty()).collect();
        if objs.is_empty() {
            return None;
        }
        let mut nodes = CpuSet::new();
        match cpus {
            Some(c) => objs.iter().filter(|o| o.cpuset.intersects(c)).for_each(|o| nodes.union_with(&o.nodeset)),
            None => {
                let groups = objs.len().div_ceil(count);
                let g = i % groups;
                objs.iter().skip(g * count).take(count).for_each(|o| nodes.union_with(&o.nodeset));
            }
        }
        if let Some(allowed) = &self.allowed_mems {
            nodes = nodes.intersection(allowed);
        }
        (!nodes.is_empty()).then_some(nodes)
    }

    fn pick_gpus(&mut self, n: usize, cpus: Option<&CpuSet>, shared: &mut usize) -> Vec<usize> {
        if n == 0 {
            return Vec::new();
        }
        let near = |g: &Gpu| cpus.is_none_or(|c| g.near.intersects(c));
        let mut order: Vec<usize> = (0..self.gpus.len()).collect();
        order.sort_by_key(|&g| (self.gpu_held[g], !near(&self.gpus[g]), g));
        let picked: Vec<usize> = order.into_iter().take(n).collect();
        if picked.iter().any(|&g| self.gpu_held[g] > 0) {
            *shared += 1;
        }
        for &g in &picked {
            self.gpu_held[g] += 1;
        }
        let mut picked = picked;
        picked.sort();
        picked
    }

    /// Give a rank's CPUs and GPUs back (its exit).
    pub fn release(&mut self, b: &RankBinding) {
        for c in b.cpus.iter().flat_map(|s| s.iter()) {
            if let Some(h) = self.held.get_mut(&c) {
                *h = h.saturating_sub(1);
                if *h == 0 {
                    self.held.remove(&c);
                }
            }
        }
        for &g in &b.gpus {
            if let Some(h) = self.gpu_held.get_mut(g) {
                *h = h.saturating_sub(1);
            }
        }
    }

    /// Take a rank's CPUs and GPUs again (undoing [`Binder::release`]: a
    /// claimed pooled job that could not be bound anew keeps its own).
    pub fn hold(&mut self, b: &RankBinding) {
        for c in b.cpus.iter().flat_map(|s| s.iter()) {
            *self.held.entry(c).or_default() += 1;
        }
        for &g in &b.gpus {
            if let Some(h) = self.gpu_held.get_mut(g) {
                *h += 1;
            }
        }
    }

    /// Open MPI's `--report-bindings` wording, with the CPU list added.
    fn report(&self, cpus: Option<&CpuSet>, mems: Option<&CpuSet>, gpus: &[usize], level: Option<Level>) -> String {
        let mut s = match cpus {
            None => "is not bound (or bound to all available processors)".to_string(),
            Some(c) => {
                let by_thread = level.is_none_or(|l| l == Level::Hwthread);
                let (inner, kind) = if by_thread { ("hwt", Kind::Pu) } else { ("core", Kind::Core) };
                let mut parts = Vec::new();
                let mut packages: Vec<(u32, CpuSet)> = self.topo.of_kind(Kind::Package).map(|(_, o)| (o.logical, o.cpuset.clone())).collect();
                if packages.is_empty() {
                    packages.push((0, self.topo.pus()));
                }
                for (p, pcpus) in packages {
                    let mine = c.intersection(&pcpus);
                    if mine.is_empty() {
                        continue;
                    }
                    let objs: CpuSet = self.topo.of_kind(kind).filter(|(_, o)| o.cpuset.intersects(&mine)).map(|(_, o)| o.logical).collect();
                    parts.push(format!("package[{p}][{inner}:L{}]", objs.to_list()));
                }
                format!("bound to {} (cpus {})", parts.join(","), c.to_list())
            }
        };
        if let Some(m) = mems {
            s.push_str(&format!(" memory on NUMA node(s) {}", m.to_list()));
        }
        if !gpus.is_empty() {
            let names: Vec<&str> = gpus.iter().map(|&g| self.gpus[g].name.as_str()).collect();
            s.push_str(&format!(" gpus {}", names.join(",")));
        }
        s
    }
}
