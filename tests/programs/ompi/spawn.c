/* spawn.c - Open MPI program for crates/dpm/tests/open_mpi.rs: the parent
 * spawns argv[1] (default 1) copies of itself with errors returned, and
 * prints "spawn ok <n>" or "spawn refused <error class>"; children print
 * "child r of n" and disconnect. Never waits on a failed spawn. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Comm parent, inter;
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (parent != MPI_COMM_NULL) {
        printf("child %d of %d\n", rank, size);
        MPI_Comm_disconnect(&parent);
        MPI_Finalize();
        return 0;
    }
    int n = argc > 1 ? atoi(argv[1]) : 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    int rc = MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, n, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE);
    if (rc != MPI_SUCCESS) {
        int cls;
        MPI_Error_class(rc, &cls);
        if (rank == 0)
            printf("spawn refused %d\n", cls);
        fflush(stdout);
        MPI_Finalize();
        return 3;
    }
    if (rank == 0)
        printf("spawn ok %d\n", n);
    MPI_Comm_disconnect(&inter);
    MPI_Finalize();
    return 0;
}
