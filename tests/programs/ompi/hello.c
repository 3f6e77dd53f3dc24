/* hello.c - Open MPI proof program for crates/pmix: prints its rank and the
 * world size, then the allreduce (sum) of every rank's rank+1, which must be
 * n(n+1)/2. With argv[1] = "abort", rank 0 calls MPI_Abort(MPI_COMM_WORLD, 7)
 * after the allreduce instead of finalizing; with "kill", the last rank
 * kills itself with SIGKILL there (the others wait to be killed). */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, size, mine, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("rank %d of %d\n", rank, size);
    mine = rank + 1;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d allreduce %d\n", rank, sum);
    fflush(stdout);
    if (argc > 1 && strcmp(argv[1], "abort") == 0) {
        if (rank == 0)
            MPI_Abort(MPI_COMM_WORLD, 7);
        pause(); /* the others wait to be killed */
    }
    if (argc > 1 && strcmp(argv[1], "kill") == 0) {
        if (rank == size - 1)
            raise(SIGKILL);
        pause();
    }
    MPI_Finalize();
    return 0;
}
