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

/* Create the streams and host buffers copies need. 0 or -1. */
int gpc_xfer_start(void);

/* Release everything gpc_xfer_start and later copies made (staged
 * results are discarded). */
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

/* Write every staged result to its destination and forget them (cannot
 * fail). */
void gpc_commit(void);

/* Forget the staged results. */
void gpc_discard(void);

/* Release host buffers not used for a while (called between calls). */
void gpc_xfer_trim(void);

#endif
