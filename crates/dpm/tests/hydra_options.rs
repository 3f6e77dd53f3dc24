//! Hydra's remaining options and Hydra's meaning of its defaults, each case
//! run under dpm and, where Hydra's answer is the right one, under
//! `.venv/bin/mpiexec.hydra` (MPICH 5.0.2) too: `-configfile`,
//! `-outfile-pattern`/`-errfile-pattern`, `-localhost`, `-topolib`,
//! `-disable-auto-cleanup`, `MPIEXEC_TIMEOUT=0`, `-n 0` and a repeated `-n`.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{dpm_bin, hydra, program, under_hydra, unique, Dpm, Output, TempFile};

/// A fresh directory under the system temporary one, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(prefix: &str) -> TempDir {
        let dir = std::env::temp_dir().join(unique(prefix));
        fs::create_dir_all(&dir).expect("create a temporary directory");
        TempDir(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }

    /// The names of the files in it.
    fn names(&self) -> BTreeSet<String> {
        fs::read_dir(&self.0).expect("read the temporary directory").flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()
    }

    fn clear(&self) {
        for name in self.names() {
            let _ = fs::remove_file(self.0.join(name));
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn sorted_lines(out: &Output) -> Vec<String> {
    let mut lines = out.lines();
    lines.sort();
    lines
}

// ---- -n ----------------------------------------------------------------------

#[test]
fn a_repeated_n_is_a_usage_error_as_hydra_refuses_it() {
    let out = Dpm::run(["-n", "2", "-n", "3", "/bin/true"]).output();
    out.assert_code(2);
    out.assert_stderr_contains("'-n 3': this segment's process count is given twice (2 and 3)");
    // Hydra: "duplicate setting: n", exit 255.
    let hydra = under_hydra(&["-n", "2", "-n", "3", "/bin/true"]);
    assert_ne!(hydra.code(), 0, "Hydra accepted a repeated -n\n{}", hydra.describe());
    // Each segment has its own -n.
    Dpm::run(["-n", "1", "/bin/true", ":", "-n", "2", "/bin/true"]).output().assert_success();
}

#[test]
fn n_zero_is_a_usage_error() {
    // Hydra 5.0.2 runs one process for -n 0; dpm refuses (README: differences).
    let out = Dpm::run(["-n", "0", "/bin/echo", "ran"]).output();
    out.assert_code(2);
    out.assert_stderr_contains("'-n 0': a segment needs at least one process");
    out.assert_stdout_lacks("ran");
}

// ---- MPIEXEC_TIMEOUT=0 / --timeout 0 ------------------------------------------

#[test]
fn a_zero_timeout_is_no_limit_as_under_hydra() {
    let prog = ["/bin/sh", "-c", "sleep 1; echo finished"];
    let out = Dpm::run(["-n", "1"].iter().chain(&prog)).env("MPIEXEC_TIMEOUT", "0").output();
    out.assert_success().assert_stdout_contains("finished");
    let out = Dpm::run(["--timeout", "0", "-n", "1"].iter().chain(&prog)).output();
    out.assert_success().assert_stdout_contains("finished");
    // Hydra runs it to its end too (and then exits 255, a Hydra quirk dpm does not copy).
    let args: Vec<&str> = ["-n", "1"].iter().chain(&prog).copied().collect();
    let hydra = common::hydra_output(|| Dpm::mpiexec(&hydra(), &args).env("MPIEXEC_TIMEOUT", "0"));
    hydra.assert_stdout_contains("finished");
}

// ---- -configfile ----------------------------------------------------------------

#[test]
fn configfile_lines_are_segments_as_under_hydra() {
    let text = "# two segments\n-n 2 /bin/echo first seg\n\n   # an indented comment\n-n 1 -env X 1 /bin/echo second # not a comment\n";
    let file = TempFile::new("dpm-configfile", text.as_bytes(), 0o644);
    let out = Dpm::run(["-l", "-configfile", &file.path_str()]).output();
    out.assert_success();
    let want = ["[0] first seg", "[1] first seg", "[2] second # not a comment"];
    assert_eq!(sorted_lines(&out), want, "{}", out.describe());
    let hydra = under_hydra(&["-l", "-configfile", &file.path_str()]);
    assert_eq!(sorted_lines(&hydra), want, "Hydra differs\n{}", hydra.describe());
}

#[test]
fn configfile_errors_are_usage_errors() {
    let file = TempFile::new("dpm-configfile", b"-n 1 /bin/true\n", 0o644);
    let out = Dpm::run(["-configfile", &file.path_str(), "-n", "1", "/bin/true"]).output();
    out.assert_code(2);
    out.assert_stderr_contains("and a program on the command line exclude each other");
    let out = Dpm::run(["-configfile", "/nonexistent/dpm-config"]).output();
    out.assert_code(2);
    out.assert_stderr_contains("-configfile /nonexistent/dpm-config: No such file or directory");
    let empty = TempFile::new("dpm-configfile", b"# nothing\n", 0o644);
    Dpm::run(["-configfile", &empty.path_str()]).output().assert_code(2).assert_stderr_contains("no segment in it");
}

// ---- -outfile-pattern / -errfile-pattern ----------------------------------------

/// `sh -c 'umask 027; exec LAUNCHER ARGS'`: the output files' mode shows the umask.
fn with_umask(launcher: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg("umask 027; exec \"$@\"").arg("sh").arg(launcher).args(args);
    cmd.env("DPM_NO_BOOT", "1").env_remove("MPIEXEC_TIMEOUT");
    cmd.output().expect("run the launcher")
}

#[test]
fn output_patterns_name_the_files_as_hydra_does() {
    let dir = TempDir::new("dpm-outfiles");
    let (out, err) = (dir.path("out.%g.%r.%p.%h"), dir.path("err.%r"));
    let host = common::hostname();
    let prog = ["-n", "2", "/bin/sh", "-c", "echo to-stdout $PMI_RANK; echo to-stderr >&2"];
    let mut args = vec!["-outfile-pattern", out.as_str(), "-errfile-pattern", err.as_str()];
    args.extend(prog);
    let dpm_args: Vec<&str> = std::iter::once("run").chain(args.iter().copied()).collect();
    let run = with_umask(Path::new(dpm_bin()), &dpm_args);
    assert!(run.status.success(), "{run:?}");
    assert!(run.stdout.is_empty() && run.stderr.is_empty(), "output went to the terminal: {run:?}");
    let want: BTreeSet<String> = [format!("out.0.0.0.{host}"), format!("out.0.1.0.{host}"), "err.0".into(), "err.1".into()].into();
    assert_eq!(dir.names(), want);
    for r in 0..2 {
        let file = dir.0.join(format!("out.0.{r}.0.{host}"));
        assert_eq!(fs::read_to_string(&file).unwrap(), format!("to-stdout {r}\n"));
        assert_eq!(fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o640, "created with the umask");
        assert_eq!(fs::read_to_string(dir.0.join(format!("err.{r}"))).unwrap(), "to-stderr\n");
    }
    // A second run appends: nothing of the first run's output is lost.
    let run = with_umask(Path::new(dpm_bin()), &dpm_args);
    assert!(run.status.success(), "{run:?}");
    assert_eq!(fs::read_to_string(dir.0.join(format!("out.0.1.0.{host}"))).unwrap(), "to-stdout 1\nto-stdout 1\n");
    // Hydra names the same files.
    dir.clear();
    let run = common::hydra_rerun(|| with_umask(&hydra(), &args));
    assert!(run.status.success(), "{run:?}");
    assert_eq!(dir.names(), want, "Hydra's files");
}

#[test]
fn output_patterns_give_spawned_jobs_their_own_files() {
    let dir = TempDir::new("dpm-outfiles");
    let pattern = dir.path("o.%g.%r");
    let prog = program("spawn_universe");
    let out = Dpm::run(["-outfile-pattern", &pattern, "-n", "1", &prog]).output();
    out.assert_success();
    let want: BTreeSet<String> = ["o.0.0", "o.1.0", "o.1.1"].map(String::from).into();
    assert_eq!(dir.names(), want, "{}", out.describe());
    assert_eq!(fs::read_to_string(dir.0.join("o.1.1")).unwrap(), "child 1 universe unset can_spawn 1 got 1\n");
    dir.clear();
    let hydra = under_hydra(&["-outfile-pattern", &pattern, "-n", "1", &prog]);
    hydra.assert_success();
    assert_eq!(dir.names(), want, "Hydra's files\n{}", hydra.describe());
}

#[test]
fn a_bad_output_pattern_is_a_usage_error() {
    let out = Dpm::run(["-outfile-pattern", "x.%q", "/bin/true"]).output();
    out.assert_code(2);
    out.assert_stderr_contains("'-outfile-pattern x.%q': unknown specifier '%q'");
}

// ---- -disable-auto-cleanup -------------------------------------------------------

/// Rank 0 exits 3 at once; rank 1 waits until rank 0 has ended, then says
/// it survived.
const SURVIVOR: &str = r#"if [ "$PMI_RANK" = 0 ]; then echo $$ > "$1"; exit 3; fi
while [ ! -s "$1" ]; do sleep 0.1; done
p=$(cat "$1"); while [ -d /proc/$p ] && ! grep -q ') Z' /proc/$p/stat; do sleep 0.1; done
sleep 1; echo "rank $PMI_RANK survived""#;

#[test]
fn disable_auto_cleanup_lets_the_other_ranks_run_on_as_under_hydra() {
    for launcher in [None, Some(hydra())] {
        let dir = TempDir::new("dpm-cleanup");
        let pid_file = dir.path("pid0");
        let args = ["-disable-auto-cleanup", "-n", "2", "/bin/sh", "-c", SURVIVOR, "sh", &pid_file];
        let out = match &launcher {
            None => Dpm::run(args).output(),
            Some(h) => common::hydra_output(|| Dpm::mpiexec(h, args)),
        };
        out.assert_code(3).assert_stdout_contains("rank 1 survived");
    }
    // Without it, the failure ends rank 1 (dpm's default, as Hydra's for MPI programs).
    let dir = TempDir::new("dpm-cleanup");
    let pid_file = dir.path("pid0");
    let out = Dpm::run(["-n", "2", "/bin/sh", "-c", "if [ \"$PMI_RANK\" = 0 ]; then exit 3; fi; sleep 60; echo survived", "sh", &pid_file]).output();
    out.assert_code(3).assert_stdout_lacks("survived");
}

// ---- -topolib, -localhost -------------------------------------------------------------

#[test]
fn topolib_takes_hwloc_only() {
    Dpm::run(["-topolib", "hwloc", "-n", "1", "/bin/true"]).output().assert_success();
    let out = Dpm::run(["-topolib", "plpa", "-n", "1", "/bin/true"]).output();
    out.assert_code(2);
    out.assert_stderr_contains("'-topolib plpa': dpm reads the topology with hwloc only");
}

#[test]
fn localhost_is_this_machine_s_name_for_the_run() {
    // A host list entry of that name is this machine: no ssh.
    let out = Dpm::run(["-localhost", "dpm-alias", "-hosts", "dpm-alias:2", "--report-placement", "-n", "2", "/bin/true"]).output();
    out.assert_success();
    out.assert_stderr_contains("dpm-alias");
    // -launcher manual's daemons are told to connect back to it.
    let out = Dpm::run(["-localhost", "dpm-alias", "-launcher", "manual", "--connect-timeout", "1", "-hosts", "a", "-n", "1", "/bin/true"]).output();
    out.assert_code(1);
    out.assert_stderr_contains("--connect dpm-alias:");
}

// ---- output files that cannot be written ---------------------------------------

/// The first rank's file cannot be created (its directory is missing, or
/// is a file): refused before anything starts, as a usage error (Hydra
/// starts the ranks, then dies of an assertion with 255).
#[test]
fn an_output_file_that_cannot_be_created_fails_before_any_rank_starts() {
    let dir = TempDir::new("dpm-outfail");
    let ran = dir.path("ran");
    let script = format!("touch {ran}; echo hello");
    fs::write(dir.0.join("plain"), b"").unwrap();
    for (option, pattern) in [("-outfile-pattern", dir.path("missing/o.%r")), ("-errfile-pattern", dir.path("plain/e.%r"))] {
        let out = Dpm::run([option, &pattern, "-n", "2", "sh", "-c", &script]).output();
        out.assert_code(2);
        out.assert_stderr_contains(&format!("'{option} {pattern}': cannot create "));
        assert!(!Path::new(&ran).exists(), "a rank ran\n{}", out.describe());
    }
    let hydra = under_hydra(&["-outfile-pattern", &dir.path("missing/o.%r"), "-n", "1", "echo", "hello"]);
    hydra.assert_code(255);
}

/// A later file that cannot be written (here rank 1's directory, missing):
/// its output goes to dpm's stderr, and the run does not exit 0.
#[test]
fn output_that_misses_its_file_is_kept_on_stderr_and_fails_the_run() {
    let dir = TempDir::new("dpm-outfail");
    fs::create_dir(dir.0.join("r0")).unwrap();
    let pattern = dir.path("r%r/out");
    let out = Dpm::run(["-outfile-pattern", &pattern, "-n", "2", "sh", "-c", "echo \"line of $PMI_RANK\""]).output();
    out.assert_code(1);
    assert_eq!(fs::read_to_string(dir.0.join("r0/out")).unwrap(), "line of 0\n");
    out.assert_stderr_contains(&format!("cannot write output file {}", dir.path("r1/out")));
    out.assert_stderr_contains("line of 1\n");
    assert_eq!(out.stdout_str(), "", "{}", out.describe());
}
