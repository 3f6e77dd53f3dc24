/*
 * pmi2_abort.c - checks that a PMI-2 abort (Slurm's client sends
 * "cmd=abort;isworld=TRUE;msg=...;" and then exits with the flag value)
 * ends the whole job quickly.
 *
 * Usage: pmi2_abort [RANK]   (default rank 1)
 * Rank RANK calls PMI2_Abort(1, "pmi2 abort test") right after PMI2_Init;
 * the others wait 30 s and must be killed by the launcher.
 */
#include "pmi2_expect.h"
#include "victim.h"

int main(int argc, char **argv)
{
    int spawned, size, rank, appnum;

    pmi2_expect(PMI2_Init(&spawned, &size, &rank, &appnum), -1, "PMI2_Init");

    if (rank == victim_rank(argc, argv, size)) {
        printf("rank %d calling PMI2_Abort\n", rank);
        fflush(stdout);
        PMI2_Abort(1, "pmi2 abort test");
        printf("pmi2 FAIL rank %d PMI2_Abort returned\n", rank);
        return 1;
    }
    bystander_wait(rank);

    PMI2_Finalize();
    return 0;
}
