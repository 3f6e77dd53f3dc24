//! The fuzz targets' bodies (`dpm_pmi::fuzzing`, shared with `fuzz/`) on the
//! stable toolchain: the committed seed corpus replayed, then a few thousand
//! deterministic mutations of it per target. Seconds, not the hours of a
//! real `cargo fuzz` run (see `fuzz/README.md`).

#![cfg(feature = "fuzzing")]

use std::path::{Path, PathBuf};

use dpm_pmi::fuzzing;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).collect();
    files.sort();
    let seeds: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert!(seeds.len() >= 10, "{target}: only {} seeds", seeds.len());
    seeds
}

/// xorshift64*: the same mutations on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Flip, insert, delete, duplicate or splice bytes, a few times over.
fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut data = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(data.len() + 1);
        match rng.below(6) {
            0 if !data.is_empty() => {
                let i = at.min(data.len() - 1);
                data[i] ^= 1 << rng.below(8);
            }
            1 => data.insert(at, [b'\n', b';', b'=', b' ', b'0', b'9', 0xff, b'\r'][rng.below(8)]),
            2 if at < data.len() => {
                let end = (at + rng.below(16)).min(data.len());
                data.drain(at..end);
            }
            3 if at < data.len() => {
                let end = (at + rng.below(64)).min(data.len());
                let piece = data[at..end].to_vec();
                data.splice(at..at, piece);
            }
            4 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len());
                data.splice(at..at, other[from..].iter().copied().take(rng.below(128)));
            }
            _ => data.extend_from_slice(b"99999999999999999999"),
        }
    }
    data
}

fn run(target: &str, body: fn(&[u8]), mutations: usize) {
    let seeds = corpus(target);
    for seed in &seeds {
        body(seed);
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ target.len() as u64);
    for _ in 0..mutations {
        body(&mutate(&mut rng, &seeds));
    }
}

#[test]
fn decoder() {
    run("decoder", fuzzing::decoder, 20_000);
}

#[test]
fn v2() {
    run("v2", fuzzing::v2, 20_000);
}

#[test]
fn request() {
    run("request", fuzzing::request, 20_000);
}

#[test]
fn engine() {
    run("engine", fuzzing::engine, 10_000);
}
