/*
 * spawn_nested.c - checks spawning from spawned jobs: a chain of jobs, each
 * spawned by the one above, with a message going down the chain and the
 * answer coming back up.
 *
 * Usage: spawn_nested [DEPTH]   (default 3; run with -n 1)
 * The top (level 0) spawns one child of itself with arguments
 * "nested DEPTH 1"; a process at level L < DEPTH spawns level L+1, so
 * DEPTH+1 jobs exist at the deepest point. Each parent sends its child the
 * child's level; the leaf (level DEPTH) answers DEPTH, and every level
 * adds its own level on the way up, so the top gets DEPTH*(DEPTH+1)/2.
 * Prints "level L got L from parent" and "level L answer A", then
 * "nested ok depth=DEPTH" at the top; "FAIL ..." and exit 1 otherwise.
 */
#include "spawn_util.h"

/* Spawn level+1 (when not the leaf), pass the level down, collect the answer. */
static int descend(int depth, int level)
{
    if (level == depth)
        return depth;

    char depth_str[16], level_str[16];
    snprintf(depth_str, sizeof depth_str, "%d", depth);
    snprintf(level_str, sizeof level_str, "%d", level + 1);
    char *args[] = {"nested", depth_str, level_str, NULL};
    MPI_Comm child;
    int errcode = -1, next = level + 1, answer = -1;

    MPI_Comm_spawn(self_exe(), args, 1, MPI_INFO_NULL, 0, MPI_COMM_SELF, &child, &errcode);
    CHECK(errcode == MPI_SUCCESS, "level %d: spawn errcode %d", level, errcode);
    MPI_Send(&next, 1, MPI_INT, 0, 1, child);
    MPI_Recv(&answer, 1, MPI_INT, 0, 2, child, MPI_STATUS_IGNORE);
    MPI_Comm_disconnect(&child);
    return answer + level;
}

int main(int argc, char **argv)
{
    MPI_Comm parent;
    int level = 0, depth = 3;

    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    if (argc > 1 && strcmp(argv[1], "nested") == 0) {
        depth = arg_or(argc, argv, 2, 3);
        level = arg_or(argc, argv, 3, -1);
        if (parent == MPI_COMM_NULL) {
            fail("level %d was spawned, but MPI_Comm_get_parent is MPI_COMM_NULL", level);
            MPI_Finalize();
            return 1;
        }
        int got = -1;
        MPI_Recv(&got, 1, MPI_INT, 0, 1, parent, MPI_STATUS_IGNORE);
        printf("level %d got %d from parent\n", level, got);
        fflush(stdout);
        CHECK(got == level, "level %d got %d from its parent", level, got);
        int answer = descend(depth, level);
        printf("level %d answer %d\n", level, answer);
        fflush(stdout);
        MPI_Send(&answer, 1, MPI_INT, 0, 2, parent);
        MPI_Comm_disconnect(&parent);
    } else {
        depth = arg_or(argc, argv, 1, 3);
        CHECK(parent == MPI_COMM_NULL, "the top level has a parent");
        int answer = descend(depth, 0);
        printf("level 0 answer %d\n", answer);
        CHECK(answer == depth * (depth + 1) / 2, "answer %d, expected %d", answer, depth * (depth + 1) / 2);
        if (!failures)
            printf("nested ok depth=%d\n", depth);
        fflush(stdout);
    }
    MPI_Finalize();
    return finish();
}
