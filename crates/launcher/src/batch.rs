//! Batch allocations as Hydra reads them: which batch system a run is inside
//! (PBS/Torque, LSF, Grid Engine, Slurm), its nodes and slots, and the
//! resource-management kernel chosen by `-rmk`/`HYDRA_RMK`.
//!
//! Pure logic: the environment comes in as a lookup and files as a reader,
//! so the formats' corners are unit-tested here. What Hydra does, and dpm
//! with it:
//! - detection in Hydra's order (Slurm, LSF, Grid Engine, PBS), each by the
//!   variables Hydra tests: Slurm `SLURM_JOB_NODELIST`; LSF `LSF_BINDIR` and
//!   `LSB_MCPU_HOSTS`; Grid Engine `SGE_ROOT`, `ARC` and `PE_HOSTFILE`; PBS
//!   `PBS_NODEFILE`;
//! - PBS's node file: one host per line, one line per slot (`host:N` gives N);
//!   LSF's `LSB_MCPU_HOSTS`: `host n host n …`; Grid Engine's PE host file:
//!   `host slots queue processors` per line; blank lines and lines starting
//!   with `#` are skipped; a host repeated on the next entry adds its slots
//!   to that node (Hydra merges neighbours only: `a b a` is three nodes).
//!
//! Beyond Hydra: LSF's `LSB_DJOB_HOSTFILE` (one line per slot) is read when
//! `LSB_MCPU_HOSTS` is missing, and every malformed entry is an error (Hydra
//! reads `atoi` and so takes `x` slots as 0).

use std::fmt;
use std::str::FromStr;

use crate::machine::Node;

/// A batch system dpm reads allocations from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchSystem {
    Slurm,
    Lsf,
    Sge,
    Pbs,
}

impl BatchSystem {
    /// Hydra's detection order.
    pub const DETECTION_ORDER: [BatchSystem; 4] = [BatchSystem::Slurm, BatchSystem::Lsf, BatchSystem::Sge, BatchSystem::Pbs];

    /// Its `-rmk` name (Hydra's).
    pub fn name(self) -> &'static str {
        match self {
            BatchSystem::Slurm => "slurm",
            BatchSystem::Lsf => "lsf",
            BatchSystem::Sge => "sge",
            BatchSystem::Pbs => "pbs",
        }
    }

    /// Its name in messages.
    pub fn title(self) -> &'static str {
        match self {
            BatchSystem::Slurm => "Slurm",
            BatchSystem::Lsf => "LSF",
            BatchSystem::Sge => "Grid Engine",
            BatchSystem::Pbs => "PBS",
        }
    }

    /// The variables that must all be set for Hydra to find it.
    pub fn detection_vars(self) -> &'static [&'static str] {
        match self {
            BatchSystem::Slurm => &["SLURM_JOB_NODELIST"],
            BatchSystem::Lsf => &["LSF_BINDIR", "LSB_MCPU_HOSTS"],
            BatchSystem::Sge => &["SGE_ROOT", "ARC", "PE_HOSTFILE"],
            BatchSystem::Pbs => &["PBS_NODEFILE"],
        }
    }

    /// The variable naming its job (a boot's name inside it).
    pub fn job_id_var(self) -> &'static str {
        match self {
            BatchSystem::Slurm => "SLURM_JOB_ID",
            BatchSystem::Lsf => "LSB_JOBID",
            BatchSystem::Sge => "JOB_ID",
            BatchSystem::Pbs => "PBS_JOBID",
        }
    }
}

impl fmt::Display for BatchSystem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `-rmk`/`HYDRA_RMK`: where the nodes come from when no host list is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rmk {
    /// `user`: no batch system; the nodes are the host list or this machine.
    User,
    /// That batch system's allocation, whatever detection would say.
    Batch(BatchSystem),
}

impl FromStr for Rmk {
    type Err = BatchError;
    fn from_str(s: &str) -> Result<Self, BatchError> {
        Ok(match s {
            "user" => Rmk::User,
            "slurm" => Rmk::Batch(BatchSystem::Slurm),
            "lsf" => Rmk::Batch(BatchSystem::Lsf),
            "sge" => Rmk::Batch(BatchSystem::Sge),
            "pbs" => Rmk::Batch(BatchSystem::Pbs),
            other => return Err(BatchError::UnknownRmk(other.to_string())),
        })
    }
}

/// Why an allocation cannot be read: a usage error (exit 2).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BatchError {
    #[error("unknown resource manager '{0}' (pbs, lsf, sge, slurm or user)")]
    UnknownRmk(String),
    #[error("-rmk {system}: no {} allocation here ({} not set)", system.title(), .missing.join(", "))]
    NotInside { system: BatchSystem, missing: Vec<&'static str> },
    #[error("{var}={path}: cannot read it: {reason}")]
    Unreadable { var: &'static str, path: String, reason: String },
    #[error("{source_name} line {line}: {problem}")]
    BadLine { source_name: String, line: usize, problem: String },
    #[error("{source_name} names no host")]
    Empty { source_name: String },
}

/// Which batch system the environment is inside, in Hydra's order.
pub fn detect(env: &dyn Fn(&str) -> Option<String>) -> Option<BatchSystem> {
    BatchSystem::DETECTION_ORDER.into_iter().find(|s| s.detection_vars().iter().all(|v| env(v).is_some_and(|x| !x.is_empty())))
}

/// An allocation's nodes and where they were read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub system: BatchSystem,
    /// The variable (and file) the nodes came from, for messages.
    pub source: String,
    pub nodes: Vec<Node>,
}

impl Allocation {
    /// One line for `--report-placement` and `dpm status`.
    pub fn describe(&self) -> String {
        let slots: u64 = self.nodes.iter().map(|n| u64::from(n.slots)).sum();
        let n = self.nodes.len();
        format!("{} allocation ({}): {n} node{}, {slots} slot{}", self.system, self.source, plural(n as u64), plural(slots))
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Read the allocation of `system` (not Slurm, whose names need
/// `scontrol`): `read` gives a file's text.
pub fn read(system: BatchSystem, env: &dyn Fn(&str) -> Option<String>, read: &dyn Fn(&str) -> std::io::Result<String>) -> Result<Allocation, BatchError> {
    let var = |name: &'static str| env(name).filter(|v| !v.is_empty());
    let file = |name: &'static str| -> Result<(String, String), BatchError> {
        let path = var(name).expect("checked by the caller");
        let text = read(&path).map_err(|e| BatchError::Unreadable { var: name, path: path.clone(), reason: e.to_string() })?;
        Ok((format!("{name}={path}"), text))
    };
    let missing = |names: &[&'static str]| names.iter().copied().filter(|n| var(n).is_none()).collect::<Vec<_>>();
    let (source, nodes) = match system {
        BatchSystem::Pbs => {
            if var("PBS_NODEFILE").is_none() {
                return Err(BatchError::NotInside { system, missing: vec!["PBS_NODEFILE"] });
            }
            let (source, text) = file("PBS_NODEFILE")?;
            let nodes = parse_node_file(&source, &text)?;
            (source, nodes)
        }
        BatchSystem::Lsf => {
            if let Some(hosts) = var("LSB_MCPU_HOSTS") {
                ("LSB_MCPU_HOSTS".to_string(), parse_mcpu_hosts(&hosts)?)
            } else if var("LSB_DJOB_HOSTFILE").is_some() {
                let (source, text) = file("LSB_DJOB_HOSTFILE")?;
                let nodes = parse_node_file(&source, &text)?;
                (source, nodes)
            } else {
                return Err(BatchError::NotInside { system, missing: vec!["LSB_MCPU_HOSTS", "LSB_DJOB_HOSTFILE"] });
            }
        }
        BatchSystem::Sge => {
            if var("PE_HOSTFILE").is_none() {
                return Err(BatchError::NotInside { system, missing: missing(&["PE_HOSTFILE"]) });
            }
            let (source, text) = file("PE_HOSTFILE")?;
            let nodes = parse_pe_hostfile(&source, &text)?;
            (source, nodes)
        }
        BatchSystem::Slurm => unreachable!("Slurm's node names are expanded by scontrol (hosts::slurm_nodes)"),
    };
    Ok(Allocation { system, source, nodes })
}

/// Add `slots` on `host`: to the last node if it is that host (Hydra's merge).
fn add(nodes: &mut Vec<Node>, host: &str, slots: u32) {
    match nodes.last_mut() {
        Some(last) if last.host == host => last.slots = last.slots.saturating_add(slots),
        _ => nodes.push(Node { host: host.to_string(), slots }),
    }
}

/// The non-blank lines that are not comments, numbered from 1.
fn entries(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())).filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

fn slot_count(text: &str) -> Option<u32> {
    text.parse().ok().filter(|&n: &u32| n > 0)
}

/// PBS's `PBS_NODEFILE` (and LSF's `LSB_DJOB_HOSTFILE`): one host per line
/// and slot; `host:N` counts N (Hydra's machine-file entry).
pub fn parse_node_file(source_name: &str, text: &str) -> Result<Vec<Node>, BatchError> {
    let bad = |line, problem: String| BatchError::BadLine { source_name: source_name.to_string(), line, problem };
    let mut nodes = Vec::new();
    for (line, entry) in entries(text) {
        let mut words = entry.split_whitespace();
        let first = words.next().expect("a non-blank line has a word");
        if let Some(extra) = words.next() {
            return Err(bad(line, format!("'{entry}': one host name per line expected, found '{extra}' after it")));
        }
        let (host, slots) = match first.split_once(':') {
            Some((h, n)) => (h, slot_count(n).ok_or_else(|| bad(line, format!("'{entry}': bad slot count '{n}'")))?),
            None => (first, 1),
        };
        if host.is_empty() {
            return Err(bad(line, format!("'{entry}': no host name")));
        }
        add(&mut nodes, host, slots);
    }
    if nodes.is_empty() {
        return Err(BatchError::Empty { source_name: source_name.to_string() });
    }
    Ok(nodes)
}

/// LSF's `LSB_MCPU_HOSTS`: `host n host n …` (whitespace-separated pairs).
pub fn parse_mcpu_hosts(text: &str) -> Result<Vec<Node>, BatchError> {
    let source_name = "LSB_MCPU_HOSTS";
    let bad = |problem: String| BatchError::BadLine { source_name: source_name.to_string(), line: 1, problem };
    let words: Vec<&str> = text.split_whitespace().collect();
    if !words.len().is_multiple_of(2) {
        return Err(bad(format!("'{}': expected pairs 'host count', the last host has no count", text.trim())));
    }
    let mut nodes = Vec::new();
    for pair in words.chunks(2) {
        let slots = slot_count(pair[1]).ok_or_else(|| bad(format!("host {}: bad slot count '{}'", pair[0], pair[1])))?;
        add(&mut nodes, pair[0], slots);
    }
    if nodes.is_empty() {
        return Err(BatchError::Empty { source_name: source_name.to_string() });
    }
    Ok(nodes)
}

/// Grid Engine's `PE_HOSTFILE`: `host slots queue processors` per line
/// (only the first two words count, as for Hydra).
pub fn parse_pe_hostfile(source_name: &str, text: &str) -> Result<Vec<Node>, BatchError> {
    let bad = |line, problem: String| BatchError::BadLine { source_name: source_name.to_string(), line, problem };
    let mut nodes = Vec::new();
    for (line, entry) in entries(text) {
        let mut words = entry.split_whitespace();
        let host = words.next().expect("a non-blank line has a word");
        let slots = match words.next() {
            Some(n) => slot_count(n).ok_or_else(|| bad(line, format!("'{entry}': bad slot count '{n}'")))?,
            None => return Err(bad(line, format!("'{entry}': expected 'host slots queue processors'"))),
        };
        add(&mut nodes, host, slots);
    }
    if nodes.is_empty() {
        return Err(BatchError::Empty { source_name: source_name.to_string() });
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn n(host: &str, slots: u32) -> Node {
        Node { host: host.into(), slots }
    }

    fn env_of<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn pbs_lines_are_slots_and_neighbours_merge() {
        let text = "# nodes of job 42\nnode1.cluster.example.org\nnode1.cluster.example.org\n\n  node2  \nnode2\nnode1.cluster.example.org\n";
        let got = parse_node_file("PBS_NODEFILE", text).unwrap();
        assert_eq!(got, vec![n("node1.cluster.example.org", 2), n("node2", 2), n("node1.cluster.example.org", 1)]);
        assert_eq!(parse_node_file("f", "a:3\na\nb:2\n").unwrap(), vec![n("a", 4), n("b", 2)]);
        assert_eq!(parse_node_file("f", "10.0.0.7\r\n10.0.0.7\r\n").unwrap(), vec![n("10.0.0.7", 2)]);
    }

    #[test]
    fn pbs_errors_name_the_line() {
        assert_eq!(parse_node_file("PBS_NODEFILE=/x", "\n# only a comment\n"), Err(BatchError::Empty { source_name: "PBS_NODEFILE=/x".into() }));
        let e = parse_node_file("PBS_NODEFILE=/x", "a\nb c\n").unwrap_err();
        assert_eq!(e.to_string(), "PBS_NODEFILE=/x line 2: 'b c': one host name per line expected, found 'c' after it");
        assert!(parse_node_file("f", "a:0\n").unwrap_err().to_string().contains("line 1: 'a:0': bad slot count '0'"));
        assert!(parse_node_file("f", "a:x\n").is_err());
        assert!(parse_node_file("f", ":3\n").unwrap_err().to_string().contains("no host name"));
    }

    #[test]
    fn lsf_pairs() {
        assert_eq!(parse_mcpu_hosts("hostA 4 hostB.dom.org 2").unwrap(), vec![n("hostA", 4), n("hostB.dom.org", 2)]);
        assert_eq!(parse_mcpu_hosts("  a 1   a 2 b 1 ").unwrap(), vec![n("a", 3), n("b", 1)]);
        assert!(parse_mcpu_hosts("a 2 b").unwrap_err().to_string().contains("the last host has no count"));
        assert!(parse_mcpu_hosts("a two").unwrap_err().to_string().contains("host a: bad slot count 'two'"));
        assert!(parse_mcpu_hosts("a 0").is_err());
        assert_eq!(parse_mcpu_hosts("  "), Err(BatchError::Empty { source_name: "LSB_MCPU_HOSTS".into() }));
    }

    #[test]
    fn grid_engine_pe_hostfile() {
        let text = "exec1.example.com 4 all.q@exec1.example.com UNDEFINED\nexec2 2 all.q@exec2 <NULL>\n\n";
        assert_eq!(parse_pe_hostfile("PE_HOSTFILE", text).unwrap(), vec![n("exec1.example.com", 4), n("exec2", 2)]);
        assert_eq!(parse_pe_hostfile("f", "a 1 q\na 2 q\n").unwrap(), vec![n("a", 3)]);
        let e = parse_pe_hostfile("PE_HOSTFILE=/p", "a 1 q p\nb\n").unwrap_err();
        assert_eq!(e.to_string(), "PE_HOSTFILE=/p line 2: 'b': expected 'host slots queue processors'");
        assert!(parse_pe_hostfile("f", "a -1 q p\n").is_err());
        assert!(parse_pe_hostfile("f", "").is_err());
    }

    #[test]
    fn detection_follows_hydras_order_and_needs_every_variable() {
        assert_eq!(detect(&env_of(&[])), None);
        assert_eq!(detect(&env_of(&[("PBS_NODEFILE", "/f")])), Some(BatchSystem::Pbs));
        assert_eq!(detect(&env_of(&[("PBS_NODEFILE", "")])), None);
        // LSF needs its bin directory too; Grid Engine its root and ARC.
        assert_eq!(detect(&env_of(&[("LSB_MCPU_HOSTS", "a 1")])), None);
        assert_eq!(detect(&env_of(&[("LSB_MCPU_HOSTS", "a 1"), ("LSF_BINDIR", "/lsf/bin")])), Some(BatchSystem::Lsf));
        assert_eq!(detect(&env_of(&[("PE_HOSTFILE", "/p"), ("SGE_ROOT", "/sge")])), None);
        let sge_and_pbs = [("PE_HOSTFILE", "/p"), ("SGE_ROOT", "/sge"), ("ARC", "lx-amd64"), ("PBS_NODEFILE", "/f")];
        assert_eq!(detect(&env_of(&sge_and_pbs)), Some(BatchSystem::Sge));
        let all = [("SLURM_JOB_NODELIST", "n[1-2]"), ("LSB_MCPU_HOSTS", "a 1"), ("LSF_BINDIR", "/b"), ("PBS_NODEFILE", "/f")];
        assert_eq!(detect(&env_of(&all)), Some(BatchSystem::Slurm));
    }

    #[test]
    fn rmk_names() {
        assert_eq!("pbs".parse::<Rmk>().unwrap(), Rmk::Batch(BatchSystem::Pbs));
        assert_eq!("user".parse::<Rmk>().unwrap(), Rmk::User);
        assert!("ll".parse::<Rmk>().unwrap_err().to_string().contains("unknown resource manager 'll'"));
    }

    #[test]
    fn reading_files_and_their_errors() {
        let files: HashMap<&str, &str> = [("/pbs", "a\na\nb\n"), ("/djob", "x\ny\ny\n"), ("/pe", "h 3 q p\n")].into_iter().collect();
        let reader = |p: &str| files.get(p).map(|t| t.to_string()).ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound));
        let pbs = read(BatchSystem::Pbs, &env_of(&[("PBS_NODEFILE", "/pbs")]), &reader).unwrap();
        assert_eq!((pbs.nodes, pbs.source.as_str()), (vec![n("a", 2), n("b", 1)], "PBS_NODEFILE=/pbs"));
        let lsf = read(BatchSystem::Lsf, &env_of(&[("LSB_DJOB_HOSTFILE", "/djob")]), &reader).unwrap();
        assert_eq!(lsf.nodes, vec![n("x", 1), n("y", 2)]);
        let lsf = read(BatchSystem::Lsf, &env_of(&[("LSB_MCPU_HOSTS", "m 2"), ("LSB_DJOB_HOSTFILE", "/djob")]), &reader).unwrap();
        assert_eq!(lsf.describe(), "lsf allocation (LSB_MCPU_HOSTS): 1 node, 2 slots");
        let sge = read(BatchSystem::Sge, &env_of(&[("PE_HOSTFILE", "/pe")]), &reader).unwrap();
        assert_eq!(sge.nodes, vec![n("h", 3)]);
        let missing = read(BatchSystem::Pbs, &env_of(&[("PBS_NODEFILE", "/gone")]), &reader).unwrap_err();
        assert!(missing.to_string().starts_with("PBS_NODEFILE=/gone: cannot read it: "), "{missing}");
        let outside = read(BatchSystem::Sge, &env_of(&[]), &reader).unwrap_err();
        assert_eq!(outside.to_string(), "-rmk sge: no Grid Engine allocation here (PE_HOSTFILE not set)");
    }
}
