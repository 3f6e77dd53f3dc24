//! A spawn's *shape*: what a pooled job must match to be claimed
//! (`run::warm` decides what to pool, `run::pool` keeps the jobs; both name
//! jobs by their shape, and neither needs the other for it).

use std::sync::Arc;

use dpm_kvs::{JobId, KvsDesign};
use dpm_proto::{PmiMode, SpawnCommand};

use super::{RunEffects, Settings};
use crate::kvs_root::KvsRoot;
use crate::plan::ProgramId;

/// The spawn info key that asks for (`true`) or refuses (`false`) warm spawn.
pub const WARM_INFO_KEY: &str = "dpm_warm";
/// What a pooled job may write before its claim, all ranks and streams
/// together. MPICH writes nothing before `MPI_Init` returns; a program that
/// prints that much before it is anybody's child is not a good pool member,
/// and holding more would let an unclaimed job grow the launcher without
/// bound. At the limit the job is dropped from the pool (killed), its held
/// output discarded: a claimed job's output is never lost.
pub const MAX_HELD_OUTPUT: usize = 64 * 1024;
/// What a pooled job must match to be claimed: the spawn's commands
/// (program, arguments, `maxprocs`, info — `host`/`hosts`, `wdir`, `path`,
/// `env` among it — without [`WARM_INFO_KEY`]) and everything else the
/// children's start depends on ([`Context`]). Not the spawning job: an MPICH
/// child learns nothing of its parent before the parked
/// `PARENT_ROOT_PORT_NAME` get (PMI-1: `PMI_SPAWNED=1`; PMI-2: MPICH's,
/// Slurm's and dpm's clients only test `spawner-jobid` for presence and
/// keep no copy of it), so any job of any run may claim it (`pool`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Shape {
    commands: Vec<SpawnCommand>,
    /// What each command's program is now (`spawn::program_ids`, in the
    /// driver's [`RunEffects::files`]):
    /// the same path rebuilt is another shape (issue 26: a kept pool ran
    /// the old binary). Libraries found through `LD_LIBRARY_PATH` and the
    /// like are covered by the environment in the [`Context`]; a shared
    /// library rebuilt in place is not (see `docs/warm-spawn.md`).
    programs: Vec<Option<ProgramId>>,
    context: Arc<Context>,
}

/// What a spawned child's start depends on besides the spawn's commands:
/// the environment and directory its spawn is planned in (the run's
/// environment after `-genv`/`-genvlist`/`-genvnone`, its working
/// directory, its host and nodes), the PMI flavour, the universe size and
/// the KVS design the job inherits. Two runs whose children would start
/// differently never share a shape.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Context {
    env: Vec<(String, String)>,
    cwd: std::path::PathBuf,
    host: String,
    nodes: Vec<String>,
    pmi_mode: PmiMode,
    universe_size: i64,
    design: KvsDesign,
}

impl Shape {
    /// The shape of a spawn in `context`, and its [`WARM_INFO_KEY`] choice (`None`: not said).
    pub(super) fn of(context: Arc<Context>, commands: &[SpawnCommand], programs: Vec<Option<ProgramId>>) -> (Shape, Option<bool>) {
        let mut choice = None;
        let commands = commands
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.info.retain(|(k, v)| {
                    if k != WARM_INFO_KEY {
                        return true;
                    }
                    match v.trim().to_ascii_lowercase().as_str() {
                        "true" | "1" | "yes" => choice = Some(choice.unwrap_or(true)),
                        _ => choice = Some(false),
                    }
                    false
                });
                c
            })
            .collect();
        (Shape { commands, programs, context }, choice)
    }

    /// Under PMIx a child's namespace is registered with its parent's: only
    /// the simple PMI flavours' jobs may change parents between runs.
    pub(super) fn movable(&self) -> bool {
        self.context.pmi_mode != PmiMode::Pmix
    }

    /// The KVS design the shape's jobs are spawned with (its parent may be gone).
    pub(super) fn design(&self) -> KvsDesign {
        self.context.design
    }

    pub(super) fn commands(&self) -> &[SpawnCommand] {
        &self.commands
    }

    pub(super) fn describe(&self, parent: JobId) -> String {
        let exes: Vec<&str> = self.commands.iter().map(|c| c.exe.as_str()).collect();
        let n: u64 = self.commands.iter().map(|c| u64::from(c.maxprocs)).sum();
        format!("'{}' x{n} from {parent}", dpm_pmi::sanitize::escape(&exes.join(",")))
    }
}

/// The shape of a spawn by `parent`, and its [`WARM_INFO_KEY`] choice.
pub(super) fn shape(settings: &Settings, kvs: &KvsRoot, fx: &mut dyn RunEffects, parent: JobId, commands: &[SpawnCommand]) -> (Shape, Option<bool>) {
    let spawn = &settings.spawn;
    let context = Context {
        env: spawn.base_env.clone(),
        cwd: spawn.cwd.clone(),
        host: spawn.host.clone(),
        nodes: spawn.nodes.clone(),
        pmi_mode: settings.pmi_mode,
        universe_size: settings.universe_size,
        design: kvs.design(parent).unwrap_or_default(),
    };
    let programs = crate::spawn::program_ids(spawn, fx.files(), commands);
    Shape::of(Arc::new(context), commands, programs)
}
