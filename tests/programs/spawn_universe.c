/*
 * spawn_universe.c - the pattern of MPICH's own spawn tests (spawn1 and
 * kin): every process first decides whether spawning is possible the way
 * MPICH's test suite does (a universe size that is set and no larger than
 * the world means "no"), then the parents spawn 2 copies of this program,
 * rank 0 sends each child its rank, and each child answers with its own
 * verdict. Under a launcher that sets the universe to the CPU count,
 * children of `-n 1` on 2 CPUs see universe 2 = their size and judge "no"
 * (MPICH's tests then skip their receive and abort).
 *
 * Usage: spawn_universe   (any -n)
 * Output: parents "parent R universe U can_spawn C" (U: unset or a number),
 * children "child R universe U can_spawn C got R"; rank 0 of the parents
 * "spawn_universe ok" once every child answered 1. A parent that judges
 * "no" spawns nothing and prints "spawn_universe skipped" (as MPICH's
 * tests skip), which tests treat as a failure.
 */
#include "spawn_util.h"

#define CHILDREN 2

/* "unset" or the size; and whether spawning is possible (MPICH's rule). */
static int can_spawn(char *text, size_t len)
{
    int flag = 0, *usize = NULL, size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &usize, &flag);
    if (!flag) {
        snprintf(text, len, "unset");
        return 1;
    }
    snprintf(text, len, "%d", *usize);
    return *usize > size;
}

int main(int argc, char **argv)
{
    int rank, ok, answer, i;
    char universe[32];
    MPI_Comm parent, inter;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_get_parent(&parent);
    ok = can_spawn(universe, sizeof universe);
    if (parent != MPI_COMM_NULL) {
        MPI_OK(MPI_Recv(&i, 1, MPI_INT, 0, 0, parent, MPI_STATUS_IGNORE));
        printf("child %d universe %s can_spawn %d got %d\n", rank, universe, ok, i);
        fflush(stdout);
        MPI_OK(MPI_Send(&ok, 1, MPI_INT, 0, 1, parent));
        MPI_Comm_disconnect(&parent);
        MPI_Finalize();
        return 0;
    }
    printf("parent %d universe %s can_spawn %d\n", rank, universe, ok);
    fflush(stdout);
    if (!ok) {
        if (rank == 0)
            printf("spawn_universe skipped\n");
        MPI_Finalize();
        return 0;
    }
    MPI_OK(MPI_Comm_spawn(self_exe(), MPI_ARGV_NULL, CHILDREN, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE));
    if (rank == 0) {
        int all = 1;
        for (i = 0; i < CHILDREN; i++)
            MPI_OK(MPI_Send(&i, 1, MPI_INT, i, 0, inter));
        for (i = 0; i < CHILDREN; i++) {
            MPI_OK(MPI_Recv(&answer, 1, MPI_INT, i, 1, inter, MPI_STATUS_IGNORE));
            CHECK(answer == 1, "child %d judged that it cannot spawn", i);
            all &= answer;
        }
        if (all)
            printf("spawn_universe ok\n");
    }
    MPI_Comm_disconnect(&inter);
    MPI_Finalize();
    return failures ? 1 : 0;
}
