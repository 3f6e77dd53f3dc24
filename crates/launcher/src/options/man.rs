//! The manual page's `dpm run` and `dpm boot` sections in roff, rendered from
//! the one option table and the help's prose (the parent module), as
//! `--help` is; `dpm man` puts the page together around them.

use super::help::{BOOT_INTRO, BOOT_TAIL, RUN_INTRO, RUN_NODES, RUN_TAIL};
use super::{Section, OPTIONS};

/// One line of text made safe for roff: backslashes escaped, dashes as `\-`
/// (an ASCII hyphen-minus, so that options can be copied from the page),
/// other than ASCII as groff's `\[uXXXX]`, and a leading `.` or `'` kept
/// from reading as a request.
pub fn escape(line: &str) -> String {
    let mut out = String::with_capacity(line.len() + 8);
    if line.starts_with('.') || line.starts_with('\'') {
        out.push_str("\\&");
    }
    for c in line.chars() {
        match c {
            '\\' => out.push_str("\\e"),
            '-' => out.push_str("\\-"),
            c if !c.is_ascii() => out.push_str(&format!("\\[u{:04X}]", u32::from(c))),
            _ => out.push(c),
        }
    }
    out
}

/// Prose in paragraphs (blank lines between them); a paragraph that starts
/// with `Usage:` or holds indented lines is kept as written (no fill).
pub fn prose(text: &str) -> String {
    let mut out = String::new();
    for paragraph in text.split("\n\n").map(str::trim_end).filter(|p| !p.trim().is_empty()) {
        let verbatim = paragraph.starts_with("Usage:") || paragraph.lines().skip(1).any(|l| l.starts_with(' '));
        out.push_str(if verbatim { ".PP\n.nf\n" } else { ".PP\n" });
        for line in paragraph.lines() {
            out.push_str(&escape(if verbatim { line } else { line.trim() }));
            out.push('\n');
        }
        if verbatim {
            out.push_str(".fi\n");
        }
    }
    out
}

/// Every listed option of `section`, as a tagged paragraph each.
fn options(out: &mut String, section: Section) {
    for o in OPTIONS.iter().filter(|o| o.section == section) {
        let names: Vec<String> = o.names.iter().map(|n| format!("\\fB{}\\fR", escape(n))).collect();
        out.push_str(".TP\n");
        out.push_str(&names.join(", "));
        if !o.arg.is_empty() {
            // An optional value (`[=N]`) is written against the name.
            if !o.arg.starts_with("[=") {
                out.push(' ');
            }
            out.push_str(&format!("\\fI{}\\fR", escape(o.arg)));
        }
        out.push('\n');
        for line in o.help.lines() {
            out.push_str(&escape(line.trim()));
            out.push('\n');
        }
    }
}

fn subsection(out: &mut String, title: &str) {
    out.push_str(&format!(".SS \"{}\"\n", escape(title)));
}

/// The `DPM RUN` section: usage, every option by kind, nodes, exit status.
pub fn run_section() -> String {
    let mut out = String::from(".SH \"DPM RUN\"\n");
    out.push_str(&prose(RUN_INTRO));
    subsection(&mut out, "Local options (apply to the ':'-separated segment they stand in)");
    options(&mut out, Section::Local);
    subsection(&mut out, "Global options");
    options(&mut out, Section::Global);
    subsection(&mut out, "PMI key-value space");
    options(&mut out, Section::Kvs);
    subsection(&mut out, "Nodes and placement");
    options(&mut out, Section::Nodes);
    options(&mut out, Section::Placement);
    out.push_str(&prose(RUN_NODES));
    subsection(&mut out, "Other options");
    options(&mut out, Section::Common);
    subsection(&mut out, "Dynamic processes, limits and exit status");
    out.push_str(&prose(RUN_TAIL));
    out
}

/// The `DPM BOOT` section: usage, its options, its files.
pub fn boot_section() -> String {
    let mut out = String::from(".SH \"DPM BOOT\"\n");
    out.push_str(&prose(BOOT_INTRO));
    subsection(&mut out, "Nodes and bootstrap, as for dpm run");
    options(&mut out, Section::Nodes);
    options(&mut out, Section::Boot);
    options(&mut out, Section::Common);
    subsection(&mut out, "Files");
    out.push_str(&prose(BOOT_TAIL));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Command;

    #[test]
    fn escape_keeps_roff_requests_and_escapes_out_of_text() {
        assert_eq!(escape("-genv NAME VALUE"), "\\-genv NAME VALUE");
        assert_eq!(escape(".hidden"), "\\&.hidden");
        assert_eq!(escape("'quoted'"), "\\&'quoted'");
        assert_eq!(escape("a\\b"), "a\\eb");
        assert_eq!(escape("l3cache…"), "l3cache\\[u2026]");
    }

    #[test]
    fn prose_fills_paragraphs_and_keeps_usage_lines() {
        let text = prose("Usage: dpm x\n       more\n\nOne line\nand another.\n");
        assert_eq!(text, ".PP\n.nf\nUsage: dpm x\n       more\n.fi\n.PP\nOne line\nand another.\n");
    }

    /// Every option `--help` lists is in the page, under its command.
    #[test]
    fn every_listed_option_is_in_its_commands_section() {
        let (run, boot) = (run_section(), boot_section());
        for o in OPTIONS.iter().filter(|o| !matches!(o.section, Section::Hidden | Section::BootInternal)) {
            let name = format!("\\fB{}\\fR", escape(o.names[0]));
            if o.section.taken_by(Command::Run) {
                assert!(run.contains(&name), "DPM RUN lacks {}", o.names[0]);
            }
            if o.section.taken_by(Command::Boot) {
                assert!(boot.contains(&name), "DPM BOOT lacks {}", o.names[0]);
            }
        }
        for text in [&run, &boot] {
            assert!(
                text.lines().all(|l| !l.starts_with('.') || l.starts_with(".SH ") || l.starts_with(".SS ") || [".PP", ".TP", ".nf", ".fi"].contains(&l)),
                "a text line reads as a request:\n{text}"
            );
        }
    }
}
