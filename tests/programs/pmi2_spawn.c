/* pmi2_spawn: PMI2_Job_Spawn through Slurm's libpmi2 (a real third-party
 * PMI-2 client). The parent spawns 2 children of itself with a preput key
 * and checks the new job id; the children check they were spawned, read the
 * preput key at once (no fence), and fence among themselves. A spawn of a
 * missing program must fail with an error, not hang. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmi2_expect.h"

static int run_child(int rank, int size)
{
    char jobid[256], value[PMI2_MAX_VALLEN];
    int len = 0;
    pmi2_expect(PMI2_Job_GetId(jobid, sizeof jobid), rank, "PMI2_Job_GetId");
    pmi2_expect(PMI2_KVS_Get(jobid, PMI2_ID_NULL, "PARENT_ROOT_PORT_NAME", value, sizeof value, &len), rank, "preput get");
    if (strcmp(value, "pmi2-port-xyz") != 0) {
        printf("pmi2 FAIL child %d preput value '%s'\n", rank, value);
        exit(1);
    }
    pmi2_expect(PMI2_KVS_Fence(), rank, "child fence");
    printf("pmi2 spawn child %d of %d ok jobid %s\n", rank, size, jobid);
    return PMI2_Finalize();
}

int main(int argc, char **argv)
{
    (void)argc;
    int spawned = 0, size = 0, rank = -1, appnum = -1;
    pmi2_expect(PMI2_Init(&spawned, &size, &rank, &appnum), rank, "PMI2_Init");
    if (spawned)
        return run_child(rank, size);

    struct MPID_Info preput = {0};
    preput.key = "PARENT_ROOT_PORT_NAME";
    preput.value = "pmi2-port-xyz";
    const struct MPID_Info *preputs[] = {&preput};
    const char *cmds[] = {argv[0]};
    int argcs[] = {1};
    const char *child_args[] = {"child", NULL};
    const char **argvs[] = {child_args};
    int maxprocs[] = {2};
    int infos[] = {0};
    char jobid[256] = "";
    int errors[2] = {-1, -1};
    pmi2_expect(PMI2_Job_Spawn(1, cmds, argcs, argvs, maxprocs, infos, NULL, 1, preputs, jobid, sizeof jobid, errors),
                rank, "PMI2_Job_Spawn");
    if (jobid[0] == '\0' || errors[0] != 0 || errors[1] != 0) {
        printf("pmi2 FAIL spawn jobid '%s' errors %d %d\n", jobid, errors[0], errors[1]);
        return 1;
    }
    const char *bad_cmds[] = {"/nonexistent/pmi2-child"};
    char bad_jobid[256] = "";
    int bad = PMI2_Job_Spawn(1, bad_cmds, argcs, argvs, maxprocs, infos, NULL, 0, NULL, bad_jobid, sizeof bad_jobid, errors);
    pmi2_expect_failure(bad, rank, "spawn of a missing program");
    printf("pmi2 spawn parent ok child job %s; missing program refused (rc=%d)\n", jobid, bad);
    return PMI2_Finalize();
}
