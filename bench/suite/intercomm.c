/*
 * intercomm.c: point-to-point over static and dynamic communicators, the
 * name service, and the cost of connecting (papers 001 §5.3, 003 §3).
 *
 * Tests:
 *   pingpong   ping-pong between two processes over the communicator(s) of
 *              --comm (one launch per communicator is what bench/run does):
 *                world    MPI_COMM_WORLD ranks 0 and 1            (-n 2)
 *                spawn    rank 0 and the child it spawns         (-n 1)
 *                merged   the same pair, over MPI_Intercomm_merge of the
 *                         spawn intercommunicator (an intracommunicator) (-n 1)
 *                connect  ranks 0 and 1, each on MPI_COMM_SELF, joined by
 *                         MPI_Open_port/MPI_Comm_accept/MPI_Comm_connect (-n 2)
 *                join     ranks 0 and 1 over a TCP socket and MPI_Comm_join (-n 2)
 *              Records (variant comm=X): "create" (making the communicator:
 *              the spawn, the accept, the join, the merge; µs), "first_msg"
 *              (the first 1-byte ping-pong on it, half round trip, µs: any
 *              on-demand connection is paid here), "next_msg" (the second
 *              one), then "pingpong" per message size: half round trip (µs)
 *              with bandwidth.
 *   nameserv   MPI_Publish_name (rank 0), MPI_Lookup_name (rank 1),
 *              MPI_Unpublish_name (rank 0), --ns-iters times (µs).   (-n 2)
 *   connect    --connect-iters rounds of: accept (rank 0) / connect (rank 1)
 *              on MPI_COMM_SELF, MPI_Intercomm_merge, MPI_Comm_free of the
 *              merged communicator, MPI_Comm_disconnect; records "accept",
 *              "connect", "merge", "disconnect", plus "open_port" and
 *              "close_port" (µs).                                   (-n 2)
 *
 * MPICH's ch4:ucx netmod cannot open ports: connect and join need e.g. MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp (bench/run sets them for
 * this program under MPICH-based launchers; the config record shows them).
 *
 * --check: every ping-pong payload is verified on both sides; lookups must
 * return the published port name.
 */
#include "harness.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TAG_PING 11
#define TAG_PONG 12

static const bench_option options[] = {
    {"comm", "world", NULL, "communicators for pingpong: world,spawn,merged,connect,join"},
    {"ns-iters", "50", "4", "publish/lookup/unpublish rounds (nameserv)"},
    {"connect-iters", "20", "3", "accept/connect rounds (connect)"},
    {"child-comm", NULL, NULL, "(internal, children) the communicator to serve"},
    {NULL, NULL, NULL, NULL},
};

/* ---- ping-pong ------------------------------------------------------------- */

static unsigned pingpong_seed(long size, int i)
{
    return (unsigned)(size * 131 + i);
}

/* One side of the ping-pong on comm with peer; the initiator records. */
static void pingpong_run(bench *b, MPI_Comm comm, int peer, int initiator, const char *name)
{
    long max = b->max_size > 1 ? b->max_size : 1;
    char *sbuf = malloc((size_t)max), *rbuf = malloc((size_t)max);
    char variant[64];
    double first[2];

    memset(sbuf, 'x', (size_t)max);
    snprintf(variant, sizeof variant, "comm=%s", name);
    /* The first two 1-byte exchanges, timed apart from the rest. */
    for (int i = 0; i < 2; i++) {
        double t = MPI_Wtime();

        if (initiator) {
            mpi_check(MPI_Send(sbuf, 1, MPI_BYTE, peer, TAG_PING, comm), "MPI_Send");
            mpi_check(MPI_Recv(rbuf, 1, MPI_BYTE, peer, TAG_PONG, comm, MPI_STATUS_IGNORE),
                      "MPI_Recv");
        } else {
            mpi_check(MPI_Recv(rbuf, 1, MPI_BYTE, peer, TAG_PING, comm, MPI_STATUS_IGNORE),
                      "MPI_Recv");
            mpi_check(MPI_Send(rbuf, 1, MPI_BYTE, peer, TAG_PONG, comm), "MPI_Send");
        }
        first[i] = (MPI_Wtime() - t) / 2;
    }
    if (initiator) {
        result_write(b, "first_msg", variant, 1, 2, &first[0], 1, 1e6, "us", NULL);
        result_write(b, "next_msg", variant, 1, 2, &first[1], 1, 1e6, "us", NULL);
    }

    for (int s = 0; s < b->size_count; s++) {
        long size = b->sizes[s];
        int iters = iters_for(b, size), total = b->warmup + iters;
        double *samples = malloc((size_t)iters * sizeof *samples);

        for (int i = 0; i < total; i++) {
            unsigned seed = pingpong_seed(size, i);
            double t0;

            if (b->check && initiator)
                pattern_fill(sbuf, size, seed);
            t0 = MPI_Wtime();
            if (initiator) {
                mpi_check(MPI_Send(sbuf, (int)size, MPI_BYTE, peer, TAG_PING, comm), "MPI_Send");
                mpi_check(MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, TAG_PONG, comm,
                                   MPI_STATUS_IGNORE), "MPI_Recv");
                if (i >= b->warmup)
                    samples[i - b->warmup] = (MPI_Wtime() - t0) / 2;
            } else {
                mpi_check(MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, TAG_PING, comm,
                                   MPI_STATUS_IGNORE), "MPI_Recv");
                if (b->check) {
                    long bad = pattern_verify(rbuf, size, seed);

                    if (bad >= 0)
                        bench_fail("check: %s ping of %ld bytes: byte %ld differs", name, size,
                                   bad);
                }
                mpi_check(MPI_Send(rbuf, (int)size, MPI_BYTE, peer, TAG_PONG, comm), "MPI_Send");
            }
            if (b->check && initiator) {
                long bad = pattern_verify(rbuf, size, seed);

                if (bad >= 0)
                    bench_fail("check: %s pong of %ld bytes: byte %ld differs", name, size, bad);
            }
        }
        if (initiator)
            result_write(b, "pingpong", variant, size, 2, samples, iters, 1e6, "us", NULL);
        free(samples);
    }
    free(sbuf);
    free(rbuf);
}

/* Does this world size suit a test that needs n processes? A mismatch is an
 * error when the user chose the test (option `given`), else the test is
 * skipped with a note: `intercomm` alone runs what fits its -n. */
static int world_size_fits(const bench *b, int n, const char *what, const char *option)
{
    if (b->size == n)
        return 1;
    if (option_given(b, option))
        bench_fail("%s needs exactly %d process%s (launch with -n %d), not %d", what, n,
                   n == 1 ? "" : "es", n, b->size);
    if (b->rank == 0)
        fprintf(stderr, "intercomm: %s skipped: it needs -n %d\n", what, n);
    return 0;
}

/* ---- communicator makers ------------------------------------------------------ */

/* Arguments for the spawned peer: this program's own options (for the same
 * size schedule) plus --child and --child-comm. */
static char **child_argv_build(int argc, char **argv, const char *which)
{
    char **out = calloc((size_t)argc + 4, sizeof *out);
    int n = 0;

    out[n++] = "--child";
    out[n++] = "--child-comm";
    out[n++] = (char *)which;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            i++;
            continue;
        }
        if (strncmp(argv[i], "--json=", 7) == 0)
            continue;
        out[n++] = argv[i];
    }
    out[n] = NULL;
    return out;
}

static MPI_Comm spawn_peer(int argc, char **argv, const char *which, double *elapsed)
{
    char **cargv = child_argv_build(argc, argv, which);
    int err = 0, remote = 0;
    MPI_Comm inter;
    double t = MPI_Wtime();

    mpi_check(MPI_Comm_spawn(self_path(), cargv, 1, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter,
                             &err), "MPI_Comm_spawn");
    *elapsed = MPI_Wtime() - t;
    mpi_check(err, "MPI_Comm_spawn (the child's error code)");
    mpi_check(MPI_Comm_remote_size(inter, &remote), "MPI_Comm_remote_size");
    if (remote != 1)
        bench_fail("spawned %d children, expected 1", remote);
    free(cargv);
    return inter;
}

/* Rank 0 opens a port and sends its name to rank 1. */
static void port_share(const bench *b, char *port)
{
    if (b->rank == 0) {
        mpi_check(MPI_Open_port(MPI_INFO_NULL, port), "MPI_Open_port");
        mpi_check(MPI_Send(port, MPI_MAX_PORT_NAME, MPI_CHAR, 1, 0, MPI_COMM_WORLD), "MPI_Send");
    } else {
        mpi_check(MPI_Recv(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, 0, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE), "MPI_Recv");
    }
}

static MPI_Comm connect_pair(const bench *b, const char *port, double *elapsed)
{
    MPI_Comm inter;
    double t;

    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    t = MPI_Wtime();
    if (b->rank == 0)
        mpi_check(MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter),
                  "MPI_Comm_accept");
    else
        mpi_check(MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter),
                  "MPI_Comm_connect");
    *elapsed = MPI_Wtime() - t;
    return inter;
}

/* A connected TCP socket between ranks 0 and 1 (rank 0 listens). */
static int socket_pair(const bench *b)
{
    char host[256];
    int port = 0, fd = -1;

    if (b->rank == 0) {
        struct sockaddr_in addr;
        socklen_t len = sizeof addr;
        int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

        if (lfd < 0)
            bench_fail("socket: %m");
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        memset(&addr, 0, sizeof addr);
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_ANY);
        if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) || listen(lfd, 1) ||
            getsockname(lfd, (struct sockaddr *)&addr, &len))
            bench_fail("bind/listen: %m");
        port = ntohs(addr.sin_port);
        if (gethostname(host, sizeof host))
            bench_fail("gethostname: %m");
        mpi_check(MPI_Send(host, sizeof host, MPI_CHAR, 1, 1, MPI_COMM_WORLD), "MPI_Send");
        mpi_check(MPI_Send(&port, 1, MPI_INT, 1, 2, MPI_COMM_WORLD), "MPI_Send");
        fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            bench_fail("accept: %m");
        close(lfd);
    } else {
        struct addrinfo hints, *res = NULL;
        char service[16];

        mpi_check(MPI_Recv(host, sizeof host, MPI_CHAR, 0, 1, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE), "MPI_Recv");
        mpi_check(MPI_Recv(&port, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                  "MPI_Recv");
        snprintf(service, sizeof service, "%d", port);
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        if (getaddrinfo(host, service, &hints, &res) != 0 || res == NULL) {
            /* The host name may not resolve here: the same machine then. */
            if (getaddrinfo("127.0.0.1", service, &hints, &res) != 0 || res == NULL)
                bench_fail("getaddrinfo %s:%s failed", host, service);
        }
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen))
            bench_fail("connect to %s:%d: %m", host, port);
        freeaddrinfo(res);
    }
    return fd;
}

/* ---- tests ------------------------------------------------------------------------ */

static void pingpong_comm(bench *b, const char *name, int argc, char **argv)
{
    char variant[64];
    double create = -1;

    snprintf(variant, sizeof variant, "comm=%s", name);
    if (strcmp(name, "world") == 0) {
        if (!world_size_fits(b, 2, "--comm world", "comm"))
            return;
        pingpong_run(b, MPI_COMM_WORLD, 1 - b->rank, b->rank == 0, name);
    } else if (strcmp(name, "spawn") == 0 || strcmp(name, "merged") == 0) {
        int merged = strcmp(name, "merged") == 0;
        MPI_Comm inter, intra;
        double spawn_time;

        if (!world_size_fits(b, 1, "--comm spawn/merged", "comm"))
            return;
        inter = spawn_peer(argc, argv, name, &spawn_time);
        create = spawn_time;
        if (merged) {
            double t = MPI_Wtime();

            mpi_check(MPI_Intercomm_merge(inter, 0, &intra), "MPI_Intercomm_merge");
            create = MPI_Wtime() - t;
            result_write(b, "create", variant, -1, 2, &create, 1, 1e6, "us",
                         "\"what\":\"MPI_Intercomm_merge\"");
            pingpong_run(b, intra, 1, 1, name);
            mpi_check(MPI_Comm_free(&intra), "MPI_Comm_free");
        } else {
            result_write(b, "create", variant, -1, 2, &create, 1, 1e6, "us",
                         "\"what\":\"MPI_Comm_spawn\"");
            pingpong_run(b, inter, 0, 1, name);
        }
        mpi_check(MPI_Comm_disconnect(&inter), "MPI_Comm_disconnect");
    } else if (strcmp(name, "connect") == 0) {
        char port[MPI_MAX_PORT_NAME];
        MPI_Comm inter;

        if (!world_size_fits(b, 2, "--comm connect", "comm"))
            return;
        port_share(b, port);
        inter = connect_pair(b, port, &create);
        result_write(b, "create", variant, -1, 2, &create, 1, 1e6, "us",
                     "\"what\":\"MPI_Comm_accept\"");
        pingpong_run(b, inter, 0, b->rank == 0, name);
        mpi_check(MPI_Comm_disconnect(&inter), "MPI_Comm_disconnect");
        if (b->rank == 0)
            mpi_check(MPI_Close_port(port), "MPI_Close_port");
    } else if (strcmp(name, "join") == 0) {
        MPI_Comm inter;
        int fd, remote = 0;
        double t;

        if (!world_size_fits(b, 2, "--comm join", "comm"))
            return;
        fd = socket_pair(b);
        mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        t = MPI_Wtime();
        mpi_check(MPI_Comm_join(fd, &inter), "MPI_Comm_join");
        create = MPI_Wtime() - t;
        mpi_check(MPI_Comm_remote_size(inter, &remote), "MPI_Comm_remote_size");
        if (remote != 1)
            bench_fail("MPI_Comm_join: remote size %d, expected 1", remote);
        result_write(b, "create", variant, -1, 2, &create, 1, 1e6, "us",
                     "\"what\":\"MPI_Comm_join\"");
        pingpong_run(b, inter, 0, b->rank == 0, name);
        mpi_check(MPI_Comm_disconnect(&inter), "MPI_Comm_disconnect");
        close(fd);
    } else {
        bench_fail("unknown --comm '%s' (world, spawn, merged, connect, join)", name);
    }
}

/* The spawned peer of --comm spawn/merged: serves the communicator named
 * by --child-comm (the parent spawns one child per such communicator). */
static void child_run(bench *b, MPI_Comm parent)
{
    const char *which = option_get(b, "child-comm");
    MPI_Comm intra;

    if (which == NULL)
        bench_fail("child: --child-comm missing");
    if (strcmp(which, "merged") == 0) {
        mpi_check(MPI_Intercomm_merge(parent, 1, &intra), "MPI_Intercomm_merge");
        pingpong_run(b, intra, 0, 0, which);
        mpi_check(MPI_Comm_free(&intra), "MPI_Comm_free");
    } else {
        pingpong_run(b, parent, 0, 0, which);
    }
    mpi_check(MPI_Comm_disconnect(&parent), "MPI_Comm_disconnect");
}

static void nameserv_run(bench *b)
{
    int iters = (int)option_long(b, "ns-iters"), warm = 2, total;
    double *pub, *look, *unpub;
    int pid = (int)getpid();

    if (!world_size_fits(b, 2, "nameserv", "tests"))
        return;
    if (iters < 1)
        bench_fail("--ns-iters must be at least 1");
    total = warm + iters;
    pub = calloc((size_t)iters, sizeof *pub);
    look = calloc((size_t)iters, sizeof *look);
    unpub = calloc((size_t)iters, sizeof *unpub);
    mpi_check(MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
    for (int i = 0; i < total; i++) {
        char name[96], port[MPI_MAX_PORT_NAME], got[MPI_MAX_PORT_NAME];
        double t;

        snprintf(name, sizeof name, "dpm-bench-%d-%d", pid, i);
        snprintf(port, sizeof port, "bench-port-%d-%d", pid, i);
        mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        if (b->rank == 0) {
            t = MPI_Wtime();
            mpi_check(MPI_Publish_name(name, MPI_INFO_NULL, port), "MPI_Publish_name");
            if (i >= warm)
                pub[i - warm] = MPI_Wtime() - t;
        }
        mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        if (b->rank == 1) {
            t = MPI_Wtime();
            mpi_check(MPI_Lookup_name(name, MPI_INFO_NULL, got), "MPI_Lookup_name");
            if (i >= warm)
                look[i - warm] = MPI_Wtime() - t;
            if (strcmp(got, port) != 0)
                bench_fail("check: looked up '%s' for %s, published '%s'", got, name, port);
        }
        mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        if (b->rank == 0) {
            t = MPI_Wtime();
            mpi_check(MPI_Unpublish_name(name, MPI_INFO_NULL, port), "MPI_Unpublish_name");
            if (i >= warm)
                unpub[i - warm] = MPI_Wtime() - t;
        }
    }
    if (b->rank == 1)
        mpi_check(MPI_Send(look, iters, MPI_DOUBLE, 0, 3, MPI_COMM_WORLD), "MPI_Send");
    else
        mpi_check(MPI_Recv(look, iters, MPI_DOUBLE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                  "MPI_Recv");
    result_write(b, "publish", "", -1, 2, pub, iters, 1e6, "us", NULL);
    result_write(b, "lookup", "", -1, 2, look, iters, 1e6, "us", NULL);
    result_write(b, "unpublish", "", -1, 2, unpub, iters, 1e6, "us", NULL);
    free(pub);
    free(look);
    free(unpub);
}

static void connect_run(bench *b)
{
    int iters = (int)option_long(b, "connect-iters"), warm = 1, total;
    char port[MPI_MAX_PORT_NAME];
    double *t_conn, *t_merge, *t_disc, *t_peer, *t_open, *t_close;

    if (!world_size_fits(b, 2, "connect", "tests"))
        return;
    if (iters < 1)
        bench_fail("--connect-iters must be at least 1");
    total = warm + iters;
    t_conn = calloc((size_t)iters, sizeof(double));
    t_merge = calloc((size_t)iters, sizeof(double));
    t_disc = calloc((size_t)iters, sizeof(double));
    t_peer = calloc((size_t)iters, sizeof(double));
    t_open = calloc((size_t)iters, sizeof(double));
    t_close = calloc((size_t)iters, sizeof(double));
    port_share(b, port);
    for (int i = 0; i < total; i++) {
        MPI_Comm inter, intra;
        double conn, t;
        int size = 0;

        inter = connect_pair(b, port, &conn);
        t = MPI_Wtime();
        mpi_check(MPI_Intercomm_merge(inter, b->rank, &intra), "MPI_Intercomm_merge");
        t = MPI_Wtime() - t;
        mpi_check(MPI_Comm_size(intra, &size), "MPI_Comm_size");
        if (size != 2)
            bench_fail("check: merged communicator has %d processes, expected 2", size);
        mpi_check(MPI_Comm_free(&intra), "MPI_Comm_free");
        if (i >= warm) {
            t_conn[i - warm] = conn;
            t_merge[i - warm] = t;
        }
        t = MPI_Wtime();
        mpi_check(MPI_Comm_disconnect(&inter), "MPI_Comm_disconnect");
        if (i >= warm)
            t_disc[i - warm] = MPI_Wtime() - t;
    }
    /* rank 1's connect times go to rank 0 */
    if (b->rank == 1)
        mpi_check(MPI_Send(t_conn, iters, MPI_DOUBLE, 0, 4, MPI_COMM_WORLD), "MPI_Send");
    else
        mpi_check(MPI_Recv(t_peer, iters, MPI_DOUBLE, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                  "MPI_Recv");
    if (b->rank == 0) {
        mpi_check(MPI_Close_port(port), "MPI_Close_port");
        for (int i = 0; i < iters; i++) {
            char p[MPI_MAX_PORT_NAME];
            double t = MPI_Wtime();

            mpi_check(MPI_Open_port(MPI_INFO_NULL, p), "MPI_Open_port");
            t_open[i] = MPI_Wtime() - t;
            t = MPI_Wtime();
            mpi_check(MPI_Close_port(p), "MPI_Close_port");
            t_close[i] = MPI_Wtime() - t;
        }
    }
    result_write(b, "accept", "", -1, 2, t_conn, iters, 1e6, "us", NULL);
    result_write(b, "connect", "", -1, 2, t_peer, iters, 1e6, "us", NULL);
    result_write(b, "merge", "", -1, 2, t_merge, iters, 1e6, "us", NULL);
    result_write(b, "disconnect", "", -1, 2, t_disc, iters, 1e6, "us", NULL);
    result_write(b, "open_port", "", -1, 1, t_open, iters, 1e6, "us", NULL);
    result_write(b, "close_port", "", -1, 1, t_close, iters, 1e6, "us", NULL);
    free(t_conn);
    free(t_merge);
    free(t_disc);
    free(t_peer);
    free(t_open);
    free(t_close);
}

int main(int argc, char **argv)
{
    MPI_Comm parent;
    bench b;

    MPI_Init(&argc, &argv);
    bench_init(&b, "intercomm", argc, argv, options, "pingpong,nameserv,connect");
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        child_run(&b, parent);
    } else {
        if (test_enabled(&b, "pingpong")) {
            char *comms[BENCH_MAX_LIST];
            int count = option_words(&b, "comm", comms);

            for (int i = 0; i < count; i++)
                pingpong_comm(&b, comms[i], argc, argv);
        }
        if (test_enabled(&b, "nameserv"))
            nameserv_run(&b);
        if (test_enabled(&b, "connect"))
            connect_run(&b);
    }
    bench_finish(&b);
    MPI_Finalize();
    return 0;
}
