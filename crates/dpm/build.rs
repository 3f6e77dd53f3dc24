//! `dpm --version`'s commit and build date, as `DPM_COMMIT` and
//! `DPM_BUILD_DATE`. The commit comes from `DPM_COMMIT` if set (a packager's
//! word), else the `.cargo_vcs_info.json` that `cargo package` writes into a
//! crate tarball, else git (a checkout's `HEAD`; uncommitted changes are not
//! marked, so that editing never relinks dpm), else `unknown`: a build
//! without `.git` works. The date is `SOURCE_DATE_EPOCH`'s (reproducible
//! builds) if set, else the day (UTC) this script ran: when `HEAD` moved.
//!
//! It also exports the MPIR symbols a parallel debugger reads
//! (`dpm_launcher::mpir`) in the binary's dynamic symbol table, so that a
//! stripped binary still offers them.
//!
//! And it links libgcc's unwinder (`libgcc_eh.a`) into the binary, so that
//! dpm does not load `libgcc_s.so.1` at every start (see [`static_unwinder`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// The MPIR Process Acquisition Interface's symbols (`dpm_launcher::mpir`):
/// a debugger finds them in the dynamic symbol table, which `strip` keeps.
const MPIR_SYMBOLS: [&str; 10] = [
    "MPIR_proctable",
    "MPIR_proctable_size",
    "MPIR_debug_state",
    "MPIR_being_debugged",
    "MPIR_i_am_starter",
    "MPIR_partial_attach_ok",
    "MPIR_ignore_queues",
    "MPIR_Breakpoint",
    "MPIR_executable_path",
    "MPIR_server_arguments",
];

fn main() {
    for symbol in MPIR_SYMBOLS {
        println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol={symbol}");
    }
    static_unwinder();
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    println!("cargo:rerun-if-env-changed=DPM_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let commit = std::env::var("DPM_COMMIT").ok().filter(|c| !c.is_empty()).or_else(|| vcs_info_commit(&dir)).or_else(|| git_commit(&dir));
    println!("cargo:rustc-env=DPM_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
    let secs = std::env::var("SOURCE_DATE_EPOCH").ok().and_then(|s| s.trim().parse::<u64>().ok());
    let secs = secs.unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()));
    println!("cargo:rustc-env=DPM_BUILD_DATE={}", civil_date(secs));
}

/// On GNU/Linux, std's unwinder (`_Unwind_*`, for panics and backtraces)
/// comes from libgcc's static archive instead of `libgcc_s.so.1`: every
/// dpm process (each `dpm run`, a booted run's client, the cleaner, the
/// daemons) then starts without mapping and relocating a second library and
/// without its constructor, whose CPU probe (`__cpu_indicator_init`, a
/// `cpuid` per leaf) traps to the hypervisor in a VM. The archive ships
/// with gcc, which links every Rust program on this target; the linker's
/// `--as-needed` (rustc's default) then drops the `-lgcc_s` std asks for.
/// Measured in docs/benchmarks.md ("The booted path").
fn static_unwinder() {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" && !var("CARGO_CFG_TARGET_FEATURE").split(',').any(|f| f == "crt-static") {
        println!("cargo:rustc-link-lib=static=gcc_eh");
    }
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The checkout's commit, watching the files that change with it.
fn git_commit(dir: &Path) -> Option<String> {
    let commit = git(dir, &["rev-parse", "--short=12", "HEAD"])?;
    // HEAD (a checkout), its reflog (every commit), the branch's ref, and
    // packed-refs: whichever exist.
    let branch = git(dir, &["rev-parse", "--symbolic-full-name", "HEAD"]).filter(|b| b.starts_with("refs/"));
    for file in ["HEAD", "logs/HEAD", "packed-refs"].into_iter().map(String::from).chain(branch) {
        if let Some(path) = git(dir, &["rev-parse", "--path-format=absolute", "--git-path", &file]) {
            if Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    Some(commit)
}

/// `{"git": {"sha1": "…"}}` in a crate tarball made by `cargo package`.
fn vcs_info_commit(dir: &Path) -> Option<String> {
    let path = dir.join(".cargo_vcs_info.json");
    let text = std::fs::read_to_string(path).ok()?;
    let (_, rest) = text.split_once("\"sha1\"")?;
    let (_, rest) = rest.split_once('"')?;
    let sha1 = rest.split('"').next()?;
    (sha1.len() >= 12 && sha1.bytes().all(|b| b.is_ascii_hexdigit())).then(|| sha1[..12].to_string())
}

/// `YYYY-MM-DD` of a Unix time (UTC), by the proleptic Gregorian calendar
/// (Howard Hinnant's days-to-civil).
fn civil_date(secs: u64) -> String {
    let days = (secs / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
