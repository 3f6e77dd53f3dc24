/* pmix_abi.h - the few OpenPMIx v5 types the test programs pass to the
 * libpmix that libmpi.so.40 brings in, declared as that library lays them
 * out on LP64 (no pmix.h is needed to build against the wheel). */
#ifndef PMIX_ABI_H
#define PMIX_ABI_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    char nspace[256];
    uint32_t rank;
} pmix_proc_t;
typedef struct {
    uint16_t type;
    union {
        uint64_t u64;
        void *ptr;
        char *string;
        char pad[24];
    } data;
} pmix_value_t;

/* A PMIx function of the libpmix already loaded; exit 2 if there is none. */
static inline void *pmix_fn(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    if (!f) {
        fprintf(stderr, "no %s: %s\n", name, dlerror());
        exit(2);
    }
    return f;
}

#endif
