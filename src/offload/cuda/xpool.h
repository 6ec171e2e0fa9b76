/*
 * xpool.h - the copy engine's worker threads (xpool.c): one 2-D memcpy at
 * a time, split over the calling thread and the workers.
 *
 * Why threads: one core copies pageable memory into pinned memory at about
 * 9.5 GB/s on the H200 machine, far below the bus (55 GB/s pinned); 8
 * threads reach 23, 16 reach 38 (docs/offload.md, "Copies"). The workers
 * exist only between gpc_xpool_start and gpc_xpool_stop (the backend's
 * start and stop: never at load time), sleep on a condition variable
 * while no copy runs, block every signal (the program's handlers never run
 * on them), and make no CUDA call. A forked child never calls in here
 * (gpu.c's fork rule), so it never meets a pool whose threads it lacks.
 */
#ifndef GPUOFFLOAD_XPOOL_H
#define GPUOFFLOAD_XPOOL_H

#include <stdint.h>

/* The number of copy threads (the caller included) to use when not told:
 * min(8, CPUs this thread may run on), at least 1. */
int gpc_xpool_default_threads(void);

/* Start nthreads - 1 workers (nthreads <= 0: the default). Fewer start if
 * pthread_create fails (the pool then copies with what it has). 0. */
int gpc_xpool_start(int nthreads);

/* Stop and join every worker; returns when none is left. */
void gpc_xpool_stop(void);

/* Threads a copy uses now (the caller included). */
int gpc_xpool_threads(void);

/* Copy `rows` rows of `width` bytes, `spitch` apart in src and `dpitch`
 * apart in dst, with every thread of the pool; returns when all is
 * copied. Cannot fail. Copies too small to gain from threads run on the
 * caller alone. */
void gpc_xpool_copy(void *dst, uint64_t dpitch, const void *src,
		   uint64_t spitch, uint64_t width, uint64_t rows);

#endif
