/*
 * loop_timeline.c: the taskmaster loop (taskmaster.c: single-child spawns,
 * WINDOW 2, each child answering once and exiting) with every phase stamped,
 * for a per-iteration timeline of one launcher against another
 * (docs/benchmarks.md, "Spawn loop").
 *
 * Usage: loop_timeline TASKS 2> stamps.log
 *
 * Each process writes lines "T <phase> <task> <µs since the epoch>" to
 * stderr (CLOCK_REALTIME: exact on one host). Parent phases: p_spawn,
 * p_spawned (MPI_Comm_spawn called / returned), p_recv (answer received),
 * p_disc (disconnected), p_end (task -1). Child phases: c_start (main,
 * before MPI_Init), c_inited, c_acked, c_disc, c_fin. loop_timeline.py
 * turns runs into per-phase medians.
 */
#include "spawn_common.h"

#include <time.h>

#define USAGE "usage: loop_timeline TASKS"
#define WINDOW 2

static double now_us(void)
{
    struct timespec t;

    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void stamp(const char *phase, int task, double at)
{
    fprintf(stderr, "T %s %d %.0f\n", phase, task, at);
}

int main(int argc, char **argv)
{
    double start = now_us();
    MPI_Comm parent, inters[WINDOW];

    mpi_check(MPI_Init(&argc, &argv), "MPI_Init");
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        int task = argc > 1 ? atoi(argv[1]) : -1;

        stamp("c_start", task, start);
        stamp("c_inited", task, now_us());
        mpi_check(MPI_Send(&task, 1, MPI_INT, 0, 1, parent), "child MPI_Send");
        mpi_check(MPI_Recv(NULL, 0, MPI_CHAR, 0, 1, parent, MPI_STATUS_IGNORE), "child MPI_Recv");
        stamp("c_acked", task, now_us());
        mpi_check(MPI_Comm_disconnect(&parent), "child MPI_Comm_disconnect");
        stamp("c_disc", task, now_us());
        MPI_Finalize();
        stamp("c_fin", task, now_us());
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "%s\n", USAGE);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    int tasks = arg_int(argv[1], USAGE);

    for (int task = 0; task < tasks;) {
        int first = task, count = tasks - task < WINDOW ? tasks - task : WINDOW;

        for (int j = 0; j < count; j++, task++) {
            char arg[16];
            char *child_argv[] = {arg, NULL};

            snprintf(arg, sizeof arg, "%d", task);
            stamp("p_spawn", task, now_us());
            mpi_check(MPI_Comm_spawn(self_path(), child_argv, 1, MPI_INFO_NULL, 0, MPI_COMM_SELF,
                                     &inters[j], MPI_ERRCODES_IGNORE),
                      "MPI_Comm_spawn");
            stamp("p_spawned", task, now_us());
        }
        for (int j = 0; j < count; j++) {
            int value = -1;

            mpi_check(MPI_Recv(&value, 1, MPI_INT, 0, 1, inters[j], MPI_STATUS_IGNORE), "MPI_Recv");
            if (value != first + j) {
                fprintf(stderr, "loop_timeline: task %d answered %d\n", first + j, value);
                MPI_Abort(MPI_COMM_WORLD, 4);
            }
            stamp("p_recv", first + j, now_us());
            mpi_check(MPI_Send(NULL, 0, MPI_CHAR, 0, 1, inters[j]), "MPI_Send");
            mpi_check(MPI_Comm_disconnect(&inters[j]), "MPI_Comm_disconnect");
            stamp("p_disc", first + j, now_us());
        }
    }
    stamp("p_end", -1, now_us());
    MPI_Finalize();
    return 0;
}
