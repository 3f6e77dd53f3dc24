/*
 * pmi2_expect.h - error checking shared by the programs that use Slurm's
 * PMI-2 client library (libpmi2) directly, without MPI.
 *
 * Any unexpected return code prints "pmi2 FAIL rank R <what> rc=N" and
 * exits 1, so a test only has to look at the exit status and grep for
 * "FAIL".  The library needs PMI_FD, PMI_RANK, PMI_SIZE and PMI_JOBID in
 * the environment; the launcher sets them.
 *
 * Built with -DDPM_PMI2 the same programs use dpm's own header and library
 * (include/pmi2.h, target/client/lib/libpmi2.so): the Makefile's dpm_*
 * copies.
 */
#ifndef PMI2_EXPECT_H
#define PMI2_EXPECT_H

#ifdef DPM_PMI2
#include <pmi2.h>
#else
#include <slurm/pmi2.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void pmi2_expect(int rc, int rank, const char *what)
{
    if (rc == PMI2_SUCCESS)
        return;
    printf("pmi2 FAIL rank %d %s rc=%d\n", rank, what, rc);
    fflush(stdout);
    exit(1);
}

/* Like pmi2_expect, but the call is supposed to fail. */
static inline void pmi2_expect_failure(int rc, int rank, const char *what)
{
    if (rc != PMI2_SUCCESS)
        return;
    printf("pmi2 FAIL rank %d %s succeeded but should have failed\n", rank, what);
    fflush(stdout);
    exit(1);
}

static inline void pmi2_fail(int rank, const char *what)
{
    printf("pmi2 FAIL rank %d %s\n", rank, what);
    fflush(stdout);
    exit(1);
}

/* The calls that read a key: PMI2_KVS_Get, and dpm's PMI2_KVS_GetWait. */
typedef int pmi2_get_fn(const char *jobid, int src, const char key[], char value[],
                        int maxvalue, int *vallen);

/* get(jobid, src, key) must succeed and give want. */
static inline void pmi2_expect_value(pmi2_get_fn *get, const char *jobid, int src,
                                     const char *key, const char *want, int rank)
{
    char got[PMI2_MAX_VALLEN];
    int len = 0;

    pmi2_expect(get(jobid, src, key, got, sizeof got, &len), rank, key);
    if (strcmp(got, want) != 0) {
        printf("pmi2 FAIL rank %d %s=%s expected %s\n", rank, key, got, want);
        fflush(stdout);
        exit(1);
    }
}

#endif
