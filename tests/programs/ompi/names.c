/* names.c - Open MPI program for crates/dpm/tests/open_mpi.rs: rank 0
 * publishes a port under argv[1], looks it up, unpublishes it, and looks it
 * up again (which must fail); prints "names ok" or what went wrong. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rank;
    char port[MPI_MAX_PORT_NAME], found[MPI_MAX_PORT_NAME];
    const char *service = argc > 1 ? argv[1] : "dpm-names";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    int ok = 1;
    if (rank == 0) {
        snprintf(port, sizeof port, "dpm-test-port-%s", service);
        if (MPI_Publish_name(service, MPI_INFO_NULL, port) != MPI_SUCCESS) {
            printf("publish failed\n");
            ok = 0;
        } else if (MPI_Lookup_name(service, MPI_INFO_NULL, found) != MPI_SUCCESS || strcmp(found, port) != 0) {
            printf("lookup failed\n");
            ok = 0;
        } else if (MPI_Unpublish_name(service, MPI_INFO_NULL, port) != MPI_SUCCESS) {
            printf("unpublish failed\n");
            ok = 0;
        } else if (MPI_Lookup_name(service, MPI_INFO_NULL, found) == MPI_SUCCESS) {
            printf("lookup after unpublish succeeded\n");
            ok = 0;
        }
        if (ok)
            printf("names ok\n");
        fflush(stdout);
    }
    MPI_Finalize();
    return ok ? 0 : 1;
}
