/*
 * harness.c: options, size schedule, statistics, table and JSON-lines
 * output and the configuration record of the benchmark suite (harness.h).
 */
#define _GNU_SOURCE
#include "harness.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Common options; the smoke column replaces the default under --smoke when
 * the option is not given explicitly. */
static const struct {
    const char *name, *def, *smoke, *help;
} common_options[] = {
    {"tests", NULL, NULL, "comma-separated tests to run (default: all)"},
    {"json", NULL, NULL, "write JSON lines to FILE (appended; - = stdout)"},
    {"check", NULL, NULL, "validate the data of every transfer (flag)"},
    {"smoke", NULL, NULL, "tiny sizes and counts, for CI (flag)"},
    {"child", NULL, NULL, "(internal) this process was spawned by the benchmark"},
    {"sizes", NULL, NULL, "explicit comma-separated message sizes in bytes"},
    {"min-size", "1", "1", "first message size (bytes)"},
    {"max-size", "1048576", "4096", "last message size (bytes)"},
    {"factor", "2", "4", "multiplicative size growth below --switch"},
    {"switch", "65536", "65536", "size where growth becomes additive"},
    {"step", "131072", "131072", "additive size step above --switch"},
    {"iters", "500", "10", "timed iterations per size up to 8 KiB"},
    {"min-iters", "20", "4", "fewest timed iterations for large sizes"},
    {"warmup", "10", "2", "untimed iterations before each size"},
};
#define COMMON_COUNT ((int)(sizeof common_options / sizeof common_options[0]))

static const char *const env_prefixes[] = {
    "MPIR_CVAR_", "MPICH_", "FI_", "UCX_", "OMPI_MCA_", "PMIX_MCA_", "PRTE_MCA_",
    "I_MPI_", "HYDRA_", "BENCH_", "OMP_NUM_THREADS", "SLURM_JOB_ID", "SLURM_NNODES",
};

void bench_fail(const char *fmt, ...)
{
    va_list ap;
    int initialized = 0;

    fflush(stdout);
    fprintf(stderr, "bench: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    MPI_Initialized(&initialized);
    if (initialized)
        MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

void mpi_check(int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;

    if (rc == MPI_SUCCESS)
        return;
    MPI_Error_string(rc, text, &len);
    bench_fail("%s failed: %s", what, text);
}

double wall_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double mono_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *self_path(void)
{
    static char path[4096];
    ssize_t len;

    if (path[0])
        return path;
    len = readlink("/proc/self/exe", path, sizeof path - 1);
    if (len <= 0)
        bench_fail("cannot read /proc/self/exe: %s", strerror(errno));
    path[len] = '\0';
    return path;
}

void barrier_sleepy(MPI_Comm comm, int nap_us)
{
    struct timespec nap = {0, (long)nap_us * 1000};
    MPI_Request req;
    int done = 0;

    mpi_check(MPI_Ibarrier(comm, &req), "MPI_Ibarrier");
    for (;;) {
        mpi_check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done)
            return;
        nanosleep(&nap, NULL);
    }
}

/* ---- patterns (--check) ------------------------------------------------ */

static unsigned char pattern_byte(long i, unsigned seed)
{
    uint32_t x = (uint32_t)i * 2654435761u ^ (seed * 40503u + 0x9e37u);

    x ^= x >> 13;
    return (unsigned char)(x ^ (x >> 7));
}

void pattern_fill(void *buf, long bytes, unsigned seed)
{
    unsigned char *p = buf;

    for (long i = 0; i < bytes; i++)
        p[i] = pattern_byte(i, seed);
}

long pattern_verify(const void *buf, long bytes, unsigned seed)
{
    const unsigned char *p = buf;

    for (long i = 0; i < bytes; i++)
        if (p[i] != pattern_byte(i, seed))
            return i;
    return -1;
}

/* ---- options ------------------------------------------------------------ */

static int option_index(const bench *b, const char *name)
{
    for (int i = 0; i < b->opt_count; i++)
        if (strcmp(b->opt_name[i], name) == 0)
            return i;
    return -1;
}

const char *option_get(const bench *b, const char *name)
{
    int i = option_index(b, name);

    if (i < 0)
        bench_fail("internal: unknown option %s", name);
    return b->opt_value[i];
}

int option_given(const bench *b, const char *name)
{
    int i = option_index(b, name);

    return i >= 0 && (b->opt_given >> i) & 1;
}

static long number_parse(const char *name, const char *text)
{
    char *end = NULL;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < 0)
        bench_fail("--%s takes a non-negative integer, not '%s'", name, text);
    return v;
}

long option_long(const bench *b, const char *name)
{
    const char *v = option_get(b, name);

    if (v == NULL)
        bench_fail("--%s is required", name);
    return number_parse(name, v);
}

int option_words(const bench *b, const char *name, char **out)
{
    const char *v = option_get(b, name);
    char *copy, *save = NULL;
    int count = 0;

    if (v == NULL)
        return 0;
    copy = strdup(v);
    for (char *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        if (count == BENCH_MAX_LIST)
            bench_fail("--%s: more than %d items", name, BENCH_MAX_LIST);
        out[count++] = w;
    }
    return count;
}

int option_longs(const bench *b, const char *name, long *out)
{
    char *words[BENCH_MAX_LIST];
    int count = option_words(b, name, words);

    for (int i = 0; i < count; i++)
        out[i] = number_parse(name, words[i]);
    return count;
}

int test_enabled(const bench *b, const char *test)
{
    char *words[BENCH_MAX_LIST];
    int count = option_words(b, "tests", words);

    for (int i = 0; i < count; i++)
        if (strcmp(words[i], test) == 0)
            return 1;
    return 0;
}

static void option_add(bench *b, const char *name, const char *def, const char *smoke,
                       const char *help)
{
    if (b->opt_count == BENCH_MAX_OPTIONS)
        bench_fail("internal: too many options");
    b->opt_name[b->opt_count] = name;
    b->opt_value[b->opt_count] = def;
    b->opt_smoke[b->opt_count] = smoke;
    b->opt_help[b->opt_count] = help;
    b->opt_count++;
}

static void usage_print(const bench *b)
{
    printf("usage: %s [options]   (tests: %s)\n", b->family, b->tests_all);
    for (int i = 0; i < b->opt_count; i++)
        printf("  --%-14s %s%s%s%s\n", b->opt_name[i], b->opt_help[i],
               b->opt_value[i] ? " [" : "", b->opt_value[i] ? b->opt_value[i] : "",
               b->opt_value[i] ? "]" : "");
}

static int flag_option(const char *name)
{
    return strcmp(name, "check") == 0 || strcmp(name, "smoke") == 0 ||
           strcmp(name, "child") == 0;
}

/* Returns a bitmap (by option index) of the options given explicitly. */
static unsigned long long options_parse(bench *b, int argc, char **argv)
{
    unsigned long long given = 0;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = NULL;
        char name[64];
        const char *eq;
        size_t len;
        int idx;

        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            if (b->rank == 0)
                usage_print(b);
            MPI_Finalize();
            exit(0);
        }
        if (strncmp(arg, "--", 2) != 0)
            bench_fail("unexpected argument '%s' (see --help)", arg);
        arg += 2;
        eq = strchr(arg, '=');
        len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (len >= sizeof name)
            bench_fail("unknown option --%s", arg);
        memcpy(name, arg, len);
        name[len] = '\0';
        idx = option_index(b, name);
        if (idx < 0)
            bench_fail("unknown option --%s (see --help)", name);
        if (flag_option(name)) {
            if (eq)
                bench_fail("--%s takes no value", name);
            value = "1";
        } else if (eq) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            bench_fail("--%s needs a value", name);
        }
        b->opt_value[idx] = value;
        given |= 1ull << idx;
    }
    return given;
}

/* ---- size schedule -------------------------------------------------------- */

static void sizes_build(bench *b)
{
    long list[BENCH_MAX_LIST];
    int count = option_longs(b, "sizes", list);
    int cap = 256;

    b->sizes = malloc((size_t)cap * sizeof *b->sizes);
    if (count > 0) {
        memcpy(b->sizes, list, (size_t)count * sizeof *list);
        b->size_count = count;
        b->max_size = 0;
        for (int i = 0; i < count; i++)
            b->max_size = list[i] > b->max_size ? list[i] : b->max_size;
        return;
    }
    if (b->factor <= 1.0 || b->step < 1 || b->min_size > b->max_size)
        bench_fail("bad size schedule: --factor must be > 1, --step >= 1, "
                   "--min-size <= --max-size");
    b->size_count = 0;
    for (double s = (double)b->min_size; (long)s <= b->max_size && b->size_count < cap;) {
        long size = (long)s;

        if (b->size_count == 0 || size != b->sizes[b->size_count - 1])
            b->sizes[b->size_count++] = size;
        if (size < b->switch_size) {
            s = s < 1 ? 1 : s * b->factor;
            if ((long)s > b->switch_size && size < b->switch_size)
                s = (double)b->switch_size;
        } else {
            s += (double)b->step;
        }
    }
    if (b->size_count < cap && b->sizes[b->size_count - 1] != b->max_size)
        b->sizes[b->size_count++] = b->max_size;
}

int iters_for(const bench *b, long size)
{
    long n = b->iters;

    if (size > 8192)
        n = (long)((double)b->iters * 8192.0 / (double)size);
    return (int)(n < b->min_iters ? b->min_iters : n);
}

/* ---- statistics ------------------------------------------------------------ */

static int double_compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

void stats_compute(double *samples, int count, bench_stats *out)
{
    double sum = 0, sq = 0;
    int rank99;

    memset(out, 0, sizeof *out);
    out->n = count;
    if (count <= 0)
        return;
    qsort(samples, (size_t)count, sizeof *samples, double_compare);
    for (int i = 0; i < count; i++)
        sum += samples[i];
    out->avg = sum / count;
    for (int i = 0; i < count; i++)
        sq += (samples[i] - out->avg) * (samples[i] - out->avg);
    out->stddev = count > 1 ? sqrt(sq / (count - 1)) : 0.0;
    out->min = samples[0];
    out->max = samples[count - 1];
    out->median = count % 2 ? samples[count / 2]
                            : (samples[count / 2 - 1] + samples[count / 2]) / 2;
    rank99 = (int)ceil(0.99 * count) - 1;   /* nearest-rank percentile */
    out->p99 = samples[rank99 < 0 ? 0 : rank99];
}

/* ---- JSON ------------------------------------------------------------------ */

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

static void json_number(FILE *f, double x)
{
    if (isfinite(x))
        fprintf(f, "%.6g", x);
    else
        fputs("null", f);
}

static int number_like(const char *s)
{
    char *end = NULL;

    if (*s == '\0')
        return 0;
    strtod(s, &end);
    return *end == '\0' && strspn(s, "0123456789.-+eE") == strlen(s);
}

/* "a=1 b=put" -> {"a":1,"b":"put"} */
static void json_variant(FILE *f, const char *variant)
{
    char *copy = strdup(variant ? variant : ""), *save = NULL;
    int first = 1;

    fputc('{', f);
    for (char *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(w, '=');

        if (!eq)
            bench_fail("internal: variant word '%s' has no '='", w);
        *eq = '\0';
        fputs(first ? "" : ",", f);
        json_string(f, w);
        fputc(':', f);
        if (number_like(eq + 1))
            fputs(eq + 1, f);
        else
            json_string(f, eq + 1);
        first = 0;
    }
    fputc('}', f);
    free(copy);
}

static void json_common(bench *b, FILE *f, const char *type)
{
    fprintf(f, "{\"type\":\"%s\",\"schema\":%d,\"family\":", type, BENCH_SCHEMA);
    json_string(f, b->family);
    fputs(",\"launcher\":", f);
    json_string(f, b->launcher);
    fputs(",\"run_id\":", f);
    json_string(f, b->run_id);
}

/* ---- configuration record ---------------------------------------------------- */

static const char *pmi_flavour(void)
{
    if (getenv("PMIX_RANK") || getenv("PMIX_NAMESPACE"))
        return "pmix";
    if (getenv("PMI_FD"))
        return "pmi-fd";
    if (getenv("PMI_PORT"))
        return "pmi-port";
    if (getenv("SLURM_STEP_ID"))
        return "slurm";
    return "none";
}

static void config_write(bench *b, int argc, char **argv)
{
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    char *hosts = NULL;
    char first_line[256];
    char stamp[64];
    int len = 0, major = 0, minor = 0, flag = 0, *usize = NULL;
    time_t now = time(NULL);
    FILE *f = b->json;

    MPI_Get_library_version(version, &len);
    MPI_Get_version(&major, &minor);
    MPI_Get_processor_name(host, &len);
    if (b->rank == 0)
        hosts = calloc((size_t)b->size, MPI_MAX_PROCESSOR_NAME);
    mpi_check(MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME,
                         MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Gather (host names)");
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &usize, &flag);
    if (b->rank != 0 || f == NULL) {
        free(hosts);
        return;
    }
    snprintf(first_line, sizeof first_line, "%s", version);
    first_line[strcspn(first_line, "\n\r,")] = '\0';
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S%z", localtime(&now));

    json_common(b, f, "config");
    fputs(",\"time\":", f);
    json_string(f, stamp);
    fputs(",\"mpi_library\":", f);
    json_string(f, first_line);
    fputs(",\"mpi_library_full\":", f);
    json_string(f, version);
    fprintf(f, ",\"mpi_version\":\"%d.%d\",\"nprocs\":%d,\"universe_size\":", major, minor,
            b->size);
    if (flag && usize)
        fprintf(f, "%d", *usize);
    else
        fputs("null", f);
    fputs(",\"hosts\":[", f);
    for (int i = 0, out = 0; i < b->size; i++) {
        const char *h = hosts + (size_t)i * MPI_MAX_PROCESSOR_NAME;
        int seen = 0;

        for (int j = 0; j < i && !seen; j++)
            seen = strcmp(h, hosts + (size_t)j * MPI_MAX_PROCESSOR_NAME) == 0;
        if (seen)
            continue;
        fputs(out++ ? "," : "", f);
        json_string(f, h);
    }
    fputs("],\"pmi\":", f);
    json_string(f, pmi_flavour());
    fputs(",\"env\":{", f);
    for (char **e = environ, first = 1; *e; e++) {
        const char *eq = strchr(*e, '=');
        int keep = 0;

        for (size_t p = 0; p < sizeof env_prefixes / sizeof env_prefixes[0] && !keep; p++)
            keep = strncmp(*e, env_prefixes[p], strlen(env_prefixes[p])) == 0;
        if (!keep || !eq)
            continue;
        {
            char *name = strndup(*e, (size_t)(eq - *e));

            fputs(first ? "" : ",", f);
            json_string(f, name);
            fputc(':', f);
            json_string(f, eq + 1);
            free(name);
        }
        first = 0;
    }
    fputs("},\"options\":{", f);
    for (int i = 0, out = 0; i < b->opt_count; i++) {
        if (b->opt_value[i] == NULL || strcmp(b->opt_name[i], "json") == 0)
            continue;
        fputs(out++ ? "," : "", f);
        json_string(f, b->opt_name[i]);
        fputc(':', f);
        json_string(f, b->opt_value[i]);
    }
    fputs("},\"sizes\":[", f);
    for (int i = 0; i < b->size_count; i++)
        fprintf(f, "%s%ld", i ? "," : "", b->sizes[i]);
    fputs("],\"argv\":[", f);
    for (int i = 0; i < argc; i++) {
        fputs(i ? "," : "", f);
        json_string(f, argv[i]);
    }
    fprintf(f, "],\"check\":%s,\"smoke\":%s}\n", b->check ? "true" : "false",
            b->smoke ? "true" : "false");
    fflush(f);
    free(hosts);
}

/* ---- init / finish ----------------------------------------------------------- */

void bench_init(bench *b, const char *family, int argc, char **argv,
                const bench_option *extra, const char *tests_all)
{
    unsigned long long given;
    const char *env, *json;

    memset(b, 0, sizeof *b);
    b->family = family;
    b->tests_all = tests_all;
    MPI_Comm_rank(MPI_COMM_WORLD, &b->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b->size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);

    for (int i = 0; i < COMMON_COUNT; i++)
        option_add(b, common_options[i].name, common_options[i].def, common_options[i].smoke,
                   common_options[i].help);
    for (const bench_option *o = extra; o && o->name; o++)
        option_add(b, o->name, o->def, o->smoke, o->help);
    b->opt_value[option_index(b, "tests")] = tests_all;
    given = options_parse(b, argc, argv);
    b->opt_given = given;

    b->check = option_get(b, "check") != NULL;
    b->smoke = option_get(b, "smoke") != NULL;
    b->child = option_get(b, "child") != NULL;
    if (b->smoke)
        for (int i = 0; i < b->opt_count; i++)
            if (b->opt_smoke[i] && !(given & (1ull << i)))
                b->opt_value[i] = b->opt_smoke[i];
    b->min_size = option_long(b, "min-size");
    b->max_size = option_long(b, "max-size");
    b->switch_size = option_long(b, "switch");
    b->step = option_long(b, "step");
    b->factor = atof(option_get(b, "factor"));
    b->iters = (int)option_long(b, "iters");
    b->min_iters = (int)option_long(b, "min-iters");
    b->warmup = (int)option_long(b, "warmup");
    if (b->iters < 1 || b->min_iters < 1)
        bench_fail("--iters and --min-iters must be at least 1");
    sizes_build(b);
    {
        char *words[BENCH_MAX_LIST];
        int count = option_words(b, "tests", words);

        for (int i = 0; i < count; i++) {
            char key[128];

            snprintf(key, sizeof key, ",%s,", words[i]);
            {
                char all[1024];

                snprintf(all, sizeof all, ",%s,", tests_all);
                if (!strstr(all, key))
                    bench_fail("unknown test '%s'; %s has: %s", words[i], family, tests_all);
            }
        }
    }

    env = getenv("BENCH_LAUNCHER");
    snprintf(b->launcher, sizeof b->launcher, "%s", env && *env ? env : "unknown");
    env = getenv("BENCH_RUN_ID");
    if (env && *env)
        snprintf(b->run_id, sizeof b->run_id, "%s", env);
    else
        snprintf(b->run_id, sizeof b->run_id, "%s-%ld-%d", family, (long)time(NULL),
                 (int)getpid());

    json = option_get(b, "json");
    b->table = stdout;
    if (b->rank == 0 && !b->child && json) {
        if (strcmp(json, "-") == 0) {
            b->json = stdout;
            b->table = stderr;
        } else {
            b->json = fopen(json, "a");
            if (!b->json)
                bench_fail("cannot open %s: %s", json, strerror(errno));
        }
    }
    if (!b->child)
        config_write(b, argc, argv);
}

void bench_finish(bench *b)
{
    if (b->rank == 0 && !b->child) {
        fflush(b->table);
        if (b->json && b->json != stdout && fclose(b->json) != 0)
            bench_fail("writing the JSON file: %s", strerror(errno));
        if (b->json == stdout)
            fflush(stdout);
    }
    b->json = NULL;
    free(b->sizes);
    b->sizes = NULL;
}

/* ---- results ------------------------------------------------------------------ */

static int unit_is_time(const char *unit)
{
    return strcmp(unit, "s") == 0 || strcmp(unit, "ms") == 0 || strcmp(unit, "us") == 0;
}

static double unit_seconds(const char *unit)
{
    if (strcmp(unit, "ms") == 0)
        return 1e-3;
    if (strcmp(unit, "us") == 0)
        return 1e-6;
    return 1.0;
}

static void table_row(bench *b, const char *test, const char *variant, long size,
                      int nprocs, const bench_stats *s, const char *unit, double bw)
{
    char key[256];
    FILE *t = b->table;

    snprintf(key, sizeof key, "%s|%s|%d", test, variant, nprocs);
    if (strcmp(key, b->table_key) != 0) {
        snprintf(b->table_key, sizeof b->table_key, "%s", key);
        fprintf(t, "\n# %s %s%s%s (%d procs, launcher %s)%s\n", b->family, test,
                *variant ? " " : "", variant, nprocs, b->launcher, b->check ? " [checked]" : "");
        fprintf(t, "%10s %7s %11s %11s %11s %11s %11s %11s %10s\n", "bytes", "count",
                "min", "avg", "median", "p99", "max", "stddev", "MB/s");
    }
    if (size >= 0)
        fprintf(t, "%10ld", size);
    else
        fprintf(t, "%10s", "-");
    fprintf(t, " %7d %11.3f %11.3f %11.3f %11.3f %11.3f %11.3f", s->n, s->min, s->avg,
            s->median, s->p99, s->max, s->stddev);
    if (bw > 0)
        fprintf(t, " %10.2f", bw);
    else
        fprintf(t, " %10s", "-");
    fprintf(t, "  %s\n", unit);
    fflush(t);
}

void result_write(bench *b, const char *test, const char *variant, long size,
                  int nprocs, double *samples, int count, double scale,
                  const char *unit, const char *extra_json)
{
    bench_stats s;
    double *scaled;
    double bw_avg = 0;
    FILE *f = b->json;

    if (b->rank != 0 || b->child)
        return;
    if (count < 1)
        bench_fail("internal: %s %s: no samples", test, variant);
    scaled = malloc((size_t)count * sizeof *scaled);
    for (int i = 0; i < count; i++)
        scaled[i] = samples[i] * scale;
    /* Keep the samples in measurement order for the record. */
    {
        double *sorted = malloc((size_t)count * sizeof *sorted);

        memcpy(sorted, scaled, (size_t)count * sizeof *sorted);
        stats_compute(sorted, count, &s);
        free(sorted);
    }
    if (size > 0 && unit_is_time(unit) && s.avg > 0)
        bw_avg = (double)size / (s.avg * unit_seconds(unit)) / 1e6;
    table_row(b, test, variant ? variant : "", size, nprocs, &s, unit, bw_avg);
    b->records++;
    if (f == NULL) {
        free(scaled);
        return;
    }
    json_common(b, f, "result");
    fputs(",\"test\":", f);
    json_string(f, test);
    fputs(",\"variant\":", f);
    json_variant(f, variant);
    fputs(",\"size\":", f);
    if (size >= 0)
        fprintf(f, "%ld", size);
    else
        fputs("null", f);
    fprintf(f, ",\"nprocs\":%d,\"unit\":", nprocs);
    json_string(f, unit);
    fprintf(f, ",\"stats\":{\"n\":%d,\"min\":", s.n);
    json_number(f, s.min);
    fputs(",\"avg\":", f);
    json_number(f, s.avg);
    fputs(",\"max\":", f);
    json_number(f, s.max);
    fputs(",\"stddev\":", f);
    json_number(f, s.stddev);
    fputs(",\"median\":", f);
    json_number(f, s.median);
    fputs(",\"p99\":", f);
    json_number(f, s.p99);
    fputs("},\"bandwidth_MBps\":", f);
    if (size > 0 && unit_is_time(unit) && s.min > 0) {
        double sec = unit_seconds(unit);

        fputs("{\"min\":", f);
        json_number(f, (double)size / (s.max * sec) / 1e6);
        fputs(",\"avg\":", f);
        json_number(f, (double)size / (s.avg * sec) / 1e6);
        fputs(",\"median\":", f);
        json_number(f, (double)size / (s.median * sec) / 1e6);
        fputs(",\"max\":", f);
        json_number(f, (double)size / (s.min * sec) / 1e6);
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    if (count <= 100) {
        fputs(",\"samples\":[", f);
        for (int i = 0; i < count; i++) {
            fputs(i ? "," : "", f);
            json_number(f, scaled[i]);
        }
        fputc(']', f);
    }
    fprintf(f, ",\"check\":%s,\"extra\":{%s}}\n", b->check ? "true" : "false",
            extra_json ? extra_json : "");
    fflush(f);
    free(scaled);
}
