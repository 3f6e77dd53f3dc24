/* sessions.c - the MPI-4 sessions model, without MPI_Init: MPI_Session_init,
 * the group of the process set "mpi://WORLD", a communicator from it
 * (MPI_Comm_create_from_group: a PMIx group construct under Open MPI 5),
 * an allreduce, and MPI_Session_finalize. Prints "session <rank> of <size>
 * sum <s>". */
#include "groups_common.h"

int main(void)
{
    MPI_Session session;
    MPI_Group group;
    check(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session), "MPI_Session_init", -1);
    check(MPI_Group_from_session_pset(session, "mpi://WORLD", &group), "MPI_Group_from_session_pset", -1);
    comm_from_group_sum(group, "dpm.test.session", "session", -1);
    MPI_Group_free(&group);
    check(MPI_Session_finalize(&session), "MPI_Session_finalize", -1);
    return 0;
}
