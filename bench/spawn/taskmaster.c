/*
 * taskmaster.c: a task-manager loop of single-child spawns, in the style of
 * MPICH's own test suite (test/mpi/spawn/taskmaster): the parent hands out
 * TASKS tasks, WINDOW at a time; each task is one MPI_Comm_spawn of one
 * child, which does its "work" (returns a value computed from its task
 * number), and exits at once. Written for dpm's benchmark, not copied.
 *
 * Usage: taskmaster TASKS [WINDOW [msg]]   (WINDOW defaults to 2, as MPICH's)
 *
 * With `msg`, every child gets the same argument (`msg`) and its task number
 * as a message from the parent instead: every spawn has one shape, so warm
 * spawn can claim pooled children (issue 37's spawn-work-repeat loop).
 *
 * The parent job (any size; rank 0 is the root of every spawn over
 * MPI_COMM_WORLD) repeats, until TASKS tasks are done:
 *   WINDOW spawns of 1 child each, in a row (the task number is the child's
 *   argument), then for each of them: rank 0 receives the child's answer
 *   (task * 7 + 1, checked) and sends an empty acknowledgement, and every
 *   parent rank disconnects. The child: MPI_Init, send the answer, receive
 *   the acknowledgement, MPI_Comm_disconnect, MPI_Finalize, exit.
 * So a window's children exit while the next window is being spawned: the
 * launcher reaps them, drains their output and reports them gone meanwhile.
 *
 * Rank 0 prints one line at the end:
 *   taskmaster k=1 n=N tasks=T window=W seconds=S min=A median=B max=C
 *     times_ms=t1,...  spawn_ms=s1,...
 * (times_ms: each window's spawns, answers and disconnects; spawn_ms: the
 * window's MPI_Comm_spawn calls alone; in ms)
 * Any MPI error or a wrong answer aborts the job: a failure is a non-zero
 * exit status, never a number.
 */
#include "spawn_common.h"

#include <string.h>

#define USAGE "usage: taskmaster TASKS [WINDOW [msg]]"
#define TAG 1

static int answer(int task)
{
    return task * 7 + 1;
}

static void child_run(MPI_Comm parent, const char *task_arg)
{
    int task = atoi(task_arg);

    if (strcmp(task_arg, "msg") == 0)
        mpi_check(MPI_Recv(&task, 1, MPI_INT, 0, TAG, parent, MPI_STATUS_IGNORE), "child MPI_Recv task");
    int value = answer(task);

    mpi_check(MPI_Send(&value, 1, MPI_INT, 0, TAG, parent), "child MPI_Send");
    mpi_check(MPI_Recv(NULL, 0, MPI_CHAR, 0, TAG, parent, MPI_STATUS_IGNORE), "child MPI_Recv");
    mpi_check(MPI_Comm_disconnect(&parent), "child MPI_Comm_disconnect");
}

static int double_compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    MPI_Comm parent;
    int rank, size;

    mpi_check(MPI_Init(&argc, &argv), "MPI_Init");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        if (argc < 2) {
            fprintf(stderr, "taskmaster child: no task argument\n");
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        child_run(parent, argv[1]);
        MPI_Finalize();
        return 0;
    }
    if (argc < 2 || argc > 4 || (argc == 4 && strcmp(argv[3], "msg") != 0)) {
        fprintf(stderr, "%s\n", USAGE);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    int tasks = arg_int(argv[1], USAGE);
    int window = argc >= 3 ? arg_int(argv[2], USAGE) : 2;
    int by_msg = argc == 4;
    int windows = (tasks + window - 1) / window;
    MPI_Comm *inters = calloc((size_t)window, sizeof *inters);
    double *times = calloc((size_t)windows, sizeof *times);
    double *spawns = calloc((size_t)windows, sizeof *spawns);

    if (inters == NULL || times == NULL || spawns == NULL)
        mpi_check(MPI_ERR_NO_MEM, "calloc");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    double t0 = MPI_Wtime();
    for (int w = 0, task = 0; task < tasks; w++) {
        double ts = MPI_Wtime();
        int first = task, count = tasks - task < window ? tasks - task : window;

        for (int j = 0; j < count; j++, task++) {
            char arg[16];
            char *child_argv[] = {arg, NULL};

            if (by_msg)
                snprintf(arg, sizeof arg, "msg");
            else
                snprintf(arg, sizeof arg, "%d", task);
            mpi_check(MPI_Comm_spawn(self_path(), child_argv, 1, MPI_INFO_NULL, 0,
                                     MPI_COMM_WORLD, &inters[j], MPI_ERRCODES_IGNORE),
                      "MPI_Comm_spawn");
        }
        spawns[w] = MPI_Wtime() - ts;
        for (int j = 0; j < count; j++) {
            if (rank == 0) {
                int value = -1, task_no = first + j;

                if (by_msg)
                    mpi_check(MPI_Send(&task_no, 1, MPI_INT, 0, TAG, inters[j]), "MPI_Send task");

                mpi_check(MPI_Recv(&value, 1, MPI_INT, 0, TAG, inters[j], MPI_STATUS_IGNORE),
                          "MPI_Recv");
                if (value != answer(first + j)) {
                    fprintf(stderr, "taskmaster: task %d answered %d, expected %d\n",
                            first + j, value, answer(first + j));
                    MPI_Abort(MPI_COMM_WORLD, 4);
                }
                mpi_check(MPI_Send(NULL, 0, MPI_CHAR, 0, TAG, inters[j]), "MPI_Send");
            }
            mpi_check(MPI_Comm_disconnect(&inters[j]), "MPI_Comm_disconnect");
        }
        times[w] = MPI_Wtime() - ts;
    }
    double seconds = MPI_Wtime() - t0;

    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    if (rank == 0) {
        double *sorted = malloc((size_t)windows * sizeof *sorted);

        if (sorted == NULL)
            mpi_check(MPI_ERR_NO_MEM, "malloc");
        memcpy(sorted, times, (size_t)windows * sizeof *sorted);
        qsort(sorted, (size_t)windows, sizeof *sorted, double_compare);
        printf("taskmaster k=1 n=%d tasks=%d window=%d seconds=%.6f min=%.3f median=%.3f "
               "max=%.3f", size, tasks, window, seconds, sorted[0] * 1e3,
               sorted[windows / 2] * 1e3, sorted[windows - 1] * 1e3);
        times_print("times_ms", times, windows);
        times_print("spawn_ms", spawns, windows);
        printf("\n");
        fflush(stdout);
        free(sorted);
    }
    free(spawns);
    free(times);
    free(inters);
    MPI_Finalize();
    return 0;
}
