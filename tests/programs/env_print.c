/*
 * env_print.c - checks the environment and working directory the launcher
 * gives each rank (-genv/-env/-envlist handling, PMI_* variables, -wdir).
 *
 * Usage: env_print NAME...
 * For each NAME prints "rank R NAME=value" or "rank R NAME unset", then
 * "rank R cwd=<dir>".  The rank comes from MPI, so the output also shows
 * that PMI worked.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank;
    char cwd[4096];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);

    for (int i = 1; i < argc; i++) {
        const char *value = getenv(argv[i]);
        if (value)
            printf("rank %d %s=%s\n", rank, argv[i], value);
        else
            printf("rank %d %s unset\n", rank, argv[i]);
    }
    if (getcwd(cwd, sizeof cwd))
        printf("rank %d cwd=%s\n", rank, cwd);
    else
        printf("rank %d cwd unknown\n", rank);
    fflush(stdout);

    MPI_Finalize();
    return 0;
}
