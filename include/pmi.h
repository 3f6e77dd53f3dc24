/*
 * pmi.h - the PMI-1 client API of dpm's libpmi (client/pmi1.c).
 *
 * The same constants, types and prototypes as MPICH's pmi.h, so a program
 * written for MPICH's PMI-1 interface builds and links against
 * target/client/lib/libpmi.so (soname libpmi.so.0) unchanged. The library
 * speaks PMI-1 on the wire (`cmd=... key=value` lines), so it works under
 * dpm and under MPICH's Hydra alike.
 *
 * Environment read by PMI_Init: PMI_FD with PMI_RANK, PMI_SIZE and
 * PMI_SPAWNED (socket mode), or PMI_PORT=host:port with PMI_ID (port mode).
 * Without PMI_FD and PMI_PORT the process is a singleton: size 1, rank 0,
 * and the key-value store and the names live in the process itself.
 *
 * All calls are thread safe: one lock serialises the requests. PMI-1 has
 * no escaping, so keys and values cannot contain spaces or newlines, and
 * keys cannot contain '='; such arguments are refused before anything is
 * sent.
 */
#ifndef PMI_H_INCLUDED
#define PMI_H_INCLUDED

#if defined(__cplusplus)
extern "C" {
#endif

#define PMI_VERSION    1
#define PMI_SUBVERSION 1

/* The longest port name PMI_Lookup_name writes, with its NUL. */
#define PMI_MAX_PORT_NAME 1024

/* Return codes. */
#define PMI_SUCCESS                  0   /* done */
#define PMI_FAIL                    -1   /* the server refused, or the connection failed */
#define PMI_ERR_INIT                 1   /* PMI_Init was not called, or failed */
#define PMI_ERR_NOMEM                2   /* an output buffer is too small */
#define PMI_ERR_INVALID_ARG          3   /* a NULL pointer or a bad argument */
#define PMI_ERR_INVALID_KEY          4   /* a key with a space, '=' or newline, or empty */
#define PMI_ERR_INVALID_KEY_LENGTH   5   /* a key longer than the server's maximum */
#define PMI_ERR_INVALID_VAL          6   /* a value with a space or newline, or empty */
#define PMI_ERR_INVALID_VAL_LENGTH   7   /* a value longer than the server's maximum */
#define PMI_ERR_INVALID_LENGTH       8   /* a negative or zero buffer length */
#define PMI_ERR_INVALID_NUM_ARGS     9
#define PMI_ERR_INVALID_ARGS        10
#define PMI_ERR_INVALID_NUM_PARSED  11
#define PMI_ERR_INVALID_KEYVALP     12
#define PMI_ERR_INVALID_SIZE        13

typedef int PMI_BOOL;
#define PMI_TRUE  1
#define PMI_FALSE 0

/* Connect to the process manager (or become a singleton); *spawned is
 * PMI_TRUE when this job was created by PMI_Spawn_multiple. Calling it
 * again before PMI_Finalize returns the same answers. */
int PMI_Init(int *spawned);

/* *initialized = PMI_TRUE between a successful PMI_Init and PMI_Finalize. */
int PMI_Initialized(int *initialized);

/* Tell the process manager this process is done with PMI. As in MPICH,
 * the connection stays open: a later PMI_Init runs the handshake on it
 * again, which dpm accepts (Hydra closes its end at finalize). */
int PMI_Finalize(void);

/* Job size, this process's rank, the universe size (-1: unknown), and the
 * application number (the index of the program in an MPMD command line). */
int PMI_Get_size(int *size);
int PMI_Get_rank(int *rank);
int PMI_Get_universe_size(int *size);
int PMI_Get_appnum(int *appnum);

/* The processes of this job on this node ("clique"), from the process
 * manager's PMI_process_mapping; just this process when it has none.
 * PMI_Get_clique_ranks fills at most length ranks, in increasing order. */
int PMI_Get_clique_size(int *size);
int PMI_Get_clique_ranks(int ranks[], int length);

/* Name service shared by every job of the run. port of PMI_Lookup_name
 * must hold PMI_MAX_PORT_NAME bytes. Publishing a name twice, looking up
 * or unpublishing an unknown one return PMI_FAIL. */
int PMI_Publish_name(const char service_name[], const char port[]);
int PMI_Unpublish_name(const char service_name[]);
int PMI_Lookup_name(const char service_name[], char port[]);

/* Collective over the job: returns when every process has called it;
 * puts made before it are visible to gets after it. */
int PMI_Barrier(void);

/* Ask the process manager to end the job with exit_code, showing
 * error_msg; then exit(exit_code). Does not return. */
int PMI_Abort(int exit_code, const char error_msg[]);

/* The name of this job's key-value store, and the buffer sizes (with the
 * NUL) a kvsname, key and value need. */
int PMI_KVS_Get_my_name(char kvsname[], int length);
int PMI_KVS_Get_name_length_max(int *length);
int PMI_KVS_Get_key_length_max(int *length);
int PMI_KVS_Get_value_length_max(int *length);

/* Put a key into a store; others see it after the next PMI_Barrier.
 * Puts are sent at once, so PMI_KVS_Commit has nothing left to do. */
int PMI_KVS_Put(const char kvsname[], const char key[], const char value[]);
int PMI_KVS_Commit(const char kvsname[]);

/* Read a key into value (length bytes). A key that is not visible returns
 * PMI_FAIL; one too long for the buffer PMI_ERR_NOMEM. */
int PMI_KVS_Get(const char kvsname[], const char key[], char value[], int length);

/* One key-value pair of PMI_Spawn_multiple's info and preput vectors. */
typedef struct PMI_keyval_t {
    const char *key;
    const char *val;
} PMI_keyval_t;

/* Start count commands as one new job: cmds[i] runs maxprocs[i] times
 * with the NULL-terminated arguments argvs[i] (without the program name)
 * and the info_keyval_sizesp[i] entries of info_keyval_vectors[i]. The
 * preput pairs are in the new job's store before it starts. errors[]
 * receives one code per started process (sum of maxprocs entries). */
int PMI_Spawn_multiple(int count,
                       const char *cmds[],
                       const char **argvs[],
                       const int maxprocs[],
                       const int info_keyval_sizesp[],
                       const PMI_keyval_t *info_keyval_vectors[],
                       int preput_keyval_size,
                       const PMI_keyval_t preput_keyval_vector[],
                       int errors[]);

/* dpm extension: "dpm libpmi <version>". */
#define DPM_PMI_EXTENSIONS 1
const char *dpm_pmi_library_version(void);

#if defined(__cplusplus)
}
#endif

#endif /* PMI_H_INCLUDED */
