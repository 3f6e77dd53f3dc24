/*
 * pmi_conn.h - the wire layer shared by libpmi (PMI-1) and libpmi2 (PMI-2).
 *
 * Owns: finding the server (PMI_FD, else PMI_PORT), sending whole
 * messages, reading replies in either framing into bounded buffers, and
 * splitting them into attributes. Knows nothing of commands: pmi1.c and
 * pmi2.c build requests with a pmi_buf and check the replies themselves.
 *
 * Framing (docs/pmi-wire.md §2.1, §3.1):
 *   PMI-1: one line, `cmd=NAME key=value key=value\n`;
 *   PMI-2: a 6-character decimal length, then `cmd=NAME;key=value;...;`.
 *
 * A connection that fails (closed by the server, I/O error, a reply that
 * cannot be framed) is marked failed and every later call on it fails at
 * once: the stream can no longer be trusted to be in step, and its fd
 * number may be reused by the program. A reply that is well framed but
 * too large for the buffers is skipped and reported (PMI_IO_TOOBIG); the
 * stream stays usable.
 */
#ifndef PMI_CONN_H
#define PMI_CONN_H

#include <stddef.h>

/* Largest reply accepted: a value is at most 1024 bytes, a ring reply
 * carries two, a spawn reply one error code per process. */
#define PMI_MSG_MAX 16384
/* Most attributes one reply may carry. */
#define PMI_MSG_ATTRS 128
/* Largest request: PMI-2's 6-digit length header cannot say more. */
#define PMI_REQ_MAX 999999

enum pmi_io {
    PMI_IO_OK = 0,
    PMI_IO_FAIL = -1,      /* connection closed or broken; it is now failed */
    PMI_IO_TOOBIG = -2,    /* the reply did not fit and was skipped */
    PMI_IO_NOMEM = -3,     /* a request could not be built (size, malloc) */
};

/* The server connection of one library. One request at a time: callers
 * hold their library's lock around send + receive. */
struct pmi_conn {
    int fd;                  /* -1 when there is none */
    int failed;              /* see the file header */
    int trace;               /* print every message to stderr (PMI_DEBUG) */
    const char *who;         /* prefix of messages: "dpm-pmi1", "dpm-pmi2" */
    size_t head, tail;       /* unread input is in[head..tail) */
    char in[PMI_MSG_MAX];
};

/* A reply split into attributes, in place. The first attribute is `cmd`. */
struct pmi_msg {
    char text[PMI_MSG_MAX + 1];
    int count;
    const char *keys[PMI_MSG_ATTRS];
    const char *vals[PMI_MSG_ATTRS];
};

/* A growing request buffer; b->bad records a failed append (too long or
 * out of memory), reported by pmi_conn_send. */
struct pmi_buf {
    char *data;
    size_t len, cap;
    int bad;
};

/* Connect as the environment says: 1 connected, 0 no PMI_FD or PMI_PORT
 * (a singleton), -1 error (message printed). trace_var names the variable
 * that turns tracing on (PMI_DEBUG or PMI2_DEBUG). */
int pmi_conn_open(struct pmi_conn *c, const char *who, const char *trace_var);
void pmi_conn_close(struct pmi_conn *c);

/* Send b's bytes (all of them); PMI_IO_*. Frees nothing. */
int pmi_conn_send(struct pmi_conn *c, const struct pmi_buf *b);

/* Read one PMI-1 line or one PMI-2 message into m; PMI_IO_*. */
int pmi_conn_recv_v1(struct pmi_conn *c, struct pmi_msg *m);
int pmi_conn_recv_v2(struct pmi_conn *c, struct pmi_msg *m);

/* The value of key in m, or NULL. */
const char *pmi_msg_get(const struct pmi_msg *m, const char *key);
/* The value of key as an int: 0, or -1 if absent or not a number. */
int pmi_msg_int(const struct pmi_msg *m, const char *key, int *out);
/* rc of the reply: 0 when absent (PMI-1 default), the number, or -1 when
 * it is not a number. */
int pmi_msg_rc(const struct pmi_msg *m);

/* Request building. pmi_buf_printf appends formatted text; pmi_buf_v2_begin
 * starts a PMI-2 message (room for the length, then `cmd=NAME;`),
 * pmi_buf_v2_pair appends `key=value;` and pmi_buf_v2_end fills in the
 * length. pmi_buf_free releases the memory. */
void pmi_buf_printf(struct pmi_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void pmi_buf_v2_begin(struct pmi_buf *b, const char *cmd);
void pmi_buf_v2_pair(struct pmi_buf *b, const char *key, const char *value);
void pmi_buf_v2_pair_int(struct pmi_buf *b, const char *key, long value);
void pmi_buf_v2_end(struct pmi_buf *b);
void pmi_buf_free(struct pmi_buf *b);

/* Check an argument before it goes on the wire: null_code for NULL,
 * bad_code when empty or holding any character of bad, length_code when
 * longer than max bytes, else 0. */
int pmi_word_check(const char *s, const char *bad, size_t max,
                   int null_code, int bad_code, int length_code);

/* Check an output buffer of len bytes: null_code for NULL, length_code
 * for no room, else 0. */
int pmi_out_check(const void *buf, int len, int null_code, int length_code);

/* Copy src into dst of cap bytes, NUL-terminated: 0, or -1 when it had to
 * be cut (cap <= 0 writes nothing). */
int pmi_copy_out(char *dst, int cap, const char *src);

/* Parse "a,b,c" into at most cap ints; the count, or -1 on a bad number. */
int pmi_parse_int_list(const char *text, int *out, int cap);

/* An environment variable as an int: 0, or -1 if unset or not a number. */
int pmi_env_int(const char *name, int *out);

#endif
