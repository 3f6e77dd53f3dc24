/* mpi_noinit: an MPICH program that returns from main before MPI_Init.
 * Linked against libmpi, so the library's load and constructors run (the
 * MPICH wheel's ~40 ms), but no PMI and no MPI_Init: bench/model/calibrate
 * subtracts /bin/true's per-rank cost from its per-rank cost to isolate
 * `mpi_lib_start`. The call below is never made; it keeps the link. */
#include <mpi.h>

int main(int argc, char **argv)
{
    if (argc > 99)
        MPI_Init(&argc, &argv);
    return 0;
}
