/*
 * pmi1.c - dpm's libpmi: the PMI-1 client API of include/pmi.h.
 *
 * Owns the PMI-1 commands as MPICH 5 sends them and Hydra and dpm answer
 * them (docs/pmi-wire.md §2): the init sequence (with the `initack`
 * handshake in PMI_PORT mode), put/get/barrier, universe size, appnum,
 * the name service, `mcmd=spawn` blocks, finalize and abort. Every call
 * sends one line and reads one reply line under one lock. A reply with
 * rc != 0 and a broken connection both return PMI_FAIL (PMI-1 has no code
 * for "refused"); a broken connection stays broken (pmi_conn.h) and says
 * so once on stderr.
 *
 * The connection stays open after PMI_Finalize, as in MPICH: a later
 * PMI_Init runs the handshake on it again (dpm accepts that; Hydra closes
 * its end at finalize).
 *
 * Singleton (no PMI_FD, no PMI_PORT): size 1, rank 0, the KVS and names
 * are pmi_tables in this process; spawn returns PMI_FAIL.
 */
#include <pmi.h>

#include "pmi_conn.h"
#include "pmi_table.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

#define LIBRARY_VERSION "dpm libpmi 1.0"

/* Limits when the server does not say (a singleton): Hydra's values. */
#define DEFAULT_KVSNAME_MAX 256
#define DEFAULT_KEYLEN_MAX 64
#define DEFAULT_VALLEN_MAX 1024

enum state { STATE_NONE, STATE_SINGLETON, STATE_CONNECTED };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Everything below is guarded by lock. */
static struct {
    enum state state;
    int connected;          /* conn is open (it outlives PMI_Finalize) */
    int rank, size, appnum, spawned;
    int kvsname_max, keylen_max, vallen_max;
    char kvsname[DEFAULT_KVSNAME_MAX + 1];
    struct pmi_conn conn;
    struct pmi_msg reply;
    struct pmi_table kvs, names;    /* singleton only */
} g;

EXPORT const char *dpm_pmi_library_version(void)
{
    return LIBRARY_VERSION;
}

/* ---- argument checks ---------------------------------------------------- */

/* PMI-1 splits on spaces and ends at a newline, and never escapes; the
 * server's maxima count the NUL. */
static int word_check(const char *s, int max, int bad_code, int length_code)
{
    return pmi_word_check(s, " \n\r", (size_t)max - 1, PMI_ERR_INVALID_ARG, bad_code, length_code);
}

static int key_check(const char *key)
{
    if (key != NULL && strchr(key, '=') != NULL)
        return PMI_ERR_INVALID_KEY;
    return word_check(key, g.keylen_max, PMI_ERR_INVALID_KEY, PMI_ERR_INVALID_KEY_LENGTH);
}

static int value_check(const char *value)
{
    return word_check(value, g.vallen_max, PMI_ERR_INVALID_VAL, PMI_ERR_INVALID_VAL_LENGTH);
}

static int out_check(const void *buf, int len)
{
    return pmi_out_check(buf, len, PMI_ERR_INVALID_ARG, PMI_ERR_INVALID_LENGTH);
}

static int service_check(const char *name)
{
    return word_check(name, DEFAULT_VALLEN_MAX, PMI_ERR_INVALID_KEY, PMI_ERR_INVALID_KEY_LENGTH);
}

/* ---- one request, one reply --------------------------------------------- */

/* Send req (freed here), read the reply line into g.reply, check that it
 * is `cmd=<expect>` with rc 0 (or no rc). */
static int call(struct pmi_buf *req, const char *expect)
{
    const char *name;
    int io = pmi_conn_send(&g.conn, req);

    pmi_buf_free(req);
    if (io == PMI_IO_OK)
        io = pmi_conn_recv_v1(&g.conn, &g.reply);
    if (io == PMI_IO_NOMEM || io == PMI_IO_TOOBIG)
        return PMI_ERR_NOMEM;
    if (io != PMI_IO_OK)
        return PMI_FAIL;
    name = pmi_msg_get(&g.reply, "cmd");
    if (pmi_msg_rc(&g.reply) != 0)
        return PMI_FAIL;
    if (name == NULL || strcmp(name, expect) != 0) {
        fprintf(stderr, "dpm-pmi1: expected cmd=%s, got %s\n", expect, name ? name : "(no cmd)");
        g.conn.failed = 1;
        return PMI_FAIL;
    }
    return PMI_SUCCESS;
}

/* A request of one formatted line. */
static int call_line(const char *expect, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int call_line(const char *expect, const char *fmt, ...)
{
    struct pmi_buf req = { 0 };
    char line[2 * DEFAULT_VALLEN_MAX + 512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line)
        return PMI_ERR_NOMEM;
    pmi_buf_printf(&req, "%s", line);
    return call(&req, expect);
}

/* Start a call: PMI_ERR_INIT before PMI_Init, else PMI_SUCCESS with the
 * lock held (released by done()). */
static int begin(void)
{
    pthread_mutex_lock(&lock);
    if (g.state != STATE_NONE)
        return PMI_SUCCESS;
    pthread_mutex_unlock(&lock);
    return PMI_ERR_INIT;
}

static int done(int rc)
{
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- init and finalize -------------------------------------------------- */

/* PMI_PORT mode: name our rank to the server; the reply line is followed
 * by three `cmd=set` lines repeating size and rank (pmi-wire.md §2.2). */
static int initack(void)
{
    int id, rc;

    if (pmi_env_int("PMI_ID", &id) < 0) {
        fprintf(stderr, "dpm-pmi1: PMI_PORT is set but PMI_ID is not\n");
        return PMI_FAIL;
    }
    rc = call_line("initack", "cmd=initack pmiid=%d\n", id);
    if (rc != PMI_SUCCESS)
        return rc;
    if (pmi_msg_int(&g.reply, "rank", &g.rank) < 0 || pmi_msg_int(&g.reply, "size", &g.size) < 0)
        return PMI_FAIL;
    if (pmi_msg_get(&g.reply, "spawner-jobid") != NULL)
        g.spawned = 1;
    for (int i = 0; i < 3; i++) {
        if (pmi_conn_recv_v1(&g.conn, &g.reply) != PMI_IO_OK)
            return PMI_FAIL;
        pmi_msg_int(&g.reply, "size", &g.size);
        pmi_msg_int(&g.reply, "rank", &g.rank);
    }
    return PMI_SUCCESS;
}

/* The sequence MPICH's PMI_Init runs: init, get_maxes, get_appnum,
 * get_my_kvsname. */
static int handshake(void)
{
    const char *kvsname;
    int rc;

    rc = call_line("response_to_init", "cmd=init pmi_version=%d pmi_subversion=%d\n",
                   PMI_VERSION, PMI_SUBVERSION);
    if (rc == PMI_SUCCESS)
        rc = call_line("maxes", "cmd=get_maxes\n");
    if (rc != PMI_SUCCESS)
        return rc;
    if (pmi_msg_int(&g.reply, "kvsname_max", &g.kvsname_max) < 0 || g.kvsname_max <= 1
        || pmi_msg_int(&g.reply, "keylen_max", &g.keylen_max) < 0 || g.keylen_max <= 1
        || pmi_msg_int(&g.reply, "vallen_max", &g.vallen_max) < 0 || g.vallen_max <= 1)
        return PMI_FAIL;
    /* Our buffers bound what we accept, whatever the server allows. */
    if (g.kvsname_max > DEFAULT_KVSNAME_MAX + 1)
        g.kvsname_max = DEFAULT_KVSNAME_MAX + 1;
    if (g.vallen_max > PMI_MAX_PORT_NAME)
        g.vallen_max = PMI_MAX_PORT_NAME;
    rc = call_line("appnum", "cmd=get_appnum\n");
    if (rc == PMI_SUCCESS && pmi_msg_int(&g.reply, "appnum", &g.appnum) < 0)
        rc = PMI_FAIL;
    if (rc == PMI_SUCCESS)
        rc = call_line("my_kvsname", "cmd=get_my_kvsname\n");
    if (rc != PMI_SUCCESS)
        return rc;
    kvsname = pmi_msg_get(&g.reply, "kvsname");
    if (kvsname == NULL || pmi_copy_out(g.kvsname, sizeof g.kvsname, kvsname) < 0)
        return PMI_FAIL;
    return PMI_SUCCESS;
}

/* Open the connection on the first PMI_Init: 1 connected, 0 singleton,
 * or an error code. */
static int connect_first(void)
{
    int port_mode = getenv("PMI_FD") == NULL && getenv("PMI_PORT") != NULL;
    int spawned = 0;

    switch (pmi_conn_open(&g.conn, "dpm-pmi1", "PMI_DEBUG")) {
    case 0:
        return 0;
    case 1:
        break;
    default:
        return PMI_FAIL;
    }
    g.connected = 1;
    /* Socket mode: the environment names us; MPICH's defaults when a
     * variable is missing. */
    g.rank = 0;
    g.size = 1;
    pmi_env_int("PMI_RANK", &g.rank);
    pmi_env_int("PMI_SIZE", &g.size);
    g.spawned = pmi_env_int("PMI_SPAWNED", &spawned) == 0 && spawned != 0;
    return port_mode ? (initack() == PMI_SUCCESS ? 1 : PMI_FAIL) : 1;
}

EXPORT int PMI_Init(int *spawned)
{
    int rc = PMI_SUCCESS;

    if (spawned == NULL)
        return PMI_ERR_INVALID_ARG;
    pthread_mutex_lock(&lock);
    if (g.state == STATE_NONE) {
        int how = g.connected ? 1 : connect_first();

        g.kvsname_max = DEFAULT_KVSNAME_MAX;
        g.keylen_max = DEFAULT_KEYLEN_MAX;
        g.vallen_max = DEFAULT_VALLEN_MAX;
        if (how == 0) {
            g.rank = 0;
            g.size = 1;
            g.appnum = 0;
            g.spawned = 0;
            snprintf(g.kvsname, sizeof g.kvsname, "singleton-%ld", (long)getpid());
            g.state = STATE_SINGLETON;
        } else if (how == 1 && (rc = handshake()) == PMI_SUCCESS) {
            g.state = STATE_CONNECTED;
        } else {
            if (how != 1)
                rc = how;
            pmi_conn_close(&g.conn);
            g.connected = 0;
        }
    }
    if (rc == PMI_SUCCESS)
        *spawned = g.spawned ? PMI_TRUE : PMI_FALSE;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT int PMI_Initialized(int *initialized)
{
    if (initialized == NULL)
        return PMI_ERR_INVALID_ARG;
    pthread_mutex_lock(&lock);
    *initialized = g.state != STATE_NONE ? PMI_TRUE : PMI_FALSE;
    pthread_mutex_unlock(&lock);
    return PMI_SUCCESS;
}

EXPORT int PMI_Finalize(void)
{
    int rc = begin();

    if (rc != PMI_SUCCESS)
        return rc;
    if (g.state == STATE_CONNECTED)
        rc = call_line("finalize_ack", "cmd=finalize\n");
    pmi_table_clear(&g.kvs);
    pmi_table_clear(&g.names);
    g.state = STATE_NONE;
    return done(rc);
}

EXPORT int PMI_Abort(int exit_code, const char error_msg[])
{
    char text[DEFAULT_VALLEN_MAX];
    /* Another thread may hold the lock in a blocking call (a barrier);
     * an abort must get out all the same. */
    int locked = pthread_mutex_trylock(&lock) == 0;

    snprintf(text, sizeof text, "%s", error_msg != NULL && *error_msg != '\0' ? error_msg : "abort");
    if (g.state == STATE_CONNECTED && !g.conn.failed) {
        struct pmi_buf req = { 0 };

        /* The message is one PMI-1 word: blanks become '_'. No reply comes. */
        for (char *p = text; *p != '\0'; p++)
            if (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
                *p = '_';
        pmi_buf_printf(&req, "cmd=abort exitcode=%d message=%s\n", exit_code, text);
        pmi_conn_send(&g.conn, &req);
        pmi_buf_free(&req);
    } else {
        fprintf(stderr, "dpm-pmi1: abort: %s\n", text);
    }
    if (locked)
        pthread_mutex_unlock(&lock);
    exit(exit_code);
}

/* ---- job facts ---------------------------------------------------------- */

/* Return one int from g (after init), for the getters below. */
static int int_out(int *out, const int *field)
{
    int rc;

    if (out == NULL)
        return PMI_ERR_INVALID_ARG;
    if ((rc = begin()) != PMI_SUCCESS)
        return rc;
    *out = *field;
    return done(PMI_SUCCESS);
}

EXPORT int PMI_Get_size(int *size) { return int_out(size, &g.size); }
EXPORT int PMI_Get_rank(int *rank) { return int_out(rank, &g.rank); }
EXPORT int PMI_Get_appnum(int *appnum) { return int_out(appnum, &g.appnum); }
EXPORT int PMI_KVS_Get_name_length_max(int *length) { return int_out(length, &g.kvsname_max); }
EXPORT int PMI_KVS_Get_key_length_max(int *length) { return int_out(length, &g.keylen_max); }
EXPORT int PMI_KVS_Get_value_length_max(int *length) { return int_out(length, &g.vallen_max); }

EXPORT int PMI_Get_universe_size(int *size)
{
    int rc;

    if (size == NULL)
        return PMI_ERR_INVALID_ARG;
    if ((rc = begin()) != PMI_SUCCESS)
        return rc;
    if (g.state == STATE_SINGLETON) {
        *size = 1;
        return done(PMI_SUCCESS);
    }
    /* Asked each time: it is not fixed for the life of a job. */
    rc = call_line("universe_size", "cmd=get_universe_size\n");
    if (rc == PMI_SUCCESS && pmi_msg_int(&g.reply, "size", size) < 0)
        rc = PMI_FAIL;
    return done(rc);
}

EXPORT int PMI_KVS_Get_my_name(char kvsname[], int length)
{
    int rc;

    if ((rc = out_check(kvsname, length)) != PMI_SUCCESS || (rc = begin()) != PMI_SUCCESS)
        return rc;
    return done(pmi_copy_out(kvsname, length, g.kvsname) < 0 ? PMI_ERR_NOMEM : PMI_SUCCESS);
}

/* ---- key-value store ---------------------------------------------------- */

EXPORT int PMI_KVS_Put(const char kvsname[], const char key[], const char value[])
{
    int rc;

    if ((rc = begin()) != PMI_SUCCESS)
        return rc;
    if ((rc = word_check(kvsname, g.kvsname_max, PMI_ERR_INVALID_ARG, PMI_ERR_INVALID_ARG)) != PMI_SUCCESS
        || (rc = key_check(key)) != PMI_SUCCESS || (rc = value_check(value)) != PMI_SUCCESS)
        return done(rc);
    if (g.state == STATE_SINGLETON) {
        if (strcmp(kvsname, g.kvsname) != 0)
            return done(PMI_FAIL);
        return done(pmi_table_put(&g.kvs, key, value) == 0 ? PMI_SUCCESS : PMI_ERR_NOMEM);
    }
    return done(call_line("put_result", "cmd=put kvsname=%s key=%s value=%s\n", kvsname, key, value));
}

EXPORT int PMI_KVS_Commit(const char kvsname[])
{
    int rc;

    if (kvsname == NULL)
        return PMI_ERR_INVALID_ARG;
    /* Nothing is held back: every put was sent when it was made. */
    if ((rc = begin()) != PMI_SUCCESS)
        return rc;
    return done(PMI_SUCCESS);
}

EXPORT int PMI_KVS_Get(const char kvsname[], const char key[], char value[], int length)
{
    const char *v;
    int rc;

    if ((rc = out_check(value, length)) != PMI_SUCCESS || (rc = begin()) != PMI_SUCCESS)
        return rc;
    if ((rc = word_check(kvsname, g.kvsname_max, PMI_ERR_INVALID_ARG, PMI_ERR_INVALID_ARG)) != PMI_SUCCESS
        || (rc = key_check(key)) != PMI_SUCCESS)
        return done(rc);
    if (g.state == STATE_SINGLETON) {
        v = strcmp(kvsname, g.kvsname) == 0 ? pmi_table_get(&g.kvs, key) : NULL;
        rc = v != NULL ? PMI_SUCCESS : PMI_FAIL;
    } else {
        rc = call_line("get_result", "cmd=get kvsname=%s key=%s\n", kvsname, key);
        v = pmi_msg_get(&g.reply, "value");
        if (rc == PMI_SUCCESS && v == NULL)
            rc = PMI_FAIL;
    }
    if (rc == PMI_SUCCESS && pmi_copy_out(value, length, v) < 0)
        rc = PMI_ERR_NOMEM;
    return done(rc);
}

EXPORT int PMI_Barrier(void)
{
    int rc = begin();

    if (rc != PMI_SUCCESS)
        return rc;
    if (g.state == STATE_SINGLETON)
        return done(PMI_SUCCESS);
    return done(call_line("barrier_out", "cmd=barrier_in\n"));
}

/* ---- name service ------------------------------------------------------- */

EXPORT int PMI_Publish_name(const char service_name[], const char port[])
{
    int rc;

    if ((rc = begin()) != PMI_SUCCESS)
        return rc;
    if ((rc = service_check(service_name)) != PMI_SUCCESS
        || (rc = value_check(port)) != PMI_SUCCESS)
        return done(rc);
    if (g.state == STATE_SINGLETON) {
        if (pmi_table_get(&g.names, service_name) != NULL)
            return done(PMI_FAIL);
        return done(pmi_table_put(&g.names, service_name, port) == 0 ? PMI_SUCCESS : PMI_ERR_NOMEM);
    }
    return done(call_line("publish_result", "cmd=publish_name service=%s port=%s\n", service_name, port));
}

EXPORT int PMI_Unpublish_name(const char service_name[])
{
    int rc;

    if ((rc = begin()) != PMI_SUCCESS)
        return rc;
    if ((rc = service_check(service_name)) != PMI_SUCCESS)
        return done(rc);
    if (g.state == STATE_SINGLETON)
        return done(pmi_table_remove(&g.names, service_name) == 0 ? PMI_SUCCESS : PMI_FAIL);
    return done(call_line("unpublish_result", "cmd=unpublish_name service=%s\n", service_name));
}

EXPORT int PMI_Lookup_name(const char service_name[], char port[])
{
    const char *found;
    int rc;

    if (port == NULL)
        return PMI_ERR_INVALID_ARG;
    if ((rc = begin()) != PMI_SUCCESS)
        return rc;
    if ((rc = service_check(service_name)) != PMI_SUCCESS)
        return done(rc);
    if (g.state == STATE_SINGLETON) {
        found = pmi_table_get(&g.names, service_name);
        rc = found != NULL ? PMI_SUCCESS : PMI_FAIL;
    } else {
        rc = call_line("lookup_result", "cmd=lookup_name service=%s\n", service_name);
        found = pmi_msg_get(&g.reply, "port");
        if (rc == PMI_SUCCESS && found == NULL)
            rc = PMI_FAIL;
    }
    if (rc == PMI_SUCCESS && pmi_copy_out(port, PMI_MAX_PORT_NAME, found) < 0)
        rc = PMI_ERR_NOMEM;
    return done(rc);
}

/* ---- spawn -------------------------------------------------------------- */

/* Values of an mcmd block run to the end of their line: anything but a
 * newline may be in them (pmi-wire.md §2.3). */
static int line_check(const char *s)
{
    if (s == NULL)
        return PMI_ERR_INVALID_ARG;
    return strpbrk(s, "\n\r") != NULL ? PMI_ERR_INVALID_VAL : PMI_SUCCESS;
}

static int argv_count(const char **argvs[], int c)
{
    int n = 0;

    if (argvs != NULL && argvs[c] != NULL)
        while (argvs[c][n] != NULL)
            n++;
    return n;
}

static int spawn_check(int count, const char *cmds[], const char **argvs[], const int maxprocs[],
                       const int info_sizes[], const PMI_keyval_t *infos[],
                       int npreput, const PMI_keyval_t preput[])
{
    int rc;

    if (count < 1 || cmds == NULL || maxprocs == NULL || npreput < 0 || (npreput > 0 && preput == NULL))
        return PMI_ERR_INVALID_ARG;
    for (int i = 0; i < npreput; i++)
        if ((rc = line_check(preput[i].key)) != PMI_SUCCESS || (rc = line_check(preput[i].val)) != PMI_SUCCESS)
            return rc;
    for (int c = 0; c < count; c++) {
        int ninfo = info_sizes != NULL ? info_sizes[c] : 0;

        if (maxprocs[c] < 1 || ninfo < 0 || (ninfo > 0 && (infos == NULL || infos[c] == NULL)))
            return PMI_ERR_INVALID_ARG;
        if ((rc = line_check(cmds[c])) != PMI_SUCCESS)
            return rc;
        for (int a = 0; a < argv_count(argvs, c); a++)
            if ((rc = line_check(argvs[c][a])) != PMI_SUCCESS)
                return rc;
        for (int k = 0; k < ninfo; k++)
            if ((rc = line_check(infos[c][k].key)) != PMI_SUCCESS || (rc = line_check(infos[c][k].val)) != PMI_SUCCESS)
                return rc;
    }
    return PMI_SUCCESS;
}

EXPORT int PMI_Spawn_multiple(int count, const char *cmds[], const char **argvs[],
                              const int maxprocs[], const int info_keyval_sizesp[],
                              const PMI_keyval_t *info_keyval_vectors[], int preput_keyval_size,
                              const PMI_keyval_t preput_keyval_vector[], int errors[])
{
    struct pmi_buf req = { 0 };
    int rc, total = 0;

    rc = spawn_check(count, cmds, argvs, maxprocs, info_keyval_sizesp, info_keyval_vectors,
                     preput_keyval_size, preput_keyval_vector);
    if (rc != PMI_SUCCESS)
        return rc;
    if ((rc = begin()) != PMI_SUCCESS)
        return rc;
    if (g.state == STATE_SINGLETON)
        return done(PMI_FAIL);      /* no process manager to start anything */
    /* One segment per command, one write for the whole block; arguments
     * are 1-based, preputs only in the first segment (pmi-wire.md §2.3). */
    for (int c = 0; c < count; c++) {
        int ninfo = info_keyval_sizesp != NULL ? info_keyval_sizesp[c] : 0;
        int argc = argv_count(argvs, c);

        total += maxprocs[c];
        pmi_buf_printf(&req, "mcmd=spawn\nnprocs=%d\nexecname=%s\ntotspawns=%d\nspawnssofar=%d\nargcnt=%d\n",
                       maxprocs[c], cmds[c], count, c + 1, argc);
        for (int a = 0; a < argc; a++)
            pmi_buf_printf(&req, "arg%d=%s\n", a + 1, argvs[c][a]);
        if (c == 0) {
            pmi_buf_printf(&req, "preput_num=%d\n", preput_keyval_size);
            for (int i = 0; i < preput_keyval_size; i++)
                pmi_buf_printf(&req, "preput_key_%d=%s\npreput_val_%d=%s\n",
                               i, preput_keyval_vector[i].key, i, preput_keyval_vector[i].val);
        }
        pmi_buf_printf(&req, "info_num=%d\n", ninfo);
        for (int k = 0; k < ninfo; k++)
            pmi_buf_printf(&req, "info_key_%d=%s\ninfo_val_%d=%s\n",
                           k, info_keyval_vectors[c][k].key, k, info_keyval_vectors[c][k].val);
        pmi_buf_printf(&req, "endcmd\n");
    }
    rc = call(&req, "spawn_result");
    if (rc == PMI_SUCCESS && errors != NULL) {
        const char *codes = pmi_msg_get(&g.reply, "errcodes");
        /* Without errcodes every process started (pmi-wire.md §2.3). */
        int n = codes != NULL ? pmi_parse_int_list(codes, errors, total) : 0;

        for (int i = n < 0 ? 0 : n; i < total; i++)
            errors[i] = 0;
    }
    return done(rc);
}

/* ---- clique: this node's ranks, from PMI_process_mapping ---------------- */

/* One (start, nnodes, ppn) block of the mapping: nodes start..start+nnodes-1
 * each take ppn consecutive ranks. */
struct block {
    int start, nnodes, ppn;
};

struct blocks {
    struct block *at;
    int count, cap;
};

static int blocks_add(struct blocks *b, struct block x)
{
    if (b->count == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        struct block *at = cap <= (1 << 20) ? realloc(b->at, (size_t)cap * sizeof *at) : NULL;

        if (at == NULL)
            return -1;
        b->at = at;
        b->cap = cap;
    }
    b->at[b->count++] = x;
    return 0;
}

static void skip_blanks(const char **p)
{
    while (**p == ' ' || **p == '\t')
        (*p)++;
}

static int number_read(const char **p, int *out)
{
    char *end;
    long v;

    skip_blanks(p);
    v = strtol(*p, &end, 10);
    if (end == *p || v < 0 || v > 1 << 24)
        return -1;
    *p = end;
    *out = (int)v;
    return 0;
}

static int char_read(const char **p, char c)
{
    skip_blanks(p);
    if (**p != c)
        return -1;
    (*p)++;
    return 0;
}

/* block = "(" start "," nnodes "," ppn ")" | nodeid */
static int block_read(const char **p, struct block *x)
{
    skip_blanks(p);
    if (**p != '(') {
        x->nnodes = x->ppn = 1;
        return number_read(p, &x->start);
    }
    (*p)++;
    if (number_read(p, &x->start) < 0 || char_read(p, ',') < 0 || number_read(p, &x->nnodes) < 0
        || char_read(p, ',') < 0 || number_read(p, &x->ppn) < 0 || char_read(p, ')') < 0)
        return -1;
    return 0;
}

/* "(vector," item ("," item)* ")", item = block | "[" block ("," block)* "]x" count
 * (the rank map format of pmi-wire.md §4.1); the blocks, repeats expanded. */
static int mapping_parse(const char *text, struct blocks *out)
{
    const char *p = text;

    skip_blanks(&p);
    if (strncmp(p, "(vector,", 8) != 0)
        return -1;
    p += 8;
    for (;;) {
        struct block x;

        skip_blanks(&p);
        if (*p == '[') {
            int first = out->count, repeat;

            p++;
            do {
                if (block_read(&p, &x) < 0 || blocks_add(out, x) < 0)
                    return -1;
            } while (char_read(&p, ',') == 0);
            if (char_read(&p, ']') < 0 || char_read(&p, 'x') < 0 || number_read(&p, &repeat) < 0)
                return -1;
            for (int r = 1, n = out->count - first; r < repeat; r++)
                for (int i = 0; i < n; i++)
                    if (blocks_add(out, out->at[first + i]) < 0)
                        return -1;
        } else if (block_read(&p, &x) < 0 || blocks_add(out, x) < 0) {
            return -1;
        }
        if (char_read(&p, ',') == 0)
            continue;
        return char_read(&p, ')');
    }
}

/* The node of rank r. Ranks run through the blocks in order; when they
 * run out the list starts again (the legacy wrap-around, simplified to the
 * whole list). -1 for an empty map. */
static int rank_node(const struct blocks *b, int r)
{
    long round = 0;

    for (int i = 0; i < b->count; i++)
        round += (long)b->at[i].nnodes * b->at[i].ppn;
    if (round == 0)
        return -1;
    r = (int)(r % round);
    for (int i = 0; i < b->count; i++) {
        long span = (long)b->at[i].nnodes * b->at[i].ppn;

        if (r < span)
            return b->at[i].start + r / b->at[i].ppn;
        r -= (int)span;
    }
    return -1;
}

/* Fill ranks (cap entries) with this node's ranks; the count. Falls back
 * to this process alone when there is no usable mapping. Lock held. */
static int clique_find(int *ranks, int cap)
{
    struct blocks map = { 0 };
    const char *text = NULL;
    int n = 0, mine = -1;

    if (g.state == STATE_CONNECTED && g.size > 1
        && call_line("get_result", "cmd=get kvsname=%s key=PMI_process_mapping\n", g.kvsname) == PMI_SUCCESS)
        text = pmi_msg_get(&g.reply, "value");
    if (text != NULL && mapping_parse(text, &map) == 0)
        mine = rank_node(&map, g.rank);
    for (int r = 0; r < g.size; r++) {
        int same = mine < 0 ? r == g.rank : rank_node(&map, r) == mine;

        if (same) {
            if (n < cap)
                ranks[n] = r;
            n++;
        }
    }
    free(map.at);
    return n;
}

EXPORT int PMI_Get_clique_size(int *size)
{
    int rc;

    if (size == NULL)
        return PMI_ERR_INVALID_ARG;
    if ((rc = begin()) != PMI_SUCCESS)
        return rc;
    *size = clique_find(NULL, 0);
    return done(PMI_SUCCESS);
}

EXPORT int PMI_Get_clique_ranks(int ranks[], int length)
{
    int rc;

    if ((rc = out_check(ranks, length)) != PMI_SUCCESS || (rc = begin()) != PMI_SUCCESS)
        return rc;
    return done(clique_find(ranks, length) > length ? PMI_ERR_INVALID_LENGTH : PMI_SUCCESS);
}
