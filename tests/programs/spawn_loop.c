/*
 * spawn_loop.c - checks that repeated spawns leak nothing, in this process
 * (file descriptors) or in the launcher that forked it (descriptors,
 * threads, child processes, zombies).
 *
 * Usage: spawn_loop [N]   (default 10; run with -n 1 under a launcher that
 *                          forks its ranks itself, so getppid() is it)
 * Each iteration spawns 1 child of this program, merges the
 * intercommunicator, sends the child the iteration number and gets it back
 * plus one, frees the merged communicator and disconnects.
 * At the end it waits (up to 3 s) for the launcher to reap the last child,
 * then prints:
 *   parent fds start=A end=B
 *   dpm fds start=A end=B max=M
 *   dpm threads start=A end=B
 *   dpm children end=C zombies=Z
 *   spawn_loop ok iterations=N
 * "dpm threads" leaves out dpm's output writer (started with the first byte
 * of output, once). "dpm children" counts the launcher's live and zombie children (the
 * parent itself included, so 1 means no child is left; dpm's cleaner, a
 * child named dpm-cleaner that lives as long as dpm, is not counted); "zombies" counts
 * its children in state Z. The launcher's numbers are printed, not judged:
 * the test decides. Wrong messages print "FAIL ..." and exit 1.
 */
#include "spawn_util.h"
#include <time.h>

/* Whether process `pid` is named `name` (its comm). */
static int named(const char *pid, const char *name)
{
    char path[320], comm[32] = "";
    snprintf(path, sizeof path, "/proc/%s/comm", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int ok = fgets(comm, sizeof comm, f) != NULL;
    fclose(f);
    comm[strcspn(comm, "\n")] = 0;
    return ok && strcmp(comm, name) == 0;
}

/* Threads of process `pid` (tasks), but for dpm's output writer: it starts
 * with the run's first byte of output, once, so it is no leak. */
static int count_threads(const char *pid)
{
    char dir[64], task[300];
    snprintf(dir, sizeof dir, "/proc/%s/task", pid);
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(task, sizeof task, "%s/task/%s", pid, e->d_name);
        if (!named(task, "dpm-output"))
            n++;
    }
    closedir(d);
    return n;
}

/* Children of process `pid`, over all its threads (tasks), but for the
   launcher's cleaner. */
static int count_children(const char *pid)
{
    char dir[64], path[384], buf[8192];
    snprintf(dir, sizeof dir, "/proc/%s/task", pid);
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s/children", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        for (char *tok = strtok(buf, " \n"); tok; tok = strtok(NULL, " \n"))
            n += !named(tok, "dpm-cleaner");
    }
    closedir(d);
    return n;
}

/* Processes whose parent is `ppid` and whose state is Z. */
static int count_zombies(int ppid)
{
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    int n = 0;
    char path[320], buf[1024];
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        /* pid (comm) state ppid ...: comm may hold spaces, so parse after ')'. */
        char *close = strrchr(buf, ')');
        char state;
        int parent;
        if (close && sscanf(close + 1, " %c %d", &state, &parent) == 2 && parent == ppid && state == 'Z')
            n++;
    }
    closedir(d);
    return n;
}

static void child(MPI_Comm parent)
{
    MPI_Comm merged;
    int value = -1;
    MPI_Intercomm_merge(parent, 1, &merged);
    MPI_Recv(&value, 1, MPI_INT, 0, 1, merged, MPI_STATUS_IGNORE);
    value++;
    MPI_Send(&value, 1, MPI_INT, 0, 2, merged);
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&parent);
}

int main(int argc, char **argv)
{
    MPI_Comm parent;
    char ppid[32];

    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    if (parent != MPI_COMM_NULL) {
        child(parent);
        MPI_Finalize();
        return 0;
    }
    if (getenv("PMI_SPAWNED") || (argc > 1 && strcmp(argv[1], "child") == 0)) {
        fail("spawned, but MPI_Comm_get_parent is MPI_COMM_NULL");
        MPI_Finalize();
        return 1;
    }

    int n = arg_or(argc, argv, 1, 10);
    int dpm = (int)getppid();
    snprintf(ppid, sizeof ppid, "%d", dpm);
    int my_fds0 = count_fds("self"), dpm_fds0 = count_fds(ppid), threads0 = count_threads(ppid);
    int dpm_fds_max = dpm_fds0;
    char *args[] = {"child", NULL};

    for (int i = 0; i < n; i++) {
        MPI_Comm inter, merged;
        int answer = -1;
        MPI_Comm_spawn(self_exe(), args, 1, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter, MPI_ERRCODES_IGNORE);
        MPI_Intercomm_merge(inter, 0, &merged);
        MPI_Send(&i, 1, MPI_INT, 1, 1, merged);
        MPI_Recv(&answer, 1, MPI_INT, 1, 2, merged, MPI_STATUS_IGNORE);
        CHECK(answer == i + 1, "iteration %d: child answered %d", i, answer);
        MPI_Comm_free(&merged);
        MPI_Comm_disconnect(&inter);
        int fds = count_fds(ppid);
        if (fds > dpm_fds_max)
            dpm_fds_max = fds;
    }

    /* Give the launcher time to reap the last child and close its pipes. */
    int children = 0, zombies = 0, dpm_fds = 0;
    for (int waited = 0; waited < 3000; waited += 10) {
        children = count_children(ppid);
        zombies = count_zombies(dpm);
        dpm_fds = count_fds(ppid);
        if (children == 1 && zombies == 0 && dpm_fds <= dpm_fds0)
            break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    printf("parent fds start=%d end=%d\n", my_fds0, count_fds("self"));
    printf("dpm fds start=%d end=%d max=%d\n", dpm_fds0, dpm_fds, dpm_fds_max);
    printf("dpm threads start=%d end=%d\n", threads0, count_threads(ppid));
    printf("dpm children end=%d zombies=%d\n", children, zombies);
    if (!failures)
        printf("spawn_loop ok iterations=%d\n", n);
    fflush(stdout);
    MPI_Finalize();
    return finish();
}
