/*
 * universe.c - prints the MPI_UNIVERSE_SIZE attribute of MPI_COMM_WORLD
 * (served by PMI universe_size / info-getjobattr universeSize).
 *
 * Usage: universe   (any -n)
 * Each rank prints "rank R universe flag=1 size=N", or
 * "rank R universe flag=0" when the attribute is unset (MPICH leaves it
 * unset for a negative size, i.e. an unlimited universe).
 */
#include "spawn_util.h"

int main(int argc, char **argv)
{
    int rank, flag = 0, *usize = NULL;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &usize, &flag);
    if (flag)
        printf("rank %d universe flag=1 size=%d\n", rank, *usize);
    else
        printf("rank %d universe flag=0\n", rank);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
