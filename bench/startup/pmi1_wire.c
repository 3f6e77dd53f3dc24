/*
 * pmi1_wire.c: line I/O and reply parsing for the PMI-1 benchmark client.
 *
 * See pmi1_wire.h for the protocol summary. Errors are printed to stderr
 * with the prefix "pmi1_client: " and returned as -1; the caller exits.
 */
#define _POSIX_C_SOURCE 200809L

#include "pmi1_wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int conn_open(struct pmi1_conn *c)
{
    const char *s = getenv("PMI_FD");
    char *end = NULL;
    long fd;

    if (s == NULL) {
        fprintf(stderr, "pmi1_client: PMI_FD is not set (run under a PMI-1 launcher)\n");
        return -1;
    }
    fd = strtol(s, &end, 10);
    if (end == s || *end != '\0' || fd < 0) {
        fprintf(stderr, "pmi1_client: bad PMI_FD '%s'\n", s);
        return -1;
    }
    c->fd = (int)fd;
    c->len = 0;
    return 0;
}

int line_send(struct pmi1_conn *c, const char *line)
{
    size_t left = strlen(line);

    while (left > 0) {
        ssize_t n = write(c->fd, line, left);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("pmi1_client: write to PMI_FD");
            return -1;
        }
        line += n;
        left -= (size_t)n;
    }
    return 0;
}

int line_recv(struct pmi1_conn *c, char *out, size_t cap)
{
    for (;;) {
        char *nl = memchr(c->buf, '\n', c->len);

        if (nl != NULL) {
            size_t n = (size_t)(nl - c->buf);

            if (n + 1 > cap) {
                fprintf(stderr, "pmi1_client: reply line of %zu bytes is too long\n", n);
                return -1;
            }
            memcpy(out, c->buf, n);
            out[n] = '\0';
            c->len -= n + 1;
            memmove(c->buf, nl + 1, c->len);
            return 0;
        }
        if (c->len == sizeof(c->buf)) {
            fprintf(stderr, "pmi1_client: no newline in %zu bytes of reply\n", c->len);
            return -1;
        }
        ssize_t got = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);

        if (got < 0) {
            if (errno == EINTR)
                continue;
            perror("pmi1_client: read from PMI_FD");
            return -1;
        }
        if (got == 0) {
            fprintf(stderr, "pmi1_client: PMI_FD closed by the launcher\n");
            return -1;
        }
        c->len += (size_t)got;
    }
}

int attr_get(const char *line, const char *key, char *out, size_t cap)
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

int conn_call(struct pmi1_conn *c, const char *req, const char *expect,
              char *reply, size_t cap)
{
    char name[64];
    char rc[32];

    if (line_send(c, req) < 0 || line_recv(c, reply, cap) < 0)
        return -1;
    if (attr_get(reply, "cmd", name, sizeof(name)) < 0 || strcmp(name, expect) != 0) {
        fprintf(stderr, "pmi1_client: expected cmd=%s, got '%s'\n", expect, reply);
        return -1;
    }
    if (attr_get(reply, "rc", rc, sizeof(rc)) == 0 && strcmp(rc, "0") != 0) {
        fprintf(stderr, "pmi1_client: error reply '%s' to '%.*s'\n",
                reply, (int)strcspn(req, "\n"), req);
        return -1;
    }
    return 0;
}
