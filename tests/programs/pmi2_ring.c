/*
 * pmi2_ring.c - the ring exchange (docs/pmi-extensions.md) through the
 * PMI-2 client API: PMIX_Ring, Slurm's call, and with dpm's library also
 * PMI2_KVS_Ring, the dpm extension that reads the ring size the server
 * reports. Built twice: bin/pmi2_ring against Slurm's libpmi2 and
 * bin/dpm_pmi2_ring against dpm's (-DDPM_PMI2).
 *
 * Every rank enters "v<round>-<rank>" twice (two rounds: rings match in
 * call order) and prints per call
 *   pmi2 ring CALL round N rank R ringrank X size S left L right V
 * which the test checks across ranks (the ring ranks are a permutation,
 * left and right are the ring neighbours' values); then "pmi2 ring ok
 * rank R". A failing call prints "pmi2 FAIL ... rc=N" and exits 1.
 */
#include <string.h>
#include "pmi2_expect.h"

typedef int ring_fn(const char *, int *, int *, char *, char *, int);

static void ring_round(ring_fn *fn, const char *name, int round, int rank, int size)
{
    char value[PMI2_MAX_VALLEN], left[PMI2_MAX_VALLEN], right[PMI2_MAX_VALLEN];
    int ring_rank = -1, ring_size = -1;

    snprintf(value, sizeof value, "v%d-%d", round, rank);
    pmi2_expect(fn(value, &ring_rank, &ring_size, left, right, sizeof left), rank, name);
    printf("pmi2 ring %s round %d rank %d ringrank %d size %d left %s right %s\n",
           name, round, rank, ring_rank, ring_size, left, right);
    if (ring_size != size || ring_rank < 0 || ring_rank >= size)
        pmi2_fail(rank, "ring rank or size out of range");
}

int main(void)
{
    int spawned, size, rank, appnum;

    pmi2_expect(PMI2_Init(&spawned, &size, &rank, &appnum), -1, "PMI2_Init");
    ring_round(PMIX_Ring, "PMIX_Ring", 1, rank, size);
#ifdef DPM_PMI2_EXTENSIONS
    ring_round(PMI2_KVS_Ring, "PMI2_KVS_Ring", 2, rank, size);
#else
    ring_round(PMIX_Ring, "PMIX_Ring", 2, rank, size);
#endif
    pmi2_expect(PMI2_KVS_Fence(), rank, "PMI2_KVS_Fence");
    pmi2_expect(PMI2_Finalize(), rank, "PMI2_Finalize");
    printf("pmi2 ring ok rank %d\n", rank);
    return 0;
}
