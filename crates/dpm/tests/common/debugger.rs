//! gdb as an MPIR tool (the MPI Forum's Process Acquisition Interface): the
//! table read by its C layout from a running `dpm run` (attach mode), or
//! dpm started under gdb with `MPIR_being_debugged` set (launch mode), and
//! a stripped copy of the binary for both. gdb missing is a fixture that
//! cannot be built (a failure under `CI=true`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::{dpm_bin, fixture_unavailable, unique};

/// One `MPIR_PROCDESC` as gdb read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcDesc {
    pub host: String,
    pub exe: String,
    pub pid: u32,
}

/// gdb's path, or `None` (said loudly; a failure under `CI=true`).
pub fn gdb() -> Option<String> {
    let found = Command::new("gdb").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        fixture_unavailable("gdb (the MPIR tool)", "gdb is not installed (./scripts/setup.sh --tests installs it)");
        return None;
    }
    Some("gdb".into())
}

/// A stripped copy of dpm (`strip` keeps the dynamic symbol table, where
/// the MPIR symbols are): made once per test process.
pub fn stripped_dpm() -> PathBuf {
    static COPY: OnceLock<PathBuf> = OnceLock::new();
    COPY.get_or_init(|| {
        let dir = std::env::temp_dir().join(unique("dpm-stripped"));
        std::fs::create_dir_all(&dir).expect("create the stripped copy's directory");
        let copy = dir.join("dpm");
        std::fs::copy(dpm_bin(), &copy).expect("copy dpm");
        let out = Command::new("strip").arg(&copy).output().expect("run strip (binutils)");
        assert!(out.status.success(), "strip failed: {}", String::from_utf8_lossy(&out.stderr));
        let syms = Command::new("nm").arg(&copy).output().expect("run nm");
        assert!(String::from_utf8_lossy(&syms.stderr).contains("no symbols"), "the copy still has a symbol table");
        copy
    })
    .clone()
}

/// gdb commands that print the table by its C layout (x86-64: two
/// pointers and an int, 24 bytes an entry): `MPIR-SIZE n state s`, then
/// `MPIR i host exe pid` per entry. Works without debug information.
pub const PRINT_TABLE: &str = r#"set $n = *(int*)&MPIR_proctable_size
set $t = *(char**)&MPIR_proctable
printf "MPIR-SIZE %d state %d\n", $n, *(int*)&MPIR_debug_state
set $i = 0
while $i < $n
  printf "MPIR %d %s %s %d\n", $i, *(char**)($t + 24*$i), *(char**)($t + 24*$i + 8), *(int*)($t + 24*$i + 16)
  set $i = $i + 1
end
"#;

/// The table in gdb's output ([`PRINT_TABLE`]), from its `nth` printing (0: the first).
pub fn parse_table(out: &str, nth: usize) -> Vec<ProcDesc> {
    let mut tables: Vec<Vec<ProcDesc>> = Vec::new();
    for line in out.lines() {
        if line.starts_with("MPIR-SIZE ") {
            tables.push(Vec::new());
        } else if let Some(rest) = line.strip_prefix("MPIR ") {
            let f: Vec<&str> = rest.split(' ').collect();
            if let (Some(t), [_, host, exe, pid]) = (tables.last_mut(), f.as_slice()) {
                t.push(ProcDesc { host: host.to_string(), exe: exe.to_string(), pid: pid.parse().expect("a pid") });
            }
        }
    }
    tables.get(nth).cloned().unwrap_or_else(|| panic!("gdb printed no table #{nth}:\n{out}"))
}

/// Attach gdb to `pid` (a running `dpm run`), read the table, detach.
pub fn read_table(gdb: &str, pid: u32) -> Vec<ProcDesc> {
    let script = format!("set pagination off\nset language c\n{PRINT_TABLE}detach\n");
    let file = super::TempFile::new("mpir-attach.gdb", script.as_bytes(), 0o600);
    let out = Command::new(gdb).args(["-nx", "-batch", "-p", &pid.to_string(), "-x", &file.path_str()]).output().expect("run gdb");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "gdb failed:\n{text}");
    parse_table(&text, 0)
}

/// The launch-mode script: start dpm at its first instruction, set
/// `MPIR_being_debugged`, and at each `MPIR_Breakpoint` print the table,
/// each entry's process state and program (`STATE pid state exe`) and how
/// many ranks ran `main` (`MAIN-FILES n`, files `main.*` in `dir`); after
/// the first, `go` in `dir` lets the ranks end. `detach_at_first`: detach
/// there instead of continuing (a tool that lets go). `more_stops`: the
/// breakpoints after the first (spawned jobs), each printing the table.
pub fn launch_script(dir: &Path, detach_at_first: bool, more_stops: usize) -> String {
    let d = dir.display();
    let mut at_first = if detach_at_first { "detach\n".to_string() } else { "continue\n".to_string() };
    for _ in 0..more_stops {
        at_first.push_str(PRINT_TABLE);
        at_first.push_str("continue\n");
    }
    format!(
        r#"set pagination off
set confirm off
set language c
handle SIGPIPE nostop noprint pass
starti
set var *(int*)&MPIR_being_debugged = 1
break MPIR_Breakpoint
continue
{PRINT_TABLE}set $j = 0
while $j < $n
  set $p = *(int*)($t + 24*$j + 16)
  eval "shell echo STATE %d $(cut -d' ' -f3 /proc/%d/stat) $(readlink /proc/%d/exe)", $p, $p, $p
  set $j = $j + 1
end
shell echo MAIN-FILES $(ls {d} | grep -c '^main\.')
shell touch {d}/go
{at_first}"#
    )
}

/// `STATE pid state exe` lines of the launch script's output.
pub fn states(out: &str) -> Vec<(u32, String, String)> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.strip_prefix("STATE ")?.split(' ').collect();
            Some((f.first()?.parse().ok()?, f.get(1)?.to_string(), f.get(2).unwrap_or(&"").to_string()))
        })
        .collect()
}

/// The pids the job's ranks printed (`mpir_job <kind> rank R pid P ready`), by rank.
pub fn ready_pids(stdout: &str, kind: &str) -> Vec<u32> {
    let mut found: Vec<(u32, u32)> = stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() == 7 && f[0] == "mpir_job" && f[1] == kind).then(|| (f[3].parse().ok(), f[5].parse().ok())).and_then(|(r, p)| Some((r?, p?)))
        })
        .collect();
    found.sort_unstable();
    found.into_iter().map(|(_, p)| p).collect()
}

/// The program `pid` runs (`/proc/<pid>/exe`).
pub fn exe_of(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/exe")).map(|p| p.display().to_string()).unwrap_or_default()
}
