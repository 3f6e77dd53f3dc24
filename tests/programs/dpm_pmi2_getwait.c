/*
 * dpm_pmi2_getwait.c - the waiting get (PMI2_KVS_GetWait, wait=TRUE in
 * docs/pmi-extensions.md): no fence between a put and the get that reads it.
 *
 * Rank 0 sleeps 300 ms, then puts "late" (no fence); every other rank asks
 * for it at once, so its get must block until the put. Then every rank
 * puts "w-<rank>" and reads its right neighbour's key, again without a
 * fence (the paper's fence-free sparse exchange). A closing fence keeps
 * the ranks alive until all have read. Prints
 *   pmi2 getwait rank R got late after T ms
 *   pmi2 getwait ok rank R
 * or "pmi2 FAIL ... rc=N" and exit 1.
 */
#include <time.h>
#include "pmi2_expect.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(void)
{
    int spawned, size, rank, appnum;
    char jobid[PMI2_MAX_VALLEN], key[PMI2_MAX_KEYLEN], value[PMI2_MAX_VALLEN];

    pmi2_expect(PMI2_Init(&spawned, &size, &rank, &appnum), -1, "PMI2_Init");
    pmi2_expect(PMI2_Job_GetId(jobid, sizeof jobid), rank, "PMI2_Job_GetId");

    if (rank == 0) {
        struct timespec delay = { 0, 300 * 1000 * 1000 };
        nanosleep(&delay, NULL);
        pmi2_expect(PMI2_KVS_Put("late", "late-value"), rank, "Put late");
    } else {
        double start = now_ms();
        pmi2_expect_value(PMI2_KVS_GetWait, jobid, 0, "late", "late-value", rank);
        printf("pmi2 getwait rank %d got late after %.0f ms\n", rank, now_ms() - start);
    }

    snprintf(key, sizeof key, "w-%d", rank);
    snprintf(value, sizeof value, "w%d", rank);
    pmi2_expect(PMI2_KVS_PutHint(key, value, PMI2_HINT_SPARSE), rank, "PutHint w");
    snprintf(key, sizeof key, "w-%d", (rank + 1) % size);
    snprintf(value, sizeof value, "w%d", (rank + 1) % size);
    pmi2_expect_value(PMI2_KVS_GetWait, jobid, (rank + 1) % size, key, value, rank);

    pmi2_expect(PMI2_KVS_Fence(), rank, "PMI2_KVS_Fence");
    pmi2_expect(PMI2_Finalize(), rank, "PMI2_Finalize");
    printf("pmi2 getwait ok rank %d\n", rank);
    return 0;
}
