//! dpm inside a real Grid Engine job (`tests/fixtures/gridengine.sh`:
//! Debian's Son of Grid Engine 8.1.9 on this host, queue `dpm.q`, parallel
//! environment `mpi` with tight integration).
//!
//! Scenarios, each a `qsub -pe mpi 4` job script running `dpm run` with no
//! option but `HYDRA_LAUNCHER_AUTOFORK=0` (Hydra's switch: on one host a
//! run would otherwise fork its daemon here, as Hydra does, and never reach
//! the agent): an MPICH hello on the allocation's slots, its daemon started
//! through `qrsh -inherit -V` (Grid Engine's accounting has the task; the
//! daemon runs under the task's `qrsh_starter` and `sge_shepherd`); an
//! `MPI_Comm_spawn`; and
//! a `qdel` of a running job, after which no process of the run is left
//! (every one carries the run's marker, the daemon too through `-V`).
//!
//! Needs root and `gridengine-master`/`-exec`/`-client` (scripts/setup.sh
//! --tests installs them). When the fixture cannot be built the test says
//! `SKIPPED: <reason>` and passes — except under `CI=true`, where it fails.

mod common;

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{dpm_bin, hello, leftovers_after, program, repo_root, unique, wait_for_ranks, FixtureLock, TempDir, MARKER_VAR};

fn fixture_script() -> PathBuf {
    repo_root().join("tests/fixtures/gridengine.sh")
}

struct Fixture {
    accounting: PathBuf,
    dir: TempDir,
    lock: Option<FixtureLock>,
    down: bool,
}

impl Fixture {
    fn up() -> Result<Fixture, String> {
        let lock = common::lock_fixture("dpm-gridengine-test.lock", "Grid Engine");
        let info = common::fixture_up(&fixture_script())?;
        let accounting = common::fixture_info(&info, "ACCOUNTING").into();
        Ok(Fixture { accounting, dir: TempDir::new("dpm-sge"), lock: Some(lock), down: false })
    }

    /// A Grid Engine client command (`gridengine.sh exec CMD`).
    fn client(&self, cmd: &[&str]) -> std::process::Output {
        let mut args = vec!["exec"];
        args.extend_from_slice(cmd);
        common::run_fixture(&fixture_script(), &args)
    }

    /// A job script running `body` with dpm's and the test's settings; its path.
    fn job(&self, name: &str, marker: &str, body: &str) -> String {
        let path = self.dir.path.join(format!("{name}.sh"));
        let script = format!(
            "#!/bin/sh\nexport PATH='{path}' DPM_NO_BOOT=1 HYDRA_LAUNCHER_AUTOFORK=0 {MARKER_VAR}='{marker}'\nunset DPM_LOG MPIEXEC_TIMEOUT\nDPM='{dpm}'\n{body}\n",
            path = std::env::var("PATH").unwrap_or_default(),
            dpm = dpm_bin(),
        );
        fs::write(&path, script).unwrap();
        path.display().to_string()
    }

    /// `qsub -sync y -pe mpi 4 SCRIPT`: its job id and output.
    fn run_job(&self, script: &str) -> (String, String) {
        let out_file = format!("{script}.out");
        let out = self.client(&["qsub", "-sync", "y", "-terse", "-pe", "mpi", "4", "-cwd", "-o", &out_file, "-j", "y", script]);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let text = fs::read_to_string(&out_file).unwrap_or_default();
        assert!(out.status.success(), "qsub failed: {stdout}{}\n{text}", String::from_utf8_lossy(&out.stderr));
        (stdout.lines().next().unwrap_or_default().trim().to_string(), text)
    }

    /// The job's records in Grid Engine's accounting that are parallel
    /// tasks (started by `qrsh -inherit`): their task ids (`1.localhost`).
    fn accounted_tasks(&self, job: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = fs::read_to_string(&self.accounting).unwrap_or_default();
            let tasks: Vec<String> = text
                .lines()
                .map(|l| l.split(':').collect::<Vec<_>>())
                .filter(|f| f.len() > 6 && f[5] == job && f[f.len() - 4] != "NONE")
                .map(|f| f[f.len() - 4].to_string())
                .collect();
            if !tasks.is_empty() || Instant::now() > deadline {
                return tasks;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn down(&mut self) -> Result<(), String> {
        self.down = true;
        let out = common::run_fixture(&fixture_script(), &["down"]);
        drop(self.lock.take());
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("gridengine.sh down failed: {}", String::from_utf8_lossy(&out.stderr)))
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if !self.down {
            if let Err(e) = self.down() {
                eprintln!("{e}");
            }
        }
    }
}

/// An MPICH hello on every slot, its daemon started through qrsh -inherit.
fn hello_through_qrsh(fx: &Fixture) {
    let marker = unique("dpm-sge");
    // The second run's rank names its ancestors: the daemon's are the task's
    // qrsh_starter and sge_shepherd (not the job script's dpm run).
    let ancestry = fx.dir.path.join("ancestry.sh");
    fs::write(
        &ancestry,
        "p=$$\nwhile [ \"$p\" -gt 1 ]; do\n  echo \"ancestor $(tr '\\0' ' ' < /proc/$p/cmdline)\"\n  p=$(awk '{print $4}' /proc/$p/stat)\ndone\n",
    )
    .unwrap();
    let body = format!("\"$DPM\" run --report-placement {hello}\necho \"dpm rc=$?\"\n\"$DPM\" run -n 1 /bin/sh {}\n", ancestry.display(), hello = hello());
    let (job, out) = fx.run_job(&fx.job("hello", &marker, &body));
    assert_eq!(out.lines().filter(|l| l.starts_with("hello from rank") && l.contains(" of 4 ")).count(), 4, "{out}");
    assert!(out.contains("dpm rc=0"), "{out}");
    assert!(out.contains("dpm: nodes from the sge allocation (PE_HOSTFILE="), "{out}");
    assert!(out.contains("/qrsh -inherit -V"), "the daemon did not start through qrsh: {out}");
    let chain: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("ancestor ")).collect();
    let daemon = chain.iter().position(|c| c.contains(" daemon --node 0 ")).unwrap_or_else(|| panic!("no dpm daemon above the rank: {chain:?}"));
    let started_by = |i: usize, what: &str| chain.get(i).is_some_and(|c| c.split_whitespace().next().is_some_and(|exe| exe.ends_with(what)));
    assert!(started_by(daemon + 1, "/qrsh_starter") && started_by(daemon + 2, "/sge_shepherd"), "the daemon is not a qrsh -inherit task: {chain:?}");
    let tasks = fx.accounted_tasks(&job);
    assert!(tasks.len() >= 2, "Grid Engine's accounting has no qrsh -inherit task of each run of job {job}: {tasks:?}\n{out}");
    assert!(leftovers_after(&marker, Duration::from_secs(10)).is_empty());
}

/// MPI_Comm_spawn inside the job: children on the allocation's slots.
fn spawn_in_a_job(fx: &Fixture) {
    let marker = unique("dpm-sge");
    let body = format!("\"$DPM\" run -n 1 {} 2\necho \"dpm rc=$?\"\n", program("spawn_args"));
    let (_, out) = fx.run_job(&fx.job("spawn", &marker, &body));
    assert!(out.contains("spawn ok children=2") && out.contains("dpm rc=0"), "{out}");
    assert!(leftovers_after(&marker, Duration::from_secs(10)).is_empty());
}

/// `qdel` of a running job ends every rank and daemon of its dpm run.
fn qdel_kills_everything(fx: &Fixture) {
    let marker = unique("dpm-sge");
    let script = fx.job("sleep", &marker, "\"$DPM\" run /bin/sleep 300\n");
    let out = fx.client(&["qsub", "-terse", "-pe", "mpi", "4", "-o", "/dev/null", "-j", "y", &script]);
    assert!(out.status.success(), "qsub: {}", String::from_utf8_lossy(&out.stderr));
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    // No -n: one rank per slot.
    wait_for_ranks(&marker, "/bin/sleep", 4);
    let before = common::marked_procs(&marker);
    assert!(before.iter().any(|(_, c)| c.contains(" daemon --node 0 ")), "no daemon of the run: {before:?}");
    let out = fx.client(&["qdel", &job]);
    assert!(out.status.success(), "qdel: {}", String::from_utf8_lossy(&out.stderr));
    let left = leftovers_after(&marker, Duration::from_secs(20));
    assert!(left.is_empty(), "left after qdel {job}: {left:?}");
}

#[test]
fn dpm_inside_a_grid_engine_job() {
    let mut fx = match Fixture::up() {
        Ok(fx) => fx,
        Err(reason) => return common::fixture_unavailable("Grid Engine fixture (gridengine)", &reason),
    };
    let scenarios: [(&str, common::Scenario<Fixture>); 3] = [
        ("hello through qrsh -inherit", hello_through_qrsh),
        ("MPI_Comm_spawn in a job", spawn_in_a_job),
        ("qdel kills every rank and daemon", qdel_kills_everything),
    ];
    let mut failures = common::run_scenarios("gridengine", &fx, &scenarios, |_, _| None);
    if let Err(e) = fx.down() {
        failures.push(format!("fixture down: {e}"));
    }
    assert!(failures.is_empty(), "{} of {} scenarios failed:\n\n{}", failures.len(), scenarios.len(), failures.join("\n\n"));
}
