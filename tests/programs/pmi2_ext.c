/*
 * pmi2_ext.c - a raw PMI-2 wire client for dpm's PMI extensions (put hints,
 * waiting get, srcid, ring), which Slurm's libpmi2 has no calls for.  It
 * speaks the wire itself over PMI_FD: init, fullinit, then the steps given
 * on the command line, then finalize.
 *
 * Usage: pmi2_ext STEP...   (one argument per step, fields split at ':')
 *   put:KEY:VALUE[:HINT]    kvs-put (HINT: sparse, dense, or any word); rc=0 expected
 *   badput:KEY:VALUE:HINT   kvs-put that must be refused (rc != 0)
 *   get:KEY:SRCID:EXPECT    kvs-get; SRCID a rank, -1, or x (no srcid);
 *                           EXPECT the value, or - for not found
 *   wget:KEY:SRCID:EXPECT   the same with wait=TRUE; once the request is
 *                           sent, creates $EXT_SYNC_DIR/wget-KEY-R (R the
 *                           rank) if EXT_SYNC_DIR is set
 *   await:NAME              wait (at most 120 s) for $EXT_SYNC_DIR/NAME:
 *                           orders a step after another rank's, by what it
 *                           did rather than by time
 *   fence                   kvs-fence
 *   ring:VALUE              cmd=ring as Slurm's PMIX_Ring sends it
 *   sleep:MS
 * A step written "@R/STEP" runs on rank R only.  In any field {r} is the
 * rank, {n} the size, {r+1} and {r-1} the neighbours (modulo the size).
 *
 * Output lines start with "ext rank R"; an unexpected reply prints
 * "ext FAIL rank R ..." and exits 1; the last line is "ext ok rank R".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MSG_MAX 4096
#define FIELD_MAX 1100

static int pmi_fd = -1, my_rank = -1, job_size = 0;
static char jobid[256];

static void fail(const char *what, const char *detail)
{
    printf("ext FAIL rank %d %s: %s\n", my_rank, what, detail);
    fflush(stdout);
    exit(1);
}

static void write_all(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(pmi_fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            fail("write", strerror(errno));
        buf += n;
        len -= (size_t)n;
    }
}

static void read_all(char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = read(pmi_fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            fail("read", n == 0 ? "the server closed the connection" : strerror(errno));
        buf += n;
        len -= (size_t)n;
    }
}

static void send_msg(const char *body)
{
    char msg[MSG_MAX + 8];
    int len = snprintf(msg, sizeof msg, "%6d%s", (int)strlen(body), body);

    write_all(msg, (size_t)len);
}

/* Read one PMI-2 reply's body into reply. */
static void receive(char *reply)
{
    char header[7] = "";

    read_all(header, 6);
    int n = atoi(header);
    if (n <= 0 || n >= MSG_MAX)
        fail("reply length", header);
    read_all(reply, (size_t)n);
    reply[n] = '\0';
}

/* Send one PMI-2 message and read the reply's body into reply. */
static void exchange(const char *body, char *reply)
{
    send_msg(body);
    receive(reply);
}

/* $EXT_SYNC_DIR/name, or NULL without EXT_SYNC_DIR. */
static const char *sync_path(const char *name, char *path, size_t cap)
{
    const char *dir = getenv("EXT_SYNC_DIR");
    if (!dir)
        return NULL;
    snprintf(path, cap, "%s/%s", dir, name);
    return path;
}

static void mark(const char *name)
{
    char path[FIELD_MAX + 256];
    if (!sync_path(name, path, sizeof path))
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        fail("mark", path);
    close(fd);
}

static void await_mark(const char *name)
{
    char path[FIELD_MAX + 256];
    struct timespec pause = { 0, 10 * 1000 * 1000 };
    if (!sync_path(name, path, sizeof path))
        fail("await", "needs EXT_SYNC_DIR");
    for (int i = 0; access(path, F_OK) != 0; i++) {
        if (i >= 12000)
            fail("await: never appeared", path);
        nanosleep(&pause, NULL);
    }
}

/* The value of key in a `cmd=...;k=v;` body, or NULL. */
static const char *field(const char *body, const char *key, char *out)
{
    size_t klen = strlen(key);
    for (const char *p = body; p && *p; p = strchr(p, ';')) {
        if (*p == ';')
            p++;
        if (strncmp(p, key, klen) == 0 && p[klen] == '=') {
            const char *v = p + klen + 1;
            size_t vlen = strcspn(v, ";");
            if (vlen >= FIELD_MAX)
                vlen = FIELD_MAX - 1;
            memcpy(out, v, vlen);
            out[vlen] = '\0';
            return out;
        }
    }
    return NULL;
}

static int rc_of(const char *reply)
{
    char rc[FIELD_MAX];
    if (!field(reply, "rc", rc))
        fail("reply without rc", reply);
    return atoi(rc);
}

/* Copy src to dst replacing {r}, {n}, {r+1}, {r-1}. */
static void expand(const char *src, char *dst, size_t cap)
{
    size_t o = 0;
    while (*src && o + 12 < cap) {
        int v = -1, skip = 0;
        if (strncmp(src, "{r}", 3) == 0)
            v = my_rank, skip = 3;
        else if (strncmp(src, "{n}", 3) == 0)
            v = job_size, skip = 3;
        else if (strncmp(src, "{r+1}", 5) == 0)
            v = (my_rank + 1) % job_size, skip = 5;
        else if (strncmp(src, "{r-1}", 5) == 0)
            v = (my_rank + job_size - 1) % job_size, skip = 5;
        if (skip) {
            o += (size_t)snprintf(dst + o, cap - o, "%d", v);
            src += skip;
        } else {
            dst[o++] = *src++;
        }
    }
    dst[o] = '\0';
}

static void do_get(char **f, int nf, int wait)
{
    char body[MSG_MAX], reply[MSG_MAX], value[FIELD_MAX], found[FIELD_MAX];
    if (nf < 4)
        fail("get", "needs KEY:SRCID:EXPECT");
    const char *key = f[1], *src = f[2], *expect = f[3];
    int o = snprintf(body, sizeof body, "cmd=kvs-get;jobid=%s;", jobid);
    if (strcmp(src, "x") != 0)
        o += snprintf(body + o, sizeof body - o, "srcid=%s;", src);
    snprintf(body + o, sizeof body - o, "key=%s;%s", key, wait ? "wait=TRUE;" : "");
    send_msg(body);
    if (wait) {
        char name[FIELD_MAX + 32];
        snprintf(name, sizeof name, "wget-%s-%d", key, my_rank);
        mark(name);
    }
    receive(reply);
    int ok = rc_of(reply) == 0 && field(reply, "found", found) && strcmp(found, "TRUE") == 0 && field(reply, "value", value);
    if (!ok)
        strcpy(value, "-");
    if (wait)
        printf("ext rank %d wget %s = %s\n", my_rank, key, value);
    else
        printf("ext rank %d get %s = %s\n", my_rank, key, value);
    if (strcmp(value, expect) != 0) {
        char detail[3 * FIELD_MAX];
        snprintf(detail, sizeof detail, "%s = %s, expected %s (reply %.300s)", key, value, expect, reply);
        fail(wait ? "wget" : "get", detail);
    }
}

static void do_step(char **f, int nf)
{
    char body[MSG_MAX], reply[MSG_MAX], a[FIELD_MAX], b[FIELD_MAX], c[FIELD_MAX], d[FIELD_MAX];

    if (strcmp(f[0], "put") == 0 || strcmp(f[0], "badput") == 0) {
        int bad = f[0][0] == 'b';
        if (nf < 3 || (bad && nf < 4))
            fail(f[0], "needs KEY:VALUE[:HINT]");
        if (nf >= 4)
            snprintf(body, sizeof body, "cmd=kvs-put;key=%s;value=%s;hint=%s;", f[1], f[2], f[3]);
        else
            snprintf(body, sizeof body, "cmd=kvs-put;key=%s;value=%s;", f[1], f[2]);
        exchange(body, reply);
        if ((rc_of(reply) != 0) != bad)
            fail(f[0], reply);
        if (bad)
            printf("ext rank %d badput refused: %s\n", my_rank, field(reply, "errmsg", a) ? a : "(no errmsg)");
    } else if (strcmp(f[0], "get") == 0) {
        do_get(f, nf, 0);
    } else if (strcmp(f[0], "wget") == 0) {
        do_get(f, nf, 1);
    } else if (strcmp(f[0], "fence") == 0) {
        exchange("cmd=kvs-fence;", reply);
        if (rc_of(reply) != 0)
            fail("fence", reply);
    } else if (strcmp(f[0], "ring") == 0 && nf >= 2) {
        snprintf(body, sizeof body, "cmd=ring;ring-count=1;ring-left=%s;ring-right=%s;", f[1], f[1]);
        exchange(body, reply);
        if (rc_of(reply) != 0 || !field(reply, "ring-rank", a) || !field(reply, "ring-size", b)
            || !field(reply, "ring-left", c) || !field(reply, "ring-right", d))
            fail("ring", reply);
        printf("ext rank %d ring pos %s size %s left %s right %s\n", my_rank, a, b, c, d);
    } else if (strcmp(f[0], "await") == 0 && nf >= 2) {
        await_mark(f[1]);
    } else if (strcmp(f[0], "sleep") == 0 && nf >= 2) {
        long ms = atol(f[1]);
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    } else {
        fail("unknown step", f[0]);
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    char reply[MSG_MAX], body[MSG_MAX];
    const char *fd = getenv("PMI_FD"), *rank = getenv("PMI_RANK"), *size = getenv("PMI_SIZE");

    if (!fd || !rank || !size) {
        printf("ext FAIL needs PMI_FD, PMI_RANK and PMI_SIZE\n");
        return 1;
    }
    pmi_fd = atoi(fd);
    my_rank = atoi(rank);
    job_size = atoi(size);

    /* init travels in PMI-1 framing, whatever version it asks for. */
    const char *init = "cmd=init pmi_version=2 pmi_subversion=0\n";
    write_all(init, strlen(init));
    size_t got = 0;
    while (got < sizeof reply - 1) {
        read_all(reply + got, 1);
        if (reply[got++] == '\n')
            break;
    }
    reply[got] = '\0';
    if (strncmp(reply, "cmd=response_to_init", 20) != 0 || !strstr(reply, "rc=0"))
        fail("init", reply);
    snprintf(body, sizeof body, "cmd=fullinit;pmirank=%d;", my_rank);
    exchange(body, reply);
    if (rc_of(reply) != 0)
        fail("fullinit", reply);
    exchange("cmd=job-getid;", reply);
    if (!field(reply, "jobid", jobid))
        fail("job-getid", reply);

    for (int i = 1; i < argc; i++) {
        char step[MSG_MAX], *fields[8];
        const char *text = argv[i];
        if (text[0] == '@') {
            char *slash = strchr(text, '/');
            if (!slash)
                fail("step", text);
            if (atoi(text + 1) != my_rank)
                continue;
            text = slash + 1;
        }
        expand(text, step, sizeof step);
        int nf = 0;
        for (char *save = NULL, *tok = strtok_r(step, ":", &save); tok && nf < 8; tok = strtok_r(NULL, ":", &save))
            fields[nf++] = tok;
        if (nf == 0)
            fail("step", "empty");
        do_step(fields, nf);
    }

    exchange("cmd=finalize;", reply);
    close(pmi_fd);
    printf("ext ok rank %d\n", my_rank);
    return 0;
}
