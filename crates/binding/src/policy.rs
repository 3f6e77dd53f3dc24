//! What the user asked for: `-bind-to`, `-map-by`, `--cpus-per-rank`,
//! `-membind`, `--report-bindings`, `--gpus-per-rank` — parsed here (Hydra's
//! and Open MPI's grammars) into one [`BindPolicy`] that travels with every
//! launch to the node daemons, which apply it to their own topology.

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::topology::Kind;

/// The most objects, CPUs or GPUs a rank may be given by a count.
pub const MAX_COUNT: u32 = 4096;
/// The most cpu lists in a `user:` binding.
pub const MAX_USER_LISTS: usize = 4096;

/// A level of the topology that ranks are bound to or mapped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Level {
    Hwthread,
    Core,
    L1,
    L2,
    L3,
    Numa,
    Socket,
    /// The whole node (Hydra's `machine`, Open MPI's `board`).
    Board,
}

impl Level {
    pub fn kind(self) -> Kind {
        match self {
            Level::Hwthread => Kind::Pu,
            Level::Core => Kind::Core,
            Level::L1 => Kind::L1,
            Level::L2 => Kind::L2,
            Level::L3 => Kind::L3,
            Level::Numa => Kind::Numa,
            Level::Socket => Kind::Package,
            Level::Board => Kind::Machine,
        }
    }

    fn parse(name: &str) -> Option<Level> {
        Some(match name {
            "hwthread" | "hwt" | "pu" | "thread" | "hwthreads" => Level::Hwthread,
            "core" | "cores" => Level::Core,
            "l1cache" | "l1" | "l1dcache" | "l1ucache" => Level::L1,
            "l2cache" | "l2" | "l2dcache" | "l2ucache" => Level::L2,
            "l3cache" | "l3" | "l3dcache" | "l3ucache" => Level::L3,
            "numa" | "numanode" => Level::Numa,
            "socket" | "package" | "sockets" => Level::Socket,
            "board" | "machine" => Level::Board,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Level::Hwthread => "hwthread",
            Level::Core => "core",
            Level::L1 => "l1cache",
            Level::L2 => "l2cache",
            Level::L3 => "l3cache",
            Level::Numa => "numa",
            Level::Socket => "socket",
            Level::Board => "board",
        }
    }
}

/// `-bind-to`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BindTo {
    None,
    /// `count` objects of `level` per rank (`core:2`).
    Objects {
        level: Level,
        count: u32,
    },
    /// Hydra's `rr`: one CPU per rank, in the operating system's numbering.
    RoundRobin,
    /// Hydra's `user:0+1,2`: rank i gets list i (cyclically).
    User(Vec<CpuSet>),
}

/// `-map-by`: the order in which ranks take the binding's objects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MapBy {
    /// The objects in the topology's order (Hydra's and Open MPI's default);
    /// also `node` (which says how ranks go to nodes; within one, slot).
    Slot,
    /// Round-robin over the objects of `level`: rank 0 in the first, rank 1
    /// in the second… (each rank's binding inside the one it lands in).
    Object(Level),
    /// Open MPI's `ppr:N:OBJ`: N ranks in each object of `level`, in turn.
    Ppr { per: u32, level: Level },
}

/// Everything about where a rank's CPUs, memory and GPUs are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindPolicy {
    /// `-bind-to` as given (`None`: not given).
    pub bind: Option<BindTo>,
    pub map: MapBy,
    /// `:pe=M` of `-map-by`: M cores (hwthreads under `-bind-to hwthread`) per rank.
    pub pe: Option<u32>,
    /// `--cpus-per-rank M`: M hardware threads per rank (Slurm's `--cpus-per-task`).
    pub cpus_per_rank: Option<u32>,
    /// `-membind LEVEL[:N]`: memory on the NUMA nodes of those objects.
    pub membind: Option<(Level, u32)>,
    /// Open MPI's `:overload-allowed`: sharing CPUs is expected, no warning.
    pub overload_allowed: bool,
    /// Open MPI's `:if-supported`: a level the node lacks leaves ranks unbound.
    pub if_supported: bool,
    /// `--report-bindings`.
    pub report: bool,
    /// `--gpus-per-rank N` / `-gpus-per-proc N`.
    pub gpus_per_rank: u32,
}

impl Default for BindPolicy {
    fn default() -> Self {
        BindPolicy {
            bind: None,
            map: MapBy::Slot,
            pe: None,
            cpus_per_rank: None,
            membind: None,
            overload_allowed: false,
            if_supported: false,
            report: false,
            gpus_per_rank: 0,
        }
    }
}

/// A value the grammar does not take; the text says what would be.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

fn count(text: &str, what: &str) -> Result<u32, PolicyError> {
    text.trim().parse().ok().filter(|n| (1..=MAX_COUNT).contains(n)).ok_or_else(|| PolicyError(format!("'{text}' is not a {what} (1 to {MAX_COUNT})")))
}

const LEVELS: &str = "hwthread, core, l1cache, l2cache, l3cache, numa, socket, board";

/// The effective binding of a policy: what each rank is bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effective {
    None,
    Objects { level: Level, count: u32 },
    RoundRobin,
    User(Vec<CpuSet>),
}

impl BindPolicy {
    /// `-bind-to VALUE` (also `--bind-to`).
    pub fn set_bind(&mut self, value: &str) -> Result<(), PolicyError> {
        let v = value.trim().to_ascii_lowercase();
        if let Some(lists) = v.strip_prefix("user:") {
            let lists: Vec<CpuSet> =
                lists.split(',').map(CpuSet::parse_list).collect::<Result<_, _>>().map_err(|e| PolicyError(format!("user binding: {e}")))?;
            if lists.len() > MAX_USER_LISTS {
                return Err(PolicyError(format!("user binding: more than {MAX_USER_LISTS} lists")));
            }
            self.bind = Some(BindTo::User(lists));
            return Ok(());
        }
        let mut parts = v.split(':');
        let head = parts.next().unwrap_or("");
        let mut n = 1;
        for q in parts {
            match q {
                "overload-allowed" => self.overload_allowed = true,
                "if-supported" => self.if_supported = true,
                "report" => self.report = true,
                _ => n = count(q, "count of objects per rank")?,
            }
        }
        self.bind = Some(match head {
            "none" => BindTo::None,
            "rr" => BindTo::RoundRobin,
            _ => match Level::parse(head) {
                Some(level) => BindTo::Objects { level, count: n },
                None => return Err(PolicyError(format!("'{value}': bind to none, {LEVELS} (with :N), rr or user:LIST"))),
            },
        });
        Ok(())
    }

    /// `-map-by VALUE`; `Ok(true)` when it maps ranks round-robin over the
    /// nodes (`node`), which is the launcher's business.
    pub fn set_map(&mut self, value: &str) -> Result<bool, PolicyError> {
        let v = value.trim().to_ascii_lowercase();
        let mut parts: Vec<&str> = v.split(':').collect();
        // Modifiers: `pe=M`, and `oversubscribe`/`overload-allowed`: ranks
        // may share CPUs (`ppr` with more ranks than an object's units;
        // without it such a request is refused: `place`).
        let mut pe = None;
        let mut share = false;
        parts.retain(|p| {
            if let Some(m) = p.strip_prefix("pe=") {
                pe = Some(m.to_string());
                false
            } else if matches!(*p, "oversubscribe" | "overload-allowed") {
                share = true;
                false
            } else {
                true
            }
        });
        self.overload_allowed |= share;
        if let Some(m) = pe {
            self.pe = Some(count(&m, "count of cores per rank (pe=)")?);
        }
        let mut by_node = false;
        self.map = match parts.as_slice() {
            ["slot"] | [] => MapBy::Slot,
            ["node"] => {
                by_node = true;
                MapBy::Slot
            }
            ["ppr", n, obj] => match Level::parse(obj) {
                Some(level) => MapBy::Ppr { per: count(n, "count of ranks per object")?, level },
                None => return Err(PolicyError(format!("'{value}': ppr:N:OBJ takes OBJ from {LEVELS}"))),
            },
            [obj] => match Level::parse(obj) {
                Some(level) => MapBy::Object(level),
                None => return Err(PolicyError(format!("'{value}': map by slot, node, {LEVELS} or ppr:N:OBJ[:pe=M]"))),
            },
            _ => return Err(PolicyError(format!("'{value}': map by slot, node, {LEVELS} or ppr:N:OBJ[:pe=M]"))),
        };
        Ok(by_node)
    }

    /// `-membind VALUE`: Hydra's objects (`none`, or a level with `:N`).
    pub fn set_membind(&mut self, value: &str) -> Result<(), PolicyError> {
        let v = value.trim().to_ascii_lowercase();
        let (head, n) = v.split_once(':').map_or((v.as_str(), None), |(h, n)| (h, Some(n)));
        if head == "none" && n.is_none() {
            self.membind = None;
            return Ok(());
        }
        let level = Level::parse(head).ok_or_else(|| PolicyError(format!("'{value}': bind memory to none or {LEVELS} (with :N)")))?;
        self.membind = Some((level, n.map(|n| count(n, "count of objects")).transpose()?.unwrap_or(1)));
        Ok(())
    }

    pub fn set_cpus_per_rank(&mut self, value: &str) -> Result<(), PolicyError> {
        self.cpus_per_rank = Some(count(value, "count of CPUs per rank")?);
        Ok(())
    }

    pub fn set_gpus_per_rank(&mut self, value: &str) -> Result<(), PolicyError> {
        // Hydra's default, `auto`, gives each rank what CUDA would: no variable.
        if value.eq_ignore_ascii_case("auto") {
            self.gpus_per_rank = 0;
            return Ok(());
        }
        self.gpus_per_rank = match value.trim().parse::<u32>() {
            Ok(0) => 0,
            _ => count(value, "count of GPUs per rank")?,
        };
        Ok(())
    }

    /// Refuse combinations that contradict each other (called once the
    /// whole command line is read).
    pub fn check(&self) -> Result<(), PolicyError> {
        if self.pe.is_some() && self.cpus_per_rank.is_some() {
            return Err(PolicyError("--cpus-per-rank and -map-by ...:pe= both say how many CPUs a rank gets; give one".into()));
        }
        if matches!(self.bind, Some(BindTo::User(_) | BindTo::RoundRobin | BindTo::None)) && self.pe.or(self.cpus_per_rank).is_some() {
            return Err(PolicyError("--cpus-per-rank and :pe= need a binding to objects (or none given), not -bind-to none, rr or user".into()));
        }
        Ok(())
    }

    /// Whether ranks get bound at all (or GPUs, memory, a report).
    pub fn is_active(&self) -> bool {
        self.effective() != Effective::None || self.membind.is_some() || self.gpus_per_rank > 0 || self.report
    }

    /// What each rank is bound to. Without `-bind-to`: nothing (Hydra's
    /// default), unless a count of CPUs per rank was asked for (`:pe=M`:
    /// cores, `--cpus-per-rank`: hardware threads) or ranks were mapped
    /// `ppr` (Open MPI then binds each to a core).
    pub fn effective(&self) -> Effective {
        match &self.bind {
            Some(BindTo::None) => Effective::None,
            Some(BindTo::RoundRobin) => Effective::RoundRobin,
            Some(BindTo::User(lists)) => Effective::User(lists.clone()),
            Some(BindTo::Objects { level, count }) => {
                // pe=M counts cores, or hwthreads when bound to hwthreads.
                let many = self.pe.or(self.cpus_per_rank);
                match (level, many) {
                    (Level::Hwthread | Level::Core, Some(m)) => Effective::Objects { level: *level, count: m },
                    _ => Effective::Objects { level: *level, count: *count },
                }
            }
            None => match (self.pe, self.cpus_per_rank, &self.map) {
                (Some(m), _, _) => Effective::Objects { level: Level::Core, count: m },
                (_, Some(m), _) => Effective::Objects { level: Level::Hwthread, count: m },
                (_, _, MapBy::Ppr { .. }) => Effective::Objects { level: Level::Core, count: 1 },
                _ => Effective::None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(v: &str) -> Result<BindPolicy, PolicyError> {
        let mut p = BindPolicy::default();
        p.set_bind(v).map(|_| p)
    }

    #[test]
    fn hydra_and_open_mpi_bind_names() {
        assert_eq!(bind("core").unwrap().effective(), Effective::Objects { level: Level::Core, count: 1 });
        assert_eq!(bind("CORE:2").unwrap().effective(), Effective::Objects { level: Level::Core, count: 2 });
        assert_eq!(bind("socket").unwrap().effective(), Effective::Objects { level: Level::Socket, count: 1 });
        assert_eq!(bind("package").unwrap().effective(), Effective::Objects { level: Level::Socket, count: 1 });
        assert_eq!(bind("l2cache:3").unwrap().effective(), Effective::Objects { level: Level::L2, count: 3 });
        assert_eq!(bind("machine").unwrap().effective(), Effective::Objects { level: Level::Board, count: 1 });
        assert_eq!(bind("none").unwrap().effective(), Effective::None);
        assert_eq!(bind("rr").unwrap().effective(), Effective::RoundRobin);
        let user = bind("user:0+1,1").unwrap().effective();
        assert_eq!(user, Effective::User(vec![CpuSet::parse_list("0-1").unwrap(), CpuSet::single(1)]));
        let p = bind("core:overload-allowed").unwrap();
        assert!(p.overload_allowed);
        for bad in ["", "cpu", "core:0", "core:x", "user:", "user:1-0", "gpu", "core:99999"] {
            assert!(bind(bad).is_err(), "{bad}");
        }
        assert_eq!(BindPolicy::default().effective(), Effective::None, "Hydra's default: no binding");
        assert!(!BindPolicy::default().is_active());
    }

    #[test]
    fn open_mpi_map_grammar() {
        let mut p = BindPolicy::default();
        assert_eq!(p.set_map("node"), Ok(true));
        assert_eq!(p.set_map("socket"), Ok(false));
        assert_eq!(p.map, MapBy::Object(Level::Socket));
        p.set_map("ppr:2:socket:pe=3").unwrap();
        assert_eq!((p.map.clone(), p.pe), (MapBy::Ppr { per: 2, level: Level::Socket }, Some(3)));
        assert_eq!(p.effective(), Effective::Objects { level: Level::Core, count: 3 }, "pe=M binds M cores");
        let mut q = BindPolicy::default();
        q.set_map("ppr:1:numa").unwrap();
        assert_eq!(q.effective(), Effective::Objects { level: Level::Core, count: 1 });
        for bad in ["ppr:0:core", "ppr:2", "ppr:2:cpu", "bogus", "core:pe=0", "a:b:c:d"] {
            assert!(BindPolicy::default().set_map(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cpus_per_rank_counts_hwthreads_and_conflicts_with_pe() {
        let mut p = BindPolicy::default();
        p.set_cpus_per_rank("4").unwrap();
        assert_eq!(p.effective(), Effective::Objects { level: Level::Hwthread, count: 4 });
        p.set_bind("core").unwrap();
        assert_eq!(p.effective(), Effective::Objects { level: Level::Core, count: 4 });
        p.check().unwrap();
        p.set_map("slot:pe=2").unwrap();
        assert!(p.check().is_err());
        let mut q = BindPolicy::default();
        q.set_bind("none").unwrap();
        q.set_cpus_per_rank("2").unwrap();
        assert!(q.check().is_err());
        assert!(BindPolicy::default().set_cpus_per_rank("0").is_err());
    }

    #[test]
    fn membind_and_gpus() {
        let mut p = BindPolicy::default();
        p.set_membind("numa").unwrap();
        assert_eq!(p.membind, Some((Level::Numa, 1)));
        p.set_membind("none").unwrap();
        assert_eq!(p.membind, None);
        assert!(p.set_membind("user:0").is_err());
        p.set_gpus_per_rank("2").unwrap();
        assert_eq!(p.gpus_per_rank, 2);
        p.set_gpus_per_rank("auto").unwrap();
        assert_eq!(p.gpus_per_rank, 0);
        assert!(p.set_gpus_per_rank("-1").is_err());
    }
}
