/*
 * onesided.c: one-sided communication (paper 003 §4), two processes (-n 2).
 *
 * Transfers and synchronisations:
 *   op    put (MPI_Put, MPI_BYTE), get (MPI_Get), acc (MPI_Accumulate,
 *         MPI_INT with MPI_SUM; sizes below 4 bytes are skipped);
 *   sync  fence     MPI_Win_fence(0) around the operation, both ranks;
 *         pscw      MPI_Win_start/complete at the origin, post/wait at the target;
 *         lock      MPI_Win_lock(EXCLUSIVE)/unlock at the origin only;
 *         lockall   MPI_Win_lock_all once, then operation + MPI_Win_flush;
 *         sendrecv  the two-sided baseline: MPI_Send/MPI_Recv ping-pong;
 *   mem   malloc    window memory from malloc, MPI_Win_create;
 *         allocmem  from MPI_Alloc_mem, MPI_Win_create;
 *         winalloc  MPI_Win_allocate (the origin buffer: MPI_Alloc_mem).
 * Active-target syncs (fence, pscw) are timed as paper 003 does: a ping-pong
 * where rank 0 opens an epoch, transfers, closes it, then rank 1 does the
 * same towards rank 0; the time of one direction (half the round) is
 * recorded. Passive-target syncs (lock, lockall) time the origin's epoch
 * (lock+op+unlock, or op+flush), while the target waits in MPI_Barrier.
 *
 * Tests (records in µs, with bandwidth):
 *   sync      paper 003 Table 2: one --sync-size (4) byte put with every sync
 *             and every mem: the synchronisation cost.
 *   rma       latency/bandwidth curves over the size schedule for every
 *             combination of --ops, --syncs and --mems.
 *   dtype     put (fence) and send/recv of derived datatypes on both sides:
 *             contig (MPI_BYTE), vector (every other double), indexed (blocks
 *             of 1..4 doubles separated by one double); size = payload bytes.
 *   multi     the same bytes in --nputs puts of size/n bytes vs one put
 *             (sync --multi-sync, pscw as in paper 003 Fig. 11).
 *   overlap   can the target compute while the origin transfers? (paper 003
 *             §4.6, after mpptest): measures the epoch alone (comm), calibrates
 *             a computation on the target that takes as long, then runs both
 *             at once (both). Record: "both" times, extra comm_us, compute_us,
 *             ratio = both/comm (about 1: overlap; about 2: none) and overlap =
 *             (comm + compute - both) / min(comm, compute), clamped to 0..1.
 *   wincreate window creation and free cost: MPI_Win_create (malloc and
 *             MPI_Alloc_mem memory), MPI_Win_allocate, MPI_Win_create_dynamic
 *             + MPI_Win_attach, MPI_Win_allocate_shared; and the allocation
 *             itself (malloc vs MPI_Alloc_mem): records win_create, win_free,
 *             mem_alloc (variant kind=... bytes=...).
 *
 * --check: before each timed point, one transfer of a known pattern with
 * the same op, sync and memory is verified at the target (put, acc) or the
 * origin (get); derived datatypes are verified byte by byte, including the
 * gaps they must not touch.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

enum op_kind { OP_PUT, OP_GET, OP_ACC, OP_SEND };
enum sync_kind { SYNC_FENCE, SYNC_PSCW, SYNC_LOCK, SYNC_LOCKALL, SYNC_SENDRECV };
enum mem_kind { MEM_MALLOC, MEM_ALLOCMEM, MEM_WINALLOC };

static const char *const op_names[] = {"put", "get", "acc", "send"};
static const char *const sync_names[] = {"fence", "pscw", "lock", "lockall", "sendrecv"};
static const char *const mem_names[] = {"malloc", "allocmem", "winalloc"};

static const bench_option options[] = {
    {"ops", "put,get,acc", NULL, "rma: operations (put,get,acc)"},
    {"syncs", "sendrecv,fence,pscw,lock,lockall", NULL,
     "rma: synchronisations (sendrecv,fence,pscw,lock,lockall)"},
    {"mems", "malloc", NULL, "rma: window memory (malloc,allocmem,winalloc)"},
    {"sync-size", "4", NULL, "sync: bytes per put"},
    {"nputs", "1,4,16,64", "1,4", "multi: numbers of puts per transfer"},
    {"multi-sync", "pscw", NULL, "multi: synchronisation"},
    {"dtype-sync", "fence", NULL, "dtype: synchronisation of the put"},
    {"overlap-syncs", "fence,lock", NULL, "overlap: synchronisations"},
    {"overlap-min", "1024", NULL, "overlap: smallest size measured"},
    {"win-kinds", "create,allocmem,allocate,dynamic,shared", NULL,
     "wincreate: window kinds"},
    {"win-sizes", "4096,1048576,16777216", "4096", "wincreate: window sizes (bytes)"},
    {"win-iters", "20", "3", "wincreate: creations per point"},
    {NULL, NULL, NULL, NULL},
};

static int name_find(const char *const *names, int count, const char *name, const char *what)
{
    for (int i = 0; i < count; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    bench_fail("unknown %s '%s'", what, name);
}

/* ---- windows ------------------------------------------------------------------ */

typedef struct {
    enum mem_kind mem;
    MPI_Win win;
    char *base;                 /* window memory */
    char *origin;               /* origin buffer, as large */
    long bytes;
    int peer, rank;
    int separate;               /* MPI_WIN_SEPARATE memory model */
    MPI_Group peer_group;
    int lockall_open;
} rma_window;

static void window_open(rma_window *w, enum mem_kind mem, long bytes)
{
    MPI_Group world_group;
    int *model = NULL, flag = 0;

    memset(w, 0, sizeof *w);
    w->mem = mem;
    w->bytes = bytes < 8 ? 8 : bytes;
    MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
    w->peer = 1 - w->rank;
    if (mem == MEM_MALLOC) {
        w->base = malloc((size_t)w->bytes);
        w->origin = malloc((size_t)w->bytes);
        if (!w->base || !w->origin)
            bench_fail("malloc of %ld bytes failed", w->bytes);
    } else {
        mpi_check(MPI_Alloc_mem(w->bytes, MPI_INFO_NULL, &w->origin), "MPI_Alloc_mem");
        if (mem == MEM_ALLOCMEM)
            mpi_check(MPI_Alloc_mem(w->bytes, MPI_INFO_NULL, &w->base), "MPI_Alloc_mem");
    }
    if (mem == MEM_WINALLOC)
        mpi_check(MPI_Win_allocate(w->bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &w->base,
                                   &w->win), "MPI_Win_allocate");
    else
        mpi_check(MPI_Win_create(w->base, w->bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &w->win),
                  "MPI_Win_create");
    MPI_Win_set_errhandler(w->win, MPI_ERRORS_RETURN);
    memset(w->base, 0, (size_t)w->bytes);
    memset(w->origin, 0, (size_t)w->bytes);
    MPI_Win_get_attr(w->win, MPI_WIN_MODEL, &model, &flag);
    w->separate = flag && *model == MPI_WIN_SEPARATE;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, 1, &w->peer, &w->peer_group);
    MPI_Group_free(&world_group);
    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

static void window_close(rma_window *w)
{
    mpi_check(MPI_Win_free(&w->win), "MPI_Win_free");
    MPI_Group_free(&w->peer_group);
    if (w->mem == MEM_MALLOC) {
        free(w->base);
        free(w->origin);
    } else {
        MPI_Free_mem(w->origin);
        if (w->mem == MEM_ALLOCMEM)
            MPI_Free_mem(w->base);
    }
}

/* ---- one transfer ----------------------------------------------------------------- */

/* A transfer: `bytes` bytes as count elements of type, at both sides, or
 * nputs contiguous pieces. */
typedef struct {
    enum op_kind op;
    long bytes;
    MPI_Datatype type;          /* MPI_DATATYPE_NULL: contiguous */
    int nputs;
} transfer;

static void ops_issue(rma_window *w, const transfer *x)
{
    if (x->type != MPI_DATATYPE_NULL) {
        if (x->op != OP_PUT)
            bench_fail("internal: datatypes are only put");
        mpi_check(MPI_Put(w->origin, 1, x->type, w->peer, 0, 1, x->type, w->win), "MPI_Put");
        return;
    }
    switch (x->op) {
    case OP_PUT: {
        long chunk = x->bytes / x->nputs;

        for (int i = 0; i < x->nputs; i++) {
            long off = chunk * i, len = i == x->nputs - 1 ? x->bytes - off : chunk;

            mpi_check(MPI_Put(w->origin + off, (int)len, MPI_BYTE, w->peer, off, (int)len,
                              MPI_BYTE, w->win), "MPI_Put");
        }
        break;
    }
    case OP_GET:
        mpi_check(MPI_Get(w->origin, (int)x->bytes, MPI_BYTE, w->peer, 0, (int)x->bytes,
                          MPI_BYTE, w->win), "MPI_Get");
        break;
    case OP_ACC:
        mpi_check(MPI_Accumulate(w->origin, (int)(x->bytes / 4), MPI_INT, w->peer, 0,
                                 (int)(x->bytes / 4), MPI_INT, MPI_SUM, w->win),
                  "MPI_Accumulate");
        break;
    case OP_SEND:
        bench_fail("internal: send is not an RMA operation");
    }
}

/* One epoch in which `active` is the origin (active-target syncs: both
 * ranks call it; passive: only the origin). */
static void epoch_run(rma_window *w, enum sync_kind sync, const transfer *x, int active)
{
    int me_active = w->rank == active;

    switch (sync) {
    case SYNC_FENCE:
        mpi_check(MPI_Win_fence(0, w->win), "MPI_Win_fence");
        if (me_active)
            ops_issue(w, x);
        mpi_check(MPI_Win_fence(0, w->win), "MPI_Win_fence");
        break;
    case SYNC_PSCW:
        if (me_active) {
            mpi_check(MPI_Win_start(w->peer_group, 0, w->win), "MPI_Win_start");
            ops_issue(w, x);
            mpi_check(MPI_Win_complete(w->win), "MPI_Win_complete");
        } else {
            mpi_check(MPI_Win_post(w->peer_group, 0, w->win), "MPI_Win_post");
            mpi_check(MPI_Win_wait(w->win), "MPI_Win_wait");
        }
        break;
    case SYNC_LOCK:
        mpi_check(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, w->peer, 0, w->win), "MPI_Win_lock");
        ops_issue(w, x);
        mpi_check(MPI_Win_unlock(w->peer, w->win), "MPI_Win_unlock");
        break;
    case SYNC_LOCKALL:
        if (!w->lockall_open)
            bench_fail("internal: lockall epoch not open");
        ops_issue(w, x);
        mpi_check(MPI_Win_flush(w->peer, w->win), "MPI_Win_flush");
        break;
    case SYNC_SENDRECV:
        bench_fail("internal: sendrecv has no epoch");
    }
}

static int sync_passive(enum sync_kind sync)
{
    return sync == SYNC_LOCK || sync == SYNC_LOCKALL;
}

static void lockall_begin(rma_window *w, enum sync_kind sync)
{
    if (sync == SYNC_LOCKALL && w->rank == 0 && !w->lockall_open) {
        mpi_check(MPI_Win_lock_all(0, w->win), "MPI_Win_lock_all");
        w->lockall_open = 1;
    }
}

static void lockall_end(rma_window *w)
{
    if (w->lockall_open) {
        mpi_check(MPI_Win_unlock_all(w->win), "MPI_Win_unlock_all");
        w->lockall_open = 0;
    }
}

/* Local access to window memory around a passive-target transfer: in the
 * separate memory model it needs a lock on one's own window. */
static void local_begin(rma_window *w, enum sync_kind sync)
{
    if (w->separate && sync_passive(sync))
        mpi_check(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, w->rank, 0, w->win), "MPI_Win_lock (self)");
}

static void local_end(rma_window *w, enum sync_kind sync)
{
    if (w->separate && sync_passive(sync))
        mpi_check(MPI_Win_unlock(w->rank, w->win), "MPI_Win_unlock (self)");
}

/* ---- --check ------------------------------------------------------------------------ */

/* Mask of the bytes a datatype covers (0xff) in a buffer of `bytes`. */
static void type_mask(MPI_Datatype type, char *mask, long bytes)
{
    int packed = 0, pos = 0;
    char *ones;

    MPI_Pack_size(1, type, MPI_COMM_WORLD, &packed);
    ones = malloc((size_t)packed);
    memset(ones, 0xff, (size_t)packed);
    memset(mask, 0, (size_t)bytes);
    mpi_check(MPI_Unpack(ones, packed, &pos, mask, 1, type, MPI_COMM_WORLD), "MPI_Unpack");
    free(ones);
}

/* One transfer from rank 0 to rank 1 of a known pattern, verified. */
static void transfer_check(rma_window *w, enum sync_kind sync, const transfer *x, unsigned seed,
                           const char *what)
{
    long span = x->bytes;
    int origin = w->rank == 0;

    if (x->type != MPI_DATATYPE_NULL) {
        MPI_Aint lb, extent;

        MPI_Type_get_extent(x->type, &lb, &extent);
        span = (long)(lb + extent);
    }
    /* prepare */
    local_begin(w, sync);
    if (origin) {
        if (x->op == OP_GET)
            memset(w->origin, 0, (size_t)span);
        else if (x->op == OP_ACC)
            for (long i = 0; i < x->bytes / 4; i++)
                ((int *)w->origin)[i] = (int)(seed % 1000 + i);
        else
            pattern_fill(w->origin, span, seed);
    } else {
        if (x->op == OP_GET)
            pattern_fill(w->base, span, seed);
        else if (x->op == OP_ACC)
            for (long i = 0; i < x->bytes / 4; i++)
                ((int *)w->base)[i] = (int)i;
        else
            memset(w->base, 0, (size_t)span);
    }
    local_end(w, sync);
    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");

    /* transfer, rank 0 active */
    if (sync_passive(sync)) {
        if (origin) {
            lockall_begin(w, sync);
            epoch_run(w, sync, x, 0);
            lockall_end(w);
        }
        mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    } else {
        epoch_run(w, sync, x, 0);
    }

    /* verify */
    local_begin(w, sync);
    if (origin && x->op == OP_GET) {
        long bad = pattern_verify(w->origin, x->bytes, seed);

        if (bad >= 0)
            bench_fail("check: %s: got byte %ld wrong", what, bad);
    } else if (!origin && x->op == OP_ACC) {
        for (long i = 0; i < x->bytes / 4; i++)
            if (((int *)w->base)[i] != (int)(i + seed % 1000 + i))
                bench_fail("check: %s: accumulated int %ld is %d, expected %d", what, i,
                           ((int *)w->base)[i], (int)(i + seed % 1000 + i));
    } else if (!origin && x->op == OP_PUT && x->type == MPI_DATATYPE_NULL) {
        long bad = pattern_verify(w->base, x->bytes, seed);

        if (bad >= 0)
            bench_fail("check: %s: byte %ld put wrong", what, bad);
    } else if (!origin && x->op == OP_PUT) {
        char *mask = malloc((size_t)span), *want = malloc((size_t)span);

        type_mask(x->type, mask, span);
        pattern_fill(want, span, seed);
        for (long i = 0; i < span; i++) {
            char expect = mask[i] ? want[i] : 0;

            if (w->base[i] != expect)
                bench_fail("check: %s: byte %ld is %d, expected %d (%s)", what, i, w->base[i],
                           expect, mask[i] ? "data" : "a gap the datatype must not touch");
        }
        free(mask);
        free(want);
    }
    local_end(w, sync);
    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

/* ---- timing ----------------------------------------------------------------------------- */

/* Two-sided ping-pong with the window's buffers (datatype or bytes). */
static double sendrecv_once(rma_window *w, const transfer *x)
{
    MPI_Datatype type = x->type != MPI_DATATYPE_NULL ? x->type : MPI_BYTE;
    int count = x->type != MPI_DATATYPE_NULL ? 1 : (int)x->bytes;
    double t = MPI_Wtime();

    if (w->rank == 0) {
        mpi_check(MPI_Send(w->origin, count, type, 1, 21, MPI_COMM_WORLD), "MPI_Send");
        mpi_check(MPI_Recv(w->base, count, type, 1, 22, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                  "MPI_Recv");
    } else {
        mpi_check(MPI_Recv(w->base, count, type, 0, 21, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                  "MPI_Recv");
        mpi_check(MPI_Send(w->origin, count, type, 0, 22, MPI_COMM_WORLD), "MPI_Send");
    }
    return (MPI_Wtime() - t) / 2;
}

/*
 * Time `iters` transfers (after b->warmup untimed ones) on rank 0; returns
 * the samples (seconds per one-directional transfer), valid on rank 0.
 */
static void transfer_time(bench *b, rma_window *w, enum sync_kind sync, const transfer *x,
                          double *samples, int iters)
{
    int total = b->warmup + iters;

    if (sync == SYNC_SENDRECV) {
        for (int i = 0; i < total; i++) {
            double t = sendrecv_once(w, x);

            if (i >= b->warmup)
                samples[i - b->warmup] = t;
        }
    } else if (sync_passive(sync)) {
        if (w->rank == 0) {
            lockall_begin(w, sync);
            for (int i = 0; i < total; i++) {
                double t = MPI_Wtime();

                epoch_run(w, sync, x, 0);
                if (i >= b->warmup)
                    samples[i - b->warmup] = MPI_Wtime() - t;
            }
            lockall_end(w);
        }
    } else {
        for (int i = 0; i < total; i++) {
            double t = MPI_Wtime();

            epoch_run(w, sync, x, 0);
            epoch_run(w, sync, x, 1);
            if (i >= b->warmup)
                samples[i - b->warmup] = (MPI_Wtime() - t) / 2;
        }
    }
    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

/* A latency/bandwidth curve over sizes for one op, sync and mem. */
static void curve_run(bench *b, const char *test, enum op_kind op, enum sync_kind sync,
                      enum mem_kind mem, const long *sizes, int nsizes)
{
    rma_window w;
    long max = 1;
    char variant[128];

    for (int s = 0; s < nsizes; s++)
        max = sizes[s] > max ? sizes[s] : max;
    window_open(&w, mem, max);
    snprintf(variant, sizeof variant, "op=%s sync=%s mem=%s", op_names[op], sync_names[sync],
             mem_names[mem]);
    for (int s = 0; s < nsizes; s++) {
        transfer x = {op, sizes[s], MPI_DATATYPE_NULL, 1};
        int iters = iters_for(b, sizes[s]);
        double *samples;

        if (op == OP_ACC && sizes[s] < 4)
            continue;
        if (op == OP_ACC)
            x.bytes = sizes[s] / 4 * 4;
        if (b->check && sync != SYNC_SENDRECV)
            transfer_check(&w, sync, &x, (unsigned)(sizes[s] + s), variant);
        samples = malloc((size_t)iters * sizeof *samples);
        transfer_time(b, &w, sync, &x, samples, iters);
        result_write(b, test, variant, x.bytes, 2, samples, iters, 1e6, "us", NULL);
        free(samples);
    }
    window_close(&w);
}

static void sync_run(bench *b)
{
    long size = option_long(b, "sync-size");

    for (int m = 0; m < 3; m++)
        for (int s = 0; s < 5; s++)
            curve_run(b, "sync", s == SYNC_SENDRECV ? OP_SEND : OP_PUT, (enum sync_kind)s,
                      (enum mem_kind)m, &size, 1);
}

static void rma_run(bench *b)
{
    char *ops[BENCH_MAX_LIST], *syncs[BENCH_MAX_LIST], *mems[BENCH_MAX_LIST];
    int nops = option_words(b, "ops", ops);
    int nsyncs = option_words(b, "syncs", syncs);
    int nmems = option_words(b, "mems", mems);

    for (int m = 0; m < nmems; m++) {
        enum mem_kind mem = name_find(mem_names, 3, mems[m], "memory");

        for (int s = 0; s < nsyncs; s++) {
            enum sync_kind sync = name_find(sync_names, 5, syncs[s], "sync");

            if (sync == SYNC_SENDRECV) {
                curve_run(b, "rma", OP_SEND, sync, mem, b->sizes, b->size_count);
                continue;
            }
            for (int o = 0; o < nops; o++)
                curve_run(b, "rma", name_find(op_names, 3, ops[o], "op"), sync, mem, b->sizes,
                          b->size_count);
        }
    }
}

/* ---- derived datatypes ------------------------------------------------------------------ */

/* n doubles: vector (every other double) or indexed (blocks of 1..4
 * doubles, one double apart). */
static MPI_Datatype dtype_make(const char *kind, long n)
{
    MPI_Datatype t;

    if (strcmp(kind, "vector") == 0) {
        mpi_check(MPI_Type_vector((int)n, 1, 2, MPI_DOUBLE, &t), "MPI_Type_vector");
    } else {
        int *lens = malloc((size_t)n * sizeof *lens), *disps = malloc((size_t)n * sizeof *disps);
        int blocks = 0, at = 0;

        for (long left = n; left > 0; blocks++) {
            int len = 1 + blocks % 4;

            len = len > left ? (int)left : len;
            lens[blocks] = len;
            disps[blocks] = at;
            at += len + 1;
            left -= len;
        }
        mpi_check(MPI_Type_indexed(blocks, lens, disps, MPI_DOUBLE, &t), "MPI_Type_indexed");
        free(lens);
        free(disps);
    }
    mpi_check(MPI_Type_commit(&t), "MPI_Type_commit");
    return t;
}

static void dtype_run(bench *b)
{
    static const char *const kinds[] = {"contig", "vector", "indexed"};
    enum sync_kind sync = name_find(sync_names, 5, option_get(b, "dtype-sync"), "sync");
    rma_window w;

    if (sync == SYNC_SENDRECV)
        bench_fail("--dtype-sync must be a one-sided synchronisation");
    window_open(&w, MEM_MALLOC, 2 * b->max_size + 64);
    for (int xfer = 0; xfer < 2; xfer++) {
        for (int k = 0; k < 3; k++) {
            char variant[96];

            snprintf(variant, sizeof variant, "xfer=%s dtype=%s sync=%s",
                     xfer ? "sendrecv" : "put", kinds[k], xfer ? "sendrecv" : sync_names[sync]);
            for (int s = 0; s < b->size_count; s++) {
                long bytes = b->sizes[s] / 8 * 8;
                int iters = iters_for(b, bytes);
                transfer x = {OP_PUT, bytes, MPI_DATATYPE_NULL, 1};
                double *samples;

                if (bytes < 8 || (s > 0 && b->sizes[s - 1] / 8 * 8 == bytes))
                    continue;
                if (k > 0)
                    x.type = dtype_make(kinds[k], bytes / 8);
                if (b->check && !xfer)
                    transfer_check(&w, sync, &x, (unsigned)(bytes + k), variant);
                samples = malloc((size_t)iters * sizeof *samples);
                transfer_time(b, &w, xfer ? SYNC_SENDRECV : sync, &x, samples, iters);
                result_write(b, "dtype", variant, bytes, 2, samples, iters, 1e6, "us", NULL);
                free(samples);
                if (x.type != MPI_DATATYPE_NULL)
                    MPI_Type_free(&x.type);
            }
        }
    }
    window_close(&w);
}

/* ---- n puts vs one ---------------------------------------------------------------------- */

static void multi_run(bench *b)
{
    long nputs[BENCH_MAX_LIST];
    int count = option_longs(b, "nputs", nputs);
    enum sync_kind sync = name_find(sync_names, 5, option_get(b, "multi-sync"), "sync");
    rma_window w;

    if (sync == SYNC_SENDRECV)
        bench_fail("--multi-sync must be a one-sided synchronisation");
    window_open(&w, MEM_MALLOC, b->max_size);
    for (int n = 0; n < count; n++) {
        char variant[64];

        if (nputs[n] < 1)
            bench_fail("--nputs must be positive");
        snprintf(variant, sizeof variant, "nputs=%ld sync=%s", nputs[n], sync_names[sync]);
        for (int s = 0; s < b->size_count; s++) {
            transfer x = {OP_PUT, b->sizes[s], MPI_DATATYPE_NULL, (int)nputs[n]};
            int iters = iters_for(b, b->sizes[s]);
            double *samples;

            if (b->sizes[s] < nputs[n])
                continue;
            if (b->check)
                transfer_check(&w, sync, &x, (unsigned)(b->sizes[s] * 3 + n), variant);
            samples = malloc((size_t)iters * sizeof *samples);
            transfer_time(b, &w, sync, &x, samples, iters);
            result_write(b, "multi", variant, b->sizes[s], 2, samples, iters, 1e6, "us", NULL);
            free(samples);
        }
    }
    window_close(&w);
}

/* ---- overlap ------------------------------------------------------------------------------ */

static volatile double compute_sink;

static void compute(long work)
{
    double x = 1.0;

    for (long i = 0; i < work; i++)
        x = x * 1.0000001 + 1e-9;
    compute_sink += x;
}

/* Work units that take about `seconds` on this process. */
static long compute_calibrate(double seconds)
{
    long work = 1000;
    double t;

    for (;;) {
        t = MPI_Wtime();
        compute(work);
        t = MPI_Wtime() - t;
        if (t > 2e-3 || t > seconds || work > (1L << 40))
            break;
        work *= 2;
    }
    return t > 0 ? (long)((double)work * seconds / t) + 1 : work;
}

static double median_of(double *v, int n)
{
    bench_stats s;
    double *copy = malloc((size_t)n * sizeof *copy);

    memcpy(copy, v, (size_t)n * sizeof *copy);
    stats_compute(copy, n, &s);
    free(copy);
    return s.median;
}

/* Both ranks: one epoch, the target computing `work` units in it. Returns
 * the origin's epoch time (rank 0) or the computation's time (rank 1). */
static double overlap_epoch(rma_window *w, enum sync_kind sync, const transfer *x, long work)
{
    double t, tc = 0;

    if (sync == SYNC_FENCE) {
        t = MPI_Wtime();
        mpi_check(MPI_Win_fence(0, w->win), "MPI_Win_fence");
        if (w->rank == 0) {
            ops_issue(w, x);
        } else if (work > 0) {
            tc = MPI_Wtime();
            compute(work);
            tc = MPI_Wtime() - tc;
        }
        mpi_check(MPI_Win_fence(0, w->win), "MPI_Win_fence");
        return w->rank == 0 ? MPI_Wtime() - t : tc;
    }
    /* lock: the target computes outside MPI, then waits in a barrier */
    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    t = MPI_Wtime();
    if (w->rank == 0) {
        epoch_run(w, SYNC_LOCK, x, 0);
        t = MPI_Wtime() - t;
    } else if (work > 0) {
        compute(work);
        tc = MPI_Wtime() - t;
    }
    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    return w->rank == 0 ? t : tc;
}

static void overlap_run(bench *b)
{
    char *syncs[BENCH_MAX_LIST];
    int nsyncs = option_words(b, "overlap-syncs", syncs);
    long min = option_long(b, "overlap-min");
    rma_window w;

    window_open(&w, MEM_MALLOC, b->max_size);
    for (int k = 0; k < nsyncs; k++) {
        enum sync_kind sync = name_find(sync_names, 5, syncs[k], "sync");
        char variant[64];

        if (sync != SYNC_FENCE && sync != SYNC_LOCK)
            bench_fail("--overlap-syncs: fence or lock");
        snprintf(variant, sizeof variant, "sync=%s", sync_names[sync]);
        for (int s = 0; s < b->size_count; s++) {
            transfer x = {OP_PUT, b->sizes[s], MPI_DATATYPE_NULL, 1};
            int iters = iters_for(b, b->sizes[s]), total = b->warmup + iters;
            double *comm = calloc((size_t)iters, sizeof(double));
            double *both = calloc((size_t)iters, sizeof(double));
            double t_comm = 0, t_comp = 0, t_both, ratio, overlap;
            long work = 0;
            char extra[256];

            if (b->sizes[s] < min)
                continue;
            if (b->check)
                transfer_check(&w, sync, &x, (unsigned)(b->sizes[s] + 7), variant);
            for (int i = 0; i < total; i++) {
                double t = overlap_epoch(&w, sync, &x, 0);

                if (i >= b->warmup)
                    comm[i - b->warmup] = t;
            }
            if (w.rank == 0)
                t_comm = median_of(comm, iters);
            mpi_check(MPI_Bcast(&t_comm, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD), "MPI_Bcast");
            if (w.rank == 1)
                work = compute_calibrate(t_comm);
            for (int i = 0; i < total; i++) {
                double t = overlap_epoch(&w, sync, &x, work);

                if (i >= b->warmup)
                    both[i - b->warmup] = t;    /* rank 1: its compute time */
            }
            if (w.rank == 1) {
                t_comp = median_of(both, iters);
                mpi_check(MPI_Send(&t_comp, 1, MPI_DOUBLE, 0, 31, MPI_COMM_WORLD), "MPI_Send");
            } else {
                mpi_check(MPI_Recv(&t_comp, 1, MPI_DOUBLE, 1, 31, MPI_COMM_WORLD,
                                   MPI_STATUS_IGNORE), "MPI_Recv");
            }
            t_both = median_of(both, iters);
            ratio = t_comm > 0 ? t_both / t_comm : 0;
            overlap = (t_comm + t_comp - t_both) /
                      (t_comm < t_comp ? (t_comm > 0 ? t_comm : 1) : (t_comp > 0 ? t_comp : 1));
            overlap = overlap < 0 ? 0 : overlap > 1 ? 1 : overlap;
            snprintf(extra, sizeof extra,
                     "\"comm_us\":%.4f,\"compute_us\":%.4f,\"ratio\":%.4f,\"overlap\":%.4f",
                     t_comm * 1e6, t_comp * 1e6, ratio, overlap);
            result_write(b, "overlap", variant, b->sizes[s], 2, both, iters, 1e6, "us", extra);
            free(comm);
            free(both);
        }
    }
    window_close(&w);
}

/* ---- window creation ------------------------------------------------------------------------ */

static void wincreate_run(bench *b)
{
    char *kinds[BENCH_MAX_LIST];
    int nkinds = option_words(b, "win-kinds", kinds);
    long sizes[BENCH_MAX_LIST];
    int nsizes = option_longs(b, "win-sizes", sizes);
    int iters = (int)option_long(b, "win-iters"), warm = 1;
    MPI_Comm shared;
    int shared_size = 0;

    if (iters < 1)
        bench_fail("--win-iters must be at least 1");
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
    MPI_Comm_size(shared, &shared_size);
    for (int z = 0; z < nsizes; z++) {
        long bytes = sizes[z];
        double *t_alloc[2], *t_create = calloc((size_t)iters, sizeof(double));
        double *t_free = calloc((size_t)iters, sizeof(double));
        char variant[64];

        /* the allocation itself: malloc vs MPI_Alloc_mem (rank 0, no touch) */
        for (int a = 0; a < 2; a++) {
            t_alloc[a] = calloc((size_t)iters, sizeof(double));
            for (int i = 0; i < warm + iters; i++) {
                double t = MPI_Wtime();
                void *p = NULL;

                if (a == 0)
                    p = malloc((size_t)bytes);
                else
                    mpi_check(MPI_Alloc_mem(bytes, MPI_INFO_NULL, &p), "MPI_Alloc_mem");
                t = MPI_Wtime() - t;
                if (!p)
                    bench_fail("allocation of %ld bytes failed", bytes);
                ((volatile char *)p)[0] = 1;
                if (a == 0)
                    free(p);
                else
                    MPI_Free_mem(p);
                if (i >= warm)
                    t_alloc[a][i - warm] = t;
            }
            snprintf(variant, sizeof variant, "kind=%s bytes=%ld", a ? "allocmem" : "malloc",
                     bytes);
            result_write(b, "mem_alloc", variant, -1, 1, t_alloc[a], iters, 1e6, "us", NULL);
            free(t_alloc[a]);
        }

        for (int k = 0; k < nkinds; k++) {
            const char *kind = kinds[k];
            int is_create = strcmp(kind, "create") == 0, is_allocmem = strcmp(kind, "allocmem") == 0;
            int is_allocate = strcmp(kind, "allocate") == 0, is_dynamic = strcmp(kind, "dynamic") == 0;
            int is_shared = strcmp(kind, "shared") == 0;
            void *mem = NULL;

            if (!(is_create || is_allocmem || is_allocate || is_dynamic || is_shared))
                bench_fail("unknown --win-kinds entry '%s'", kind);
            if (is_shared && shared_size != b->size) {
                if (b->rank == 0)
                    fprintf(stderr, "onesided: wincreate kind=shared skipped: the processes "
                            "do not share memory\n");
                continue;
            }
            if (is_create || is_dynamic)
                mem = malloc((size_t)bytes);
            else if (is_allocmem)
                mpi_check(MPI_Alloc_mem(bytes, MPI_INFO_NULL, &mem), "MPI_Alloc_mem");
            for (int i = 0; i < warm + iters; i++) {
                MPI_Win win;
                void *base = NULL;
                double t;

                mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
                t = MPI_Wtime();
                if (is_create || is_allocmem) {
                    mpi_check(MPI_Win_create(mem, bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win),
                              "MPI_Win_create");
                } else if (is_allocate) {
                    mpi_check(MPI_Win_allocate(bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base,
                                               &win), "MPI_Win_allocate");
                } else if (is_shared) {
                    mpi_check(MPI_Win_allocate_shared(bytes, 1, MPI_INFO_NULL, shared, &base,
                                                      &win), "MPI_Win_allocate_shared");
                } else {
                    mpi_check(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win),
                              "MPI_Win_create_dynamic");
                    mpi_check(MPI_Win_attach(win, mem, bytes), "MPI_Win_attach");
                }
                t = MPI_Wtime() - t;
                if (i >= warm)
                    t_create[i - warm] = t;
                mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
                t = MPI_Wtime();
                if (is_dynamic)
                    mpi_check(MPI_Win_detach(win, mem), "MPI_Win_detach");
                mpi_check(MPI_Win_free(&win), "MPI_Win_free");
                t = MPI_Wtime() - t;
                if (i >= warm)
                    t_free[i - warm] = t;
            }
            snprintf(variant, sizeof variant, "kind=%s bytes=%ld", kind, bytes);
            result_write(b, "win_create", variant, -1, b->size, t_create, iters, 1e6, "us", NULL);
            result_write(b, "win_free", variant, -1, b->size, t_free, iters, 1e6, "us", NULL);
            if (is_create || is_dynamic)
                free(mem);
            else if (is_allocmem)
                MPI_Free_mem(mem);
        }
        free(t_create);
        free(t_free);
    }
    MPI_Comm_free(&shared);
}

int main(int argc, char **argv)
{
    bench b;

    MPI_Init(&argc, &argv);
    bench_init(&b, "onesided", argc, argv, options,
               "sync,rma,dtype,multi,overlap,wincreate");
    if (b.size != 2)
        bench_fail("onesided needs exactly 2 processes (launch with -n 2), not %d", b.size);
    if (test_enabled(&b, "sync"))
        sync_run(&b);
    if (test_enabled(&b, "rma"))
        rma_run(&b);
    if (test_enabled(&b, "dtype"))
        dtype_run(&b);
    if (test_enabled(&b, "multi"))
        multi_run(&b);
    if (test_enabled(&b, "overlap"))
        overlap_run(&b);
    if (test_enabled(&b, "wincreate"))
        wincreate_run(&b);
    bench_finish(&b);
    MPI_Finalize();
    return 0;
}
