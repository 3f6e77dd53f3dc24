//! The protocol engine driven without sockets, with the exact lines MPICH 5
//! and Slurm's libpmi2 send (transcripts from `pmi-wire.md` §6 and captures
//! of `dpm run --pmi-trace`).

mod common;

use common::{engine, sent, setup, KVS};
use dpm_kvs::{JobId, Rank};
use dpm_pmi::{ConnId, Effect, Engine, NameOp, PmiState, SpawnCommand};

/// Feed `input` on `conn`; return the text written back to it.
fn talk(e: &mut Engine, conn: u64, input: &str) -> String {
    e.on_bytes(ConnId(conn), input.as_bytes());
    sent(e, conn)
}

#[test]
fn pmi1_init_sequence_of_mpich5() {
    let mut e = engine(2);
    assert_eq!(talk(&mut e, 0, "cmd=init pmi_version=1 pmi_subversion=1\n"), "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n");
    assert_eq!(talk(&mut e, 0, "cmd=get_maxes\n"), "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n");
    assert_eq!(talk(&mut e, 0, "cmd=get_appnum\n"), "cmd=appnum rc=0 appnum=0\n");
    assert_eq!(talk(&mut e, 0, "cmd=get_my_kvsname\n"), format!("cmd=my_kvsname rc=0 kvsname={KVS}\n"));
    assert_eq!(talk(&mut e, 0, &format!("cmd=get kvsname={KVS} key=PMI_process_mapping\n")), "cmd=get_result rc=0 value=(vector,(0,1,2))\n");
    let hwloc = talk(&mut e, 0, &format!("cmd=get kvsname={KVS} key=PMI_hwloc_xmlfile\n"));
    assert!(hwloc.starts_with("cmd=get_result rc=1 msg="), "{hwloc}");
    assert_eq!(talk(&mut e, 0, "cmd=get_universe_size\n"), "cmd=universe_size rc=0 size=8\n");
}

#[test]
fn pmi1_barrier_makes_puts_visible_to_every_rank() {
    let mut e = engine(2);
    let seg = "20D3B1F507D56FB161[2]637577CC2B32";
    assert_eq!(talk(&mut e, 0, &format!("cmd=put kvsname={KVS} key=-allgather-1-0 value=segments=9\n")), "cmd=put_result rc=0\n");
    assert_eq!(talk(&mut e, 0, &format!("cmd=put kvsname={KVS} key=-allgather-1-0-seg-1/9 value={seg}\n")), "cmd=put_result rc=0\n");
    // Not visible before the barrier completes.
    assert!(talk(&mut e, 1, &format!("cmd=get kvsname={KVS} key=-allgather-1-0\n")).starts_with("cmd=get_result rc=1"));
    assert_eq!(talk(&mut e, 0, "cmd=barrier_in\n"), "", "the barrier waits for rank 1");
    e.on_bytes(ConnId(1), b"cmd=barrier_in\n");
    let fence = e.take_effects().into_iter().find_map(|f| match f {
        Effect::FenceIn { job, epoch, count, puts } => Some((job, epoch, count, puts)),
        _ => None,
    });
    let (job, epoch, count, puts) = fence.expect("one fence goes up when both local ranks entered");
    assert_eq!((job, epoch, count, puts.len()), (JobId(0), 0, 2, 2));
    e.fence_done(JobId(0), 0, puts);
    let outs: Vec<String> =
        e.take_effects().into_iter().filter_map(|f| if let Effect::Send(_, b) = f { Some(String::from_utf8(b).unwrap()) } else { None }).collect();
    assert_eq!(outs, vec!["cmd=barrier_out rc=0\n"; 2]);
    assert_eq!(talk(&mut e, 1, &format!("cmd=get kvsname={KVS} key=-allgather-1-0-seg-1/9\n")), format!("cmd=get_result rc=0 value={seg}\n"));
    assert_eq!(talk(&mut e, 1, &format!("cmd=get kvsname={KVS} key=-allgather-1-0\n")), "cmd=get_result rc=0 value=segments=9\n");
}

#[test]
fn pmi1_refuses_reserved_keys_and_foreign_kvsnames() {
    let mut e = engine(1);
    let r = talk(&mut e, 0, &format!("cmd=put kvsname={KVS} key=PMI_mine value=1\n"));
    assert!(r.starts_with("cmd=put_result rc=1 msg="), "{r}");
    let r = talk(&mut e, 0, "cmd=put kvsname=other key=k value=1\n");
    assert!(r.starts_with("cmd=put_result rc=1 msg="), "{r}");
    // Error messages are escaped so MPICH's parser keeps them whole.
    // (MPICH's parser takes `\ ` as a literal space inside a value.)
    assert!(r.trim_end().replace("\\ ", "_").split(' ').all(|t| t.contains('=')), "{r}");
}

#[test]
fn pmi1_abort_has_no_reply_and_reports_the_code() {
    let mut e = engine(2);
    e.on_bytes(ConnId(1), b"cmd=abort exitcode=7 message=abort\n");
    let effects = e.take_effects();
    assert_eq!(effects, vec![Effect::Abort { job: JobId(0), rank: Rank(1), code: 7, message: "abort".into() }]);
}

#[test]
fn pmi1_finalize_and_reinit_on_the_same_connection() {
    let mut e = engine(1);
    assert_eq!(e.pmi_state(ConnId(0)), PmiState::Silent);
    talk(&mut e, 0, "cmd=init pmi_version=1 pmi_subversion=1\n");
    assert_eq!(e.pmi_state(ConnId(0)), PmiState::Active);
    // MPI sessions: the whole sequence again, no finalize in between.
    assert!(talk(&mut e, 0, "cmd=init pmi_version=1 pmi_subversion=1\n").starts_with("cmd=response_to_init rc=0"));
    assert_eq!(talk(&mut e, 0, "cmd=get_maxes\n"), "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n");
    assert_eq!(talk(&mut e, 0, "cmd=finalize\n"), "cmd=finalize_ack rc=0\n");
    assert_eq!(e.detach(ConnId(0)), PmiState::Finalized);
}

#[test]
fn pmi1_initack_mode_names_the_rank() {
    let mut e = Engine::new(false);
    e.add_job(setup(2));
    e.attach(ConnId(5), JobId(0), None);
    assert_eq!(talk(&mut e, 5, "cmd=initack pmiid=1\n"), "cmd=initack rc=0 rank=1 size=2 appnum=0 debug=0\ncmd=set size=2\ncmd=set rank=1\ncmd=set debug=0\n");
    assert_eq!(e.rank(ConnId(5)), Some(Rank(1)));
    assert!(talk(&mut e, 5, "cmd=initack pmiid=9\n").contains("rc=1"));
}

#[test]
fn pmi1_spawn_block_split_across_reads() {
    let mut e = engine(1);
    let block = "mcmd=spawn\nnprocs=2\nexecname=./spawn\ntotspawns=1\nspawnssofar=1\nargcnt=2\narg1=child-arg1\narg2=child arg 2\n\
                 preput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=tag#0$connentry#2039BD[2]63$\n\
                 info_num=1\ninfo_key_0=wdir\ninfo_val_0=/srv/run\nendcmd\n";
    for chunk in block.as_bytes().chunks(7) {
        e.on_bytes(ConnId(0), chunk);
    }
    let spawn = e.take_effects().into_iter().find_map(|f| if let Effect::Spawn { request, .. } = f { Some(request) } else { None });
    let spawn = spawn.expect("one spawn request for the whole block");
    assert_eq!(spawn.preput, vec![("PARENT_ROOT_PORT_NAME".into(), "tag#0$connentry#2039BD[2]63$".into())]);
    assert_eq!(
        spawn.commands,
        vec![SpawnCommand {
            exe: "./spawn".into(),
            args: vec!["child-arg1".into(), "child arg 2".into()],
            maxprocs: 2,
            info: vec![("wdir".into(), "/srv/run".into())],
        }]
    );
    e.spawn_done(ConnId(0), Ok("kvs_42_1".into()));
    assert_eq!(sent(&mut e, 0), "cmd=spawn_result rc=0\n");
}

#[test]
fn pmi1_spawn_multiple_is_one_block_of_segments() {
    let mut e = engine(1);
    let block = "mcmd=spawn\nnprocs=1\nexecname=spawnmult\ntotspawns=2\nspawnssofar=1\nargcnt=1\narg1=A\npreput_num=1\n\
                 preput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=p\ninfo_num=1\ninfo_key_0=path\ninfo_val_0=/srv/app\nendcmd\n\
                 mcmd=spawn\nnprocs=2\nexecname=./spawnmult\ntotspawns=2\nspawnssofar=2\nargcnt=2\narg1=B1\narg2=B2\ninfo_num=0\nendcmd\n";
    let first_endcmd = block.find("endcmd\n").unwrap() + 7;
    e.on_bytes(ConnId(0), &block.as_bytes()[..first_endcmd]);
    assert!(e.take_effects().is_empty(), "not complete until the last segment");
    e.on_bytes(ConnId(0), &block.as_bytes()[first_endcmd..]);
    let spawn = e.take_effects().into_iter().find_map(|f| if let Effect::Spawn { request, .. } = f { Some(request) } else { None });
    let cmds = spawn.unwrap().commands;
    assert_eq!(cmds.len(), 2);
    assert_eq!((cmds[0].maxprocs, cmds[1].maxprocs), (1, 2));
    assert_eq!(cmds[1].args, vec!["B1", "B2"]);
}

fn v2(body: &str) -> String {
    format!("{:6}{body}", body.len())
}

#[test]
fn pmi2_session_as_mpich_sends_it() {
    let mut e = engine(2);
    assert_eq!(talk(&mut e, 0, "cmd=init pmi_version=2 pmi_subversion=0\n"), "cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n");
    let r = talk(&mut e, 0, &v2("cmd=fullinit;pmirank=0;"));
    assert_eq!(r, v2("cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=0;size=2;appnum=0;"));
    assert_eq!(talk(&mut e, 0, &v2("cmd=job-getid;")), v2(&format!("cmd=job-getid-response;rc=0;jobid={KVS};")));
    assert_eq!(
        talk(&mut e, 0, &v2("cmd=info-getjobattr;key=PMI_process_mapping;")),
        v2("cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,(0,1,2));")
    );
    assert_eq!(talk(&mut e, 0, &v2("cmd=info-getjobattr;key=universeSize;")), v2("cmd=info-getjobattr-response;rc=0;found=TRUE;value=8;"));
    assert_eq!(talk(&mut e, 0, &v2("cmd=info-getjobattr;key=PMI_mpi_memory_alloc_kinds;")), v2("cmd=info-getjobattr-response;rc=0;found=FALSE;"));
    // A get of a missing key before any fence: an answer, not a crash (Hydra asserts here).
    assert!(talk(&mut e, 0, &v2(&format!("cmd=kvs-get;jobid={KVS};key=-NONEXIST-KEY;"))).contains("rc=1;"));
}

#[test]
fn the_topology_file_is_a_job_attribute_once_known() {
    // Like Hydra's proxy: `PMI_hwloc_xmlfile` names the node's hwloc XML, so
    // MPICH need not discover the topology in every process.
    let mut e = engine(2);
    talk(&mut e, 0, "cmd=init pmi_version=1 pmi_subversion=1\n");
    talk(&mut e, 1, "cmd=init pmi_version=2 pmi_subversion=0\n");
    talk(&mut e, 1, &v2("cmd=fullinit;pmirank=1;"));
    assert_eq!(talk(&mut e, 1, &v2("cmd=info-getjobattr;key=PMI_hwloc_xmlfile;")), v2("cmd=info-getjobattr-response;rc=0;found=FALSE;"));
    e.set_topology_file("/proc/7/fd/9");
    assert_eq!(talk(&mut e, 0, &format!("cmd=get kvsname={KVS} key=PMI_hwloc_xmlfile\n")), "cmd=get_result rc=0 value=/proc/7/fd/9\n");
    assert_eq!(talk(&mut e, 1, &v2("cmd=info-getjobattr;key=PMI_hwloc_xmlfile;")), v2("cmd=info-getjobattr-response;rc=0;found=TRUE;value=/proc/7/fd/9;"));
}

/// Three ranks whose node exports its topology on demand; rank 2 speaks PMI-2.
fn exporting_on_demand() -> Engine {
    let mut e = engine(3);
    e.export_topology_on_demand();
    talk(&mut e, 2, "cmd=init pmi_version=2 pmi_subversion=0\n");
    talk(&mut e, 2, &v2("cmd=fullinit;pmirank=2;"));
    e
}

/// A node that exports its topology on demand (the daemon's): the first ask
/// starts the export, every ask waits for it — PMI-1 get and PMI-2 job
/// attribute alike, each with its own framing — and one file answers all.
#[test]
fn asks_for_the_topology_wait_for_one_export() {
    let mut e = exporting_on_demand();
    e.on_bytes(ConnId(0), format!("cmd=get kvsname={KVS} key=PMI_hwloc_xmlfile\n").as_bytes());
    assert_eq!(e.take_effects(), vec![Effect::ExportTopology], "the first ask starts the export and waits");
    assert_eq!(talk(&mut e, 2, &v2("cmd=info-getjobattr;key=PMI_hwloc_xmlfile;")), "", "waits too, no second export");
    assert!(e.topology_exporting());
    // Others are served meanwhile.
    assert_eq!(talk(&mut e, 1, "cmd=get_maxes\n"), "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n");
    e.set_topology_file("/proc/7/fd/9");
    let effects = e.take_effects();
    let to = |c: u64| {
        effects
            .iter()
            .filter_map(|f| if let Effect::Send(x, b) = f { (*x == ConnId(c)).then(|| String::from_utf8(b.clone()).unwrap()) } else { None })
            .collect::<String>()
    };
    assert_eq!(to(0), "cmd=get_result rc=0 value=/proc/7/fd/9\n");
    assert_eq!(to(2), v2("cmd=info-getjobattr-response;rc=0;found=TRUE;value=/proc/7/fd/9;"));
    assert_eq!(talk(&mut e, 1, &format!("cmd=get kvsname={KVS} key=PMI_hwloc_xmlfile\n")), "cmd=get_result rc=0 value=/proc/7/fd/9\n", "later asks: at once");
}

/// An export that fails (or that the node stops waiting for) answers every
/// waiting ask "absent", in its framing, and later asks at once: MPICH then
/// discovers the topology itself. A waiting connection that closes is
/// simply dropped from the wait.
#[test]
fn a_failed_topology_export_answers_the_key_absent() {
    let mut e = exporting_on_demand();
    assert_eq!(talk(&mut e, 0, &format!("cmd=get kvsname={KVS} key=PMI_hwloc_xmlfile\n")), "");
    assert_eq!(talk(&mut e, 1, &format!("cmd=get kvsname={KVS} key=PMI_hwloc_xmlfile\n")), "");
    assert_eq!(talk(&mut e, 2, &v2("cmd=info-getjobattr;key=PMI_hwloc_xmlfile;")), "");
    e.detach(ConnId(1));
    e.topology_unavailable();
    let effects = e.take_effects();
    let sends: Vec<(ConnId, String)> =
        effects.iter().filter_map(|f| if let Effect::Send(c, b) = f { Some((*c, String::from_utf8(b.clone()).unwrap())) } else { None }).collect();
    assert_eq!(
        sends,
        vec![
            (ConnId(0), "cmd=get_result rc=1 msg=key_'PMI_hwloc_xmlfile'_is_not_provided\n".to_string()),
            (ConnId(2), v2("cmd=info-getjobattr-response;rc=0;found=FALSE;")),
        ]
    );
    assert!(!e.topology_exporting());
    assert_eq!(talk(&mut e, 2, &v2("cmd=info-getjobattr;key=PMI_hwloc_xmlfile;")), v2("cmd=info-getjobattr-response;rc=0;found=FALSE;"));
}

#[test]
fn pmi2_fence_blocks_until_every_rank_fenced() {
    let mut e = engine(2);
    assert_eq!(talk(&mut e, 0, &v2("cmd=kvs-put;key=-allgather-1-0;value=AB00CD[4]EF;")), v2("cmd=kvs-put-response;rc=0;"));
    assert_eq!(talk(&mut e, 0, &v2("cmd=kvs-fence;")), "");
    e.on_bytes(ConnId(1), v2("cmd=kvs-fence;").as_bytes());
    let puts = e.take_effects().into_iter().find_map(|f| if let Effect::FenceIn { puts, .. } = f { Some(puts) } else { None }).unwrap();
    e.fence_done(JobId(0), 0, puts);
    assert_eq!(sent(&mut e, 1), v2("cmd=kvs-fence-response;rc=0;"));
    assert_eq!(
        talk(&mut e, 1, &v2(&format!("cmd=kvs-get;jobid={KVS};srcid=0;key=-allgather-1-0;"))),
        v2("cmd=kvs-get-response;rc=0;found=TRUE;value=AB00CD[4]EF;")
    );
}

#[test]
fn pmi2_getnodeattr_wait_blocks_until_the_put() {
    let mut e = engine(2);
    assert_eq!(talk(&mut e, 1, &v2("cmd=info-getnodeattr;key=-bcast-1-0;wait=TRUE;")), "", "held until the put");
    // A second request while the first waits is refused, but the refusal
    // goes out after the reply it waits behind, never before it.
    assert_eq!(talk(&mut e, 1, &v2("cmd=info-getnodeattr;key=other;")), "", "the refusal waits behind the pending reply");
    e.on_bytes(ConnId(0), v2("cmd=info-putnodeattr;key=-bcast-1-0;value=2F6D70696368[3]41;").as_bytes());
    let effects = e.take_effects();
    let to = |c: u64| -> String {
        effects
            .iter()
            .filter_map(|f| match f {
                Effect::Send(x, b) if *x == ConnId(c) => Some(String::from_utf8(b.clone()).unwrap()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(to(0), v2("cmd=info-putnodeattr-response;rc=0;"));
    assert_eq!(
        to(1),
        v2("cmd=info-getnodeattr-response;rc=0;found=TRUE;value=2F6D70696368[3]41;")
            + &v2("cmd=info-getnodeattr-response;rc=1;errmsg='info-getnodeattr' sent while an earlier request is still pending;")
    );
    assert_eq!(talk(&mut e, 0, &v2("cmd=info-getnodeattr;key=absent;")), v2("cmd=info-getnodeattr-response;rc=0;found=FALSE;"));
}

#[test]
fn pmi2_name_service_is_asked_of_the_launcher() {
    let mut e = engine(1);
    e.on_bytes(ConnId(0), v2("cmd=name-publish;name=svc-a;port=tag#0$connentry#0A0B$;").as_bytes());
    let effects = e.take_effects();
    assert_eq!(
        effects,
        vec![Effect::Name { conn: ConnId(0), job: JobId(0), op: NameOp::Publish { service: "svc-a".into(), port: "tag#0$connentry#0A0B$".into() } }]
    );
    e.name_done(ConnId(0), Ok(None));
    assert_eq!(sent(&mut e, 0), v2("cmd=name-publish-response;rc=0;"));
    e.on_bytes(ConnId(0), v2("cmd=name-lookup;name=svc-a;").as_bytes());
    e.take_effects();
    e.name_done(ConnId(0), Ok(Some("tag#0$connentry#0A0B$".into())));
    // `port` for MPICH, `value` for Slurm's libpmi2.
    assert_eq!(sent(&mut e, 0), v2("cmd=name-lookup-response;rc=0;port=tag#0$connentry#0A0B$;value=tag#0$connentry#0A0B$;"));
}

#[test]
fn pmi2_spawn_with_zero_based_argv() {
    let mut e = engine(1);
    let msg = "cmd=spawn;ncmds=1;preputcount=1;ppkey0=PARENT_ROOT_PORT_NAME;ppval0=tag#0$connentry#0102[3]03$;subcmd=python3;maxprocs=2;argc=2;argv0=pmi2client.py;argv1=child;infokeycount=1;infokey0=wdir;infoval0=/srv/run;";
    e.on_bytes(ConnId(0), v2(msg).as_bytes());
    let spawn = e.take_effects().into_iter().find_map(|f| if let Effect::Spawn { request, .. } = f { Some(request) } else { None }).unwrap();
    assert_eq!(spawn.commands[0].exe, "python3");
    assert_eq!(spawn.commands[0].args, vec!["pmi2client.py", "child"]);
    assert_eq!(spawn.commands[0].info, vec![("wdir".into(), "/srv/run".into())]);
    e.spawn_done(ConnId(0), Err("no such program".into()));
    assert_eq!(sent(&mut e, 0), v2("cmd=spawn-response;rc=1;errmsg=no such program;"));
}

#[test]
fn slurm_libpmi2_fullinit_and_abort() {
    let mut e = engine(2);
    // Slurm's client omits the final ';' and adds pmijobid/threaded.
    let r = talk(&mut e, 1, &v2("cmd=fullinit;pmijobid=kvs_42_0;pmirank=1;threaded=FALSE"));
    assert!(r.contains("rank=1;size=2;appnum=0;") && r.contains("pmi-version=2;"), "{r}");
    assert!(!r.contains("pmiverbose"), "Slurm's client rejects pmiverbose=0: {r}");
    e.on_bytes(ConnId(1), v2("cmd=abort;isworld=TRUE;msg=pmi2 abort test;").as_bytes());
    assert_eq!(e.take_effects(), vec![Effect::Abort { job: JobId(0), rank: Rank(1), code: 1, message: "pmi2 abort test".into() }]);
}

#[test]
fn spawned_children_see_preput_and_spawner() {
    let mut e = Engine::new(false);
    let mut s = setup(2);
    s.job = JobId(1);
    s.kvsname = "kvs_42_1".into();
    s.spawner = Some(KVS.into());
    s.preput = vec![("PARENT_ROOT_PORT_NAME".into(), "tag#0$connentry#$".into())];
    e.add_job(s);
    e.attach(ConnId(0), JobId(1), Some(Rank(0)));
    // Readable at once, before any barrier.
    assert_eq!(talk(&mut e, 0, "cmd=get kvsname=kvs_42_1 key=PARENT_ROOT_PORT_NAME\n"), "cmd=get_result rc=0 value=tag#0$connentry#$\n");
    let r = talk(&mut e, 0, &v2("cmd=fullinit;pmirank=0;"));
    assert!(r.contains("spawner-jobid=kvs_42_0;"), "{r}");
}

#[test]
fn malformed_and_unknown_input_gets_error_replies() {
    let mut e = engine(1);
    let r = talk(&mut e, 0, "garbage line\n");
    assert!(r.starts_with("cmd=error rc=1 msg="), "{r}");
    let r = talk(&mut e, 0, "cmd=nosuch a=b\n");
    assert!(r.starts_with("cmd=error rc=1 msg="), "{r}");
    let r = talk(&mut e, 0, "cmd=put kvsname=kvs_42_0\n");
    assert!(r.starts_with("cmd=put_result rc=1 msg="), "{r}");
    let r = talk(&mut e, 0, &v2("cmd=job-connect;jobid=x;"));
    assert!(r.contains("cmd=job-connect-response;rc=1;"), "{r}");
    let r = talk(&mut e, 0, &v2("no-equals-sign;"));
    assert!(r.contains("rc=1"), "{r}");
    let r = talk(&mut e, 0, "cmd=init pmi_version=3 pmi_subversion=0\n");
    assert!(r.starts_with("cmd=response_to_init rc=1"), "{r}");
    // The connection still works afterwards.
    assert_eq!(talk(&mut e, 0, "cmd=get_appnum\n"), "cmd=appnum rc=0 appnum=0\n");
}

#[test]
fn a_partial_soft_spawn_answers_each_process_code() {
    // MPICH's PMI-1 client reads `errcodes` (one per requested process)
    // into MPI_Comm_spawn's array_of_errcodes (src/pmi/src/pmi_v1.c).
    let mut e = engine(1);
    let block = "mcmd=spawn\nnprocs=3\nexecname=./w\ntotspawns=1\nspawnssofar=1\nargcnt=0\npreput_num=0\n\
                 info_num=1\ninfo_key_0=soft\ninfo_val_0=1:3\nendcmd\n";
    e.on_bytes(ConnId(0), block.as_bytes());
    assert!(e.take_effects().iter().any(|f| matches!(f, Effect::Spawn { .. })));
    e.spawn_done(ConnId(0), Ok(dpm_pmi::Spawned { jobid: "kvs_42_1".into(), errcodes: vec![0, 42, 42] }));
    assert_eq!(sent(&mut e, 0), "cmd=spawn_result rc=0 errcodes=0,42,42\n");
}
