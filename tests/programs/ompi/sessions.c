/* sessions.c - the MPI-4 sessions model, without MPI_Init: MPI_Session_init,
 * the group of the process set "mpi://WORLD", a communicator from it
 * (MPI_Comm_create_from_group: a PMIx group construct under Open MPI 5),
 * an allreduce, and MPI_Session_finalize. Prints "session <rank> of <size>
 * sum <s>". */
#include "groups_common.h"

int main(void)
{
    int rank, size, sum;
    MPI_Session session;
    MPI_Group group;
    MPI_Comm comm;
    check(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session), "MPI_Session_init", -1);
    check(MPI_Group_from_session_pset(session, "mpi://WORLD", &group), "MPI_Group_from_session_pset", -1);
    check(MPI_Comm_create_from_group(group, "dpm.test.session", MPI_INFO_NULL, MPI_ERRORS_RETURN, &comm), "MPI_Comm_create_from_group", -1);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    check(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, comm), "MPI_Allreduce", rank);
    printf("session %d of %d sum %d\n", rank, size, sum);
    fflush(stdout);
    MPI_Comm_free(&comm);
    MPI_Group_free(&group);
    check(MPI_Session_finalize(&session), "MPI_Session_finalize", rank);
    return 0;
}
