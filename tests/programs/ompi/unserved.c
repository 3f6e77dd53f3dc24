/* unserved.c - a PMIx client calling what dpm's PMIx host does not serve
 * (docs/pmix.md, "Upcalls dpm does not serve"): each call must come back
 * with an error at once, never hang. Every rank prints "<call> <status>"
 * per call, then all ranks construct a PMIx group that also names a rank
 * the job does not have (one past the last), which dpm's launcher refuses
 * on every node: each rank prints "group <rank> <status>". No MPI_Init:
 * the PMIx functions are looked up in the libpmix that libmpi.so.40
 * brought in (no pmix.h is needed; the types are declared as OpenPMIx v5
 * lays them out on LP64: pmix_info_t 552 bytes, its value at 520). */
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "pmix_abi.h"

typedef struct {
    char key[512];
    uint32_t flags;
    pmix_value_t value;
} pmix_info_t;
typedef struct {
    char **keys;
    pmix_info_t *qualifiers;
    size_t nqual;
} pmix_query_t;
typedef struct {
    char *bytes;
    size_t size;
} pmix_byte_object_t;

#define PMIX_BOOL 1
#define PMIX_UINT32 14

static void flag(pmix_info_t *info, const char *key)
{
    memset(info, 0, sizeof *info);
    strncpy(info->key, key, sizeof info->key - 1);
    info->value.type = PMIX_BOOL;
    info->value.data.u64 = 1;
}

int main(void)
{
    pmix_proc_t me;
    pmix_info_t info[2], *results = NULL;
    size_t nresults = 0;
    int rc, size = 0;
    int (*init)(pmix_proc_t *, void *, size_t) = pmix_fn("PMIx_Init");
    if ((rc = init(&me, NULL, 0)) != 0) {
        fprintf(stderr, "PMIx_Init %d\n", rc);
        return 2;
    }
    /* Keeps libmpi.so.40 linked (and so libpmix loaded, and dpm's --pmi
     * auto choosing PMIx) without initializing MPI. */
    int mpi_up = 0;
    MPI_Initialized(&mpi_up);

    /* query (slot 15): a key the library cannot answer itself. */
    int (*query)(pmix_query_t *, size_t, pmix_info_t **, size_t *) = pmix_fn("PMIx_Query_info");
    char *keys[] = {"pmix.qry.qlst", NULL};
    pmix_query_t q = {keys, NULL, 0};
    printf("query %d\n", query(&q, 1, &results, &nresults));
    /* allocate (slot 18). */
    int (*alloc)(int, pmix_info_t *, size_t, pmix_info_t **, size_t *) = pmix_fn("PMIx_Allocation_request");
    flag(&info[0], "pmix.alloc.nnodes");
    info[0].value.type = PMIX_UINT32;
    printf("allocate %d\n", alloc(1, info, 1, &results, &nresults));
    /* job_control (slot 19: offered, and refuses what reaches it). */
    int (*job_control)(const pmix_proc_t *, size_t, const pmix_info_t *, size_t, pmix_info_t **, size_t *) = pmix_fn("PMIx_Job_control");
    flag(&info[0], "pmix.jctrl.kill");
    printf("job_control %d\n", job_control(&me, 1, info, 1, &results, &nresults));
    /* monitor (slot 20): a file-size monitor (the library serves heartbeats itself). */
    int (*monitor)(const pmix_info_t *, int, const pmix_info_t *, size_t, pmix_info_t **, size_t *) = pmix_fn("PMIx_Process_monitor");
    flag(&info[0], "pmix.monitor.fsize");
    printf("monitor %d\n", monitor(info, -1, NULL, 0, &results, &nresults));
    /* get_credential (slot 21) and validate_credential (slot 22). */
    int (*get_cred)(const pmix_info_t *, size_t, pmix_byte_object_t *) = pmix_fn("PMIx_Get_credential");
    pmix_byte_object_t cred = {NULL, 0};
    printf("get_credential %d\n", get_cred(NULL, 0, &cred));
    int (*validate)(const pmix_byte_object_t *, const pmix_info_t *, size_t, pmix_info_t **, size_t *) = pmix_fn("PMIx_Validate_credential");
    pmix_byte_object_t bogus = {"dpm", 3};
    printf("validate_credential %d\n", validate(&bogus, NULL, 0, &results, &nresults));
    /* fabric (slot 26). */
    int (*fabric)(void *, const pmix_info_t *, size_t) = pmix_fn("PMIx_Fabric_register");
    char fabric_obj[64] = {0};
    printf("fabric %d\n", fabric(fabric_obj, NULL, 0));
    fflush(stdout);

    /* A group over every rank and one the job does not have. */
    int (*get)(const pmix_proc_t *, const char *, const pmix_info_t *, size_t, pmix_value_t **) = pmix_fn("PMIx_Get");
    pmix_proc_t job = me;
    pmix_value_t *val = NULL;
    job.rank = UINT32_MAX - 1; /* PMIX_RANK_WILDCARD */
    if ((rc = get(&job, "pmix.job.size", NULL, 0, &val)) != 0) {
        fprintf(stderr, "PMIx_Get(job size) %d\n", rc);
        return 2;
    }
    size = (int)(uint32_t)val->data.u64;
    pmix_proc_t members[size + 1];
    for (int i = 0; i <= size; i++) {
        members[i] = me;
        members[i].rank = (uint32_t)i;
    }
    int (*construct)(const char *, const pmix_proc_t *, size_t, const pmix_info_t *, size_t, pmix_info_t **, size_t *) = pmix_fn("PMIx_Group_construct");
    flag(&info[0], "pmix.grp.actxid");
    rc = construct("dpm.unserved", members, (size_t)size + 1, info, 1, &results, &nresults);
    printf("group %u %d\n", me.rank, rc);
    fflush(stdout);
    int (*finalize)(const pmix_info_t *, size_t) = pmix_fn("PMIx_Finalize");
    finalize(NULL, 0);
    return 0;
}
