/* mpir_job.c - a job for dpm's debugger tests (crates/dpm/tests/mpir.rs).
 * The first thing main does is create DIR/main.<pid> (a rank held for a
 * debugger has not run main: the file is not there). Then MPI_Init; with
 * `spawn N`, the job spawns N copies of this program (without `spawn`);
 * each rank prints "mpir_job <world|child> rank R pid P ready", waits for
 * DIR/go, joins a barrier and ends 0. Built for MPICH (bin/) and Open MPI
 * (bin/ompi/). Usage: mpir_job DIR [spawn N] */
#include <mpi.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    char path[4096], self[4096];
    if (argc != 2 && !(argc == 4 && strcmp(argv[2], "spawn") == 0)) {
        fprintf(stderr, "usage: mpir_job DIR [spawn N]\n");
        return 2;
    }
    snprintf(path, sizeof path, "%s/main.%d", argv[1], (int)getpid());
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    if (fd >= 0)
        close(fd);
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm parent, children = MPI_COMM_NULL;
    MPI_Comm_get_parent(&parent);
    if (argc == 4) {
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        self[n > 0 ? n : 0] = '\0';
        char *args[] = {argv[1], NULL};
        MPI_Comm_spawn(self, args, atoi(argv[3]), MPI_INFO_NULL, 0, MPI_COMM_WORLD, &children, MPI_ERRCODES_IGNORE);
    }
    printf("mpir_job %s rank %d pid %d ready\n", parent == MPI_COMM_NULL ? "world" : "child", rank, (int)getpid());
    fflush(stdout);
    snprintf(path, sizeof path, "%s/go", argv[1]);
    while (access(path, F_OK) != 0)
        usleep(10000);
    MPI_Barrier(MPI_COMM_WORLD);
    if (children != MPI_COMM_NULL)
        MPI_Comm_disconnect(&children);
    if (parent != MPI_COMM_NULL)
        MPI_Comm_disconnect(&parent);
    MPI_Finalize();
    return 0;
}
