/*
 * pmi2_nameserv.c - checks the PMI-2 name service (name-publish,
 * name-lookup, name-unpublish) that MPI_Publish_name/MPI_Lookup_name use.
 *
 * Rank 0 publishes "svc-test" = "port-xyz"; after a fence the checker
 * (rank 1, or rank 0 in a one-rank job) must look it up, must fail to look
 * up "svc-missing", and must fail to publish "svc-test" a second time.
 * After a second fence rank 0 unpublishes it, and a lookup must then fail.
 * Each rank prints "pmi2 nameserv ok rank R".
 *
 * Note: Slurm's client reads the looked-up port from the reply key
 * "value", while MPICH's own client reads "port".
 */
#include <string.h>
#include "pmi2_expect.h"

#define SERVICE "svc-test"
#define PORT "port-xyz"

static void checker_run(int rank)
{
    char port[PMI2_MAX_VALLEN] = "";

    pmi2_expect(PMI2_Nameserv_lookup(SERVICE, NULL, port, sizeof port), rank,
                "lookup " SERVICE);
    if (strcmp(port, PORT) != 0) {
        printf("pmi2 FAIL rank %d lookup %s gave %s expected %s\n", rank, SERVICE, port, PORT);
        exit(1);
    }
    pmi2_expect_failure(PMI2_Nameserv_lookup("svc-missing", NULL, port, sizeof port), rank,
                        "lookup svc-missing");
    pmi2_expect_failure(PMI2_Nameserv_publish(SERVICE, NULL, "port-other"), rank,
                        "second publish " SERVICE);
    printf("pmi2 rank %d lookup %s=%s\n", rank, SERVICE, port);
}

int main(void)
{
    int spawned, size, rank, appnum;
    char port[PMI2_MAX_VALLEN];

    pmi2_expect(PMI2_Init(&spawned, &size, &rank, &appnum), -1, "PMI2_Init");
    int checker = size > 1 ? 1 : 0;

    if (rank == 0)
        pmi2_expect(PMI2_Nameserv_publish(SERVICE, NULL, PORT), rank, "publish " SERVICE);
    pmi2_expect(PMI2_KVS_Fence(), rank, "PMI2_KVS_Fence");

    if (rank == checker)
        checker_run(rank);
    pmi2_expect(PMI2_KVS_Fence(), rank, "PMI2_KVS_Fence");

    if (rank == 0) {
        pmi2_expect(PMI2_Nameserv_unpublish(SERVICE, NULL), rank, "unpublish " SERVICE);
        pmi2_expect_failure(PMI2_Nameserv_lookup(SERVICE, NULL, port, sizeof port), rank,
                            "lookup after unpublish");
    }

    pmi2_expect(PMI2_Finalize(), rank, "PMI2_Finalize");
    printf("pmi2 nameserv ok rank %d\n", rank);
    return 0;
}
