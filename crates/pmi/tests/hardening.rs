//! Hostile PMI input through the engine, without sockets: each test
//! reproduces one defect an adversarial battery found (it failed on the code
//! before the fix). The bounds are those of `dpm_pmi::limits`; the numbers
//! are written out so that the tests also run against older code.

use std::io::Write;
use std::sync::{Arc, Mutex};

mod common;

use common::{engine, setup, KVS};
use dpm_kvs::{JobId, Rank};
use dpm_pmi::{ConnId, Decoder, Effect, Engine, Frame, Request};

/// Messages written to `conn` (a PMI-1 reply is one line, except the
/// four-line initack; a PMI-2 reply one length-prefixed message).
fn replies(effects: &[Effect], conn: u64) -> Vec<String> {
    let mut out = Vec::new();
    for f in effects {
        if let Effect::Send(c, b) = f {
            if *c == ConnId(conn) {
                out.push(String::from_utf8(b.clone()).unwrap());
            }
        }
    }
    out
}

fn spawned(effects: &[Effect]) -> usize {
    effects.iter().filter(|f| matches!(f, Effect::Spawn { .. })).count()
}

/// Feed in socket-sized chunks, as the daemon does.
fn feed(e: &mut Engine, conn: u64, bytes: &[u8]) -> Vec<Effect> {
    let mut all = Vec::new();
    for chunk in bytes.chunks(64 * 1024) {
        e.on_bytes(ConnId(conn), chunk);
        all.extend(e.take_effects());
    }
    all
}

fn v2(body: &str) -> String {
    format!("{:6}{body}", body.len())
}

/// A one-segment PMI-1 spawn block of `args`.
fn spawn_block(nprocs: &str, args: &[String]) -> Vec<u8> {
    let mut b = format!("mcmd=spawn\nnprocs={nprocs}\nexecname=/bin/true\ntotspawns=1\nspawnssofar=1\nargcnt={}\n", args.len());
    for (i, a) in args.iter().enumerate() {
        b.push_str(&format!("arg{}={a}\n", i + 1));
    }
    b.push_str("preput_num=0\ninfo_num=0\nendcmd\n");
    b.into_bytes()
}

#[test]
fn a_spawn_block_past_the_size_limit_costs_one_error_and_the_next_request_is_answered() {
    let mut e = engine(1);
    // 3 MB of arguments (the limit is 2 MiB).
    let args: Vec<String> = (0..30).map(|_| "a".repeat(100_000)).collect();
    let mut input = spawn_block("1", &args);
    input.extend_from_slice(b"cmd=get_appnum\n");
    let effects = feed(&mut e, 0, &input);
    let r = replies(&effects, 0);
    assert_eq!(r.len(), 2, "{:?}", r.iter().map(|s| &s[..s.len().min(80)]).collect::<Vec<_>>());
    assert!(r[0].contains("rc=1"), "{}", r[0]);
    assert_eq!(r[1], "cmd=appnum rc=0 appnum=0\n");
    assert_eq!(spawned(&effects), 0);
}

#[test]
fn eighty_thousand_arguments_in_one_write_get_one_answer() {
    let mut e = engine(1);
    let args: Vec<String> = (0..80_000).map(|i| format!("x{i}")).collect();
    let mut input = spawn_block("1", &args);
    input.extend_from_slice(b"cmd=finalize\n");
    e.on_bytes(ConnId(0), &input);
    let effects = e.take_effects();
    let r = replies(&effects, 0);
    assert_eq!(r.len(), 2, "one answer per request, got {}", r.len());
    assert!(r[0].starts_with("cmd=spawn_result rc=1 msg="), "{}", r[0]);
    assert_eq!(r[1], "cmd=finalize_ack rc=0\n");
    assert_eq!(spawned(&effects), 0);
}

#[test]
fn an_unknown_mcmd_is_answered_and_later_commands_are_served() {
    let mut e = engine(1);
    let effects = feed(&mut e, 0, b"mcmd=bogus\ncmd=get_appnum\ncmd=finalize\n");
    let r = replies(&effects, 0);
    assert_eq!(r.len(), 3, "{r:?}");
    assert!(r[0].contains("rc=1"), "{}", r[0]);
    assert_eq!(r[1..], ["cmd=appnum rc=0 appnum=0\n", "cmd=finalize_ack rc=0\n"]);
}

#[test]
fn a_junk_line_shorter_than_a_pmi2_header_is_answered_at_once() {
    for junk in ["=cmd\n", "x\n", "12\n", "c=\n"] {
        let mut e = engine(1);
        let r = replies(&feed(&mut e, 0, junk.as_bytes()), 0);
        assert_eq!(r.len(), 1, "{junk:?}: {r:?}");
        assert!(r[0].contains("rc=1"), "{junk:?}: {}", r[0]);
    }
}

#[test]
fn a_junk_line_split_across_reads_is_answered_once() {
    let mut e = engine(1);
    let mut effects = Vec::new();
    for piece in [&b"junk lin"[..], b"e one\nmore ", b"junk\ncmd=get_appnum\n"] {
        e.on_bytes(ConnId(0), piece);
        effects.extend(e.take_effects());
    }
    let r = replies(&effects, 0);
    assert_eq!(r.len(), 3, "{r:?}");
    assert!(r[0].contains("rc=1") && r[1].contains("rc=1"), "{r:?}");
    assert_eq!(r[2], "cmd=appnum rc=0 appnum=0\n");
}

#[test]
fn a_command_line_inside_an_unterminated_spawn_block_ends_it() {
    let mut e = engine(1);
    let r = replies(&feed(&mut e, 0, b"mcmd=spawn\nnprocs=1\ncmd=finalize\n"), 0);
    assert_eq!(r.len(), 2, "{r:?}");
    assert!(r[0].starts_with("cmd=spawn_result rc=1"), "{}", r[0]);
    assert_eq!(r[1], "cmd=finalize_ack rc=0\n");
}

fn base36(mut n: u32) -> String {
    let mut digits = Vec::new();
    loop {
        digits.push(char::from_digit(n % 36, 36).unwrap());
        n /= 36;
        if n == 0 {
            return digits.iter().rev().collect();
        }
    }
}

/// `input` through a decoder in 64 KiB reads: the first frame, and how many
/// bytes the decoder's newline search looked at to get it.
fn decode_in_reads(input: &[u8]) -> (Frame, u64) {
    let mut d = Decoder::new();
    for chunk in input.chunks(64 * 1024) {
        d.feed(chunk);
        if let Some(frame) = d.next_frame().expect("a well-formed spawn block") {
            return (frame, d.bytes_searched());
        }
    }
    panic!("the spawn block never ended");
}

#[test]
fn spawn_parsing_is_linear_in_the_argument_count() {
    // 65,000 arguments (the limit is 65,536) arriving in 64 KiB reads: the
    // quadratic parser, which searched each read from the block's start,
    // took 2.7 s for 55,000. The work is counted, not timed: every byte is
    // looked at once, for 32,500 arguments and for twice as many alike.
    // (Short arguments, so that the block also fits the old 999,999-byte limit.)
    let args: Vec<String> = (0..65_000u32).map(base36).collect();
    for n in [32_500, 65_000] {
        let input = spawn_block("2", &args[..n]);
        let (frame, searched) = decode_in_reads(&input);
        assert_eq!(searched, input.len() as u64, "{n} arguments: {searched} bytes searched for {} fed", input.len());
        let Ok(Request::Spawn(request)) = Request::parse(&frame) else { panic!("{n} arguments: not a spawn") };
        assert_eq!(request.commands[0].args.len(), n);
    }
    // And the engine carries the whole spawn out.
    let input = spawn_block("2", &args);
    let mut e = engine(1);
    let effects = feed(&mut e, 0, &input);
    let request = effects.iter().find_map(|f| if let Effect::Spawn { request, .. } = f { Some(request) } else { None });
    let request = request.expect("a spawn within the limits is carried out");
    assert_eq!(request.commands[0].args.len(), 65_000);
    assert_eq!(request.commands[0].args[64_999], base36(64_999));
}

#[test]
fn process_counts_never_wrap_and_are_bounded() {
    for nprocs in ["4294967295", "4294967296", "4294967297", "65537", "18446744073709551617", "-1"] {
        let mut e = engine(1);
        let effects = feed(&mut e, 0, &spawn_block(nprocs, &[]));
        assert_eq!(spawned(&effects), 0, "nprocs={nprocs} was carried out");
        let r = replies(&effects, 0);
        assert!(r.len() == 1 && r[0].starts_with("cmd=spawn_result rc=1"), "nprocs={nprocs}: {r:?}");
    }
    // The bound is on the whole spawn: two commands of 40,000 each.
    let mut e = engine(1);
    let body = "cmd=spawn;ncmds=2;preputcount=0;subcmd=a;maxprocs=40000;argc=0;infokeycount=0;subcmd=b;maxprocs=40000;argc=0;infokeycount=0;";
    let effects = feed(&mut e, 0, v2(body).as_bytes());
    assert_eq!(spawned(&effects), 0);
    assert!(replies(&effects, 0)[0].contains("cmd=spawn-response;rc=1;"));
    // Within the bound, a spawn goes ahead.
    let mut e = engine(1);
    assert_eq!(spawned(&feed(&mut e, 0, &spawn_block("65536", &[]))), 1);
}

#[test]
fn keys_values_and_names_beyond_the_advertised_maxes_or_empty_are_refused() {
    let mut e = engine(1);
    let key65 = "k".repeat(65);
    let val1025 = "v".repeat(1025);
    let val1024 = "v".repeat(1024);
    for (line, ok) in [
        (format!("cmd=put kvsname={KVS} key={key65} value=v\n"), false),
        (format!("cmd=put kvsname={KVS} key=k value={val1025}\n"), false),
        (format!("cmd=put kvsname={KVS} key=k value=\n"), false),
        (format!("cmd=put kvsname={KVS} key= value=v\n"), false),
        (format!("cmd=put kvsname={KVS} key=k value={val1024}\n"), true),
        (format!("cmd=get kvsname={KVS} key={key65}\n"), false),
        ("cmd=publish_name service= port=p\n".to_string(), false),
        ("cmd=lookup_name service=\n".to_string(), false),
        ("cmd=unpublish_name service=\n".to_string(), false),
        (v2("cmd=kvs-put;key=k;value=;"), false),
        (v2(&format!("cmd=kvs-put;key=k;value={val1025};")), false),
        (v2("cmd=name-publish;name=;port=p;"), false),
        (v2(&format!("cmd=info-putnodeattr;key={key65};value=v;")), false),
    ] {
        let effects = feed(&mut e, 0, line.as_bytes());
        let r = replies(&effects, 0);
        assert_eq!(r.len(), 1, "{line}: {r:?}");
        assert_eq!(r[0].contains("rc=0"), ok, "{line}: {}", r[0]);
        assert!(!effects.iter().any(|f| matches!(f, Effect::Name { .. })), "{line} went to the name service");
    }
}

#[test]
fn a_pmi2_connection_gets_pmi2_errors() {
    // Junk on a connection that speaks PMI-2 cannot be read past (PMI-2 has
    // no newline to resynchronise at): a PMI-2 error, then the close.
    for junk in ["garbage line\n", "x\n"] {
        let mut e = engine(1);
        feed(&mut e, 0, v2("cmd=fullinit;pmirank=0;").as_bytes());
        let effects = feed(&mut e, 0, junk.as_bytes());
        let r = replies(&effects, 0);
        assert_eq!(r.len(), 1, "{r:?}");
        let body = &r[0][6..];
        assert_eq!(r[0][..6].trim().parse::<usize>().ok(), Some(body.len()), "not PMI-2 framed: {:?}", r[0]);
        assert!(body.contains(";rc=1;"), "{body}");
        assert!(matches!(effects.last(), Some(Effect::Close(ConnId(0)))), "{effects:?}");
    }
}

/// Issue 26: a bad PMI-2 length header was read as the start of a junk line
/// and waited for a newline PMI-2 never sends: the connection answered
/// nothing more (this request, and every later one). Now: one error in
/// PMI-2 framing, then the connection is closed and nothing more is read.
#[test]
fn a_bad_pmi2_length_header_is_answered_with_an_error_and_the_connection_closed() {
    for bad in ["00x012cmd=job-getid;", "  -5  cmd=job-getid;", "000abc", "      cmd=job-getid;"] {
        let mut e = engine(1);
        feed(&mut e, 0, v2("cmd=fullinit;pmirank=0;").as_bytes());
        let effects = feed(&mut e, 0, bad.as_bytes());
        let r = replies(&effects, 0);
        assert_eq!(r.len(), 1, "{bad:?}: {effects:?}");
        assert!(r[0][6..].starts_with("cmd=error;") || r[0][6..].contains(";rc=1;"), "{bad:?}: {r:?}");
        assert!(r[0].contains("length header"), "{bad:?}: {r:?}");
        assert!(matches!(effects.last(), Some(Effect::Close(ConnId(0)))), "{bad:?}: {effects:?}");
        // Nothing after it is read: no more answers, no more effects.
        assert!(feed(&mut e, 0, v2("cmd=job-getid;").as_bytes()).is_empty(), "{bad:?}");
    }
    // A header split across reads is waited for, and a good connection
    // beside a closed one is served.
    let mut e = engine(2);
    feed(&mut e, 0, v2("cmd=fullinit;pmirank=0;").as_bytes());
    feed(&mut e, 1, v2("cmd=fullinit;pmirank=1;").as_bytes());
    feed(&mut e, 0, b"0x");
    assert!(replies(&feed(&mut e, 1, b"    "), 1).is_empty());
    let r = replies(&feed(&mut e, 1, b"14cmd=job-getid;"), 1);
    assert!(r.len() == 1 && r[0].contains("cmd=job-getid-response;"), "{r:?}");
}

/// What Intel MPI's PMI-1 parser (`PMIU_parse_keyvals`) accepts: `key=value`
/// tokens split on single spaces, no backslash escapes.
fn intel_parses(line: &str) -> bool {
    let line = line.strip_suffix('\n').unwrap_or(line);
    !line.contains('\\') && !line.contains('\n') && line.split(' ').all(|t| t.split_once('=').is_some_and(|(k, v)| !k.is_empty() && !v.is_empty()))
}

#[test]
fn every_pmi1_error_reply_is_readable_by_intel_mpi() {
    let mut e = engine(2);
    let mut lines: Vec<String> = Vec::new();
    for input in [
        "cmd=get kvsname=kvs_42_0 key=missing\n",
        "cmd=get kvsname=other key=k\n",
        "cmd=put kvsname=other key=k value=v\n",
        "cmd=put kvsname=kvs_42_0 key=PMI_x value=v\n",
        "cmd=nosuch\n",
        "garbage line here\n",
        "cmd=init pmi_version=9 pmi_subversion=0\n",
        "cmd=initack pmiid=99\n",
        "mcmd=bogus\n",
        "cmd=put\n",
    ] {
        lines.extend(replies(&feed(&mut e, 0, input.as_bytes()), 0));
    }
    for op in ["cmd=lookup_name service=svc\n", "cmd=publish_name service=svc port=p\n", "cmd=unpublish_name service=svc\n"] {
        feed(&mut e, 1, op.as_bytes());
        e.name_done(ConnId(1), Err("service 'svc' not found (a \\ backslash)".into()));
        lines.extend(replies(&e.take_effects(), 1));
    }
    assert_eq!(lines.len(), 13, "{lines:?}");
    for line in &lines {
        assert!(line.contains(" rc=1 "), "{line}");
        assert!(intel_parses(line), "Intel MPI's parser rejects (and then takes the failure for success): {line:?}");
    }
    assert!(lines[10].starts_with("cmd=lookup_result rc=1 msg=service_'svc'_not_found"), "{}", lines[10]);
}

#[test]
fn a_pmi_port_connection_must_name_a_free_rank_of_the_job_first() {
    let mut e = Engine::new(false);
    e.add_job(setup(2));
    // Port mode: connections are attached without a rank.
    for c in 0..4 {
        e.attach(ConnId(c), JobId(0), None);
    }
    let talk = |e: &mut Engine, c: u64, s: &str| replies(&feed(e, c, s.as_bytes()), c).concat();
    // Nothing but init/initack/fullinit before the rank is named.
    assert!(talk(&mut e, 0, "cmd=get_my_kvsname\n").starts_with("cmd=my_kvsname rc=1"));
    let effects = feed(&mut e, 0, &spawn_block("1", &["marker".into()]));
    assert_eq!(spawned(&effects), 0, "a spawn from a connection that named no rank");
    assert!(talk(&mut e, 0, "cmd=init pmi_version=1 pmi_subversion=1\n").contains("rc=0"));
    assert!(talk(&mut e, 0, "cmd=initack pmiid=0\n").starts_with("cmd=initack rc=0 rank=0"));
    // A second connection cannot claim the bound id, nor one outside the job.
    assert!(talk(&mut e, 1, "cmd=initack pmiid=0\n").starts_with("cmd=initack rc=1"));
    assert!(talk(&mut e, 1, "cmd=initack pmiid=2\n").starts_with("cmd=initack rc=1"));
    assert!(talk(&mut e, 1, "cmd=initack pmiid=-1\n").starts_with("cmd=initack rc=1"));
    assert!(talk(&mut e, 2, &v2("cmd=fullinit;pmirank=0;")).contains("rc=1;"));
    assert_eq!(spawned(&feed(&mut e, 1, &spawn_block("1", &["marker".into()]))), 0);
    // A bound connection cannot switch to another rank.
    assert!(talk(&mut e, 0, "cmd=initack pmiid=1\n").starts_with("cmd=initack rc=1"));
    // The free rank can be named, once.
    assert!(talk(&mut e, 3, "cmd=initack pmiid=1\n").starts_with("cmd=initack rc=0 rank=1"));
    assert!(talk(&mut e, 2, &v2("cmd=fullinit;pmirank=1;")).contains("rc=1;"));
    // When rank 0's connection closes, its id is free again.
    e.detach(ConnId(0));
    assert!(talk(&mut e, 1, "cmd=initack pmiid=0\n").starts_with("cmd=initack rc=0 rank=0"));
}

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Run `f` and return what it logged.
fn logged(f: impl FnOnce()) -> String {
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = log.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

#[test]
fn a_megabyte_of_junk_logs_a_handful_of_lines() {
    let junk = b"x\n".repeat(512 * 1024);
    let mut answers = 0;
    let log = logged(|| {
        let mut e = engine(1);
        answers = replies(&feed(&mut e, 0, &junk), 0).len();
        e.detach(ConnId(0));
    });
    let lines = log.lines().count();
    assert!(lines <= 20, "{lines} log lines for one connection's junk (was one per bad line)");
    assert_eq!(answers, 512 * 1024, "one answer per bad line");
    assert!(log.contains("not logged"), "a closing count: {log}");
}

#[test]
fn client_text_cannot_forge_log_or_trace_lines() {
    let forged = "dpm: job failed: rank 3 killed";
    let mut trace = Vec::new();
    let log = logged(|| {
        let mut e = Engine::new(true);
        e.add_job(setup(1));
        e.attach(ConnId(0), JobId(0), Some(Rank(0)));
        // A raw newline inside a spawn argument (legal: MPICH writes values raw).
        let input = format!("mcmd=spawn\nnprocs=1\nexecname=/bin/true\ntotspawns=1\nspawnssofar=1\nargcnt=1\narg1=a\n{forged}\nendcmd\n");
        trace.extend(feed(&mut e, 0, input.as_bytes()));
        // And in a PMI-2 command name, key and value.
        trace.extend(feed(&mut e, 0, v2(&format!("cmd=nosuch\n{forged};")).as_bytes()));
        trace.extend(feed(&mut e, 0, v2(&format!("cmd=kvs-get;key=k\n{forged};")).as_bytes()));
        trace.extend(feed(&mut e, 0, format!("\r{forged}\n").as_bytes()));
    });
    for line in log.lines() {
        assert!(!line.starts_with(forged), "forged log line: {log}");
    }
    let texts: Vec<&String> = trace.iter().filter_map(|f| if let Effect::Trace { text, .. } = f { Some(text) } else { None }).collect();
    assert!(texts.len() >= 4, "{texts:?}");
    for t in texts {
        assert!(!t.contains('\n') && !t.contains('\r'), "a trace line with a raw line break: {t:?}");
    }
}
