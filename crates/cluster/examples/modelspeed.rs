//! The CPU `dpm model`'s search costs at scale: `modelspeed [NODES] [PPN]`
//! (default 2,000 × 50) answers the full search (every design and fan-out)
//! for each bootstrap, and prints each answer's CPU time (this thread's:
//! a loaded machine stretches wall time, not CPU). Exits 1 if one costs
//! more than 1 s of CPU (issue 37's bound).

use dpm_cluster::calibration::Calibration;
use dpm_cluster::model::{answer, Query, FULL_RANKS};
use dpm_cluster::sim::{Bootstrap, Scenario, Workload};
use dpm_kvs::KvsDesign;

/// This thread's CPU time (user + system), seconds.
fn cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let nodes: usize = a.get(1).map_or(2000, |v| v.parse().expect("NODES"));
    let ppn: u32 = a.get(2).map_or(50, |v| v.parse().expect("PPN"));
    let cal = Calibration::built_in().expect("the built-in calibration");
    let mut worst = 0.0f64;
    for bootstrap in Bootstrap::ALL {
        let scenario =
            Scenario { nodes, ppn, kvs: KvsDesign::Auto, fanout: 32, bootstrap, booted: false, workload: Workload::Hello, cores: 0, one_host: false };
        let t = cpu_s();
        let ans = answer(&cal, &Query { scenario, kvs: None, fanout: None, limit: FULL_RANKS }).expect("an answer");
        let cpu = cpu_s() - t;
        worst = worst.max(cpu);
        println!("{nodes} x {ppn} {}: {} candidates in {cpu:.3} s of CPU", bootstrap.name(), ans.candidates.len());
    }
    std::process::exit(i32::from(worst > 1.0));
}
