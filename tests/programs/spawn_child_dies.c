/*
 * spawn_child_dies.c - checks that a spawned process dying before it
 * connects to its parent ends the whole run instead of leaving the parent
 * waiting forever in MPI_Comm_spawn (MPICH's accept has no timeout).
 *
 * Usage: spawn_child_dies   (run with -n 1)
 * The parent prints "parent spawning" and spawns 2 children of itself with
 * the argument "child". Child rank 1 (PMI_RANK=1) prints "child 1
 * aborting" and calls abort() before MPI_Init; child 0 calls MPI_Init,
 * which cannot complete without its sibling.
 * Expected: the launcher reports job 1 rank 1 killed by SIGABRT and exits
 * 134 within a few seconds. If MPI_Comm_spawn returns at all, the parent
 * prints "parent: spawn returned ..." and exits 1.
 */
#include "spawn_util.h"

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        const char *rank = getenv("PMI_RANK");
        if (rank && strcmp(rank, "1") == 0) {
            printf("child 1 aborting\n");
            fflush(stdout);
            abort();
        }
    }

    MPI_Comm parent, inter;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        printf("child 0 connected to its parent (unexpected)\n");
        fflush(stdout);
        MPI_Comm_disconnect(&parent);
        MPI_Finalize();
        return 1;
    }
    if (argc > 1) {
        fail("spawned, but MPI_Comm_get_parent is MPI_COMM_NULL");
        MPI_Finalize();
        return 1;
    }

    char *args[] = {"child", NULL};
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    printf("parent spawning\n");
    fflush(stdout);
    int rc = MPI_Comm_spawn(self_exe(), args, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE);
    printf("parent: spawn returned %s\n", rc == MPI_SUCCESS ? "success" : mpi_error(rc));
    fflush(stdout);
    MPI_Finalize();
    return 1;
}
