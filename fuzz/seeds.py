#!/usr/bin/env python3
"""Write the seed corpus under fuzz/corpus/<target>/ from the real MPICH 5,
Hydra and Slurm exchanges of docs/pmi-wire.md §6, the engine tests
(crates/pmi/tests/transcripts.rs, extensions.rs) and the black-box tests'
captured lines, plus the hostile inputs of crates/pmi/tests/hardening.rs.
Run from the repository root: python3 fuzz/seeds.py"""
import hashlib, os

KVS = "kvs_1_0"

PMI1 = [
    "cmd=init pmi_version=1 pmi_subversion=1\n",
    "cmd=get_maxes\n",
    "cmd=get_appnum\n",
    "cmd=get_my_kvsname\n",
    f"cmd=get kvsname={KVS} key=PMI_process_mapping\n",
    f"cmd=get kvsname={KVS} key=PMI_hwloc_xmlfile\n",
    "cmd=get_universe_size\n",
    f"cmd=put kvsname={KVS} key=-allgather-1-0 value=segments=9\n",
    f"cmd=put kvsname={KVS} key=-allgather-1-0-seg-1/9 value=20D3B1F507D56FB161[2]637577CC2B32\n",
    "cmd=barrier_in\n",
    f"cmd=get kvsname={KVS} key=-allgather-1-1\n",
    "cmd=publish_name service=svc-a port=tag#0$connentry#0A0B$\n",
    "cmd=lookup_name service=svc-a\n",
    "cmd=unpublish_name service=svc-a\n",
    "cmd=abort exitcode=7 message=abort\n",
    "cmd=finalize\n",
]
INITACK = "cmd=initack pmiid=0\n"
SPAWN1 = ("mcmd=spawn\nnprocs=2\nexecname=./spawn\ntotspawns=1\nspawnssofar=1\nargcnt=2\narg1=child-arg1\narg2=child arg 2\n"
          "preput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=tag#0$connentry#0102[3]03$\n"
          "info_num=1\ninfo_key_0=wdir\ninfo_val_0=/tmp\nendcmd\n")
SPAWN2 = ("mcmd=spawn\nnprocs=1\nexecname=spawnmult\ntotspawns=2\nspawnssofar=1\nargcnt=1\narg1=A\npreput_num=1\n"
          "preput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=port\ninfo_num=1\ninfo_key_0=env\ninfo_val_0=A=1\nB=x y\nendcmd\n"
          "mcmd=spawn\nnprocs=2\nexecname=./spawnmult\ntotspawns=2\nspawnssofar=2\nargcnt=2\narg1=B1\narg2=B2\ninfo_num=0\nendcmd\n")
V2 = [
    "cmd=fullinit;pmirank=0;",
    "cmd=fullinit;pmijobid=kvs_1_0;pmirank=1;threaded=FALSE",
    "cmd=job-getid;",
    "cmd=info-getjobattr;key=PMI_process_mapping;",
    "cmd=info-getjobattr;key=universeSize;",
    "cmd=info-putnodeattr;key=-bcast-1-0;value=2F6D70696368[3]41;",
    "cmd=info-getnodeattr;key=-bcast-1-0;wait=TRUE;",
    "cmd=kvs-put;key=-allgather-1-0;value=AB00CD[4]EF;",
    "cmd=kvs-put;key=k;value=v;hint=sparse;",
    "cmd=kvs-fence;",
    f"cmd=kvs-get;jobid={KVS};key=-NONEXIST-KEY;",
    f"cmd=kvs-get;jobid={KVS};srcid=0;key=-allgather-1-0;",
    f"cmd=kvs-get;jobid={KVS};srcid=1;key=k;wait=TRUE;",
    "cmd=ring;ring-count=1;ring-left=addr-3;ring-right=addr-3;",
    "cmd=name-publish;name=svc-a;port=tag#0$connentry#0A0B$;",
    "cmd=name-lookup;name=svc-a;",
    "cmd=name-unpublish;name=svc-a;",
    "cmd=spawn;ncmds=1;preputcount=1;ppkey0=PARENT_ROOT_PORT_NAME;ppval0=tag#0$connentry#0102[3]03$;subcmd=python3;maxprocs=2;argc=2;argv0=pmi2client.py;argv1=child;infokeycount=1;infokey0=wdir;infoval0=/srv/run;",
    "cmd=spawn;ncmds=2;preputcount=0;subcmd=a;maxprocs=1;argc=0;infokeycount=0;subcmd=b;maxprocs=2;argc=1;argv0=x;infokeycount=0;",
    "cmd=job-connect;jobid=x;",
    "cmd=abort;isworld=TRUE;msg=pmi2 abort test;",
    "cmd=abort;exitcode=-1;message=bye;",
    "cmd=finalize;",
]
HOSTILE = [
    "mcmd=bogus\ncmd=finalize\n",
    "=cmd\n",
    "x\nx\nx\n",
    "12\n",
    "mcmd=spawn\nnprocs=1\ncmd=finalize\n",
    SPAWN1.replace("nprocs=2", "nprocs=4294967296"),
    SPAWN1.replace("nprocs=2", "nprocs=4294967295"),
    SPAWN1.replace("argcnt=2", "argcnt=99999999999"),
    "cmd=put kvsname=kvs_1_0 key=k value=\n",
    "cmd=publish_name service= port=p\n",
    "mcmd=spawn\nnprocs=1\nexecname=/bin/true\ndpm: job failed: forged\ntotspawns=1\nspawnssofar=1\nargcnt=0\nendcmd\n",
]

def v2(body):
    return f"{len(body):6}{body}"

def write(target, name, data):
    d = os.path.join("fuzz", "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def engine_steps(conn_msgs):
    """The engine target's input: (conn, message) steps, feed op, <=255-byte pieces."""
    out = bytearray()
    for conn, msg in conn_msgs:
        data = msg.encode()
        for i in range(0, len(data), 255):
            piece = data[i:i + 255]
            out += bytes([8 + conn, len(piece)]) + piece
    return bytes(out)

# decoder and request: whole streams
streams = {
    "pmi1-hello": "".join(PMI1[:11]) + "cmd=finalize\n",
    "pmi1-port": INITACK + "".join(PMI1[:4]),
    "pmi1-spawn": SPAWN1,
    "pmi1-spawn-multiple": SPAWN2,
    "pmi1-names": "".join(PMI1[11:14]),
    "pmi1-abort": PMI1[14],
    "pmi2-hello": "cmd=init pmi_version=2 pmi_subversion=0\n" + "".join(v2(b) for b in V2[:13]),
    "pmi2-spawn": v2(V2[17]) + v2(V2[18]),
    "pmi2-names-ring": "".join(v2(b) for b in V2[13:17]),
    "slurm-libpmi2": v2(V2[1]) + v2(V2[20]),
    "mixed": PMI1[1] + v2(V2[2]) + SPAWN1 + PMI1[2],
}
for i, h in enumerate(HOSTILE):
    streams[f"hostile-{i:02}"] = h
for i, line in enumerate(PMI1):
    streams[f"pmi1-line-{i:02}"] = line
for target in ("decoder", "request"):
    for name, data in streams.items():
        write(target, name, data)
for i, body in enumerate(V2):
    write("v2", f"pmi2-{i:02}", body)
write("v2", "empty", "")
write("v2", "no-equals", "no-equals-sign;")

# engine: conversations on conns 0-2 (PMI_FD ranks) and 3-4 (PMI_PORT, no rank yet)
convs = {
    "hello-2ranks": [(0, m) for m in PMI1[:11]] + [(1, m) for m in PMI1[:8]] + [(1, "cmd=barrier_in\n"), (0, "cmd=finalize\n")],
    "fence-3ranks": [(c, "cmd=barrier_in\n") for c in range(3)],
    "spawn": [(0, SPAWN1), (0, PMI1[2])],
    "spawn-multiple": [(1, SPAWN2)],
    "names": [(0, m) for m in PMI1[11:14]],
    "port-mode": [(3, INITACK), (3, PMI1[0]), (4, INITACK), (4, "cmd=initack pmiid=1\n"), (3, "cmd=initack pmiid=2\n")],
    "pmi2": [(0, "cmd=init pmi_version=2 pmi_subversion=0\n")] + [(0, v2(b)) for b in V2[:13]] + [(1, v2(V2[6])), (2, v2(V2[5]))],
    "pmi2-port": [(3, "cmd=init pmi_version=2 pmi_subversion=0\n"), (3, v2(V2[1])), (4, v2("cmd=fullinit;pmirank=1;"))],
    "ring": [(c, v2(V2[13])) for c in range(3)],
    "pending": [(1, v2(V2[6])), (1, v2(V2[4])), (0, v2(V2[5]))],
    "cross-version": [(0, v2("cmd=kvs-put;key=k;value=a b\nc;")), (0, "cmd=barrier_in\n"), (1, "cmd=barrier_in\n"), (2, "cmd=barrier_in\n"), (1, f"cmd=get kvsname={KVS} key=k\n")],
    "abort": [(2, PMI1[14])],
}
for i, h in enumerate(HOSTILE):
    convs[f"hostile-{i:02}"] = [(i % 5, h), (i % 5, "cmd=get_appnum\n")]
for name, conv in convs.items():
    write("engine", name, engine_steps(conv))
write("engine", "reattach", bytes([8, 20]) + b"cmd=barrier_in\n\n\n\n\n\n" + bytes([0, 0]) + bytes([9, 15]) + b"cmd=barrier_in\n")
