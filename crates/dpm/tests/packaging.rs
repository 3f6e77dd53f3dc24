//! dpm installed the ways users install things (README, "Install"; docs/reference.md):
//!
//! - `dpm --version` names the commit and the build date; `dpm man` is the
//!   manual page, generated from the option table, and renders cleanly;
//! - `cargo install --locked --path crates/dpm` into a scratch root gives a binary
//!   that needs nothing of the tree: run in a private mount namespace with
//!   the tree's sources and build outputs hidden (empty tmpfs over
//!   `crates/`, `bench/`, `target/`), it runs MPICH's hello and `dpm model`
//!   answers with the measured calibration it embeds;
//! - the dpm-mpi wheel (`scripts/wheel.sh`, maturin over the workspace's
//!   release build) installed into a fresh venv beside the pinned `mpich`
//!   and `mpi4py` wheels (from `target/wheelhouse/`, downloaded once, then
//!   installed with `--no-index`), run with only the venv's `bin` on PATH
//!   and the ranks in a scratch directory: mpi4py at -n 4 through
//!   `dpm run`, `mpiexec.dpm`, a program built against the wheel's
//!   `libpmi2`, the mpich wheel's own `mpiexec` left in place, and after
//!   the opt-in `ln -sfn dpm mpiexec` a spawn (also from a singleton) and
//!   the render farm from a copy of `examples/renderfarm`.
//!
//! Needs root for the mount namespace (as the fixtures do) and, the first
//! time, PyPI for maturin and the two wheels.

mod common;

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{hello, repo_root, unique, Dpm, Output};

/// A scratch directory, removed when dropped (also when a test fails).
struct Scratch(PathBuf);

impl Scratch {
    fn new(prefix: &str) -> Scratch {
        let dir = std::env::temp_dir().join(unique(prefix));
        fs::create_dir_all(&dir).expect("create a scratch directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Run a command to its end within `limit` (killed after it); its output.
fn run(cmd: &mut Command, limit: Duration) -> std::process::Output {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait for a command").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("reap a killed command");
            panic!("{what} did not finish within {limit:?}\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("collect a command's output")
}

/// Run a command that must succeed; its stdout.
fn check(cmd: &mut Command, limit: Duration) -> String {
    let what = format!("{cmd:?}");
    let out = run(cmd, limit);
    assert!(out.status.success(), "{what} failed ({}):\n{}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `NAME=value` pin of scripts/setup.sh (the one place versions are set).
fn setup_pin(name: &str) -> String {
    let setup = fs::read_to_string(repo_root().join("scripts/setup.sh")).expect("read scripts/setup.sh");
    let line = setup.lines().find_map(|l| l.strip_prefix(&format!("{name}="))).unwrap_or_else(|| panic!("scripts/setup.sh sets no {name}"));
    line.split_whitespace().next().expect("a value").to_string()
}

fn git_head() -> Option<String> {
    let out = Command::new("git").arg("-C").arg(repo_root()).args(["rev-parse", "--short=12", "HEAD"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `dpm 0.1.0 (COMMIT YYYY-MM-DD)`: the commit and date parts.
fn version_parts(line: &str) -> (String, String) {
    let inner = line.trim().strip_prefix(&format!("dpm {} (", env!("CARGO_PKG_VERSION"))).and_then(|r| r.strip_suffix(')'));
    let (commit, date) = inner.and_then(|i| i.split_once(' ')).unwrap_or_else(|| panic!("not `dpm VERSION (COMMIT DATE)`: {line:?}"));
    (commit.to_string(), date.to_string())
}

#[test]
fn version_names_the_commit_and_the_build_date() {
    let out = Dpm::raw(["--version"]).output();
    out.assert_success();
    let (commit, date) = version_parts(&out.stdout_str());
    assert_eq!(Some(commit), git_head().or(Some("unknown".into())), "the commit is the tree's HEAD");
    let d: Vec<&str> = date.split('-').collect();
    assert!(d.len() == 3 && d[0].len() == 4 && d.iter().all(|p| p.parse::<u32>().is_ok()), "a date YYYY-MM-DD: {date}");
    // `dpm run --version` (and so `mpiexec --version`) says the same.
    let run = Dpm::raw(["run", "--version"]).output();
    run.assert_success();
    assert_eq!(run.stdout_str(), out.stdout_str());
}

#[test]
fn man_page_has_every_option_of_the_help_and_renders() {
    let page = Dpm::raw(["man"]).output();
    page.assert_success();
    let roff = page.stdout_str();
    assert!(roff.starts_with(".TH DPM 1 "), "{}", &roff[..roff.len().min(200)]);
    for (command, help) in [("run", Dpm::raw(["run", "--help"]).output()), ("boot", Dpm::raw(["boot", "--help"]).output())] {
        help.assert_success();
        let names: Vec<String> = help
            .lines()
            .iter()
            .filter(|l| l.starts_with("  -"))
            .flat_map(|l| l.split_whitespace().take_while(|w| w.starts_with('-')).map(|w| w.trim_end_matches([',', '.']).to_string()).collect::<Vec<_>>())
            .collect();
        assert!(names.len() > 10, "dpm {command} --help lists its options\n{}", help.describe());
        for name in names {
            let name = name.split('[').next().unwrap_or(&name).to_string();
            assert!(roff.contains(&format!("\\fB{}\\fR", name.replace('-', "\\-"))), "dpm(1) lacks dpm {command}'s {name}");
        }
    }
    // groff (groff-base, with man-db) renders it without a warning.
    let page_file = Scratch::new("dpm-man");
    let path = page_file.0.join("dpm.1");
    fs::write(&path, &roff).expect("write dpm.1");
    let out = run(Command::new("groff").args(["-man", "-Tutf8", "-ww", "-z"]).arg(&path), Duration::from_secs(60));
    assert!(out.status.success() && out.stderr.is_empty(), "groff: {}", String::from_utf8_lossy(&out.stderr));
}

/// Run `script` as root in a private mount namespace in which `hidden`
/// (directories of the tree) are empty.
fn with_tree_hidden(hidden: &[PathBuf], script: &str) -> std::process::Output {
    let mounts: String = hidden.iter().map(|d| format!("mount -t tmpfs -o size=64k,mode=0755 dpm-hidden '{}' && ", d.display())).collect();
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"]).arg(format!("{mounts}{script}"));
    run(&mut cmd, Duration::from_secs(120))
}

#[test]
fn cargo_install_gives_a_dpm_that_needs_nothing_of_the_tree() {
    assert!(nix_is_root(), "this test mounts in a private namespace: run it as root (as the suite's fixtures)");
    let root = Scratch::new("dpm-cargo-install");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut install = Command::new(cargo);
    install
        .current_dir(repo_root())
        .env("CARGO_TARGET_DIR", packaging_target())
        .args(["install", "--locked", "--offline", "--path", "crates/dpm", "--root"])
        .arg(&root.0);
    check(&mut install, Duration::from_secs(1800));
    let installed = root.0.join("bin/dpm");
    assert!(installed.is_file(), "cargo install put no bin/dpm into {}", root.0.display());

    let tree = repo_root();
    let hidden: Vec<PathBuf> = ["crates", "bench", "target"].iter().map(|d| tree.join(d)).collect();
    let measured: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(tree.join("crates/cluster/calibration/polyglot.json")).expect("read the calibration"))
            .expect("calibration JSON");
    let script = format!(
        "cd '{scratch}' && test ! -e '{sample}' || exit 99; '{dpm}' --version && '{dpm}' run -n 4 '{hello}' && '{dpm}' model --nodes 64 --ppn 16 --json",
        scratch = root.0.display(),
        sample = tree.join("crates/cluster/calibration/sample.json").display(),
        dpm = installed.display(),
        hello = hello(),
    );
    let out = with_tree_hidden(&hidden, &script);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the installed dpm with the tree hidden ({}):\n{stdout}{stderr}", out.status);
    let mut lines = stdout.lines();
    let version = lines.next().expect("a version line");
    // The same commit; the dates may differ (a build on each side of midnight).
    assert_eq!(version_parts(version).0, version_parts(&Dpm::raw(["--version"]).output().stdout_str()).0, "the installed dpm is this build");
    let greetings = lines.clone().filter(|l| l.starts_with("hello from rank ")).count();
    assert_eq!(greetings, 4, "hello at -n 4 printed one line per rank:\n{stdout}{stderr}");
    let json = lines.skip_while(|l| !l.starts_with('{')).collect::<Vec<_>>().join("\n");
    let answer: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("dpm model --json: {e}\n{stdout}"));
    assert!(answer["startup_s"].as_f64().is_some_and(|s| s > 0.0), "{answer}");
    let named = &answer["calibration"];
    assert_eq!(
        (&named["host"], &named["commit"]),
        (&measured["machine"]["host"], &measured["commit"]),
        "the model answers with the measured calibration it embeds"
    );
}

/// The target directory of the builds these tests make (`cargo install`,
/// the wheel's): not the workspace's, whose `release/dpm` the other tests
/// run while this build would relink it (seen: `cargo install` and `cargo
/// test` each relink the other's dpm, and a test starting dpm in between
/// could find no file); the first run builds the dependencies once, later
/// ones reuse them.
fn packaging_target() -> PathBuf {
    repo_root().join("target/packaging")
}

fn nix_is_root() -> bool {
    fs::read_to_string("/proc/self/status").is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0")))
}

// ---- the wheel ----------------------------------------------------------------

/// `target/wheelhouse/` with the pinned mpich and mpi4py wheels, downloaded
/// once with the MPICH venv's pip.
fn wheelhouse(mpich: &str, mpi4py: &str) -> PathBuf {
    let dir = repo_root().join("target/wheelhouse");
    let has = |prefix: &str| fs::read_dir(&dir).is_ok_and(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with(prefix)));
    if !(has(&format!("mpich-{mpich}-")) && has(&format!("mpi4py-{mpi4py}-"))) {
        let pip = repo_root().join(".venv/bin/pip");
        let mut download = Command::new(pip);
        download.args(["download", "--disable-pip-version-check", "-q", "--only-binary", ":all:", "--no-deps", "-d"]).arg(&dir);
        download.arg(format!("mpich=={mpich}")).arg(format!("mpi4py=={mpi4py}"));
        check(&mut download, Duration::from_secs(600));
    }
    dir
}

/// The run went well and printed each of `expected` on stdout.
fn assert_prints(out: &Output, expected: &[&str]) {
    out.assert_success();
    for line in expected {
        out.assert_stdout_contains(line);
    }
}

const MPI4PY_HELLO: &str = "from mpi4py import MPI; import mpi4py; c = MPI.COMM_WORLD; \
     print('rank', c.rank, 'of', c.size, 'sum', c.allreduce(c.rank), 'from', mpi4py.__file__, flush=True)";

const PMI2_HELLO: &str = r#"
#include <stdio.h>
#include <pmi2.h>
int main(void) {
    int spawned, size, rank, appnum;
    if (PMI2_Init(&spawned, &size, &rank, &appnum) != PMI2_SUCCESS) return 1;
    printf("pmi2 rank %d of %d\n", rank, size);
    fflush(stdout);
    return PMI2_Finalize() == PMI2_SUCCESS ? 0 : 1;
}
"#;

#[test]
fn wheel_installs_dpm_beside_the_mpich_and_mpi4py_wheels() {
    let (mpich, mpi4py) = (setup_pin("MPICH_VERSION"), setup_pin("MPI4PY_VERSION"));
    let house = wheelhouse(&mpich, &mpi4py);
    let scratch = Scratch::new("dpm-wheel");
    let dist = scratch.0.join("dist");
    let built = check(
        Command::new(repo_root().join("scripts/wheel.sh")).arg("--strip").arg("-o").arg(&dist).env("CARGO_TARGET_DIR", packaging_target()),
        Duration::from_secs(1800),
    );
    let wheel = PathBuf::from(built.lines().last().expect("wheel.sh prints the wheel's path").trim());
    assert!(wheel.is_file() && wheel.starts_with(&dist), "{wheel:?}");

    // A fresh venv with the system's python, outside the tree.
    let venv = scratch.0.join("venv");
    check(Command::new("python3").args(["-m", "venv"]).arg(&venv), Duration::from_secs(300));
    let bin = venv.join("bin");
    let mut pip = Command::new(bin.join("pip"));
    pip.args(["install", "--disable-pip-version-check", "-q", "--no-index", "--find-links"]).arg(&house).arg(&wheel);
    pip.arg(format!("mpich=={mpich}")).arg(format!("mpi4py=={mpi4py}"));
    check(&mut pip, Duration::from_secs(600));
    for file in ["bin/dpm", "bin/mpiexec.dpm", "lib/libpmi.so.0", "lib/libpmi2.so.0", "lib/libpmi2.so", "include/pmi2.h", "share/man/man1/dpm.1"] {
        assert!(venv.join(file).is_file(), "the wheel installed no {file}");
    }
    // The mpich wheel's own mpiexec (Hydra) stays what it was.
    let hydra = check(Command::new(bin.join("mpiexec")).arg("--version"), Duration::from_secs(60));
    assert!(hydra.contains("HYDRA"), "the venv's mpiexec is no longer Hydra's:\n{hydra}");

    let work = scratch.0.join("work");
    fs::create_dir_all(&work).expect("create the ranks' directory");
    let work_s = work.to_string_lossy().into_owned();
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    let python = bin.join("python").to_string_lossy().into_owned();
    let env = |dpm: Dpm| {
        let dpm = dpm.env("PATH", &path).env("VIRTUAL_ENV", &venv.to_string_lossy()).watchdog(Duration::from_secs(180));
        dpm.env("PYTHONPATH", "").env("LD_LIBRARY_PATH", "")
    };

    let version = check(Command::new(bin.join("dpm")).arg("--version").env("PATH", &path), Duration::from_secs(60));
    assert_eq!(version_parts(&version).0, version_parts(&Dpm::raw(["--version"]).output().stdout_str()).0, "the wheel's dpm is this build");

    // The release's dpm is stripped (--strip) and still an MPIR starter:
    // no symbol table, the MPIR symbols in the dynamic one, and gdb
    // attached to a running `dpm run` reads every rank's pid there.
    let dpm = bin.join("dpm");
    let nm = run(Command::new("nm").arg(&dpm), Duration::from_secs(60));
    assert!(String::from_utf8_lossy(&nm.stderr).contains("no symbols"), "the wheel's dpm is not stripped");
    let dynamic = check(Command::new("nm").args(["-D", "--defined-only"]).arg(&dpm), Duration::from_secs(60));
    for symbol in ["MPIR_proctable", "MPIR_proctable_size", "MPIR_debug_state", "MPIR_being_debugged", "MPIR_i_am_starter", "MPIR_Breakpoint"] {
        assert!(dynamic.lines().any(|l| l.ends_with(&format!(" {symbol}"))), "the stripped wheel's dpm lacks {symbol}:\n{dynamic}");
    }
    let gdb = common::debugger::gdb().expect("gdb (scripts/setup.sh --tests installs it)");
    let held = common::TempDir::new("mpir-wheel");
    let mut running = env(Dpm::run(["-n", "2", &common::program("mpir_job"), &held.path_str()]).exe(&dpm)).spawn();
    running.wait_for_lines("mpir_job world", 2);
    let table = common::debugger::read_table(&gdb, running.pid());
    fs::write(held.path.join("go"), b"").expect("write go");
    let out = running.wait();
    out.assert_success();
    assert_eq!(table.iter().map(|e| e.pid).collect::<Vec<_>>(), common::debugger::ready_pids(&out.stdout_str(), "world"), "{table:?}\n{}", out.describe());

    // dpm run -n 4 python: mpi4py from the venv, MPICH from the venv.
    let out = env(Dpm::run(["-wdir", &work_s, "-n", "4", "python", "-c", MPI4PY_HELLO]).exe(&bin.join("dpm"))).output();
    let site = venv.join("lib").to_string_lossy().into_owned();
    assert_prints(&out, &["rank 0 of 4 sum 6", "rank 1 of 4 sum 6", "rank 2 of 4 sum 6", "rank 3 of 4 sum 6"]);
    assert!(out.lines().iter().all(|l| l.contains(&site)), "mpi4py came from elsewhere:\n{}", out.describe());

    // mpiexec.dpm is dpm run.
    let out = env(Dpm::mpiexec(&bin.join("mpiexec.dpm"), ["-wdir", &work_s, "-n", "2", "python", "-c", MPI4PY_HELLO])).output();
    assert_prints(&out, &["rank 0 of 2 sum 1", "rank 1 of 2 sum 1"]);

    // A program built against the wheel's PMI-2 library finds it by its rpath.
    let source = work.join("pmi2_hello.c");
    fs::write(&source, PMI2_HELLO).expect("write pmi2_hello.c");
    let program = work.join("pmi2_hello");
    let include = venv.join("include");
    let lib = venv.join("lib");
    let mut cc = Command::new("cc");
    cc.arg(format!("-I{}", include.display()))
        .arg(&source)
        .arg("-o")
        .arg(&program)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lpmi2");
    check(&mut cc, Duration::from_secs(120));
    let out = env(Dpm::run(["-n", "2", &program.to_string_lossy()]).exe(&bin.join("dpm"))).output();
    assert_prints(&out, &["pmi2 rank 0 of 2", "pmi2 rank 1 of 2"]);

    // Opt in: dpm as the venv's mpiexec. A spawn under it, and from a
    // singleton (MPICH runs `mpiexec` from PATH for the spawn).
    let link = check(Command::new("ln").args(["-sfn", "dpm"]).arg(bin.join("mpiexec")), Duration::from_secs(60));
    assert!(link.is_empty());
    let mpiexec = bin.join("mpiexec");
    let out = env(Dpm::mpiexec(&mpiexec, ["-wdir", &work_s, "-n", "1", "python", "-c", common::MPI4PY_SPAWN])).output();
    assert_prints(&out, &["mpi4py answers [(0, 2, 10), (1, 2, 20)]", "mpi4py spawn ok"]);
    let singleton =
        run(Command::new(&python).args(["-c", common::MPI4PY_SPAWN]).current_dir(&work).env("PATH", &path).env_remove("PYTHONPATH"), Duration::from_secs(180));
    let said = String::from_utf8_lossy(&singleton.stdout);
    assert!(
        singleton.status.success() && said.contains("mpi4py spawn ok"),
        "a singleton's spawn through dpm:\n{said}{}",
        String::from_utf8_lossy(&singleton.stderr)
    );

    // The render farm, copied out of the tree, checked pixel by pixel.
    let farm = work.join("renderfarm");
    check(Command::new("cp").arg("-r").arg(repo_root().join("examples/renderfarm")).arg(&farm), Duration::from_secs(60));
    let png = work.join("chess.png").to_string_lossy().into_owned();
    let script = farm.join("farm.py").to_string_lossy().into_owned();
    let args = ["-wdir", &work_s, "-n", "1", "python", &script, "--nice", "10", "--progress", "plain"];
    let farm_args = ["--mode", "dynamic", "--workers", "2", "--width", "96", "--height", "64", "--out", &png, "--check"];
    let out = env(Dpm::mpiexec(&mpiexec, args.iter().chain(farm_args.iter()))).output();
    assert_prints(&out, &["farm: check: pixel-identical to a plain povray render"]);
}
