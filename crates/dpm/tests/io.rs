//! Standard streams: stdin goes to rank 0 only (others see EOF), output is
//! forwarded byte-exact, `-l` labels every line with its rank, and stdout
//! and stderr stay apart.

mod common;

use common::{program, Dpm};

#[test]
fn stdin_goes_to_rank_zero_and_others_see_eof() {
    let out = Dpm::run(["-n", "3", &program("stdin_echo")]).stdin(b"first line\nsecond\n").output();
    out.assert_success();
    out.assert_stdout_lacks("FAIL");
    let mut lines = out.lines();
    lines.sort();
    assert_eq!(lines, vec!["rank 0 read 18 bytes: first line".to_string(), "rank 1 stdin eof".into(), "rank 2 stdin eof".into()], "{}", out.describe());
}

#[test]
fn large_stdin_reaches_rank_zero_whole() {
    // Far more than a pipe buffer (and Hydra's 64 KiB limit).
    let mut data = Vec::new();
    data.extend_from_slice(b"header line\n");
    while data.len() < 1_000_000 {
        data.extend_from_slice(b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n");
    }
    let n = data.len();
    let out = Dpm::run(["-n", "2", &program("stdin_echo")]).stdin(&data).output();
    out.assert_success();
    out.assert_stdout_contains(&format!("rank 0 read {n} bytes: header line\n"));
    out.assert_stdout_contains("rank 1 stdin eof");
}

#[test]
fn empty_stdin_is_eof_for_rank_zero() {
    let out = Dpm::run(["-n", "1", &program("stdin_echo")]).output();
    out.assert_success();
    assert_eq!(out.lines(), vec!["rank 0 read 0 bytes: ".to_string()], "{}", out.describe());
}

#[test]
fn unread_stdin_does_not_block_the_job() {
    // Rank 0 never reads; dpm must still finish (and not die of SIGPIPE).
    let data = vec![b'y'; 4 << 20];
    let out = Dpm::run(["-n", "2", "/bin/true"]).stdin(&data).output();
    out.assert_success();
}

#[test]
fn label_prefixes_every_line_with_the_rank() {
    let out = Dpm::run(["-l", "-n", "2", "/bin/sh", "-c", "echo one; echo two"]).output();
    out.assert_success();
    let lines = out.lines();
    for r in 0..2 {
        let mine: Vec<&String> = lines.iter().filter(|l| l.starts_with(&format!("[{r}] "))).collect();
        assert_eq!(mine, vec![&format!("[{r}] one"), &format!("[{r}] two")], "rank {r}'s lines\n{}", out.describe());
    }
    assert_eq!(lines.len(), 4, "{}", out.describe());
}

#[test]
fn label_long_spellings() {
    for flag in ["--label", "-prepend-rank", "--prepend-rank"] {
        let out = Dpm::run([flag, "-n", "1", "/bin/echo", "hi"]).output();
        out.assert_success();
        assert_eq!(out.stdout_str(), "[0] hi\n", "with {flag}\n{}", out.describe());
    }
}

#[test]
fn label_applies_to_stderr_too() {
    let out = Dpm::run(["-l", "-n", "2", "/bin/sh", "-c", "echo out; echo err >&2"]).output();
    out.assert_success();
    let mut lines = out.lines();
    lines.sort();
    assert_eq!(lines, vec!["[0] out".to_string(), "[1] out".into()], "{}", out.describe());
    let mut err = out.err_lines();
    err.sort();
    assert_eq!(err, vec!["[0] err".to_string(), "[1] err".into()], "{}", out.describe());
}

#[test]
fn no_label_without_the_option() {
    let out = Dpm::run(["-n", "2", "/bin/sh", "-c", "echo one; echo two"]).output();
    out.assert_success();
    let mut lines = out.lines();
    lines.sort();
    assert_eq!(lines, vec!["one", "one", "two", "two"], "{}", out.describe());
}

#[test]
fn stdout_and_stderr_stay_apart() {
    let out = Dpm::run(["-n", "1", "/bin/sh", "-c", "echo to-out; echo to-err >&2"]).output();
    out.assert_success();
    assert_eq!(out.stdout_str(), "to-out\n", "{}", out.describe());
    assert_eq!(out.stderr_str(), "to-err\n", "{}", out.describe());
}

#[test]
fn carriage_returns_survive_byte_exact() {
    let out = Dpm::run(["-n", "1", &program("progress")]).output();
    out.assert_success();
    assert_eq!(out.stdout, b"10%\r20%\r30%\rdone\n", "{}", out.describe());
}

#[test]
fn output_without_trailing_newline_is_kept() {
    let out = Dpm::run(["-n", "1", "/usr/bin/printf", "no newline"]).output();
    out.assert_success();
    assert_eq!(out.stdout, b"no newline", "{}", out.describe());
}

#[test]
fn binary_output_is_byte_exact() {
    // Every byte value, NUL and a lone '\r' included, twice.
    let mut bytes: Vec<u8> = (0..=255u8).collect();
    bytes.extend(0..=255u8);
    let file = common::TempFile::new("dpm-test-bytes", &bytes, 0o644);
    let out = Dpm::run(["-n", "1", "/bin/cat", &file.path_str()]).output();
    out.assert_success();
    assert_eq!(out.stdout, bytes, "{}", out.describe());
}

#[test]
fn large_output_is_complete() {
    // 3 ranks x 2,000,000 bytes in 20,000 lines of 100 bytes, then a marker.
    let script = "i=0; line=$(printf '%099d' 0); while [ $i -lt 20000 ]; do echo \"$line\"; i=$((i+1)); done; echo end-$PMI_RANK";
    let out = Dpm::run(["-n", "3", "/bin/sh", "-c", script]).output();
    out.assert_success();
    let lines = out.lines();
    let zeros = "0".repeat(99);
    assert_eq!(lines.iter().filter(|l| **l == zeros).count(), 60_000, "line count wrong; {} bytes of stdout", out.stdout.len());
    for r in 0..3 {
        assert!(lines.contains(&format!("end-{r}")), "no end-{r} line");
    }
    assert_eq!(out.stdout.len(), 60_000 * 100 + 3 * 6);
}
