/*
 * spawn_latency.c: how long one MPI_Comm_spawn takes, k children at a time.
 *
 * Usage: spawn_latency K REPS [WARMUP]     (WARMUP defaults to 2)
 *
 * The parent job (any number of ranks, root 0) repeats WARMUP + REPS times:
 *   barrier on MPI_COMM_WORLD, t0 = MPI_Wtime(),
 *   MPI_Comm_spawn(this program, K children, root 0, MPI_COMM_WORLD),
 *   t1 = MPI_Wtime()   <- the spawn latency: MPICH's spawn returns once the
 *                         children have run MPI_Init and connected back,
 *   then, untimed: check the remote size, gather the children's timestamps,
 *   barrier on the intercommunicator (every parent rank and child is
 *   connected; MPICH's disconnect does not synchronize) and disconnect.
 * A child (MPI_Comm_get_parent is not MPI_COMM_NULL) only takes part in the
 * gather and the barrier, disconnects and finalizes. Children exit while
 * the next spawn runs; reaping them is the launcher's business.
 *
 * Where the time goes: root 0 passes its wall-clock time before the spawn
 * as the children's argument; each child reads the clock first thing in
 * main() and again right after MPI_Init and sends both back. Per spawn:
 *   start = last child entering main() - t0   (the launcher's part: the
 *           spawn request, fork and exec; plus the child's exec, loading
 *           libmpi and running its constructors: UCX installs its memory
 *           hooks there, ~40 ms on the benchmark VM, see bench/README.md)
 *   init  = last child leaving MPI_Init - t0  (plus the children's MPI_Init:
 *           PMI traffic with the launcher, the connect to the parent)
 *
 * Rank 0 prints one line after the last repetition:
 *   spawn_latency k=K n=N reps=R min=A median=B max=C times_ms=t1,...
 *     start_ms=s1,... init_ms=i1,...
 * (all on one line; milliseconds, warm-up spawns left out). Any MPI error
 * aborts the job, so a failure is a non-zero exit status, never a number.
 */
#include "spawn_common.h"

#include <string.h>
#include <time.h>

#define USAGE "usage: spawn_latency K REPS [WARMUP]"

static int double_compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double wall_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* t_main: wall time at main() entry; t0: the parent's, from argv. */
static void child_run(MPI_Comm parent, double t_main, double t0)
{
    double stamps[2] = {t_main - t0, wall_now() - t0};

    mpi_check(MPI_Gather(stamps, 2, MPI_DOUBLE, NULL, 0, MPI_DOUBLE, 0, parent),
              "child MPI_Gather");
    mpi_check(MPI_Barrier(parent), "child MPI_Barrier");
    mpi_check(MPI_Comm_disconnect(&parent), "child MPI_Comm_disconnect");
}

/* One timed spawn; out[0..2] = latency, start, init (seconds, on rank 0). */
static void spawn_time(int k, int rank, double out[3])
{
    char wall[64];
    char *child_argv[] = {"child", wall, NULL};
    int *errcodes = calloc((size_t)k, sizeof *errcodes);
    double *stamps = calloc(2 * (size_t)k, sizeof *stamps);
    MPI_Comm inter;
    int remote = 0;
    double t0, t1;

    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    snprintf(wall, sizeof wall, "%.9f", wall_now());
    t0 = MPI_Wtime();
    mpi_check(MPI_Comm_spawn(self_path(), child_argv, k, MPI_INFO_NULL, 0,
                             MPI_COMM_WORLD, &inter, errcodes), "MPI_Comm_spawn");
    t1 = MPI_Wtime();
    for (int i = 0; rank == 0 && i < k; i++)
        mpi_check(errcodes[i], "MPI_Comm_spawn (a child's error code)");
    mpi_check(MPI_Comm_remote_size(inter, &remote), "MPI_Comm_remote_size");
    if (remote != k) {
        fprintf(stderr, "spawn_latency: spawned %d children, expected %d\n", remote, k);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    mpi_check(MPI_Gather(NULL, 0, MPI_DOUBLE, stamps, 2, MPI_DOUBLE,
                         rank == 0 ? MPI_ROOT : MPI_PROC_NULL, inter), "MPI_Gather");
    mpi_check(MPI_Barrier(inter), "MPI_Barrier (intercommunicator)");
    mpi_check(MPI_Comm_disconnect(&inter), "MPI_Comm_disconnect");
    out[0] = t1 - t0;
    out[1] = out[2] = 0;
    for (int i = 0; i < k; i++) {
        out[1] = stamps[2 * i] > out[1] ? stamps[2 * i] : out[1];
        out[2] = stamps[2 * i + 1] > out[2] ? stamps[2 * i + 1] : out[2];
    }
    free(stamps);
    free(errcodes);
}

static void summary_print(int k, int n, double *times, double *starts,
                          double *inits, int reps)
{
    double *sorted = malloc((size_t)reps * sizeof *sorted);
    double median;

    memcpy(sorted, times, (size_t)reps * sizeof *sorted);
    qsort(sorted, (size_t)reps, sizeof *sorted, double_compare);
    median = reps % 2 ? sorted[reps / 2] : (sorted[reps / 2 - 1] + sorted[reps / 2]) / 2;
    printf("spawn_latency k=%d n=%d reps=%d min=%.3f median=%.3f max=%.3f",
           k, n, reps, sorted[0] * 1e3, median * 1e3, sorted[reps - 1] * 1e3);
    times_print("times_ms", times, reps);
    times_print("start_ms", starts, reps);
    times_print("init_ms", inits, reps);
    printf("\n");
    fflush(stdout);
    free(sorted);
}

int main(int argc, char **argv)
{
    double t_main = wall_now();
    MPI_Comm parent;
    int rank, size, k, reps, warmup = 2;
    double *times, *starts, *inits;

    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        child_run(parent, t_main, argc > 2 ? atof(argv[2]) : t_main);
        MPI_Finalize();
        return 0;
    }
    if (argc < 3 || argc > 4 || strcmp(argv[1], "child") == 0) {
        fprintf(stderr, "%s\n", USAGE);
        MPI_Finalize();
        return 3;
    }
    k = arg_int(argv[1], USAGE);
    reps = arg_int(argv[2], USAGE);
    if (argc == 4)
        warmup = strcmp(argv[3], "0") == 0 ? 0 : arg_int(argv[3], USAGE);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    times = malloc((size_t)reps * sizeof *times);
    starts = malloc((size_t)reps * sizeof *starts);
    inits = malloc((size_t)reps * sizeof *inits);
    for (int i = 0; i < warmup + reps; i++) {
        double t[3];
        spawn_time(k, rank, t);
        if (i >= warmup) {
            times[i - warmup] = t[0];
            starts[i - warmup] = t[1];
            inits[i - warmup] = t[2];
        }
    }
    if (rank == 0)
        summary_print(k, size, times, starts, inits, reps);
    free(times);
    free(starts);
    free(inits);
    MPI_Finalize();
    return 0;
}
