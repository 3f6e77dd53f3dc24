/* intercomm_from_groups.c - MPI_Intercomm_create_from_groups (MPI-4): the
 * lower and the upper half of MPI_COMM_WORLD (ranks below size/2, the
 * rest) as the two groups, leaders their first ranks; then each side's
 * remote size, and the intercommunicator merged (low first) and checked
 * with an allreduce. Prints "inter <world rank> local <n> remote <m>
 * merged <rank> of <size> sum <s>". Needs at least 2 ranks. */
#include "groups_common.h"

int main(int argc, char **argv)
{
    int wrank, wsize, lsize, rsize, rank, size, sum;
    MPI_Group world, low, high;
    MPI_Comm inter, merged;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int half = wsize / 2, range_low[1][3] = {{0, half - 1, 1}}, range_high[1][3] = {{half, wsize - 1, 1}};
    MPI_Group_range_incl(world, 1, range_low, &low);
    MPI_Group_range_incl(world, 1, range_high, &high);
    int in_low = wrank < half;
    check(MPI_Intercomm_create_from_groups(in_low ? low : high, 0, in_low ? high : low, 0, "dpm.test.inter", MPI_INFO_NULL, MPI_ERRORS_RETURN, &inter),
          "MPI_Intercomm_create_from_groups", wrank);
    MPI_Comm_size(inter, &lsize);
    MPI_Comm_remote_size(inter, &rsize);
    check(MPI_Intercomm_merge(inter, in_low ? 0 : 1, &merged), "MPI_Intercomm_merge", wrank);
    MPI_Comm_rank(merged, &rank);
    MPI_Comm_size(merged, &size);
    check(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, merged), "MPI_Allreduce(merged)", wrank);
    printf("inter %d local %d remote %d merged %d of %d sum %d\n", wrank, lsize, rsize, rank, size, sum);
    fflush(stdout);
    MPI_Comm_free(&merged);
    MPI_Comm_free(&inter);
    MPI_Group_free(&low);
    MPI_Group_free(&high);
    MPI_Group_free(&world);
    MPI_Finalize();
    return 0;
}
