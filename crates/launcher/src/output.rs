//! Writing the ranks' output: raw bytes by default (so `\r` progress bars and
//! binary output survive), or line by line behind a `[rank] ` label or the
//! `-prepend-pattern` prefix (the output patterns' specifiers) — to this
//! process's stdout/stderr, or to the `dpm run` client of a booted tree.
//!
//! Writing never happens on the controller's event loop: a [`Console`]
//! queues [`Chunk`]s for a writer — a thread of its own for this process's
//! stdout/stderr ([`stdout_sink`]), a task per client in the boot server —
//! which reports each chunk's [`Written`] credit back once it is written,
//! so a slow terminal or client holds up only the output (the run
//! acknowledges the credit to the nodes, whose windows bound what is
//! queued), never heartbeats, signals, fences or spawns.

use std::collections::HashMap;
use std::io::Write;

use tokio::sync::mpsc;

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::Stream;

/// Under `-l`, a line is held at most this long (bytes) for its newline;
/// longer ones are written in labelled pieces.
pub const LABEL_HOLD_MAX: usize = 64 * 1024;

/// Credit for output written to its destination: `bytes` of `job`'s output
/// that came from `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    pub node: NodeId,
    pub job: JobId,
    pub bytes: u64,
}

/// Bytes for stdout or stderr, and the credit to report once they are written.
pub struct Chunk {
    pub is_err: bool,
    pub data: Vec<u8>,
    pub written: Option<Written>,
    /// `-outfile-pattern`/`-errfile-pattern`: the file they go to instead.
    pub file: Option<String>,
}

/// Where a run's output and dpm's messages about it go.
#[derive(Clone)]
pub enum Console {
    /// This process's stdout and stderr, written at once: only for dpm's
    /// own lines outside a run (the manual bootstrap's instructions).
    Local,
    /// Queued for a writer (see the module documentation).
    Queue(mpsc::UnboundedSender<Chunk>, Option<LazyWriter>),
}

/// A writer thread not yet started ([`stdout_sink`]): it starts with the
/// first chunk; if none ever comes, dropping the last console drops its
/// drain, and the credit stream ends as it would have.
#[derive(Clone)]
pub struct LazyWriter(std::sync::Arc<std::sync::Mutex<Option<Drain>>>);

impl LazyWriter {
    fn start(&self) {
        let Some(drain) = self.0.lock().ok().and_then(|mut d| d.take()) else { return };
        let spawned = std::thread::Builder::new().name("dpm-output".into()).spawn(move || write_all(drain));
        if let Err(e) = spawned {
            // The closure (and the drain with it) is gone: the sink's stream
            // ends, and the run goes on without output rather than hang.
            tracing::error!("cannot start the output thread: {e}; output is lost");
        }
    }
}

impl Console {
    pub fn write(&self, is_err: bool, data: Vec<u8>, written: Option<Written>) {
        self.write_to(is_err, data, written, None);
    }

    /// [`Console::write`], to `file` if one is named (by the output patterns).
    pub fn write_to(&self, is_err: bool, data: Vec<u8>, written: Option<Written>, file: Option<String>) {
        match self {
            Console::Local => emit(is_err, &data),
            Console::Queue(tx, writer) => {
                if let Some(writer) = writer {
                    writer.start();
                }
                let _ = tx.send(Chunk { is_err, data, written, file });
            }
        }
    }

    /// One line of dpm's own on stderr.
    pub fn say(&self, line: &str) {
        self.write(true, format!("{line}\n").into_bytes(), None);
    }
}

/// A run's console and the credit its writer reports back.
pub struct Sink {
    pub console: Console,
    pub written: mpsc::UnboundedReceiver<Written>,
}

/// The writer's end of a [`Sink`]: the chunks to write, and where their
/// credit goes once they are written.
pub struct Drain {
    chunks: mpsc::UnboundedReceiver<Chunk>,
    written: mpsc::UnboundedSender<Written>,
}

impl Drain {
    pub async fn next(&mut self) -> Option<Chunk> {
        self.chunks.recv().await
    }

    /// A chunk with this credit was written (or its destination is gone:
    /// the bytes are dropped, as output to a closed stdout always was).
    pub fn done(&self, written: Option<Written>) {
        if let Some(w) = written {
            let _ = self.written.send(w);
        }
    }
}

/// A console queueing for a writer, and that writer's end.
pub fn sink() -> (Sink, Drain) {
    let (tx, chunks) = mpsc::unbounded_channel();
    let (written_tx, written) = mpsc::unbounded_channel();
    (Sink { console: Console::Queue(tx, None), written }, Drain { chunks, written: written_tx })
}

/// A console for this process's stdout/stderr, written by a thread of its own
/// (blocking writes: a full pipe or a stopped terminal blocks only it),
/// started with the first chunk: a run that prints nothing starts none (a
/// thread's start and end were ~3 % of a one-rank `dpm run`'s CPU, issue
/// 37). The sink's `written` stream ends once everything queued is written
/// and the console is dropped.
pub fn stdout_sink() -> Sink {
    let (tx, chunks) = mpsc::unbounded_channel();
    let (written_tx, written) = mpsc::unbounded_channel();
    let drain = Drain { chunks, written: written_tx };
    let writer = LazyWriter(std::sync::Arc::new(std::sync::Mutex::new(Some(drain))));
    Sink { console: Console::Queue(tx, Some(writer)), written }
}

/// The writer thread's loop: each chunk to its file or stream, then its credit.
fn write_all(mut drain: Drain) {
    let mut files = crate::outfile::Files::new();
    while let Some(chunk) = drain.chunks.blocking_recv() {
        match &chunk.file {
            Some(name) => files.write(name, &chunk.data),
            None => emit(chunk.is_err, &chunk.data),
        }
        drain.done(chunk.written);
    }
}

/// `-outfile-pattern` / `-errfile-pattern` of a run (checked when parsed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilePatterns {
    pub stdout: Option<String>,
    pub stderr: Option<String>,
}

impl FilePatterns {
    pub fn any(&self) -> bool {
        self.stdout.is_some() || self.stderr.is_some()
    }
}

/// Where a job's node stands for the file patterns: its index within the
/// job (`%p`) and its host (`%h`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePlace {
    pub index: usize,
    pub host: String,
}

/// At most this many (job, node) places are remembered; beyond, they are
/// forgotten and learnt again.
const MAX_PLACES: usize = 4096;

pub struct Output {
    console: Console,
    label: bool,
    /// `-prepend-pattern` (checked when parsed; wins over `label`).
    prepend: Option<String>,
    /// The node of each rank with a held line, for the prefix's `%h`/`%p`.
    rank_node: HashMap<(JobId, Rank), NodeId>,
    /// Unfinished lines per (job, rank, stream), held until their newline.
    partial: HashMap<(JobId, Rank, bool), Vec<u8>>,
    patterns: FilePatterns,
    places: HashMap<(JobId, NodeId), NodePlace>,
    /// The file of each held unfinished line bound for one.
    partial_file: HashMap<(JobId, Rank, bool), String>,
}

impl Output {
    pub fn new(label: bool, console: Console) -> Self {
        Output {
            console,
            label,
            prepend: None,
            rank_node: HashMap::new(),
            partial: HashMap::new(),
            patterns: FilePatterns::default(),
            places: HashMap::new(),
            partial_file: HashMap::new(),
        }
    }

    /// `-prepend-pattern`: every line behind this prefix (empty: none).
    pub fn set_prepend(&mut self, pattern: Option<String>) {
        self.prepend = pattern;
    }

    /// Whether lines get a prefix (and so are written whole).
    fn prefixes(&self) -> bool {
        match &self.prepend {
            Some(p) => !p.is_empty(),
            None => self.label,
        }
    }

    /// The prefix of `rank`'s lines: the pattern resolved, else `[rank] `
    /// (`[job.rank] ` for spawned jobs).
    fn prefix(&self, node: NodeId, job: JobId, rank: Rank) -> String {
        match &self.prepend {
            Some(pattern) => crate::outfile::resolve(pattern, &self.fields(node, job, rank)).unwrap_or_default(),
            None if job.0 == 0 => format!("[{}] ", rank.0),
            None => format!("[{}.{}] ", job.0, rank.0),
        }
    }

    fn fields(&self, node: NodeId, job: JobId, rank: Rank) -> crate::outfile::Fields<'_> {
        let place = self.places.get(&(job, node));
        crate::outfile::Fields {
            rank: rank.0,
            job: job.0,
            node_index: place.map_or(node.0, |p| p.index),
            host: place.map_or("", |p| p.host.as_str()),
            secs: crate::outfile::started().elapsed().as_secs(),
        }
    }

    /// Send the streams the patterns name to files.
    pub fn set_patterns(&mut self, patterns: FilePatterns) {
        self.patterns = patterns;
    }

    /// Whether output needs [`Output::place`] first (some stream goes to files).
    pub fn wants_places(&self) -> bool {
        self.patterns.any() || self.prepend.as_ref().is_some_and(|p| p.contains("%h") || p.contains("%p"))
    }

    /// Whether `job`'s place on `node` is known.
    pub fn knows_place(&self, job: JobId, node: NodeId) -> bool {
        self.places.contains_key(&(job, node))
    }

    /// Learn where `node` stands in `job` (for `%p` and `%h`).
    pub fn place(&mut self, job: JobId, node: NodeId, place: NodePlace) {
        if self.places.len() >= MAX_PLACES {
            self.places.clear();
        }
        self.places.insert((job, node), place);
    }

    /// The file a rank's stream goes to, if its pattern names one.
    fn file_of(&self, node: NodeId, job: JobId, rank: Rank, is_err: bool) -> Option<String> {
        let pattern = if is_err { self.patterns.stderr.as_deref() } else { self.patterns.stdout.as_deref() }?;
        // The pattern was checked when parsed: it always resolves.
        crate::outfile::resolve(pattern, &self.fields(node, job, rank)).ok()
    }

    pub fn console(&self) -> &Console {
        &self.console
    }

    /// Queue a rank's output from `node`; its credit is reported when it is
    /// written (a labelled partial line held here counts as written: the
    /// hold is bounded by [`LABEL_HOLD_MAX`]).
    pub fn write(&mut self, node: NodeId, job: JobId, rank: Rank, stream: Stream, data: &[u8]) {
        let is_err = stream == Stream::Stderr;
        let written = Some(Written { node, job, bytes: data.len() as u64 });
        let file = self.file_of(node, job, rank, is_err);
        if !self.prefixes() {
            return self.console.write_to(is_err, data.to_vec(), written, file);
        }
        if let Some(f) = &file {
            self.partial_file.insert((job, rank, is_err), f.clone());
        }
        let prefix = self.prefix(node, job, rank);
        let buf = self.partial.entry((job, rank, is_err)).or_default();
        buf.extend_from_slice(data);
        let mut out = match buf.iter().rposition(|&b| b == b'\n') {
            Some(last_nl) => labelled(&prefix, &buf.drain(..=last_nl).collect::<Vec<u8>>()),
            None => Vec::new(),
        };
        if buf.len() >= LABEL_HOLD_MAX {
            let mut rest = std::mem::take(buf);
            rest.push(b'\n');
            out.extend_from_slice(&labelled(&prefix, &rest));
        }
        if !buf.is_empty() {
            self.rank_node.insert((job, rank), node);
        }
        // Even with nothing to write, the credit goes through the queue,
        // behind what is written before it.
        self.console.write_to(is_err, out, written, file);
    }

    /// Write what is left of a rank's unfinished lines.
    pub fn flush_rank(&mut self, job: JobId, rank: Rank) {
        let node = self.rank_node.remove(&(job, rank)).unwrap_or(NodeId(0));
        let prefix = self.prefix(node, job, rank);
        for is_err in [false, true] {
            let file = self.partial_file.remove(&(job, rank, is_err));
            if let Some(mut rest) = self.partial.remove(&(job, rank, is_err)) {
                if !rest.is_empty() {
                    rest.push(b'\n');
                    self.console.write_to(is_err, labelled(&prefix, &rest), None, file);
                }
            }
        }
    }
}

fn labelled(prefix: &str, lines: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(lines.len() + prefix.len() * 2);
    for line in lines.split_inclusive(|&b| b == b'\n') {
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(line);
    }
    out
}

pub fn emit(is_err: bool, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    let written = if is_err {
        std::io::stderr().lock().write_all(data)
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(data).and_then(|()| out.flush())
    };
    // A closed stdout (`dpm run ... | head`): dpm ignores SIGPIPE, so the
    // write fails instead; the run is told, as Hydra's mpiexec would be by
    // the signal ([`CONSOLE_CLOSED`]).
    if written.is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) {
        CONSOLE_CLOSED.notify_one();
    }
}

/// Woken when dpm's stdout or stderr turns out to be a pipe with no reader
/// (`EPIPE`). The run's inputs turn it into SIGPIPE
/// (`controller::inputs::local_inputs`): the ranks get it and the run ends
/// with its status, 141, as Hydra's does — a rank that writes for ever
/// (`dpm run yes | head`) would otherwise run for ever with nobody reading.
pub static CONSOLE_CLOSED: tokio::sync::Notify = tokio::sync::Notify::const_new();

#[cfg(test)]
mod tests {
    use super::*;

    fn drained(drain: &mut Drain) -> Vec<(Vec<u8>, Option<u64>)> {
        let mut out = Vec::new();
        while let Ok(c) = drain.chunks.try_recv() {
            out.push((c.data, c.written.map(|w| w.bytes)));
        }
        out
    }

    #[test]
    fn raw_output_carries_its_credit_in_order() {
        let (sink, mut drain) = sink();
        let mut out = Output::new(false, sink.console);
        out.write(NodeId(1), JobId(0), Rank(0), Stream::Stdout, b"ab");
        out.console().say("dpm: x");
        assert_eq!(drained(&mut drain), vec![(b"ab".to_vec(), Some(2)), (b"dpm: x\n".to_vec(), None)]);
    }

    #[test]
    fn a_held_labelled_line_is_credited_at_once_and_bounded() {
        let (sink, mut drain) = sink();
        let mut out = Output::new(true, sink.console);
        out.write(NodeId(0), JobId(0), Rank(3), Stream::Stdout, b"par");
        assert_eq!(drained(&mut drain), vec![(Vec::new(), Some(3))], "nothing to write yet, the credit goes");
        out.write(NodeId(0), JobId(0), Rank(3), Stream::Stdout, b"t\n");
        assert_eq!(drained(&mut drain), vec![(b"[3] part\n".to_vec(), Some(2))]);
        let long = vec![b'x'; LABEL_HOLD_MAX];
        out.write(NodeId(0), JobId(0), Rank(3), Stream::Stdout, &long);
        let got = drained(&mut drain);
        assert_eq!(got.len(), 1);
        assert!(got[0].0.starts_with(b"[3] xxx") && got[0].0.ends_with(b"x\n") && got[0].0.len() == LABEL_HOLD_MAX + 5);
    }
}
