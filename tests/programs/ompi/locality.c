/* locality.c - what the PMIx host told Open MPI about where its ranks run
 * (crates/dpm/tests/binding_pmix.rs). Each rank prints one line per rank
 * of the job it asks about (itself and every other rank):
 *   "rank R of P cpuset <PMIX_CPUSET|none> locality <PMIX_LOCALITY_STRING|none|null>"
 * ("none": the get failed, "null": the key is there without a string, the
 * way PRRTE says a rank it forks is not bound), then
 *   "rank R allowed <its own Cpus_allowed_list>"
 *   "rank R split shared <n> core <n> l3cache <n> numa <n> socket <n>"
 * (the sizes of MPI_COMM_TYPE_SHARED and Open MPI's locality-based splits,
 * which it computes from the locality strings). The PMIx functions are
 * looked up in the libpmix that libmpi.so.40 brought in (no pmix.h; the
 * types as OpenPMIx v5 lays them out on LP64, see unserved.c). */
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmix_abi.h"

#define PMIX_STRING 3

typedef int (*get_fn)(const pmix_proc_t *, const char *, const void *, size_t, pmix_value_t **);

/* The string under key for proc, "none" if the get fails, "null" if the
 * value is a string without one. */
static const char *string_get(get_fn get, const pmix_proc_t *proc, const char *key)
{
    pmix_value_t *val = NULL;
    if (get(proc, key, NULL, 0, &val) != 0 || !val)
        return "none";
    if (val->type != PMIX_STRING)
        return "not-a-string";
    return val->data.string ? val->data.string : "null";
}

static void allowed_print(int rank)
{
    char line[4096];
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "Cpus_allowed_list:", 18) == 0) {
            char *v = line + 18;
            v += strspn(v, " \t");
            v[strcspn(v, "\n")] = '\0';
            printf("rank %d allowed %s\n", rank, v);
        }
    }
    if (f)
        fclose(f);
}

static int split_size(int type)
{
    MPI_Comm c;
    int n = -1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, type, 0, MPI_INFO_NULL, &c) != MPI_SUCCESS)
        return -1;
    if (c == MPI_COMM_NULL)
        return 0;
    MPI_Comm_size(c, &n);
    MPI_Comm_free(&c);
    return n;
}

int main(int argc, char **argv)
{
    int rank, size;
    pmix_proc_t me;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int (*init)(pmix_proc_t *, void *, size_t) = pmix_fn("PMIx_Init");
    if (init(&me, NULL, 0) != 0) {
        fprintf(stderr, "PMIx_Init failed\n");
        return 2;
    }
    get_fn get = (get_fn)pmix_fn("PMIx_Get");
    for (int r = 0; r < size; r++) {
        pmix_proc_t p = me;
        p.rank = (uint32_t)r;
        printf("rank %d of %d cpuset %s", rank, r, string_get(get, &p, "pmix.cpuset"));
        printf(" locality %s\n", string_get(get, &p, "pmix.locstr"));
    }
    allowed_print(rank);
    printf("rank %d split shared %d core %d l3cache %d numa %d socket %d\n", rank,
           split_size(MPI_COMM_TYPE_SHARED), split_size(OMPI_COMM_TYPE_CORE),
           split_size(OMPI_COMM_TYPE_L3CACHE), split_size(OMPI_COMM_TYPE_NUMA),
           split_size(OMPI_COMM_TYPE_SOCKET));
    fflush(stdout);
    int (*finalize)(const void *, size_t) = pmix_fn("PMIx_Finalize");
    finalize(NULL, 0);
    MPI_Finalize();
    return 0;
}
