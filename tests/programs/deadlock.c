/* deadlock.c - a hung job for dpm's stack-trace tests (crates/dpm/tests/
 * mpir.rs): after MPI_Init every rank prints "rank R waits" and then waits
 * in MPI_Recv for a message from the next rank that nobody sends. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, value = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("rank %d waits\n", rank);
    fflush(stdout);
    MPI_Recv(&value, 1, MPI_INT, (rank + 1) % size, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Finalize();
    return 0;
}
