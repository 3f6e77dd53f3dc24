/*
 * abort.c - checks that MPI_Abort on one rank ends the whole job quickly
 * with the requested exit code.
 *
 * Usage: abort [RANK [CODE]]   (defaults: rank 1, code 7)
 * Rank RANK calls MPI_Abort(MPI_COMM_WORLD, CODE) right after MPI_Init; the
 * others wait 30 s without any barrier, so only the launcher can end them.
 * Expected: the launcher exits with CODE within about a second, and no
 * "was not killed" line appears.
 */
#include <mpi.h>
#include "victim.h"

int main(int argc, char **argv)
{
    int rank, size;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int code = arg_int(argc, argv, 2, 7);
    if (rank == victim_rank(argc, argv, size)) {
        printf("rank %d aborting with code %d\n", rank, code);
        fflush(stdout);
        MPI_Abort(MPI_COMM_WORLD, code);
    } else {
        bystander_wait(rank);
    }

    MPI_Finalize();
    return 0;
}
