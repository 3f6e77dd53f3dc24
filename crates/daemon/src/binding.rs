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

/// Move every thread of running process `pid` to the CPUs of `mask` (a
/// claimed pooled rank, [`crate::node::NodeEffects::rebind`]). Threads are
/// listed in `/proc/PID/task`; one that ends meanwhile is passed over, and
/// one started while the list is read inherits its creator's new mask only
/// if the creator was moved first, which the main thread (listed first) is.
pub fn rebind(pid: i32, mask: &[u64]) {
    let tasks = match std::fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(t) => t,
        Err(e) => return tracing::warn!(pid, "cannot bind a claimed rank again: {e}"),
    };
    let mut tids: Vec<i32> = tasks.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    tids.sort();
    for tid in tids {
        // SAFETY: `mask` is a valid buffer of `mask.len()` words for the
        // kernel to read; a tid that no longer exists is an error (ESRCH).
        let rc = unsafe { libc::syscall(libc::SYS_sched_setaffinity, tid, std::mem::size_of_val(mask), mask.as_ptr()) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ESRCH) {
                tracing::warn!(pid, tid, "cannot bind a claimed rank's thread again: {e}");
            }
        }
    }
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

    #[test]
    fn a_running_process_and_its_threads_are_moved() {
        use std::process::{Command, Stdio};
        let own = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
        let Some(cpu) = (0..1024).rev().find(|&c| own.is_set(c).unwrap_or(false)) else { return };
        // A shell that waits on its stdin: one thread.
        let mut child = Command::new("sh").args(["-c", "read x"]).stdin(Stdio::piped()).spawn().unwrap();
        let pid = child.id() as i32;
        let mut mask = vec![0u64; cpu / 64 + 1];
        mask[cpu / 64] |= 1 << (cpu % 64);
        super::rebind(pid, &mask);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string();
        drop(child.stdin.take());
        child.wait().unwrap();
        assert_eq!(list, cpu.to_string());
    }
}
