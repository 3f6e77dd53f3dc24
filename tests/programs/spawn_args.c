/*
 * spawn_args.c - checks MPI_Comm_spawn of K children with arguments that
 * contain spaces and '=' (they travel as "argN=..." PMI lines), and a full
 * parent/child conversation over the new intercommunicator.
 *
 * Usage: spawn_args [K]   (default 2; run at any -n: the spawn is
 *                          collective over MPI_COMM_WORLD, root 0)
 * Children get exactly CHILD_ARGS and check their argv, that
 * MPI_Comm_get_parent is not MPI_COMM_NULL (PMI_SPAWNED worked) and that
 * their world has K ranks. Both sides merge the intercommunicator
 * (parents low), check an allreduce of the merged ranks, then parent
 * rank 0 sends each child its rank and the child answers rank*10.
 * Everything ends with MPI_Comm_disconnect.
 * Prints "child R ok argc=4" per child and "spawn ok children=K" on parent
 * rank 0; any wrong outcome prints "FAIL ..." and exits 1.
 */
#include "spawn_util.h"

static char *child_args[] = {"child arg 1", "two words", "key=value with spaces", NULL};
#define NARGS 3

static void child(int argc, char **argv, MPI_Comm parent)
{
    int rank, size, merged_rank, merged_size, sum = 0, value = -1;
    MPI_Comm merged;

    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(argc == NARGS + 1, "child %d argc=%d, expected %d", rank, argc, NARGS + 1);
    for (int i = 1; i < argc && i <= NARGS; i++)
        CHECK(strcmp(argv[i], child_args[i - 1]) == 0, "child %d argv[%d]=\"%s\", expected \"%s\"",
              rank, i, argv[i], child_args[i - 1]);
    const char *spawned = getenv("PMI_SPAWNED");
    CHECK(spawned && strcmp(spawned, "1") == 0, "child %d PMI_SPAWNED=%s", rank, spawned ? spawned : "(unset)");

    MPI_Intercomm_merge(parent, 1, &merged);
    MPI_Comm_rank(merged, &merged_rank);
    MPI_Comm_size(merged, &merged_size);
    MPI_Allreduce(&merged_rank, &sum, 1, MPI_INT, MPI_SUM, merged);
    CHECK(sum == merged_size * (merged_size - 1) / 2, "child %d merged sum %d", rank, sum);

    MPI_Recv(&value, 1, MPI_INT, 0, 1, parent, MPI_STATUS_IGNORE);
    CHECK(value == rank, "child %d got %d from the parent, expected its rank", rank, value);
    value = rank * 10;
    MPI_Send(&value, 1, MPI_INT, 0, 2, parent);

    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&parent);
    if (!failures)
        printf("child %d ok argc=%d size=%d merged=%d\n", rank, argc, size, merged_size);
    fflush(stdout);
}

static void parent(int argc, char **argv)
{
    int rank, nparents, k = argc > 1 ? atoi(argv[1]) : 2;
    int remote, merged_size, merged_rank, sum = 0;
    MPI_Comm inter, merged;
    int *errcodes = malloc(sizeof(int) * (size_t)k);

    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nparents);
    MPI_Comm_spawn(self_exe(), child_args, k, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, errcodes);
    for (int i = 0; i < k; i++)
        CHECK(errcodes[i] == MPI_SUCCESS, "errcodes[%d]=%d", i, errcodes[i]);
    MPI_Comm_remote_size(inter, &remote);
    CHECK(remote == k, "remote size %d, expected %d", remote, k);

    MPI_Intercomm_merge(inter, 0, &merged);
    MPI_Comm_rank(merged, &merged_rank);
    MPI_Comm_size(merged, &merged_size);
    CHECK(merged_size == nparents + k, "merged size %d", merged_size);
    CHECK(merged_rank == rank, "merged rank %d, parent rank %d (parents should be low)", merged_rank, rank);
    MPI_Allreduce(&merged_rank, &sum, 1, MPI_INT, MPI_SUM, merged);
    CHECK(sum == merged_size * (merged_size - 1) / 2, "merged sum %d", sum);

    if (rank == 0) {
        for (int c = 0; c < k; c++)
            MPI_Send(&c, 1, MPI_INT, c, 1, inter);
        for (int c = 0; c < k; c++) {
            int answer = -1;
            MPI_Recv(&answer, 1, MPI_INT, c, 2, inter, MPI_STATUS_IGNORE);
            CHECK(answer == c * 10, "child %d answered %d, expected %d", c, answer, c * 10);
        }
    }
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&inter);

    int bad = failures, total = 0;
    MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && total == 0)
        printf("spawn ok children=%d parents=%d\n", k, nparents);
    fflush(stdout);
    free(errcodes);
}

int main(int argc, char **argv)
{
    MPI_Comm parent_comm;

    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent_comm);
    if (parent_comm == MPI_COMM_NULL) {
        /* A child that lost its parent must not spawn again (fork bomb). */
        if (getenv("PMI_SPAWNED") || (argc > 1 && strcmp(argv[1], child_args[0]) == 0))
            fail("spawned, but MPI_Comm_get_parent is MPI_COMM_NULL");
        else
            parent(argc, argv);
    } else {
        child(argc, argv, parent_comm);
    }
    MPI_Finalize();
    return finish();
}
