/*
 * lines.c - checks that each rank's lines arrive whole without -l.
 *
 * Not an MPI program.  Prints N lines (argv[1], default 200) of the form
 * "rank R line I end", each made of five unbuffered printf calls - five
 * write(2)s - so a launcher that forwards every write on its own
 * interleaves two ranks' pieces inside a line.  R is PMI_RANK.  With
 * argv[2] = U, it sleeps U microseconds after each line (so the launcher
 * reads each write on its own, as it does for a rank that is not chatty).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 200;
    long pause_us = argc > 2 ? atol(argv[2]) : 0;
    struct timespec pause = { pause_us / 1000000, (pause_us % 1000000) * 1000 };
    const char *rank = getenv("PMI_RANK");

    setvbuf(stdout, NULL, _IONBF, 0);
    for (int i = 0; i < n; i++) {
        printf("rank ");
        printf("%s", rank ? rank : "?");
        printf(" line ");
        printf("%d", i);
        printf(" end\n");
        if (pause_us > 0)
            nanosleep(&pause, NULL);
    }
    return 0;
}
