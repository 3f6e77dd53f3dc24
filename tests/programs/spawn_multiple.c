/*
 * spawn_multiple.c - checks MPI_Comm_spawn_multiple and the per-command
 * info keys wdir, path and env (Open MPI's "NAME=VALUE\n..." spelling).
 *
 * Usage: spawn_multiple   (run with -n 1 or more; root 0)
 * Command 0: 1 process, absolute path of this program, info wdir=/tmp.
 * Command 1: 2 processes, the bare program name with info path=<its
 *            directory> (so only `path` can find it) and
 *            env="DPM_SPAWN_VAR=hello\nOTHER=x".
 * Each child sends parent rank 0 one line "appnum=A cwd=D var=V other=O";
 * expected: child 0 appnum 0, cwd /tmp, both variables unset; children 1
 * and 2 appnum 1, cwd = the parent's cwd, var=hello, other=x.
 * Prints "child R appnum=..." per child as received, then
 * "spawn_multiple ok" on parent rank 0; "FAIL ..." and exit 1 otherwise.
 */
#include "spawn_util.h"
#include <libgen.h>

#define LINE 4200

static void child(MPI_Comm parent)
{
    int rank, flag = 0, *appnum = NULL;
    char cwd[4096], line[LINE];

    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag);
    if (!getcwd(cwd, sizeof cwd))
        strcpy(cwd, "(unknown)");
    const char *var = getenv("DPM_SPAWN_VAR"), *other = getenv("OTHER");
    snprintf(line, sizeof line, "appnum=%d cwd=%s var=%s other=%s", flag ? *appnum : -1, cwd,
             var ? var : "(unset)", other ? other : "(unset)");
    MPI_Send(line, (int)strlen(line) + 1, MPI_CHAR, 0, 1, parent);
    /* MPICH's disconnect does not synchronize: without this barrier a child
     * may exit before every parent rank has connected to it. */
    MPI_Barrier(parent);
    MPI_Comm_disconnect(&parent);
}

static void parent(void)
{
    int rank, remote;
    char cwd[4096], dir[4096], line[LINE], expected[LINE];
    MPI_Comm inter;
    MPI_Info infos[2];
    int errcodes[3];

    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (!getcwd(cwd, sizeof cwd))
        fail("getcwd");
    strcpy(dir, self_exe());
    char *program_dir = dirname(dir);
    char full[4096];
    strcpy(full, self_exe());
    char *commands[2] = {full, strrchr(full, '/') + 1};
    char *arg0[] = {"child", NULL}, *arg1[] = {"child", NULL};
    char **argvs[2] = {arg0, arg1};
    int maxprocs[2] = {1, 2};

    MPI_Info_create(&infos[0]);
    MPI_Info_set(infos[0], "wdir", "/tmp");
    MPI_Info_create(&infos[1]);
    MPI_Info_set(infos[1], "path", program_dir);
    MPI_Info_set(infos[1], "env", "DPM_SPAWN_VAR=hello\nOTHER=x");
    MPI_Comm_spawn_multiple(2, commands, argvs, maxprocs, infos, 0, MPI_COMM_WORLD, &inter, errcodes);
    for (int i = 0; i < 3; i++)
        CHECK(errcodes[i] == MPI_SUCCESS, "errcodes[%d]=%d", i, errcodes[i]);
    MPI_Comm_remote_size(inter, &remote);
    CHECK(remote == 3, "remote size %d, expected 3", remote);

    if (rank == 0) {
        for (int c = 0; c < remote; c++) {
            MPI_Recv(line, LINE, MPI_CHAR, c, 1, inter, MPI_STATUS_IGNORE);
            printf("child %d %s\n", c, line);
            if (c == 0)
                snprintf(expected, sizeof expected, "appnum=0 cwd=/tmp var=(unset) other=(unset)");
            else
                snprintf(expected, sizeof expected, "appnum=1 cwd=%s var=hello other=x", cwd);
            CHECK(strcmp(line, expected) == 0, "child %d said \"%s\", expected \"%s\"", c, line, expected);
        }
    }
    MPI_Info_free(&infos[0]);
    MPI_Info_free(&infos[1]);
    MPI_Barrier(inter);
    MPI_Comm_disconnect(&inter);

    int bad = failures, total = 0;
    MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && total == 0)
        printf("spawn_multiple ok\n");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    MPI_Comm parent_comm;

    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent_comm);
    if (parent_comm != MPI_COMM_NULL)
        child(parent_comm);
    else if (getenv("PMI_SPAWNED") || (argc > 1 && strcmp(argv[1], "child") == 0))
        fail("spawned, but MPI_Comm_get_parent is MPI_COMM_NULL");
    else
        parent();
    MPI_Finalize();
    return finish();
}
