/*
 * stdin_echo.c - checks stdin forwarding: the launcher's stdin goes to
 * rank 0 only, and every other rank reads an immediate end of file (as
 * from /dev/null) instead of blocking or sharing the terminal.
 *
 * Rank 0 reads stdin to the end and prints
 *     rank 0 read N bytes: <first line>
 * Other ranks print "rank R stdin eof", or a FAIL line if stdin was closed,
 * delivered data, or did not answer within 2 s.
 *
 * Hydra 5.0.2 differs (observed): every rank gets a pipe, the other ranks'
 * pipes never reach EOF (so they FAIL here), and more than 64 KiB of stdin
 * makes it quit with "process reading stdin too slowly; can't keep up".
 */
#include <mpi.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIRST_LINE_MAX 256

static int stdin_read_all(void)
{
    char buf[65536], first[FIRST_LINE_MAX + 1] = "";
    size_t first_len = 0;
    int first_done = 0;
    long total = 0;

    for (;;) {
        ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            printf("rank 0 stdin FAIL read: %s\n", strerror(errno));
            return 1;
        }
        if (n == 0)
            break;
        for (ssize_t i = 0; i < n && !first_done; i++) {
            if (buf[i] == '\n' || first_len == FIRST_LINE_MAX)
                first_done = 1;
            else
                first[first_len++] = buf[i];
        }
        total += n;
    }
    first[first_len] = '\0';
    printf("rank 0 read %ld bytes: %s\n", total, first);
    return 0;
}

static int stdin_expect_eof(int rank)
{
    struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
    char c;

    int ready = poll(&pfd, 1, 2000);
    if (ready == 0) {
        printf("rank %d stdin FAIL blocks (no EOF within 2 s)\n", rank);
        return 1;
    }
    ssize_t n = read(STDIN_FILENO, &c, 1);
    if (n == 0) {
        printf("rank %d stdin eof\n", rank);
        return 0;
    }
    if (n > 0)
        printf("rank %d stdin FAIL got data\n", rank);
    else
        printf("rank %d stdin FAIL read: %s\n", rank, strerror(errno));
    return 1;
}

int main(int argc, char **argv)
{
    int rank, rc;
    struct stat st;

    /* Look before MPI_Init: a closed fd 0 could be reused by MPI's sockets. */
    int stdin_open = fstat(STDIN_FILENO, &st) == 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);

    if (!stdin_open) {
        printf("rank %d stdin FAIL closed\n", rank);
        rc = 1;
    } else if (rank == 0) {
        rc = stdin_read_all();
    } else {
        rc = stdin_expect_eof(rank);
    }
    fflush(stdout);

    MPI_Finalize();
    return rc;
}
