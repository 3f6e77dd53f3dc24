//! The render farm (examples/renderfarm) under `dpm boot`: elastic growth
//! into the slots another booted run frees, given back visibly in `dpm
//! status`, and growth that backs off instead of giving up, so a slot freed
//! late is still grown into. Sizes and set-up as in `renderfarm.rs`.

mod common;
mod farm;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{dpm_bin, unique, Dpm};
use farm::{assert_checked, farm_cmd, povray_present};

/// A `dpm boot` of one node with `slots` slots in a private runtime
/// directory; `dpm down` on drop.
struct Boot {
    dir: PathBuf,
}

impl Boot {
    fn start(slots: u32) -> Boot {
        Boot::start_with(&["-hosts", &format!("localhost:{slots}")])
    }

    /// A boot of `dpm boot ARGS`.
    fn start_with(args: &[&str]) -> Boot {
        let dir = std::env::temp_dir().join(unique("dpm-farm-boot"));
        let out = Command::new(dpm_bin()).arg("boot").args(args).env("DPM_RUNTIME_DIR", &dir).env_remove("DPM_BOOT").output().expect("run dpm boot");
        assert!(out.status.success(), "dpm boot failed: {}", String::from_utf8_lossy(&out.stderr));
        Boot { dir }
    }

    /// `dpm run` through this boot.
    fn through(&self, dpm: Dpm) -> Dpm {
        dpm.env("DPM_NO_BOOT", "").env("DPM_RUNTIME_DIR", &self.dir.to_string_lossy())
    }

    /// Wait until node 0 of the boot runs `load` processes (a hang guard of
    /// `within` only; `what` names what did not happen).
    fn wait_for_load(&self, load: u32, within: Duration, what: &str) {
        let deadline = std::time::Instant::now() + within;
        while status_load(&self.dir).map(|(l, _)| l) != Some(load) {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The load (processes running) of node 0 of the boot in `dir` and the
/// number of runs, from `dpm status`.
fn status_load(dir: &Path) -> Option<(u32, usize)> {
    let out = Command::new(dpm_bin()).arg("status").env("DPM_RUNTIME_DIR", dir).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let load = text.lines().find(|l| l.starts_with("0 "))?.split_whitespace().nth(3)?.parse().ok()?;
    Some((load, text.matches("dpm run (pid").count()))
}

impl Drop for Boot {
    fn drop(&mut self) {
        let _ = Command::new(dpm_bin()).arg("down").env("DPM_RUNTIME_DIR", &self.dir).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn elastic_grows_into_slots_another_booted_run_frees_and_gives_them_back() {
    if !povray_present() {
        return;
    }
    // Four slots; another run holds two of them until the farm (master +
    // one worker) has filled the other two and been refused more (seen in
    // the load, then in two refusal lines it prints with --verbose); once
    // the other run ends the farm takes both freed slots in one soft spawn
    // (a fixed 0.2 s between tries, no backoff, so the spawn comes while
    // tiles wait): eight tiles, so that more than two still wait then (with
    // four, one worker had rendered all but one by then when tiles took
    // 1.3 s). Its idle workers are released before it ends: `dpm status` shows the load
    // drop to the master alone while the farm still runs (--check).
    let boot = Boot::start(4);
    let other = boot.through(Dpm::run(["-n", "2", "sleep", "600"])).spawn();
    boot.wait_for_load(2, Duration::from_secs(30), "the other run did not start");
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (stop, dir) = (stop.clone(), boot.dir.clone());
        std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                samples.extend(status_load(&dir));
                std::thread::sleep(Duration::from_millis(100));
            }
            samples
        })
    };
    let mut farm = boot
        .through(farm_cmd(
            &["--no-oversubscribe", "-n", "1"],
            &[
                "--mode",
                "elastic",
                "--workers",
                "1",
                "--max-workers",
                "3",
                "--width",
                "96",
                "--height",
                "256",
                "--grow-interval",
                "0.2",
                "--grow-interval-max",
                "0.2",
                "--verbose",
                "--check",
            ],
        ))
        .spawn();
    boot.wait_for_load(4, Duration::from_secs(60), "the farm did not fill the free slots");
    farm.wait_for_lines("farm: spawn refused (", 2);
    other.signal("TERM");
    let _ = other.wait_unchecked();
    let out = farm.wait();
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.join().expect("status sampler");
    assert_checked(&out, 8);
    out.assert_stdout_contains("farm: no room for another worker: ");
    out.assert_stdout_contains(" refused in ");
    // Both freed slots in one spawn: workers 2 and 3 together.
    out.assert_stdout_contains("farm: grew to 2 workers: worker 2 spawned in");
    out.assert_stdout_contains("farm: grew to 3 workers: worker 3 spawned in");
    let lines = out.lines();
    let took = |wid: u32| lines.iter().find_map(|l| l.strip_prefix(&format!("farm: grew to {wid} workers: worker {wid} spawned in ")).map(String::from));
    assert_eq!(took(2), took(3), "workers 2 and 3 came from one spawn\n{}", out.describe());
    out.assert_stdout_lacks("grew to 4 workers");
    // dpm status: all four slots in use at some point (the other run's two,
    // the master and a worker, then the master and three workers), then the
    // master alone while the farm's run is still listed.
    let full = samples.iter().position(|&(load, _)| load == 4);
    let full = full.unwrap_or_else(|| panic!("the load never reached 4: {samples:?}\n{}", out.describe()));
    assert!(
        samples[full..].iter().any(|&(load, runs)| load == 1 && runs == 1),
        "the workers' slots were not seen returned while the farm ran: {samples:?}\n{}",
        out.describe()
    );
}

#[test]
fn elastic_growth_backs_off_and_grows_into_a_slot_freed_late() {
    if !povray_present() {
        return;
    }
    // Three slots; another run holds one until the farm (master + worker 1)
    // has been refused well beyond --grow-retries (which used to stop growth
    // for good: the freed slot then sat idle). Growth backs off instead, and
    // takes the slot once the other run ends; the refusals are one line.
    let boot = Boot::start(3);
    let other = boot.through(Dpm::run(["-n", "1", "sleep", "600"])).spawn();
    boot.wait_for_load(1, Duration::from_secs(30), "the other run did not start");
    let mut farm = boot
        .through(farm_cmd(
            &["--no-oversubscribe", "-n", "1"],
            &[
                "--mode",
                "elastic",
                "--workers",
                "1",
                "--max-workers",
                "3",
                "--width",
                "96",
                "--height",
                "512",
                "--grow-interval",
                "0.1",
                "--grow-retries",
                "2",
                "--verbose",
                "--check",
            ],
        ))
        .spawn();
    // The farm holds the two free slots, and is refused more than twice
    // (each refusal is a line with --verbose, seen as it is printed).
    boot.wait_for_load(3, Duration::from_secs(60), "the farm did not fill the slots");
    farm.wait_for_lines("farm: spawn refused (", 3);
    other.signal("TERM");
    let _ = other.wait_unchecked();
    let out = farm.wait();
    assert_checked(&out, 16);
    out.assert_stdout_contains("farm: grew to 2 workers: worker 2 spawned in");
    let refused = out.lines().iter().filter(|l| l.starts_with("farm: spawn refused (")).count();
    assert!(refused > 2, "only {refused} refusals: the test did not outlast --grow-retries\n{}", out.describe());
    out.assert_stdout_lacks("grew to 3 workers");
    let series: Vec<String> = out.lines().into_iter().filter(|l| l.starts_with("farm: no room for another worker: ")).collect();
    assert!(series.first().is_some_and(|l| l.ends_with("; then grew")), "{series:?}\n{}", out.describe());
}

#[test]
fn elastic_grows_into_a_host_added_to_the_boot_while_it_runs() {
    if !povray_present() {
        return;
    }
    // Two slots: the master and worker 1 fill them and are refused more.
    // Then `dpm boot --add` joins a host of two slots (a forked daemon named
    // as another host): the same farm, still running, grows into it with
    // one soft spawn — workers 2 and 3 together, on the added host.
    // Started by fork (one forked daemon), so that --add forks the next one.
    let host = common::hostname();
    let boot = Boot::start_with(&["-hosts", &format!("{host}:2"), "-launcher", "fork"]);
    let mut farm = boot
        .through(farm_cmd(
            &["--no-oversubscribe", "--report-placement", "-n", "1"],
            &[
                "--mode",
                "elastic",
                "--workers",
                "1",
                "--max-workers",
                "3",
                "--width",
                "96",
                "--height",
                "512",
                "--grow-interval",
                "0.2",
                "--grow-interval-max",
                "0.2",
                "--verbose",
                "--check",
            ],
        ))
        .spawn();
    boot.wait_for_load(2, Duration::from_secs(60), "the farm did not fill the slots");
    farm.wait_for_lines("farm: spawn refused (", 2);
    let added = format!("{host}-added");
    let out = Command::new(dpm_bin())
        .args(["boot", "--add", "-hosts", &format!("{added}:2")])
        .env("DPM_RUNTIME_DIR", &boot.dir)
        .env_remove("DPM_BOOT")
        .output()
        .expect("run dpm boot --add");
    assert!(out.status.success(), "dpm boot --add: {}", String::from_utf8_lossy(&out.stderr));
    let out = farm.wait();
    assert_checked(&out, 16);
    out.assert_stdout_contains("farm: grew to 3 workers: worker 3 spawned in");
    let lines = out.lines();
    let took = |wid: u32| lines.iter().find_map(|l| l.strip_prefix(&format!("farm: grew to {wid} workers: worker {wid} spawned in ")).map(String::from));
    assert_eq!(took(2), took(3), "workers 2 and 3 came from one spawn\n{}", out.describe());
    let placed = common::placement(&out.stderr_str());
    assert!(placed.iter().any(|p| p.1 == "0-1" && p.2 == added), "not on the added host: {placed:?}\n{}", out.describe());
}
