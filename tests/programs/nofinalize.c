/*
 * nofinalize.c - checks what the launcher does when a rank exits with
 * status 0 but never called MPI_Finalize (its PMI connection just closes).
 *
 * Usage: nofinalize [RANK]   (default rank 1)
 * Rank RANK calls exit(0) right after MPI_Init; the others wait 30 s.
 * Hydra 5.0.2 (observed) sees the PMI connection close without finalize,
 * kills the bystanders with SIGKILL at once, and still exits 0.
 */
#include <mpi.h>
#include "victim.h"

int main(int argc, char **argv)
{
    int rank, size;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    if (rank == victim_rank(argc, argv, size)) {
        printf("rank %d exiting without MPI_Finalize\n", rank);
        fflush(stdout);
        exit(0);
    }
    bystander_wait(rank);

    MPI_Finalize();
    return 0;
}
