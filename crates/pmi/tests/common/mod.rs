//! The job the engine tests run: one node, every rank local, MPICH's
//! mapping, kvsname [`KVS`].

use dpm_kvs::{JobId, KvsDesign, Rank};
use dpm_pmi::{ConnId, Effect, Engine, JobSetup};

pub const KVS: &str = "kvs_42_0";

pub fn setup(size: u32) -> JobSetup {
    JobSetup {
        job: JobId(0),
        kvsname: KVS.into(),
        size,
        local_ranks: (0..size).map(Rank).collect(),
        appnums: vec![0; size as usize],
        universe_size: 8,
        process_mapping: format!("(vector,(0,1,{size}))"),
        spawner: None,
        preput: vec![],
        kvs: KvsDesign::Allgather,
        node: dpm_kvs::NodeId(0),
        node_of: vec![],
    }
}

pub fn engine(size: u32) -> Engine {
    let mut e = Engine::new(false);
    e.add_job(setup(size));
    for r in 0..size {
        e.attach(ConnId(r as u64), JobId(0), Some(Rank(r)));
    }
    e
}

/// What the engine wrote to `conn` since its effects were last taken (the
/// other effects are dropped).
#[allow(dead_code)] // not every test file uses it
pub fn sent(e: &mut Engine, conn: u64) -> String {
    e.take_effects()
        .into_iter()
        .filter_map(|f| match f {
            Effect::Send(c, b) if c == ConnId(conn) => Some(String::from_utf8(b).unwrap()),
            _ => None,
        })
        .collect()
}
