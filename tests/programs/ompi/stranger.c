/* stranger.c - another user's attempt on a job's PMIx server (dpm's
 * security tests, crates/dpm/tests/pmix_security.rs; docs/pmix.md). Run
 * with a rank's PMIX_* variables (its namespace, rank and the server's URI)
 * in its environment: `stranger LIBPMIX MARKER` loads LIBPMIX, calls
 * PMIx_Init as that rank and, if it is let in, PMIx_Spawn of
 * `/bin/sh -c "touch MARKER"`. Prints "init <status>" (and "spawn
 * <status>"); exits 0 when refused at init, 1 when let in. No pmix.h is
 * needed: the types are declared as OpenPMIx v5 lays them out. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char nspace[256];
    uint32_t rank;
} pmix_proc_t;

typedef struct {
    char *cmd;
    char **argv;
    char **env;
    char *cwd;
    int maxprocs;
    void *info;
    size_t ninfo;
} pmix_app_t;

typedef int (*init_fn)(pmix_proc_t *, void *, size_t);
typedef int (*spawn_fn)(const void *, size_t, const pmix_app_t *, size_t, char *);
typedef int (*finalize_fn)(const void *, size_t);

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: stranger LIBPMIX MARKER\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "stranger: %s\n", dlerror());
        return 2;
    }
    init_fn init = (init_fn)dlsym(lib, "PMIx_Init");
    spawn_fn spawn = (spawn_fn)dlsym(lib, "PMIx_Spawn");
    finalize_fn finalize = (finalize_fn)dlsym(lib, "PMIx_Finalize");
    if (!init || !spawn || !finalize) {
        fprintf(stderr, "stranger: no PMIx functions: %s\n", dlerror());
        return 2;
    }
    pmix_proc_t me;
    memset(&me, 0, sizeof me);
    int rc = init(&me, NULL, 0);
    printf("init %d\n", rc);
    fflush(stdout);
    if (rc != 0)
        return 0;
    char line[4200];
    snprintf(line, sizeof line, "touch '%s'", argv[2]);
    char *args[] = {"/bin/sh", "-c", line, NULL};
    pmix_app_t app = {"/bin/sh", args, NULL, "/", 1, NULL, 0};
    char child[256] = {0};
    rc = spawn(NULL, 0, &app, 1, child);
    printf("spawn %d\n", rc);
    fflush(stdout);
    finalize(NULL, 0);
    return 1;
}
