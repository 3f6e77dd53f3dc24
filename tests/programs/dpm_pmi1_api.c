/*
 * dpm_pmi1_api.c - dpm's libpmi (the PMI-1 API of include/pmi.h) end to
 * end: init, job facts, the KVS with a barrier, the clique, the name
 * service, re-init after finalize, and (with argument "spawn") a spawn.
 *
 * Usage: dpm_pmi1_api [spawn]     under a launcher, any -n, or alone
 *
 * Every rank puts "p1-<rank>", barriers and reads every rank's key back.
 * Lines printed (tests match them):
 *   pmi1 rank R size S appnum A universe U kvsname K
 *   pmi1 rank R clique N: r,r,...
 *   pmi1 rank R lookup SERVICE=PORT                    (the last rank)
 *   pmi1 spawn parent ok errors 0,0; missing program refused (rc=-1)
 *   pmi1 child R of S ok preput hello-from-K           (spawned children)
 *   pmi1 api ok rank R size S server|singleton
 * Any failure prints "pmi1 FAIL rank R <what> ..." and exits 1.
 */
#include <pmi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int my_rank = -1;

static void fail(const char *what, int rc)
{
    printf("pmi1 FAIL rank %d %s rc=%d\n", my_rank, what, rc);
    fflush(stdout);
    exit(1);
}

static void expect(int rc, const char *what)
{
    if (rc != PMI_SUCCESS)
        fail(what, rc);
}

static void expect_rc(int rc, int want, const char *what)
{
    if (rc != want)
        fail(what, rc);
}

static int child_run(int rank, int size)
{
    char kvsname[256], value[1024], want[300];

    expect(PMI_KVS_Get_my_name(kvsname, sizeof kvsname), "child Get_my_name");
    /* The preput is visible at once, before any barrier. */
    expect(PMI_KVS_Get(kvsname, "p1-parent", value, sizeof value), "child preput get");
    expect(PMI_Barrier(), "child Barrier");
    printf("pmi1 child %d of %d ok preput %s\n", rank, size, value);
    snprintf(want, sizeof want, "hello-from-");
    if (strncmp(value, want, strlen(want)) != 0)
        fail("child preput value", -1);
    expect(PMI_Finalize(), "child Finalize");
    return 0;
}

static void spawn_run(const char *self, const char *kvsname, int rank)
{
    const char *cmds[] = { self };
    const char *child_args[] = { "child", NULL };
    const char **argvs[] = { child_args };
    const char *bad_cmds[] = { "/nonexistent/dpm-pmi1-child" };
    int maxprocs[] = { 2 }, info_sizes[] = { 1 }, errors[2] = { -1, -1 };
    char greeting[300];
    PMI_keyval_t info[] = { { "wdir", "/" } };
    const PMI_keyval_t *infos[] = { info };
    PMI_keyval_t preput[1];
    int bad;

    if (rank == 0) {
        snprintf(greeting, sizeof greeting, "hello-from-%s", kvsname);
        preput[0].key = "p1-parent";
        preput[0].val = greeting;
        expect(PMI_Spawn_multiple(1, cmds, argvs, maxprocs, info_sizes, infos, 1, preput, errors), "Spawn_multiple");
        if (errors[0] != 0 || errors[1] != 0)
            fail("spawn errors", errors[0]);
        bad = PMI_Spawn_multiple(1, bad_cmds, argvs, maxprocs, NULL, NULL, 0, NULL, errors);
        if (bad == PMI_SUCCESS)
            fail("spawn of a missing program succeeded", bad);
        printf("pmi1 spawn parent ok errors %d,%d; missing program refused (rc=%d)\n", errors[0], errors[1], bad);
    }
    expect(PMI_Barrier(), "Barrier after spawn");
}

static void kvs_run(const char *kvsname, int rank, int size)
{
    char key[64], want[64], value[1024], small[4];

    expect_rc(PMI_KVS_Put(kvsname, "p1-bad", "has space"), PMI_ERR_INVALID_VAL, "Put value with space");
    expect_rc(PMI_KVS_Put(kvsname, "p1=bad", "v"), PMI_ERR_INVALID_KEY, "Put key with =");
    expect_rc(PMI_KVS_Put(kvsname, "p1-bad", ""), PMI_ERR_INVALID_VAL, "Put empty value");
    snprintf(key, sizeof key, "p1-%d", rank);
    snprintf(want, sizeof want, "v%d=x", rank);
    expect(PMI_KVS_Put(kvsname, key, want), "Put");
    expect(PMI_KVS_Commit(kvsname), "Commit");
    expect(PMI_Barrier(), "Barrier");
    for (int r = 0; r < size; r++) {
        snprintf(key, sizeof key, "p1-%d", r);
        snprintf(want, sizeof want, "v%d=x", r);
        expect(PMI_KVS_Get(kvsname, key, value, sizeof value), key);
        if (strcmp(value, want) != 0)
            fail("Get value", r);
    }
    expect_rc(PMI_KVS_Get(kvsname, "p1-missing", value, sizeof value), PMI_FAIL, "Get missing key");
    expect_rc(PMI_KVS_Get(kvsname, "p1-0", small, sizeof small), PMI_ERR_NOMEM, "Get into a small buffer");
}

static void clique_print(int rank)
{
    int n = 0, ranks[64];

    expect(PMI_Get_clique_size(&n), "Get_clique_size");
    if (n < 1 || n > 64)
        fail("clique size", n);
    expect(PMI_Get_clique_ranks(ranks, n), "Get_clique_ranks");
    printf("pmi1 rank %d clique %d:", rank, n);
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? "," : " ", ranks[i]);
    printf("\n");
}

static void names_run(const char *kvsname, int rank, int size)
{
    char service[300], port[PMI_MAX_PORT_NAME];

    snprintf(service, sizeof service, "p1svc-%s", kvsname);
    if (rank == 0) {
        expect(PMI_Publish_name(service, "p1-port"), "Publish_name");
        expect_rc(PMI_Publish_name(service, "p1-port"), PMI_FAIL, "second Publish_name");
    }
    expect(PMI_Barrier(), "Barrier after publish");
    if (rank == size - 1) {
        expect(PMI_Lookup_name(service, port), "Lookup_name");
        if (strcmp(port, "p1-port") != 0)
            fail("Lookup_name value", -1);
        printf("pmi1 rank %d lookup %s=%s\n", rank, "p1svc", port);
    }
    expect(PMI_Barrier(), "Barrier after lookup");
    if (rank == 0) {
        expect(PMI_Unpublish_name(service), "Unpublish_name");
        expect_rc(PMI_Lookup_name(service, port), PMI_FAIL, "Lookup_name after unpublish");
        expect_rc(PMI_Unpublish_name(service), PMI_FAIL, "second Unpublish_name");
    }
}

int main(int argc, char **argv)
{
    int spawned = -1, size = 0, rank = -1, appnum = -1, universe = 0, init = -1, again = -1;
    int name_max = 0, key_max = 0, val_max = 0;
    char kvsname[256];
    int singleton = getenv("PMI_FD") == NULL && getenv("PMI_PORT") == NULL;

    expect(PMI_Initialized(&init), "Initialized");
    if (init != PMI_FALSE)
        fail("Initialized before PMI_Init", init);
    expect_rc(PMI_Get_size(&size), PMI_ERR_INIT, "Get_size before init");
    expect_rc(PMI_Barrier(), PMI_ERR_INIT, "Barrier before init");

    expect(PMI_Init(&spawned), "PMI_Init");
    expect(PMI_Get_rank(&rank), "Get_rank");
    my_rank = rank;
    expect(PMI_Get_size(&size), "Get_size");
    if (spawned == PMI_TRUE)
        return child_run(rank, size);
    expect(PMI_Initialized(&init), "Initialized");
    if (init != PMI_TRUE)
        fail("Initialized after PMI_Init", init);
    if (strncmp(dpm_pmi_library_version(), "dpm libpmi ", 11) != 0)
        fail("library version", 0);
    expect(PMI_Get_appnum(&appnum), "Get_appnum");
    expect(PMI_Get_universe_size(&universe), "Get_universe_size");
    expect(PMI_KVS_Get_name_length_max(&name_max), "name_length_max");
    expect(PMI_KVS_Get_key_length_max(&key_max), "key_length_max");
    expect(PMI_KVS_Get_value_length_max(&val_max), "value_length_max");
    if (name_max < 16 || key_max < 32 || val_max < 256)
        fail("maxes", name_max);
    expect(PMI_KVS_Get_my_name(kvsname, sizeof kvsname), "Get_my_name");
    expect_rc(PMI_KVS_Get_my_name(kvsname, 2), PMI_ERR_NOMEM, "Get_my_name into a small buffer");
    expect(PMI_KVS_Get_my_name(kvsname, sizeof kvsname), "Get_my_name");
    printf("pmi1 rank %d size %d appnum %d universe %d kvsname %s\n", rank, size, appnum, universe, kvsname);

    kvs_run(kvsname, rank, size);
    clique_print(rank);
    names_run(kvsname, rank, size);
    if (argc > 1 && strcmp(argv[1], "spawn") == 0) {
        /* The children start in "/" (the wdir info key): name ourselves absolutely. */
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0)
            fail("readlink /proc/self/exe", (int)n);
        self[n] = '\0';
        spawn_run(self, kvsname, rank);
    }

    /* A second PMI_Init before PMI_Finalize answers the same. */
    expect(PMI_Init(&spawned), "second PMI_Init");
    expect(PMI_Get_rank(&again), "Get_rank after the second PMI_Init");
    if (again != rank || spawned != PMI_FALSE)
        fail("rank or spawned changed on the second PMI_Init", again);
    expect(PMI_Barrier(), "last Barrier");
    expect(PMI_Finalize(), "PMI_Finalize");
    expect(PMI_Initialized(&init), "Initialized");
    if (init != PMI_FALSE)
        fail("Initialized after PMI_Finalize", init);
    expect_rc(PMI_KVS_Put(kvsname, "p1-late", "v"), PMI_ERR_INIT, "Put after PMI_Finalize");
    printf("pmi1 api ok rank %d size %d %s\n", rank, size, singleton ? "singleton" : "server");
    return 0;
}
