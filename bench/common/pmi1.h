/*
 * pmi1.h: a minimal PMI-1 wire client, the one the benchmarks share
 * (bench/startup/pmi1_client.c and the PMI-1 path of bench/pmi/pmi_bench.c;
 * built from source by their Makefiles, no library to install).
 *
 * PMI-1 is line based (pmi-wire.md §2.1): every request and every reply is
 * one ASCII line, `cmd=<name>` then space-separated `key=value` tokens, then
 * '\n'. The client has one request outstanding at a time, so a call is:
 * send one line, read one line, check its command name and `rc`.
 *
 * The reader keeps its own buffer: a reply may arrive split over several
 * reads, and bytes past the first '\n' are kept for the next call.
 * No escaping is done or undone (MPICH never escapes, §7 item 8).
 *
 * Every function returns 0, or -1 after printing a message to stderr
 * prefixed "pmi1: "; the caller decides how to exit.
 */
#ifndef BENCH_PMI1_H
#define BENCH_PMI1_H

#include <stddef.h>

/* Longest line we accept; Hydra's replies stay under ~1.1 KiB. */
#define PMI1_LINE_MAX 4096
/* Longest kvsname (Hydra's kvsname_max is 256). */
#define PMI1_KVS_MAX 256

struct pmi1_conn {
    int fd;
    size_t len;                 /* bytes held in buf */
    char buf[PMI1_LINE_MAX];
};

/* A joined job: this process's rank, the job size and its kvsname. */
struct pmi1_job {
    struct pmi1_conn conn;
    long rank;
    long size;
    char kvsname[PMI1_KVS_MAX];
};

/* ---- the job-level calls ---------------------------------------------- */

/* Take PMI_FD, PMI_RANK and PMI_SIZE from the environment, then
 * init (pmi_version=1 pmi_subversion=1), get_maxes, get_my_kvsname. */
int pmi1_init(struct pmi1_job *job);

/* put kvsname=<job's> key=<key> value=<value> (no spaces in either). */
int pmi1_put(struct pmi1_job *job, const char *key, const char *value);

/* barrier_in; returns when barrier_out arrives (every rank entered). */
int pmi1_barrier(struct pmi1_job *job);

/* get kvsname=<job's> key=<key>; the value into out (cap bytes). */
int pmi1_get(struct pmi1_job *job, const char *key, char *out, size_t cap);

/* finalize -> finalize_ack. */
int pmi1_finalize(struct pmi1_job *job);

/* ---- the wire ------------------------------------------------------------ */

/* Take the connection from PMI_FD. */
int pmi1_open(struct pmi1_conn *c);

/* Write one whole request line (must end in '\n'). */
int pmi1_send(struct pmi1_conn *c, const char *line);

/* Read one reply line into out (without the '\n'); -1 on EOF, error or a
 * line too long. */
int pmi1_recv(struct pmi1_conn *c, char *out, size_t cap);

/* Copy the value of token `key` of a reply line into out; 0 if found,
 * -1 if absent or too long (no message). The value runs to the next space. */
int pmi1_attr(const char *line, const char *key, char *out, size_t cap);

/* Send req, read the reply into reply, and check that it is
 * `cmd=<expect>` with rc absent or 0. */
int pmi1_call(struct pmi1_conn *c, const char *req, const char *expect,
              char *reply, size_t cap);

#endif
