//! `-configfile FILE`, in Hydra's format: one MPMD segment per line, each
//! written as on the command line (`-n 2 -env A 1 ./a x`), words split at
//! blanks (no quoting, as Hydra); blank lines and lines whose first
//! non-blank character is `#` are skipped (a `#` later in a line is an
//! ordinary character, as in Hydra 5). The words go through the command
//! line's parser, a `:` between lines.

use std::io::Read;

/// The largest config file read (a command line is far smaller).
pub const MAX_CONFIG_FILE: u64 = 1 << 20;

/// Why a config file cannot be used (a usage error).
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("-configfile {file}: {source}")]
    Read { file: String, source: std::io::Error },
    #[error("-configfile {file}: larger than {MAX_CONFIG_FILE} bytes")]
    TooLarge { file: String },
    #[error("-configfile {file}: not text (UTF-8)")]
    NotText { file: String },
    #[error("-configfile {file}: no segment in it")]
    Empty { file: String },
}

/// The words of `file`, lines joined by `:`.
pub fn read(file: &str) -> Result<Vec<String>, ConfigFileError> {
    let read_err = |source| ConfigFileError::Read { file: file.to_string(), source };
    let mut bytes = Vec::new();
    std::fs::File::open(file).map_err(read_err)?.take(MAX_CONFIG_FILE + 1).read_to_end(&mut bytes).map_err(read_err)?;
    if bytes.len() as u64 > MAX_CONFIG_FILE {
        return Err(ConfigFileError::TooLarge { file: file.to_string() });
    }
    let text = String::from_utf8(bytes).map_err(|_| ConfigFileError::NotText { file: file.to_string() })?;
    let words = words(&text);
    if words.is_empty() {
        return Err(ConfigFileError::Empty { file: file.to_string() });
    }
    Ok(words)
}

/// The words of a config file's text, a `:` between lines (unless a line
/// already ends with one).
pub fn words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        if out.last().is_some_and(|w| w != ":") {
            out.push(":".into());
        }
        out.extend(line.split_whitespace().map(String::from));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_segments_and_comments_are_skipped() {
        let text = "# a comment\n  -n 2 -env X 1 ./a x\n\n   # indented comment\n-n 1 ./b # not a comment\n";
        assert_eq!(words(text), ["-n", "2", "-env", "X", "1", "./a", "x", ":", "-n", "1", "./b", "#", "not", "a", "comment"]);
        assert_eq!(words("-n 1 ./a :\n-n 1 ./b\n"), ["-n", "1", "./a", ":", "-n", "1", "./b"]);
        assert!(words("\n# only\n").is_empty());
    }
}
