/*
 * spawn_rate.c: how many spawns per second, children kept alive.
 *
 * Usage: spawn_rate COUNT [K] [WARMUP] [SETTLE_MS]
 *        (K defaults to 1, WARMUP to 2, SETTLE_MS to 0)
 *
 * The method of the dynamic-process papers: the parent job (root 0) calls
 * MPI_Comm_spawn COUNT times in a row, K children each time, and keeps every
 * intercommunicator; the children stay alive, asleep, until all the spawns
 * are done, so the launcher has more and more live processes to look after
 * as it goes. rate = COUNT / (time from before the first spawn to after the
 * last one, on rank 0).
 *
 * Before that, WARMUP spawns of K children that are released at once (not
 * timed), and a pause of SETTLE_MS milliseconds: idle time, the same under
 * every launcher, in which a warm pool (dpm --warm-spawn) fills up, as it
 * would between an application's phases. After the timed loop, untimed:
 * every intercommunicator gets an MPI_Ibarrier, which releases its
 * children, and is disconnected.
 *
 * A child posts MPI_Ibarrier on its parent intercommunicator and sleeps
 * 10 ms between MPI_Test calls: MPICH's blocking calls poll, and dozens of
 * children spinning on 2 cores would slow down the very spawns being timed.
 *
 * Rank 0 prints one line at the end:
 *   spawn_rate k=K n=N count=C seconds=S rate=R times_ms=t1,t2,...
 * (rate in spawns per second; times_ms is each spawn's own duration, which
 * shows whether it grows with the number of live children). Any MPI error
 * aborts the job, so a failure is a non-zero exit status, never a number.
 */
#include "spawn_common.h"
#include "mpi_children.h"

#include <string.h>
#include <time.h>

#define USAGE "usage: spawn_rate COUNT [K] [WARMUP] [SETTLE_MS]"

static void child_run(MPI_Comm parent)
{
    struct timespec nap = {0, 10 * 1000 * 1000};
    MPI_Request release;
    int done = 0;

    mpi_check(MPI_Ibarrier(parent, &release), "child MPI_Ibarrier");
    for (;;) {
        mpi_check(MPI_Test(&release, &done, MPI_STATUS_IGNORE), "child MPI_Test");
        if (done)
            break;
        nanosleep(&nap, NULL);
    }
    mpi_check(MPI_Comm_disconnect(&parent), "child MPI_Comm_disconnect");
}

static MPI_Comm child_spawn(int k, int rank)
{
    char *child_argv[] = {"child", NULL};
    int *errcodes = calloc((size_t)k, sizeof *errcodes);
    MPI_Comm inter;
    int remote = 0;

    mpi_check(MPI_Comm_spawn(self_path(), child_argv, k, MPI_INFO_NULL, 0,
                             MPI_COMM_WORLD, &inter, errcodes), "MPI_Comm_spawn");
    for (int i = 0; rank == 0 && i < k; i++)
        mpi_check(errcodes[i], "MPI_Comm_spawn (a child's error code)");
    mpi_check(MPI_Comm_remote_size(inter, &remote), "MPI_Comm_remote_size");
    if (remote != k) {
        fprintf(stderr, "spawn_rate: spawned %d children, expected %d\n", remote, k);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    free(errcodes);
    return inter;
}

/* spawn_rate_loop's callback: ctx is {k, rank}. */
static MPI_Comm spawn_one(void *ctx)
{
    const int *k_rank = ctx;

    return child_spawn(k_rank[0], k_rank[1]);
}

int main(int argc, char **argv)
{
    MPI_Comm parent;
    int rank, size, count, k = 1, warmup = 2, settle_ms = 0, k_rank[2];
    double *times, seconds;

    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        child_run(parent);
        MPI_Finalize();
        return 0;
    }
    if (argc < 2 || argc > 5 || strcmp(argv[1], "child") == 0) {
        fprintf(stderr, "%s\n", USAGE);
        MPI_Finalize();
        return 3;
    }
    count = arg_int(argv[1], USAGE);
    if (argc >= 3)
        k = arg_int(argv[2], USAGE);
    if (argc >= 4)
        warmup = strcmp(argv[3], "0") == 0 ? 0 : arg_int(argv[3], USAGE);
    if (argc == 5)
        settle_ms = strcmp(argv[4], "0") == 0 ? 0 : arg_int(argv[4], USAGE);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    times = malloc((size_t)count * sizeof *times);
    k_rank[0] = k;
    k_rank[1] = rank;
    seconds = spawn_rate_loop(spawn_one, k_rank, count, warmup, settle_ms, times);

    if (rank == 0) {
        printf("spawn_rate k=%d n=%d count=%d seconds=%.4f rate=%.2f",
               k, size, count, seconds, count / seconds);
        times_print("times_ms", times, count);
        printf("\n");
        fflush(stdout);
    }
    free(times);
    MPI_Finalize();
    return 0;
}
