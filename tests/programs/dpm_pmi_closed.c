/*
 * dpm_pmi_closed.c - dpm's libpmi and libpmi2 when the PMI connection is
 * gone: every call must return an error code, never crash or hang (a
 * write to a closed socket must not raise SIGPIPE).
 *
 * Usage: dpm_pmi_closed before-init    started directly: PMI_FD is a socket
 *                                      whose peer is already closed
 *        dpm_pmi_closed mid-request    started directly: the peer reads the
 *                                      first request, then closes
 *        dpm_pmi_closed after-init     under dpm (PMI-2): init, then the
 *                                      connection is closed under the library
 *
 * Prints one line per call, "closed <api> <call> rc=N", then "closed MODE
 * done". A wrong outcome prints "closed FAIL ..." and exits 1.
 */
#include <pmi.h>
#include <pmi2.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* rc must be an error, and (want != 0) exactly want. */
static void expect_error(const char *api, const char *call, int rc, int want)
{
    printf("closed %s %s rc=%d\n", api, call, rc);
    fflush(stdout);
    if (rc == 0 || (want != 0 && rc != want)) {
        printf("closed FAIL %s %s rc=%d expected %d\n", api, call, rc, want);
        exit(1);
    }
}

/* A socket for PMI_FD and its peer. With reads > 0 a child holds the peer,
 * reads that many times and exits (a server that dies mid-request);
 * otherwise the peer is closed at once. */
static void pmi_fd_set(int reads)
{
    int sv[2];
    char fd[16];

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) {
        perror("socketpair");
        exit(2);
    }
    if (reads > 0) {
        pid_t pid = fork();
        if (pid == 0) {
            char buf[4096];
            close(sv[0]);
            for (int i = 0; i < reads; i++)
                if (read(sv[1], buf, sizeof buf) <= 0)
                    break;
            _exit(0);
        }
    }
    close(sv[1]);
    snprintf(fd, sizeof fd, "%d", sv[0]);
    setenv("PMI_FD", fd, 1);
    setenv("PMI_RANK", "0", 1);
    setenv("PMI_SIZE", "2", 1);
    unsetenv("PMI_PORT");
}

/* Both libraries' init against a dead peer, then calls after the failure. */
static void standalone(int reads)
{
    int spawned, size, rank, appnum, init = 1;
    char value[64];

    pmi_fd_set(reads);
    expect_error("pmi1", "PMI_Init", PMI_Init(&spawned), PMI_FAIL);
    PMI_Initialized(&init);
    if (init != PMI_FALSE) {
        printf("closed FAIL pmi1 initialized after a failed PMI_Init\n");
        exit(1);
    }
    expect_error("pmi1", "PMI_Barrier", PMI_Barrier(), PMI_ERR_INIT);

    pmi_fd_set(reads);
    expect_error("pmi2", "PMI2_Init", PMI2_Init(&spawned, &size, &rank, &appnum), PMI2_FAIL);
    if (PMI2_Initialized()) {
        printf("closed FAIL pmi2 initialized after a failed PMI2_Init\n");
        exit(1);
    }
    expect_error("pmi2", "PMI2_KVS_Get", PMI2_KVS_Get(NULL, -1, "k", value, sizeof value, NULL), PMI2_ERR_INIT);
    while (wait(NULL) > 0)
        ;
}

/* Under dpm: a working connection that goes away under the library. */
static void after_init(void)
{
    int spawned, size, rank, appnum, fd = atoi(getenv("PMI_FD") ? getenv("PMI_FD") : "-1");
    char value[64];

    if (PMI2_Init(&spawned, &size, &rank, &appnum) != PMI2_SUCCESS || fd < 0) {
        printf("closed FAIL after-init: PMI2_Init failed or no PMI_FD\n");
        exit(1);
    }
    if (PMI2_KVS_Put("before-close", "v") != PMI2_SUCCESS) {
        printf("closed FAIL after-init: put before the close failed\n");
        exit(1);
    }
    /* The server end is still open; make ours fail both ways. */
    shutdown(fd, SHUT_RDWR);
    expect_error("pmi2", "PMI2_KVS_Put", PMI2_KVS_Put("k", "v"), PMI2_FAIL);
    expect_error("pmi2", "PMI2_KVS_Fence", PMI2_KVS_Fence(), PMI2_FAIL);
    expect_error("pmi2", "PMI2_KVS_Get", PMI2_KVS_Get(NULL, -1, "before-close", value, sizeof value, NULL), PMI2_FAIL);
    expect_error("pmi2", "PMI2_Finalize", PMI2_Finalize(), PMI2_FAIL);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";

    if (strcmp(mode, "before-init") == 0)
        standalone(0);
    else if (strcmp(mode, "mid-request") == 0)
        standalone(1);
    else if (strcmp(mode, "after-init") == 0)
        after_init();
    else {
        fprintf(stderr, "usage: dpm_pmi_closed before-init|mid-request|after-init\n");
        return 2;
    }
    printf("closed %s done\n", mode);
    return 0;
}
