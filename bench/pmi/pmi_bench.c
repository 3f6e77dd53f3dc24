/*
 * pmi_bench.c - the PMI key-value access patterns of paper 004 (Figure 7),
 * timed inside the ranks, over dpm's client libraries.
 *
 * Usage: pmi_bench [--pmi 1|2] [--reps N] [--warmup N] [--no-hints] PATTERN
 *
 * --pmi 2 (default) goes through dpm's libpmi2 (PMI-2 wire); with hints (the
 * default) dense keys are put with PMI2_HINT_DENSE, sparse ones with
 * PMI2_HINT_SPARSE. --pmi 1 goes through the benchmarks' own PMI-1 wire
 * client, bench/common/pmi1.c (put, barrier, get), which MPICH's Hydra
 * serves too; it has no ring and no waiting get.
 *
 * Patterns (one round; every key holds a 16-byte value, as in the paper):
 *   fence        an empty fence
 *   fence-put    every rank puts one key (unhinted), fence
 *   dense        rank 0 puts one key, fence, every rank gets it
 *   sparse       every rank puts one key, fence, gets its two neighbours'
 *   alltoall     every rank puts one key, fence, gets every rank's key
 *   ring         PMI2_KVS_Ring (PMI-2 only)
 *   dense-wait   dense without the fence: waiting gets (PMI-2 only)
 *   sparse-wait  sparse without the fence: waiting gets (PMI-2 only)
 * Gets name the rank that put the key (srcid) and check the value.
 *
 * Timing: warmup + reps rounds, each preceded by an untimed fence so that
 * the ranks start it together; each rank keeps the mean, min and max of
 * its timed rounds. Then every rank puts its three numbers, fences, and
 * rank 0 gets them all: the time of a round is the slowest rank's (the
 * paper's "time for all processes to complete"), which rank 0 alone could
 * not see. That collection is outside the timed rounds. Rank 0 prints one
 * JSON line:
 *   {"bench":"pmi","pattern":P,"pmi":V,"hints":B,"procs":N,"reps":R,
 *    "mean_ms":..,"max_ms":..,"min_ms":..,"worst_ms":..,"rank0_ms":..}
 * mean/max/min_ms: over ranks, of each rank's mean round time; worst_ms:
 * the slowest single round of any rank; rank0_ms: rank 0's mean.
 *
 * Exit status: 0; 1 a wrong value; 2 a PMI call failed (the message names
 * it and its return code); 3 usage.
 */
#define _POSIX_C_SOURCE 200809L

#include <pmi2.h>

#include "pmi1.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VALUE_LEN 16
#define KEY_LEN 64
#define BUF_LEN 1024

/* The PMI calls a pattern needs, over either library. */
struct pmi_ops {
    int (*put)(const char *key, const char *value, int hint);
    int (*fence)(void);
    int (*get)(int src, const char *key, char *value, int len, int wait);
    int (*finalize)(void);
};

static int rank, size, hints = 1;
static char kvsname[BUF_LEN];          /* PMI-1 kvsname or PMI-2 job id */

/* The PMI-1 path: the wire client's job (its calls return 0 or -1). */
static struct pmi1_job job1;

static int wire1_put(const char *key, const char *value, int hint)
{
    (void)hint;
    return pmi1_put(&job1, key, value);
}

static int wire1_fence(void)
{
    return pmi1_barrier(&job1);
}

static int wire1_get(int src, const char *key, char *value, int len, int wait)
{
    (void)src;
    return wait || len <= 0 ? -1 : pmi1_get(&job1, key, value, (size_t)len);
}

static int wire1_finalize(void)
{
    return pmi1_finalize(&job1);
}

static const struct pmi_ops pmi1_ops = { wire1_put, wire1_fence, wire1_get, wire1_finalize };

static int pmi2_put(const char *key, const char *value, int hint)
{
    return PMI2_KVS_PutHint(key, value, hints ? hint : PMI2_HINT_NONE);
}

static int pmi2_get(int src, const char *key, char *value, int len, int wait)
{
    int got = 0;

    return (wait ? PMI2_KVS_GetWait : PMI2_KVS_Get)(kvsname, src, key, value, len, &got);
}

static const struct pmi_ops pmi2_ops = { pmi2_put, PMI2_KVS_Fence, pmi2_get, PMI2_Finalize };

static const struct pmi_ops *ops;

static void die(const char *what, int rc)
{
    fprintf(stderr, "pmi_bench: rank %d: %s failed (rc=%d)\n", rank, what, rc);
    exit(2);
}

#define CALL(expr) do { int rc_ = (expr); if (rc_ != 0) die(#expr, rc_); } while (0)

/* What rank r puts in round `round`: exactly VALUE_LEN characters. */
static void value_make(int r, int round, char *out)
{
    snprintf(out, VALUE_LEN + 1, "%07u.%08u", (unsigned)r % 10000000u, (unsigned)round % 100000000u);
}

/* Put `prefix<round>-<rank>` (or without -<rank> when rank < 0). */
static void key_make(char *out, const char *prefix, int round, int r)
{
    if (r < 0)
        snprintf(out, KEY_LEN, "%s%d", prefix, round);
    else
        snprintf(out, KEY_LEN, "%s%d-%d", prefix, round, r);
}

static void put_own(const char *prefix, int round, int hint)
{
    char key[KEY_LEN], value[VALUE_LEN + 1];

    key_make(key, prefix, round, rank);
    value_make(rank, round, value);
    CALL(ops->put(key, value, hint));
}

/* Get src's key of this round and check its value. */
static void get_check(const char *prefix, int round, int src, int per_rank, int wait)
{
    char key[KEY_LEN], want[VALUE_LEN + 1], got[BUF_LEN];

    key_make(key, prefix, round, per_rank ? src : -1);
    value_make(src, round, want);
    CALL(ops->get(src, key, got, sizeof got, wait));
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "pmi_bench: rank %d: %s is '%s', expected '%s'\n", rank, key, got, want);
        exit(1);
    }
}

static void round_fence(int round)
{
    (void)round;
    CALL(ops->fence());
}

static void round_fence_put(int round)
{
    put_own("f", round, PMI2_HINT_NONE);
    CALL(ops->fence());
}

static void dense_common(int round, int wait)
{
    if (rank == 0) {
        char key[KEY_LEN], value[VALUE_LEN + 1];

        key_make(key, wait ? "dw" : "d", round, -1);
        value_make(0, round, value);
        CALL(ops->put(key, value, PMI2_HINT_DENSE));
    }
    if (!wait)
        CALL(ops->fence());
    get_check(wait ? "dw" : "d", round, 0, 0, wait);
}

static void sparse_common(int round, int wait)
{
    const char *prefix = wait ? "sw" : "s";

    put_own(prefix, round, PMI2_HINT_SPARSE);
    if (!wait)
        CALL(ops->fence());
    get_check(prefix, round, (rank + size - 1) % size, 1, wait);
    get_check(prefix, round, (rank + 1) % size, 1, wait);
}

static void round_dense(int round) { dense_common(round, 0); }
static void round_dense_wait(int round) { dense_common(round, 1); }
static void round_sparse(int round) { sparse_common(round, 0); }
static void round_sparse_wait(int round) { sparse_common(round, 1); }

static void round_alltoall(int round)
{
    put_own("a", round, PMI2_HINT_DENSE);
    CALL(ops->fence());
    for (int r = 0; r < size; r++)
        get_check("a", round, r, 1, 0);
}

static void round_ring(int round)
{
    char value[VALUE_LEN + 1], left[BUF_LEN], right[BUF_LEN];
    int ring_rank = -1, ring_size = -1;

    value_make(rank, round, value);
    CALL(PMI2_KVS_Ring(value, &ring_rank, &ring_size, left, right, BUF_LEN));
    if (ring_size != size || ring_rank < 0 || ring_rank >= size) {
        fprintf(stderr, "pmi_bench: rank %d: ring rank %d of %d in a job of %d\n", rank, ring_rank, ring_size, size);
        exit(1);
    }
}

static const struct pattern {
    const char *name;
    void (*round)(int round);
    int pmi2_only;
} patterns[] = {
    { "fence", round_fence, 0 },
    { "fence-put", round_fence_put, 0 },
    { "dense", round_dense, 0 },
    { "sparse", round_sparse, 0 },
    { "alltoall", round_alltoall, 0 },
    { "ring", round_ring, 1 },
    { "dense-wait", round_dense_wait, 1 },
    { "sparse-wait", round_sparse_wait, 1 },
};

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void usage(void)
{
    fprintf(stderr, "usage: pmi_bench [--pmi 1|2] [--reps N] [--warmup N] [--no-hints] PATTERN\npatterns:");
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++)
        fprintf(stderr, " %s", patterns[i].name);
    fprintf(stderr, "\n");
    exit(3);
}

static void pmi_start(int version)
{
    int spawned, appnum;

    if (version == 1) {
        ops = &pmi1_ops;
        CALL(pmi1_init(&job1));
        rank = (int)job1.rank;
        size = (int)job1.size;
        snprintf(kvsname, sizeof kvsname, "%s", job1.kvsname);
    } else {
        ops = &pmi2_ops;
        CALL(PMI2_Init(&spawned, &size, &rank, &appnum));
        CALL(PMI2_Job_GetId(kvsname, sizeof kvsname));
    }
}

/* Every rank's mean, min and max round time; rank 0 prints the summary. */
static void report(const struct pattern *p, int version, int reps, int warmup,
                   double mean, double min, double max)
{
    char key[KEY_LEN], value[BUF_LEN];
    double sum = 0, hi = 0, lo = 1e300, worst = 0;

    snprintf(key, sizeof key, "t-%d", rank);
    snprintf(value, sizeof value, "%.6f,%.6f,%.6f", mean, min, max);
    CALL(ops->put(key, value, PMI2_HINT_SPARSE));
    CALL(ops->fence());
    if (rank != 0)
        return;
    for (int r = 0; r < size; r++) {
        char got[BUF_LEN];
        double m, mn, mx;

        snprintf(key, sizeof key, "t-%d", r);
        CALL(ops->get(r, key, got, sizeof got, 0));
        if (sscanf(got, "%lf,%lf,%lf", &m, &mn, &mx) != 3) {
            fprintf(stderr, "pmi_bench: rank %d reported '%s'\n", r, got);
            exit(1);
        }
        sum += m;
        hi = m > hi ? m : hi;
        lo = m < lo ? m : lo;
        worst = mx > worst ? mx : worst;
    }
    printf("{\"bench\":\"pmi\",\"pattern\":\"%s\",\"pmi\":%d,\"hints\":%s,\"procs\":%d,\"reps\":%d,"
           "\"warmup\":%d,\"mean_ms\":%.4f,\"max_ms\":%.4f,\"min_ms\":%.4f,\"worst_ms\":%.4f,\"rank0_ms\":%.4f}\n",
           p->name, version, version == 2 && hints ? "true" : "false", size, reps, warmup,
           sum / size, hi, lo, worst, mean);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const struct pattern *p = NULL;
    int version = 2, reps = 10, warmup = 1;
    double sum = 0, min = 1e300, max = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--pmi") == 0 && i + 1 < argc)
            version = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-hints") == 0)
            hints = 0;
        else if (p == NULL && argv[i][0] != '-') {
            for (size_t k = 0; k < sizeof patterns / sizeof patterns[0]; k++)
                if (strcmp(argv[i], patterns[k].name) == 0)
                    p = &patterns[k];
            if (p == NULL)
                usage();
        } else
            usage();
    }
    if (p == NULL || (version != 1 && version != 2) || reps < 1 || warmup < 0)
        usage();
    if (p->pmi2_only && version == 1) {
        fprintf(stderr, "pmi_bench: %s needs --pmi 2 (PMI-1 has no ring and no waiting get)\n", p->name);
        return 3;
    }

    pmi_start(version);
    for (int round = 0; round < warmup + reps; round++) {
        double t0, t;

        CALL(ops->fence());             /* untimed: start the round together */
        t0 = now_ms();
        p->round(round);
        t = now_ms() - t0;
        if (round >= warmup) {
            sum += t;
            min = t < min ? t : min;
            max = t > max ? t : max;
        }
    }
    report(p, version, reps, warmup, sum / reps, min, max);
    CALL(ops->finalize());
    return 0;
}
