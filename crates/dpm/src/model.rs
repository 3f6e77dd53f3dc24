//! `dpm model`: the command line of the startup model (the logic is
//! `dpm_cluster::model`, on dpm's own reactors). The default calibration is
//! `DPM_CALIBRATION`'s file if set, else the one embedded at build time.

use std::path::PathBuf;

use dpm_cluster::calibration::Calibration;
use dpm_cluster::model::{answer, render, Query, FULL_RANKS};
use dpm_cluster::sim::{Bootstrap, Scenario, SimError, Workload};
use dpm_kvs::KvsDesign;
use dpm_launcher::error::UsageError;
use dpm_launcher::Error;

#[derive(clap::Args)]
pub struct ModelArgs {
    /// Nodes of the cluster.
    #[arg(long)]
    nodes: usize,
    /// Ranks per node.
    #[arg(long)]
    ppn: u32,
    /// The KVS design to predict (allgather, tree, dkvs, direct, auto), or
    /// `all` to compare them (the default compares all, predicting auto).
    #[arg(long, value_name = "D|all")]
    kvs: Option<String>,
    /// The tree's fan-out, or `all` to compare powers of two (the default
    /// compares them, predicting 32).
    #[arg(long, value_name = "F|all")]
    tree_fanout: Option<String>,
    /// How the daemons start: fork, ssh or slurm.
    #[arg(long, default_value = "ssh")]
    bootstrap: String,
    /// The daemons are up already (`dpm boot`).
    #[arg(long)]
    booted: bool,
    /// hello, pmi-all, pmi-neighbours or spawn-loop.
    #[arg(long, default_value = "hello")]
    workload: String,
    /// Cores per node (default: one per rank and one for the daemon).
    #[arg(long, default_value_t = 0)]
    cores: usize,
    /// The nodes are virtual nodes of one host (`--cores` is the host's).
    #[arg(long)]
    one_host: bool,
    /// Simulate in full up to this many ranks; above, extrapolate from
    /// smaller simulations (slower and more memory when raised).
    #[arg(long, value_name = "N", default_value_t = FULL_RANKS)]
    sim_ranks: usize,
    /// A calibration file (default: DPM_CALIBRATION, else the one built in).
    #[arg(long, value_name = "FILE")]
    calibration: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn usage(e: impl std::fmt::Display) -> Error {
    Error::Usage(UsageError::new(e.to_string()))
}

/// `None` for `all` (or nothing), else the parsed value.
fn choice<T>(arg: &Option<String>, parse: impl Fn(&str) -> Result<T, Error>) -> Result<Option<T>, Error> {
    match arg.as_deref() {
        None | Some("all") => Ok(None),
        Some(v) => parse(v).map(Some),
    }
}

pub fn command(a: ModelArgs) -> Result<i32, Error> {
    let cal = match &a.calibration {
        Some(path) => Calibration::from_file(path).map_err(usage)?,
        None => calibration().map_err(usage)?,
    };
    if a.nodes == 0 || a.ppn == 0 || a.sim_ranks == 0 {
        return Err(usage("--nodes, --ppn and --sim-ranks must be at least 1"));
    }
    let kvs = choice(&a.kvs, |v| v.parse::<KvsDesign>().map_err(usage))?;
    let fanout = choice(&a.tree_fanout, |v| match v.parse::<usize>() {
        Ok(f) if f >= 1 => Ok(f),
        _ => Err(usage(format!("--tree-fanout {v:?}: a number of at least 1, or all"))),
    })?;
    let scenario = Scenario {
        nodes: a.nodes,
        ppn: a.ppn,
        kvs: KvsDesign::default(),
        fanout: 0,
        bootstrap: a.bootstrap.parse::<Bootstrap>().map_err(usage)?,
        booted: a.booted,
        workload: a.workload.parse::<Workload>().map_err(usage)?,
        cores: a.cores,
        one_host: a.one_host,
    };
    let answer = answer(&cal, &Query { scenario, kvs, fanout, limit: a.sim_ranks }).map_err(|e| match e {
        SimError::Failed { .. } => Error::failed(e.to_string()),
        e => usage(e),
    })?;
    let text = match a.json {
        true => serde_json::to_string_pretty(&answer).map_err(|e| Error::failed(e.to_string()))? + "\n",
        false => render(&answer),
    };
    // A closed stdout (`| head`) is the reader's choice, not an error.
    use std::io::Write;
    match std::io::stdout().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::failed(format!("stdout: {e}"))),
        _ => Ok(0),
    }
}

/// The calibration in `DPM_CALIBRATION` (a file `bench/model/calibrate`
/// wrote on the user's machines), else the one built in.
fn calibration() -> Result<Calibration, String> {
    match std::env::var_os("DPM_CALIBRATION").filter(|v| !v.is_empty()) {
        Some(path) => Calibration::from_file(std::path::Path::new(&path)).map_err(|e| format!("DPM_CALIBRATION: {e}")),
        None => Calibration::built_in().map_err(|e| e.to_string()),
    }
}

/// `dpm run`'s fan-out and design where the user left them free
/// ([`dpm_launcher::advice`]): the calibration's choice (`DPM_CALIBRATION`,
/// else the built-in one) for the run's size and bootstrap. Virtual nodes
/// share this host's cores, as the validation's runs do.
pub fn advise(shape: &dpm_launcher::advice::Shape) -> Result<Option<dpm_launcher::advice::Advice>, String> {
    let cal = calibration()?;
    let one_host = shape.bootstrap == "fork";
    let cores = if one_host { std::thread::available_parallelism().map_or(1, usize::from) } else { 0 };
    let Ok(bootstrap) = shape.bootstrap.parse::<Bootstrap>() else { return Ok(None) };
    let scenario = Scenario {
        nodes: shape.nodes,
        ppn: shape.ppn,
        kvs: shape.kvs,
        fanout: shape.fanout,
        bootstrap,
        booted: false,
        workload: Workload::Hello,
        cores,
        one_host,
    };
    let free = dpm_cluster::model::Free { fanout: shape.fanout_free, kvs: shape.kvs == KvsDesign::Auto };
    // The simulated daemons' own log lines are not the run's.
    let chosen = tracing::dispatcher::with_default(&tracing::Dispatch::none(), || dpm_cluster::model::choose(&cal, &scenario, shape.fanout, free));
    match chosen {
        Ok(c) => Ok(Some(dpm_launcher::advice::Advice { fanout: c.fanout, kvs: c.kvs, why: c.why })),
        Err(e) => {
            tracing::debug!("the startup model has no advice for {} nodes x {} ranks ({e}): the defaults stay", shape.nodes, shape.ppn);
            Ok(None)
        }
    }
}
