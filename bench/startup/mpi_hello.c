/*
 * mpi_hello.c: the smallest real MPI program, for the startup benchmark.
 *
 * MPI_Init, print rank and size, MPI_Finalize. Under MPICH 5 this is the
 * PMI-1 traffic of a typical job start and end (pmi-wire.md §2.5, §6.1):
 * init, get_maxes, get_appnum, get_my_kvsname, a few gets, one barrier in
 * MPI_Finalize, then finalize from the atexit handler. Built with the
 * wheel's mpicc by the Makefile's `hello` target.
 */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("hello from rank %d of %d\n", rank, size);
    MPI_Finalize();
    return 0;
}
