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
 * I/O error (error reply, unexpected reply, EOF), 3 on usage errors.
 */
#define _POSIX_C_SOURCE 200809L

#include "pmi1_wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VALUE_LEN 64
#define KVS_MAX 256        /* Hydra's kvsname_max */

enum pattern { PATTERN_NEIGHBOURS, PATTERN_ALL };

/* Read a non-negative integer from the environment; -1 if unset or bad. */
static long env_long(const char *name)
{
    const char *s = getenv(name);
    char *end = NULL;
    long v;

    if (s == NULL)
        return -1;
    v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < 0)
        return -1;
    return v;
}

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
static int key_check(struct pmi1_conn *c, const char *kvs, long r, long me)
{
    char req[PMI1_LINE_MAX], reply[PMI1_LINE_MAX];
    char got[PMI1_LINE_MAX], want[VALUE_LEN + 1];

    snprintf(req, sizeof(req), "cmd=get kvsname=%s key=k-%ld\n", kvs, r);
    if (conn_call(c, req, "get_result", reply, sizeof(reply)) < 0)
        return 2;
    if (attr_get(reply, "value", got, sizeof(got)) < 0) {
        fprintf(stderr, "pmi1_client: rank %ld: no value in '%s'\n", me, reply);
        return 2;
    }
    value_make(r, want);
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "pmi1_client: rank %ld: key k-%ld is '%s', expected '%s'\n",
                me, r, got, want);
        return 1;
    }
    return 0;
}

/* Run the init/put/barrier sequence; kvs receives the kvsname. 0 or 2. */
static int job_join(struct pmi1_conn *c, long rank, char *kvs, size_t cap)
{
    char req[PMI1_LINE_MAX], reply[PMI1_LINE_MAX], value[VALUE_LEN + 1];

    if (conn_call(c, "cmd=init pmi_version=1 pmi_subversion=1\n",
                  "response_to_init", reply, sizeof(reply)) < 0
        || conn_call(c, "cmd=get_maxes\n", "maxes", reply, sizeof(reply)) < 0
        || conn_call(c, "cmd=get_my_kvsname\n", "my_kvsname", reply, sizeof(reply)) < 0)
        return 2;
    if (attr_get(reply, "kvsname", kvs, cap) < 0) {
        fprintf(stderr, "pmi1_client: no kvsname in '%s'\n", reply);
        return 2;
    }
    value_make(rank, value);
    snprintf(req, sizeof(req), "cmd=put kvsname=%s key=k-%ld value=%s\n", kvs, rank, value);
    if (conn_call(c, req, "put_result", reply, sizeof(reply)) < 0
        || conn_call(c, "cmd=barrier_in\n", "barrier_out", reply, sizeof(reply)) < 0)
        return 2;
    return 0;
}

int main(int argc, char **argv)
{
    struct pmi1_conn conn;
    char kvs[KVS_MAX], reply[PMI1_LINE_MAX];
    enum pattern pattern;
    long rank, size;
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
    rank = env_long("PMI_RANK");
    size = env_long("PMI_SIZE");
    if (rank < 0 || size <= 0 || rank >= size) {
        fprintf(stderr, "pmi1_client: PMI_RANK/PMI_SIZE missing or invalid\n");
        return 3;
    }
    if (conn_open(&conn) < 0)
        return 3;
    if (job_join(&conn, rank, kvs, sizeof(kvs)) != 0)
        return 2;

    if (pattern == PATTERN_NEIGHBOURS) {
        rc = key_check(&conn, kvs, (rank + size - 1) % size, rank);
        if (rc == 0)
            rc = key_check(&conn, kvs, (rank + 1) % size, rank);
    } else {
        for (long r = 0; r < size && rc == 0; r++)
            rc = key_check(&conn, kvs, r, rank);
    }
    if (rc != 0)
        return rc;

    if (conn_call(&conn, "cmd=finalize\n", "finalize_ack", reply, sizeof(reply)) < 0)
        return 2;
    if (report)
        printf("pmi1_client rank %ld of %ld: %s ok\n", rank, size, argv[1]);
    return 0;
}
