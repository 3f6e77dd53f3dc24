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
//!
//! The stream's decoder, its bounds and its errors are in [`decode`]; here
//! the frame, the two line parsers, the reply encoder and the trace forms.

pub mod decode;

use std::fmt;

pub use crate::limits::MAX_FRAME;
use crate::limits::{MAX_LINE, MAX_SPAWN_BLOCK, MAX_SPAWN_LINES};
use crate::sanitize::{escape, quote};

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
/// consumed, so the stream can go on after the error is answered. Quoted
/// client text is escaped and cut ([`quote`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("malformed PMI-1 line '{0}': expected `cmd=NAME key=value ...`")]
    BadLine(String),
    #[error("malformed PMI-2 length header '{0}'")]
    BadLength(String),
    #[error("malformed PMI-2 message '{0}': expected `cmd=NAME;key=value;...;`")]
    BadMessage(String),
    #[error("malformed mcmd=spawn block: {0}")]
    BadSpawnBlock(String),
    #[error("PMI-1 line of {0} bytes exceeds the {MAX_LINE}-byte limit")]
    TooLong(usize),
    #[error("mcmd=spawn block exceeds the limit of {MAX_SPAWN_BLOCK} bytes or {MAX_SPAWN_LINES} lines")]
    SpawnTooLarge,
}

impl WireError {
    /// The framing the bad input was evidently written in, if it says.
    pub fn version(&self) -> Option<Version> {
        match self {
            WireError::BadLength(_) | WireError::BadMessage(_) => Some(Version::V2),
            WireError::BadSpawnBlock(_) | WireError::SpawnTooLarge => Some(Version::V1),
            WireError::BadLine(_) | WireError::TooLong(_) => None,
        }
    }

    /// The stream cannot be read past this error (a PMI-2 length header
    /// that frames nothing): answer it, then close the connection.
    pub fn is_fatal(&self) -> bool {
        matches!(self, WireError::BadLength(_))
    }

    /// The request the error answers (its reply is named after it).
    pub fn request(&self) -> &'static str {
        match self {
            WireError::BadSpawnBlock(_) | WireError::SpawnTooLarge => "spawn",
            _ => "error",
        }
    }
}

/// `cmd=NAME k=v k=v` (no trailing newline).
pub fn parse_v1_line(line: &str) -> Result<Frame, WireError> {
    let line = line.trim_end_matches('\r');
    let mut tokens = line.split(' ').filter(|t| !t.is_empty());
    let name = match tokens.next().and_then(|t| t.strip_prefix("cmd=")) {
        Some(n) if !n.is_empty() => n,
        _ => return Err(WireError::BadLine(quote(line))),
    };
    let mut frame = Frame::new(Version::V1, name);
    for token in tokens {
        match token.split_once('=') {
            Some((k, v)) if !k.is_empty() => frame.attrs.push((k.to_string(), v.to_string())),
            // A bare word is a flag (e.g. PMI-1.2 `endcmd`): keep it with no value.
            None => frame.attrs.push((token.to_string(), String::new())),
            _ => return Err(WireError::BadLine(quote(line))),
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
            _ => return Err(WireError::BadMessage(quote(body))),
        }
    }
    let mut pairs = pairs.into_iter();
    match pairs.next() {
        Some((k, name)) if k == "cmd" && !name.is_empty() => {
            let mut frame = Frame::new(Version::V2, name);
            frame.attrs = pairs.collect();
            Ok(frame)
        }
        _ => Err(WireError::BadMessage(quote(body))),
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

/// A printable form of a raw frame for `--pmi-trace` (newline and length
/// header removed, control characters escaped).
pub fn trace_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end_matches('\n');
    if text.starts_with("cmd=") || text.starts_with("mcmd=") {
        escape(&text.replace('\n', " / "))
    } else {
        escape(text.get(6..).unwrap_or(text))
    }
}

/// A printable form of a decoded frame for `--pmi-trace` (control
/// characters escaped).
pub fn trace_frame(frame: &Frame) -> String {
    let sep = if frame.version == Version::V1 { " " } else { ";" };
    let mut text = format!("cmd={}", frame.name);
    if !frame.segments.is_empty() {
        text = "mcmd=spawn".into();
        for (i, seg) in frame.segments.iter().enumerate() {
            if i > 0 {
                text.push_str(" | mcmd=spawn");
            }
            for (k, v) in seg {
                text.push_str(&format!(" {k}={v}"));
            }
        }
        return escape(&text);
    }
    for (k, v) in &frame.attrs {
        text.push_str(sep);
        text.push_str(&format!("{k}={v}"));
    }
    escape(&text)
}
