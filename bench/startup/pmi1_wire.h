/*
 * pmi1_wire.h: a minimal PMI-1 wire client, only what the benchmark needs.
 *
 * PMI-1 is line based (pmi-wire.md §2.1): every request and every reply is
 * one ASCII line, `cmd=<name>` then space-separated `key=value` tokens, then
 * '\n'. The client has one request outstanding at a time, so a call is:
 * send one line, read one line, check its command name and `rc`.
 *
 * The reader keeps its own buffer: a reply may arrive split over several
 * reads, and bytes past the first '\n' are kept for the next call.
 * No escaping is done or undone (MPICH never escapes, §7 item 8).
 */
#ifndef PMI1_WIRE_H
#define PMI1_WIRE_H

#include <stddef.h>

/* Longest line we accept; Hydra's replies stay under ~1.1 KiB. */
#define PMI1_LINE_MAX 4096

struct pmi1_conn {
    int fd;
    size_t len;                 /* bytes held in buf */
    char buf[PMI1_LINE_MAX];
};

/* Take the connection from PMI_FD; return 0, or -1 with a message printed. */
int conn_open(struct pmi1_conn *c);

/* Write one whole request line (must end in '\n'); 0 or -1. */
int line_send(struct pmi1_conn *c, const char *line);

/* Read one reply line into out (without the '\n'); 0 or -1 (EOF, error,
 * line too long). */
int line_recv(struct pmi1_conn *c, char *out, size_t cap);

/* Copy the value of token `key` of a reply line into out; 0 if found,
 * -1 if absent or too long. The value runs to the next space. */
int attr_get(const char *line, const char *key, char *out, size_t cap);

/* Send req, read the reply into reply, and check that it is
 * `cmd=<expect>` with rc absent or 0; 0 or -1 with a message printed. */
int conn_call(struct pmi1_conn *c, const char *req, const char *expect,
              char *reply, size_t cap);

#endif
