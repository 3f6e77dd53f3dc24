/*
 * spawn_floor.c: the floor for launching N processes on one node.
 *
 * Usage: spawn_floor [-f] N prog [args...]
 *
 * Starts N copies of prog with posix_spawnp, all at once (the way a launcher
 * fans out its ranks), then waits for every one of them. Nothing else: no
 * sockets, no environment changes, no stdio forwarding. A launcher doing
 * real work should not be much slower than this, so the benchmark divides a
 * launcher's time by this program's time (both measured from outside, as a
 * whole command).
 *
 * With -f it uses fork + execvp instead. glibc's posix_spawn is a vfork-like
 * clone: the parent sleeps until the child has exec'd, so exec costs are
 * paid one after another. With fork the parent goes on forking while the
 * children exec on other cores; on a machine where exec is expensive that
 * is the faster loop (see bench/README.md).
 *
 * Exit status: 0 if every child exited 0, 1 if any child failed or was
 * killed, 2 on usage or spawn errors.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Parse a positive process count; return -1 if s is not one. */
static long count_parse(const char *s)
{
    char *end = NULL;
    long n;

    errno = 0;
    n = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || n <= 0)
        return -1;
    return n;
}

/* Start one copy of argv[0] with fork + execvp; 0 or an errno value. */
static int child_fork(char **argv)
{
    pid_t pid = fork();

    if (pid < 0)
        return errno;
    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    return 0;
}

/* Spawn n copies of argv[0]; return how many were started. */
static long children_spawn(long n, char **argv, int use_fork)
{
    long i;

    for (i = 0; i < n; i++) {
        pid_t pid;
        int rc = use_fork ? child_fork(argv)
                          : posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ);

        if (rc != 0) {
            fprintf(stderr, "spawn_floor: %s %s (copy %ld): %s\n",
                    use_fork ? "fork" : "posix_spawnp", argv[0], i, strerror(rc));
            break;
        }
    }
    return i;
}

/* Wait for n children; return the number that did not exit 0. */
static long children_wait(long n)
{
    long failed = 0;

    while (n > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);

        if (pid < 0) {
            if (errno == EINTR)
                continue;
            perror("spawn_floor: waitpid");
            return failed + n;
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failed++;
        n--;
    }
    return failed;
}

int main(int argc, char **argv)
{
    long n, started, failed;
    int use_fork = 0;

    if (argc > 1 && strcmp(argv[1], "-f") == 0) {
        use_fork = 1;
        argc--;
        argv++;
    }
    if (argc < 3 || (n = count_parse(argv[1])) < 0) {
        fprintf(stderr, "usage: spawn_floor [-f] N prog [args...]\n");
        return 2;
    }
    started = children_spawn(n, argv + 2, use_fork);
    failed = children_wait(started);
    if (started < n)
        return 2;
    if (failed > 0) {
        fprintf(stderr, "spawn_floor: %ld of %ld children failed\n", failed, n);
        return 1;
    }
    return 0;
}
