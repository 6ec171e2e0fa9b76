/*
 * xfer.c - host<->device copies (xfer.h): the copy engine.
 *
 * Why not one cuMemcpy: from pageable memory the driver copies at 7 GB/s
 * host-to-device and 12 device-to-host on the H200 machine, from pinned
 * memory at 55. Pinning the caller's buffer (cuMemHostRegister) costs more
 * than it saves (measured per size: docs/offload.md, "Copies"), and
 * cuMemHostAlloc is slow (300 ms per 512 MiB), so:
 *
 * - gpc_xfer_start allocates a few pinned chunks once (3 x 16 MiB), each
 *   with an event, and starts the memcpy threads (xpool.h).
 * - A copy is cut into pieces of at most a chunk: a run of whole rows, or
 *   part of one row when a row is longer than a chunk. Host to device:
 *   the threads pack piece i into a free chunk while the DMA of piece
 *   i-1 runs; a chunk is reused only after its event says its DMA ended.
 *   Device to host: up to nbuf pieces are in flight; the threads unpack
 *   each as its event completes and its chunk takes the next piece.
 * - Staged results (GPO_BE_STAGE) go by one DMA into pinned staging
 *   blocks kept across calls (a fresh malloc costs page faults: 401 ms per
 *   512 MiB there; cuMemHostAlloc, 301 ms, is cheaper than that once and
 *   free afterwards); gpc_commit copies them out with the threads. If
 *   pinned memory cannot be had, a block is plain memory (filled through
 *   the chunks), kept the same way. The blocks, commit and discard are
 *   xstage.c's.
 * - A pure output's host range may be prefaulted while the device
 *   computes (gpc_prefault, xfault.c); a straight copy out, commit and
 *   discard wait for that first.
 *
 * On a failed CUDA call the stream is synchronised before returning, so
 * that no DMA still reads or writes a chunk or the caller's memory.
 *
 * Locking: the frontend serialises calls, but gpc_xfer_idle comes from
 * the backend's idle thread (pool.c); gpc_xmu orders it against every
 * entry point, and it only tries the lock (a copy in progress means the
 * engine is not idle).
 */
#define _GNU_SOURCE
#include "compat.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "xfault.h"
#include "xfer_int.h"
#include "xpool.h"

struct gpc_xstate gpc_xst;
pthread_mutex_t gpc_xmu = PTHREAD_MUTEX_INITIALIZER;

/* ---- Start and stop ------------------------------------------------------- */

static void gpc__stop(void)
{
	gpc_xst_discard();
	gpc_xst_free_unused();
	gpc_xfault_stop();
	gpc_xpool_stop();
	for (int i = 0; i < GPC_NBUF_MAX; i++) {
		if (gpc_xst.ev[i])
			(void)gpc_cu.EventDestroy(gpc_xst.ev[i]);
		if (gpc_xst.pin[i])
			(void)gpc_cu.MemFreeHost(gpc_xst.pin[i]);
		gpc_xst.ev[i] = NULL;
		gpc_xst.pin[i] = NULL;
		gpc_xst.busy[i] = 0;
	}
	if (gpc_xst.s)
		(void)gpc_cu.StreamDestroy(gpc_xst.s);
	gpc_xst.s = NULL;
	gpc_xst.on = 0;
}

void gpc_xfer_stop(void)
{
	pthread_mutex_lock(&gpc_xmu);
	gpc__stop();
	pthread_mutex_unlock(&gpc_xmu);
}

static int gpc__start(const struct gpc_xfer_tune *t)
{
	struct gpc_xfer_tune d = { 0 };

	if (gpc_xst.on)
		return 0;
	if (t)
		d = *t;
	if (!d.chunk)
		d.chunk = 16ull << 20;
	if (d.nbuf < 2)
		d.nbuf = 3;
	if (d.nbuf > GPC_NBUF_MAX)
		d.nbuf = GPC_NBUF_MAX;
	if (d.threads <= 0)
		d.threads = gpc_xpool_default_threads();
	if (!d.reg_min)
		d.reg_min = UINT64_MAX;
	if (!d.keep)
		d.keep = gpc_stage_keep();
	if (!t) {
		const char *pf = secure_getenv("GPU_OFFLOAD_CUDA_PREFAULT");
		if (pf && !strcmp(pf, "0"))
			d.fault_threads = -1;
	}
	if (!d.fault_threads)
		d.fault_threads = GPC_XFAULT_THREADS;
	memset(&gpc_xst, 0, sizeof gpc_xst);
	gpc_xst.t = d;
	if (gpc_cu.StreamCreate(&gpc_xst.s, GPC_STREAM_NON_BLOCKING) != 0) {
		gpc_xst.s = NULL;
		return -1;
	}
	for (int i = 0; i < d.nbuf; i++) {
		if (gpc_cu.MemHostAlloc(&gpc_xst.pin[i], d.chunk,
					GPC_MEMHOSTALLOC_PORTABLE) != 0) {
			gpc_xst.pin[i] = NULL;
			gpc__stop();
			return -1;
		}
		if (gpc_cu.EventCreate(&gpc_xst.ev[i], GPC_EVENT_DISABLE_TIMING) != 0) {
			gpc_xst.ev[i] = NULL;
			gpc__stop();
			return -1;
		}
	}
	gpc_xpool_start(d.threads);
	gpc_xfault_start(d.fault_threads);
	gpc_xst.on = 1;
	return 0;
}

int gpc_xfer_start_tuned(const struct gpc_xfer_tune *t)
{
	int rc;

	pthread_mutex_lock(&gpc_xmu);
	rc = gpc__start(t);
	pthread_mutex_unlock(&gpc_xmu);
	return rc;
}

int gpc_xfer_start(void)
{
	return gpc_xfer_start_tuned(NULL);
}

/* ---- Pieces ---------------------------------------------------------------- */

/* A piece of a 2-D copy: k rows from row r, bytes [off, off + len) of each. */
struct gpc__piece {
	uint64_t r, k, off, len;
};

struct gpc__cursor {
	uint64_t width, rows, chunk;
	uint64_t r, off;
};

/* The next piece, or 0 when the copy is done. */
static int gpc__next(struct gpc__cursor *c, struct gpc__piece *p)
{
	if (c->r >= c->rows)
		return 0;
	p->r = c->r;
	p->off = c->off;
	if (c->width <= c->chunk) {
		uint64_t k = c->chunk / c->width;
		if (k > c->rows - c->r)
			k = c->rows - c->r;
		p->k = k;
		p->len = c->width;
		c->r += k;
	} else {
		p->k = 1;
		p->len = c->width - c->off < c->chunk ? c->width - c->off : c->chunk;
		c->off += p->len;
		if (c->off == c->width) {
			c->off = 0;
			c->r++;
		}
	}
	return 1;
}

static int gpc__2d(int to_dev, gpc_dptr dev, uint64_t devpitch, void *host,
		   uint64_t hostpitch, uint64_t width, uint64_t rows)
{
	struct gpc_memcpy2d c;

	memset(&c, 0, sizeof c);
	if (to_dev) {
		c.srcMemoryType = GPC_MEMORYTYPE_HOST;
		c.srcHost = host;
		c.srcPitch = hostpitch;
		c.dstMemoryType = GPC_MEMORYTYPE_DEVICE;
		c.dstDevice = dev;
		c.dstPitch = devpitch;
	} else {
		c.srcMemoryType = GPC_MEMORYTYPE_DEVICE;
		c.srcDevice = dev;
		c.srcPitch = devpitch;
		c.dstMemoryType = GPC_MEMORYTYPE_HOST;
		c.dstHost = host;
		c.dstPitch = hostpitch;
	}
	c.WidthInBytes = width;
	c.Height = rows;
	return gpc_cu.Memcpy2DAsync(&c, gpc_xst.s) != 0 ? -1 : 0;
}

/* End of a copy: wait for the stream (also after a failure: no DMA may
 * outlive the call); every chunk is free afterwards. */
static int gpc__finish(int rc)
{
	if (gpc_cu.StreamSynchronize(gpc_xst.s) != 0)
		rc = -1;
	for (int i = 0; i < gpc_xst.t.nbuf; i++)
		gpc_xst.busy[i] = 0;
	return rc;
}

/* Register [host, host + bytes) rounded out to pages; 0 on success. */
static int gpc__register(const void *host, uint64_t bytes, void **base)
{
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)host, b = a + bytes;

	a -= a % pg;
	b += (pg - b % pg) % pg;
	*base = (void *)a;
	return gpc_cu.MemHostRegister(*base, b - a,
				      GPC_MEMHOSTREGISTER_PORTABLE) ? -1 : 0;
}

/* Straight between the device and host memory the DMA can reach (pinned,
 * or registered now); 0 or -1. */
static int gpc__direct(int to_dev, gpc_dptr dev, uint64_t devpitch,
		       void *host, uint64_t hostpitch, uint64_t width,
		       uint64_t rows)
{
	int rc = gpc__2d(to_dev, dev, devpitch, host, hostpitch, width, rows);

	return gpc__finish(rc);
}

/* Through a registered caller buffer when the tuning says so; 1 when not
 * tried (too small, or registration refused: stage instead). */
static int gpc__via_register(int to_dev, gpc_dptr dev, uint64_t devpitch,
			     void *host, uint64_t hostpitch, uint64_t width,
			     uint64_t rows)
{
	uint64_t span = (rows - 1) * hostpitch + width;
	void *base;
	int rc;

	if (span < gpc_xst.t.reg_min || gpc__register(host, span, &base) != 0)
		return 1;
	rc = gpc__direct(to_dev, dev, devpitch, host, hostpitch, width, rows);
	(void)gpc_cu.MemHostUnregister(base);
	gpc_xst.stats.registered++;
	return rc;
}

/* ---- Host to device ------------------------------------------------------- */

static int gpc__h2d(gpc_dptr dev, uint64_t dpitch, const void *host,
		    uint64_t spitch, uint64_t width, uint64_t rows)
{
	struct gpc__cursor c = { width, rows, gpc_xst.t.chunk, 0, 0 };
	struct gpc__piece p;
	int b = 0, rc;

	if (!width || !rows)
		return 0;
	if (!gpc_xst.on)
		return -1;
	rc = gpc__via_register(1, dev, dpitch, (void *)(uintptr_t)host, spitch,
			       width, rows);
	if (rc != 1)
		return rc;
	rc = 0;
	while (gpc__next(&c, &p)) {
		if (gpc_xst.busy[b]) {
			gpc_xst.busy[b] = 0;
			if (gpc_cu.EventSynchronize(gpc_xst.ev[b]) != 0) {
				rc = -1;
				break;
			}
		}
		gpc_xpool_copy(gpc_xst.pin[b], p.len,
			      (const char *)host + p.r * spitch + p.off, spitch,
			      p.len, p.k);
		if (gpc__2d(1, dev + p.r * dpitch + p.off, dpitch, gpc_xst.pin[b],
			    p.len, p.len, p.k) != 0 ||
		    gpc_cu.EventRecord(gpc_xst.ev[b], gpc_xst.s) != 0) {
			rc = -1;
			break;
		}
		gpc_xst.busy[b] = 1;
		gpc_xst.stats.chunks++;
		b = (b + 1) % gpc_xst.t.nbuf;
	}
	return gpc__finish(rc);
}

int gpc_h2d(gpc_dptr dev, uint64_t dpitch, const void *host, uint64_t spitch,
	    uint64_t width, uint64_t rows)
{
	int rc;

	pthread_mutex_lock(&gpc_xmu);
	rc = gpc__h2d(dev, dpitch, host, spitch, width, rows);
	pthread_mutex_unlock(&gpc_xmu);
	return rc;
}

/* ---- Device to host ------------------------------------------------------- */

/* Through the chunks into pageable host memory: nbuf pieces in flight. */
static int gpc__d2h_chunked(void *host, uint64_t dpitch, gpc_dptr dev,
			    uint64_t spitch, uint64_t width, uint64_t rows)
{
	struct gpc__cursor c = { width, rows, gpc_xst.t.chunk, 0, 0 };
	struct gpc__piece inflight[GPC_NBUF_MAX];
	int head = 0, n = 0, rc = 0, more = 1;

	for (;;) {
		/* Fill every free chunk with the next piece. */
		while (more && n < gpc_xst.t.nbuf) {
			int b = (head + n) % gpc_xst.t.nbuf;
			struct gpc__piece *p = &inflight[b];
			if (!gpc__next(&c, p)) {
				more = 0;
				break;
			}
			if (gpc__2d(0, dev + p->r * spitch + p->off, spitch,
				    gpc_xst.pin[b], p->len, p->len, p->k) != 0 ||
			    gpc_cu.EventRecord(gpc_xst.ev[b], gpc_xst.s) != 0)
				return gpc__finish(-1);
			gpc_xst.stats.chunks++;
			n++;
		}
		if (!n)
			break;
		if (gpc_cu.EventSynchronize(gpc_xst.ev[head]) != 0)
			return gpc__finish(-1);
		gpc_xpool_copy((char *)host + inflight[head].r * dpitch +
			      inflight[head].off, dpitch, gpc_xst.pin[head],
			      inflight[head].len, inflight[head].len,
			      inflight[head].k);
		head = (head + 1) % gpc_xst.t.nbuf;
		n--;
	}
	return gpc__finish(rc);
}

static int gpc__d2h(void *host, uint64_t dpitch, gpc_dptr dev,
		    uint64_t spitch, uint64_t width, uint64_t rows, unsigned flags)
{
	struct gpc_xstaged *s;
	struct gpc_xblock *b;
	uint64_t bytes;
	char *at;
	int rc;

	if (!width || !rows)
		return 0;
	if (!gpc_xst.on)
		return -1;
	if (!(flags & GPO_BE_STAGE)) {
		/* Straight into the caller's memory: no prefault of it may
		 * run meanwhile (xfault.h). */
		gpc_xfault_wait();
		rc = gpc__via_register(0, dev, spitch, host, dpitch, width, rows);
		if (rc != 1)
			return rc;
		return gpc__d2h_chunked(host, dpitch, dev, spitch, width, rows);
	}
	if (gpc_xst.nst == GPC_MAX_STAGED)
		return -1;
	bytes = width * rows;
	b = gpc_xst_room(bytes, &at);
	if (!b)
		return -1;
	if (b->pinned) {
		rc = gpc__direct(0, dev, spitch, at, width, width, rows);
		gpc_xst.stats.direct++;
	} else {
		rc = gpc__d2h_chunked(at, width, dev, spitch, width, rows);
	}
	if (rc != 0)
		return -1;      /* nothing staged: the block space is not taken */
	b->used += (bytes + GPC_STAGE_ALIGN - 1) / GPC_STAGE_ALIGN * GPC_STAGE_ALIGN;
	if (b->used > b->cap)
		b->used = b->cap;
	s = &gpc_xst.st[gpc_xst.nst++];
	s->dst = host;
	s->src = at;
	s->dpitch = dpitch;
	s->width = width;
	s->rows = rows;
	return 0;
}

int gpc_d2h(void *host, uint64_t dpitch, gpc_dptr dev, uint64_t spitch,
	    uint64_t width, uint64_t rows, unsigned flags)
{
	int rc;

	pthread_mutex_lock(&gpc_xmu);
	rc = gpc__d2h(host, dpitch, dev, spitch, width, rows, flags);
	pthread_mutex_unlock(&gpc_xmu);
	return rc;
}

/* ---- Staged in parts ------------------------------------------------------ */

int gpc_stage_open(void *host, uint64_t dpitch, uint64_t width, uint64_t rows)
{
	struct gpc_xblock *b;
	uint64_t bytes = width * rows;
	char *at;
	int rc = -1;

	pthread_mutex_lock(&gpc_xmu);
	if (gpc_xst.on && !gpc_xst.open_on && gpc_xst.nst < GPC_MAX_STAGED &&
	    bytes && (b = gpc_xst_room(bytes, &at)) != NULL) {
		/* Taken now (discard gives it back), so that nothing frees
		 * the block while the parts arrive. */
		b->used += (bytes + GPC_STAGE_ALIGN - 1) / GPC_STAGE_ALIGN *
			   GPC_STAGE_ALIGN;
		if (b->used > b->cap)
			b->used = b->cap;
		gpc_xst.open.dst = host;
		gpc_xst.open.src = at;
		gpc_xst.open.dpitch = dpitch;
		gpc_xst.open.width = width;
		gpc_xst.open.rows = rows;
		gpc_xst.open_at = at;
		gpc_xst.open_pinned = b->pinned;
		gpc_xst.open_on = 1;
		rc = 0;
	}
	pthread_mutex_unlock(&gpc_xmu);
	return rc;
}

int gpc_stage_part(gpc_dptr dev, uint64_t spitch, uint64_t row0,
		   uint64_t nrows)
{
	uint64_t w;
	char *at;
	int rc = -1;

	pthread_mutex_lock(&gpc_xmu);
	w = gpc_xst.open.width;
	if (gpc_xst.on && gpc_xst.open_on && row0 <= gpc_xst.open.rows &&
	    nrows <= gpc_xst.open.rows - row0) {
		at = gpc_xst.open_at + row0 * w;
		if (!nrows) {
			rc = 0;
		} else if (gpc_xst.open_pinned) {
			rc = gpc__direct(0, dev, spitch, at, w, w, nrows);
			gpc_xst.stats.direct++;
		} else {
			rc = gpc__d2h_chunked(at, w, dev, spitch, w, nrows);
		}
	}
	pthread_mutex_unlock(&gpc_xmu);
	return rc;
}

int gpc_stage_close(void)
{
	int rc = -1;

	pthread_mutex_lock(&gpc_xmu);
	if (gpc_xst.open_on && gpc_xst.nst < GPC_MAX_STAGED) {
		gpc_xst.st[gpc_xst.nst++] = gpc_xst.open;
		gpc_xst.open_on = 0;
		rc = 0;
	}
	pthread_mutex_unlock(&gpc_xmu);
	return rc;
}

void gpc_xfer_stats(struct gpc_xfer_stats *st)
{
	pthread_mutex_lock(&gpc_xmu);
	*st = gpc_xst.stats;
	st->stage_bytes = gpc_xst_block_bytes();
	st->stage_blocks = gpc_xst.nblk;
	st->stage_pinned = 0;
	for (int i = 0; i < gpc_xst.nblk; i++)
		st->stage_pinned += gpc_xst.blk[i].pinned;
	st->threads = gpc_xpool_threads();
	pthread_mutex_unlock(&gpc_xmu);
}

void gpc_prefault(void *host, uint64_t pitch, uint64_t width, uint64_t rows)
{
	gpc_xfault_add(host, pitch, width, rows);
}
