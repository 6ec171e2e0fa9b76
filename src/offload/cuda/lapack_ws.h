/*
 * lapack_ws.h - cuSOLVER workspaces for lapack.c (lapack_ws.c): the sizes
 * a workspace query answered, remembered per function and shape until the
 * backend stops, and a workspace of at most GPC_WS_KEEP bytes kept
 * between calls (grow-only, held out of the pool's per-call count, freed
 * at stop by gpc_ws_forget, gpc.h); a larger one is the call's own, from
 * the pool, back after a wait. Under the frontend's one-call lock, with
 * the backend's context current.
 */
#ifndef GPUOFFLOAD_LAPACK_WS_H
#define GPUOFFLOAD_LAPACK_WS_H

#include <stddef.h>
#include <stdint.h>

#include "gpc.h"

#define GPC_WS_KEEP ((size_t)4 << 20)

/* A generic-API workspace: device bytes, host bytes (most functions want
 * none). kept: the kept one, else the call's own. */
struct gpc_ws {
	gpc_dptr dev;
	void *host;
	size_t dbytes, hbytes;
	int kept;
};

/* w->dbytes and w->hbytes set: the workspace in w->dev/w->host. 0, or -1
 * (nothing to give back). */
int gpc_ws_get(struct gpc_ws *w);
/* After the work that used it: the call's own back (after a wait); w
 * zeroed either way. */
void gpc_ws_put(struct gpc_ws *w);

/* The sizes a workspace query answered, for one function: the query is
 * made again only for another shape (key: every argument it takes but
 * the handle and the pointers) or after a stop. */
struct gpc_wsq {
	int have;
	unsigned gen;           /* the stop count when answered */
	int64_t key[8];
	size_t dbytes, hbytes;
};

/* 1 and the sizes in w when q holds this key's answer since the last
 * stop, else 0. */
int gpc_wsq_hit(const struct gpc_wsq *q, const int64_t key[8],
		struct gpc_ws *w);
void gpc_wsq_put(struct gpc_wsq *q, const int64_t key[8],
		 const struct gpc_ws *w);

#endif
