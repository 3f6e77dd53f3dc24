/* spawn.c - Open MPI program for crates/dpm/tests/open_mpi.rs: the parents
 * spawn argv[1] (default 1) copies of argv[2] (default: this program) with
 * errors returned, merge the intercommunicator, and check messages both
 * ways: every child sends its merged rank to merged rank 0, which answers
 * each with rank+1000. argv[3] (default 1) repeats the whole exchange with
 * new children that many times. Parent rank 0 prints "spawn ok <n>" (or
 * "spawn refused <error class>", exit 3: never waits on a failed spawn) and
 * "spawn us <first> rate <spawns per second>" (the time in the first
 * MPI_Comm_spawn call, and all rounds' rate: bench/pmix/run); children
 * print "child r of n got <reply>". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Comm parent, inter, merged;
    int rank, size, mrank, msize;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (parent != MPI_COMM_NULL) {
        int reply = -1;
        MPI_Intercomm_merge(parent, 1, &merged);
        MPI_Comm_rank(merged, &mrank);
        MPI_Send(&mrank, 1, MPI_INT, 0, 1, merged);
        MPI_Recv(&reply, 1, MPI_INT, 0, 2, merged, MPI_STATUS_IGNORE);
        printf("child %d of %d got %d\n", rank, size, reply);
        fflush(stdout);
        MPI_Comm_free(&merged);
        MPI_Comm_disconnect(&parent);
        MPI_Finalize();
        return reply == mrank + 1000 ? 0 : 1;
    }
    int n = argc > 1 ? atoi(argv[1]) : 1;
    int rounds = argc > 3 ? atoi(argv[3]) : 1;
    const char *program = argc > 2 ? argv[2] : argv[0];
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    int ok = 1;
    double first = 0, start = MPI_Wtime();
    for (int round = 0; round < rounds && ok; round++) {
        double t0 = MPI_Wtime();
        int rc = MPI_Comm_spawn(program, MPI_ARGV_NULL, n, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE);
        if (round == 0)
            first = MPI_Wtime() - t0;
        if (rc != MPI_SUCCESS) {
            int cls;
            MPI_Error_class(rc, &cls);
            if (rank == 0)
                printf("spawn refused %d\n", cls);
            fflush(stdout);
            MPI_Finalize();
            return 3;
        }
        MPI_Intercomm_merge(inter, 0, &merged);
        MPI_Comm_rank(merged, &mrank);
        MPI_Comm_size(merged, &msize);
        ok = msize == size + n;
        if (mrank == 0) {
            for (int i = 0; i < n; i++) {
                int from;
                MPI_Status st;
                MPI_Recv(&from, 1, MPI_INT, MPI_ANY_SOURCE, 1, merged, &st);
                ok = ok && from == st.MPI_SOURCE && from >= size;
                int reply = from + 1000;
                MPI_Send(&reply, 1, MPI_INT, st.MPI_SOURCE, 2, merged);
            }
        }
        MPI_Comm_free(&merged);
        MPI_Comm_disconnect(&inter);
    }
    if (rank == 0) {
        printf(ok ? "spawn ok %d\n" : "spawn bad %d\n", n);
        printf("spawn us %.0f rate %.2f\n", first * 1e6, rounds / (MPI_Wtime() - start));
        fflush(stdout);
    }
    MPI_Finalize();
    return ok ? 0 : 1;
}
