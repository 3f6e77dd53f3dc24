/* fence.c - a PMIx fence over part of MPI_COMM_WORLD (dpm's subset fences,
 * docs/pmix.md): after MPI_Init, ranks 2k and 2k+1 fence together with
 * PMIx_Fence on a proc array of the two, every pair at the same time, and
 * print "fence ok <rank>"; then an MPI barrier and finalize. The PMIx
 * functions are looked up in the libpmix Open MPI already loaded, so no
 * pmix.h is needed; pmix_proc_t is declared as OpenPMIx v5 lays it out. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char nspace[256];
    uint32_t rank;
} pmix_proc_t;

typedef int (*init_fn)(pmix_proc_t *, void *, size_t);
typedef int (*fence_fn)(const pmix_proc_t *, size_t, const void *, size_t);
typedef int (*finalize_fn)(const void *, size_t);

int main(int argc, char **argv)
{
    int rank, size, rc;
    pmix_proc_t me, pair[2];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    init_fn pmix_init = (init_fn)dlsym(RTLD_DEFAULT, "PMIx_Init");
    fence_fn pmix_fence = (fence_fn)dlsym(RTLD_DEFAULT, "PMIx_Fence");
    finalize_fn pmix_finalize = (finalize_fn)dlsym(RTLD_DEFAULT, "PMIx_Finalize");
    if (!pmix_init || !pmix_fence || !pmix_finalize) {
        fprintf(stderr, "rank %d: no PMIx functions: %s\n", rank, dlerror());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if ((rc = pmix_init(&me, NULL, 0)) != 0) {
        fprintf(stderr, "rank %d: PMIx_Init %d\n", rank, rc);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    if (rank / 2 * 2 + 1 < size) {
        for (int i = 0; i < 2; i++) {
            memcpy(pair[i].nspace, me.nspace, sizeof me.nspace);
            pair[i].rank = (uint32_t)(rank / 2 * 2 + i);
        }
        if ((rc = pmix_fence(pair, 2, NULL, 0)) != 0) {
            fprintf(stderr, "rank %d: PMIx_Fence %d\n", rank, rc);
            MPI_Abort(MPI_COMM_WORLD, 4);
        }
        printf("fence ok %d\n", rank);
        fflush(stdout);
    }
    pmix_finalize(NULL, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
