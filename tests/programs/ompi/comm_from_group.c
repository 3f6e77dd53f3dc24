/* comm_from_group.c - MPI_Comm_create_from_group (MPI-4), which Open MPI 5
 * serves with a PMIx group construct (PMIx_Group_construct asking for a
 * context id) and destruct: a communicator from MPI_COMM_WORLD's group,
 * then one from the even ranks only (called by those alone, with another
 * tag), each checked with an allreduce. Prints "world <rank> of <size> sum
 * <s>" and, on even ranks, "evens <rank> of <size> sum <s>". */
#include "groups_common.h"

int main(int argc, char **argv)
{
    int wrank, wsize;
    MPI_Group world, evens;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    comm_from_group_sum(world, "dpm.test.world", "world", wrank);

    int n = (wsize + 1) / 2, ranks[n];
    for (int i = 0; i < n; i++)
        ranks[i] = 2 * i;
    MPI_Group_incl(world, n, ranks, &evens);
    if (wrank % 2 == 0)
        comm_from_group_sum(evens, "dpm.test.evens", "evens", wrank);
    MPI_Group_free(&evens);
    MPI_Group_free(&world);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
