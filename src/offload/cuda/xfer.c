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
 *   the chunks), kept the same way.
 *
 * On a failed CUDA call the stream is synchronised before returning, so
 * that no DMA still reads or writes a chunk or the caller's memory.
 *
 * Locking: the frontend serialises calls, but gpc_xfer_idle comes from
 * the backend's idle thread (pool.c); gpc__mu orders it against every
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
#include "xfer.h"
#include "xpool.h"

/* pthread_mutex_trylock moved into libc.so.6 with glibc 2.34 under a new
 * default version; bind the old one (tools/gate.sh's 2.17 floor). */
#if defined(__x86_64__)
__asm__(".symver pthread_mutex_trylock,pthread_mutex_trylock@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver pthread_mutex_trylock,pthread_mutex_trylock@GLIBC_2.17");
#endif

#define GPC_NBUF_MAX 8
#define GPC_MAX_STAGED 8
#define GPC_MAX_BLOCKS 8
#define GPC_BLOCK_GRAIN (2ull << 20)    /* staging blocks round up to this */
#define GPC_STAGE_ALIGN 256ull

struct gpc__block {
	void *p;
	uint64_t cap, used;
	int pinned;
	uint64_t last_call;     /* gpc__x.calls when last used */
};

struct gpc__staged {
	void *dst;
	const void *src;        /* inside a block, packed (pitch width) */
	uint64_t dpitch, width, rows;
};

static struct {
	int on;
	struct gpc_xfer_tune t;
	gpc_stream s;
	void *pin[GPC_NBUF_MAX];
	gpc_event ev[GPC_NBUF_MAX];
	int busy[GPC_NBUF_MAX];         /* an event recorded, not yet waited */
	struct gpc__block blk[GPC_MAX_BLOCKS];
	int nblk;
	struct gpc__staged st[GPC_MAX_STAGED];
	int nst;
	uint64_t calls;                 /* commits and discards so far */
	struct gpc_xfer_stats stats;
} gpc__x;

static pthread_mutex_t gpc__mu = PTHREAD_MUTEX_INITIALIZER;
static void gpc__discard(void);
static void gpc__trim(void);

/* ---- Start and stop ------------------------------------------------------- */

static void gpc__free_block(struct gpc__block *b)
{
	if (b->pinned)
		(void)gpc_cu.MemFreeHost(b->p);
	else
		free(b->p);
	memset(b, 0, sizeof *b);
}

/* Free every block `drop` says to, keeping the others in order. */
static void gpc__free_blocks(int (*drop)(const struct gpc__block *b))
{
	int n = 0;

	for (int i = 0; i < gpc__x.nblk; i++) {
		if (drop(&gpc__x.blk[i]))
			gpc__free_block(&gpc__x.blk[i]);
		else
			gpc__x.blk[n++] = gpc__x.blk[i];
	}
	for (int i = n; i < gpc__x.nblk; i++)
		memset(&gpc__x.blk[i], 0, sizeof gpc__x.blk[i]);
	gpc__x.nblk = n;
}

static int gpc__unused(const struct gpc__block *b)
{
	return b->used == 0;
}

/* Free every block not in use by the staged results of this call. */
static void gpc__free_unused_blocks(void)
{
	gpc__free_blocks(gpc__unused);
}

static uint64_t gpc__block_bytes(void)
{
	uint64_t sum = 0;

	for (int i = 0; i < gpc__x.nblk; i++)
		sum += gpc__x.blk[i].cap;
	return sum;
}

static void gpc__stop(void)
{
	gpc__discard();
	gpc__free_unused_blocks();
	gpc_xfault_stop();
	gpc_xpool_stop();
	for (int i = 0; i < GPC_NBUF_MAX; i++) {
		if (gpc__x.ev[i])
			(void)gpc_cu.EventDestroy(gpc__x.ev[i]);
		if (gpc__x.pin[i])
			(void)gpc_cu.MemFreeHost(gpc__x.pin[i]);
		gpc__x.ev[i] = NULL;
		gpc__x.pin[i] = NULL;
		gpc__x.busy[i] = 0;
	}
	if (gpc__x.s)
		(void)gpc_cu.StreamDestroy(gpc__x.s);
	gpc__x.s = NULL;
	gpc__x.on = 0;
}

void gpc_xfer_stop(void)
{
	pthread_mutex_lock(&gpc__mu);
	gpc__stop();
	pthread_mutex_unlock(&gpc__mu);
}

static int gpc__start(const struct gpc_xfer_tune *t)
{
	struct gpc_xfer_tune d = { 0 };

	if (gpc__x.on)
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
	memset(&gpc__x, 0, sizeof gpc__x);
	gpc__x.t = d;
	if (gpc_cu.StreamCreate(&gpc__x.s, GPC_STREAM_NON_BLOCKING) != 0) {
		gpc__x.s = NULL;
		return -1;
	}
	for (int i = 0; i < d.nbuf; i++) {
		if (gpc_cu.MemHostAlloc(&gpc__x.pin[i], d.chunk,
					GPC_MEMHOSTALLOC_PORTABLE) != 0) {
			gpc__x.pin[i] = NULL;
			gpc__stop();
			return -1;
		}
		if (gpc_cu.EventCreate(&gpc__x.ev[i], GPC_EVENT_DISABLE_TIMING) != 0) {
			gpc__x.ev[i] = NULL;
			gpc__stop();
			return -1;
		}
	}
	gpc_xpool_start(d.threads);
	gpc_xfault_start(d.fault_threads);
	gpc__x.on = 1;
	return 0;
}

int gpc_xfer_start_tuned(const struct gpc_xfer_tune *t)
{
	int rc;

	pthread_mutex_lock(&gpc__mu);
	rc = gpc__start(t);
	pthread_mutex_unlock(&gpc__mu);
	return rc;
}

uint64_t gpc_stage_keep(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
	uint64_t k = pages > 0 && pg > 0 ? (uint64_t)pages * (uint64_t)pg / 32 : 0;

	if (k < GPC_STAGE_KEEP_MIN)
		k = GPC_STAGE_KEEP_MIN;
	return k > GPC_STAGE_KEEP_MAX ? GPC_STAGE_KEEP_MAX : k;
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
	return gpc_cu.Memcpy2DAsync(&c, gpc__x.s) != 0 ? -1 : 0;
}

/* End of a copy: wait for the stream (also after a failure: no DMA may
 * outlive the call); every chunk is free afterwards. */
static int gpc__finish(int rc)
{
	if (gpc_cu.StreamSynchronize(gpc__x.s) != 0)
		rc = -1;
	for (int i = 0; i < gpc__x.t.nbuf; i++)
		gpc__x.busy[i] = 0;
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

	if (span < gpc__x.t.reg_min || gpc__register(host, span, &base) != 0)
		return 1;
	rc = gpc__direct(to_dev, dev, devpitch, host, hostpitch, width, rows);
	(void)gpc_cu.MemHostUnregister(base);
	gpc__x.stats.registered++;
	return rc;
}

/* ---- Host to device ------------------------------------------------------- */

static int gpc__h2d(gpc_dptr dev, uint64_t dpitch, const void *host,
		    uint64_t spitch, uint64_t width, uint64_t rows)
{
	struct gpc__cursor c = { width, rows, gpc__x.t.chunk, 0, 0 };
	struct gpc__piece p;
	int b = 0, rc;

	if (!width || !rows)
		return 0;
	if (!gpc__x.on)
		return -1;
	rc = gpc__via_register(1, dev, dpitch, (void *)(uintptr_t)host, spitch,
			       width, rows);
	if (rc != 1)
		return rc;
	rc = 0;
	while (gpc__next(&c, &p)) {
		if (gpc__x.busy[b]) {
			gpc__x.busy[b] = 0;
			if (gpc_cu.EventSynchronize(gpc__x.ev[b]) != 0) {
				rc = -1;
				break;
			}
		}
		gpc_xpool_copy(gpc__x.pin[b], p.len,
			      (const char *)host + p.r * spitch + p.off, spitch,
			      p.len, p.k);
		if (gpc__2d(1, dev + p.r * dpitch + p.off, dpitch, gpc__x.pin[b],
			    p.len, p.len, p.k) != 0 ||
		    gpc_cu.EventRecord(gpc__x.ev[b], gpc__x.s) != 0) {
			rc = -1;
			break;
		}
		gpc__x.busy[b] = 1;
		gpc__x.stats.chunks++;
		b = (b + 1) % gpc__x.t.nbuf;
	}
	return gpc__finish(rc);
}

int gpc_h2d(gpc_dptr dev, uint64_t dpitch, const void *host, uint64_t spitch,
	    uint64_t width, uint64_t rows)
{
	int rc;

	pthread_mutex_lock(&gpc__mu);
	rc = gpc__h2d(dev, dpitch, host, spitch, width, rows);
	pthread_mutex_unlock(&gpc__mu);
	return rc;
}

/* ---- Device to host ------------------------------------------------------- */

/* Through the chunks into pageable host memory: nbuf pieces in flight. */
static int gpc__d2h_chunked(void *host, uint64_t dpitch, gpc_dptr dev,
			    uint64_t spitch, uint64_t width, uint64_t rows)
{
	struct gpc__cursor c = { width, rows, gpc__x.t.chunk, 0, 0 };
	struct gpc__piece inflight[GPC_NBUF_MAX];
	int head = 0, n = 0, rc = 0, more = 1;

	for (;;) {
		/* Fill every free chunk with the next piece. */
		while (more && n < gpc__x.t.nbuf) {
			int b = (head + n) % gpc__x.t.nbuf;
			struct gpc__piece *p = &inflight[b];
			if (!gpc__next(&c, p)) {
				more = 0;
				break;
			}
			if (gpc__2d(0, dev + p->r * spitch + p->off, spitch,
				    gpc__x.pin[b], p->len, p->len, p->k) != 0 ||
			    gpc_cu.EventRecord(gpc__x.ev[b], gpc__x.s) != 0)
				return gpc__finish(-1);
			gpc__x.stats.chunks++;
			n++;
		}
		if (!n)
			break;
		if (gpc_cu.EventSynchronize(gpc__x.ev[head]) != 0)
			return gpc__finish(-1);
		gpc_xpool_copy((char *)host + inflight[head].r * dpitch +
			      inflight[head].off, dpitch, gpc__x.pin[head],
			      inflight[head].len, inflight[head].len,
			      inflight[head].k);
		head = (head + 1) % gpc__x.t.nbuf;
		n--;
	}
	return gpc__finish(rc);
}

/* Room for `bytes` of staged results: a block with space left, or a new
 * one (pinned if the driver gives it). NULL when there is none. */
static struct gpc__block *gpc__stage_room(uint64_t bytes, char **at)
{
	struct gpc__block *best = NULL, *b;

	for (int i = 0; i < gpc__x.nblk; i++) {
		b = &gpc__x.blk[i];
		if (b->cap - b->used >= bytes && (!best || b->cap < best->cap))
			best = b;
	}
	if (!best) {
		uint64_t cap = (bytes + GPC_BLOCK_GRAIN - 1) / GPC_BLOCK_GRAIN *
			       GPC_BLOCK_GRAIN;
		/* Blocks this call does not use make room first. */
		if (gpc__x.nblk == GPC_MAX_BLOCKS ||
		    gpc__block_bytes() + cap > gpc__x.t.keep)
			gpc__free_unused_blocks();
		if (gpc__x.nblk == GPC_MAX_BLOCKS)
			return NULL;
		best = &gpc__x.blk[gpc__x.nblk];
		memset(best, 0, sizeof *best);
		if (gpc_cu.MemHostAlloc(&best->p, cap,
					GPC_MEMHOSTALLOC_PORTABLE) == 0) {
			best->pinned = 1;
		} else if (posix_memalign(&best->p, 4096, cap) != 0) {
			best->p = NULL;
			return NULL;
		}
		best->cap = cap;
		gpc__x.nblk++;
	}
	*at = (char *)best->p + best->used;
	return best;
}

static int gpc__d2h(void *host, uint64_t dpitch, gpc_dptr dev,
		    uint64_t spitch, uint64_t width, uint64_t rows, unsigned flags)
{
	struct gpc__staged *s;
	struct gpc__block *b;
	uint64_t bytes;
	char *at;
	int rc;

	if (!width || !rows)
		return 0;
	if (!gpc__x.on)
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
	if (gpc__x.nst == GPC_MAX_STAGED)
		return -1;
	bytes = width * rows;
	b = gpc__stage_room(bytes, &at);
	if (!b)
		return -1;
	if (b->pinned) {
		rc = gpc__direct(0, dev, spitch, at, width, width, rows);
		gpc__x.stats.direct++;
	} else {
		rc = gpc__d2h_chunked(at, width, dev, spitch, width, rows);
	}
	if (rc != 0)
		return -1;      /* nothing staged: the block space is not taken */
	b->used += (bytes + GPC_STAGE_ALIGN - 1) / GPC_STAGE_ALIGN * GPC_STAGE_ALIGN;
	if (b->used > b->cap)
		b->used = b->cap;
	s = &gpc__x.st[gpc__x.nst++];
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

	pthread_mutex_lock(&gpc__mu);
	rc = gpc__d2h(host, dpitch, dev, spitch, width, rows, flags);
	pthread_mutex_unlock(&gpc__mu);
	return rc;
}

/* ---- Commit, discard, trim ------------------------------------------------ */

void gpc_commit(void)
{
	gpc_xfault_wait();
	pthread_mutex_lock(&gpc__mu);
	for (int i = 0; i < gpc__x.nst; i++) {
		struct gpc__staged *s = &gpc__x.st[i];
		gpc_xpool_copy(s->dst, s->dpitch, s->src, s->width, s->width,
			      s->rows);
	}
	gpc__discard();
	pthread_mutex_unlock(&gpc__mu);
}

void gpc_discard(void)
{
	gpc_xfault_wait();      /* nothing of a failed call outlives it */
	pthread_mutex_lock(&gpc__mu);
	gpc__discard();
	pthread_mutex_unlock(&gpc__mu);
}

static void gpc__discard(void)
{
	int any = gpc__x.nst > 0;

	gpc__x.nst = 0;
	for (int i = 0; i < gpc__x.nblk; i++) {
		if (gpc__x.blk[i].used)
			gpc__x.blk[i].last_call = gpc__x.calls;
		gpc__x.blk[i].used = 0;
	}
	if (any)
		gpc__x.calls++;
	/* The bound and the idle rule apply at the end of every call, so
	 * that they hold whether or not the backend calls gpc_xfer_trim. */
	gpc__trim();
}

void gpc_xfer_trim(void)
{
	pthread_mutex_lock(&gpc__mu);
	gpc__trim();
	pthread_mutex_unlock(&gpc__mu);
}

int gpc_xfer_idle(void)
{
	int freed = 0;

	if (pthread_mutex_trylock(&gpc__mu) != 0)
		return 0;       /* a copy runs: not idle */
	if (!gpc__x.nst) {
		freed = gpc__x.nblk;
		gpc__free_unused_blocks();
	}
	pthread_mutex_unlock(&gpc__mu);
	return freed;
}

static int gpc__idle(const struct gpc__block *b)
{
	return gpc__x.calls - b->last_call >= GPC_STAGE_IDLE_CALLS;
}

static void gpc__trim(void)
{
	if (gpc__x.nst)
		return;
	if (gpc__block_bytes() > gpc__x.t.keep)
		gpc__free_unused_blocks();
	else
		gpc__free_blocks(gpc__idle);
}

void gpc_xfer_stats(struct gpc_xfer_stats *st)
{
	pthread_mutex_lock(&gpc__mu);
	*st = gpc__x.stats;
	st->stage_bytes = gpc__block_bytes();
	st->stage_blocks = gpc__x.nblk;
	st->stage_pinned = 0;
	for (int i = 0; i < gpc__x.nblk; i++)
		st->stage_pinned += gpc__x.blk[i].pinned;
	st->threads = gpc_xpool_threads();
	pthread_mutex_unlock(&gpc__mu);
}

void gpc_prefault(void *host, uint64_t pitch, uint64_t width, uint64_t rows)
{
	gpc_xfault_add(host, pitch, width, rows);
}
