//! The POV-Ray render farm (examples/renderfarm, paper 001's application)
//! under `dpm run`: every mode renders the glass chess board pixel-identically
//! to one plain povray run (the farm's own `--check`), on one node and on two
//! virtual nodes; elastic mode grows only into free slots under
//! `--no-oversubscribe` (one `soft` spawn for all the room there is) and
//! releases its workers (under `dpm boot`: `renderfarm_boot.rs`); bad input is
//! refused clearly; a killed worker ends the run (dpm's default policy), or
//! under `--on-spawned-failure=continue` is found at once, its tile
//! re-rendered and the worker replaced; a hung worker is declared lost and
//! its tile re-rendered elsewhere; a killed povray's tile is rendered again
//! (a bounded number of times: a broken scene still fails); refusals are
//! one line; Ctrl-C ends the farm with 130 and no tracebacks. Also the
//! `soft` spawn key itself.
//!
//! Sizes are tiny (96x64: two 32-row tiles, 128 rows for four) and povray runs
//! under `nice -n 10`. POV-Ray comes from setup.sh (`povray povray-examples`);
//! without it these tests fail under `CI=true` and say they skipped otherwise.

mod common;
mod farm;

use common::{repo_root, unique, Output};
use farm::{assert_checked, farm, farm_cmd, povray_present, python};
use std::time::Duration;

fn checked_render(dpm_args: &[&str], mode: &[&str]) -> Option<Output> {
    if !povray_present() {
        return None;
    }
    let png = std::env::temp_dir().join(format!("{}.png", unique("farm")));
    let png_s = png.to_string_lossy().into_owned();
    let mut args = vec!["--width", "96", "--height", "64", "--check", "--out", &png_s];
    args.extend_from_slice(mode);
    let out = farm(dpm_args, &args);
    let data = std::fs::read(&png);
    let _ = std::fs::remove_file(&png);
    assert_checked(&out, 2);
    let data = data.unwrap_or_else(|e| panic!("no image at {png_s}: {e}\n{}", out.describe()));
    assert!(data.starts_with(b"\x89PNG\r\n\x1a\n"), "{png_s} is not a PNG");
    // IHDR: width and height, big-endian, at bytes 16..24.
    assert_eq!(&data[16..24], &[0, 0, 0, 96, 0, 0, 0, 64], "PNG size");
    Some(out)
}

#[test]
fn farm_library_unit_tests_pass() {
    // The MPI-free parts (PNG/PPM, settings, the elastic policy): Python's unittest.
    let out = std::process::Command::new(repo_root().join(".venv/bin/python"))
        .args(["-m", "unittest", "discover", "-s"])
        .arg(repo_root().join("examples/renderfarm/tests"))
        .output()
        .expect("run the venv's python");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("\nOK"), "farmlib unit tests failed:\n{text}");
}

#[test]
fn static_mode_renders_pixel_identically() {
    let _ = checked_render(&["-n", "3"], &["--mode", "static"]);
}

#[test]
fn dynamic_mode_renders_pixel_identically() {
    let Some(out) = checked_render(&["-n", "1"], &["--mode", "dynamic", "--workers", "2"]) else { return };
    // One group, released together: the count goes down by one per worker.
    let released: Vec<String> = out.lines().into_iter().filter(|l| l.starts_with("farm: released worker")).collect();
    assert_eq!(released.len(), 2, "{}", out.describe());
    assert!(released[0].ends_with("; 1 worker remains") && released[1].ends_with("; 0 workers remain"), "counts: {released:?}");
}

#[test]
fn elastic_mode_renders_pixel_identically() {
    let _ = checked_render(&["-n", "1"], &["--mode", "elastic", "--workers", "1", "--max-workers", "3"]);
}

#[test]
fn static_mode_on_two_virtual_nodes_renders_pixel_identically() {
    let _ = checked_render(&["--virtual-nodes", "2", "-n", "3"], &["--mode", "static"]);
}

#[test]
fn dynamic_mode_on_two_virtual_nodes_renders_pixel_identically() {
    let _ = checked_render(&["--virtual-nodes", "2", "-n", "1"], &["--mode", "dynamic", "--workers", "2"]);
}

#[test]
fn elastic_mode_on_two_virtual_nodes_renders_pixel_identically() {
    let _ = checked_render(&["--virtual-nodes", "2", "-n", "1"], &["--mode", "elastic", "--workers", "1", "--max-workers", "3"]);
}

#[test]
fn elastic_grows_only_into_free_slots_and_releases_its_workers() {
    if !povray_present() {
        return;
    }
    // Three slots: the master and two workers. Four tiles keep tiles waiting
    // after the second worker starts, so the farm asks for a third: refused.
    let out = farm(
        &["--no-oversubscribe", "--usize", "3", "-n", "1"],
        &["--mode", "elastic", "--workers", "1", "--max-workers", "4", "--width", "96", "--height", "128", "--grow-interval", "0.2", "--check"],
    );
    assert_checked(&out, 4);
    out.assert_stdout_contains("farm: grew to 1 worker: worker 1 spawned");
    out.assert_stdout_contains("farm: grew to 2 workers: worker 2 spawned");
    out.assert_stdout_lacks("grew to 3 workers");
    // The refusals: one line for the series, none from dpm (a soft spawn
    // that finds no room is a normal answer, not a warning).
    let refusals: Vec<String> = out.lines().into_iter().filter(|l| l.contains("no room")).collect();
    assert_eq!(refusals.len(), 1, "one line per series of refusals: {refusals:?}\n{}", out.describe());
    assert!(refusals[0].starts_with("farm: no room for another worker: ") && refusals[0].contains(" refused in "), "{refusals:?}");
    assert!(!out.stderr_str().contains("warning") && !out.stderr_str().contains("WARN"), "dpm warned\n{}", out.describe());
    out.assert_stdout_contains("farm: released worker 1 (");
    out.assert_stdout_contains("farm: released worker 2 (");
    // Released means disconnected and gone before the master ends.
    let lines = out.lines();
    let last_release = lines.iter().rposition(|l| l.starts_with("farm: released worker")).expect("release lines");
    let rendered = lines.iter().position(|l| l.starts_with("farm: rendered 4 tiles")).expect("rendered line");
    assert!(last_release < rendered, "workers were released after the end\n{}", out.describe());
}

#[test]
fn a_missing_povray_is_a_clear_error() {
    // Checked before anything starts: no povray needed on the machine.
    let out = farm(&["-n", "1"], &["--mode", "dynamic", "--povray", "/nonexistent/povray"]);
    out.assert_code(2);
    out.assert_stdout_contains("farm: error: POV-Ray (/nonexistent/povray) is not installed or not on PATH");
    out.assert_stdout_lacks("farm: rendering");
}

#[test]
fn a_missing_scene_is_a_clear_error_in_every_rank() {
    let out = farm(&["-n", "3"], &["--mode", "static", "--scene", "/nonexistent/scene.pov"]);
    out.assert_code(2);
    out.assert_stdout_contains("farm: error: scene file /nonexistent/scene.pov does not exist");
}

#[test]
fn static_mode_without_workers_is_bad_input() {
    // Wrong -n for the mode: exit 2 (the README's bad input), before
    // anything starts, like dynamic mode with -n 2.
    let out = farm(&["-n", "1"], &["--mode", "static"]);
    out.assert_code(2);
    out.assert_stdout_contains("farm: error: --mode static needs workers: run it with -n P+1 for P workers");
    out.assert_stdout_lacks("farm: rendering");
    let out = farm(&["-n", "2"], &["--mode", "dynamic"]);
    out.assert_code(2);
    out.assert_stdout_contains("farm: error: --mode dynamic starts alone");
}

#[test]
fn ctrl_c_ends_the_farm_with_130_and_no_tracebacks() {
    if !povray_present() {
        return;
    }
    // dpm forwards SIGINT to every process: the master and both workers
    // leave quietly (with their povray), dpm exits 128+2.
    let mut run = farm_cmd(&["-n", "1"], &["--mode", "dynamic", "--workers", "2", "--width", "96", "--height", "512"]).spawn();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !common::marked_procs(run.marker()).iter().any(|(_, cmd)| cmd.contains("povray") && cmd.contains("+SR")) {
        assert!(std::time::Instant::now() < deadline, "no povray started within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    run.wait_for_procs(3); // the master and its two workers (and a povray)
    run.signal("INT");
    let out = run.wait();
    out.assert_code(130);
    out.assert_stdout_contains("farm: interrupted (SIGINT)");
    out.assert_stdout_lacks("farm: rendered");
    for text in [out.stdout_str(), out.stderr_str()] {
        assert!(!text.contains("Traceback") && !text.contains("KeyboardInterrupt"), "a traceback\n{}", out.describe());
    }
}

#[test]
fn tiles_off_the_render_block_grid_are_refused() {
    let out = farm(&["-n", "1"], &["--mode", "dynamic", "--tile-rows", "20"]);
    out.assert_code(2);
    out.assert_stdout_contains("farm: error: --tile-rows 20 must be a positive multiple of the render block size 32");
}

#[test]
fn a_scene_povray_rejects_ends_the_run_naming_the_worker() {
    if !povray_present() {
        return;
    }
    // Every try fails the same way: after --tile-retries (default 2) more
    // tries the render ends, so a broken scene still fails fast.
    let scene = common::TempFile::new("farm-bad-scene", b"sphere { <0,0,0>, 1 pigment { colour Nonsense } }\n", 0o644);
    let out = farm(&["-n", "1"], &["--mode", "dynamic", "--scene", &scene.path_str(), "--width", "32", "--height", "32"]);
    out.assert_code(3);
    out.assert_stdout_contains("tile 0 re-queued (try 2 of 3)");
    out.assert_stdout_contains("tile 0 re-queued (try 3 of 3)");
    out.assert_stdout_contains("farm: error: tile 0 failed 3 times, last: worker ");
    out.assert_stdout_contains("povray exited with ");
}

#[test]
fn an_elastic_farm_that_can_start_no_worker_gives_up() {
    if !povray_present() {
        return;
    }
    // One slot, the master's: every growth is refused and no worker will
    // ever render, so after --grow-retries refusals in a row it ends (3).
    let out = farm(
        &["--no-oversubscribe", "--usize", "1", "-n", "1"],
        &["--mode", "elastic", "--width", "96", "--height", "64", "--grow-interval", "0.1", "--grow-retries", "3"],
    );
    out.assert_code(3);
    out.assert_stdout_contains("farm: no room for another worker: 3 spawns refused in ");
    out.assert_stdout_contains("; giving up: no worker left after 3 in a row");
    out.assert_stdout_contains("farm: error: no workers left and 2 tiles unrendered");
}

#[test]
fn a_killed_povray_is_rendered_again_and_the_worker_goes_on() {
    if !povray_present() {
        return;
    }
    // The OOM killer or a signal ends a worker's povray: its tile is
    // re-queued (to the other worker if one is idle, else the same one),
    // nobody is lost, and the image is complete and pixel-identical — in
    // each mode, also under --on-spawned-failure=continue with an idle
    // healthy worker (which used to end the render with exit 3).
    let runs: [(&[&str], &[&str]); 3] = [
        (&["-n", "2"], &["--mode", "static"]),
        (&["-n", "1"], &["--mode", "dynamic", "--workers", "2"]),
        (&["--on-spawned-failure=continue", "-n", "1"], &["--mode", "elastic", "--workers", "2", "--max-workers", "2"]),
    ];
    for (dpm_args, mode) in runs {
        let mut args = vec!["--width", "96", "--height", "64", "--fault-tile", "1", "--fault", "povray", "--check"];
        args.extend_from_slice(mode);
        let out = farm(dpm_args, &args);
        assert_checked(&out, 2);
        out.assert_stdout_contains("fault povray on tile 1: killing povray pid ");
        out.assert_stdout_contains("povray was killed by signal 9 (SIGKILL) rendering ");
        out.assert_stdout_contains("; tile 1 re-queued (try 2 of 3)");
        out.assert_stdout_lacks("lost worker");
    }
}

#[test]
fn a_worker_killed_mid_tile_ends_the_run_at_once() {
    if !povray_present() {
        return;
    }
    // dpm's default policy: any rank's failure ends the whole run.
    for (dpm_args, mode) in [(&["-n", "3"][..], "static"), (&["-n", "1"][..], "dynamic")] {
        let out = farm(dpm_args, &["--mode", mode, "--width", "96", "--height", "64", "--fault-tile", "1", "--fault", "kill"]);
        let ended = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
        out.assert_code(137);
        // "farm: worker pid N fault kill on tile 1 at <unix time>"; measured: 13-51 ms to dpm's exit.
        let killed: f64 = out
            .lines()
            .iter()
            .find_map(|l| l.split_once("fault kill on tile 1 at ").map(|(_, t)| t.trim().parse().expect("kill time")))
            .unwrap_or_else(|| panic!("no kill line\n{}", out.describe()));
        assert!(ended - killed < 5.0, "the run ended {:.1} s after the kill\n{}", ended - killed, out.describe());
        out.assert_stderr_contains("was killed by signal 9 (SIGKILL)");
        out.assert_stdout_lacks("farm: rendered");
    }
}

#[test]
fn a_hung_worker_is_lost_and_its_tile_rendered_elsewhere() {
    if !povray_present() {
        return;
    }
    // MPICH reports nothing for a silent peer: the farm's tile timeout finds
    // it, re-queues the tile, finishes the image with the other worker, and
    // leaves without MPI_Finalize (exit 4), which ends the stopped worker.
    // The timeout is generous: a healthy worker's tile under a loaded
    // machine must not look hung (with 5 s both were declared lost).
    let out = farm(
        &["-n", "1"],
        &["--mode", "dynamic", "--workers", "2", "--width", "96", "--height", "64", "--fault-tile", "1", "--fault", "stop", "--tile-timeout", "15", "--check"],
    );
    out.assert_code(4);
    out.assert_stdout_contains("fault stop on tile 1");
    out.assert_stdout_contains("farm: lost worker ");
    out.assert_stdout_contains("tile 1 re-queued");
    out.assert_stdout_contains("farm: check: pixel-identical to a plain povray render");
    out.assert_stdout_contains("farm: 1 worker(s) were lost; leaving without MPI_Finalize");
    // Exit 4 is the farm's own answer (image complete, a worker lost):
    // reported as that code, not as a failed job.
    assert!(out.stderr_str().lines().any(|l| l.starts_with("dpm: rank 0 ") && l.contains("exited with code 4")), "{}", out.describe());
    assert!(!out.stderr_str().contains("job failed"), "{}", out.describe());
}

#[test]
fn a_killed_worker_is_replaced_under_on_spawned_failure_continue() {
    if !povray_present() {
        return;
    }
    // The run survives the spawned worker's death; MPICH tells the master
    // nothing, but the worker's process is gone, which the master checks
    // (same machine): lost at once (the tile timeout is 300 s, beyond the
    // watchdog), its tile re-queued, a new worker grown into its slot.
    let out = farm(
        &["--on-spawned-failure=continue", "-n", "1"],
        &["--mode", "elastic", "--workers", "2", "--max-workers", "2", "--width", "96", "--height", "64", "--fault-tile", "1", "--fault", "kill", "--check"],
    );
    out.assert_code(4);
    out.assert_stdout_contains("fault kill on tile 1");
    out.assert_stderr_contains("was killed by signal 9 (SIGKILL); the job is ended, the run goes on (failure policy)");
    out.assert_stdout_contains("is gone); tile 1 re-queued");
    out.assert_stdout_contains("farm: grew to 2 workers: worker 3 spawned");
    out.assert_stdout_contains("farm: rendered 2 tiles in ");
    out.assert_stdout_contains("farm: check: pixel-identical to a plain povray render");
    out.assert_stdout_contains("farm: 1 worker(s) were lost; leaving without MPI_Finalize");
    // The healthy workers were released as always (their own groups).
    out.assert_stdout_contains("farm: released worker 3 (1 tile); ");
}

#[test]
fn a_tile_that_loses_its_worker_counts_against_its_retries() {
    if !povray_present() {
        return;
    }
    // A tile that kills whoever renders it must not use up replacement
    // workers for ever: with --tile-retries 0 its first loss ends the render.
    let out = farm(
        &["--on-spawned-failure=continue", "-n", "1"],
        &[
            "--mode",
            "elastic",
            "--workers",
            "2",
            "--max-workers",
            "2",
            "--width",
            "96",
            "--height",
            "64",
            "--fault-tile",
            "1",
            "--fault",
            "kill",
            "--tile-retries",
            "0",
        ],
    );
    out.assert_code(3);
    out.assert_stdout_contains("farm: error: tile 1 failed 1 time, last: lost worker ");
    out.assert_stdout_lacks("farm: rendered");
}

#[test]
fn a_dynamic_group_ended_by_the_policy_ends_the_farm_quickly() {
    if !povray_present() {
        return;
    }
    // `continue` ends the failed spawned job as a whole: in dynamic mode that
    // is every worker (one spawn). The master finds them gone and aborts
    // (exit 3) instead of waiting for tiles that will never come.
    let out = farm_cmd(&["-n", "1"], &["--mode", "dynamic", "--workers", "2", "--width", "96", "--height", "64", "--fault-tile", "1", "--fault", "kill"])
        .env("DPM_ON_SPAWNED_FAILURE", "continue")
        .output();
    out.assert_code(3);
    out.assert_stdout_contains("farm: error: no workers left and 2 tiles unrendered");
    out.assert_stdout_lacks("farm: rendered");
}

#[test]
fn a_soft_spawn_starts_as_many_as_fit_and_codes_the_rest() {
    let soft = |dpm_args: &[&str], maxprocs: &str, value: &str| python(dpm_args, "tests/soft_spawn.py", &[maxprocs, value]).output();
    let three_slots = ["--no-oversubscribe", "--usize", "3", "-n", "1"];
    // Three slots, the parent holds one: two of 1..5 start; MPICH's
    // MPI_ERR_SPAWN (42) for the other three.
    let out = soft(&three_slots, "5", "1:5");
    out.assert_success();
    out.assert_stdout_contains("soft spawn: remote 2 errcodes 0,0,42,42,42");
    // Only odd counts allowed: one.
    let out = soft(&three_slots, "5", "1:5:2");
    out.assert_stdout_contains("soft spawn: remote 1 errcodes 0,42,42,42,42");
    // No allowed count fits: refused, a normal answer for a soft spawn
    // (no warning; dpm says why at -v or DPM_LOG=info).
    let out = soft(&three_slots, "5", "4,5");
    out.assert_stdout_contains("soft spawn: refused");
    assert!(!out.stderr_str().contains("warning") && !out.stderr_str().contains("WARN"), "a soft spawn without room is no warning\n{}", out.describe());
    let mut args: Vec<&str> = three_slots.to_vec();
    args.insert(0, "-v");
    let out = soft(&args, "5", "4,5");
    out.assert_stdout_contains("soft spawn: refused");
    out.assert_stderr_contains("soft spawn: no room: spawning 4 processes would exceed the 3 slots (1 in use)");
    // A value that allows nothing is refused clearly.
    let out = soft(&three_slots, "2", "1:x");
    out.assert_stdout_contains("soft spawn: refused");
    out.assert_stderr_contains("soft '1:x' allows no process count from 1 to maxprocs 2");
    // Oversubscription allowed: every process.
    let out = soft(&["-n", "1"], "3", "1:3");
    out.assert_stdout_contains("soft spawn: remote 3 errcodes 0,0,0");
}
