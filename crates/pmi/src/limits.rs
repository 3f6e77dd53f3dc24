//! Resource bounds of the PMI layer: how much one connection may make the
//! daemon hold, parse or log, each with its reason. Past a bound a request
//! gets one error reply and the stream resynchronises on the next line or
//! frame; nothing is allocated for what the bound refuses.

/// Longest PMI-1 line (`cmd=…\n`). The longest legal one is a put of
/// `KVSNAME_MAX + KEYLEN_MAX + VALLEN_MAX` ≈ 1.4 KB (an abort message is
/// shorter); 64 KiB leaves room for any client and bounds the bytes held
/// while a line is incomplete. A longer line costs one error reply and is
/// dropped through its newline.
pub const MAX_LINE: usize = 64 * 1024;

/// Largest PMI-2 message: its 6-digit length header cannot say more.
pub const MAX_FRAME: usize = 999_999;

/// Largest PMI-1 `mcmd=spawn` block (all its segments). Linux refuses an
/// `execve` whose arguments and environment exceed `ARG_MAX` (2 MiB with the
/// default 8 MiB stack), so no larger spawn could run. Past it: one error
/// reply, then the rest of the block is dropped through its last `endcmd`.
pub const MAX_SPAWN_BLOCK: usize = 2 * 1024 * 1024;

/// Most `key=value` lines in one spawn block: twice [`MAX_SPAWN_ARGS`],
/// room for every command's counters, info and preput pairs. Bounds the
/// entries held (each costs ~100 bytes however short its line).
pub const MAX_SPAWN_LINES: usize = 2 * MAX_SPAWN_ARGS;

/// Most arguments over the commands of one spawn. `execve` needs at least
/// ~10 bytes per argument (pointer, character, NUL), so `ARG_MAX` allows
/// ~200 k of the shortest; no real MPI program passes more than a few
/// hundred. Checked before any argument vector is built.
pub const MAX_SPAWN_ARGS: usize = 65_536;

/// Most processes one spawn may start (the sum of its commands'
/// `nprocs`/`maxprocs`). Far beyond any node count dpm is run on, and small
/// enough that the per-process tables the launcher builds stay a few MB:
/// `nprocs=4294967295` would otherwise drive it out of memory.
pub const MAX_SPAWN_PROCS: u32 = 65_536;

/// Most info or preput pairs in one spawn command (MPI_Info objects hold a
/// handful; Open MPI's `env` is one pair).
pub const MAX_SPAWN_PAIRS: usize = 4096;

/// Error replies held back behind a deferred reply (a request sent while an
/// earlier one waits is a client bug; its error goes out after the reply it
/// waits behind). A correct client never has more than one; past this many a
/// connection's further requests are dropped unanswered, with a count logged.
pub const MAX_QUEUED_REPLIES: usize = 64;

/// Warnings logged per connection before they are only counted: the first
/// few, then one line each time the count reaches a power of ten, and a
/// total when the connection closes. 10 MB of junk logs ~10 lines, not
/// millions.
pub const WARNINGS_LOGGED: u64 = 5;

/// Client-supplied text quoted in a log line or an error reply is cut to
/// this many characters.
pub const QUOTE_MAX: usize = 80;

/// Most KVS messages a node holds for jobs it has not been given yet (a
/// put or get from another daemon that overtook the job's `Launch`; see
/// `engine::kvs`). Only the moments between a job's launch on one node and
/// on another fill it, with at most the puts its ranks make meanwhile; past
/// it the oldest is dropped with a warning (≤ ~16 MB of 1 KB values held).
pub const EARLY_KVS_MAX: usize = 16_384;

/// Jobs a node remembers as ended, so that a late KVS message for one is
/// dropped instead of held as early.
pub const ENDED_JOBS_REMEMBERED: usize = 4096;
