/*
 * spawn_util.h - helpers shared by the dynamic-process programs (spawn_*,
 * nameserv*, universe): failure reporting, this program's own path, and
 * counting the entries of /proc directories.
 *
 * Every wrong outcome prints a line starting with "FAIL" and makes the
 * program exit non-zero (after MPI_Finalize when that is still possible),
 * so tests can both grep the output and rely on the exit status.
 */
#ifndef SPAWN_UTIL_H
#define SPAWN_UTIL_H

#include <mpi.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

/* Report a wrong outcome; the program goes on and exits 1 at the end. */
static inline void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    failures++;
}

#define CHECK(cond, ...) do { if (!(cond)) fail(__VA_ARGS__); } while (0)

/* An MPI call that must succeed, even under MPI_ERRORS_RETURN. */
#define MPI_OK(call) do { \
        int rc_ = (call); \
        if (rc_ != MPI_SUCCESS) { \
            char s_[MPI_MAX_ERROR_STRING]; \
            int l_ = 0; \
            MPI_Error_string(rc_, s_, &l_); \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, s_); \
            fflush(stdout); \
            exit(1); \
        } \
    } while (0)

/* The text of an MPI error code. */
static inline const char *mpi_error(int rc)
{
    static char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    s[0] = 0;
    MPI_Error_string(rc, s, &len);
    return s;
}

/* Absolute path of this executable (so children are found whatever PATH is). */
static inline const char *self_exe(void)
{
    static char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) {
        printf("FAIL cannot read /proc/self/exe\n");
        exit(1);
    }
    path[n] = 0;
    return path;
}

/* Entries of a directory except . and .., or -1 if it cannot be read. */
static inline int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

/* Open file descriptors of a process ("self" or a pid). */
static inline int count_fds(const char *pid)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%s/fd", pid);
    int n = count_entries(dir);
    /* opendir itself holds one descriptor while counting our own. */
    return strcmp(pid, "self") == 0 && n > 0 ? n - 1 : n;
}

/* argv[index] as an int, or fallback when absent. */
static inline int arg_or(int argc, char **argv, int index, int fallback)
{
    return argc > index ? atoi(argv[index]) : fallback;
}

/* Exit status for the end of main: 1 after any failure. */
static inline int finish(void)
{
    return failures ? 1 : 0;
}

#endif
