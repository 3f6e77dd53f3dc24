/* groups_common.h - shared by the MPI-4 group programs (comm_from_group.c,
 * intercomm_from_groups.c, sessions.c): a failed call prints what failed
 * with Open MPI's message and exits 1, so the black-box tests see an error
 * instead of a hang or a silent pass. */
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
