/*
 * pmi1.c: the benchmarks' PMI-1 wire client: line I/O, reply parsing and
 * the job-level calls (init, put, barrier, get, finalize).
 *
 * See pmi1.h for the protocol summary. Errors are printed to stderr with
 * the prefix "pmi1: " and returned as -1; the caller exits.
 */
#define _POSIX_C_SOURCE 200809L

#include "pmi1.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int pmi1_open(struct pmi1_conn *c)
{
    const char *s = getenv("PMI_FD");
    char *end = NULL;
    long fd;

    if (s == NULL) {
        fprintf(stderr, "pmi1: PMI_FD is not set (run under a PMI-1 launcher)\n");
        return -1;
    }
    fd = strtol(s, &end, 10);
    if (end == s || *end != '\0' || fd < 0) {
        fprintf(stderr, "pmi1: bad PMI_FD '%s'\n", s);
        return -1;
    }
    c->fd = (int)fd;
    c->len = 0;
    return 0;
}

int pmi1_send(struct pmi1_conn *c, const char *line)
{
    size_t left = strlen(line);

    while (left > 0) {
        ssize_t n = write(c->fd, line, left);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("pmi1: write to PMI_FD");
            return -1;
        }
        line += n;
        left -= (size_t)n;
    }
    return 0;
}

int pmi1_recv(struct pmi1_conn *c, char *out, size_t cap)
{
    for (;;) {
        char *nl = memchr(c->buf, '\n', c->len);

        if (nl != NULL) {
            size_t n = (size_t)(nl - c->buf);

            if (n + 1 > cap) {
                fprintf(stderr, "pmi1: reply line of %zu bytes is too long\n", n);
                return -1;
            }
            memcpy(out, c->buf, n);
            out[n] = '\0';
            c->len -= n + 1;
            memmove(c->buf, nl + 1, c->len);
            return 0;
        }
        if (c->len == sizeof(c->buf)) {
            fprintf(stderr, "pmi1: no newline in %zu bytes of reply\n", c->len);
            return -1;
        }
        ssize_t got = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);

        if (got < 0) {
            if (errno == EINTR)
                continue;
            perror("pmi1: read from PMI_FD");
            return -1;
        }
        if (got == 0) {
            fprintf(stderr, "pmi1: PMI_FD closed by the launcher\n");
            return -1;
        }
        c->len += (size_t)got;
    }
}

int pmi1_attr(const char *line, const char *key, char *out, size_t cap)
{
    size_t klen = strlen(key);
    const char *p = line;

    while (*p != '\0') {
        const char *end = strchr(p, ' ');

        if (end == NULL)
            end = p + strlen(p);
        if ((size_t)(end - p) > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
            const char *v = p + klen + 1;
            size_t n = (size_t)(end - v);

            if (n + 1 > cap)
                return -1;
            memcpy(out, v, n);
            out[n] = '\0';
            return 0;
        }
        p = (*end == ' ') ? end + 1 : end;
    }
    return -1;
}

int pmi1_call(struct pmi1_conn *c, const char *req, const char *expect,
              char *reply, size_t cap)
{
    char name[64];
    char rc[32];

    if (pmi1_send(c, req) < 0 || pmi1_recv(c, reply, cap) < 0)
        return -1;
    if (pmi1_attr(reply, "cmd", name, sizeof(name)) < 0 || strcmp(name, expect) != 0) {
        fprintf(stderr, "pmi1: expected cmd=%s, got '%s'\n", expect, reply);
        return -1;
    }
    if (pmi1_attr(reply, "rc", rc, sizeof(rc)) == 0 && strcmp(rc, "0") != 0) {
        fprintf(stderr, "pmi1: error reply '%s' to '%.*s'\n",
                reply, (int)strcspn(req, "\n"), req);
        return -1;
    }
    return 0;
}

/* A non-negative integer from the environment; -1 if unset or bad. */
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

int pmi1_init(struct pmi1_job *job)
{
    char reply[PMI1_LINE_MAX];

    job->rank = env_long("PMI_RANK");
    job->size = env_long("PMI_SIZE");
    if (job->rank < 0 || job->size <= 0 || job->rank >= job->size) {
        fprintf(stderr, "pmi1: PMI_RANK/PMI_SIZE missing or invalid\n");
        return -1;
    }
    if (pmi1_open(&job->conn) < 0
        || pmi1_call(&job->conn, "cmd=init pmi_version=1 pmi_subversion=1\n",
                     "response_to_init", reply, sizeof(reply)) < 0
        || pmi1_call(&job->conn, "cmd=get_maxes\n", "maxes", reply, sizeof(reply)) < 0
        || pmi1_call(&job->conn, "cmd=get_my_kvsname\n", "my_kvsname", reply, sizeof(reply)) < 0)
        return -1;
    if (pmi1_attr(reply, "kvsname", job->kvsname, sizeof(job->kvsname)) < 0) {
        fprintf(stderr, "pmi1: no kvsname in '%s'\n", reply);
        return -1;
    }
    return 0;
}

int pmi1_put(struct pmi1_job *job, const char *key, const char *value)
{
    char req[PMI1_LINE_MAX], reply[PMI1_LINE_MAX];
    int n = snprintf(req, sizeof(req), "cmd=put kvsname=%s key=%s value=%s\n",
                     job->kvsname, key, value);

    if (n < 0 || (size_t)n >= sizeof(req)) {
        fprintf(stderr, "pmi1: put of key '%s' is too long\n", key);
        return -1;
    }
    return pmi1_call(&job->conn, req, "put_result", reply, sizeof(reply));
}

int pmi1_barrier(struct pmi1_job *job)
{
    char reply[PMI1_LINE_MAX];

    return pmi1_call(&job->conn, "cmd=barrier_in\n", "barrier_out", reply, sizeof(reply));
}

int pmi1_get(struct pmi1_job *job, const char *key, char *out, size_t cap)
{
    char req[PMI1_LINE_MAX], reply[PMI1_LINE_MAX];
    int n = snprintf(req, sizeof(req), "cmd=get kvsname=%s key=%s\n", job->kvsname, key);

    if (n < 0 || (size_t)n >= sizeof(req)) {
        fprintf(stderr, "pmi1: get of key '%s' is too long\n", key);
        return -1;
    }
    if (pmi1_call(&job->conn, req, "get_result", reply, sizeof(reply)) < 0)
        return -1;
    if (pmi1_attr(reply, "value", out, cap) < 0) {
        fprintf(stderr, "pmi1: no value (or too long) in '%s'\n", reply);
        return -1;
    }
    return 0;
}

int pmi1_finalize(struct pmi1_job *job)
{
    char reply[PMI1_LINE_MAX];

    return pmi1_call(&job->conn, "cmd=finalize\n", "finalize_ack", reply, sizeof(reply));
}
