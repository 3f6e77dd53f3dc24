/*
 * spawn.c: MPI_Comm_spawn latency, MPI_Comm_spawn_multiple, spawn rate,
 * and where a spawn's time goes (papers 001 §5.1-5.2 and 003 §3.5).
 *
 * The parent job is whatever the launcher started (P = its size; root 0
 * spawns for MPI_COMM_WORLD). Children are this same program, with --child.
 *
 * Tests (records: variant children=C, nprocs = P):
 *   latency    for each C in --children: --spawn-warmup untimed, then
 *              --spawns timed spawns of C children, each one ended before the
 *              next (first messages, gather, barrier, disconnect). Per spawn:
 *                latency     MPI_Comm_spawn on the root (ms);
 *                start       root's wall clock before the call to the last
 *                            child entering main() (ms): the launcher's part
 *                            (request, fork/exec) plus loading the program;
 *                child_init  the longest MPI_Init among the children (ms);
 *                ready       to the last child leaving MPI_Init (ms);
 *                first_msg   the first ping-pong between the parent root and
 *                            child 0 after the spawn returned, half round
 *                            trip (µs): includes any on-demand connection;
 *                next_msg    the second one (µs), for comparison;
 *                disconnect  MPI_Comm_disconnect of the intercommunicator
 *                            (ms), after a barrier on it.
 *   multiple   the same with MPI_Comm_spawn_multiple: two commands (this
 *              program with different arguments), ceil(C/2) + floor(C/2)
 *              children, for every C >= 2 in --children: test "multiple" (ms).
 *   rate       paper 001's method: --rate-count spawns of --rate-children
 *              children in a row; the children stay alive, asleep (MPI_Test
 *              every 10 ms), until all spawns are done. Records "rate"
 *              (spawns/s, count / time from the first spawn to the last
 *              return) and "rate_each" (each spawn's own time, ms: grows if
 *              the launcher slows down with live processes).
 *
 * --check: every spawn's error codes and remote size; each child checks its
 * world size, an argument with spaces, quotes and a semicolon, and (spawn
 * multiple) its MPI_APPNUM against the command it came from; the ping-pong
 * values come back incremented.
 * Wall-clock stamps compare clocks of different processes: meaningful on
 * one host (or with synchronised clocks) only.
 */
#include "harness.h"
#include "mpi_children.h"

#include <stdlib.h>
#include <string.h>

#define PAYLOAD "a b;c\"d'e f"
#define NAP_US 10000

static const bench_option options[] = {
    {"children", "1,2,4,8", "1,2", "children per spawn (comma-separated)"},
    {"spawns", "10", "2", "timed spawns per point (latency, multiple)"},
    {"spawn-warmup", "1", "1", "untimed spawns before each point"},
    {"rate-count", "32", "3", "spawns in a row for the rate"},
    {"rate-children", "1", "1", "children per spawn for the rate"},
    {"mode", NULL, NULL, "(internal, children) latency, multiple or rate"},
    {"t0", NULL, NULL, "(internal, children) the parent's wall clock at the spawn"},
    {"expect", NULL, NULL, "(internal, children) expected world size"},
    {"app", NULL, NULL, "(internal, children) command index in spawn_multiple"},
    {"payload", NULL, NULL, "(internal, children) an argument to check"},
    {NULL, NULL, NULL, NULL},
};

/* ---- children -------------------------------------------------------------- */

static void child_run(bench *b, MPI_Comm parent, double t_main, double init_dur,
                      double t_init_wall)
{
    const char *mode = option_get(b, "mode");
    const char *t0s = option_get(b, "t0");
    double t0 = t0s ? atof(t0s) : t_main;
    double stamps[3] = {t_main - t0, t_init_wall - t0, init_dur};

    if (mode == NULL)
        bench_fail("child: --mode missing");
    if (b->check) {
        const char *payload = option_get(b, "payload");
        const char *expect = option_get(b, "expect");
        const char *app = option_get(b, "app");

        if (payload == NULL || strcmp(payload, PAYLOAD) != 0)
            bench_fail("check: child got payload argument '%s', expected '%s'",
                       payload ? payload : "(none)", PAYLOAD);
        if (expect && atoi(expect) != b->size)
            bench_fail("check: child world size %d, expected %s", b->size, expect);
        if (app) {
            int *appnum = NULL, flag = 0;

            MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag);
            if (!flag || *appnum != atoi(app))
                bench_fail("check: child of command %s has MPI_APPNUM %d", app,
                           flag ? *appnum : -1);
        }
    }
    if (strcmp(mode, "rate") == 0) {
        barrier_sleepy(parent, NAP_US);
        mpi_check(MPI_Comm_disconnect(&parent), "child MPI_Comm_disconnect");
        return;
    }
    if (strcmp(mode, "latency") == 0 && b->rank == 0) {
        for (int i = 0; i < 2; i++) {
            int value;

            mpi_check(MPI_Recv(&value, 1, MPI_INT, 0, 7, parent, MPI_STATUS_IGNORE),
                      "child MPI_Recv");
            value++;
            mpi_check(MPI_Send(&value, 1, MPI_INT, 0, 8, parent), "child MPI_Send");
        }
    }
    mpi_check(MPI_Gather(stamps, 3, MPI_DOUBLE, NULL, 0, MPI_DOUBLE, 0, parent),
              "child MPI_Gather");
    mpi_check(MPI_Barrier(parent), "child MPI_Barrier");
    mpi_check(MPI_Comm_disconnect(&parent), "child MPI_Comm_disconnect");
}

/* ---- parent ----------------------------------------------------------------- */

/* Arguments for the children; argv storage lives in the struct. */
typedef struct {
    char t0[64], expect[16], app[16];
    char *argv[16];
} child_args;

static void child_args_build(const bench *b, child_args *a, const char *mode, int expect,
                             int app)
{
    int n = 0;

    snprintf(a->t0, sizeof a->t0, "%.9f", wall_now());
    snprintf(a->expect, sizeof a->expect, "%d", expect);
    snprintf(a->app, sizeof a->app, "%d", app);
    a->argv[n++] = "--child";
    a->argv[n++] = "--mode";
    a->argv[n++] = (char *)mode;
    a->argv[n++] = "--t0";
    a->argv[n++] = a->t0;
    a->argv[n++] = "--expect";
    a->argv[n++] = a->expect;
    if (app >= 0) {
        a->argv[n++] = "--app";
        a->argv[n++] = a->app;
    }
    if (b->check) {
        a->argv[n++] = "--check";
        a->argv[n++] = "--payload";
        a->argv[n++] = PAYLOAD;
    }
    a->argv[n] = NULL;
}

static void spawn_verify(const bench *b, MPI_Comm inter, const int *errcodes, int k)
{
    int remote = 0;

    for (int i = 0; b->rank == 0 && i < k; i++)
        mpi_check(errcodes[i], "MPI_Comm_spawn (a child's error code)");
    mpi_check(MPI_Comm_remote_size(inter, &remote), "MPI_Comm_remote_size");
    if (remote != k)
        bench_fail("spawned %d children, expected %d", remote, k);
}

/* Times of one spawn: [0] call, [1] start, [2] child_init, [3] ready (s),
 * [4] first msg, [5] next msg (half round trips, s), [6] disconnect (s). */
static void spawn_once(bench *b, int k, int multiple, double out[7])
{
    int *errcodes = calloc((size_t)k, sizeof *errcodes);
    double *stamps = calloc(3 * (size_t)k, sizeof *stamps);
    MPI_Comm inter;
    double t0, t1;

    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    if (!multiple) {
        child_args a;

        child_args_build(b, &a, "latency", k, -1);
        t0 = MPI_Wtime();
        mpi_check(MPI_Comm_spawn(self_path(), a.argv, k, MPI_INFO_NULL, 0, MPI_COMM_WORLD,
                                 &inter, errcodes), "MPI_Comm_spawn");
        t1 = MPI_Wtime();
    } else {
        child_args a[2];
        char *cmds[2] = {(char *)self_path(), (char *)self_path()};
        char **argvs[2];
        int counts[2] = {(k + 1) / 2, k / 2};
        MPI_Info infos[2] = {MPI_INFO_NULL, MPI_INFO_NULL};

        child_args_build(b, &a[0], "multiple", k, 0);
        child_args_build(b, &a[1], "multiple", k, 1);
        argvs[0] = a[0].argv;
        argvs[1] = a[1].argv;
        t0 = MPI_Wtime();
        mpi_check(MPI_Comm_spawn_multiple(2, cmds, argvs, counts, infos, 0, MPI_COMM_WORLD,
                                          &inter, errcodes), "MPI_Comm_spawn_multiple");
        t1 = MPI_Wtime();
    }
    spawn_verify(b, inter, errcodes, k);
    out[0] = t1 - t0;
    out[4] = out[5] = 0;
    if (!multiple && b->rank == 0) {
        for (int i = 0; i < 2; i++) {
            int value = 1000 + i, back = -1;
            double ts = MPI_Wtime();

            mpi_check(MPI_Send(&value, 1, MPI_INT, 0, 7, inter), "MPI_Send");
            mpi_check(MPI_Recv(&back, 1, MPI_INT, 0, 8, inter, MPI_STATUS_IGNORE), "MPI_Recv");
            out[4 + i] = (MPI_Wtime() - ts) / 2;
            if (back != value + 1)
                bench_fail("check: child 0 answered %d, expected %d", back, value + 1);
        }
    }
    mpi_check(MPI_Gather(NULL, 0, MPI_DOUBLE, stamps, 3, MPI_DOUBLE,
                         b->rank == 0 ? MPI_ROOT : MPI_PROC_NULL, inter), "MPI_Gather");
    mpi_check(MPI_Barrier(inter), "MPI_Barrier (intercommunicator)");
    t0 = MPI_Wtime();
    mpi_check(MPI_Comm_disconnect(&inter), "MPI_Comm_disconnect");
    out[6] = MPI_Wtime() - t0;
    out[1] = out[2] = out[3] = 0;
    for (int i = 0; i < k; i++) {
        out[1] = stamps[3 * i] > out[1] ? stamps[3 * i] : out[1];
        out[3] = stamps[3 * i + 1] > out[3] ? stamps[3 * i + 1] : out[3];
        out[2] = stamps[3 * i + 2] > out[2] ? stamps[3 * i + 2] : out[2];
    }
    free(stamps);
    free(errcodes);
}

static void latency_run(bench *b, int multiple)
{
    long children[BENCH_MAX_LIST];
    int nchildren = option_longs(b, "children", children);
    int spawns = (int)option_long(b, "spawns");
    int warmup = (int)option_long(b, "spawn-warmup");
    static const char *const names[7] = {"latency", "start", "child_init", "ready",
                                         "first_msg", "next_msg", "disconnect"};
    static const double scales[7] = {1e3, 1e3, 1e3, 1e3, 1e6, 1e6, 1e3};
    static const char *const units[7] = {"ms", "ms", "ms", "ms", "us", "us", "ms"};

    if (spawns < 1)
        bench_fail("--spawns must be at least 1");
    for (int c = 0; c < nchildren; c++) {
        int k = (int)children[c];
        double *samples[7];
        char variant[64];

        if (k < 1)
            bench_fail("--children must be positive");
        if (multiple && k < 2)
            continue;
        for (int j = 0; j < 7; j++)
            samples[j] = calloc((size_t)spawns, sizeof(double));
        for (int i = 0; i < warmup + spawns; i++) {
            double t[7];

            spawn_once(b, k, multiple, t);
            if (i >= warmup)
                for (int j = 0; j < 7; j++)
                    samples[j][i - warmup] = t[j];
        }
        snprintf(variant, sizeof variant, "children=%d", k);
        if (multiple) {
            result_write(b, "multiple", variant, -1, b->size, samples[0], spawns, 1e3, "ms",
                         "\"commands\":2");
        } else {
            for (int j = 0; j < 7; j++)
                result_write(b, names[j], variant, -1, b->size, samples[j], spawns, scales[j],
                             units[j], NULL);
        }
        for (int j = 0; j < 7; j++)
            free(samples[j]);
    }
}

static MPI_Comm rate_spawn(bench *b, int k)
{
    int *errcodes = calloc((size_t)k, sizeof *errcodes);
    MPI_Comm inter;
    child_args a;

    child_args_build(b, &a, "rate", k, -1);
    mpi_check(MPI_Comm_spawn(self_path(), a.argv, k, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter,
                             errcodes), "MPI_Comm_spawn");
    spawn_verify(b, inter, errcodes, k);
    free(errcodes);
    return inter;
}

/* spawn_rate_loop's callback. */
struct rate_ctx {
    bench *b;
    int k;
};

static MPI_Comm rate_spawn_one(void *ctx)
{
    struct rate_ctx *c = ctx;

    return rate_spawn(c->b, c->k);
}

static void rate_run(bench *b)
{
    int count = (int)option_long(b, "rate-count");
    int k = (int)option_long(b, "rate-children");
    int warmup = (int)option_long(b, "spawn-warmup");
    struct rate_ctx ctx = { b, k };
    double *each, seconds, rate;
    char variant[64], extra[128];

    if (count < 1 || k < 1)
        bench_fail("--rate-count and --rate-children must be positive");
    each = malloc((size_t)count * sizeof *each);
    seconds = spawn_rate_loop(rate_spawn_one, &ctx, count, warmup, 0, each);
    rate = count / seconds;
    snprintf(variant, sizeof variant, "children=%d", k);
    snprintf(extra, sizeof extra, "\"count\":%d,\"seconds\":%.6f", count, seconds);
    result_write(b, "rate", variant, -1, b->size, &rate, 1, 1.0, "spawns/s", extra);
    result_write(b, "rate_each", variant, -1, b->size, each, count, 1e3, "ms", extra);
    free(each);
}

int main(int argc, char **argv)
{
    double t_main = wall_now(), t_init0 = mono_now(), init_dur, t_init_wall;
    MPI_Comm parent;
    bench b;

    MPI_Init(&argc, &argv);
    init_dur = mono_now() - t_init0;
    t_init_wall = wall_now();
    bench_init(&b, "spawn", argc, argv, options, "latency,multiple,rate");
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        if (!b.child)
            bench_fail("spawned without --child");
        child_run(&b, parent, t_main, init_dur, t_init_wall);
    } else {
        if (b.child)
            bench_fail("--child is for spawned processes");
        if (test_enabled(&b, "latency"))
            latency_run(&b, 0);
        if (test_enabled(&b, "multiple"))
            latency_run(&b, 1);
        if (test_enabled(&b, "rate"))
            rate_run(&b);
    }
    bench_finish(&b);
    MPI_Finalize();
    return 0;
}
