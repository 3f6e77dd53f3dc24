/*
 * progress.c - checks that output forwarding is byte-exact: carriage
 * returns (progress bars) and the lack of a trailing newline between
 * writes must survive the launcher unchanged.
 *
 * Not an MPI program.  Writes "10%\r20%\r30%\rdone\n" as four separate,
 * flushed writes with a short pause between them, so a launcher that
 * buffers by line or rewrites '\r' shows up in a byte comparison.
 */
#include <stdio.h>
#include <time.h>

static void pause_briefly(void)
{
    struct timespec ts = { 0, 50 * 1000 * 1000 };
    nanosleep(&ts, NULL);
}

int main(void)
{
    const char *steps[] = { "10%\r", "20%\r", "30%\r", "done\n" };

    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        fputs(steps[i], stdout);
        fflush(stdout);
        pause_briefly();
    }
    return 0;
}
