/*
 * xsmall.c - the small-operand path of libgpuoffload-cuda.so (xsmall.h).
 *
 * Layout: bytes [0, GPC_SMALL_INFO) of the arena are LAPACK info slots
 * (ints), handed out in order by each run; operands follow, bump-allocated
 * at GPC_SMALL_ALIGN, and the arena is empty again once every operand of
 * the call is released (the frontend allocates a call's operands, then
 * releases them all: backend.h). The image is byte for byte the arena:
 * an operand at device address arena + o is at image + o.
 *
 * Copies: gpc_small_begin copies the operands' part of the image in with
 * one cuMemcpyHtoDAsync when to_device wrote any; gpc_small_end copies
 * [0, end of the last operand) back with one cuMemcpyDtoHAsync (input-only
 * operands too: at most a few hundred KiB, cheaper than a wait more), or
 * the info slots alone when no operand is in the arena, then waits once.
 * Padding rows (ld > rows) travel along; the caller's padding is never
 * written (to_host copies rows of `width` bytes).
 */
#define _GNU_SOURCE
#include "compat.h"
#include <string.h>

#include "backend.h"
#include "gpc.h"
#include "xsmall.h"

#define GPC__SLOTS (GPC_SMALL_INFO / sizeof(int))
#define GPC__OPS 16

struct gpc__op {
	uint64_t off, size;     /* size 0: free */
};

struct gpc__stg {
	char *dst;
	const char *src;
	uint64_t dpitch, spitch, width, rows;
};

static struct {
	gpc_dptr dev;           /* the arena; 0 when not started */
	char *img;              /* its pinned image */
	uint64_t used;          /* end of the last operand */
	int live, dirty;        /* operands handed out; image ahead of device */
	struct gpc__op op[GPC__OPS];
	unsigned slots;         /* info slots handed out by this run */
	struct gpc__stg st[GPC__OPS];
	int nst;
} gpc__s;

int gpc_small_start(void)
{
	void *img = NULL;
	gpc_dptr dev = 0;

	if (gpc__s.dev)
		return 0;
	if (gpc_cu.MemAlloc(&dev, GPC_SMALL_BYTES) != 0)
		return -1;
	if (gpc_cu.MemHostAlloc(&img, GPC_SMALL_BYTES,
				GPC_MEMHOSTALLOC_PORTABLE) != 0) {
		(void)gpc_cu.MemFree(dev);
		return -1;
	}
	memset(&gpc__s, 0, sizeof gpc__s);
	gpc__s.dev = dev;
	gpc__s.img = img;
	gpc__s.used = GPC_SMALL_INFO;
	return 0;
}

void gpc_small_stop(void)
{
	if (gpc__s.dev)
		(void)gpc_cu.MemFree(gpc__s.dev);
	if (gpc__s.img)
		(void)gpc_cu.MemFreeHost(gpc__s.img);
	memset(&gpc__s, 0, sizeof gpc__s);
}

int gpc_small_alloc(gpc_dptr *p, uint64_t bytes)
{
	uint64_t size = (bytes + GPC_SMALL_ALIGN - 1) / GPC_SMALL_ALIGN *
			GPC_SMALL_ALIGN;

	if (!gpc__s.dev || !bytes || size > GPC_SMALL_BYTES - gpc__s.used)
		return 0;
	for (int i = 0; i < GPC__OPS; i++)
		if (!gpc__s.op[i].size) {
			gpc__s.op[i].off = gpc__s.used;
			gpc__s.op[i].size = size;
			gpc__s.used += size;
			gpc__s.live++;
			*p = gpc__s.dev + gpc__s.op[i].off;
			return 1;
		}
	return 0;
}

static struct gpc__op *gpc__find(gpc_dptr p, uint64_t span)
{
	if (!gpc__s.dev || p < gpc__s.dev || p >= gpc__s.dev + GPC_SMALL_BYTES)
		return NULL;
	for (int i = 0; i < GPC__OPS; i++) {
		struct gpc__op *o = &gpc__s.op[i];
		uint64_t at = p - gpc__s.dev;
		/* at strictly inside: an operand's end is the next one's
		 * start (release looks up with span 0). */
		if (o->size && at >= o->off && at - o->off < o->size &&
		    span <= o->size - (at - o->off))
			return o;
	}
	return NULL;
}

int gpc_small_owns(gpc_dptr p, uint64_t span)
{
	if (gpc__find(p, span))
		return 1;
	/* Inside the arena but not inside one operand: no copy may touch
	 * it (begin() would overwrite it with the image). */
	return gpc__s.dev && p >= gpc__s.dev &&
	       p < gpc__s.dev + GPC_SMALL_BYTES ? -1 : 0;
}

void gpc_small_release(gpc_dptr p)
{
	struct gpc__op *o = gpc__find(p, 0);

	if (!o)
		return;
	o->size = 0;
	if (--gpc__s.live == 0) {
		gpc__s.used = GPC_SMALL_INFO;
		gpc__s.dirty = 0;
		gpc__s.nst = 0;
	}
}

static void gpc__copy2d(char *dst, uint64_t dpitch, const char *src,
			uint64_t spitch, uint64_t width, uint64_t rows)
{
	if (dpitch == width && spitch == width) {
		memcpy(dst, src, width * rows);
		return;
	}
	for (uint64_t r = 0; r < rows; r++)
		memcpy(dst + r * dpitch, src + r * spitch, width);
}

void gpc_small_h2d(gpc_dptr dev, uint64_t dpitch, const void *host,
		   uint64_t spitch, uint64_t width, uint64_t rows)
{
	if (!width || !rows)
		return;
	gpc__copy2d(gpc__s.img + (dev - gpc__s.dev), dpitch, host, spitch,
		    width, rows);
	gpc__s.dirty = 1;
}

int gpc_small_d2h(void *host, uint64_t dpitch, gpc_dptr dev, uint64_t spitch,
		  uint64_t width, uint64_t rows, unsigned flags)
{
	const char *src = gpc__s.img + (dev - gpc__s.dev);
	struct gpc__stg *s;

	if (!width || !rows)
		return 0;
	if (!(flags & GPO_BE_STAGE)) {
		gpc__copy2d(host, dpitch, src, spitch, width, rows);
		return 0;
	}
	if (gpc__s.nst == GPC__OPS)
		return -1;
	s = &gpc__s.st[gpc__s.nst++];
	s->dst = host;
	s->src = src;
	s->dpitch = dpitch;
	s->spitch = spitch;
	s->width = width;
	s->rows = rows;
	return 0;
}

void gpc_small_commit(void)
{
	for (int i = 0; i < gpc__s.nst; i++) {
		const struct gpc__stg *s = &gpc__s.st[i];
		gpc__copy2d(s->dst, s->dpitch, s->src, s->spitch, s->width,
			    s->rows);
	}
	gpc__s.nst = 0;
}

void gpc_small_discard(void)
{
	gpc__s.nst = 0;
}

int gpc_small_begin(gpc_stream s)
{
	gpc__s.slots = 0;
	if (!gpc__s.dev || !gpc__s.dirty || gpc__s.used <= GPC_SMALL_INFO)
		return 0;
	gpc__s.dirty = 0;
	return gpc_cu.MemcpyHtoDAsync(gpc__s.dev + GPC_SMALL_INFO,
				      gpc__s.img + GPC_SMALL_INFO,
				      gpc__s.used - GPC_SMALL_INFO, s) == 0 ? 0 : -1;
}

int *gpc_small_info(void)
{
	/* More cuSOLVER calls in one run than slots (none does): the last
	 * slot is shared, and the first nonzero info of those may be lost
	 * to a later zero. */
	unsigned i = gpc__s.slots < GPC__SLOTS ? gpc__s.slots++ : GPC__SLOTS - 1;

	return (int *)(uintptr_t)(gpc__s.dev + i * sizeof(int));
}

int gpc_small_end(gpc_stream s, int failed, int *info)
{
	uint64_t bytes = gpc__s.used > GPC_SMALL_INFO ? gpc__s.used :
			 gpc__s.slots ? gpc__s.slots * sizeof(int) : 0;
	int rc = 0;

	*info = 0;
	if (!failed && bytes &&
	    gpc_cu.MemcpyDtoHAsync(gpc__s.img, gpc__s.dev, bytes, s) != 0)
		failed = 1;
	if (gpc_cu.StreamSynchronize(s) != 0 || failed)
		return -1;
	for (unsigned i = 0; i < gpc__s.slots; i++) {
		int v;
		memcpy(&v, gpc__s.img + i * sizeof(int), sizeof v);
		if (v < 0)
			rc = -1;
		else if (v && !*info)
			*info = v;
	}
	return rc;
}
