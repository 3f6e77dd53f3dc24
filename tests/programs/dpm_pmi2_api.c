/*
 * dpm_pmi2_api.c - the parts of dpm's libpmi2 the Slurm-derived pmi2_*
 * programs do not reach: argument checks and their codes, truncation,
 * missing keys, the IntArray forms, Job_Connect, the version symbol, the
 * state before PMI2_Init and after PMI2_Finalize, and calls from several
 * threads at once (the library's lock keeps one request on the wire).
 *
 * Under a launcher every rank puts "api-<rank>", fences and reads every
 * rank's key back. Started directly (no PMI_FD, no PMI_PORT) it checks
 * the singleton: size 1, rank 0, and a KVS, node attributes and names
 * that live in the process. Prints "pmi2 api ok rank R size S MODE",
 * MODE "server" or "singleton"; any failure prints "pmi2 FAIL ..." and
 * exits 1.
 */
#include <pthread.h>
#include <string.h>
#include "pmi2_expect.h"

#define THREADS 4
#define THREAD_KEYS 25

/* rc must be exactly want. */
static void expect_rc(int rc, int want, int rank, const char *what)
{
    if (rc == want)
        return;
    printf("pmi2 FAIL rank %d %s rc=%d expected %d\n", rank, what, rc, want);
    fflush(stdout);
    exit(1);
}

static void check_before_init(void)
{
    int rank = -1, size = -1;
    char jobid[64];

    if (PMI2_Initialized())
        pmi2_fail(-1, "PMI2_Initialized before PMI2_Init");
    expect_rc(PMI2_Job_GetRank(&rank), PMI2_ERR_INIT, -1, "GetRank before init");
    expect_rc(PMI2_Info_GetSize(&size), PMI2_ERR_INIT, -1, "GetSize before init");
    expect_rc(PMI2_KVS_Put("k", "v"), PMI2_ERR_INIT, -1, "Put before init");
    expect_rc(PMI2_KVS_Fence(), PMI2_ERR_INIT, -1, "Fence before init");
    expect_rc(PMI2_Job_GetId(jobid, sizeof jobid), PMI2_ERR_INIT, -1, "GetId before init");
    expect_rc(PMI2_Init(NULL, &size, &rank, &size), PMI2_ERR_INVALID_ARG, -1, "Init with NULL");
}

/* Arguments the library refuses before anything is sent. */
static void check_arguments(int rank)
{
    char long_key[PMI2_MAX_KEYLEN + 2], long_value[PMI2_MAX_VALLEN + 2], buf[8];
    int len = 0;

    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    memset(long_value, 'v', sizeof long_value - 1);
    long_value[sizeof long_value - 1] = '\0';
    expect_rc(PMI2_KVS_Put(long_key, "v"), PMI2_ERR_INVALID_KEY_LENGTH, rank, "Put long key");
    expect_rc(PMI2_KVS_Put("a=b", "v"), PMI2_ERR_INVALID_KEY, rank, "Put key with =");
    expect_rc(PMI2_KVS_Put("", "v"), PMI2_ERR_INVALID_KEY, rank, "Put empty key");
    expect_rc(PMI2_KVS_Put("k", long_value), PMI2_ERR_INVALID_VAL_LENGTH, rank, "Put long value");
    expect_rc(PMI2_KVS_Put("k", "a;b"), PMI2_ERR_INVALID_VAL, rank, "Put value with ;");
    expect_rc(PMI2_KVS_Put("k", ""), PMI2_ERR_INVALID_VAL, rank, "Put empty value");
    expect_rc(PMI2_KVS_Put(NULL, "v"), PMI2_ERR_INVALID_ARG, rank, "Put NULL key");
    expect_rc(PMI2_KVS_PutHint("k", "v", 7), PMI2_ERR_INVALID_ARG, rank, "PutHint bad hint");
    expect_rc(PMI2_KVS_Get(NULL, PMI2_ID_NULL, "k", buf, 0, &len), PMI2_ERR_INVALID_LENGTH, rank, "Get length 0");
    expect_rc(PMI2_KVS_Get(NULL, PMI2_ID_NULL, "k", NULL, 8, &len), PMI2_ERR_INVALID_ARG, rank, "Get NULL buffer");
    expect_rc(PMI2_Info_PutNodeAttr("n", "x;y"), PMI2_ERR_INVALID_VAL, rank, "PutNodeAttr with ;");
}

/* Every rank's key, read back; a missing key; a value cut to fit. */
static void check_kvs(int rank, int size, const char *jobid)
{
    char key[PMI2_MAX_KEYLEN], want[PMI2_MAX_VALLEN], got[PMI2_MAX_VALLEN], small[4];
    int len = 0;

    snprintf(key, sizeof key, "api-%d", rank);
    snprintf(want, sizeof want, "value-of-%d=with=equals", rank);
    pmi2_expect(PMI2_KVS_Put(key, want), rank, "Put");
    pmi2_expect(PMI2_KVS_Fence(), rank, "Fence");
    for (int r = 0; r < size; r++) {
        snprintf(key, sizeof key, "api-%d", r);
        snprintf(want, sizeof want, "value-of-%d=with=equals", r);
        pmi2_expect(PMI2_KVS_Get(jobid, r, key, got, sizeof got, &len), rank, key);
        if (strcmp(got, want) != 0 || len != (int)strlen(want)) {
            printf("pmi2 FAIL rank %d %s=%s (len %d) expected %s\n", rank, key, got, len, want);
            exit(1);
        }
        /* NULL jobid: this job. */
        pmi2_expect(PMI2_KVS_Get(NULL, PMI2_ID_NULL, key, got, sizeof got, &len), rank, "Get NULL jobid");
    }
    expect_rc(PMI2_KVS_Get(jobid, PMI2_ID_NULL, "api-missing", got, sizeof got, &len),
              PMI2_ERR_OTHER, rank, "Get missing key");
    pmi2_expect(PMI2_KVS_Get(jobid, 0, "api-0", small, sizeof small, &len), rank, "Get into a small buffer");
    if (len != -(int)strlen("value-of-0=with=equals") || strcmp(small, "val") != 0) {
        printf("pmi2 FAIL rank %d truncated get len %d value %s\n", rank, len, small);
        exit(1);
    }
}

/* Node attributes: the node's first rank puts, everyone waits for it. */
static void check_node_attrs(int rank, int first_on_node)
{
    char value[PMI2_MAX_VALLEN];
    int array[8], n = 0, found = -1;

    pmi2_expect(PMI2_Info_GetNodeAttr("api-absent", value, sizeof value, &found, 0), rank, "GetNodeAttr absent");
    if (found != 0)
        pmi2_fail(rank, "GetNodeAttr absent found");
    if (first_on_node)
        pmi2_expect(PMI2_Info_PutNodeAttr("api-ints", "3,-1,42"), rank, "PutNodeAttr");
    pmi2_expect(PMI2_Info_GetNodeAttr("api-ints", value, sizeof value, &found, 1), rank, "GetNodeAttr wait");
    pmi2_expect(PMI2_Info_GetNodeAttrIntArray("api-ints", array, 8, &n, &found), rank, "GetNodeAttrIntArray");
    if (!found || n != 3 || array[0] != 3 || array[1] != -1 || array[2] != 42) {
        printf("pmi2 FAIL rank %d node int array found %d n %d\n", rank, found, n);
        exit(1);
    }
    pmi2_expect(PMI2_Info_GetNodeAttrIntArray("api-ints", array, 2, &n, &found), rank, "IntArray, 2 entries");
    if (n != 2)
        pmi2_fail(rank, "IntArray did not stop at arraylen");
}

static void check_job_attrs(int rank)
{
    char value[PMI2_MAX_VALLEN], tiny[2];
    int array[4], n = 0, found = 0;

    pmi2_expect(PMI2_Info_GetJobAttr("PMI_process_mapping", value, sizeof value, &found), rank, "mapping");
    if (!found || strncmp(value, "(vector,", 8) != 0)
        pmi2_fail(rank, "PMI_process_mapping");
    pmi2_expect(PMI2_Info_GetJobAttrIntArray("universeSize", array, 4, &n, &found), rank, "universeSize");
    if (!found || n != 1 || array[0] < 1)
        pmi2_fail(rank, "universeSize as an int array");
    pmi2_expect(PMI2_Info_GetJobAttr("api-no-such-attr", value, sizeof value, &found), rank, "absent job attr");
    if (found)
        pmi2_fail(rank, "absent job attr found");
    expect_rc(PMI2_Info_GetJobAttr("PMI_process_mapping", tiny, sizeof tiny, &found), PMI2_ERR_NOMEM,
              rank, "job attr into a small buffer");
    printf("pmi2 rank %d universeSize %d mapping %s\n", rank, array[0], value);
}

struct worker {
    pthread_t thread;
    int rank, size, index, phase;
    const char *jobid;
};

/* Phase 0: put this thread's keys; phase 1: read every rank's and thread's. */
static void *worker_run(void *arg)
{
    struct worker *w = arg;
    char key[PMI2_MAX_KEYLEN], want[64];

    for (int i = 0; i < THREAD_KEYS; i++) {
        if (w->phase == 0) {
            snprintf(key, sizeof key, "thr-%d-%d-%d", w->rank, w->index, i);
            snprintf(want, sizeof want, "%d.%d.%d", w->rank, w->index, i);
            pmi2_expect(PMI2_KVS_Put(key, want), w->rank, "threaded Put");
            continue;
        }
        for (int r = 0; r < w->size; r++) {
            snprintf(key, sizeof key, "thr-%d-%d-%d", r, w->index, i);
            snprintf(want, sizeof want, "%d.%d.%d", r, w->index, i);
            pmi2_expect_value(PMI2_KVS_Get, w->jobid, r, key, want, w->rank);
        }
    }
    return NULL;
}

static void check_threads(int rank, int size, const char *jobid)
{
    struct worker w[THREADS];

    for (int phase = 0; phase < 2; phase++) {
        for (int t = 0; t < THREADS; t++) {
            w[t] = (struct worker){ .rank = rank, .size = size, .index = t, .phase = phase, .jobid = jobid };
            if (pthread_create(&w[t].thread, NULL, worker_run, &w[t]) != 0)
                pmi2_fail(rank, "pthread_create");
        }
        for (int t = 0; t < THREADS; t++)
            pthread_join(w[t].thread, NULL);
        if (phase == 0)
            pmi2_expect(PMI2_KVS_Fence(), rank, "Fence after threaded puts");
    }
}

int main(void)
{
    int spawned, size, rank, appnum, again[4];
    char jobid[PMI2_MAX_VALLEN], tiny[2], port[64];
    int singleton = getenv("PMI_FD") == NULL && getenv("PMI_PORT") == NULL;

    check_before_init();
    pmi2_expect(PMI2_Init(&spawned, &size, &rank, &appnum), -1, "PMI2_Init");
    if (!PMI2_Initialized())
        pmi2_fail(rank, "PMI2_Initialized after init");
    pmi2_expect(PMI2_Init(&again[0], &again[1], &again[2], &again[3]), rank, "second PMI2_Init");
    if (again[1] != size || again[2] != rank)
        pmi2_fail(rank, "second PMI2_Init changed size or rank");
    pmi2_expect(PMI2_Job_GetRank(&again[0]), rank, "GetRank");
    pmi2_expect(PMI2_Info_GetSize(&again[1]), rank, "GetSize");
    if (again[0] != rank || again[1] != size)
        pmi2_fail(rank, "GetRank/GetSize disagree with PMI2_Init");
    if (singleton && (size != 1 || rank != 0 || spawned))
        pmi2_fail(rank, "singleton is not rank 0 of 1");
    if (strncmp(dpm_pmi2_library_version(), "dpm libpmi2 ", 12) != 0)
        pmi2_fail(rank, "library version");

    pmi2_expect(PMI2_Job_GetId(jobid, sizeof jobid), rank, "GetId");
    expect_rc(PMI2_Job_GetId(tiny, sizeof tiny), PMI2_ERR_NOMEM, rank, "GetId into a small buffer");
    expect_rc(PMI2_Job_Connect(jobid, NULL), PMI2_ERR_OTHER, rank, "Job_Connect");
    expect_rc(PMI2_Job_Disconnect(jobid), PMI2_ERR_OTHER, rank, "Job_Disconnect");

    check_arguments(rank);
    check_kvs(rank, size, jobid);
    check_node_attrs(rank, singleton || rank == 0 || (getenv("MPI_LOCALRANKID") && atoi(getenv("MPI_LOCALRANKID")) == 0));
    check_job_attrs(rank);
    check_threads(rank, size, jobid);

    /* Name service round trip (one rank only: the names are run-wide). */
    if (rank == 0) {
        char name[PMI2_MAX_VALLEN + 16];

        snprintf(name, sizeof name, "api-svc-%s", jobid);
        pmi2_expect(PMI2_Nameserv_publish(name, NULL, "api-port"), rank, "publish");
        expect_rc(PMI2_Nameserv_publish(name, NULL, "api-port"), PMI2_ERR_OTHER, rank, "second publish");
        pmi2_expect(PMI2_Nameserv_lookup(name, NULL, port, sizeof port), rank, "lookup");
        if (strcmp(port, "api-port") != 0)
            pmi2_fail(rank, "lookup value");
        pmi2_expect(PMI2_Nameserv_unpublish(name, NULL), rank, "unpublish");
        expect_rc(PMI2_Nameserv_lookup(name, NULL, port, sizeof port), PMI2_ERR_OTHER, rank, "lookup after unpublish");
    }
    if (singleton) {
        const char *cmds[] = { "/bin/true" };
        int maxprocs[] = { 1 }, errors[1];
        char left[16], right[16];
        int ring_rank = -1, ring_size = -1;

        expect_rc(PMI2_Job_Spawn(1, cmds, NULL, NULL, maxprocs, NULL, NULL, 0, NULL, tiny, sizeof tiny, errors),
                  PMI2_ERR_OTHER, rank, "singleton spawn");
        pmi2_expect(PMI2_KVS_Ring("me", &ring_rank, &ring_size, left, right, sizeof left), rank, "singleton ring");
        if (ring_rank != 0 || ring_size != 1 || strcmp(left, "me") != 0 || strcmp(right, "me") != 0)
            pmi2_fail(rank, "singleton ring values");
    }

    pmi2_expect(PMI2_KVS_Fence(), rank, "last Fence");
    pmi2_expect(PMI2_Finalize(), rank, "PMI2_Finalize");
    if (PMI2_Initialized())
        pmi2_fail(rank, "PMI2_Initialized after finalize");
    expect_rc(PMI2_KVS_Put("k", "v"), PMI2_ERR_INIT, rank, "Put after finalize");
    printf("pmi2 api ok rank %d size %d %s\n", rank, size, singleton ? "singleton" : "server");
    return 0;
}
