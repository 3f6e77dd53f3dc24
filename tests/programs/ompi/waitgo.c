/* waitgo.c - a job for dpm's security tests (crates/dpm/tests/
 * pmix_security.rs): each rank r writes its PMIX_* variables (NAME=value a
 * line) to DIR/env<r> (through a temporary name, so a reader sees all or
 * nothing) and waits for DIR/go - after MPI_Init, or before it with
 * `before` -, then joins a barrier, prints "rank r done", finalizes and
 * exits with status CODE. Usage: waitgo DIR CODE [before]. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv)
{
    int rank;
    char path[4096], tmp[4200];
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: waitgo DIR CODE [before]\n");
        return 2;
    }
    int before = argc == 4 && strcmp(argv[3], "before") == 0;
    const char *r = getenv("PMIX_RANK");
    rank = r ? atoi(r) : 0;
    if (!before) {
        MPI_Init(&argc, &argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    }
    snprintf(path, sizeof path, "%s/env%d", argv[1], rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        perror(tmp);
        return 2;
    }
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "PMIX_", 5) == 0)
            fprintf(f, "%s\n", *e);
    fclose(f);
    rename(tmp, path);
    snprintf(path, sizeof path, "%s/go", argv[1]);
    while (access(path, F_OK) != 0)
        usleep(20000);
    if (before)
        MPI_Init(&argc, &argv);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d done\n", rank);
    fflush(stdout);
    MPI_Finalize();
    return atoi(argv[2]);
}
