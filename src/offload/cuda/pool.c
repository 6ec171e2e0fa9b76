/*
 * pool.c - device memory of libgpuoffload-cuda.so, cached across calls.
 *
 * cuMemAlloc and cuMemFree synchronise the device and cost tens of
 * microseconds to milliseconds for large buffers; a program calling dgemm
 * in a loop asks for the same sizes every time. So a released buffer is
 * kept (free, in the cache) and handed out again to a request it fits
 * without wasting more than a quarter of itself. Sizes are rounded up
 * (to 2 MiB above 1 MiB, the driver's own granularity there; to 512 bytes
 * below), so that sizes that differ a little share buffers.
 *
 * Bounds: the cache holds at most GPC_POOL_KEEP bytes of free buffers
 * (1 GiB: the seed's "scratch released beyond 1 GB"); the oldest are freed
 * beyond it. A failed cuMemAlloc frees the whole cache and tries once
 * more. stop() frees everything (gpc_pool_trim(0)); so does the policy's
 * give-back, which stops the backend. memory() counts cached bytes as free
 * (they are ours to reuse). An idle process keeps its cache (at most the
 * bound) until one of those; see docs/offload.md, "The CUDA backend".
 *
 * Called with the backend's context current, under the frontend's lock.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <string.h>

#include "gpc.h"

#define GPC_POOL_KEEP (1ull << 30)
#define GPC_POOL_SLOTS 64

struct gpc__blk {
	gpc_dptr p;
	uint64_t size;
	uint64_t age;        /* when it was released (a counter) */
	int used;            /* 1 handed out, 0 cached free; size 0: empty */
};

static struct gpc__blk gpc__b[GPC_POOL_SLOTS];
static uint64_t gpc__cached, gpc__clock;

static uint64_t gpc__round(uint64_t bytes)
{
	uint64_t g = bytes > (1u << 20) ? (2u << 20) : 512u;

	if (bytes == 0)
		bytes = 1;
	return (bytes + g - 1) / g * g;
}

static void gpc__drop(struct gpc__blk *b)
{
	(void)gpc_cu.MemFree(b->p);
	if (!b->used)
		gpc__cached -= b->size;
	memset(b, 0, sizeof *b);
}

void gpc_pool_trim(uint64_t keep)
{
	while (gpc__cached > keep) {
		struct gpc__blk *old = NULL;
		for (int i = 0; i < GPC_POOL_SLOTS; i++) {
			struct gpc__blk *b = &gpc__b[i];
			if (b->size && !b->used && (!old || b->age < old->age))
				old = b;
		}
		if (!old)
			break;
		gpc__drop(old);
	}
}

int gpc_pool_alloc(gpc_dptr *p, uint64_t bytes)
{
	uint64_t want = gpc__round(bytes);
	struct gpc__blk *best = NULL, *empty = NULL;

	for (int i = 0; i < GPC_POOL_SLOTS; i++) {
		struct gpc__blk *b = &gpc__b[i];
		if (!b->size) {
			if (!empty)
				empty = b;
		} else if (!b->used && b->size >= want &&
			   b->size - want <= b->size / 4 &&
			   (!best || b->size < best->size)) {
			best = b;
		}
	}
	if (best) {
		best->used = 1;
		gpc__cached -= best->size;
		*p = best->p;
		return 0;
	}
	if (!empty) {
		/* Every slot holds a buffer: free the oldest cached one. */
		gpc_pool_trim(gpc__cached ? gpc__cached - 1 : 0);
		for (int i = 0; i < GPC_POOL_SLOTS && !empty; i++)
			if (!gpc__b[i].size)
				empty = &gpc__b[i];
		if (!empty)
			return -1;
	}
	if (gpc_cu.MemAlloc(&empty->p, want) != 0) {
		gpc_pool_trim(0);
		if (gpc_cu.MemAlloc(&empty->p, want) != 0) {
			empty->p = 0;
			return -1;
		}
	}
	empty->size = want;
	empty->used = 1;
	*p = empty->p;
	return 0;
}

void gpc_pool_free(gpc_dptr p)
{
	for (int i = 0; i < GPC_POOL_SLOTS; i++) {
		struct gpc__blk *b = &gpc__b[i];
		if (b->size && b->used && b->p == p) {
			b->used = 0;
			b->age = ++gpc__clock;
			gpc__cached += b->size;
			gpc_pool_trim(GPC_POOL_KEEP);
			return;
		}
	}
}

uint64_t gpc_pool_cached(void)
{
	return gpc__cached;
}

/* Free every buffer, handed out or not (stop: the frontend released its
 * buffers already; anything else is ours). */
void gpc_pool_release_all(void)
{
	for (int i = 0; i < GPC_POOL_SLOTS; i++)
		if (gpc__b[i].size)
			gpc__drop(&gpc__b[i]);
	gpc__cached = 0;
}
