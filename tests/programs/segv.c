/*
 * segv.c - checks that a rank killed by a signal ends the whole job and is
 * reported as a signal death (not as a normal exit).
 *
 * Usage: segv [RANK]   (default rank 1)
 * Rank RANK raises SIGSEGV right after MPI_Init; the others wait 30 s and
 * must be killed by the launcher.  Hydra 5.0.2 exits 11 (the signal
 * number, not 128+11) and prints a "BAD TERMINATION" banner.
 */
#include <mpi.h>
#include <signal.h>
#include "victim.h"

int main(int argc, char **argv)
{
    int rank, size;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    if (rank == victim_rank(argc, argv, size)) {
        printf("rank %d raising SIGSEGV\n", rank);
        fflush(stdout);
        signal(SIGSEGV, SIG_DFL);
        raise(SIGSEGV);
    } else {
        bystander_wait(rank);
    }

    MPI_Finalize();
    return 0;
}
