/*
 * pmi2_ring_order.c - the ring exchange through Slurm's libpmi2 (PMIX_Ring), the
 * client dpm's `cmd=ring` is compatible with.
 *
 * Two rings in a row: every rank enters "r<rank>", then "s<rank>" (so a test
 * sees that repeated rings are matched in order).  For each it prints
 *   ring <round> rank <rank> pos <ring rank> size <ring size> left <value> right <value>
 * and ends with "pmi2 ring ok rank R".  The test rebuilds the ring from
 * these lines: neighbours must agree, and the order must keep each node's
 * ranks together.
 */
#include <string.h>
#include "pmi2_expect.h"

int main(void)
{
    int spawned, size, rank, appnum;

    pmi2_expect(PMI2_Init(&spawned, &size, &rank, &appnum), -1, "PMI2_Init");
    for (int round = 0; round < 2; round++) {
        char value[PMI2_MAX_VALLEN], left[PMI2_MAX_VALLEN] = "", right[PMI2_MAX_VALLEN] = "";
        int pos = -1, ring_size = -1;

        snprintf(value, sizeof value, "%c%d", round == 0 ? 'r' : 's', rank);
        pmi2_expect(PMIX_Ring(value, &pos, &ring_size, left, right, PMI2_MAX_VALLEN), rank, "PMIX_Ring");
        printf("ring %d rank %d pos %d size %d left %s right %s\n", round, rank, pos, ring_size, left, right);
        fflush(stdout);
    }
    pmi2_expect(PMI2_Finalize(), rank, "PMI2_Finalize");
    printf("pmi2 ring ok rank %d\n", rank);
    return 0;
}
