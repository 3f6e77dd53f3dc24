/*
 * mpi_children.h: the spawn-rate loop of paper 001 and the release of its
 * children, shared by bench/spawn/spawn_rate.c and bench/suite/spawn.c:
 * every child of a rate run stays alive until the last spawn has returned.
 *
 * The includer declares mpi_check(int rc, const char *what) first (both
 * programs have one that aborts the job with a message on any MPI error).
 */
#ifndef BENCH_MPI_CHILDREN_H
#define BENCH_MPI_CHILDREN_H

#include <mpi.h>
#include <stdlib.h>
#include <time.h>

/* Release the children of every intercommunicator (one MPI_Ibarrier each,
 * waited for together, so that they leave in parallel), then disconnect them. */
static inline void children_release(MPI_Comm *inters, int count)
{
    MPI_Request *reqs = malloc((size_t)count * sizeof *reqs);

    if (reqs == NULL)
        mpi_check(MPI_ERR_NO_MEM, "malloc of the release requests");
    for (int i = 0; i < count; i++)
        mpi_check(MPI_Ibarrier(inters[i], &reqs[i]), "MPI_Ibarrier");
    mpi_check(MPI_Waitall(count, reqs, MPI_STATUSES_IGNORE), "MPI_Waitall");
    for (int i = 0; i < count; i++)
        mpi_check(MPI_Comm_disconnect(&inters[i]), "MPI_Comm_disconnect");
    free(reqs);
}

/* One rate run: `warmup` spawns (their children released at once), a pause
 * of `settle_ms` (idle time, the same under every launcher: a launcher that
 * prepares children ahead of the spawns, like dpm's warm spawn, may use it),
 * a barrier of the parent's job, then `count` spawns in a row, each child
 * kept alive, timed one by one into each[i] (seconds); then every child
 * released. spawn(ctx) makes one spawn and returns its intercommunicator.
 * Returns the seconds of the whole timed loop (count / that is the rate). */
static inline double spawn_rate_loop(MPI_Comm (*spawn)(void *ctx), void *ctx, int count,
                                     int warmup, int settle_ms, double *each)
{
    MPI_Comm *inters = malloc((size_t)(count > warmup ? count : warmup) * sizeof *inters);
    double t0, t1;

    if (inters == NULL)
        mpi_check(MPI_ERR_NO_MEM, "malloc of the intercommunicators");
    for (int i = 0; i < warmup; i++)
        inters[i] = spawn(ctx);
    if (warmup > 0)
        children_release(inters, warmup);
    if (settle_ms > 0) {
        struct timespec nap = {settle_ms / 1000, (long)(settle_ms % 1000) * 1000000L};

        nanosleep(&nap, NULL);
    }
    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    t0 = MPI_Wtime();
    for (int i = 0; i < count; i++) {
        double ts = MPI_Wtime();

        inters[i] = spawn(ctx);
        each[i] = MPI_Wtime() - ts;
    }
    t1 = MPI_Wtime();
    children_release(inters, count);
    free(inters);
    return t1 - t0;
}

#endif
