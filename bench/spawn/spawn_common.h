/*
 * spawn_common.h: helpers shared by the spawn benchmark's programs.
 *
 * self_path(): absolute path of this executable, so that the children are
 *              this same program (in child mode) whatever PATH and the
 *              launcher's working directory are.
 * mpi_check(): abort the whole job, with a message, on any MPI error; the
 *              benchmark must fail loudly, never report a number for a
 *              spawn that did not happen.
 * arg_int():   a positive integer argument, or exit with a usage message.
 * times_print(): a " name=a,b,..." list of milliseconds for the runner.
 */
#ifndef SPAWN_COMMON_H
#define SPAWN_COMMON_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline const char *self_path(void)
{
    static char path[4096];
    ssize_t len = readlink("/proc/self/exe", path, sizeof path - 1);

    if (len <= 0) {
        fprintf(stderr, "spawn bench: cannot read /proc/self/exe\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    path[len] = '\0';
    return path;
}

static inline void mpi_check(int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;

    if (rc == MPI_SUCCESS)
        return;
    MPI_Error_string(rc, text, &len);
    fprintf(stderr, "spawn bench: %s failed: %s\n", what, text);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static inline int arg_int(const char *s, const char *usage)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);

    if (end == s || *end != '\0' || v < 1 || v > 1000000) {
        fprintf(stderr, "%s\n", usage);
        exit(3);
    }
    return (int)v;
}

static inline void times_print(const char *name, const double *seconds, int count)
{
    printf(" %s=", name);
    for (int i = 0; i < count; i++)
        printf("%s%.3f", i ? "," : "", seconds[i] * 1e3);
}

#endif
