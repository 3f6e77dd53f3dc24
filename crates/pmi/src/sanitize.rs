//! Client-supplied text on its way to a log line, a trace line or an error
//! reply ([`quote`], [`escape`]), and the per-connection warning budget
//! ([`WarnLimiter`]). A rank controls every byte it sends: a raw newline in
//! a spawn argument must not forge a `dpm: job failed…` line, and 10 MB of
//! junk must not become 10 million warnings.

use std::fmt::Write;

use crate::limits::{QUOTE_MAX, WARNINGS_LOGGED};

/// `text` with control characters (newline, carriage return, escape…)
/// written as Rust escapes (`\n`, `\u{1b}`); printable text is unchanged.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            let _ = write!(out, "{}", c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// [`escape`], cut to [`QUOTE_MAX`] characters (`…` marks the cut).
pub fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_MAX) {
        Some((cut, _)) => format!("{}…", escape(&text[..cut])),
        None => escape(text),
    }
}

/// Decides which of a connection's warnings reach the log.
#[derive(Debug, Default)]
pub struct WarnLimiter {
    count: u64,
    logged: u64,
}

impl WarnLimiter {
    /// Count one warning; `Some(n)` if it should be logged, `n` being its
    /// number: the first [`WARNINGS_LOGGED`], then the 10th, 100th, 1000th…
    pub fn allow(&mut self) -> Option<u64> {
        self.count += 1;
        let n = self.count;
        let power_of_ten = n >= 10 && 10u64.pow(n.ilog10()) == n;
        let log = n <= WARNINGS_LOGGED || power_of_ten;
        self.logged += u64::from(log);
        log.then_some(n)
    }

    /// Warnings counted but not logged (for a closing summary).
    pub fn suppressed(&self) -> u64 {
        self.count - self.logged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_long_text_cut() {
        assert_eq!(escape("a\nb\r\u{1b}[31m"), "a\\nb\\r\\u{1b}[31m");
        assert_eq!(quote("ok text"), "ok text");
        let long = "x".repeat(1000);
        assert_eq!(quote(&long).chars().count(), QUOTE_MAX + 1);
    }

    #[test]
    fn a_million_warnings_log_a_handful_of_lines() {
        let mut w = WarnLimiter::default();
        let logged = (0..1_000_000).filter(|_| w.allow().is_some()).count() as u64;
        assert_eq!(logged, WARNINGS_LOGGED + 6, "first {WARNINGS_LOGGED}, then 10, 100, … 1,000,000");
        assert_eq!(w.suppressed(), 1_000_000 - logged);
    }
}
