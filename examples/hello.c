/*
 * hello.c - the smallest useful MPI job for trying out dpm.
 *
 * Every rank prints one line with its rank, the job size, the host it runs
 * on and the sum of all ranks computed with MPI_Allreduce.  The allreduce
 * proves that the ranks really found each other through the process
 * manager (PMI put/fence/get), not just that they started.  Exits non-zero
 * when the sum is wrong.
 */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, sum = -1, len;
    char host[MPI_MAX_PROCESSOR_NAME];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);

    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int expected = size * (size - 1) / 2;

    printf("hello from rank %d of %d on host %s: sum of ranks = %d (expected %d)\n",
           rank, size, host, sum, expected);
    fflush(stdout);

    MPI_Finalize();
    return sum == expected ? 0 : 1;
}
