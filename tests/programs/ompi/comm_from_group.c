/* comm_from_group.c - MPI_Comm_create_from_group (MPI-4), which Open MPI 5
 * serves with a PMIx group construct (PMIx_Group_construct asking for a
 * context id) and destruct: a communicator from MPI_COMM_WORLD's group,
 * then one from the even ranks only (called by those alone, with another
 * tag), each checked with an allreduce. Prints "world <rank> of <size> sum
 * <s>" and, on even ranks, "evens <rank> of <size> sum <s>". */
#include "groups_common.h"

int main(int argc, char **argv)
{
    int wrank, wsize, rank, size, sum;
    MPI_Group world, evens;
    MPI_Comm comm;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    check(MPI_Comm_create_from_group(world, "dpm.test.world", MPI_INFO_NULL, MPI_ERRORS_RETURN, &comm), "MPI_Comm_create_from_group(world)", wrank);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    check(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, comm), "MPI_Allreduce(world)", wrank);
    printf("world %d of %d sum %d\n", rank, size, sum);
    fflush(stdout);
    MPI_Comm_free(&comm);

    int n = (wsize + 1) / 2, ranks[n];
    for (int i = 0; i < n; i++)
        ranks[i] = 2 * i;
    MPI_Group_incl(world, n, ranks, &evens);
    if (wrank % 2 == 0) {
        check(MPI_Comm_create_from_group(evens, "dpm.test.evens", MPI_INFO_NULL, MPI_ERRORS_RETURN, &comm), "MPI_Comm_create_from_group(evens)", wrank);
        MPI_Comm_rank(comm, &rank);
        MPI_Comm_size(comm, &size);
        check(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, comm), "MPI_Allreduce(evens)", wrank);
        printf("evens %d of %d sum %d\n", rank, size, sum);
        fflush(stdout);
        MPI_Comm_free(&comm);
    }
    MPI_Group_free(&evens);
    MPI_Group_free(&world);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
