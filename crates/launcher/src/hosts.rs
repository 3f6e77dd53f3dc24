//! Where a run's nodes come from, and how its daemons start there: the node
//! list (`-hosts`, `-f`, `--virtual-nodes`, `DPM_HOSTS`, the batch
//! allocation of `-rmk`/`HYDRA_RMK` or detected — Slurm here, the others in
//! [`crate::batch`] —, else this machine alone) and the [`Bootstrap`] (from
//! `-launcher`/`DPM_LAUNCHER`/`HYDRA_LAUNCHER` as resolved in [`RunConfig`],
//! else the allocation's agent ([`crate::agent`]), else chosen from the
//! nodes).

use dpm_proto::tree;

use crate::batch::{self, Allocation, BatchSystem, Rmk};
use crate::cli::{self, RunOptions};
use crate::config::{Launcher, RunConfig};
use crate::error::{ConfigError, UsageError};
use crate::machine::is_this_host;
use crate::manual;
use crate::nodes::{Bootstrap, Node};

fn usage(msg: impl Into<String>) -> ConfigError {
    ConfigError::Usage(UsageError::new(msg))
}

/// `name`, `name:N` or `name slots=N` (N slots; default the CPUs).
fn parse_entry(entry: &str, cpus: u32) -> Result<Node, ConfigError> {
    let entry = entry.trim();
    let (name, slots) = if let Some((n, rest)) = entry.split_once(char::is_whitespace) {
        let slots = rest.trim().strip_prefix("slots=").ok_or_else(|| usage(format!("host entry '{entry}': expected 'name slots=N'")))?;
        (n, Some(slots))
    } else if let Some((n, s)) = entry.split_once(':') {
        (n, Some(s))
    } else {
        (entry, None)
    };
    let slots = match slots {
        Some(s) => s.trim().parse().ok().filter(|&n: &u32| n > 0).ok_or_else(|| usage(format!("host entry '{entry}': bad slot count")))?,
        None => cpus,
    };
    Ok(Node { host: name.to_string(), slots })
}

/// Whether a host list entry gives its slots (`name:N`, `name slots=N`).
fn gives_slots(entry: &str) -> bool {
    let entry = entry.trim();
    entry.contains(':') || entry.contains(char::is_whitespace)
}

/// The ranks a host list entry holds for a program without `-n`, as Hydra
/// counts them: its slots if it gives them, else one.
fn listed_ranks(entry: &str, node: &Node) -> u32 {
    if gives_slots(entry) {
        node.slots
    } else {
        1
    }
}

/// The run's nodes and how to start their daemons.
pub struct NodeChoice {
    pub nodes: Vec<Node>,
    pub bootstrap: Bootstrap,
    /// Every node's slots were given (a host list with slots, Slurm's
    /// allocation), not guessed from this machine's CPUs: the universe
    /// size is then known (see [`crate::config::universe_size`]).
    pub slots_known: bool,
    /// The batch allocation the nodes came from.
    pub allocation: Option<Allocation>,
    /// How many ranks a program without `-n` gets, as Hydra counts a host
    /// list (`-hosts`, `-f`, `DPM_HOSTS`): the slots each entry gives, one
    /// for an entry without; `None` without a list.
    pub listed: Option<u32>,
}

impl NodeChoice {
    /// Where the nodes came from and how daemons start, for
    /// `--report-placement` and `dpm status` (`None`: no batch system).
    pub fn describe_allocation(&self) -> Option<String> {
        let a = self.allocation.as_ref()?;
        let how = match &self.bootstrap {
            Bootstrap::InProcess => "one node, no daemon to start".to_string(),
            Bootstrap::Tree(tree::Bootstrap::Slurm(_)) => "daemons through srun".to_string(),
            Bootstrap::Tree(tree::Bootstrap::Agent { command, autofork: true }) => format!("daemons through {} (this host's by fork)", command.join(" ")),
            Bootstrap::Tree(tree::Bootstrap::Agent { command, autofork: false }) => format!("daemons through {}", command.join(" ")),
            Bootstrap::Tree(tree::Bootstrap::Ssh(c)) => format!("daemons through {}", c.join(" ")),
            Bootstrap::Tree(tree::Bootstrap::Fork) => "daemons by fork".to_string(),
            Bootstrap::Manual(_) => "daemons started by hand".to_string(),
        };
        Some(format!("{}; {how}", a.describe()))
    }
}

/// The allocation `-rmk`/`HYDRA_RMK` names, else the one detected; with
/// whether it gave every node's slots.
fn find_allocation(rmk: Option<Rmk>) -> Result<Option<(Allocation, bool)>, ConfigError> {
    let env = |k: &str| std::env::var(k).ok();
    let system = match rmk {
        Some(Rmk::User) => return Ok(None),
        Some(Rmk::Batch(s)) => s,
        None => match batch::detect(&env) {
            Some(s) => s,
            None => return Ok(None),
        },
    };
    if system == BatchSystem::Slurm {
        let Some(nodelist) = env("SLURM_JOB_NODELIST").filter(|v| !v.is_empty()) else {
            return Err(batch::BatchError::NotInside { system, missing: vec!["SLURM_JOB_NODELIST"] }.into());
        };
        let (nodes, known) = slurm_nodes(&nodelist)?;
        return Ok(Some((Allocation { system, source: "SLURM_JOB_NODELIST".into(), nodes }, known)));
    }
    let allocation = batch::read(system, &env, &|path| std::fs::read_to_string(path))?;
    Ok(Some((allocation, true)))
}

/// The node list (flag → environment → default) and how to start daemons
/// there. `host` is this machine's name for the run (`-localhost`, else its
/// host name); entries naming it, or the real host name, are this machine.
pub fn nodes_and_bootstrap(opts: &RunOptions, config: &RunConfig, host: &str) -> Result<NodeChoice, ConfigError> {
    choose(opts, config, host)
}

fn choose(opts: &RunOptions, config: &RunConfig, host: &str) -> Result<NodeChoice, ConfigError> {
    let cpus = cli::cpus().max(1) as u32;
    let real_host = crate::machine::this_host();
    let is_this_host = |name: &str, host: &str| is_this_host(name, host) || is_this_host(name, &real_host);
    let mut list: Vec<Node> = Vec::new();
    let mut slots_known = true;
    let mut listed = 0u32;
    let mut add = |list: &mut Vec<Node>, entry: &str| -> Result<bool, ConfigError> {
        let node = parse_entry(entry, cpus)?;
        listed = listed.saturating_add(listed_ranks(entry, &node));
        list.push(node);
        Ok(gives_slots(entry))
    };
    if let Some(file) = &opts.hostfile {
        let text = std::fs::read_to_string(file).map_err(|source| ConfigError::HostFile { file: file.clone(), source })?;
        for line in text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()) {
            slots_known &= add(&mut list, line)?;
        }
        if list.is_empty() {
            return Err(usage(format!("host file {file} names no host")));
        }
    }
    for h in &opts.hosts {
        slots_known &= add(&mut list, h)?;
    }
    let virtual_nodes = opts.virtual_nodes.is_some();
    if virtual_nodes && !list.is_empty() {
        return Err(usage("--virtual-nodes and -hosts/-f exclude each other"));
    }
    let mut allocation = None;
    if let Some(n) = opts.virtual_nodes {
        list = (0..n).map(|k| Node { host: format!("{host}-v{k}"), slots: cpus }).collect();
        slots_known = false;
    } else if list.is_empty() {
        if let Ok(env) = std::env::var("DPM_HOSTS") {
            for h in env.split(',').filter(|h| !h.trim().is_empty()) {
                slots_known &= add(&mut list, h)?;
            }
        } else if let Some((a, known)) = find_allocation(config.rmk)? {
            (list, slots_known) = (a.nodes.clone(), known);
            allocation = Some(a);
        }
    }
    // A list given by hand (not virtual nodes, not an allocation).
    let listed = (!list.is_empty() && allocation.is_none() && !virtual_nodes).then_some(listed);
    let from = allocation.as_ref().map(|a| a.system);
    let from_slurm = from == Some(BatchSystem::Slurm);
    if list.is_empty() {
        if config.launcher == Some(Launcher::Manual) {
            return Err(usage("-launcher manual needs the nodes: -hosts, -f or DPM_HOSTS"));
        }
        return Ok(NodeChoice {
            nodes: vec![Node { host: host.to_string(), slots: cpus }],
            bootstrap: Bootstrap::InProcess,
            slots_known: false,
            allocation,
            listed,
        });
    }
    let env = |k: &str| std::env::var(k).ok();
    let path = std::env::var("PATH").ok();
    let find = |name: &str| crate::agent::find_in_path(name, path.as_deref());
    // Hydra's HYDRA_LAUNCHER_AUTOFORK=0: this machine's daemons through the agent too.
    let autofork = !env("HYDRA_LAUNCHER_AUTOFORK").is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "no" | "false" | "off"));
    let agent = |l: Launcher| {
        let command = crate::agent::command(l, config.launcher_exec.as_deref(), &config.ssh_command, &config.launcher_extra, &env, &find);
        Bootstrap::Tree(tree::Bootstrap::Agent { command, autofork })
    };
    let all_local = virtual_nodes || list.iter().all(|n| is_this_host(&n.host, host));
    let bootstrap = match config.launcher {
        Some(Launcher::Ssh | Launcher::Slurm | Launcher::Manual | Launcher::Lsf | Launcher::Sge | Launcher::Pbs) if virtual_nodes => {
            return Err(usage("--virtual-nodes run on this machine; they start with fork"))
        }
        Some(Launcher::Slurm) if std::env::var_os("SLURM_JOB_ID").is_none() => {
            return Err(usage("-launcher slurm works inside a Slurm allocation (salloc, sbatch) only"))
        }
        Some(Launcher::Slurm) => Bootstrap::Tree(tree::Bootstrap::Slurm(config.launcher_extra.clone())),
        Some(l @ (Launcher::Lsf | Launcher::Sge | Launcher::Pbs)) => agent(l),
        Some(Launcher::Ssh) => Bootstrap::Tree(tree::Bootstrap::Ssh(config.ssh_command.clone())),
        Some(Launcher::Fork) if all_local => Bootstrap::Tree(tree::Bootstrap::Fork),
        Some(Launcher::Fork) => return Err(usage("-launcher fork starts daemons on this machine only; use ssh for other hosts")),
        Some(Launcher::Manual) => Bootstrap::Manual(manual::Manual {
            bind: config.bind,
            timeout: config.connect_timeout,
            connect_host: opts.localhost.clone(),
            port_range: config.port_range.clone(),
        }),
        // Asked to: even a node that is this machine gets its daemon through the agent.
        None if !autofork && from.is_some_and(|s| s != BatchSystem::Slurm) => agent(crate::agent::of(from.expect("checked"))),
        None if list.len() == 1 && (all_local || from_slurm) && (is_this_host(&list[0].host, host) || is_this_host_or_slurm_node(&list[0].host, host)) => {
            Bootstrap::InProcess
        }
        None if from_slurm => Bootstrap::Tree(tree::Bootstrap::Slurm(config.launcher_extra.clone())),
        // --virtual-nodes N promises N daemon processes, even for N = 1.
        None if all_local && list.len() == 1 && !virtual_nodes => Bootstrap::InProcess,
        // Another batch system's allocation: its own agent.
        None if from.is_some() => agent(crate::agent::of(from.expect("checked"))),
        None if all_local => Bootstrap::Tree(tree::Bootstrap::Fork),
        None => Bootstrap::Tree(tree::Bootstrap::Ssh(config.ssh_command.clone())),
    };
    Ok(NodeChoice { nodes: list, bootstrap, slots_known, allocation, listed })
}

/// A one-node Slurm allocation on the node dpm runs on needs no srun step.
fn is_this_host_or_slurm_node(node: &str, host: &str) -> bool {
    is_this_host(node, host) || std::env::var("SLURMD_NODENAME").is_ok_and(|n| n == node)
}

/// The nodes of the Slurm allocation: names expanded by `scontrol show
/// hostnames`, slots from `SLURM_TASKS_PER_NODE` (`2(x3),1` means 2,2,2,1);
/// and whether that gave every node's slots.
fn slurm_nodes(nodelist: &str) -> Result<(Vec<Node>, bool), ConfigError> {
    let out = std::process::Command::new("scontrol").args(["show", "hostnames", nodelist]).output().map_err(ConfigError::Scontrol)?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(ConfigError::ScontrolFailed { nodelist: nodelist.to_string(), stderr });
    }
    let hosts: Vec<String> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect();
    let slots = std::env::var("SLURM_TASKS_PER_NODE").map(|v| expand_slurm_counts(&v)).unwrap_or_default();
    let cpus = cli::cpus().max(1) as u32;
    let known = slots.len() >= hosts.len();
    Ok((hosts.into_iter().enumerate().map(|(i, host)| Node { host, slots: slots.get(i).copied().unwrap_or(cpus) }).collect(), known))
}

/// `2(x3),1` → `[2, 2, 2, 1]` (Slurm's compressed per-node counts).
fn expand_slurm_counts(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (count, times) = match item.split_once("(x") {
            Some((c, t)) => (c, t.trim_end_matches(')')),
            None => (item, "1"),
        };
        if let (Ok(c), Ok(t)) = (count.parse::<u32>(), times.parse::<usize>()) {
            out.extend(std::iter::repeat_n(c.max(1), t));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_counts_expand() {
        assert_eq!(expand_slurm_counts("2(x3),1"), vec![2, 2, 2, 1]);
        assert_eq!(expand_slurm_counts("4"), vec![4]);
        assert_eq!(expand_slurm_counts(""), Vec::<u32>::new());
    }

    #[test]
    fn host_entries() {
        assert_eq!(parse_entry("a:4", 2).unwrap(), Node { host: "a".into(), slots: 4 });
        assert_eq!(parse_entry(" b slots=3 ", 2).unwrap(), Node { host: "b".into(), slots: 3 });
        assert_eq!(parse_entry("c", 2).unwrap(), Node { host: "c".into(), slots: 2 });
        assert!(parse_entry("d:0", 2).is_err());
        assert!(parse_entry("e 3", 2).is_err());
    }
}
