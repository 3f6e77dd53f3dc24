/*
 * name_connect.c - two separately launched jobs meeting through the name
 * service: the case a booted daemon tree (dpm boot) serves, where each
 * `dpm run` is its own job but all share one name service.
 *
 * Usage: name_connect server NAME | name_connect client NAME
 * Server: opens a port, publishes it as NAME, accepts one connection,
 * receives an int, sends it back plus one, unpublishes.
 * Client: looks NAME up (retrying for up to 20 s: the server may not have
 * published yet), connects, sends 41, expects 42.
 * Both barrier on the intercommunicator before disconnecting (MPICH's
 * disconnect does not wait for the peer). Needs a netmod that can open
 * ports (ch4:ofi). Prints "server ok" / "client ok"; "FAIL ..." and exit 1
 * otherwise.
 */
#include "spawn_util.h"

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
        fprintf(stderr, "usage: name_connect server|client NAME\n");
        return 2;
    }
    const char *name = argv[2];
    char port[MPI_MAX_PORT_NAME];
    MPI_Comm peer;
    int value = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    if (!strcmp(argv[1], "server")) {
        MPI_OK(MPI_Open_port(MPI_INFO_NULL, port));
        MPI_OK(MPI_Publish_name(name, MPI_INFO_NULL, port));
        printf("server published %s\n", name);
        fflush(stdout);
        MPI_OK(MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &peer));
        MPI_OK(MPI_Recv(&value, 1, MPI_INT, 0, 0, peer, MPI_STATUS_IGNORE));
        value++;
        MPI_OK(MPI_Send(&value, 1, MPI_INT, 0, 0, peer));
        MPI_OK(MPI_Barrier(peer));
        MPI_OK(MPI_Comm_disconnect(&peer));
        MPI_OK(MPI_Unpublish_name(name, MPI_INFO_NULL, port));
        MPI_OK(MPI_Close_port(port));
        CHECK(value == 42, "server: got %d, expected 41", value - 1);
        if (!failures)
            printf("server ok\n");
    } else {
        int rc = MPI_ERR_NAME;
        for (int i = 0; i < 400 && rc != MPI_SUCCESS; i++) {
            rc = MPI_Lookup_name(name, MPI_INFO_NULL, port);
            if (rc != MPI_SUCCESS)
                usleep(50 * 1000);
        }
        MPI_OK(rc);
        MPI_OK(MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &peer));
        value = 41;
        MPI_OK(MPI_Send(&value, 1, MPI_INT, 0, 0, peer));
        MPI_OK(MPI_Recv(&value, 1, MPI_INT, 0, 0, peer, MPI_STATUS_IGNORE));
        MPI_OK(MPI_Barrier(peer));
        MPI_OK(MPI_Comm_disconnect(&peer));
        CHECK(value == 42, "client: got %d, expected 42", value);
        if (!failures)
            printf("client ok\n");
    }
    fflush(stdout);
    MPI_Finalize();
    return failures ? 1 : 0;
}
