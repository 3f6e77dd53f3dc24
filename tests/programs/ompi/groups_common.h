/* groups_common.h - shared by the MPI-4 group programs (comm_from_group.c,
 * intercomm_from_groups.c, sessions.c): a failed call prints what failed
 * with Open MPI's message and exits 1, so the black-box tests see an error
 * instead of a hang or a silent pass; a communicator made from a group and
 * checked with an allreduce. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static void check(int rc, const char *what, int rank)
{
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, msg);
        fflush(stderr);
        exit(1);
    }
}

/* MPI_Comm_create_from_group(group, tag), then an allreduce of the ranks
 * over the new communicator; prints "<label> <rank> of <size> sum <s>" and
 * frees it. `who` names the caller in error messages. */
static void comm_from_group_sum(MPI_Group group, const char *tag, const char *label, int who)
{
    int rank, size, sum;
    MPI_Comm comm;
    char what[128];
    snprintf(what, sizeof what, "MPI_Comm_create_from_group(%s)", label);
    check(MPI_Comm_create_from_group(group, tag, MPI_INFO_NULL, MPI_ERRORS_RETURN, &comm), what, who);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    snprintf(what, sizeof what, "MPI_Allreduce(%s)", label);
    check(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, comm), what, who);
    printf("%s %d of %d sum %d\n", label, rank, size, sum);
    fflush(stdout);
    MPI_Comm_free(&comm);
}
