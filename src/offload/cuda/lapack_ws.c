/*
 * lapack_ws.c - cuSOLVER workspaces of lapack.c (lapack_ws.h).
 */
#define _GNU_SOURCE
#include "compat.h"
#include <stdlib.h>
#include <string.h>

#include "lapack_ws.h"

/* The workspace kept between calls (from the pool, held; freed at stop:
 * gpc_ws_forget). */
static struct {
	gpc_dptr dev;
	size_t cap;
	void *host;
	size_t hcap;
} gpc__wk;

/* Bumped at every stop: the next start may be on another GPU (a give-back
 * and a new lease), whose cuSOLVER may want other workspace sizes, so the
 * sizes remembered below are then asked again (a size too small for the
 * new device would let it write past the workspace). */
static unsigned gpc__q_gen;

void gpc_ws_forget(void)
{
	gpc__q_gen++;
	if (gpc__wk.dev)
		gpc_pool_free(gpc__wk.dev);
	free(gpc__wk.host);
	memset(&gpc__wk, 0, sizeof gpc__wk);
}

int gpc_ws_get(struct gpc_ws *w)
{
	if (w->dbytes > GPC_WS_KEEP || w->hbytes > GPC_WS_KEEP) {
		w->dev = gpc_scratch(w->dbytes);
		w->host = w->hbytes ? malloc(w->hbytes) : NULL;
		return w->dev && (!w->hbytes || w->host) ? 0 : -1;
	}
	w->kept = 1;
	if (gpc__wk.cap < w->dbytes || !gpc__wk.dev) {
		/* Grow: the old one may still be read by queued work, which
		 * the wait lets finish. */
		if (gpc__wk.dev) {
			if (gpc_sync() != 0)
				return -1;
			gpc_pool_free(gpc__wk.dev);
		}
		gpc__wk.cap = 0;
		if (!(gpc__wk.dev = gpc_scratch(w->dbytes)))
			return -1;
		gpc_pool_hold(gpc__wk.dev);     /* kept beyond this call */
		gpc__wk.cap = w->dbytes ? w->dbytes : 1;
	}
	if (gpc__wk.hcap < w->hbytes) {
		void *h;
		if (gpc_sync() != 0 || !(h = malloc(w->hbytes)))
			return -1;
		free(gpc__wk.host);
		gpc__wk.host = h;
		gpc__wk.hcap = w->hbytes;
	}
	w->dev = gpc__wk.dev;
	w->host = w->hbytes ? gpc__wk.host : NULL;
	return 0;
}

void gpc_ws_put(struct gpc_ws *w)
{
	if (!w->kept && (w->dev || w->host)) {
		/* The call's own: back after the work that uses it. */
		(void)gpc_sync();
		if (w->dev)
			gpc_pool_free(w->dev);
		free(w->host);
	}
	memset(w, 0, sizeof *w);
}

int gpc_wsq_hit(const struct gpc_wsq *q, const int64_t key[8],
		      struct gpc_ws *w)
{
	if (!q->have || q->gen != gpc__q_gen ||
	    memcmp(q->key, key, sizeof q->key) != 0)
		return 0;
	w->dbytes = q->dbytes;
	w->hbytes = q->hbytes;
	return 1;
}

void gpc_wsq_put(struct gpc_wsq *q, const int64_t key[8],
		       const struct gpc_ws *w)
{
	memcpy(q->key, key, sizeof q->key);
	q->dbytes = w->dbytes;
	q->hbytes = w->hbytes;
	q->gen = gpc__q_gen;
	q->have = 1;
}

