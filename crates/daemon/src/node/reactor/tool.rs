//! A debugger's tool daemon (the MPIR tool-daemon extension): started once
//! on this node for a job that has ranks here, told which of them are
//! here, ended with the job (`forget`).

use dpm_kvs::JobId;
use dpm_proto::ToolDaemon;

use super::NodeReactor;
use crate::node::{NodeEffects, ToolStart};

impl NodeReactor {
    /// Start `tool` for `job` here (`host`: this node's name in the job's
    /// table), once: nothing for a job unknown here
    /// (over already) or whose tool runs.
    pub(super) fn start_tool(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, tool: ToolDaemon, host: String) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        if j.tool {
            return;
        }
        j.tool = true;
        let mut here: Vec<(u32, i32)> = self.procs.iter().filter(|((pj, _), p)| *pj == job && p.exit.is_none()).map(|((_, r), p)| (r.0, p.pid)).collect();
        here.sort_unstable();
        let join = |f: &dyn Fn(&(u32, i32)) -> String| here.iter().map(f).collect::<Vec<_>>().join(" ");
        let env = vec![
            ("DPM_TOOL_HOST".to_string(), host.clone()),
            ("DPM_TOOL_RANKS".to_string(), join(&|(r, _)| r.to_string())),
            ("DPM_TOOL_PIDS".to_string(), join(&|(_, p)| p.to_string())),
        ];
        fx.start_tool(ToolStart { job, host, kvsname: j.kvsname.clone(), tool, env });
    }
}
