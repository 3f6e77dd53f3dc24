/*
 * dpm_pmi2_hint.c - puts with a hint (PMI2_KVS_PutHint, docs/pmi-extensions.md):
 * sparse keys read by the two neighbours, a dense key read by everyone,
 * unhinted keys read by everyone, each followed by a fence; then a dense
 * key put again (a later put wins at the next fence).
 *
 * Prints "pmi2 hint ok rank R"; a failure "pmi2 FAIL ..." and exit 1.
 */
#include "pmi2_expect.h"

int main(void)
{
    int spawned, size, rank, appnum;
    char jobid[PMI2_MAX_VALLEN], key[PMI2_MAX_KEYLEN], value[PMI2_MAX_VALLEN];

    pmi2_expect(PMI2_Init(&spawned, &size, &rank, &appnum), -1, "PMI2_Init");
    pmi2_expect(PMI2_Job_GetId(jobid, sizeof jobid), rank, "PMI2_Job_GetId");

    snprintf(key, sizeof key, "sparse-%d", rank);
    snprintf(value, sizeof value, "s%d", rank);
    pmi2_expect(PMI2_KVS_PutHint(key, value, PMI2_HINT_SPARSE), rank, "PutHint sparse");
    snprintf(key, sizeof key, "none-%d", rank);
    snprintf(value, sizeof value, "n%d", rank);
    pmi2_expect(PMI2_KVS_PutHint(key, value, PMI2_HINT_NONE), rank, "PutHint none");
    if (rank == 0)
        pmi2_expect(PMI2_KVS_PutHint("dense", "d1", PMI2_HINT_DENSE), rank, "PutHint dense");
    pmi2_expect(PMI2_KVS_Fence(), rank, "PMI2_KVS_Fence");

    for (int step = -1; step <= 1; step += 2) {
        int src = (rank + step + size) % size;
        snprintf(key, sizeof key, "sparse-%d", src);
        snprintf(value, sizeof value, "s%d", src);
        pmi2_expect_value(PMI2_KVS_Get, jobid, src, key, value, rank);
    }
    for (int src = 0; src < size; src++) {
        snprintf(key, sizeof key, "none-%d", src);
        snprintf(value, sizeof value, "n%d", src);
        pmi2_expect_value(PMI2_KVS_Get, jobid, src, key, value, rank);
    }
    pmi2_expect_value(PMI2_KVS_Get, jobid, 0, "dense", "d1", rank);

    pmi2_expect(PMI2_KVS_Fence(), rank, "PMI2_KVS_Fence");
    if (rank == 0)
        pmi2_expect(PMI2_KVS_PutHint("dense", "d2", PMI2_HINT_DENSE), rank, "PutHint dense again");
    pmi2_expect(PMI2_KVS_Fence(), rank, "PMI2_KVS_Fence");
    pmi2_expect_value(PMI2_KVS_Get, jobid, 0, "dense", "d2", rank);

    pmi2_expect(PMI2_Finalize(), rank, "PMI2_Finalize");
    printf("pmi2 hint ok rank %d\n", rank);
    return 0;
}
