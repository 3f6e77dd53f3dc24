/*
 * appnum.c - checks MPMD numbering: which command-line segment a rank was
 * started from (the MPI_APPNUM attribute, served by PMI get_appnum).
 *
 * "dpm run -n 2 ./appnum : -n 3 ./appnum" should print appnum 0 for
 * ranks 0-1 and appnum 1 for ranks 2-4, all with size 5.  Each rank prints
 * "rank R appnum A size S", plus " arg X" when argv[1] is given so tests can
 * see that each segment got its own arguments.  An unset attribute prints
 * "appnum unset" and exits non-zero.
 */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, flag = 0, rc = 0;
    int *appnum = NULL;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag);

    if (flag)
        printf("rank %d appnum %d size %d", rank, *appnum, size);
    else {
        printf("rank %d appnum unset size %d", rank, size);
        rc = 1;
    }
    if (argc > 1)
        printf(" arg %s", argv[1]);
    printf("\n");
    fflush(stdout);

    MPI_Finalize();
    return rc;
}
