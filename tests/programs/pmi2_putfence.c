/*
 * pmi2_putfence.c - checks the PMI-2 key-value exchange as Slurm's libpmi2
 * client drives it: fullinit, job-getid, kvs-put, kvs-fence, kvs-get of
 * every other rank's key, and the job attributes MPICH reads.
 *
 * Every rank puts "key-<rank>" = "value-<rank>", fences, then gets the key
 * of each other rank (job id from PMI2_Job_GetId, source id = that rank)
 * and compares.  It prints the PMI_process_mapping and universeSize job
 * attributes (a missing mapping is a failure, universeSize may be unset)
 * and ends with "pmi2 putfence ok rank R size S".
 */
#include <string.h>
#include "pmi2_expect.h"

static void job_attr_print(const char *name, int rank, int required)
{
    char value[PMI2_MAX_VALLEN];
    int found = 0;

    pmi2_expect(PMI2_Info_GetJobAttr(name, value, sizeof value, &found), rank, name);
    if (found)
        printf("pmi2 rank %d %s=%s\n", rank, name, value);
    else if (required)
        pmi2_fail(rank, name);
    else
        printf("pmi2 rank %d %s unset\n", rank, name);
}

int main(void)
{
    int spawned, size, rank, appnum;
    char jobid[PMI2_MAX_VALLEN], key[PMI2_MAX_KEYLEN], value[PMI2_MAX_VALLEN];

    pmi2_expect(PMI2_Init(&spawned, &size, &rank, &appnum), -1, "PMI2_Init");
    pmi2_expect(PMI2_Job_GetId(jobid, sizeof jobid), rank, "PMI2_Job_GetId");
    printf("pmi2 rank %d size %d appnum %d spawned %d jobid %s\n",
           rank, size, appnum, spawned, jobid);

    snprintf(key, sizeof key, "key-%d", rank);
    snprintf(value, sizeof value, "value-%d", rank);
    pmi2_expect(PMI2_KVS_Put(key, value), rank, "PMI2_KVS_Put");
    pmi2_expect(PMI2_KVS_Fence(), rank, "PMI2_KVS_Fence");

    for (int src = 0; src < size; src++) {
        if (src == rank)
            continue;
        snprintf(key, sizeof key, "key-%d", src);
        snprintf(value, sizeof value, "value-%d", src);
        pmi2_expect_value(PMI2_KVS_Get, jobid, src, key, value, rank);
    }

    job_attr_print("PMI_process_mapping", rank, 1);
    job_attr_print("universeSize", rank, 0);

    pmi2_expect(PMI2_Finalize(), rank, "PMI2_Finalize");
    printf("pmi2 putfence ok rank %d size %d\n", rank, size);
    return 0;
}
