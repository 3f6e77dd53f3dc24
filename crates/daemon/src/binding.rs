//! The node's side of binding: its topology and what this process may use,
//! for the node reactor's [`dpm_binding::Binder`]. The policy itself is pure
//! logic in `dpm-binding`; the CPU and memory masks are applied in each child
//! before `exec` ([`crate::spawn`]), with no helper process.

use dpm_binding::{Binder, CpuSet, Topology};

/// The binder of this node: hwloc's topology (the machine's, or the file
/// `HWLOC_XMLFILE` names) restricted to the CPUs in this process's own
/// affinity mask and the NUMA nodes it may use (`Cpus_allowed_list`,
/// `Mems_allowed_list`: a Slurm step's or cgroup's cpuset is never left).
pub fn node_binder() -> Result<Binder, String> {
    let xml = crate::topology::xml().map_err(|e| format!("no hwloc topology to bind with: {e}"))?;
    let topo = Topology::from_xml(&String::from_utf8_lossy(&xml)).map_err(|e| format!("the hwloc topology cannot be read: {e}"))?;
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim_start_matches(':').trim().to_string());
    let cpus = field("Cpus_allowed_list").ok_or("no Cpus_allowed_list in /proc/self/status")?;
    let cpus = CpuSet::parse_list(&cpus).map_err(|e| e.to_string())?;
    let mems = field("Mems_allowed_list").and_then(|m| CpuSet::parse_list(&m).ok());
    Binder::new(topo, &cpus, mems).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_machine_binds_within_its_own_affinity() {
        match super::node_binder() {
            Ok(b) => {
                let own = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
                for cpu in b.allowed().iter() {
                    assert!(own.is_set(cpu as usize).unwrap(), "CPU {cpu} is not ours");
                }
            }
            // Without libhwloc.so.15 the error says so.
            Err(e) => assert!(e.contains("hwloc"), "{e}"),
        }
    }
}
