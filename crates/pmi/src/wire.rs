//! Framing: bytes from a PMI socket in, one [`Frame`] at a time out.
//!
//! Three shapes share one stream and are told apart by their first bytes, as
//! MPICH's own client and Hydra's proxy do:
//! - a PMI-1 line, `cmd=NAME k=v k=v\n`;
//! - a PMI-1 multi-line spawn block, `mcmd=spawn\n` … `endcmd\n`, repeated
//!   `totspawns` times, where every line is `key=value` and values may hold spaces;
//! - a PMI-2 message, a 6-character decimal length then `cmd=NAME;k=v;…;`.
//!
//! Nothing is unescaped: MPICH 5 never escapes, and Hydra's unescaping mangles
//! arguments that contain a backslash. Keys end at the first `=`, so values may
//! contain `=` (`value=segments=9`).

use std::fmt;

/// Largest frame accepted; PMI-2's length header cannot say more than this.
pub const MAX_FRAME: usize = 999_999;

/// Which of the two wire protocols a frame used (the reply must use the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    V1,
    V2,
}

/// One decoded message: a command name and its attributes, in wire order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub version: Version,
    pub name: String,
    pub attrs: Vec<(String, String)>,
    /// For a PMI-1 `mcmd=spawn` block: the attributes of each segment.
    pub segments: Vec<Vec<(String, String)>>,
}

impl Frame {
    pub fn new(version: Version, name: impl Into<String>) -> Self {
        Frame { version, name: name.into(), attrs: Vec::new(), segments: Vec::new() }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        lookup(&self.attrs, key)
    }
}

pub fn lookup<'a>(attrs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// What the decoder could not make sense of. The bytes in question are
/// consumed, so the stream can go on after the error is answered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("malformed PMI-1 line {0:?}: expected `cmd=NAME key=value ...`")]
    BadLine(String),
    #[error("malformed PMI-2 length header {0:?}")]
    BadLength(String),
    #[error("malformed PMI-2 message {0:?}: expected `cmd=NAME;key=value;...;`")]
    BadMessage(String),
    #[error("malformed mcmd=spawn block: {0}")]
    BadSpawnBlock(String),
    #[error("message of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLong(usize),
}

/// Accumulates stream bytes and yields frames. One per connection.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    /// After an over-long PMI-1 line: drop input up to its newline, so the
    /// stream stays in step.
    skip_line: bool,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn feed(&mut self, mut data: &[u8]) {
        if self.skip_line {
            match data.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    self.skip_line = false;
                    data = &data[end + 1..];
                }
                None => return,
            }
        }
        self.buf.extend_from_slice(data);
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, WireError> {
        // Blank lines between commands carry nothing: drop them.
        let blank = self.buf.iter().take_while(|&&b| b == b'\n' || b == b'\r').count();
        if blank > 0 {
            self.buf.drain(..blank);
        }
        let buf = &self.buf;
        if buf.is_empty() {
            return Ok(None);
        }
        if buf.starts_with(b"mcmd=") {
            return self.take_spawn_block();
        }
        if buf.starts_with(b"cmd=") {
            return self.take_line();
        }
        if b"mcmd=".starts_with(&buf[..buf.len().min(5)]) || b"cmd=".starts_with(&buf[..buf.len().min(4)]) {
            return Ok(None); // a prefix of a PMI-1 command: wait for more
        }
        self.take_v2()
    }

    fn take_line(&mut self) -> Result<Option<Frame>, WireError> {
        let Some(end) = self.buf.iter().position(|&b| b == b'\n') else {
            return self.check_unbounded();
        };
        let line: Vec<u8> = self.buf.drain(..=end).collect();
        let text = String::from_utf8_lossy(&line[..end]).into_owned();
        parse_v1_line(&text).map(Some)
    }

    fn take_spawn_block(&mut self) -> Result<Option<Frame>, WireError> {
        // Scan whole lines; the block ends at the `endcmd` whose segment has
        // spawnssofar == totspawns.
        let mut segments: Vec<Vec<(String, String)>> = Vec::new();
        let mut current: Vec<(String, String)> = Vec::new();
        let mut pos = 0;
        while let Some(off) = self.buf[pos..].iter().position(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(&self.buf[pos..pos + off]).into_owned();
            pos += off + 1;
            let line = line.trim_end_matches('\r');
            if line == "endcmd" {
                let done = {
                    let total = lookup(&current, "totspawns").and_then(|v| v.trim().parse::<usize>().ok());
                    let sofar = lookup(&current, "spawnssofar").and_then(|v| v.trim().parse::<usize>().ok());
                    segments.push(std::mem::take(&mut current));
                    match (total, sofar) {
                        (Some(t), Some(s)) => s >= t,
                        _ => true, // without counters a block is one segment
                    }
                };
                if done {
                    self.buf.drain(..pos);
                    let mut frame = Frame::new(Version::V1, "spawn");
                    frame.segments = segments;
                    return Ok(Some(frame));
                }
                continue;
            }
            match line.split_once('=') {
                Some((k, v)) if is_spawn_key(k) => current.push((k.to_string(), v.to_string())),
                // MPICH writes values raw, so a newline inside an argument or
                // an info value (Open MPI's `env` is `A=1\nB=2`) splits it:
                // a line that is not one of the block's keys continues the value.
                _ => match current.last_mut() {
                    Some((_, value)) => {
                        value.push('\n');
                        value.push_str(line);
                    }
                    None if line.is_empty() => {}
                    None => {
                        self.buf.drain(..pos);
                        return Err(WireError::BadSpawnBlock(format!("line {line:?} is not key=value")));
                    }
                },
            }
        }
        self.check_unbounded()
    }

    fn take_v2(&mut self) -> Result<Option<Frame>, WireError> {
        if self.buf.len() < 6 {
            return Ok(None);
        }
        let header = String::from_utf8_lossy(&self.buf[..6]).into_owned();
        let Ok(len) = header.trim().parse::<usize>() else {
            // Not a length: resynchronise at the next newline so that one bad
            // line costs one error reply, not the connection.
            let end = self.buf.iter().position(|&b| b == b'\n').map(|p| p + 1).unwrap_or(self.buf.len());
            let junk: Vec<u8> = self.buf.drain(..end).collect();
            let text = String::from_utf8_lossy(&junk).trim_end().to_string();
            return Err(if text.contains(';') || text.contains('=') {
                WireError::BadLine(text)
            } else {
                WireError::BadLength(header)
            });
        };
        // (Six digits cannot announce more than MAX_FRAME.)
        if self.buf.len() < 6 + len {
            return Ok(None);
        }
        let body: Vec<u8> = self.buf.drain(..6 + len).skip(6).collect();
        parse_v2_body(&String::from_utf8_lossy(&body)).map(Some)
    }


    /// A PMI-1 line or spawn block that grew past the limit: drop it through
    /// its end of line, so the next command is read from its start.
    fn check_unbounded(&mut self) -> Result<Option<Frame>, WireError> {
        if self.buf.len() > MAX_FRAME {
            let n = self.buf.len();
            self.buf.clear();
            self.skip_line = true;
            return Err(WireError::TooLong(n));
        }
        Ok(None)
    }
}

/// The keys of an `mcmd=spawn` segment (`pmi-wire.md` §2.3).
fn is_spawn_key(key: &str) -> bool {
    let indexed = |prefix: &str| key.strip_prefix(prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    matches!(key, "mcmd" | "nprocs" | "execname" | "totspawns" | "spawnssofar" | "argcnt" | "preput_num" | "info_num")
        || ["arg", "preput_key_", "preput_val_", "info_key_", "info_val_"].iter().any(|p| indexed(p))
}

/// `cmd=NAME k=v k=v` (no trailing newline).
pub fn parse_v1_line(line: &str) -> Result<Frame, WireError> {
    let line = line.trim_end_matches('\r');
    let mut tokens = line.split(' ').filter(|t| !t.is_empty());
    let name = match tokens.next().and_then(|t| t.strip_prefix("cmd=")) {
        Some(n) if !n.is_empty() => n,
        _ => return Err(WireError::BadLine(line.to_string())),
    };
    let mut frame = Frame::new(Version::V1, name);
    for token in tokens {
        match token.split_once('=') {
            Some((k, v)) if !k.is_empty() => frame.attrs.push((k.to_string(), v.to_string())),
            // A bare word is a flag (e.g. PMI-1.2 `endcmd`): keep it with no value.
            None => frame.attrs.push((token.to_string(), String::new())),
            _ => return Err(WireError::BadLine(line.to_string())),
        }
    }
    Ok(frame)
}

/// `cmd=NAME;k=v;k=v;` (the body after the length header).
pub fn parse_v2_body(body: &str) -> Result<Frame, WireError> {
    let mut pairs = Vec::new();
    for part in body.split(';') {
        if part.is_empty() {
            continue;
        }
        match part.split_once('=') {
            Some((k, v)) if !k.is_empty() => pairs.push((k.to_string(), v.to_string())),
            _ => return Err(WireError::BadMessage(body.to_string())),
        }
    }
    let mut pairs = pairs.into_iter();
    match pairs.next() {
        Some((k, name)) if k == "cmd" && !name.is_empty() => {
            let mut frame = Frame::new(Version::V2, name);
            frame.attrs = pairs.collect();
            Ok(frame)
        }
        _ => Err(WireError::BadMessage(body.to_string())),
    }
}

/// Builds one outgoing message in either framing.
pub struct Encoder {
    version: Version,
    text: String,
}

impl Encoder {
    pub fn new(version: Version, name: &str) -> Self {
        let mut text = String::with_capacity(64);
        text.push_str("cmd=");
        text.push_str(name);
        if version == Version::V2 {
            text.push(';');
        }
        Encoder { version, text }
    }

    pub fn attr(mut self, key: &str, value: impl fmt::Display) -> Self {
        use fmt::Write;
        match self.version {
            Version::V1 => {
                let _ = write!(self.text, " {key}={value}");
            }
            Version::V2 => {
                let _ = write!(self.text, "{key}={value};");
            }
        }
        self
    }

    pub fn finish(self) -> Vec<u8> {
        match self.version {
            Version::V1 => {
                let mut out = self.text.into_bytes();
                out.push(b'\n');
                out
            }
            Version::V2 => {
                // Right-aligned, like MPICH; both MPICH and Slurm parse with atoi.
                let mut out = format!("{:6}", self.text.len()).into_bytes();
                out.extend_from_slice(self.text.as_bytes());
                out
            }
        }
    }
}

/// A printable form of a raw frame for `--pmi-trace` (newline and length header removed).
pub fn trace_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end_matches('\n');
    if text.starts_with("cmd=") || text.starts_with("mcmd=") {
        text.replace('\n', " / ")
    } else {
        text.get(6..).unwrap_or(text).to_string()
    }
}


#[cfg(test)]
mod tests {
    use super::*;

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
        d.feed(b"mcmd=spawn\nnprocs=1\nexecname=a\ntotspawns=1\nspawnssofar=1\nargcnt=1\narg1=line one\nline two\n\
                 info_num=1\ninfo_key_0=env\ninfo_val_0=A=1\nB=x y\nendcmd\n");
        let f = d.next_frame().unwrap().unwrap();
        assert_eq!(lookup(&f.segments[0], "arg1"), Some("line one\nline two"));
        assert_eq!(lookup(&f.segments[0], "info_val_0"), Some("A=1\nB=x y"));
        assert_eq!(lookup(&f.segments[0], "B"), None);
    }

    #[test]
    fn blank_lines_are_ignored() {
        let mut d = Decoder::new();
        d.feed(b"\n\r\ncmd=get_appnum\n");
        assert_eq!(d.next_frame().unwrap().unwrap().name, "get_appnum");
        assert_eq!(d.next_frame(), Ok(None));
    }
}
