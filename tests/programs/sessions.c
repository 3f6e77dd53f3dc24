/*
 * sessions.c - checks the MPI-4 sessions model, in which one process
 * initialises and finalises MPI more than once.  Each round talks to the
 * process manager again (PMI init, put/fence for the new communicator), so
 * a launcher that assumes "one init, one finalize per rank" breaks here.
 *
 * Two rounds of: MPI_Session_init, group from pset "mpi://WORLD",
 * MPI_Comm_create_from_group, an allreduce check, free, and
 * MPI_Session_finalize.  Rank 0 prints "sessions ok size=N rounds=2".
 */
#include <mpi.h>
#include <stdio.h>

#define ROUNDS 2

static int check(int err, const char *what, int round)
{
    if (err != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len;
        MPI_Error_string(err, msg, &len);
        printf("sessions FAIL round %d %s: %s\n", round, what, msg);
        fflush(stdout);
    }
    return err != MPI_SUCCESS;
}

/* One init..finalize round; returns 0 on success, sets *size and *rank. */
static int session_round(int round, int *rank, int *size)
{
    MPI_Session session;
    MPI_Group group;
    MPI_Comm comm;
    int sum = -1;

    if (check(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session),
              "MPI_Session_init", round))
        return 1;
    if (check(MPI_Group_from_session_pset(session, "mpi://WORLD", &group),
              "MPI_Group_from_session_pset", round))
        return 1;
    if (check(MPI_Comm_create_from_group(group, "org.dpm.tests.sessions",
                                         MPI_INFO_NULL, MPI_ERRORS_RETURN, &comm),
              "MPI_Comm_create_from_group", round))
        return 1;

    MPI_Comm_rank(comm, rank);
    MPI_Comm_size(comm, size);
    int mine = *rank + round;
    if (check(MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, comm), "MPI_Allreduce", round))
        return 1;
    int expected = *size * (*size - 1) / 2 + *size * round;
    if (sum != expected) {
        printf("sessions FAIL round %d rank %d sum=%d expected=%d\n", round, *rank, sum, expected);
        return 1;
    }

    MPI_Comm_free(&comm);
    MPI_Group_free(&group);
    return check(MPI_Session_finalize(&session), "MPI_Session_finalize", round);
}

int main(void)
{
    int rank = -1, size = 0;

    for (int round = 0; round < ROUNDS; round++)
        if (session_round(round, &rank, &size) != 0)
            return 1;

    if (rank == 0)
        printf("sessions ok size=%d rounds=%d\n", size, ROUNDS);
    return 0;
}
