/*
 * victim.h - helpers shared by the failure-injection programs (abort, segv,
 * nofinalize, pmi2_abort): which rank misbehaves, and how the others wait.
 *
 * The bystander ranks wait a bounded 30 s instead of forever, so a launcher
 * that fails to kill them leaves no process behind for long, while a test
 * that expects a fast exit (about 1 s) still sees the difference clearly.
 */
#ifndef VICTIM_H
#define VICTIM_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define VICTIM_WAIT_SECONDS 30

/* argv[index] as an int, or fallback when absent. */
static inline int arg_int(int argc, char **argv, int index, int fallback)
{
    return argc > index ? atoi(argv[index]) : fallback;
}

/* The misbehaving rank: argv[1] (default 1), clamped into the job so a
 * one-rank job still fails instead of sleeping. */
static inline int victim_rank(int argc, char **argv, int size)
{
    int victim = arg_int(argc, argv, 1, 1);
    return victim < size ? victim : size - 1;
}

/* Sleep the full time even when signals interrupt sleep(). */
static inline void bystander_wait(int rank)
{
    printf("rank %d waiting\n", rank);
    fflush(stdout);
    time_t end = time(NULL) + VICTIM_WAIT_SECONDS;
    for (time_t now = time(NULL); now < end; now = time(NULL))
        sleep((unsigned)(end - now));
    printf("rank %d was not killed after %d s\n", rank, VICTIM_WAIT_SECONDS);
    fflush(stdout);
}

#endif
