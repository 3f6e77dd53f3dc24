/*
 * pmi2.h - the PMI-2 client API of dpm's libpmi2 (client/pmi2.c).
 *
 * Binary compatible with Slurm's libpmi2.so.0: the same error codes,
 * limits, structure layouts and prototypes, so a program built against
 * Slurm's header and library runs unchanged against dpm's library
 * (LD_LIBRARY_PATH=target/client/lib), and a program built against this
 * header runs against Slurm's library as long as it leaves out the dpm
 * extensions at the end of this file (test for DPM_PMI2_EXTENSIONS).
 *
 * Environment read by PMI2_Init: PMI_FD (an inherited socket) or
 * PMI_PORT=host:port, plus PMI_ID or PMI_RANK and PMI_JOBID. Without
 * PMI_FD and PMI_PORT the process is a singleton: size 1, rank 0, and the
 * key-value store, node attributes and names live in the process itself.
 *
 * All calls are thread safe: one lock serialises the requests, so the
 * wire always carries one request at a time (a waiting call holds it).
 * Values cannot contain ';' (the PMI-2 separator) and keys cannot contain
 * ';' or '='; such arguments are refused before anything is sent.
 */
#ifndef PMI2_H_INCLUDED
#define PMI2_H_INCLUDED

#if defined(__cplusplus)
extern "C" {
#endif

/* Limits: the longest key and value (without the NUL) the library sends or
 * accepts, and the value of "no source id" for PMI2_KVS_Get. */
#define PMI2_MAX_KEYLEN 64
#define PMI2_MAX_VALLEN 1024
#define PMI2_MAX_ATTRVALUE 1024
#define PMI2_ID_NULL -1

/* Return codes. */
#define PMI2_SUCCESS                0   /* done */
#define PMI2_FAIL                   -1  /* the connection failed (closed, I/O error, garbled reply) */
#define PMI2_ERR_INIT               1   /* PMI2_Init was not called, or failed */
#define PMI2_ERR_NOMEM              2   /* an output buffer (or the library's) is too small */
#define PMI2_ERR_INVALID_ARG        3   /* a NULL pointer or a bad flag */
#define PMI2_ERR_INVALID_KEY        4   /* a key with ';' or '=', or empty */
#define PMI2_ERR_INVALID_KEY_LENGTH 5   /* a key longer than PMI2_MAX_KEYLEN */
#define PMI2_ERR_INVALID_VAL        6   /* a value with ';' */
#define PMI2_ERR_INVALID_VAL_LENGTH 7   /* a value longer than PMI2_MAX_VALLEN */
#define PMI2_ERR_INVALID_LENGTH     8   /* a negative or zero buffer length */
#define PMI2_ERR_INVALID_NUM_ARGS   9
#define PMI2_ERR_INVALID_ARGS       10
#define PMI2_ERR_INVALID_NUM_PARSED 11
#define PMI2_ERR_INVALID_KEYVALP    12
#define PMI2_ERR_INVALID_SIZE       13
#define PMI2_ERR_OTHER              14  /* the server refused the request (rc != 0), or it is not supported */

/* Callbacks for PMI2_Job_Connect (kept for the layout; dpm does not
 * implement job connection). */
typedef struct PMI2_Connect_comm {
    int (*read)(void *buf, int maxlen, void *ctx);
    int (*write)(const void *buf, int len, void *ctx);
    void *ctx;
    int isMaster;
} PMI2_Connect_comm_t;

/* One info entry, laid out as MPICH's MPID_Info. The library reads only
 * key and value: spawn's info and preput vectors are arrays of these. */
typedef struct MPID_Info {
    int handle;
    int pobj_mutex;
    int ref_count;
    struct MPID_Info *next;
    char *key;
    char *value;
} MPID_Info;

#define PMI2U_Info MPID_Info

/* Connect to the process manager (or become a singleton). Outputs: whether
 * this process was created by a spawn, the job size, this process's rank,
 * its application number. Calling it again before PMI2_Finalize returns
 * the same values. */
int PMI2_Init(int *spawned, int *size, int *rank, int *appnum);

/* Tell the process manager this process is done with PMI and close the
 * connection. The process manager treats an exit without it as a failure. */
int PMI2_Finalize(void);

/* 1 between a successful PMI2_Init and PMI2_Finalize, else 0. */
int PMI2_Initialized(void);

/* Ask the process manager to end the job (flag != 0: the whole job), with
 * msg shown to the user, then exit(1). Does not return. */
int PMI2_Abort(int flag, const char msg[]);

/* Start count commands as one new job. cmds[i] runs maxprocs[i] times with
 * the argcs[i] arguments argvs[i] (without the program name) and the
 * info_keyval_sizes[i] info entries of the array info_keyval_vectors[i].
 * preput_keyval_vector holds preput_keyval_size pointers to entries put in
 * the new job's key-value store before it starts. On success jobId holds
 * the new job's id and errors[] one code per started process (0 each). */
int PMI2_Job_Spawn(int count, const char *cmds[],
                   int argcs[], const char **argvs[],
                   const int maxprocs[],
                   const int info_keyval_sizes[],
                   const struct MPID_Info *info_keyval_vectors[],
                   int preput_keyval_size,
                   const struct MPID_Info *preput_keyval_vector[],
                   char jobId[], int jobIdSize,
                   int errors[]);

/* This job's id: the name its key-value store goes by. */
int PMI2_Job_GetId(char jobid[], int jobid_size);

/* This process's rank, and the job size, as PMI2_Init returned them. */
int PMI2_Job_GetRank(int *rank);
int PMI2_Info_GetSize(int *size);

/* Connecting to another job is not supported: both return PMI2_ERR_OTHER
 * without talking to the server (some servers never answer them). */
int PMI2_Job_Connect(const char jobid[], PMI2_Connect_comm_t *conn);
int PMI2_Job_Disconnect(const char jobid[]);

/* Ring exchange, collective over the job (Slurm's spelling): every process
 * gives a value and gets its ring rank, the number of processes and the
 * values of its left and right neighbours (buffers of maxvalue bytes). */
int PMIX_Ring(const char value[], int *rank, int *ranks, char left[], char right[], int maxvalue);

/* Put a key into this job's key-value store; other processes see it after
 * the next PMI2_KVS_Fence. A later put of the same key wins. */
int PMI2_KVS_Put(const char key[], const char value[]);

/* Collective over the job: returns when every process has called it, and
 * every put made before it is visible to every get after it. */
int PMI2_KVS_Fence(void);

/* Read key from job jobid (NULL: this job). src_pmi_id is the rank that
 * put it, or PMI2_ID_NULL; a hint only. On success value holds the value
 * and *vallen its length, or minus its length when it did not fit in
 * maxvalue bytes (value then holds the truncated start). A key that is
 * not visible is an error (PMI2_ERR_OTHER). */
int PMI2_KVS_Get(const char *jobid, int src_pmi_id, const char key[], char value[], int maxvalue, int *vallen);

/* Node attributes: a store shared by this job's processes on this node.
 * GetNodeAttr sets *found; with waitfor != 0 it blocks until some process
 * of the node puts the attribute. The IntArray form parses a
 * comma-separated list of integers into at most arraylen entries. */
int PMI2_Info_GetNodeAttr(const char name[], char value[], int valuelen, int *found, int waitfor);
int PMI2_Info_GetNodeAttrIntArray(const char name[], int array[], int arraylen, int *outlen, int *found);
int PMI2_Info_PutNodeAttr(const char name[], const char value[]);

/* Job attributes provided by the process manager (PMI_process_mapping,
 * universeSize, ...). *found is 0 for an attribute it does not have. */
int PMI2_Info_GetJobAttr(const char name[], char value[], int valuelen, int *found);
int PMI2_Info_GetJobAttrIntArray(const char name[], int array[], int arraylen, int *outlen, int *found);

/* Name service, shared by every job of the run (MPI_Publish_name and
 * friends). info_ptr is ignored. Publishing a name twice, looking up or
 * unpublishing an unknown one are errors (PMI2_ERR_OTHER). */
int PMI2_Nameserv_publish(const char service_name[], const struct MPID_Info *info_ptr, const char port[]);
int PMI2_Nameserv_lookup(const char service_name[], const struct MPID_Info *info_ptr,
                         char port[], int portLen);
int PMI2_Nameserv_unpublish(const char service_name[], const struct MPID_Info *info_ptr);

/*
 * dpm extensions (docs/pmi-extensions.md, paper 004). They need a server
 * that knows them: against one that does not, they return PMI2_ERR_OTHER.
 */
#define DPM_PMI2_EXTENSIONS 1

/* How a key will be read, for PMI2_KVS_PutHint. */
#define PMI2_HINT_NONE   0  /* unknown: the same as PMI2_KVS_Put */
#define PMI2_HINT_SPARSE 1  /* read by a few processes: may stay where it was put */
#define PMI2_HINT_DENSE  2  /* read by (nearly) every process: may be broadcast at the fence */

/* PMI2_KVS_Put with a hint; any other hint value is PMI2_ERR_INVALID_ARG. */
int PMI2_KVS_PutHint(const char key[], const char value[], int hint);

/* PMI2_KVS_Get that waits: if the key was not put yet, the call blocks
 * until it is. No fence is needed between the put and this get. */
int PMI2_KVS_GetWait(const char *jobid, int src_pmi_id, const char key[], char value[], int maxvalue, int *vallen);

/* Ring exchange (PMIX_Ring) returning the ring rank and size as the
 * server reports them. The ring rank may differ from the PMI rank. */
int PMI2_KVS_Ring(const char value[], int *ring_rank, int *ring_size, char left[], char right[], int maxvalue);

/* "dpm libpmi2 <version>": lets a program (or a test, by dlsym) check
 * which libpmi2 it was loaded with. */
const char *dpm_pmi2_library_version(void);

#if defined(__cplusplus)
}
#endif

#endif /* PMI2_H_INCLUDED */
