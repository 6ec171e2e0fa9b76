/*
 * xfer.h - host<->device copies of libgpuoffload-cuda.so: the one place
 * that moves operand data, so that how it is moved (pinned staging,
 * chunking, double buffering, registering the caller's pages) is decided
 * here and nowhere else.
 *
 * Every function is called with the backend's context current and under
 * the frontend's one-call-at-a-time lock (backend.h); none prints.
 * Copies are 2-D: `rows` rows of `width` bytes, `spitch` bytes apart in
 * the source and `dpitch` in the destination (a column-major matrix is
 * `cols` rows of `rows * elem` bytes).
 */
#ifndef GPUOFFLOAD_XFER_H
#define GPUOFFLOAD_XFER_H

#include <stdint.h>

#include "cuapi.h"

/*
 * How copies are made (tests and bench/offload/xfer_bench.c set them; the
 * backend uses the defaults, gpc_xfer_start()). 0 in a field: its default.
 */
struct gpc_xfer_tune {
	uint64_t chunk;         /* pinned staging chunk, bytes (16 MiB) */
	int nbuf;               /* chunks in flight, 2..8 (3) */
	int threads;            /* memcpy threads incl. the caller
	                         * (gpc_xpool_default_threads: min(8, CPUs)) */
	uint64_t reg_min;       /* register the caller's buffer (instead of
	                         * staging) from this many bytes on;
	                         * UINT64_MAX never (the default: measured) */
	uint64_t keep;          /* staging for GPO_BE_STAGE results kept
	                         * between calls, bytes (gpc_stage_keep()) */
	int fault_threads;      /* prefault workers (xfault.h;
	                         * GPC_XFAULT_THREADS); < 0: none */
};

/* Prefault workers by default: populating fresh memory scales to about 4
 * threads on the H200 machine and gets slower beyond (page-table locks):
 * 224 ms per 512 MiB on 1, 91 on 2, 50 on 4, 90 on 8. The backend's
 * start reads GPU_OFFLOAD_CUDA_PREFAULT=0 (for benchmarks): none. */
#define GPC_XFAULT_THREADS 4

/* Results staged with GPO_BE_STAGE are held in pinned host blocks that are
 * kept across calls up to gpc_stage_keep() bytes in all (beyond it,
 * released at the end of the call: such a call pays cuMemHostAlloc, about
 * 0.6 ms per MiB, each time); gpc_xfer_trim releases blocks no call used
 * in the last GPC_STAGE_IDLE_CALLS calls; gpc_xfer_idle (the backend's
 * idle thread) and gpc_xfer_stop all of them (the policy stops the
 * backend when it gives the GPU back). The bound:
 * 1/32 of the machine's memory, at least GPC_STAGE_KEEP_MIN and at most
 * GPC_STAGE_KEEP_MAX (4 GiB on a 128 GiB machine: an in-out dgemm
 * operand of n = 16384 is 2 GiB). */
#define GPC_STAGE_KEEP_MIN (256ull << 20)
#define GPC_STAGE_KEEP_MAX (4ull << 30)
#define GPC_STAGE_IDLE_CALLS 8
uint64_t gpc_stage_keep(void);

/* Create the streams and host buffers copies need: the copy stream,
 * t->nbuf pinned chunks (cuMemHostAlloc) with an event each, and the
 * worker threads (xpool.h). t NULL: the defaults. 0, or -1 with
 * nothing left behind. Idempotent while started. */
int gpc_xfer_start_tuned(const struct gpc_xfer_tune *t);
int gpc_xfer_start(void);

/* Release everything gpc_xfer_start and later copies made (staged
 * results are discarded); the worker threads are joined before it
 * returns. */
void gpc_xfer_stop(void);

/* Copy host -> device; returns once the data is on the device and `host`
 * may change. 0, or -1 (the device contents are then undefined). */
int gpc_h2d(gpc_dptr dev, uint64_t dpitch, const void *host, uint64_t spitch,
	    uint64_t width, uint64_t rows);

/* Copy device -> host. flags 0: straight into `host`, which is partly
 * written if it fails. GPO_BE_STAGE (backend.h): into staging; `host` is
 * written only by gpc_commit(). 0, or -1 (nothing staged by this call). */
int gpc_d2h(void *host, uint64_t dpitch, gpc_dptr dev, uint64_t spitch,
	    uint64_t width, uint64_t rows, unsigned flags);

/* A staged result filled in parts (the gemm pipeline's in-out C, one
 * column panel at a time, xgemm.c): gpc_stage_open takes staging for
 * `rows` rows of `width` bytes bound for `host` (`dpitch` apart);
 * gpc_stage_part reads its rows [row0, row0 + nrows) from `dev` (the
 * device address of row row0, `spitch` apart); gpc_stage_close makes it
 * one staged result, which gpc_commit writes like those of gpc_d2h.
 * Until closed it is none: gpc_commit never writes it, gpc_discard
 * forgets it. One open at a time. 0, or -1 (open: nothing taken; part:
 * the staging's contents undefined, close it not). */
int gpc_stage_open(void *host, uint64_t dpitch, uint64_t width,
		   uint64_t rows);
int gpc_stage_part(gpc_dptr dev, uint64_t spitch, uint64_t row0,
		   uint64_t nrows);
int gpc_stage_close(void);

/* Fault in the host range a later gpc_d2h (flags 0) will write, in the
 * background while the device computes (xfault.h): returns at once, never
 * changes the memory's contents, a hint that may do nothing. gpc_d2h
 * (flags 0), gpc_commit and gpc_discard wait for it first. */
void gpc_prefault(void *host, uint64_t pitch, uint64_t width, uint64_t rows);

/* Write every staged result to its destination and forget them (cannot
 * fail). */
void gpc_commit(void);

/* Forget the staged results. */
void gpc_discard(void);

/* Release staging blocks no call used in the last GPC_STAGE_IDLE_CALLS
 * calls, and all of them when they exceed the bound (does nothing while
 * results are staged). gpc_commit and gpc_discard end with it, so a
 * backend need not call it. */
void gpc_xfer_trim(void);

/* Release every staging block now, unless results are staged or a copy
 * runs (then nothing); returns the number freed. For the backend's idle
 * thread (pool.c), which calls it with the context current once the
 * backend went unused for a while: the only entry point that may come
 * from another thread than the frontend's call. */
int gpc_xfer_idle(void);

/* What the engine did, for tests and the bench. */
struct gpc_xfer_stats {
	uint64_t chunks;        /* chunk copies through pinned staging */
	uint64_t direct;        /* copies straight from/to pinned memory */
	uint64_t registered;    /* copies through a registered caller buffer */
	uint64_t stage_bytes;   /* staging blocks held now, bytes */
	int stage_blocks;
	int stage_pinned;       /* of which pinned */
	int threads;
};
void gpc_xfer_stats(struct gpc_xfer_stats *st);

#endif
