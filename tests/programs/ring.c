/*
 * ring.c - checks that MPI point-to-point and collective traffic works
 * between every pair of neighbours of a job started by the launcher.
 *
 * Each rank contributes the value 10*rank+1.  An MPI_Allreduce must give the
 * closed-form sum, and a ring MPI_Sendrecv (send right, receive from left)
 * must deliver exactly the left neighbour's value.  Rank 0 prints
 * "ring ok size=N sum=S"; any rank that sees a wrong number prints
 * "ring FAIL ..." and the job exits non-zero.
 */
#include <mpi.h>
#include <stdio.h>

static int value_of(int rank)
{
    return 10 * rank + 1;
}

int main(int argc, char **argv)
{
    int rank, size, sum = -1, got = -1, bad = 0, anybad = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int mine = value_of(rank);
    int expected_sum = 10 * size * (size - 1) / 2 + size;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (sum != expected_sum) {
        printf("ring FAIL rank %d allreduce sum=%d expected=%d\n", rank, sum, expected_sum);
        bad = 1;
    }

    int right = (rank + 1) % size;
    int left = (rank + size - 1) % size;
    MPI_Sendrecv(&mine, 1, MPI_INT, right, 0, &got, 1, MPI_INT, left, 0,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (got != value_of(left)) {
        printf("ring FAIL rank %d got %d from rank %d expected %d\n",
               rank, got, left, value_of(left));
        bad = 1;
    }

    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && !anybad)
        printf("ring ok size=%d sum=%d\n", size, sum);
    fflush(stdout);

    MPI_Finalize();
    return anybad ? 1 : 0;
}
