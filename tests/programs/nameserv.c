/*
 * nameserv.c - checks the launcher's name service (PMI publish / lookup /
 * unpublish) together with MPI_Comm_accept / MPI_Comm_connect.
 *
 * Usage: nameserv server : nameserv client   (MPMD, one process each:
 *        dpm run -n 1 nameserv server : -n 1 nameserv client)
 * Needs a netmod that can open ports (ch4:ofi, e.g. -genv
 * MPIR_CVAR_CH4_NETMOD ofi -genv FI_PROVIDER tcp).
 * Server: opens a port, publishes it as "dpm-test-svc", checks that a
 * second publish of that name fails, then (barrier 1) accepts on
 * MPI_COMM_SELF. Client: checks that looking up an unknown name fails,
 * waits for barrier 1, looks the name up, connects, sends 41 and expects
 * 42 back. Both disconnect; the server unpublishes (barrier 2), then the
 * client checks that the name is gone and the server that a second
 * unpublish fails (barrier 3).
 * Errors must come back as return codes: MPI_ERRORS_RETURN is set on
 * MPI_COMM_WORLD and MPI_COMM_SELF (MPI-4 reports errors of calls without
 * a communicator on MPI_COMM_SELF).
 * Prints "server ..." / "client ..." steps, then "nameserv ok" (rank 0);
 * "FAIL ..." and exit 1 otherwise.
 */
#include "spawn_util.h"

#define SERVICE "dpm-test-svc"

static void server(void)
{
    char port[MPI_MAX_PORT_NAME];
    MPI_Comm client;
    int value = -1, rc;

    MPI_OK(MPI_Open_port(MPI_INFO_NULL, port));
    MPI_OK(MPI_Publish_name(SERVICE, MPI_INFO_NULL, port));
    printf("server published %s\n", SERVICE);
    rc = MPI_Publish_name(SERVICE, MPI_INFO_NULL, port);
    CHECK(rc != MPI_SUCCESS, "server: publishing %s twice succeeded", SERVICE);
    if (rc != MPI_SUCCESS)
        printf("server duplicate publish failed as expected\n");
    fflush(stdout);

    MPI_OK(MPI_Barrier(MPI_COMM_WORLD)); /* 1: the name is there */
    MPI_OK(MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &client));
    MPI_OK(MPI_Recv(&value, 1, MPI_INT, 0, 1, client, MPI_STATUS_IGNORE));
    value++;
    MPI_OK(MPI_Send(&value, 1, MPI_INT, 0, 2, client));
    MPI_OK(MPI_Comm_disconnect(&client));
    printf("server accepted and answered %d\n", value);

    MPI_OK(MPI_Unpublish_name(SERVICE, MPI_INFO_NULL, port));
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD)); /* 2: the name is gone */
    rc = MPI_Unpublish_name(SERVICE, MPI_INFO_NULL, port);
    CHECK(rc != MPI_SUCCESS, "server: unpublishing %s twice succeeded", SERVICE);
    if (rc != MPI_SUCCESS)
        printf("server second unpublish failed as expected\n");
    fflush(stdout);
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD)); /* 3 */
    MPI_OK(MPI_Close_port(port));
}

static void client(void)
{
    char port[MPI_MAX_PORT_NAME];
    MPI_Comm server_comm;
    int value = 41, rc;

    rc = MPI_Lookup_name("dpm-test-no-such-svc", MPI_INFO_NULL, port);
    CHECK(rc != MPI_SUCCESS, "client: lookup of an unknown name succeeded: %s", port);
    if (rc != MPI_SUCCESS)
        printf("client lookup of an unknown name failed as expected\n");
    fflush(stdout);

    MPI_OK(MPI_Barrier(MPI_COMM_WORLD)); /* 1 */
    MPI_OK(MPI_Lookup_name(SERVICE, MPI_INFO_NULL, port));
    printf("client looked up %s\n", SERVICE);
    MPI_OK(MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &server_comm));
    MPI_OK(MPI_Send(&value, 1, MPI_INT, 0, 1, server_comm));
    MPI_OK(MPI_Recv(&value, 1, MPI_INT, 0, 2, server_comm, MPI_STATUS_IGNORE));
    CHECK(value == 42, "client: server answered %d, expected 42", value);
    MPI_OK(MPI_Comm_disconnect(&server_comm));
    printf("client connected and got %d\n", value);

    MPI_OK(MPI_Barrier(MPI_COMM_WORLD)); /* 2 */
    rc = MPI_Lookup_name(SERVICE, MPI_INFO_NULL, port);
    CHECK(rc != MPI_SUCCESS, "client: lookup after unpublish succeeded: %s", port);
    if (rc != MPI_SUCCESS)
        printf("client lookup after unpublish failed as expected\n");
    fflush(stdout);
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD)); /* 3 */
}

int main(int argc, char **argv)
{
    int rank, bad, total = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    const char *role = argc > 1 ? argv[1] : "";
    if (strcmp(role, "server") == 0)
        server();
    else if (strcmp(role, "client") == 0)
        client();
    else {
        fail("usage: nameserv server|client");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    bad = failures;
    MPI_OK(MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (rank == 0 && total == 0)
        printf("nameserv ok\n");
    fflush(stdout);
    MPI_Finalize();
    return finish();
}
