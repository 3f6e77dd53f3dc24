/*
 * pmi2_nodeattr.c - checks the node-local attribute store and, above all,
 * the blocking get (info-getnodeattr with wait=TRUE) that MPICH uses for
 * its node-local broadcast with no fence in between.
 *
 * The node's first rank (MPI_LOCALRANKID=0 if the launcher sets it, else
 * global rank 0) sleeps 300 ms, then puts "shm-handle" = "abc123".  Every
 * other rank asks for it with waitfor=1 before it exists, so the server must
 * hold the request until the put arrives.  A closing fence keeps the first
 * rank alive until all have read.  Prints "pmi2 nodeattr ok rank R".
 */
#include <string.h>
#include <time.h>
#include "pmi2_expect.h"

#define ATTR_NAME "shm-handle"
#define ATTR_VALUE "abc123"

static int node_first_rank(int rank)
{
    const char *local = getenv("MPI_LOCALRANKID");
    return local ? atoi(local) == 0 : rank == 0;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(void)
{
    int spawned, size, rank, appnum, found = 0;
    char value[PMI2_MAX_VALLEN] = "";

    pmi2_expect(PMI2_Init(&spawned, &size, &rank, &appnum), -1, "PMI2_Init");

    if (node_first_rank(rank)) {
        struct timespec delay = { 0, 300 * 1000 * 1000 };
        nanosleep(&delay, NULL);
        pmi2_expect(PMI2_Info_PutNodeAttr(ATTR_NAME, ATTR_VALUE), rank, "PMI2_Info_PutNodeAttr");
        printf("pmi2 rank %d put %s\n", rank, ATTR_NAME);
    } else {
        double start = now_ms();
        pmi2_expect(PMI2_Info_GetNodeAttr(ATTR_NAME, value, sizeof value, &found, 1),
                    rank, "PMI2_Info_GetNodeAttr");
        if (!found || strcmp(value, ATTR_VALUE) != 0) {
            printf("pmi2 FAIL rank %d %s found=%d value=%s\n", rank, ATTR_NAME, found, value);
            return 1;
        }
        printf("pmi2 rank %d got %s after %.0f ms\n", rank, ATTR_NAME, now_ms() - start);
    }

    pmi2_expect(PMI2_KVS_Fence(), rank, "PMI2_KVS_Fence");
    pmi2_expect(PMI2_Finalize(), rank, "PMI2_Finalize");
    printf("pmi2 nodeattr ok rank %d\n", rank);
    return 0;
}
