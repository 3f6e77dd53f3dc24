/* name_connect.c - Open MPI program for crates/dpm/tests/boot_pmix.rs: two
 * jobs of separate `dpm run`s of one boot meeting through the name service
 * (PMIx publish/lookup, then PMIx_Connect across the two runs' namespaces).
 *
 * Usage: name_connect server|client NAME [GO-FILE]
 * Server: opens a port, publishes it as NAME, prints "server published
 * NAME", accepts one connection, receives an int and sends it back plus one.
 * Client: looks NAME up (retrying for up to 20 s), connects, sends 41,
 * expects 42. Prints "server ok" / "client ok"; a failed call prints
 * "FAIL <call>: <MPI error string>" and exits 1.
 * With GO-FILE (a connect to a job that has ended): the server exits
 * without accepting once GO-FILE exists; the client creates GO-FILE after
 * its lookup, prints "client found NAME", and connects once GO-FILE.connect
 * exists. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int check(int rc, const char *call)
{
    if (rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, text, &len);
        printf("FAIL %s: %s\n", call, text);
        fflush(stdout);
    }
    return rc != MPI_SUCCESS;
}

/* Waits until `path` exists. */
static void wait_for(const char *path)
{
    while (access(path, F_OK) != 0)
        usleep(20 * 1000);
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
        fprintf(stderr, "usage: name_connect server|client NAME [GO-FILE]\n");
        return 2;
    }
    const char *name = argv[2];
    const char *go = argc > 3 ? argv[3] : NULL;
    char port[MPI_MAX_PORT_NAME];
    MPI_Comm peer;
    int value = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    if (!strcmp(argv[1], "server")) {
        if (check(MPI_Open_port(MPI_INFO_NULL, port), "MPI_Open_port")
            || check(MPI_Publish_name(name, MPI_INFO_NULL, port), "MPI_Publish_name"))
            return 1;
        printf("server published %s\n", name);
        fflush(stdout);
        if (go) {
            wait_for(go);
            MPI_Finalize();
            return 0;
        }
        if (check(MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &peer), "MPI_Comm_accept")
            || check(MPI_Recv(&value, 1, MPI_INT, 0, 0, peer, MPI_STATUS_IGNORE), "MPI_Recv"))
            return 1;
        value++;
        if (check(MPI_Send(&value, 1, MPI_INT, 0, 0, peer), "MPI_Send")
            || check(MPI_Comm_disconnect(&peer), "MPI_Comm_disconnect"))
            return 1;
        MPI_Unpublish_name(name, MPI_INFO_NULL, port);
        MPI_Close_port(port);
        printf(value == 42 ? "server ok\n" : "FAIL server got %d\n", value - 1);
    } else {
        int rc = MPI_ERR_NAME;
        for (int i = 0; i < 400 && rc != MPI_SUCCESS; i++) {
            rc = MPI_Lookup_name(name, MPI_INFO_NULL, port);
            if (rc != MPI_SUCCESS)
                usleep(50 * 1000);
        }
        if (check(rc, "MPI_Lookup_name"))
            return 1;
        if (go) {
            char then[4096];
            FILE *found = fopen(go, "w");
            if (!found || fclose(found) != 0) {
                printf("FAIL create %s\n", go);
                return 1;
            }
            printf("client found %s\n", name);
            fflush(stdout);
            snprintf(then, sizeof then, "%s.connect", go);
            wait_for(then);
        }
        if (check(MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &peer), "MPI_Comm_connect"))
            return 1;
        value = 41;
        if (check(MPI_Send(&value, 1, MPI_INT, 0, 0, peer), "MPI_Send")
            || check(MPI_Recv(&value, 1, MPI_INT, 0, 0, peer, MPI_STATUS_IGNORE), "MPI_Recv")
            || check(MPI_Comm_disconnect(&peer), "MPI_Comm_disconnect"))
            return 1;
        printf(value == 42 ? "client ok\n" : "FAIL client got %d\n", value);
    }
    fflush(stdout);
    MPI_Finalize();
    return value == 42 ? 0 : 1;
}
