/*
 * xsmall.h - the small-operand path of libgpuoffload-cuda.so: the
 * operands of a small call live in one device arena whose image is one
 * pinned host buffer, so that a call moves them in one copy each way, on
 * the compute stream, and waits for the device once (with LAPACK's info,
 * whose slots are at the arena's start).
 *
 * Why: on the H200 a 16x16 call spent most of its time in waits, not in
 * copies (each operand's copy was its own synchronised copy, each info
 * read two more waits): docs/offload.md, "Small calls". The large-copy
 * engine (xfer.h) is for operands beyond the arena.
 *
 * The image is the truth for the host side: to_device writes it (the
 * device gets it at gpc_small_begin), gpc_small_end copies the device back
 * into it, to_host reads it. Every function runs under the frontend's
 * one-call-at-a-time lock; gpc_small_start/stop/begin/end with the
 * backend's context current, the others need no context (no driver call).
 */
#ifndef GPUOFFLOAD_XSMALL_H
#define GPUOFFLOAD_XSMALL_H

#include <stdint.h>

#include "cuapi.h"

#define GPC_SMALL_BYTES (1u << 20)      /* the arena and its image */
#define GPC_SMALL_INFO 256u             /* info slots at its start */
#define GPC_SMALL_ALIGN 256u            /* each operand's alignment */

/* The arena (cuMemAlloc) and its image (cuMemHostAlloc). 0 or -1 (nothing
 * left behind). */
int gpc_small_start(void);
void gpc_small_stop(void);

/* An operand of `bytes` in the arena: 1 (*p set) or 0 (no room, or too
 * big: the caller uses the pool). */
int gpc_small_alloc(gpc_dptr *p, uint64_t bytes);
/* Is [p, p + span) inside one of the arena's operands? 1 yes, 0 not in
 * the arena, -1 in the arena but beyond its operand (refuse the copy). */
int gpc_small_owns(gpc_dptr p, uint64_t span);
void gpc_small_release(gpc_dptr p);

/* 2-D copies between the caller's memory and an arena operand's image
 * (xfer.h's arguments). d2h with GPO_BE_STAGE records the copy for
 * gpc_small_commit. Cannot fail for an operand gpc_small_owns. */
void gpc_small_h2d(gpc_dptr dev, uint64_t dpitch, const void *host,
		   uint64_t spitch, uint64_t width, uint64_t rows);
int gpc_small_d2h(void *host, uint64_t dpitch, gpc_dptr dev, uint64_t spitch,
		  uint64_t width, uint64_t rows, unsigned flags);
void gpc_small_commit(void);
void gpc_small_discard(void);

/* run(): before the kernels, the image's operands go to the device
 * (queued on `s`); gpc_small_info gives each cuSOLVER call of the run its
 * own info slot (device int); gpc_small_end queues the copy back (the
 * arena's operands and the slots used), waits for `s` once and reads the
 * slots: 0 with *info the first nonzero one (0 if none), or -1 (the wait
 * or a copy failed, or a slot is negative: an argument refused). `failed`:
 * the kernels failed to queue: only wait, so that no copy is in flight. */
int gpc_small_begin(gpc_stream s);
int *gpc_small_info(void);
int gpc_small_end(gpc_stream s, int failed, int *info);

#endif
