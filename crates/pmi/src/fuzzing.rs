//! The bodies of the coverage-guided fuzz targets (`fuzz/fuzz_targets/*`,
//! nightly `cargo fuzz`) and of their stable-toolchain short run
//! (`tests/fuzz_smoke.rs`): one copy of each, here, behind the `fuzzing`
//! feature. Each takes arbitrary bytes and panics only on a broken
//! invariant:
//! - [`decoder`]: the PMI-1 line / spawn-block / PMI-2 framing, fed in
//!   arbitrary chunks: never holds more than its bounds, every error consumes;
//! - [`v2`]: PMI-2 messages (the bytes wrapped in a valid length header);
//! - [`request`]: frames turned into typed requests: spawns within
//!   [`MAX_SPAWN_PROCS`] and [`MAX_SPAWN_ARGS`], keys and values within the maxes;
//! - [`engine`]: the whole engine, bytes on several connections (PMI_FD and
//!   PMI_PORT ones), deferred answers completed: every reply well-formed,
//!   never more replies than requests on a connection.

use std::collections::HashMap;

use dpm_kvs::{JobId, KvsDesign, NodeId, Rank};

use crate::limits::{MAX_FRAME, MAX_LINE, MAX_SPAWN_ARGS, MAX_SPAWN_BLOCK, MAX_SPAWN_PROCS};
use crate::reply::{KEYLEN_MAX, VALLEN_MAX};
use crate::wire::decode::Decoder;
use crate::wire::{Frame, Version};
use crate::{ConnId, Effect, Engine, JobSetup, Request};

/// Most bytes a decoder may hold after a feed of `last` bytes.
fn bound(last: usize) -> usize {
    MAX_SPAWN_BLOCK.max(MAX_FRAME + 6).max(MAX_LINE) + last
}

/// Split `data` into chunks whose sizes come from its own bytes (so the
/// fuzzer also explores where reads end).
fn chunks(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let step = data.first().map_or(1, |&b| usize::from(b % 64) + 1);
    data.chunks(step)
}

/// Decode everything; return the frames and the number of errors.
fn decode_all(data: &[u8]) -> (Vec<Frame>, usize) {
    let mut d = Decoder::new();
    let (mut frames, mut errors) = (Vec::new(), 0);
    for chunk in chunks(data) {
        d.feed(chunk);
        // An error consumes bytes, or ends a spawn block (whose bytes went
        // before): never two in a row that consume nothing.
        let mut idle_errors = 0;
        loop {
            let before = d.buffered();
            match d.next_frame() {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => break,
                Err(_) => {
                    errors += 1;
                    idle_errors = if d.buffered() < before { 0 } else { idle_errors + 1 };
                    assert!(idle_errors < 2, "errors that consume nothing");
                }
            }
        }
        assert!(d.buffered() <= bound(chunk.len()), "decoder holds {} bytes", d.buffered());
    }
    (frames, errors)
}

pub fn decoder(data: &[u8]) {
    let (frames, _) = decode_all(data);
    for f in frames {
        assert!(!f.name.is_empty());
    }
}

pub fn v2(data: &[u8]) {
    let body = &data[..data.len().min(MAX_FRAME)];
    let mut framed = format!("{:6}", body.len()).into_bytes();
    framed.extend_from_slice(body);
    framed.extend_from_slice(&framed.clone());
    let (frames, errors) = decode_all(&framed);
    assert_eq!(frames.len() + errors, 2, "two messages, two outcomes");
    for f in &frames {
        assert_eq!(f.version, Version::V2);
        let _ = Request::parse(f);
    }
}

pub fn request(data: &[u8]) {
    let (frames, _) = decode_all(data);
    for f in &frames {
        let Ok(req) = Request::parse(f) else { continue };
        match req {
            Request::Spawn(s) => {
                let procs: u64 = s.commands.iter().map(|c| u64::from(c.maxprocs)).sum();
                let args: usize = s.commands.iter().map(|c| c.args.len()).sum();
                assert!(procs <= u64::from(MAX_SPAWN_PROCS) && args <= MAX_SPAWN_ARGS, "{procs} processes, {args} arguments");
            }
            Request::Put { key, value, .. } | Request::PutNodeAttr { key, value } => {
                assert!(!key.is_empty() && key.len() <= KEYLEN_MAX && !value.is_empty() && value.len() <= VALLEN_MAX);
            }
            Request::Publish { service, port } => assert!(!service.is_empty() && !port.is_empty()),
            _ => {}
        }
    }
}

/// Connections of the engine target: 0–2 are ranks 0–2 (`PMI_FD`), 3–4
/// are `PMI_PORT` connections that have named no rank yet.
const CONNS: u64 = 5;

fn job() -> JobSetup {
    JobSetup {
        job: JobId(0),
        kvsname: "kvs_1_0".into(),
        size: 4,
        local_ranks: vec![Rank(0), Rank(1), Rank(2)],
        appnums: vec![0; 4],
        universe_size: 4,
        process_mapping: "(vector,(0,1,4))".into(),
        spawner: None,
        preput: vec![],
        kvs: KvsDesign::Allgather,
        node: NodeId(0),
        node_of: vec![],
    }
}

/// Counts per connection: requests seen (frames plus framing errors, by a
/// decoder of our own) and replies sent.
#[derive(Default)]
struct Tally {
    decoder: Decoder,
    requests: usize,
    replies: usize,
}

pub fn engine(data: &[u8]) {
    let mut e = Engine::new(true);
    e.add_job(job());
    let mut tally: HashMap<u64, Tally> = HashMap::new();
    let attach = |e: &mut Engine, tally: &mut HashMap<u64, Tally>, c: u64| {
        e.attach(ConnId(c), JobId(0), (c < 3).then_some(Rank(c as u32)));
        tally.insert(c, Tally::default());
    };
    for c in 0..CONNS {
        attach(&mut e, &mut tally, c);
    }
    // Each step: a header byte (connection, and what to do), a length byte, that many bytes.
    let mut rest = data;
    while let [head, len, tail @ ..] = rest {
        let conn = u64::from(*head) % CONNS;
        let n = usize::from(*len).min(tail.len());
        let (bytes, next) = tail.split_at(n);
        rest = next;
        match head / 8 % 8 {
            // Close and reopen the connection (a new process on it).
            0 => {
                e.detach(ConnId(conn));
                attach(&mut e, &mut tally, conn);
            }
            _ => {
                let t = tally.get_mut(&conn).expect("attached");
                t.decoder.feed(bytes);
                while let Ok(Some(_)) | Err(_) = t.decoder.next_frame() {
                    t.requests += 1;
                }
                e.on_bytes(ConnId(conn), bytes);
            }
        }
        complete(&mut e, &mut tally);
    }
}

/// Answer what the engine asked of the launcher, check every reply.
fn complete(e: &mut Engine, tally: &mut HashMap<u64, Tally>) {
    loop {
        let effects = e.take_effects();
        if effects.is_empty() {
            return;
        }
        for effect in effects {
            match effect {
                Effect::Send(conn, bytes) => {
                    check_reply(&bytes);
                    let t = tally.get_mut(&conn.0).expect("a reply to an attached connection");
                    t.replies += 1;
                    assert!(t.replies <= t.requests, "{} replies to {} requests on {conn:?}", t.replies, t.requests);
                }
                Effect::FenceIn { job, epoch, puts, .. } => e.fence_done(job, epoch, puts),
                Effect::Name { conn, op, .. } => {
                    let answer = match op {
                        crate::NameOp::Lookup { .. } => Err("service not found".into()),
                        _ => Ok(None),
                    };
                    e.name_done(conn, answer);
                }
                Effect::Spawn { conn, .. } => e.spawn_done(conn, Err("spawn refused for the fuzzer".into())),
                Effect::Trace { text, .. } => assert!(!text.contains(['\n', '\r']), "a raw line break in a trace line"),
                _ => {}
            }
        }
    }
}

/// One reply as sent: it decodes into frames without error, and a PMI-1
/// reply is a single line (four for initack) of `key=value` tokens.
fn check_reply(bytes: &[u8]) {
    let mut d = Decoder::new();
    d.feed(bytes);
    let mut frames = 0;
    loop {
        match d.next_frame() {
            Ok(Some(_)) => frames += 1,
            Ok(None) => break,
            Err(e) => panic!("a malformed reply {:?}: {e}", String::from_utf8_lossy(bytes)),
        }
    }
    assert_eq!(d.buffered(), 0, "a reply with a partial message: {:?}", String::from_utf8_lossy(bytes));
    let text = String::from_utf8_lossy(bytes);
    if text.starts_with("cmd=") {
        let lines = text.lines().count();
        assert!(lines == 1 || (lines == 4 && text.starts_with("cmd=initack")), "{text:?}");
        assert!(!text.contains('\\'), "a PMI-1 reply with an escape Intel MPI cannot read: {text:?}");
        assert!(text.lines().all(|l| l.split(' ').all(|t| t.contains('='))), "a PMI-1 token that is not key=value: {text:?}");
    } else {
        assert_eq!(frames, 1, "{text:?}");
    }
}
