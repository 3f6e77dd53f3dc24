/*
 * harness.h: the shared part of the benchmark suite's MPI programs.
 *
 * Every program (startup, spawn, intercomm, onesided) uses it the same way:
 *
 *   MPI_Init(&argc, &argv);
 *   bench b;
 *   bench_init(&b, "intercomm", argc, argv, extra_options, "pingpong,nameserv");
 *   ... for each test and size: time iterations into a samples array ...
 *   result_write(&b, "pingpong", "comm=world", size, samples, count, 1e6, "us", NULL);
 *   bench_finish(&b);
 *   MPI_Finalize();
 *
 * What it provides:
 *   - options: the common ones (below) plus a program's own, `--name value`
 *     or `--name=value`; `--help` lists them;
 *   - the message-size schedule of paper 003: sizes grow multiplicatively
 *     (x --factor) from --min-size up to --switch, then additively (+ --step)
 *     up to --max-size; or an explicit --sizes list;
 *   - iteration counts per size (fewer for large messages), warm-up counts;
 *   - statistics over the timed samples: min, avg, max, stddev, median, p99;
 *   - output: a readable table on stdout, and JSON lines (schema.json) to
 *     --json FILE (appended; "-" means stdout, the table then goes to stderr);
 *   - one "config" record first: MPI library and version, launcher (from the
 *     BENCH_LAUNCHER variable the runner sets), hosts, processes, universe
 *     size, PMI flavour, the relevant environment (netmod settings, ...).
 *
 * Only rank 0 of MPI_COMM_WORLD writes anything. A program's spawned
 * children get --child in their arguments: they parse the same options but
 * never write.
 *
 * Common options:
 *   --tests LIST      tests to run (the program's default: all of them)
 *   --json FILE       JSON lines to FILE (appended), "-" for stdout
 *   --check           validate every transferred byte / result; the record
 *                     then says "check": true; a mismatch aborts the job
 *   --smoke           tiny schedule and counts, for CI (a few seconds)
 *   --sizes LIST      explicit message sizes (bytes), instead of the schedule
 *   --min-size N      first size (default 1)
 *   --max-size N      last size (default 1048576)
 *   --factor F        multiplicative growth below --switch (default 2)
 *   --switch N        size where growth becomes additive (default 65536)
 *   --step N          additive step above --switch (default 131072)
 *   --iters N         timed iterations per size up to 8 KiB (default 500);
 *                     larger sizes get N * 8192 / size, at least --min-iters
 *   --min-iters N     (default 20)
 *   --warmup N        untimed iterations before each size (default 10)
 */
#ifndef BENCH_HARNESS_H
#define BENCH_HARNESS_H

#include <mpi.h>
#include <stdio.h>

#define BENCH_SCHEMA 1
#define BENCH_MAX_OPTIONS 64
#define BENCH_MAX_LIST 64

/* A program's own option: name (without "--"), default value, the default
 * under --smoke (NULL: the same), help text. */
typedef struct {
    const char *name;
    const char *def;
    const char *smoke;
    const char *help;
} bench_option;

typedef struct {
    int n;
    double min, avg, max, stddev, median, p99;
} bench_stats;

typedef struct {
    const char *family;         /* program: startup, spawn, intercomm, onesided */
    const char *tests_all;      /* the program's tests, comma-separated */
    int rank, size;             /* in MPI_COMM_WORLD */
    int child;                  /* started by MPI_Comm_spawn with --child */
    int check, smoke;
    FILE *json;                 /* NULL: no JSON */
    FILE *table;                /* stdout, or stderr when JSON goes to stdout */

    /* size schedule and counts */
    long *sizes;
    int size_count;
    long min_size, max_size, switch_size, step;
    double factor;
    int iters, min_iters, warmup;

    /* every option, common and the program's, with its current value */
    const char *opt_name[BENCH_MAX_OPTIONS];
    const char *opt_value[BENCH_MAX_OPTIONS];
    const char *opt_smoke[BENCH_MAX_OPTIONS];
    unsigned long long opt_given;   /* bit i: option i was on the command line */
    const char *opt_help[BENCH_MAX_OPTIONS];
    int opt_count;

    char launcher[64];
    char run_id[96];
    char table_key[256];        /* test and variant of the current table */
    int records;
} bench;

/* Parse the options (exits with a message on a bad one, or after --help),
 * build the size schedule and, on rank 0 of a parent job, write the config
 * record. extra: the program's own options, ended by {NULL}; may be NULL.
 * tests_all: the program's tests, the default for --tests. */
void bench_init(bench *b, const char *family, int argc, char **argv,
                const bench_option *extra, const char *tests_all);

/* Close the JSON file and check that everything was written. */
void bench_finish(bench *b);

/* The value of an option (common or the program's); NULL if unset. */
const char *option_get(const bench *b, const char *name);
long option_long(const bench *b, const char *name);
/* Was the option given on the command line (not a default)? */
int option_given(const bench *b, const char *name);
/* Parse a comma-separated option into out (at most BENCH_MAX_LIST items);
 * returns the count. option_words keeps the words (pointers into a copy). */
int option_longs(const bench *b, const char *name, long *out);
int option_words(const bench *b, const char *name, char **out);

/* Is the test named in --tests? */
int test_enabled(const bench *b, const char *test);

/* Timed iterations for a message of this many bytes. */
int iters_for(const bench *b, long size);

/* Statistics of count samples (the array is sorted in place). */
void stats_compute(double *samples, int count, bench_stats *out);

/*
 * Write one result (rank 0 only; a no-op elsewhere): a table row and a JSON
 * line. samples: count raw measurements (seconds, or whatever unit/scale
 * says); they are multiplied by scale for the record (1e6: seconds to µs).
 * variant: "key=value key=value" (values that look like numbers become JSON
 * numbers), or "" for none. size: bytes, or -1 for none. When size > 0 and
 * unit is a time unit, the record gets bandwidth in MB/s (10^6 bytes/s).
 * extra_json: NULL, or members for the record's "extra" object written as
 * JSON text without the braces, e.g. "\"ratio\":1.5". nprocs: the number of
 * processes this result is about (usually the world size).
 * Up to 100 samples are kept in the record ("samples"), so a runner can pool
 * them across runs; larger sets only keep the statistics.
 */
void result_write(bench *b, const char *test, const char *variant, long size,
                  int nprocs, double *samples, int count, double scale,
                  const char *unit, const char *extra_json);

/* Abort the job with a message (the benchmark must never report a number
 * for something that failed). */
void bench_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Abort with the MPI error string when rc is not MPI_SUCCESS. */
void mpi_check(int rc, const char *what);

/* Fill / verify a buffer with a pattern that depends on a seed (--check). */
void pattern_fill(void *buf, long bytes, unsigned seed);
long pattern_verify(const void *buf, long bytes, unsigned seed);  /* -1: ok, else offset */

/* Wall-clock seconds (CLOCK_REALTIME; comparable between processes of one
 * host) and monotonic seconds. */
double wall_now(void);
double mono_now(void);

/* Absolute path of this executable (the spawn target). */
const char *self_path(void);

/*
 * Wait on a communicator's barrier without spinning: MPI_Ibarrier, then
 * MPI_Test every `nap_us` microseconds. Used by processes that only wait
 * (spawned children kept alive, idle ranks), so that they do not take CPU
 * from the ranks being timed on a small machine.
 */
void barrier_sleepy(MPI_Comm comm, int nap_us);

#endif
