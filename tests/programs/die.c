/*
 * die.c - checks what the launcher does with the other ranks when one rank
 * dies of a signal or exits, before or after MPI_Finalize (most of all
 * under -disable-auto-cleanup, where the others are not killed).
 *
 * Usage: die HOW [RANK]   (default rank 1)
 *   HOW = SEGV, ABRT, KILL, TERM, ... : rank RANK raises that signal
 *         after the barrier (its default action restored first);
 *   HOW = exitN : rank RANK calls exit(N) after the barrier, without
 *         MPI_Finalize;
 *   HOW = afterN : rank RANK calls MPI_Finalize, then exit(N) at once.
 * The other ranks print "rank R finalizing" before an MPI_Barrier of all
 * (so their line is out before the victim goes, whatever the launcher
 * does then), call MPI_Finalize (after a short pause for `afterN`, so the
 * victim's exit comes first) and print "rank R finalized".  Every line is
 * flushed when printed.
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "victim.h"

static int signal_named(const char *name)
{
    static const struct { const char *name; int sig; } table[] = {
        {"SEGV", SIGSEGV}, {"ABRT", SIGABRT}, {"KILL", SIGKILL}, {"TERM", SIGTERM},
        {"BUS", SIGBUS}, {"FPE", SIGFPE}, {"ILL", SIGILL}, {"INT", SIGINT},
        {"HUP", SIGHUP}, {"QUIT", SIGQUIT}, {"PIPE", SIGPIPE},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(name, table[i].name) == 0)
            return table[i].sig;
    return 0;
}

int main(int argc, char **argv)
{
    int rank, size;
    const char *how = argc > 1 ? argv[1] : "SEGV";
    int after = strncmp(how, "after", 5) == 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int victim = rank == victim_rank(argc - 1, argv + 1, size);
    if (!victim) {
        printf("rank %d finalizing\n", rank);
        fflush(stdout);
    }
    /* Every survivor's line is out before the victim goes. */
    MPI_Barrier(MPI_COMM_WORLD);

    if (victim) {
        if (strncmp(how, "exit", 4) == 0) {
            printf("rank %d exiting %d without MPI_Finalize\n", rank, atoi(how + 4));
            fflush(stdout);
            exit(atoi(how + 4));
        }
        if (after) {
            MPI_Finalize();
            printf("rank %d exiting %d after MPI_Finalize\n", rank, atoi(how + 5));
            fflush(stdout);
            exit(atoi(how + 5));
        }
        int sig = signal_named(how);
        if (sig == 0) {
            fprintf(stderr, "die: unknown HOW '%s'\n", how);
            return 2;
        }
        printf("rank %d raising SIG%s\n", rank, how);
        fflush(stdout);
        signal(sig, SIG_DFL);
        raise(sig);
        pause();
        return 0;
    }

    if (after)
        sleep(1);
    MPI_Finalize();
    printf("rank %d finalized\n", rank);
    fflush(stdout);
    return 0;
}
