//! The binding policy over hwloc XML topologies (tests/topologies, made by
//! their gen.py with hwloc's own export): each case's per-rank CPU sets,
//! NUMA nodes and GPUs.

use dpm_binding::{BindPolicy, Binder, CpuSet, Topology};

fn topo(name: &str) -> Topology {
    let path = format!("{}/tests/topologies/{name}", env!("CARGO_MANIFEST_DIR"));
    Topology::from_xml(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))).unwrap()
}

fn set(list: &str) -> CpuSet {
    CpuSet::parse_list(list).unwrap()
}

fn policy(args: &[(&str, &str)]) -> BindPolicy {
    let mut p = BindPolicy::default();
    for (k, v) in args {
        match *k {
            "bind" => p.set_bind(v).unwrap(),
            "map" => {
                p.set_map(v).unwrap();
            }
            "cpus" => p.set_cpus_per_rank(v).unwrap(),
            "mem" => p.set_membind(v).unwrap(),
            "gpus" => p.set_gpus_per_rank(v).unwrap(),
            _ => unreachable!(),
        }
    }
    p.check().unwrap();
    p
}

/// Each rank's CPU list ("-" when unbound) and the warnings.
fn cpus(binder: &mut Binder, p: &BindPolicy, n: usize, spawned: bool) -> (Vec<String>, usize) {
    let b = binder.bind(p, n, spawned).unwrap();
    (b.ranks.iter().map(|r| r.cpus.as_ref().map_or("-".into(), |c| c.to_list())).collect(), b.warnings.len())
}

fn all(name: &str) -> Binder {
    let t = topo(name);
    let pus = t.pus();
    Binder::new(t, &pus, None).unwrap()
}

fn case(name: &str, args: &[(&str, &str)], n: usize) -> (Vec<String>, usize) {
    cpus(&mut all(name), &policy(args), n, false)
}

const SEQ: &str = "2s2n8c2t.xml";
const INTER: &str = "2s2n8c2t-interleaved.xml";

#[test]
fn the_fixtures_are_the_machines_they_say() {
    let t = topo(SEQ);
    assert_eq!(t.pus().to_list(), "0-63");
    assert_eq!(t.of_kind(dpm_binding::topology::Kind::Core).count(), 32);
    assert_eq!(t.of_kind(dpm_binding::topology::Kind::Numa).count(), 4);
    assert_eq!(t.of_kind(dpm_binding::topology::Kind::Package).count(), 2);
    // Interleaved: CPU 1 is in package 1, CPU 32 is CPU 0's sibling.
    let t = topo(INTER);
    let p1 = t.of_kind(dpm_binding::topology::Kind::Package).nth(1).unwrap().1;
    assert!(p1.cpuset.contains(1) && !p1.cpuset.contains(32));
    assert_eq!(dpm_binding::gpu::gpus(&topo("gpu-nvidia.xml")).len(), 4);
}

#[test]
fn no_binding_by_default() {
    assert_eq!(case(SEQ, &[], 2), (vec!["-".to_string(), "-".to_string()], 0));
}

#[test]
fn bind_to_each_level() {
    assert_eq!(case(SEQ, &[("bind", "core")], 4).0, ["0-1", "2-3", "4-5", "6-7"]);
    assert_eq!(case(SEQ, &[("bind", "hwthread")], 3).0, ["0", "1", "2"]);
    assert_eq!(case(SEQ, &[("bind", "hwthread:3")], 2).0, ["0-2", "3-5"]);
    assert_eq!(case(SEQ, &[("bind", "numa")], 4).0, ["0-15", "16-31", "32-47", "48-63"]);
    assert_eq!(case(SEQ, &[("bind", "l3cache")], 2).0, ["0-15", "16-31"]);
    assert_eq!(case(SEQ, &[("bind", "l2cache:2")], 2).0, ["0-3", "4-7"]);
    assert_eq!(case(SEQ, &[("bind", "socket")], 2).0, ["0-31", "32-63"]);
    assert_eq!(case(SEQ, &[("bind", "board")], 1).0, ["0-63"]);
    assert_eq!(case(SEQ, &[("bind", "rr")], 2).0, ["0", "1"]);
    assert_eq!(case(SEQ, &[("bind", "core:2")], 2).0, ["0-3", "4-7"]);
}

#[test]
fn map_by_objects_round_robin() {
    assert_eq!(case(SEQ, &[("bind", "core"), ("map", "socket")], 4).0, ["0-1", "32-33", "2-3", "34-35"]);
    assert_eq!(case(SEQ, &[("bind", "core"), ("map", "numa")], 4).0, ["0-1", "16-17", "32-33", "48-49"]);
    // Mapping below the binding's level: the binding's order.
    assert_eq!(case(SEQ, &[("bind", "socket"), ("map", "core")], 2).0, ["0-31", "32-63"]);
    assert_eq!(case(SEQ, &[("bind", "core"), ("map", "slot")], 2).0, ["0-1", "2-3"]);
}

#[test]
fn open_mpi_ppr_with_pe() {
    let (c, w) = case(SEQ, &[("map", "ppr:2:socket:pe=2")], 5);
    assert_eq!(c, ["0-3", "4-7", "32-35", "36-39", "0-3"]);
    assert_eq!(w, 1, "the fifth rank shares: said");
    assert_eq!(case(SEQ, &[("map", "ppr:1:numa")], 4).0, ["0-1", "16-17", "32-33", "48-49"], "ppr binds a core");
    assert_eq!(case(SEQ, &[("map", "ppr:2:core"), ("bind", "socket")], 2).0, ["0-31", "0-31"]);
}

#[test]
fn cpus_per_rank_counts_hardware_threads() {
    assert_eq!(case(SEQ, &[("cpus", "4")], 2).0, ["0-3", "4-7"]);
    assert_eq!(case(SEQ, &[("cpus", "2"), ("bind", "core")], 2).0, ["0-3", "4-7"]);
}

#[test]
fn hydra_user_lists_wrap_and_say_so() {
    let (c, w) = case(SEQ, &[("bind", "user:0+1,5")], 3);
    assert_eq!(c, ["0-1", "5", "0-1"]);
    assert_eq!(w, 1);
    assert_eq!(case(SEQ, &[("bind", "user:0+1,1")], 2), (vec!["0-1".to_string(), "1".to_string()], 0), "overlapping lists, as given: no warning");
    let mut b = all(SEQ);
    let p = policy(&[("bind", "user:0,70")]);
    assert!(b.bind(&p, 1, false).is_err(), "CPU 70 is not in the topology");
}

#[test]
fn oversubscription_is_said_once_and_overload_allowed_is_quiet() {
    let (c, w) = case(SEQ, &[("bind", "socket")], 3);
    assert_eq!(c, ["0-31", "32-63", "0-31"]);
    assert_eq!(w, 1);
    assert_eq!(case(SEQ, &[("bind", "socket:overload-allowed")], 3).1, 0);
    assert_eq!(case(SEQ, &[("bind", "socket")], 2).1, 0);
}

/// The daemon's own affinity restricts everything: how the black-box tests
/// check real `Cpus_allowed_list`s on a two-CPU machine.
#[test]
fn only_the_cpus_dpm_may_use() {
    let two = set("0-1");
    let mut inter = Binder::new(topo(INTER), &two, None).unwrap();
    for level in ["core", "hwthread", "socket", "numa", "l2cache"] {
        let (c, w) = cpus(&mut inter, &policy(&[("bind", level)]), 2, false);
        assert_eq!((c, w), (vec!["0".to_string(), "1".to_string()], 0), "{level}");
        for r in 0..2 {
            // What the ranks held goes back.
            inter.release(&dpm_binding::RankBinding { cpus: Some(CpuSet::single(r)), ..Default::default() });
        }
    }
    let (c, w) = cpus(&mut inter, &policy(&[("bind", "board")]), 2, false);
    assert_eq!((c, w), (vec!["0-1".to_string(), "0-1".to_string()], 1));
    // In order: CPUs 0 and 1 are one core's threads.
    let mut seq = Binder::new(topo(SEQ), &two, None).unwrap();
    assert_eq!(cpus(&mut seq, &policy(&[("bind", "core")]), 2, false), (vec!["0-1".to_string(), "0-1".to_string()], 1));
    let mut seq = Binder::new(topo(SEQ), &two, None).unwrap();
    assert_eq!(cpus(&mut seq, &policy(&[("bind", "hwthread")]), 2, false).0, ["0", "1"]);
    // A level with none of the allowed CPUs is an error; none in common too.
    assert!(Binder::new(topo(SEQ), &set("100"), None).is_err());
}

#[test]
fn spawned_ranks_take_free_objects_until_released() {
    let mut b = all(SEQ);
    let p = policy(&[("bind", "core")]);
    let first = b.bind(&p, 2, false).unwrap();
    assert_eq!(cpus(&mut b, &p, 2, true), (vec!["4-5".to_string(), "6-7".to_string()], 0));
    b.release(&first.ranks[0]);
    assert_eq!(b.holders(0), 0);
    b.hold(&first.ranks[0]);
    assert_eq!(b.holders(0), 1, "held again");
    b.release(&first.ranks[0]);
    assert_eq!(cpus(&mut b, &p, 1, true).0, ["0-1"], "the exited rank's core is free again");
    // Every core held: a spawned rank shares the least held, and says so.
    let mut small = Binder::new(topo(INTER), &set("0-1"), None).unwrap();
    cpus(&mut small, &p, 2, false);
    assert_eq!(cpus(&mut small, &p, 1, true), (vec!["0".to_string()], 1));
}

/// Two runs of one boot on one node: the second run's first job takes the
/// cores the first left free, in mapping order, and shares only when none
/// is left; with nothing held, the mapping order is Hydra's.
#[test]
fn a_first_job_takes_the_cores_other_runs_left_free() {
    let p = policy(&[("bind", "core")]);
    let mut two = Binder::new(topo(INTER), &set("0-1"), None).unwrap();
    assert_eq!(cpus(&mut two, &p, 1, false), (vec!["0".to_string()], 0));
    assert_eq!(cpus(&mut two, &p, 1, false), (vec!["1".to_string()], 0), "the idle core, not core 0 again");
    // Both held: a third run shares (least held first) and says so.
    assert_eq!(cpus(&mut two, &p, 1, false), (vec!["0".to_string()], 1));
    let mut b = all(SEQ);
    let first = b.bind(&p, 3, false).unwrap();
    assert_eq!(cpus(&mut b, &p, 2, false).0, ["6-7", "8-9"]);
    b.release(&first.ranks[1]);
    assert_eq!(cpus(&mut b, &p, 2, false).0, ["2-3", "10-11"], "a freed core first, then the next free ones in order");
    // A user's lists are kept as given, held or not.
    let user = policy(&[("bind", "user:0,1")]);
    assert_eq!(cpus(&mut two, &user, 2, false).0, ["0", "1"]);
}

#[test]
fn memory_follows_the_cpus() {
    let mut b = all(SEQ);
    let r = b.bind(&policy(&[("bind", "core"), ("map", "socket"), ("mem", "numa")]), 2, false).unwrap();
    assert_eq!(r.ranks[0].mems, Some(set("0")));
    assert_eq!(r.ranks[1].mems, Some(set("2")));
    let mut b = all(SEQ);
    let r = b.bind(&policy(&[("mem", "socket")]), 3, false).unwrap();
    assert_eq!(r.ranks.iter().map(|r| r.mems.clone().unwrap().to_list()).collect::<Vec<_>>(), ["0-1", "2-3", "0-1"], "unbound: socket i");
    // Only NUMA nodes dpm may use.
    let t = topo(SEQ);
    let pus = t.pus();
    let mut b = Binder::new(t, &pus, Some(set("0"))).unwrap();
    let r = b.bind(&policy(&[("bind", "core"), ("map", "socket"), ("mem", "numa")]), 2, false).unwrap();
    assert_eq!((r.ranks[0].mems.clone(), r.ranks[1].mems.clone()), (Some(set("0")), None));
}

#[test]
fn gpus_close_to_the_ranks_cores() {
    let mut b = all("gpu-nvidia.xml");
    let r = b.bind(&policy(&[("bind", "core"), ("map", "socket"), ("gpus", "1")]), 4, false).unwrap();
    let env: Vec<String> = r.ranks.iter().map(|r| format!("{:?}", r.env)).collect();
    assert_eq!(
        env,
        [
            r#"[("CUDA_VISIBLE_DEVICES", "0")]"#,
            r#"[("CUDA_VISIBLE_DEVICES", "2")]"#,
            r#"[("CUDA_VISIBLE_DEVICES", "1")]"#,
            r#"[("CUDA_VISIBLE_DEVICES", "3")]"#
        ]
    );
    assert!(r.warnings.is_empty());
    assert_eq!(r.ranks[1].report, "bound to package[1][core:L4] (cpus 8-9) gpus cuda2");
    // Two per rank, unbound: in order; a third rank shares and is told.
    let mut b = all("gpu-nvidia.xml");
    let r = b.bind(&policy(&[("gpus", "2")]), 3, false).unwrap();
    assert_eq!(r.ranks.iter().map(|r| r.env[0].1.clone()).collect::<Vec<_>>(), ["0,1", "2,3", "0,1"]);
    assert_eq!(r.warnings.len(), 1);
    // Released with the rank.
    b.release(&r.ranks[0]);
    b.release(&r.ranks[2]);
    assert_eq!(b.bind(&policy(&[("gpus", "2")]), 1, true).unwrap().ranks[0].env[0].1, "0,1");
}

#[test]
fn amd_gpus_and_no_gpus() {
    let mut b = all("gpu-amd.xml");
    let r = b.bind(&policy(&[("bind", "core"), ("gpus", "1")]), 2, false).unwrap();
    assert_eq!(r.ranks[0].cpus, Some(set("0,8")));
    assert_eq!(r.ranks[0].env, [("ROCR_VISIBLE_DEVICES".to_string(), "0".to_string())]);
    assert_eq!(r.ranks[1].env, [("ROCR_VISIBLE_DEVICES".to_string(), "1".to_string())], "its own device before a shared close one");
    let e = all(SEQ).bind(&policy(&[("gpus", "1")]), 1, false).unwrap_err();
    assert!(e.to_string().contains("no GPU"), "{e}");
    let e = all("gpu-nvidia.xml").bind(&policy(&[("gpus", "5")]), 1, false).unwrap_err();
    assert!(e.to_string().contains("only 4"), "{e}");
}

#[test]
fn reports_read_like_open_mpi() {
    // A binder each: a live rank's objects would be passed over.
    let r = all(SEQ).bind(&policy(&[("bind", "core:2")]), 1, false).unwrap();
    assert_eq!(r.ranks[0].report, "bound to package[0][core:L0-1] (cpus 0-3)");
    let r = all(SEQ).bind(&policy(&[("bind", "hwthread")]), 1, false).unwrap();
    assert_eq!(r.ranks[0].report, "bound to package[0][hwt:L0] (cpus 0)");
    let r = all(SEQ).bind(&policy(&[("bind", "board")]), 1, false).unwrap();
    assert_eq!(r.ranks[0].report, "bound to package[0][core:L0-15],package[1][core:L16-31] (cpus 0-63)");
    let r = all(SEQ).bind(&policy(&[]), 1, false).unwrap();
    assert_eq!(r.ranks[0].report, "is not bound (or bound to all available processors)");
}
