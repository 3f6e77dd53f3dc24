//! The stream decoder: a [`Decoder`] per connection, bytes in, one
//! [`Frame`] at a time out (the shapes it tells apart: `crate::wire`).
//!
//! Every request gets exactly one answer, and the stream stays in step:
//! - a line longer than [`MAX_LINE`](crate::limits::MAX_LINE): one
//!   [`WireError::TooLong`], then input is dropped through its newline;
//! - a spawn block past [`MAX_SPAWN_BLOCK`](crate::limits::MAX_SPAWN_BLOCK)
//!   bytes or [`MAX_SPAWN_LINES`](crate::limits::MAX_SPAWN_LINES) lines: one
//!   [`WireError::SpawnTooLarge`], then the rest of the block is dropped
//!   through its last `endcmd` (or up to a `cmd=` line, which ends any block);
//! - `mcmd=` other than `mcmd=spawn`, or a junk line of any length: one error
//!   when its newline is in (a junk line is bounded like any other line);
//! - a PMI-2 message cannot exceed [`MAX_FRAME`](crate::limits::MAX_FRAME) (its header's width);
//! - a bad PMI-2 length header (not six digits or spaces, once the
//!   connection speaks PMI-2 or the bytes start like a header): PMI-2 has no
//!   point to resynchronise at, so it is the connection's last answer
//!   ([`WireError::is_fatal`]): one error, then the decoder takes no more
//!   (the engine closes the connection). Before, such a header was read as
//!   the start of a junk line and waited for a newline PMI-2 never sends:
//!   the connection answered nothing more.

use super::{parse_v1_line, parse_v2_body, Frame, Version, WireError};
use crate::limits::{MAX_LINE, MAX_SPAWN_BLOCK, MAX_SPAWN_LINES, QUOTE_MAX};
use crate::sanitize::quote;

/// Client bytes for an error message: the first few, escaped and cut.
fn snippet(bytes: &[u8]) -> String {
    quote(&String::from_utf8_lossy(&bytes[..bytes.len().min(4 * QUOTE_MAX)]))
}

/// Accumulates stream bytes and yields frames. One per connection.
///
/// Every byte is scanned once: the buffer is consumed from the front by an
/// offset (compacted on the next feed), the newline search resumes where it
/// stopped, and a spawn block is built line by line as it arrives. What it
/// holds is bounded by [`MAX_LINE`] / [`MAX_FRAME`](crate::limits::MAX_FRAME) / [`MAX_SPAWN_BLOCK`]
/// plus one read.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    /// `buf[..start]` is consumed.
    start: usize,
    /// `buf[start..start + scanned]` has no newline.
    scanned: usize,
    /// Bytes the newline search has looked at, over the decoder's life: the
    /// measure of its work (at most one look per byte fed).
    searched: u64,
    /// After an over-long line: drop input up to its newline, so the
    /// stream stays in step.
    skip_line: bool,
    /// The `mcmd=spawn` block being read.
    block: Option<Block>,
    /// A PMI-2 message was read: the stream speaks length headers.
    v2: bool,
    /// After a fatal error ([`WireError::is_fatal`]): nothing more is read.
    dead: bool,
}

/// A PMI-1 spawn block in progress.
#[derive(Debug, Default)]
struct Block {
    segments: Vec<Vec<(String, String)>>,
    current: Vec<(String, String)>,
    bytes: usize,
    lines: usize,
    /// The current segment's `totspawns` and `spawnssofar`.
    total: Option<usize>,
    sofar: Option<usize>,
    /// Past a limit (already answered): read to the block's end keeping nothing.
    dropping: bool,
}

impl Block {
    fn drop_rest(&mut self) {
        self.dropping = true;
        self.segments = Vec::new();
        self.current = Vec::new();
    }
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn feed(&mut self, data: &[u8]) {
        if self.dead {
            return;
        }
        // Amortised compaction: move the unread tail only once it is no
        // longer than what was consumed.
        if self.start > 0 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Bytes the newline search has looked at so far. Each byte fed is
    /// looked at no more than once, however the stream was cut into reads:
    /// a count, not a clock, for the tests that hold the decoder linear.
    pub fn bytes_searched(&self) -> u64 {
        self.searched
    }

    /// Bytes buffered and not yet consumed.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn consume(&mut self, n: usize) {
        if n > 0 {
            self.start += n;
            self.scanned = 0;
        }
    }

    /// Offset (from the unread start) of the next newline.
    fn find_newline(&mut self) -> Option<usize> {
        let from = self.start + self.scanned;
        match self.buf[from..].iter().position(|&b| b == b'\n') {
            Some(off) => {
                self.searched += off as u64 + 1;
                Some(self.scanned + off)
            }
            None => {
                self.searched += (self.buf.len() - from) as u64;
                self.scanned = self.buf.len() - self.start;
                None
            }
        }
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, WireError> {
        if self.dead {
            return Ok(None);
        }
        if self.skip_line {
            let Some(end) = self.find_newline() else {
                self.consume(self.pending().len());
                return Ok(None);
            };
            self.consume(end + 1);
            self.skip_line = false;
        }
        if self.block.is_some() {
            return self.block_lines();
        }
        // Blank lines between commands carry nothing: drop them.
        let blank = self.pending().iter().take_while(|&&b| b == b'\n' || b == b'\r').count();
        self.consume(blank);
        let buf = self.pending();
        if buf.is_empty() {
            return Ok(None);
        }
        if buf.starts_with(b"mcmd=") || buf.starts_with(b"cmd=") {
            return self.take_line();
        }
        if b"mcmd=".starts_with(&buf[..buf.len().min(5)]) || b"cmd=".starts_with(&buf[..buf.len().min(4)]) {
            return Ok(None); // a prefix of a PMI-1 command: wait for more
        }
        self.take_v2()
    }

    fn take_line(&mut self) -> Result<Option<Frame>, WireError> {
        let Some(end) = self.find_newline() else { return self.partial_line() };
        let text = String::from_utf8_lossy(&self.pending()[..end]).into_owned();
        self.consume(end + 1);
        if end > MAX_LINE {
            return Err(WireError::TooLong(end));
        }
        if let Some(rest) = text.strip_prefix("mcmd=") {
            if rest.trim_end_matches('\r') != "spawn" {
                return Err(WireError::BadSpawnBlock(format!("'mcmd={}' is not mcmd=spawn", quote(rest))));
            }
            let current = vec![("mcmd".to_string(), "spawn".to_string())];
            self.block = Some(Block { current, bytes: end + 1, lines: 1, ..Block::default() });
            return self.block_lines();
        }
        parse_v1_line(&text).map(Some)
    }

    /// A line without its newline yet: wait, unless it is already too long
    /// (then one error, and the rest of it is dropped as it comes).
    fn partial_line(&mut self) -> Result<Option<Frame>, WireError> {
        let n = self.pending().len();
        if n > MAX_LINE {
            self.consume(n);
            self.skip_line = true;
            return Err(WireError::TooLong(n));
        }
        Ok(None)
    }

    /// Read the spawn block's lines as far as they have arrived. It ends at
    /// the `endcmd` whose segment has `spawnssofar == totspawns`.
    fn block_lines(&mut self) -> Result<Option<Frame>, WireError> {
        loop {
            let Some(end) = self.find_newline() else {
                let partial = self.pending().len();
                let (bytes, dropping) = self.block.as_ref().map(|b| (b.bytes, b.dropping)).expect("in a block");
                if bytes + partial > MAX_SPAWN_BLOCK || (dropping && partial > MAX_LINE) {
                    // One line this long cannot be part of a spawn anyone can run.
                    self.consume(partial);
                    self.skip_line = true;
                    let block = self.block.as_mut().expect("in a block");
                    if !block.dropping {
                        block.drop_rest();
                        return Err(WireError::SpawnTooLarge);
                    }
                }
                return Ok(None);
            };
            let line = String::from_utf8_lossy(&self.pending()[..end]).into_owned();
            let line = line.trim_end_matches('\r');
            if line.starts_with("cmd=") {
                // A command before the block's end: the client gave up on the
                // block (or never was a PMI-1 spawner). Answer the block; the
                // command is read next.
                let block = self.block.take().expect("in a block");
                if block.dropping {
                    return self.next_frame();
                }
                return Err(WireError::BadSpawnBlock("a cmd= line before the block's last endcmd".into()));
            }
            self.consume(end + 1);
            let block = self.block.as_mut().expect("in a block");
            block.bytes += end + 1;
            block.lines += 1;
            if line == "endcmd" {
                // Without counters a block is one segment.
                let done = match (block.total.take(), block.sofar.take()) {
                    (Some(t), Some(s)) => s >= t,
                    _ => true,
                };
                let segment = std::mem::take(&mut block.current);
                if !block.dropping {
                    block.segments.push(segment);
                }
                if !done {
                    continue;
                }
                let block = self.block.take().expect("in a block");
                if block.dropping {
                    return self.next_frame();
                }
                let mut frame = Frame::new(Version::V1, "spawn");
                frame.segments = block.segments;
                return Ok(Some(frame));
            }
            if !block.dropping && (block.bytes > MAX_SPAWN_BLOCK || block.lines > MAX_SPAWN_LINES) {
                block.drop_rest();
                return Err(WireError::SpawnTooLarge);
            }
            match line.split_once('=') {
                Some((k, v)) if is_spawn_key(k) => {
                    let count = || v.trim().parse::<usize>().ok();
                    match k {
                        "totspawns" => block.total = count(),
                        "spawnssofar" => block.sofar = count(),
                        _ => {}
                    }
                    if !block.dropping {
                        block.current.push((k.to_string(), v.to_string()));
                    }
                }
                // MPICH writes values raw, so a newline inside an argument or
                // an info value (Open MPI's `env` is `A=1\nB=2`) splits it:
                // a line that is not one of the block's keys continues the value.
                _ if block.dropping => {}
                _ => match block.current.last_mut() {
                    Some((_, value)) => {
                        value.push('\n');
                        value.push_str(line);
                    }
                    None if line.is_empty() => {}
                    None => {
                        let err = WireError::BadSpawnBlock(format!("line '{}' is not key=value", quote(line)));
                        block.drop_rest();
                        return Err(err);
                    }
                },
            }
        }
    }

    fn take_v2(&mut self) -> Result<Option<Frame>, WireError> {
        let buf = self.pending();
        let head = &buf[..buf.len().min(6)];
        // A length header is six digits or spaces; anything else is a junk
        // line (however short: `=cmd\n` is answered, not waited on) — unless
        // the stream speaks PMI-2, or this starts like a header (a digit or
        // a space, no newline within six bytes): then it is a bad header.
        let header_like = head.iter().all(|&b| b.is_ascii_digit() || b == b' ');
        if header_like && head.len() < 6 {
            return Ok(None);
        }
        let starts_like_header = (head[0].is_ascii_digit() || head[0] == b' ') && !head.contains(&b'\n');
        if !header_like && !self.v2 && !starts_like_header {
            // A junk line: answered once, when its newline is in.
            let Some(end) = self.find_newline() else { return self.partial_line() };
            let junk = snippet(self.pending()[..end].trim_ascii_end());
            self.consume(end + 1);
            return Err(WireError::BadLine(junk));
        }
        let len = header_like.then(|| std::str::from_utf8(head).ok().and_then(|h| h.trim().parse::<usize>().ok())).flatten();
        let Some(len) = len else {
            // Not a length (`  -5  `, `00x012`, `      `): PMI-2 has no point
            // to resynchronise at, so nothing after it can be read in step.
            return Err(self.die(WireError::BadLength(snippet(head))));
        };
        // (Six digits cannot announce more than MAX_FRAME.)
        if buf.len() < 6 + len {
            return Ok(None);
        }
        let body = String::from_utf8_lossy(&buf[6..6 + len]).into_owned();
        self.consume(6 + len);
        self.v2 = true;
        parse_v2_body(&body).map(Some)
    }

    /// A fatal error: drop everything, now and from now on.
    fn die(&mut self, err: WireError) -> WireError {
        debug_assert!(err.is_fatal());
        *self = Decoder { dead: true, ..Decoder::default() };
        err
    }
}

/// The keys of an `mcmd=spawn` segment (`pmi-wire.md` §2.3).
fn is_spawn_key(key: &str) -> bool {
    let indexed = |prefix: &str| key.strip_prefix(prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    matches!(key, "mcmd" | "nprocs" | "execname" | "totspawns" | "spawnssofar" | "argcnt" | "preput_num" | "info_num")
        || ["arg", "preput_key_", "preput_val_", "info_key_", "info_val_"].iter().any(|p| indexed(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::MAX_FRAME;
    use crate::wire::lookup;

    #[test]
    fn an_over_long_line_costs_one_error_and_the_stream_stays_in_step() {
        let mut d = Decoder::new();
        d.feed(b"cmd=put key=k value=");
        let chunk = vec![b'z'; 64 * 1024];
        let mut errors = 0;
        for _ in 0..40 {
            d.feed(&chunk);
            while let Err(e) = d.next_frame() {
                assert!(matches!(e, WireError::TooLong(_)));
                errors += 1;
            }
        }
        d.feed(b"zzz\ncmd=get_maxes\n");
        assert_eq!(d.next_frame().unwrap().unwrap().name, "get_maxes");
        assert_eq!(errors, 1);
    }

    #[test]
    fn newlines_inside_spawn_values_are_kept() {
        let mut d = Decoder::new();
        d.feed(
            b"mcmd=spawn\nnprocs=1\nexecname=a\ntotspawns=1\nspawnssofar=1\nargcnt=1\narg1=line one\nline two\n\
                 info_num=1\ninfo_key_0=env\ninfo_val_0=A=1\nB=x y\nendcmd\n",
        );
        let f = d.next_frame().unwrap().unwrap();
        assert_eq!(lookup(&f.segments[0], "arg1"), Some("line one\nline two"));
        assert_eq!(lookup(&f.segments[0], "info_val_0"), Some("A=1\nB=x y"));
        assert_eq!(lookup(&f.segments[0], "B"), None);
    }

    #[test]
    fn the_decoder_holds_bounded_bytes_whatever_arrives() {
        // An endless line, an endless PMI-2 body, an endless spawn argument,
        // endless junk.
        for start in [&b"cmd=put key=k value="[..], b"999999cmd=kvs-put;", b"mcmd=spawn\nnprocs=1\narg1=", b"junk"] {
            let mut d = Decoder::new();
            d.feed(start);
            let chunk = vec![b'z'; 64 * 1024];
            for _ in 0..100 {
                d.feed(&chunk);
                while let Ok(Some(_)) | Err(_) = d.next_frame() {}
                assert!(d.buffered() <= MAX_SPAWN_BLOCK.max(MAX_FRAME + 6) + chunk.len(), "{} bytes held", d.buffered());
            }
        }
    }

    #[test]
    fn a_bad_pmi2_length_header_is_fatal_and_the_decoder_takes_nothing_more() {
        let frame = |body: &str| format!("{:6}{body}", body.len());
        // A connection that spoke PMI-2: any header that is not six digits or
        // spaces, however it goes on (no newline ever comes in PMI-2).
        for bad in ["00x012cmd=job-getid;", "  -5  cmd=x;", "abcdefcmd=job-getid;", "      cmd=finalize;"] {
            let mut d = Decoder::new();
            d.feed(frame("cmd=job-getid;").as_bytes());
            assert_eq!(d.next_frame().unwrap().unwrap().name, "job-getid");
            d.feed(bad.as_bytes());
            let err = d.next_frame().unwrap_err();
            assert!(err.is_fatal() && matches!(err, WireError::BadLength(_)), "{bad:?}: {err}");
            assert_eq!(d.buffered(), 0);
            d.feed(frame("cmd=finalize;").as_bytes());
            assert_eq!(d.next_frame(), Ok(None), "{bad:?}: read on after a fatal error");
            assert_eq!(d.buffered(), 0, "{bad:?}: kept bytes after a fatal error");
        }
        // A fresh connection whose first bytes start like a header.
        let mut d = Decoder::new();
        d.feed(b"  1x");
        assert!(d.next_frame().unwrap_err().is_fatal());
        // A header split across reads is waited for, not judged.
        let mut d = Decoder::new();
        d.feed(b"  ");
        assert_eq!(d.next_frame(), Ok(None));
        d.feed(b"  14cmd=job-getid;");
        assert_eq!(d.next_frame().unwrap().unwrap().name, "job-getid");
    }

    #[test]
    fn a_junk_line_before_any_pmi2_message_stays_a_line() {
        for junk in [&b"garbage\n"[..], b"12ab\n", b"1\n"] {
            let mut d = Decoder::new();
            d.feed(junk);
            let err = d.next_frame().unwrap_err();
            assert!(matches!(err, WireError::BadLine(_)) && !err.is_fatal(), "{err}");
            d.feed(b"cmd=get_maxes\n");
            assert_eq!(d.next_frame().unwrap().unwrap().name, "get_maxes");
        }
    }

    #[test]
    fn blank_lines_are_ignored() {
        let mut d = Decoder::new();
        d.feed(b"\n\r\ncmd=get_appnum\n");
        assert_eq!(d.next_frame().unwrap().unwrap().name, "get_appnum");
        assert_eq!(d.next_frame(), Ok(None));
    }
}
