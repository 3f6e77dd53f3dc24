/*
 * nameserv_spawn.c - checks that a name published in one job can be looked
 * up from a job it spawned, and that the two can then connect through that
 * port besides their spawn intercommunicator.
 *
 * Usage: nameserv_spawn   (run with -n 1; needs a netmod that can open
 *        ports, e.g. -genv MPIR_CVAR_CH4_NETMOD ofi -genv FI_PROVIDER tcp)
 * The parent opens a port, publishes it as "dpm-test-spawn-svc" and spawns
 * one child of itself (argument "child"). The child looks the name up and
 * connects to it while the parent accepts on MPI_COMM_SELF. The parent
 * sends 5 over the spawn intercommunicator and 6 over the connected one;
 * the child answers their sum over each. Then everything is disconnected
 * and the name unpublished.
 * Prints "child ..." / "parent ..." steps and "nameserv_spawn ok";
 * "FAIL ..." and exit 1 otherwise.
 */
#include "spawn_util.h"

#define SERVICE "dpm-test-spawn-svc"

static void child(MPI_Comm parent)
{
    char port[MPI_MAX_PORT_NAME];
    MPI_Comm conn;
    int a = -1, b = -1, sum;

    MPI_OK(MPI_Lookup_name(SERVICE, MPI_INFO_NULL, port));
    printf("child looked up %s\n", SERVICE);
    fflush(stdout);
    MPI_OK(MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &conn));
    MPI_OK(MPI_Recv(&a, 1, MPI_INT, 0, 1, parent, MPI_STATUS_IGNORE));
    MPI_OK(MPI_Recv(&b, 1, MPI_INT, 0, 2, conn, MPI_STATUS_IGNORE));
    sum = a + b;
    MPI_OK(MPI_Send(&sum, 1, MPI_INT, 0, 3, parent));
    MPI_OK(MPI_Send(&sum, 1, MPI_INT, 0, 4, conn));
    MPI_OK(MPI_Comm_disconnect(&conn));
    MPI_OK(MPI_Comm_disconnect(&parent));
    printf("child got %d and %d\n", a, b);
    fflush(stdout);
}

static void parent(void)
{
    char port[MPI_MAX_PORT_NAME];
    char *args[] = {"child", NULL};
    MPI_Comm inter, conn;
    int a = 5, b = 6, via_spawn = -1, via_port = -1;

    MPI_OK(MPI_Open_port(MPI_INFO_NULL, port));
    MPI_OK(MPI_Publish_name(SERVICE, MPI_INFO_NULL, port));
    MPI_OK(MPI_Comm_spawn(self_exe(), args, 1, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter, MPI_ERRCODES_IGNORE));
    printf("parent spawned\n");
    fflush(stdout);
    MPI_OK(MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &conn));
    printf("parent accepted\n");
    fflush(stdout);
    MPI_OK(MPI_Send(&a, 1, MPI_INT, 0, 1, inter));
    MPI_OK(MPI_Send(&b, 1, MPI_INT, 0, 2, conn));
    MPI_OK(MPI_Recv(&via_spawn, 1, MPI_INT, 0, 3, inter, MPI_STATUS_IGNORE));
    MPI_OK(MPI_Recv(&via_port, 1, MPI_INT, 0, 4, conn, MPI_STATUS_IGNORE));
    CHECK(via_spawn == 11 && via_port == 11, "answers %d (spawn) and %d (port), expected 11", via_spawn, via_port);
    MPI_OK(MPI_Comm_disconnect(&conn));
    MPI_OK(MPI_Comm_disconnect(&inter));
    MPI_OK(MPI_Unpublish_name(SERVICE, MPI_INFO_NULL, port));
    MPI_OK(MPI_Close_port(port));
    if (!failures)
        printf("nameserv_spawn ok\n");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    MPI_Comm parent_comm;

    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    MPI_Comm_get_parent(&parent_comm);
    if (parent_comm != MPI_COMM_NULL)
        child(parent_comm);
    else if (getenv("PMI_SPAWNED") || argc > 1)
        fail("spawned, but MPI_Comm_get_parent is MPI_COMM_NULL");
    else
        parent();
    MPI_Finalize();
    return finish();
}
