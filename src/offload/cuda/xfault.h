/*
 * xfault.h - the copy engine's prefault workers (xfault.c): fault in the
 * host memory a device-to-host copy will write while the device still
 * computes, so that the page faults and the kernel's zeroing of fresh
 * pages leave the copy's critical path.
 *
 * Why: a pure output is often fresh memory (numpy's np.empty of the
 * result): its first touch costs about 224 ms per 512 MiB on one thread
 * on the H200 machine, 50 ms on 4 (docs/offload.md, "Copies"), and
 * without this it happens in the memcpy workers of the copy out, after
 * the kernel. madvise(MADV_POPULATE_WRITE) (Linux 5.14) faults pages in
 * writable without writing them: the memory's contents never change.
 * Older kernels and mappings it does not take answer an error, and then
 * nothing is done: it is only a hint.
 *
 * Called under the frontend's one-call-at-a-time lock, like the rest of
 * the engine; every function of the engine that writes host memory
 * (gpc_d2h, gpc_commit) and the end of a failed call (gpc_discard) first
 * waits for every prefault job (gpc_xfault_wait), so that no madvise of
 * ours runs while we write that memory or after the call returned.
 */
#ifndef GPUOFFLOAD_XFAULT_H
#define GPUOFFLOAD_XFAULT_H

#include <stdint.h>

/* Start n prefault workers (n <= 0: none; then gpc_prefault does
 * nothing). Fewer start if pthread_create fails. 0. */
int gpc_xfault_start(int n);

/* Wait for every job, then stop and join the workers. */
void gpc_xfault_stop(void);

/* Queue the host range of a 2-D copy destination (`rows` rows of `width`
 * bytes, `pitch` apart) for prefaulting and return at once. Ranges of at
 * least GPC_XFAULT_MIN bytes only (below that the copy's own faults cost
 * less than a hand-off) whose rows are less than a page apart (else the
 * pages between them, never written, would be faulted in too); at most GPC_XFAULT_JOBS ranges between waits
 * (more are ignored). Never writes the memory; cannot fail. */
#define GPC_XFAULT_MIN (4ull << 20)
#define GPC_XFAULT_JOBS 8
void gpc_xfault_add(void *host, uint64_t pitch, uint64_t width,
		    uint64_t rows);

/* Return once no prefault job is queued or running. */
void gpc_xfault_wait(void);

/* For tests (xfertest: tests/offload/cuda/xfertest*.c) and the bench. */
struct gpc_xfault_stats {
	uint64_t jobs;          /* ranges queued */
	uint64_t bytes;         /* bytes in them (pages) */
	uint64_t pieces;        /* pieces done */
	uint64_t waits;         /* gpc_xfault_wait calls that found work */
	int workers;
	int errors;             /* madvise answers other than 0 */
};
void gpc_xfault_stats(struct gpc_xfault_stats *st);
/* Test hook: called by a worker before each piece, outside the lock. */
void gpc_xfault_set_hook(void (*hook)(void));
/* Threads in gpc_xfault_wait now. */
int gpc_xfault_waiting(void);

#endif
