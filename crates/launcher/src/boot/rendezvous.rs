//! The boot's rendezvous file, `NAME.json` in the private directory: its
//! server's pid, version, control protocol, start time, fan-out and the
//! nodes it has now (up or draining, each with its slots and state). It is
//! written when the boot is up and again after each change of its nodes
//! (`dpm boot --add`, `--drain`, a drained node leaving, a lost node and
//! the nodes it detached, a detached node re-attaching), each time whole
//! and atomically (a private file renamed over it), so a tool reading it
//! sees one version or the next, never a mix. Once closed (the boot going
//! down) it is gone and stays gone.

use std::cell::Cell;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use dpm_proto::control::CONTROL_VERSION;

use crate::node_table::{NodeState, NodeTable};

pub(super) struct Rendezvous {
    path: PathBuf,
    /// Seconds since the epoch when the boot came up (the same in every version).
    started: u64,
    fanout: usize,
    closed: Cell<bool>,
}

impl Rendezvous {
    pub fn new(path: PathBuf, fanout: usize) -> Rendezvous {
        let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Rendezvous { path, started, fanout, closed: Cell::new(false) }
    }

    /// Write the file for the nodes of `table` now (unless closed); a
    /// failure is logged.
    pub fn write(&self, table: &NodeTable) {
        if self.closed.get() {
            return;
        }
        if let Err(e) = replace_private(&self.path, &self.json(table)) {
            tracing::warn!("{}: {e}", self.path.display());
        }
    }

    /// Remove the file; no later [`Rendezvous::write`] brings it back.
    pub fn close(&self) {
        self.closed.set(true);
        let _ = std::fs::remove_file(&self.path);
    }

    fn json(&self, table: &NodeTable) -> String {
        let nodes: Vec<serde_json::Value> = table
            .ids()
            .filter_map(|n| {
                let state = match table.state(n)? {
                    NodeState::Up => "up",
                    NodeState::Draining => "draining",
                    NodeState::Detached => "detached",
                    NodeState::Joining | NodeState::Lost | NodeState::Released => return None,
                };
                Some(serde_json::json!({ "host": table.host(n), "slots": table.slots(n), "state": state }))
            })
            .collect();
        serde_json::json!({
            "pid": std::process::id(),
            "version": env!("CARGO_PKG_VERSION"),
            "protocol": CONTROL_VERSION,
            "started": self.started,
            "fanout": self.fanout,
            "nodes": nodes,
        })
        .to_string()
    }
}

/// `text` and a newline into `path`, mode 0600: written to a file of its
/// own beside it, then renamed over it.
fn replace_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_lists_the_nodes_up_and_draining_and_is_replaced_whole() {
        let dir = std::env::temp_dir().join(format!("dpm-rendezvous-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("b.json");
        let mut table = NodeTable::new([("a".to_string(), 2), ("b".to_string(), 3)], 2);
        let r = Rendezvous::new(path.clone(), 2);
        r.write(&table);
        let read = |p: &Path| serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(p).unwrap()).unwrap();
        let v = read(&path);
        assert_eq!(v["nodes"].as_array().unwrap().len(), 2);
        assert_eq!(v["pid"], std::process::id());
        let c = table.join("c", 4).unwrap();
        r.write(&table);
        assert_eq!(read(&path)["nodes"].as_array().unwrap().len(), 2, "a joining node is not listed yet");
        table.joined(c);
        table.drain(dpm_kvs::NodeId(0));
        r.write(&table);
        let v = read(&path);
        let nodes: Vec<(String, u64, String)> = v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| (n["host"].as_str().unwrap().into(), n["slots"].as_u64().unwrap(), n["state"].as_str().unwrap().into()))
            .collect();
        assert_eq!(nodes, [("a".into(), 2, "draining".into()), ("b".into(), 3, "up".into()), ("c".into(), 4, "up".into())]);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        // Only the file itself is left: the one it was written to was renamed.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
