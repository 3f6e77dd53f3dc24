//! What the PMI-2 programs of tests/programs print when they worked, for
//! every build of them: against Slurm's libpmi2 (`pmi2_*`), against dpm's
//! (`dpm_pmi2_*`), and Slurm-built ones loading dpm's library.

use super::Output;

/// pmi2_putfence, `n` ranks on one node: every rank's lines, one job id.
pub fn assert_putfence(out: &Output, n: u32) {
    out.assert_success();
    out.assert_stdout_lacks("FAIL");
    let lines = out.lines();
    let mut jobids = Vec::new();
    for r in 0..n {
        let head = format!("pmi2 rank {r} size {n} appnum 0 spawned 0 jobid ");
        let line = lines.iter().find(|l| l.starts_with(&head)).unwrap_or_else(|| panic!("no {head:?} line\n{}", out.describe()));
        jobids.push(line[head.len()..].to_string());
        let mapping = format!("pmi2 rank {r} PMI_process_mapping=(vector,(0,1,{n}))");
        assert!(lines.contains(&mapping), "no {mapping:?} line\n{}", out.describe());
        let ok = format!("pmi2 putfence ok rank {r} size {n}");
        assert!(lines.contains(&ok), "no {ok:?} line\n{}", out.describe());
    }
    assert!(jobids.iter().all(|j| *j == jobids[0] && !j.is_empty()), "ranks disagree on the job id: {jobids:?}");
}

/// pmi2_nodeattr, 3 ranks on one node: the waiting gets really waited.
pub fn assert_nodeattr(out: &Output) {
    out.assert_success();
    out.assert_stdout_lacks("FAIL");
    let lines = out.lines();
    // MPI_LOCALRANKID is 0 for rank 0 on a single node: rank 0 puts, the
    // others wait (about 300 ms) for the value.
    assert!(lines.contains(&"pmi2 rank 0 put shm-handle".to_string()), "{}", out.describe());
    for r in 1..3 {
        let head = format!("pmi2 rank {r} got shm-handle after ");
        let line = lines.iter().find(|l| l.starts_with(&head)).unwrap_or_else(|| panic!("no {head:?} line\n{}", out.describe()));
        let ms: f64 = line[head.len()..].trim_end_matches(" ms").parse().unwrap_or_else(|_| panic!("bad line {line:?}"));
        // The get was issued before the put: it must have blocked, not failed.
        assert!(ms >= 100.0, "rank {r} got the attribute after {ms} ms: the wait did not block\n{}", out.describe());
    }
    for r in 0..3 {
        assert!(lines.contains(&format!("pmi2 nodeattr ok rank {r}")), "{}", out.describe());
    }
}

/// pmi2_nameserv, 3 ranks: publish, lookup by rank 1, unpublish.
pub fn assert_nameserv(out: &Output) {
    out.assert_success();
    out.assert_stdout_lacks("FAIL");
    let lines = out.lines();
    assert!(lines.contains(&"pmi2 rank 1 lookup svc-test=port-xyz".to_string()), "{}", out.describe());
    for r in 0..3 {
        assert!(lines.contains(&format!("pmi2 nameserv ok rank {r}")), "{}", out.describe());
    }
}

/// pmi2_abort, 3 ranks: rank 1 aborts and the job ends at once.
pub fn assert_abort(out: &Output) {
    assert_ne!(out.code(), 0, "{}", out.describe());
    out.assert_stdout_contains("rank 1 calling PMI2_Abort");
    out.assert_stdout_lacks("was not killed");
    out.assert_stdout_lacks("PMI2_Abort returned");
    out.assert_stderr_contains("MPI_Abort");
    out.assert_stderr_contains("rank 1 ");
    out.assert_stderr_contains("pmi2 abort test");
}

/// pmi2_spawn, 1 parent: 2 children that see the job id the spawn returned.
pub fn assert_spawn(out: &Output) {
    out.assert_success();
    out.assert_stdout_lacks("FAIL");
    let lines = out.lines();
    let parent = lines.iter().find(|l| l.starts_with("pmi2 spawn parent ok child job ")).unwrap_or_else(|| panic!("{}", out.describe()));
    // The job id the spawn returned is the one the children see.
    let jobid = parent["pmi2 spawn parent ok child job ".len()..].split(';').next().unwrap().to_string();
    for r in 0..2 {
        let child = format!("pmi2 spawn child {r} of 2 ok jobid {jobid}");
        assert!(lines.contains(&child), "no {child:?} line\n{}", out.describe());
    }
}
