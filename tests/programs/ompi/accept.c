/* accept.c - Open MPI program for crates/dpm/tests/open_mpi.rs: connect and
 * accept between two jobs through the name service. The parent job spawns
 * one child, opens a port, publishes it as argv[1] (default "dpm-accept")
 * and accepts; its accept waits (PMIX_WAIT) for the child, which finds the
 * name (retrying MPI_Lookup_name, which does not wait), sleeps a second and
 * connects. The child sends 41 over the new intercommunicator, the parent
 * answers 42. Prints "accept ok" (parent) and "connect ok" (child). */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    MPI_Comm parent, inter, other;
    char port[MPI_MAX_PORT_NAME];
    const char *service = argc > 1 ? argv[1] : "dpm-accept";
    int value = 0, ok = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (parent == MPI_COMM_NULL) {
        if (MPI_Comm_spawn(argv[0], argv + 1, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE) != MPI_SUCCESS) {
            printf("spawn failed\n");
            return 1;
        }
        MPI_Open_port(MPI_INFO_NULL, port);
        if (MPI_Publish_name(service, MPI_INFO_NULL, port) != MPI_SUCCESS) {
            printf("publish failed\n");
            return 1;
        }
        MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &other);
        MPI_Recv(&value, 1, MPI_INT, 0, 0, other, MPI_STATUS_IGNORE);
        ok = value == 41;
        value = 42;
        MPI_Send(&value, 1, MPI_INT, 0, 0, other);
        MPI_Unpublish_name(service, MPI_INFO_NULL, port);
        MPI_Close_port(port);
        printf(ok ? "accept ok\n" : "accept got %d\n", value);
        MPI_Comm_disconnect(&other);
        MPI_Comm_disconnect(&inter);
    } else {
        int tries = 0;
        while (MPI_Lookup_name(service, MPI_INFO_NULL, port) != MPI_SUCCESS && tries++ < 200)
            usleep(50000);
        sleep(1);
        if (MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &other) != MPI_SUCCESS) {
            printf("connect failed\n");
            return 1;
        }
        value = 41;
        MPI_Send(&value, 1, MPI_INT, 0, 0, other);
        MPI_Recv(&value, 1, MPI_INT, 0, 0, other, MPI_STATUS_IGNORE);
        ok = value == 42;
        printf(ok ? "connect ok\n" : "connect got %d\n", value);
        MPI_Comm_disconnect(&other);
        MPI_Comm_disconnect(&parent);
    }
    fflush(stdout);
    MPI_Finalize();
    return ok ? 0 : 1;
}
