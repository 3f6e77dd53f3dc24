/*
 * spawn_fail.c - checks that a spawn whose processes cannot be started
 * makes MPI_Comm_spawn return an error on every parent rank (with
 * MPI_ERRORS_RETURN) instead of ending the run or hanging, and that the
 * run goes on: a good spawn afterwards still works.
 *
 * Usage: spawn_fail CASE   (run with -n 2)
 *   missing  - spawn "/nonexistent/prog"
 *   noexec   - spawn a file without the x bit (created in /tmp)
 *   badinterp - spawn an executable script whose interpreter is missing
 *              ("#!/nonexistent/interpreter", created in $TMPDIR, else
 *              /tmp): only exec
 *              itself can fail, after the launcher has forked
 *   badwdir  - spawn this program with info wdir=/nonexistent
 *   toomany  - spawn 64 children of this program; run it with
 *              "--no-oversubscribe --usize 4" so they exceed the slots
 * Prints "rank R spawn failed as expected: <MPI error>" per rank, then
 * "spawn_fail ok case=CASE" and, after the retry with 1 good child,
 * "spawn_fail retry ok"; exit 0. A spawn that succeeds prints
 * "FAIL ... spawn succeeded" and exits 1.
 */
#include "spawn_util.h"
#include <errno.h>
#include <sys/stat.h>

static void child(MPI_Comm parent)
{
    int value = -1;
    MPI_Recv(&value, 1, MPI_INT, 0, 1, parent, MPI_STATUS_IGNORE);
    value *= 10;
    MPI_Send(&value, 1, MPI_INT, 0, 2, parent);
    /* MPICH's disconnect does not synchronize: without this barrier the child
     * may exit before every parent rank has connected to it. */
    MPI_Barrier(parent);
    MPI_Comm_disconnect(&parent);
}

int main(int argc, char **argv)
{
    int rank, size, rc;
    MPI_Comm parent, inter = MPI_COMM_NULL;
    MPI_Info info = MPI_INFO_NULL;
    char *child_args[] = {"child", NULL};
    char noexec_path[256] = "";
    const char *command = self_exe();
    int maxprocs = 1;

    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        child(parent);
        MPI_Finalize();
        return 0;
    }
    if (getenv("PMI_SPAWNED") || (argc > 1 && strcmp(argv[1], "child") == 0)) {
        fail("spawned, but MPI_Comm_get_parent is MPI_COMM_NULL");
        MPI_Finalize();
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    const char *which = argc > 1 ? argv[1] : "missing";
    if (strcmp(which, "missing") == 0) {
        command = "/nonexistent/prog";
    } else if (strcmp(which, "noexec") == 0 || strcmp(which, "badinterp") == 0) {
        int noexec = strcmp(which, "noexec") == 0;
        const char *tmp = getenv("TMPDIR");
        snprintf(noexec_path, sizeof noexec_path, "%s/dpm-%s-%d-%d", tmp && *tmp ? tmp : "/tmp", which, (int)getpid(), rank);
        FILE *f = fopen(noexec_path, "w");
        if (!f) {
            fail("cannot create %s: %s", noexec_path, strerror(errno));
        } else {
            fputs(noexec ? "#!/bin/sh\nexit 0\n" : "#!/nonexistent/interpreter\n", f);
            fclose(f);
            chmod(noexec_path, noexec ? 0644 : 0755);
        }
        command = noexec_path;
    } else if (strcmp(which, "badwdir") == 0) {
        MPI_Info_create(&info);
        MPI_Info_set(info, "wdir", "/nonexistent");
    } else if (strcmp(which, "toomany") == 0) {
        maxprocs = 64;
    } else {
        fail("unknown case '%s'", which);
        MPI_Finalize();
        return 2;
    }

    rc = MPI_Comm_spawn(command, child_args, maxprocs, info, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE);
    if (rc == MPI_SUCCESS) {
        fail("rank %d case %s: spawn succeeded", rank, which);
        MPI_Comm_disconnect(&inter);
    } else {
        printf("rank %d spawn failed as expected: %s\n", rank, mpi_error(rc));
    }
    fflush(stdout);
    if (noexec_path[0])
        unlink(noexec_path);
    if (info != MPI_INFO_NULL)
        MPI_Info_free(&info);

    int bad = failures, total = 0;
    MPI_OK(MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (rank == 0 && total == 0)
        printf("spawn_fail ok case=%s\n", which);
    fflush(stdout);

    /* The run goes on: one good child still comes up and answers. */
    MPI_OK(MPI_Comm_spawn(self_exe(), child_args, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE));
    if (rank == 0) {
        int value = 7, answer = -1;
        MPI_OK(MPI_Send(&value, 1, MPI_INT, 0, 1, inter));
        MPI_OK(MPI_Recv(&answer, 1, MPI_INT, 0, 2, inter, MPI_STATUS_IGNORE));
        CHECK(answer == 70, "retry child answered %d, expected 70", answer);
    }
    MPI_OK(MPI_Barrier(inter));
    MPI_OK(MPI_Comm_disconnect(&inter));
    bad = failures;
    MPI_OK(MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (rank == 0 && total == 0)
        printf("spawn_fail retry ok\n");
    fflush(stdout);

    MPI_Finalize();
    return finish();
}
