/*
 * benchclock.h - the one clock of the offloader's benchmark programs
 * (bench/offload_small.c and the programs of bench/offload/): seconds of
 * CLOCK_MONOTONIC, a double, for differences within one run.
 */
#ifndef GPUOFFLOAD_BENCHCLOCK_H
#define GPUOFFLOAD_BENCHCLOCK_H

#include <time.h>

static inline double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
