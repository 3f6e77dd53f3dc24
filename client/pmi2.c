/*
 * pmi2.c - dpm's libpmi2: the PMI-2 client API of include/pmi2.h.
 *
 * Owns the PMI-2 commands (docs/pmi-wire.md §3, docs/pmi-extensions.md):
 * every API call builds one request, sends it, reads one reply and checks
 * it, under one lock. Where dpm's server and Slurm's disagree the library
 * accepts both forms (a name lookup's port in `port` or `value`; a missing
 * attribute as rc != 0 or found=FALSE). Errors map to codes as follows:
 *   PMI2_FAIL       the connection broke (pmi_conn.h); it stays broken;
 *   PMI2_ERR_OTHER  the server answered rc != 0 (refused, not found,
 *                   unknown command), or the call is not supported;
 *   PMI2_ERR_NOMEM  an output buffer, or the reply, was too large;
 *   PMI2_ERR_INVALID_*  an argument was refused before sending.
 *
 * Singleton (no PMI_FD, no PMI_PORT): size 1, rank 0, and the KVS, node
 * attributes and names are pmi_tables in this process, so a program runs
 * standalone; what needs a process manager (spawn) returns PMI2_ERR_OTHER.
 */
#include <pmi2.h>

#include "pmi_conn.h"
#include "pmi_table.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

#define LIBRARY_VERSION "dpm libpmi2 1.0"

enum state { STATE_NONE, STATE_SINGLETON, STATE_CONNECTED };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Everything below is guarded by lock. */
static struct {
    enum state state;
    int rank, size, appnum, spawned;
    char jobid[PMI2_MAX_VALLEN + 1];     /* "" until known */
    struct pmi_conn conn;
    struct pmi_msg reply;
    struct pmi_table kvs, nodeattrs, names;    /* singleton only */
} g;

EXPORT const char *dpm_pmi2_library_version(void)
{
    return LIBRARY_VERSION;
}

/* ---- argument checks ---------------------------------------------------- */

static int key_check(const char *key)
{
    return pmi_word_check(key, ";=", PMI2_MAX_KEYLEN, PMI2_ERR_INVALID_ARG,
                          PMI2_ERR_INVALID_KEY, PMI2_ERR_INVALID_KEY_LENGTH);
}

/* Values cannot hold ';': dpm's server and MPICH do not unescape `;;`.
 * Empty values are refused too: a reply can never carry one back. */
static int value_check(const char *value)
{
    return pmi_word_check(value, ";", PMI2_MAX_VALLEN, PMI2_ERR_INVALID_ARG,
                          PMI2_ERR_INVALID_VAL, PMI2_ERR_INVALID_VAL_LENGTH);
}

/* An output buffer of len bytes. */
static int out_check(const void *buf, int len)
{
    return pmi_out_check(buf, len, PMI2_ERR_INVALID_ARG, PMI2_ERR_INVALID_LENGTH);
}

/* Text that is not a key or value (program names, arguments, info
 * entries, service names): only ';' is a problem. */
static int text_check(const char *text)
{
    if (text == NULL)
        return PMI2_ERR_INVALID_ARG;
    return strchr(text, ';') != NULL ? PMI2_ERR_INVALID_VAL : PMI2_SUCCESS;
}

/* A service name of the name service: not empty, no ';'. */
static int service_check(const char *name)
{
    return pmi_word_check(name, ";", (size_t)-1, PMI2_ERR_INVALID_ARG,
                          PMI2_ERR_INVALID_KEY, PMI2_ERR_INVALID_KEY);
}
/* ---- one request, one reply --------------------------------------------- */

/* Send req (freed here), read the reply into g.reply and check that it is
 * `expect` with rc 0. */
static int call(struct pmi_buf *req, const char *expect)
{
    const char *name;
    int io;

    pmi_buf_v2_end(req);
    io = pmi_conn_send(&g.conn, req);
    pmi_buf_free(req);
    if (io == PMI_IO_OK)
        io = pmi_conn_recv_v2(&g.conn, &g.reply);
    if (io == PMI_IO_NOMEM || io == PMI_IO_TOOBIG)
        return PMI2_ERR_NOMEM;
    if (io != PMI_IO_OK)
        return PMI2_FAIL;
    name = pmi_msg_get(&g.reply, "cmd");
    if (pmi_msg_rc(&g.reply) != 0)
        return PMI2_ERR_OTHER;      /* any name: servers answer garbled requests as "error" */
    if (name == NULL || strcmp(name, expect) != 0) {
        /* A successful reply to something else: the stream is out of step. */
        fprintf(stderr, "dpm-pmi2: expected %s, got %s\n", expect, name ? name : "(no cmd)");
        g.conn.failed = 1;
        return PMI2_FAIL;
    }
    return PMI2_SUCCESS;
}

/* Shorthand for a request with up to two key=value pairs (NULL: none). */
static int call_simple(const char *cmd, const char *k1, const char *v1,
                       const char *k2, const char *v2)
{
    struct pmi_buf req = { 0 };
    char expect[64];

    pmi_buf_v2_begin(&req, cmd);
    if (k1 != NULL)
        pmi_buf_v2_pair(&req, k1, v1);
    if (k2 != NULL)
        pmi_buf_v2_pair(&req, k2, v2);
    snprintf(expect, sizeof expect, "%s-response", cmd);
    return call(&req, expect);
}

/* The reply's `found`, for attribute gets: 1 TRUE, 0 otherwise. */
static int reply_found(void)
{
    const char *found = pmi_msg_get(&g.reply, "found");

    return found != NULL && strcmp(found, "TRUE") == 0 && pmi_msg_get(&g.reply, "value") != NULL;
}

/* Start a call: PMI2_ERR_INIT before PMI2_Init, else PMI2_SUCCESS with the
 * lock held, released by done(). */
static int begin(void)
{
    pthread_mutex_lock(&lock);
    if (g.state != STATE_NONE)
        return PMI2_SUCCESS;
    pthread_mutex_unlock(&lock);
    return PMI2_ERR_INIT;
}

static int done(int rc)
{
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- init, finalize, abort ---------------------------------------------- */

/* The PMI-1-framed version exchange, then fullinit. */
static int handshake(void)
{
    struct pmi_buf req = { 0 };
    const char *jobid = getenv("PMI_JOBID");
    const char *id = getenv("PMI_ID") ? getenv("PMI_ID") : getenv("PMI_RANK");
    int rc, io;

    pmi_buf_printf(&req, "cmd=init pmi_version=2 pmi_subversion=0\n");
    io = pmi_conn_send(&g.conn, &req);
    pmi_buf_free(&req);
    if (io == PMI_IO_OK)
        io = pmi_conn_recv_v1(&g.conn, &g.reply);
    if (io != PMI_IO_OK)
        return PMI2_FAIL;
    if (pmi_msg_get(&g.reply, "cmd") == NULL
        || strcmp(pmi_msg_get(&g.reply, "cmd"), "response_to_init") != 0
        || pmi_msg_rc(&g.reply) != 0) {
        fprintf(stderr, "dpm-pmi2: the server refused PMI version 2.0\n");
        return PMI2_ERR_OTHER;
    }

    pmi_buf_v2_begin(&req, "fullinit");
    if (jobid != NULL)
        pmi_buf_v2_pair(&req, "pmijobid", jobid);
    if (id != NULL)
        pmi_buf_v2_pair(&req, "pmirank", id);
    /* The lock keeps one request on the wire at a time, so the server
     * never needs thread ids, whatever the program does. */
    pmi_buf_v2_pair(&req, "threaded", "FALSE");
    rc = call(&req, "fullinit-response");
    if (rc != PMI2_SUCCESS)
        return rc;
    if (pmi_msg_int(&g.reply, "rank", &g.rank) < 0 || pmi_msg_int(&g.reply, "size", &g.size) < 0
        || pmi_msg_int(&g.reply, "appnum", &g.appnum) < 0 || g.size < 1) {
        fprintf(stderr, "dpm-pmi2: fullinit-response without rank, size and appnum\n");
        return PMI2_FAIL;
    }
    g.spawned = pmi_msg_get(&g.reply, "spawner-jobid") != NULL;
    return PMI2_SUCCESS;
}

EXPORT int PMI2_Init(int *spawned, int *size, int *rank, int *appnum)
{
    int rc = PMI2_SUCCESS;

    if (spawned == NULL || size == NULL || rank == NULL || appnum == NULL)
        return PMI2_ERR_INVALID_ARG;
    pthread_mutex_lock(&lock);
    if (g.state == STATE_NONE) {
        switch (pmi_conn_open(&g.conn, "dpm-pmi2", "PMI2_DEBUG")) {
        case 0:
            g.rank = 0;
            g.size = 1;
            g.appnum = 0;
            g.spawned = 0;
            snprintf(g.jobid, sizeof g.jobid, "singleton-%ld", (long)getpid());
            g.state = STATE_SINGLETON;
            break;
        case 1:
            g.jobid[0] = '\0';
            rc = handshake();
            if (rc == PMI2_SUCCESS)
                g.state = STATE_CONNECTED;
            else
                pmi_conn_close(&g.conn);
            break;
        default:
            rc = PMI2_FAIL;
        }
    }
    if (rc == PMI2_SUCCESS) {
        *spawned = g.spawned;
        *size = g.size;
        *rank = g.rank;
        *appnum = g.appnum;
    }
    return done(rc);
}

EXPORT int PMI2_Finalize(void)
{
    int rc = begin();

    if (rc != PMI2_SUCCESS)
        return rc;
    if (g.state == STATE_CONNECTED) {
        rc = call_simple("finalize", NULL, NULL, NULL, NULL);
        if (g.conn.fd >= 0)
            shutdown(g.conn.fd, SHUT_RDWR);
        pmi_conn_close(&g.conn);
    }
    pmi_table_clear(&g.kvs);
    pmi_table_clear(&g.nodeattrs);
    pmi_table_clear(&g.names);
    g.state = STATE_NONE;
    return done(rc);
}

EXPORT int PMI2_Initialized(void)
{
    int initialized;

    pthread_mutex_lock(&lock);
    initialized = g.state != STATE_NONE;
    pthread_mutex_unlock(&lock);
    return initialized;
}

EXPORT int PMI2_Abort(int flag, const char msg[])
{
    char text[PMI2_MAX_VALLEN + 1];
    /* Another thread may be blocked in a waiting call holding the lock; an
     * abort must get out all the same. */
    int locked = pthread_mutex_trylock(&lock) == 0;

    snprintf(text, sizeof text, "%s", msg != NULL && *msg != '\0' ? msg : "PMI2_Abort");
    for (char *p = text; *p != '\0'; p++)
        if (*p == ';')
            *p = ',';
    if (g.state == STATE_CONNECTED && !g.conn.failed) {
        struct pmi_buf req = { 0 };

        /* No reply comes: the server ends the job. */
        pmi_buf_v2_begin(&req, "abort");
        pmi_buf_v2_pair(&req, "isworld", flag ? "TRUE" : "FALSE");
        pmi_buf_v2_pair(&req, "msg", text);
        pmi_buf_v2_end(&req);
        pmi_conn_send(&g.conn, &req);
        pmi_buf_free(&req);
    } else {
        fprintf(stderr, "dpm-pmi2: abort: %s\n", text);
    }
    if (locked)
        pthread_mutex_unlock(&lock);
    exit(1);
}

/* ---- job ---------------------------------------------------------------- */

/* Validate the spawn arguments: PMI2_SUCCESS or the first error. */
static int spawn_check(int count, const char *cmds[], int argcs[], const char **argvs[],
                       const int maxprocs[], const int info_sizes[],
                       const struct MPID_Info *infos[], int npreput,
                       const struct MPID_Info *preput[])
{
    int rc;

    if (count < 1 || cmds == NULL || maxprocs == NULL || npreput < 0 || (npreput > 0 && preput == NULL))
        return PMI2_ERR_INVALID_ARG;
    for (int i = 0; i < npreput; i++) {
        if (preput[i] == NULL)
            return PMI2_ERR_INVALID_ARG;
        if ((rc = key_check(preput[i]->key)) != PMI2_SUCCESS || (rc = value_check(preput[i]->value)) != PMI2_SUCCESS)
            return rc;
    }
    for (int c = 0; c < count; c++) {
        int argc = argcs != NULL ? argcs[c] : 0;
        int ninfo = info_sizes != NULL ? info_sizes[c] : 0;

        if (maxprocs[c] < 1 || argc < 0 || ninfo < 0 || (argc > 0 && (argvs == NULL || argvs[c] == NULL))
            || (ninfo > 0 && (infos == NULL || infos[c] == NULL)))
            return PMI2_ERR_INVALID_ARG;
        if ((rc = text_check(cmds[c])) != PMI2_SUCCESS)
            return rc;
        for (int a = 0; a < argc; a++)
            if ((rc = text_check(argvs[c][a])) != PMI2_SUCCESS)
                return rc;
        for (int k = 0; k < ninfo; k++)
            if ((rc = text_check(infos[c][k].key)) != PMI2_SUCCESS || (rc = text_check(infos[c][k].value)) != PMI2_SUCCESS)
                return rc;
    }
    return PMI2_SUCCESS;
}

EXPORT int PMI2_Job_Spawn(int count, const char *cmds[], int argcs[], const char **argvs[],
                          const int maxprocs[], const int info_keyval_sizes[],
                          const struct MPID_Info *info_keyval_vectors[],
                          int preput_keyval_size, const struct MPID_Info *preput_keyval_vector[],
                          char jobId[], int jobIdSize, int errors[])
{
    struct pmi_buf req = { 0 };
    char name[32];
    int rc, total = 0;

    rc = spawn_check(count, cmds, argcs, argvs, maxprocs, info_keyval_sizes,
                     info_keyval_vectors, preput_keyval_size, preput_keyval_vector);
    if (rc != PMI2_SUCCESS || (rc = begin()) != PMI2_SUCCESS)
        return rc;
    if (g.state == STATE_SINGLETON)
        return done(PMI2_ERR_OTHER);        /* no one to ask */
    /* pmi-wire.md §3.4: preputs once, then one block per command starting
     * at subcmd; every index is 0-based. */
    pmi_buf_v2_begin(&req, "spawn");
    pmi_buf_v2_pair_int(&req, "ncmds", count);
    pmi_buf_v2_pair_int(&req, "preputcount", preput_keyval_size);
    for (int i = 0; i < preput_keyval_size; i++) {
        snprintf(name, sizeof name, "ppkey%d", i);
        pmi_buf_v2_pair(&req, name, preput_keyval_vector[i]->key);
        snprintf(name, sizeof name, "ppval%d", i);
        pmi_buf_v2_pair(&req, name, preput_keyval_vector[i]->value);
    }
    for (int c = 0; c < count; c++) {
        int argc = argcs != NULL ? argcs[c] : 0;
        int ninfo = info_keyval_sizes != NULL ? info_keyval_sizes[c] : 0;

        total += maxprocs[c];
        pmi_buf_v2_pair(&req, "subcmd", cmds[c]);
        pmi_buf_v2_pair_int(&req, "maxprocs", maxprocs[c]);
        pmi_buf_v2_pair_int(&req, "argc", argc);
        for (int a = 0; a < argc; a++) {
            snprintf(name, sizeof name, "argv%d", a);
            pmi_buf_v2_pair(&req, name, argvs[c][a]);
        }
        pmi_buf_v2_pair_int(&req, "infokeycount", ninfo);
        for (int k = 0; k < ninfo; k++) {
            snprintf(name, sizeof name, "infokey%d", k);
            pmi_buf_v2_pair(&req, name, info_keyval_vectors[c][k].key);
            snprintf(name, sizeof name, "infoval%d", k);
            pmi_buf_v2_pair(&req, name, info_keyval_vectors[c][k].value);
        }
    }
    rc = call(&req, "spawn-response");
    if (rc == PMI2_SUCCESS) {
        const char *jobid = pmi_msg_get(&g.reply, "jobid");
        const char *codes = pmi_msg_get(&g.reply, "errcodes");

        if (jobId != NULL && jobIdSize > 0 && pmi_copy_out(jobId, jobIdSize, jobid ? jobid : "") < 0)
            rc = PMI2_ERR_NOMEM;
        if (errors != NULL) {
            /* Without errcodes every process started (pmi-wire.md §5). */
            int n = codes != NULL ? pmi_parse_int_list(codes, errors, total) : 0;
            for (int i = n < 0 ? 0 : n; i < total; i++)
                errors[i] = 0;
        }
    }
    return done(rc);
}

EXPORT int PMI2_Job_GetId(char jobid[], int jobid_size)
{
    int rc;

    if ((rc = out_check(jobid, jobid_size)) != PMI2_SUCCESS || (rc = begin()) != PMI2_SUCCESS)
        return rc;
    if (g.jobid[0] == '\0') {
        /* Asked once: a job's id never changes. */
        rc = call_simple("job-getid", NULL, NULL, NULL, NULL);
        if (rc == PMI2_SUCCESS) {
            const char *id = pmi_msg_get(&g.reply, "jobid");
            if (id == NULL || *id == '\0' || pmi_copy_out(g.jobid, sizeof g.jobid, id) < 0) {
                g.jobid[0] = '\0';
                rc = PMI2_FAIL;
            }
        }
    }
    if (rc == PMI2_SUCCESS && pmi_copy_out(jobid, jobid_size, g.jobid) < 0)
        rc = PMI2_ERR_NOMEM;
    return done(rc);
}

/* One int that PMI2_Init learnt, for the getters below. */
static int int_out(int *out, const int *field)
{
    int rc;

    if (out == NULL)
        return PMI2_ERR_INVALID_ARG;
    if ((rc = begin()) != PMI2_SUCCESS)
        return rc;
    *out = *field;
    return done(PMI2_SUCCESS);
}

EXPORT int PMI2_Job_GetRank(int *rank)
{
    return int_out(rank, &g.rank);
}

EXPORT int PMI2_Info_GetSize(int *size)
{
    return int_out(size, &g.size);
}

/* Not sent at all: Hydra treats job-connect as a fatal unknown command and
 * Slurm's server never answers it; dpm refuses it. */
EXPORT int PMI2_Job_Connect(const char jobid[], PMI2_Connect_comm_t *conn)
{
    (void)jobid;
    (void)conn;
    return PMI2_Initialized() ? PMI2_ERR_OTHER : PMI2_ERR_INIT;
}

EXPORT int PMI2_Job_Disconnect(const char jobid[])
{
    (void)jobid;
    return PMI2_Initialized() ? PMI2_ERR_OTHER : PMI2_ERR_INIT;
}

/* ---- key-value store ---------------------------------------------------- */

static const char *const hint_names[] = {
    [PMI2_HINT_SPARSE] = "sparse",
    [PMI2_HINT_DENSE] = "dense",
};

static int kvs_put(const char *key, const char *value, int hint)
{
    struct pmi_buf req = { 0 };
    int rc;

    if ((rc = key_check(key)) != PMI2_SUCCESS || (rc = value_check(value)) != PMI2_SUCCESS)
        return rc;
    if (hint != PMI2_HINT_NONE && hint != PMI2_HINT_SPARSE && hint != PMI2_HINT_DENSE)
        return PMI2_ERR_INVALID_ARG;
    if ((rc = begin()) != PMI2_SUCCESS)
        return rc;
    if (g.state == STATE_SINGLETON) {
        rc = pmi_table_put(&g.kvs, key, value) == 0 ? PMI2_SUCCESS : PMI2_ERR_NOMEM;
    } else {
        pmi_buf_v2_begin(&req, "kvs-put");
        pmi_buf_v2_pair(&req, "key", key);
        pmi_buf_v2_pair(&req, "value", value);
        if (hint != PMI2_HINT_NONE)
            pmi_buf_v2_pair(&req, "hint", hint_names[hint]);
        rc = call(&req, "kvs-put-response");
    }
    return done(rc);
}

EXPORT int PMI2_KVS_Put(const char key[], const char value[])
{
    return kvs_put(key, value, PMI2_HINT_NONE);
}

EXPORT int PMI2_KVS_PutHint(const char key[], const char value[], int hint)
{
    return kvs_put(key, value, hint);
}

EXPORT int PMI2_KVS_Fence(void)
{
    int rc = begin();

    if (rc != PMI2_SUCCESS)
        return rc;
    if (g.state == STATE_SINGLETON)
        return done(PMI2_SUCCESS);      /* its puts are visible at once */
    return done(call_simple("kvs-fence", NULL, NULL, NULL, NULL));
}

/* Copy a got value out as PMI2_KVS_Get documents: *vallen is its length,
 * negative when it was cut to fit. */
static void value_out(const char *value, char *out, int maxvalue, int *vallen)
{
    int len = (int)strlen(value);
    int cut = pmi_copy_out(out, maxvalue, value) < 0;

    if (vallen != NULL)
        *vallen = cut ? -len : len;
}

static int kvs_get(const char *jobid, int src, const char *key, char *value,
                   int maxvalue, int *vallen, int wait)
{
    struct pmi_buf req = { 0 };
    int rc;

    if ((rc = key_check(key)) != PMI2_SUCCESS || (rc = out_check(value, maxvalue)) != PMI2_SUCCESS
        || (rc = begin()) != PMI2_SUCCESS)
        return rc;
    if (g.state == STATE_SINGLETON) {
        /* Nothing else can put: a waiting get would wait forever. */
        const char *v = pmi_table_get(&g.kvs, key);
        if (v != NULL)
            value_out(v, value, maxvalue, vallen);
        rc = v != NULL ? PMI2_SUCCESS : PMI2_ERR_OTHER;
    } else {
        pmi_buf_v2_begin(&req, "kvs-get");
        /* MPICH always names the job; a NULL jobid means our own, which
         * the server assumes when the key is absent. */
        if (jobid != NULL)
            pmi_buf_v2_pair(&req, "jobid", jobid);
        if (src >= 0)
            pmi_buf_v2_pair_int(&req, "srcid", src);
        pmi_buf_v2_pair(&req, "key", key);
        if (wait)
            pmi_buf_v2_pair(&req, "wait", "TRUE");
        rc = call(&req, "kvs-get-response");
        if (rc == PMI2_SUCCESS) {
            /* rc=0;found=FALSE is Slurm's way of saying not found. */
            if (reply_found())
                value_out(pmi_msg_get(&g.reply, "value"), value, maxvalue, vallen);
            else
                rc = PMI2_ERR_OTHER;
        }
    }
    return done(rc);
}

EXPORT int PMI2_KVS_Get(const char *jobid, int src_pmi_id, const char key[], char value[],
                        int maxvalue, int *vallen)
{
    return kvs_get(jobid, src_pmi_id, key, value, maxvalue, vallen, 0);
}

EXPORT int PMI2_KVS_GetWait(const char *jobid, int src_pmi_id, const char key[], char value[],
                            int maxvalue, int *vallen)
{
    return kvs_get(jobid, src_pmi_id, key, value, maxvalue, vallen, 1);
}

/* ---- ring --------------------------------------------------------------- */

static int ring(const char *value, int *rank, int *size, char *left, char *right, int maxvalue)
{
    struct pmi_buf req = { 0 };
    int rc;

    if (rank == NULL || size == NULL || left == NULL)
        return PMI2_ERR_INVALID_ARG;
    if ((rc = value_check(value)) != PMI2_SUCCESS || (rc = out_check(right, maxvalue)) != PMI2_SUCCESS
        || (rc = begin()) != PMI2_SUCCESS)
        return rc;
    if (g.state == STATE_SINGLETON) {
        *rank = 0;
        *size = 1;
        if (pmi_copy_out(left, maxvalue, value) < 0 || pmi_copy_out(right, maxvalue, value) < 0)
            rc = PMI2_ERR_NOMEM;
    } else {
        /* docs/pmi-extensions.md: Slurm's request, so Slurm's server works
         * too; dpm adds ring-rank and ring-size to the reply, Slurm's
         * server only ring-count (the rank; the size is the job's). */
        pmi_buf_v2_begin(&req, "ring");
        pmi_buf_v2_pair(&req, "ring-count", "1");
        pmi_buf_v2_pair(&req, "ring-left", value);
        pmi_buf_v2_pair(&req, "ring-right", value);
        rc = call(&req, "ring-response");
        if (rc == PMI2_SUCCESS) {
            const char *l = pmi_msg_get(&g.reply, "ring-left");
            const char *r = pmi_msg_get(&g.reply, "ring-right");

            if ((pmi_msg_int(&g.reply, "ring-rank", rank) < 0 && pmi_msg_int(&g.reply, "ring-count", rank) < 0)
                || l == NULL || r == NULL) {
                fprintf(stderr, "dpm-pmi2: ring-response without ring rank or values\n");
                rc = PMI2_FAIL;
            } else {
                if (pmi_msg_int(&g.reply, "ring-size", size) < 0)
                    *size = g.size;
                if (pmi_copy_out(left, maxvalue, l) < 0 || pmi_copy_out(right, maxvalue, r) < 0)
                    rc = PMI2_ERR_NOMEM;
            }
        }
    }
    return done(rc);
}

EXPORT int PMIX_Ring(const char value[], int *rank, int *ranks, char left[], char right[], int maxvalue)
{
    return ring(value, rank, ranks, left, right, maxvalue);
}

EXPORT int PMI2_KVS_Ring(const char value[], int *ring_rank, int *ring_size, char left[], char right[],
                         int maxvalue)
{
    return ring(value, ring_rank, ring_size, left, right, maxvalue);
}

/* ---- node and job attributes -------------------------------------------- */

/* Fetch an attribute: *found, and its value into out (valuelen bytes).
 * A refusal (rc != 0) counts as not found, as MPICH's client treats it:
 * Hydra answers a missing attribute that way. */
static int attr_get(const char *cmd, const char *name, int wait, char *out, int valuelen, int *found)
{
    struct pmi_buf req = { 0 };
    char expect[64];
    int rc;

    pmi_buf_v2_begin(&req, cmd);
    pmi_buf_v2_pair(&req, "key", name);
    if (wait)
        pmi_buf_v2_pair(&req, "wait", "TRUE");
    snprintf(expect, sizeof expect, "%s-response", cmd);
    rc = call(&req, expect);
    *found = rc == PMI2_SUCCESS && reply_found();
    if (rc == PMI2_ERR_OTHER)
        rc = PMI2_SUCCESS;
    if (*found && pmi_copy_out(out, valuelen, pmi_msg_get(&g.reply, "value")) < 0)
        rc = PMI2_ERR_NOMEM;
    return rc;
}

/* What a singleton's process manager would say about its job. */
static const char *singleton_job_attr(const char *name)
{
    if (strcmp(name, "PMI_process_mapping") == 0)
        return "(vector,(0,1,1))";
    if (strcmp(name, "universeSize") == 0)
        return "1";
    return NULL;
}

/* Answer an attribute get from a singleton table (or value). */
static int local_attr(const char *value, char *out, int valuelen, int *found)
{
    *found = value != NULL;
    return value != NULL && pmi_copy_out(out, valuelen, value) < 0 ? PMI2_ERR_NOMEM : PMI2_SUCCESS;
}

/* A node attribute (node != 0) or a job attribute. */
static int attr_query(int node, const char *name, char *value, int valuelen, int *found, int wait)
{
    int rc;

    if (found == NULL)
        return PMI2_ERR_INVALID_ARG;
    if ((rc = key_check(name)) != PMI2_SUCCESS || (rc = out_check(value, valuelen)) != PMI2_SUCCESS
        || (rc = begin()) != PMI2_SUCCESS)
        return rc;
    if (g.state == STATE_SINGLETON)
        /* The only process of its node: a wait would never end. */
        rc = local_attr(node ? pmi_table_get(&g.nodeattrs, name) : singleton_job_attr(name),
                        value, valuelen, found);
    else
        rc = attr_get(node ? "info-getnodeattr" : "info-getjobattr", name, wait, value, valuelen, found);
    return done(rc);
}

EXPORT int PMI2_Info_GetNodeAttr(const char name[], char value[], int valuelen, int *found, int waitfor)
{
    return attr_query(1, name, value, valuelen, found, waitfor);
}

EXPORT int PMI2_Info_PutNodeAttr(const char name[], const char value[])
{
    int rc;

    if ((rc = key_check(name)) != PMI2_SUCCESS || (rc = value_check(value)) != PMI2_SUCCESS)
        return rc;
    if ((rc = begin()) != PMI2_SUCCESS)
        return rc;
    if (g.state == STATE_SINGLETON)
        rc = pmi_table_put(&g.nodeattrs, name, value) == 0 ? PMI2_SUCCESS : PMI2_ERR_NOMEM;
    else
        rc = call_simple("info-putnodeattr", "key", name, "value", value);
    return done(rc);
}

EXPORT int PMI2_Info_GetJobAttr(const char name[], char value[], int valuelen, int *found)
{
    return attr_query(0, name, value, valuelen, found, 0);
}

/* The IntArray forms: an attribute holding "n,n,n". */
static int int_array(int node, const char *name, int *array, int arraylen, int *outlen, int *found)
{
    char text[PMI2_MAX_ATTRVALUE + 1];
    int rc, n;

    if (outlen == NULL || found == NULL)
        return PMI2_ERR_INVALID_ARG;
    if ((rc = out_check(array, arraylen)) != PMI2_SUCCESS)
        return rc;
    rc = attr_query(node, name, text, sizeof text, found, 0);
    if (rc != PMI2_SUCCESS || !*found)
        return rc;
    n = pmi_parse_int_list(text, array, arraylen);
    if (n < 0)
        return PMI2_ERR_INVALID_VAL;
    *outlen = n;
    return PMI2_SUCCESS;
}

EXPORT int PMI2_Info_GetNodeAttrIntArray(const char name[], int array[], int arraylen, int *outlen, int *found)
{
    return int_array(1, name, array, arraylen, outlen, found);
}

EXPORT int PMI2_Info_GetJobAttrIntArray(const char name[], int array[], int arraylen, int *outlen, int *found)
{
    return int_array(0, name, array, arraylen, outlen, found);
}

/* ---- name service ------------------------------------------------------- */

EXPORT int PMI2_Nameserv_publish(const char service_name[], const struct MPID_Info *info_ptr, const char port[])
{
    int rc;

    (void)info_ptr;
    if ((rc = service_check(service_name)) != PMI2_SUCCESS || (rc = value_check(port)) != PMI2_SUCCESS)
        return rc;
    if ((rc = begin()) != PMI2_SUCCESS)
        return rc;
    if (g.state == STATE_SINGLETON)
        rc = pmi_table_get(&g.names, service_name) != NULL ? PMI2_ERR_OTHER
             : pmi_table_put(&g.names, service_name, port) == 0 ? PMI2_SUCCESS : PMI2_ERR_NOMEM;
    else
        rc = call_simple("name-publish", "name", service_name, "port", port);
    return done(rc);
}

EXPORT int PMI2_Nameserv_lookup(const char service_name[], const struct MPID_Info *info_ptr,
                                char port[], int portLen)
{
    const char *found = NULL;
    int rc;

    (void)info_ptr;
    if ((rc = service_check(service_name)) != PMI2_SUCCESS || (rc = out_check(port, portLen)) != PMI2_SUCCESS
        || (rc = begin()) != PMI2_SUCCESS)
        return rc;
    if (g.state == STATE_SINGLETON) {
        found = pmi_table_get(&g.names, service_name);
        rc = found != NULL ? PMI2_SUCCESS : PMI2_ERR_OTHER;
    } else {
        rc = call_simple("name-lookup", "name", service_name, NULL, NULL);
        if (rc == PMI2_SUCCESS) {
            /* MPICH reads `port`, Slurm's client `value`; dpm sends both. */
            found = pmi_msg_get(&g.reply, "port");
            if (found == NULL)
                found = pmi_msg_get(&g.reply, "value");
            if (found == NULL)
                rc = PMI2_ERR_OTHER;
        }
    }
    if (rc == PMI2_SUCCESS && pmi_copy_out(port, portLen, found) < 0)
        rc = PMI2_ERR_NOMEM;
    return done(rc);
}

EXPORT int PMI2_Nameserv_unpublish(const char service_name[], const struct MPID_Info *info_ptr)
{
    int rc;

    (void)info_ptr;
    if ((rc = service_check(service_name)) != PMI2_SUCCESS)
        return rc;
    if ((rc = begin()) != PMI2_SUCCESS)
        return rc;
    if (g.state == STATE_SINGLETON)
        rc = pmi_table_remove(&g.names, service_name) == 0 ? PMI2_SUCCESS : PMI2_ERR_OTHER;
    else
        rc = call_simple("name-unpublish", "name", service_name, NULL, NULL);
    return done(rc);
}
