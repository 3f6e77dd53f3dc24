//! How fast and how far full simulation goes: `simspeed NODES PPN [WORKLOAD] [KVS] [FANOUT]`.
use std::time::Instant;

use dpm_cluster::calibration::Calibration;
use dpm_cluster::sim::{simulate, Bootstrap, Scenario};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &str| a.get(i).cloned().unwrap_or_else(|| d.to_string());
    let sc = Scenario {
        nodes: arg(1, "64").parse().unwrap(),
        ppn: arg(2, "16").parse().unwrap(),
        workload: arg(3, "hello").parse().unwrap(),
        kvs: arg(4, "auto").parse().unwrap(),
        fanout: arg(5, "32").parse().unwrap(),
        bootstrap: Bootstrap::Ssh,
        booted: false,
        cores: 0,
        one_host: false,
    };
    let t = Instant::now();
    let out = simulate(&Calibration::sample(), &sc);
    println!("{:?} in {:.2} s wall", out, t.elapsed().as_secs_f64());
}
