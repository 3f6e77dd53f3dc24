//! Debugging on a node, driven with a recorder: a debugger's tool daemon
//! (`reactor/tool.rs`) started once per job with the node's ranks and pids
//! in its environment, never for a job not here, ended with the job; the
//! ranks' report (`reactor/report.rs`) says since when a rank waits.

use dpm_kvs::JobId;
use dpm_proto::{PmiMode, ToDaemon, ToLauncher, ToolDaemon};

use super::recorder::{Recorded, RecordingEffects};
use super::tests::{init, launch, launched, node, talk, J};
use super::ToolStart;

fn tool() -> ToolDaemon {
    ToolDaemon { path: "/bin/tool".into(), args: vec!["-v".into()] }
}

fn started(fx: &RecordingEffects) -> Vec<&ToolStart> {
    fx.log.iter().filter_map(|r| if let Recorded::StartTool(s) = r { Some(s) } else { None }).collect()
}

fn var<'a>(s: &'a ToolStart, name: &str) -> &'a str {
    s.env.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v.as_str())
}

#[test]
fn a_tool_daemon_starts_once_with_the_nodes_ranks_and_ends_with_its_job() {
    let (mut r, mut fx) = node();
    // Ranks 0 and 1 of a job of 3 are here.
    r.on_message(&mut fx, ToDaemon::Launch(launch(3, 2, PmiMode::Fd)));
    fx.settle(&mut r);
    let mut pids: Vec<(u32, u32)> =
        fx.take_up().iter().filter_map(|m| if let ToLauncher::Started { rank, pid, .. } = m { Some((rank.0, *pid)) } else { None }).collect();
    pids.sort_unstable();
    assert_eq!(pids.len(), 2);
    r.on_message(&mut fx, ToDaemon::StartTool { job: JobId(99), tool: tool(), host: "n0-v1".into() });
    assert!(started(&fx).is_empty(), "no tool for a job not here: {:?}", fx.log);
    for _ in 0..2 {
        r.on_message(&mut fx, ToDaemon::StartTool { job: J, tool: tool(), host: "n0-v1".into() });
    }
    let starts = started(&fx);
    assert_eq!(starts.len(), 1, "once per job and node: {:?}", fx.log);
    let s = starts[0];
    assert_eq!((s.job, s.host.as_str(), &s.tool), (J, "n0-v1", &tool()));
    assert_eq!(var(s, "DPM_TOOL_HOST"), "n0-v1");
    assert_eq!(var(s, "DPM_TOOL_RANKS"), "0 1");
    assert_eq!(var(s, "DPM_TOOL_PIDS"), format!("{} {}", pids[0].1, pids[1].1));
    assert!(!fx.log.iter().any(|r| matches!(r, Recorded::EndTool(_))));
    r.on_message(&mut fx, ToDaemon::Forget { job: J });
    assert_eq!(fx.log.iter().filter(|r| matches!(r, Recorded::EndTool(j) if *j == J)).count(), 1, "{:?}", fx.log);
}

#[test]
fn a_report_says_since_when_a_rank_waits_in_its_call() {
    let (mut r, mut fx) = node();
    let conns = launched(&mut r, &mut fx, 2);
    init(&mut r, &mut fx, &conns);
    fx.now = 10_000_000;
    assert_eq!(talk(&mut r, &mut fx, conns[0], "cmd=barrier_in\n"), "", "rank 0 waits for the fence");
    fx.now = 14_870_000;
    // A later message of another rank does not move rank 0's stamp.
    r.on_pmi_bytes(&mut fx, conns[1], b"cmd=get_maxes\n");
    fx.now = 14_870_000;
    r.on_message(&mut fx, ToDaemon::Report { job: J, stacks: false });
    let mut states: Vec<(u32, String)> =
        fx.take_up().into_iter().filter_map(|m| if let ToLauncher::RankReport { rank, state, .. } = m { Some((rank.0, state)) } else { None }).collect();
    states.sort();
    assert_eq!(states, vec![(0, "waits in PMI `barrier_in` for 4.8 s".to_string()), (1, "running (PMI initialised, no PMI call pending)".to_string())]);
}
