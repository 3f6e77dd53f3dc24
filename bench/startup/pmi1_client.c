/*
 * pmi1_client.c: a tiny raw PMI-1 client, the workload of the PMI cases.
 *
 * Usage: pmi1_client [--report] neighbours|all
 * Environment: PMI_FD, PMI_RANK, PMI_SIZE (set by the launcher).
 *
 * Each rank does, over the inherited PMI_FD socket (pmi-wire.md §2.2):
 *   init pmi_version=1 pmi_subversion=1, get_maxes, get_my_kvsname,
 *   put key=k-<rank> value=<64 characters derived from rank>,
 *   barrier_in (blocks until barrier_out: every rank has put),
 *   then either `neighbours`: get the keys of rank-1 and rank+1 (mod size),
 *   or `all`: get all size keys (size gets per rank, size^2 in the job),
 *   checking every value, and finally finalize -> finalize_ack.
 *
 * No MPI library is involved, so the time measured is the launcher's:
 * process start, PMI service, the barrier and the KVS.
 *
 * With --report, each rank prints "pmi1_client rank R of N: PATTERN ok"
 * on success; the benchmark's untimed check run uses it to make sure the
 * launcher really ran every rank. Timed runs stay silent.
 *
 * Exit status: 0 on success, 1 if a value was wrong, 2 on a protocol or
 * I/O error (error reply, unexpected reply, EOF, missing PMI_RANK/PMI_SIZE/
 * PMI_FD), 3 on usage errors. The wire client is bench/common/pmi1.c.
 */
#define _POSIX_C_SOURCE 200809L

#include "pmi1.h"

#include <stdio.h>
#include <string.h>

#define VALUE_LEN 64

enum pattern { PATTERN_NEIGHBOURS, PATTERN_ALL };

/* The value rank r puts: "r<rank>-" then hex filler, VALUE_LEN characters. */
static void value_make(long r, char *out)
{
    static const char hex[] = "0123456789abcdef";
    int n = snprintf(out, VALUE_LEN + 1, "r%ld-", r);

    for (int i = n; i < VALUE_LEN; i++)
        out[i] = hex[(unsigned long)(r * 31 + i * 7) % 16];
    out[VALUE_LEN] = '\0';
}

/* Get rank r's key and compare it with what r must have put.
 * Returns 0, 1 (wrong value) or 2 (protocol error). */
static int key_check(struct pmi1_job *job, long r)
{
    char key[32], got[PMI1_LINE_MAX], want[VALUE_LEN + 1];

    snprintf(key, sizeof(key), "k-%ld", r);
    if (pmi1_get(job, key, got, sizeof(got)) < 0)
        return 2;
    value_make(r, want);
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "pmi1_client: rank %ld: key k-%ld is '%s', expected '%s'\n",
                job->rank, r, got, want);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct pmi1_job job;
    char key[32], value[VALUE_LEN + 1];
    enum pattern pattern;
    int report = 0;
    int rc = 0;

    if (argc == 3 && strcmp(argv[1], "--report") == 0) {
        report = 1;
        argc--;
        argv++;
    }
    if (argc != 2 || (strcmp(argv[1], "neighbours") != 0 && strcmp(argv[1], "all") != 0)) {
        fprintf(stderr, "usage: pmi1_client [--report] neighbours|all\n");
        return 3;
    }
    pattern = strcmp(argv[1], "all") == 0 ? PATTERN_ALL : PATTERN_NEIGHBOURS;
    if (pmi1_init(&job) < 0)
        return 2;
    snprintf(key, sizeof(key), "k-%ld", job.rank);
    value_make(job.rank, value);
    if (pmi1_put(&job, key, value) < 0 || pmi1_barrier(&job) < 0)
        return 2;

    if (pattern == PATTERN_NEIGHBOURS) {
        rc = key_check(&job, (job.rank + job.size - 1) % job.size);
        if (rc == 0)
            rc = key_check(&job, (job.rank + 1) % job.size);
    } else {
        for (long r = 0; r < job.size && rc == 0; r++)
            rc = key_check(&job, r);
    }
    if (rc != 0)
        return rc;
    if (pmi1_finalize(&job) < 0)
        return 2;
    if (report)
        printf("pmi1_client rank %ld of %ld: %s ok\n", job.rank, job.size, argv[1]);
    return 0;
}
