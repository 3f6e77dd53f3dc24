/*
 * pmi_conn.c - the wire layer shared by libpmi and libpmi2; see pmi_conn.h.
 */
#include "pmi_conn.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Size of PMI-2's length header. */
#define V2_HEADER 6

static void conn_fail(struct pmi_conn *c, const char *what, int err)
{
    if (!c->failed) {
        if (err != 0)
            fprintf(stderr, "%s: PMI connection %s: %s\n", c->who, what, strerror(err));
        else
            fprintf(stderr, "%s: PMI connection %s\n", c->who, what);
    }
    c->failed = 1;
}

/* s as a whole decimal int: 0, or -1 (NULL, empty, junk, out of range). */
static int int_parse(const char *s, int *out)
{
    char *end;
    long v;

    if (s == NULL || *s == '\0')
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < INT_MIN || v > INT_MAX)
        return -1;
    *out = (int)v;
    return 0;
}

int pmi_env_int(const char *name, int *out)
{
    return int_parse(getenv(name), out);
}

/* PMI_PORT=host:port: a TCP connection with Nagle off (one small request,
 * one small reply: delaying either only adds latency). */
static int port_connect(struct pmi_conn *c, const char *spec)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    struct addrinfo hints, *list = NULL, *ai;
    int fd = -1, one = 1, rc;

    if (colon == NULL || colon == spec || (size_t)(colon - spec) >= sizeof host || colon[1] == '\0') {
        fprintf(stderr, "%s: PMI_PORT='%s' is not host:port\n", c->who, spec);
        return -1;
    }
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(host, colon + 1, &hints, &list);
    if (rc != 0) {
        fprintf(stderr, "%s: PMI_PORT='%s': %s\n", c->who, spec, gai_strerror(rc));
        return -1;
    }
    for (ai = list; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(list);
    if (fd < 0) {
        fprintf(stderr, "%s: cannot connect to PMI_PORT='%s': %s\n", c->who, spec, strerror(errno));
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int pmi_conn_open(struct pmi_conn *c, const char *who, const char *trace_var)
{
    const char *port = getenv("PMI_PORT");
    int fd, trace = 0;

    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->who = who;
    c->trace = pmi_env_int(trace_var, &trace) == 0 && trace != 0;
    if (getenv("PMI_FD") != NULL) {
        if (pmi_env_int("PMI_FD", &fd) < 0 || fd < 0) {
            fprintf(stderr, "%s: PMI_FD='%s' is not a file descriptor\n", who, getenv("PMI_FD"));
            return -1;
        }
        c->fd = fd;
        return 1;
    }
    if (port != NULL) {
        c->fd = port_connect(c, port);
        return c->fd < 0 ? -1 : 1;
    }
    return 0;
}

void pmi_conn_close(struct pmi_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->head = c->tail = 0;
}

/* Print a message as the wire carries it, without its trailing newline. */
static void trace_print(const struct pmi_conn *c, char dir, const char *data, size_t len)
{
    while (len > 0 && data[len - 1] == '\n')
        len--;
    fprintf(stderr, "%s %c: %.*s\n", c->who, dir, (int)len, data);
}

int pmi_conn_send(struct pmi_conn *c, const struct pmi_buf *b)
{
    size_t done = 0;

    if (b->bad || b->data == NULL)
        return PMI_IO_NOMEM;
    if (c->failed || c->fd < 0)
        return PMI_IO_FAIL;
    if (c->trace)
        trace_print(c, 'C', b->data, b->len);
    while (done < b->len) {
        /* MSG_NOSIGNAL: a closed peer must give an error code, not kill
         * the program with SIGPIPE. A PMI_FD that is not a socket (a
         * pipe) takes plain write(). */
        ssize_t n = send(c->fd, b->data + done, b->len - done, MSG_NOSIGNAL);
        if (n < 0 && errno == ENOTSOCK)
            n = write(c->fd, b->data + done, b->len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            conn_fail(c, "write failed", n < 0 ? errno : 0);
            return PMI_IO_FAIL;
        }
        done += (size_t)n;
    }
    return PMI_IO_OK;
}

/* Read more input after what is buffered; PMI_IO_OK or PMI_IO_FAIL. */
static int conn_fill(struct pmi_conn *c)
{
    ssize_t n;

    if (c->head > 0) {
        memmove(c->in, c->in + c->head, c->tail - c->head);
        c->tail -= c->head;
        c->head = 0;
    }
    do {
        n = read(c->fd, c->in + c->tail, sizeof c->in - c->tail);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
        conn_fail(c, n == 0 ? "closed by the server" : "read failed", n < 0 ? errno : 0);
        return PMI_IO_FAIL;
    }
    c->tail += (size_t)n;
    return PMI_IO_OK;
}

/* Take exactly len bytes of input into out (NULL: drop them). */
static int conn_take(struct pmi_conn *c, char *out, size_t len)
{
    while (len > 0) {
        size_t n;

        if (c->head == c->tail && conn_fill(c) != PMI_IO_OK)
            return PMI_IO_FAIL;
        n = c->tail - c->head < len ? c->tail - c->head : len;
        if (out != NULL) {
            memcpy(out, c->in + c->head, n);
            out += n;
        }
        c->head += n;
        len -= n;
    }
    return PMI_IO_OK;
}

static void msg_add(struct pmi_msg *m, const char *key, const char *val, int *overflow)
{
    if (m->count == PMI_MSG_ATTRS) {
        *overflow = 1;
        return;
    }
    m->keys[m->count] = key;
    m->vals[m->count] = val;
    m->count++;
}

/* Split m->text, one PMI-1 line: tokens separated by spaces, each
 * key=value (the value runs to the next space); bare words are ignored. */
static int msg_split_v1(struct pmi_msg *m)
{
    char *p = m->text;
    int overflow = 0;

    m->count = 0;
    while (*p != '\0') {
        char *end = strchr(p, ' ');
        char *eq;

        if (end != NULL)
            *end = '\0';
        eq = strchr(p, '=');
        if (eq != NULL && eq != p) {
            *eq = '\0';
            msg_add(m, p, eq + 1, &overflow);
        }
        if (end == NULL)
            break;
        p = end + 1;
    }
    return overflow ? PMI_IO_TOOBIG : PMI_IO_OK;
}

/* Split m->text, one PMI-2 body: `key=value;` pairs. `;;` inside a value
 * stands for one `;` (the PMI-2 design's escape, which Slurm's server
 * uses; MPICH and dpm never send it). */
static int msg_split_v2(struct pmi_msg *m)
{
    char *p = m->text;
    int overflow = 0;

    m->count = 0;
    while (*p != '\0') {
        char *key = p, *val, *out;
        char *eq = strchr(p, '=');

        if (eq == NULL)
            break;              /* trailing junk without '=': ignored */
        *eq = '\0';
        val = out = eq + 1;
        for (p = val; *p != '\0'; p++) {
            if (*p == ';' && p[1] == ';')
                p++;
            else if (*p == ';')
                break;
            *out++ = *p;
        }
        if (*p == ';')
            p++;
        *out = '\0';
        if (*key != '\0')
            msg_add(m, key, val, &overflow);
    }
    return overflow ? PMI_IO_TOOBIG : PMI_IO_OK;
}

int pmi_conn_recv_v1(struct pmi_conn *c, struct pmi_msg *m)
{
    size_t scanned = 0;

    if (c->failed || c->fd < 0)
        return PMI_IO_FAIL;
    for (;;) {
        char *nl = memchr(c->in + c->head + scanned, '\n', c->tail - c->head - scanned);

        if (nl != NULL) {
            size_t len = (size_t)(nl - (c->in + c->head));

            memcpy(m->text, c->in + c->head, len);
            m->text[len] = '\0';
            c->head += len + 1;
            if (c->trace)
                trace_print(c, 'S', m->text, len);
            return msg_split_v1(m);
        }
        scanned = c->tail - c->head;
        if (scanned == sizeof c->in) {
            /* A line longer than any reply we expect: drop it up to its
             * newline so the stream stays in step. */
            c->head = c->tail = 0;
            for (;;) {
                if (conn_fill(c) != PMI_IO_OK)
                    return PMI_IO_FAIL;
                nl = memchr(c->in, '\n', c->tail);
                if (nl != NULL) {
                    c->head = (size_t)(nl - c->in) + 1;
                    return PMI_IO_TOOBIG;
                }
                c->tail = 0;
            }
        }
        if (conn_fill(c) != PMI_IO_OK)
            return PMI_IO_FAIL;
    }
}

int pmi_conn_recv_v2(struct pmi_conn *c, struct pmi_msg *m)
{
    char header[V2_HEADER + 1];
    char *end;
    long len;

    if (c->failed || c->fd < 0)
        return PMI_IO_FAIL;
    if (conn_take(c, header, V2_HEADER) != PMI_IO_OK)
        return PMI_IO_FAIL;
    header[V2_HEADER] = '\0';
    /* MPICH right-aligns the length, Slurm left-aligns it: allow blanks on
     * either side. */
    len = strtol(header, &end, 10);
    while (*end == ' ')
        end++;
    if (end == header || *end != '\0' || len <= 0) {
        conn_fail(c, "sent a reply without a PMI-2 length header", 0);
        return PMI_IO_FAIL;
    }
    if ((size_t)len > PMI_MSG_MAX) {
        if (conn_take(c, NULL, (size_t)len) != PMI_IO_OK)
            return PMI_IO_FAIL;
        fprintf(stderr, "%s: PMI reply of %ld bytes is larger than %d; skipped\n",
                c->who, len, PMI_MSG_MAX);
        return PMI_IO_TOOBIG;
    }
    if (conn_take(c, m->text, (size_t)len) != PMI_IO_OK)
        return PMI_IO_FAIL;
    m->text[len] = '\0';
    if (c->trace)
        trace_print(c, 'S', m->text, (size_t)len);
    return msg_split_v2(m);
}

const char *pmi_msg_get(const struct pmi_msg *m, const char *key)
{
    for (int i = 0; i < m->count; i++)
        if (strcmp(m->keys[i], key) == 0)
            return m->vals[i];
    return NULL;
}

int pmi_msg_int(const struct pmi_msg *m, const char *key, int *out)
{
    return int_parse(pmi_msg_get(m, key), out);
}

int pmi_msg_rc(const struct pmi_msg *m)
{
    int rc;

    if (pmi_msg_get(m, "rc") == NULL)
        return 0;
    return pmi_msg_int(m, "rc", &rc) == 0 ? rc : -1;
}

static void buf_reserve(struct pmi_buf *b, size_t more)
{
    size_t want = b->len + more + 1;
    char *data;

    if (b->bad)
        return;
    if (want > PMI_REQ_MAX + V2_HEADER + 1) {
        b->bad = 1;
        return;
    }
    if (want <= b->cap)
        return;
    if (want < 256)
        want = 256;
    if (want < 2 * b->cap)
        want = 2 * b->cap;
    data = realloc(b->data, want);
    if (data == NULL) {
        b->bad = 1;
        return;
    }
    b->data = data;
    b->cap = want;
}

void pmi_buf_printf(struct pmi_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->bad = 1;
        return;
    }
    buf_reserve(b, (size_t)n);
    if (b->bad)
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void pmi_buf_v2_begin(struct pmi_buf *b, const char *cmd)
{
    pmi_buf_printf(b, "%*s", V2_HEADER, "");
    pmi_buf_printf(b, "cmd=%s;", cmd);
}

void pmi_buf_v2_pair(struct pmi_buf *b, const char *key, const char *value)
{
    pmi_buf_printf(b, "%s=%s;", key, value);
}

void pmi_buf_v2_pair_int(struct pmi_buf *b, const char *key, long value)
{
    pmi_buf_printf(b, "%s=%ld;", key, value);
}

void pmi_buf_v2_end(struct pmi_buf *b)
{
    char header[V2_HEADER + 1];

    if (b->bad || b->len < V2_HEADER || b->len - V2_HEADER > PMI_REQ_MAX) {
        b->bad = 1;
        return;
    }
    /* Right-aligned, as MPICH writes it. */
    snprintf(header, sizeof header, "%*zu", V2_HEADER, b->len - V2_HEADER);
    memcpy(b->data, header, V2_HEADER);
}

void pmi_buf_free(struct pmi_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

int pmi_word_check(const char *s, const char *bad, size_t max,
                   int null_code, int bad_code, int length_code)
{
    size_t len;

    if (s == NULL)
        return null_code;
    len = strlen(s);
    if (len == 0 || strpbrk(s, bad) != NULL)
        return bad_code;
    return len > max ? length_code : 0;
}

int pmi_out_check(const void *buf, int len, int null_code, int length_code)
{
    if (buf == NULL)
        return null_code;
    return len <= 0 ? length_code : 0;
}

int pmi_copy_out(char *dst, int cap, const char *src)
{
    size_t len = strlen(src);

    if (cap <= 0)
        return -1;
    if (len < (size_t)cap) {
        memcpy(dst, src, len + 1);
        return 0;
    }
    memcpy(dst, src, (size_t)cap - 1);
    dst[cap - 1] = '\0';
    return -1;
}

int pmi_parse_int_list(const char *text, int *out, int cap)
{
    const char *p = text;
    int n = 0;

    while (*p != '\0' && n < cap) {
        char *end;
        long v;

        errno = 0;
        v = strtol(p, &end, 10);
        if (end == p || errno != 0 || v < INT_MIN || v > INT_MAX || (*end != ',' && *end != '\0'))
            return -1;
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}
