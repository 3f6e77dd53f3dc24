/*
 * startup.c: how long a job takes to start, per rank.
 *
 * Every rank reads the clock first thing in main(), again around MPI_Init,
 * prints "hello from rank R of N" and sends its times to rank 0, which
 * writes (test "init" etc., statistics over the ranks, µs):
 *   init            MPI_Init's duration on each rank;
 *   launch_to_main  BENCH_T0 (the runner's wall clock just before it started
 *                   the launcher) to the rank entering main(): the launcher's
 *                   own start, its fan-out, exec and loading the library;
 *   launch_to_init  BENCH_T0 to the rank returning from MPI_Init.
 * The launch_* tests need BENCH_T0 (set by bench/run) and one host's clock.
 * The hello-world wall time of the whole command is measured by the runner
 * around this program (bench/run writes it as test "wall").
 *
 * --check: the ranks agree on the world size and their rank numbers
 * (an allreduce of the ranks must be N(N-1)/2), and the library version
 * string is not empty.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

static const bench_option options[] = {
    {NULL, NULL, NULL, NULL},
};

int main(int argc, char **argv)
{
    double t_main_wall = wall_now();
    double t_init0 = mono_now(), t_init1, t_init_wall;
    double mine[3], *all = NULL, *column = NULL;
    const char *t0_env;
    double t0 = 0;
    bench b;

    MPI_Init(&argc, &argv);
    t_init1 = mono_now();
    t_init_wall = wall_now();
    bench_init(&b, "startup", argc, argv, options, "init");

    printf("hello from rank %d of %d\n", b.rank, b.size);
    fflush(stdout);

    t0_env = getenv("BENCH_T0");
    if (t0_env && *t0_env)
        t0 = atof(t0_env);
    mine[0] = t_init1 - t_init0;
    mine[1] = t0 > 0 ? t_main_wall - t0 : 0;
    mine[2] = t0 > 0 ? t_init_wall - t0 : 0;
    if (b.rank == 0) {
        all = malloc(3 * (size_t)b.size * sizeof *all);
        column = malloc((size_t)b.size * sizeof *column);
    }
    mpi_check(MPI_Gather(mine, 3, MPI_DOUBLE, all, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD),
              "MPI_Gather");

    if (b.check) {
        long r = b.rank, sum = 0, want = (long)b.size * (b.size - 1) / 2;
        char version[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;

        mpi_check(MPI_Allreduce(&r, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD),
                  "MPI_Allreduce");
        if (sum != want)
            bench_fail("check: the ranks add up to %ld, expected %ld", sum, want);
        MPI_Get_library_version(version, &len);
        if (len <= 0 || version[0] == '\0')
            bench_fail("check: MPI_Get_library_version returned an empty string");
    }

    if (b.rank == 0 && test_enabled(&b, "init")) {
        static const char *const names[3] = {"init", "launch_to_main", "launch_to_init"};

        for (int k = 0; k < 3; k++) {
            if (k > 0 && t0 <= 0)
                break;
            for (int r = 0; r < b.size; r++)
                column[r] = all[3 * r + k];
            result_write(&b, names[k], "", -1, b.size, column, b.size, 1e6, "us", NULL);
        }
    }
    free(all);
    free(column);
    bench_finish(&b);
    MPI_Finalize();
    return 0;
}
