//! The MPIR Process Acquisition Interface (MPI Forum, version 1.1): the
//! symbols a parallel debugger (gdb scripts, Linaro DDT, TotalView, STAT)
//! reads in the process that started a job, `dpm run`.
//!
//! - `MPIR_proctable` / `MPIR_proctable_size`: every rank of the run, in
//!   rank order of `MPI_COMM_WORLD`, then each spawned job's ranks as they
//!   start (as Hydra appends them): `{host_name, executable_name, pid}`.
//! - `MPIR_debug_state`: `MPIR_DEBUG_SPAWNED` once a table is complete,
//!   then [`MPIR_Breakpoint`] is called (again after each spawned job).
//! - `MPIR_being_debugged`: a tool that sets it before the job starts
//!   (launch mode) gets its ranks held at their first instruction until it
//!   lets the starter go on from `MPIR_Breakpoint` ([`being_debugged`]).
//! - `MPIR_i_am_starter`, `MPIR_partial_attach_ok`: their presence says
//!   that dpm is not itself a rank, and that a tool may attach to some ranks.
//!
//! - `MPIR_executable_path` (`char[256]`), `MPIR_server_arguments`
//!   (`char[1024]`): the tool-daemon extension (as Flux and Blue Gene's
//!   starters offer it). A tool that writes a program's path there (and its
//!   arguments, each ended by a NUL, the list by a second NUL) before it lets
//!   the starter go on from [`MPIR_Breakpoint`] gets that program started
//!   once on each node of the job ([`tool_daemon`]), beside its ranks.
//!
//! Every symbol is `#[no_mangle]` and exported in the binary's dynamic
//! symbol table (`crates/dpm/build.rs`), so a stripped `dpm` still has them.
//! The statics are atomics of the C types' layout (`AtomicI32` is an `int`,
//! `AtomicPtr` a pointer), so no `unsafe` is needed to write them; the
//! table's memory has one owner, [`TABLE`], and each new table is built
//! whole before its pointer and size are published (release stores) and
//! before `MPIR_debug_state` and the breakpoint call. The previous table
//! stays alive until the next one is published: a tool reads it while the
//! starter is stopped.

use std::ffi::{c_int, CString};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU8, Ordering};
use std::sync::Mutex;

use dpm_proto::control::ProcInfo;
use dpm_proto::ToolDaemon;

/// One entry of `MPIR_proctable`: the specification's `MPIR_PROCDESC`
/// (`char *host_name; char *executable_name; int pid;`). The pointers are
/// kept as addresses (`usize` has a pointer's size and alignment on every
/// target dpm builds for), so the table is plain data.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProcDesc {
    host_name: usize,
    executable_name: usize,
    pid: c_int,
}

/// `MPIR_debug_state` values.
pub const MPIR_NULL: i32 = 0;
pub const MPIR_DEBUG_SPAWNED: i32 = 1;
pub const MPIR_DEBUG_ABORTING: i32 = 2;

#[no_mangle]
pub static MPIR_proctable: AtomicPtr<ProcDesc> = AtomicPtr::new(std::ptr::null_mut());
#[no_mangle]
pub static MPIR_proctable_size: AtomicI32 = AtomicI32::new(0);
#[no_mangle]
pub static MPIR_debug_state: AtomicI32 = AtomicI32::new(MPIR_NULL);
/// Written by a tool (launch mode).
#[no_mangle]
pub static MPIR_being_debugged: AtomicI32 = AtomicI32::new(0);
/// Present: the starter is not an MPI process.
#[no_mangle]
pub static MPIR_i_am_starter: AtomicI32 = AtomicI32::new(1);
/// Present: a tool may attach to a subset of the ranks.
#[no_mangle]
pub static MPIR_partial_attach_ok: AtomicI32 = AtomicI32::new(1);
/// Present: dpm does not implement message-queue debugging in the starter.
#[no_mangle]
pub static MPIR_ignore_queues: AtomicI32 = AtomicI32::new(1);
/// Written by a tool at the breakpoint: the tool daemon's program (a C
/// string), started on each node of the job ([`tool_daemon`]).
#[no_mangle]
pub static MPIR_executable_path: [AtomicU8; 256] = [const { AtomicU8::new(0) }; 256];
/// Written by a tool with [`MPIR_executable_path`]: its daemon's arguments,
/// each ended by a NUL, the list by an empty one.
#[no_mangle]
pub static MPIR_server_arguments: [AtomicU8; 1024] = [const { AtomicU8::new(0) }; 1024];
/// How often [`MPIR_Breakpoint`] ran: its body, so that no two functions of
/// the binary are the same code (a linker folding identical functions
/// would otherwise be free to merge it away).
static BREAKPOINT_CALLS: AtomicU32 = AtomicU32::new(0);

/// The debugger's breakpoint: called with the table complete and
/// `MPIR_debug_state` set. Never inlined, never folded, exported.
#[no_mangle]
#[inline(never)]
pub extern "C" fn MPIR_Breakpoint() {
    BREAKPOINT_CALLS.fetch_add(1, Ordering::SeqCst);
}

/// Call the breakpoint through an opaque pointer, so that the call itself is
/// never optimised out.
fn breakpoint() {
    let f: extern "C" fn() = std::hint::black_box(MPIR_Breakpoint);
    f();
}

/// The owner of the published table's memory.
struct Table {
    /// The strings the entries point to (one per distinct host or program).
    strings: Vec<CString>,
    entries: Vec<ProcDesc>,
}

/// The current table and the one before it (kept until the next publish).
static TABLE: Mutex<(Option<Table>, Option<Table>)> = Mutex::new((None, None));

/// Whether a tool set `MPIR_being_debugged` (read before the first job starts: launch mode).
pub fn being_debugged() -> bool {
    MPIR_being_debugged.load(Ordering::SeqCst) != 0
}

/// Append a job's ranks (in rank order) to the table, publish it, set
/// `MPIR_debug_state` and call the breakpoint.
pub fn publish(procs: &[ProcInfo]) {
    {
        let mut guard = TABLE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (current, previous) = &mut *guard;
        let mut strings: Vec<CString> = Vec::new();
        let mut listed: Vec<(String, String, i32)> = Vec::new();
        if let Some(old) = current.as_ref() {
            for e in &old.entries {
                listed.push((text_at(old, e.host_name), text_at(old, e.executable_name), e.pid));
            }
        }
        listed.extend(procs.iter().map(|p| (p.host.clone(), p.exe.clone(), p.pid as i32)));
        let mut intern = |s: &str| -> usize {
            if let Some(c) = strings.iter().find(|c| c.as_bytes() == s.as_bytes()) {
                return c.as_ptr() as usize;
            }
            let c = CString::new(s.replace('\0', "?")).unwrap_or_default();
            let at = c.as_ptr() as usize;
            strings.push(c);
            at
        };
        let entries: Vec<ProcDesc> = listed.iter().map(|(h, e, pid)| ProcDesc { host_name: intern(h), executable_name: intern(e), pid: *pid }).collect();
        let table = Table { strings, entries };
        let size = i32::try_from(table.entries.len()).unwrap_or(i32::MAX);
        // The entries' memory moves no more once the Vec is built: publish
        // its address, then the size.
        MPIR_proctable_size.store(0, Ordering::Release);
        MPIR_proctable.store(table.entries.as_ptr().cast_mut(), Ordering::Release);
        MPIR_proctable_size.store(size, Ordering::Release);
        *previous = current.replace(table);
    }
    MPIR_debug_state.store(MPIR_DEBUG_SPAWNED, Ordering::SeqCst);
    breakpoint();
}

/// The tool daemon a tool asked for at the breakpoint
/// ([`MPIR_executable_path`], [`MPIR_server_arguments`]), if any.
pub fn tool_daemon() -> Option<ToolDaemon> {
    let bytes = |cells: &[AtomicU8]| cells.iter().map(|b| b.load(Ordering::SeqCst)).collect::<Vec<u8>>();
    parse_tool(&bytes(&MPIR_executable_path), &bytes(&MPIR_server_arguments))
}

/// A tool daemon from the symbols' bytes: the path up to its NUL (none: no
/// tool), the arguments up to the first empty one (or the array's end).
fn parse_tool(path: &[u8], args: &[u8]) -> Option<ToolDaemon> {
    let path = path.split(|&b| b == 0).next().filter(|p| !p.is_empty())?;
    let args = args.split(|&b| b == 0).take_while(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    Some(ToolDaemon { path: String::from_utf8_lossy(path).into_owned(), args })
}

/// The string of `table` an entry points at (one of its own).
fn text_at(table: &Table, at: usize) -> String {
    table.strings.iter().find(|c| c.as_ptr() as usize == at).map_or_else(String::new, |c| c.to_string_lossy().into_owned())
}

/// The published entries, as (host, program, pid): what a tool reads.
pub fn snapshot() -> Vec<(String, String, i32)> {
    let guard = TABLE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    guard.0.as_ref().map_or_else(Vec::new, |t| t.entries.iter().map(|e| (text_at(t, e.host_name), text_at(t, e.executable_name), e.pid)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(host: &str, exe: &str, pid: u32) -> ProcInfo {
        ProcInfo { rank: 0, host: host.into(), exe: exe.into(), pid }
    }

    #[test]
    fn a_tool_daemon_is_read_from_the_c_strings() {
        assert_eq!(parse_tool(&[0; 8], b"a\0b\0\0"), None);
        let tool = parse_tool(b"/bin/tool\0junk", b"-a\0two words\0\0stale\0").unwrap();
        assert_eq!(tool, ToolDaemon { path: "/bin/tool".into(), args: vec!["-a".into(), "two words".into()] });
        // No arguments; a path filling the array without its NUL.
        assert_eq!(parse_tool(&[b'x'; 4], &[0; 4]).unwrap(), ToolDaemon { path: "xxxx".into(), args: vec![] });
        assert_eq!(std::mem::size_of_val(&MPIR_executable_path), 256);
        assert_eq!(std::mem::size_of_val(&MPIR_server_arguments), 1024);
        assert_eq!(tool_daemon(), None);
    }

    #[test]
    fn the_table_grows_by_job_and_keeps_the_c_layout() {
        assert_eq!(std::mem::size_of::<ProcDesc>(), 2 * std::mem::size_of::<*const u8>() + std::mem::size_of::<*const u8>().max(4));
        publish(&[p("a", "/bin/x", 10), p("b", "/bin/x", 11)]);
        assert_eq!(MPIR_debug_state.load(Ordering::SeqCst), MPIR_DEBUG_SPAWNED);
        publish(&[p("a", "/bin/y", 12)]);
        assert_eq!(MPIR_proctable_size.load(Ordering::SeqCst), 3);
        let t = snapshot();
        assert_eq!(t, vec![("a".into(), "/bin/x".into(), 10), ("b".into(), "/bin/x".into(), 11), ("a".into(), "/bin/y".into(), 12)]);
        assert!(BREAKPOINT_CALLS.load(Ordering::SeqCst) >= 2);
        // The published pointer is the table's own memory.
        let first = MPIR_proctable.load(Ordering::Acquire);
        let guard = TABLE.lock().unwrap();
        assert_eq!(first.cast_const(), guard.0.as_ref().unwrap().entries.as_ptr());
    }
}
