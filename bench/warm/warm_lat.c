/* warm_lat K REPS WARMUP: a 1-rank parent spawns K children of this program
 * REPS+WARMUP times with the same argv each time (so a warm pool can match);
 * prints the median and all times of MPI_Comm_spawn, in ms. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm parent;
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        MPI_Barrier(parent);
        MPI_Comm_disconnect(&parent);
        MPI_Finalize();
        return 0;
    }
    int k = atoi(argv[1]), reps = atoi(argv[2]), warm = atoi(argv[3]);
    double gap = argc > 4 ? atof(argv[4]) : 0; /* seconds between spawns */
    double *t = malloc(sizeof(double) * reps);
    char *cargv[] = {"child", NULL};
    for (int i = 0; i < warm + reps; i++) {
        MPI_Comm inter;
        if (gap > 0) { struct timespec ts = {(time_t)gap, (long)((gap - (time_t)gap) * 1e9)}; nanosleep(&ts, NULL); }
        double t0 = MPI_Wtime();
        MPI_Comm_spawn(argv[0], cargv, k, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter, MPI_ERRCODES_IGNORE);
        double t1 = MPI_Wtime();
        if (i >= warm) t[i - warm] = (t1 - t0) * 1e3;
        MPI_Barrier(inter);
        MPI_Comm_disconnect(&inter);
    }
    double *s = malloc(sizeof(double) * reps);
    memcpy(s, t, sizeof(double) * reps);
    qsort(s, reps, sizeof(double), cmp);
    printf("warm_lat k=%d reps=%d median=%.2f min=%.2f max=%.2f\n", k, reps, s[reps / 2], s[0], s[reps - 1]);
    MPI_Finalize();
    return 0;
}
