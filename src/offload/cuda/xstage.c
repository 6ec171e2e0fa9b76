/*
 * xstage.c - the copy engine's staging (xfer.h, xfer_int.h): pinned host
 * blocks that hold results read with GPO_BE_STAGE until gpc_commit writes
 * them to their destinations (with the memcpy threads) or gpc_discard
 * forgets them, kept across calls within gpc_stage_keep() bytes and
 * released when no call used them for GPC_STAGE_IDLE_CALLS calls, when
 * the backend went idle (gpc_xfer_idle) and at stop. Why pinned and kept:
 * xfer.c's header. Split from xfer.c, which does the copies.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xfault.h"
#include "xfer_int.h"
#include "xpool.h"

/* pthread_mutex_trylock: bound to its old version by src/offload/compat.h
 * (force-included; tools/gate.sh's 2.17 floor). */

static void gpc__free_block(struct gpc_xblock *b)
{
	if (b->pinned)
		(void)gpc_cu.MemFreeHost(b->p);
	else
		free(b->p);
	memset(b, 0, sizeof *b);
}

/* Free every block `drop` says to, keeping the others in order. */
static void gpc__free_blocks(int (*drop)(const struct gpc_xblock *b))
{
	int n = 0;

	for (int i = 0; i < gpc_xst.nblk; i++) {
		if (drop(&gpc_xst.blk[i]))
			gpc__free_block(&gpc_xst.blk[i]);
		else
			gpc_xst.blk[n++] = gpc_xst.blk[i];
	}
	for (int i = n; i < gpc_xst.nblk; i++)
		memset(&gpc_xst.blk[i], 0, sizeof gpc_xst.blk[i]);
	gpc_xst.nblk = n;
}

static int gpc__unused(const struct gpc_xblock *b)
{
	return b->used == 0;
}

/* Free every block not in use by the staged results of this call. */
void gpc_xst_free_unused(void)
{
	gpc__free_blocks(gpc__unused);
}

uint64_t gpc_xst_block_bytes(void)
{
	uint64_t sum = 0;

	for (int i = 0; i < gpc_xst.nblk; i++)
		sum += gpc_xst.blk[i].cap;
	return sum;
}

uint64_t gpc_stage_keep(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
	uint64_t k = pages > 0 && pg > 0 ? (uint64_t)pages * (uint64_t)pg / 32 : 0;

	if (k < GPC_STAGE_KEEP_MIN)
		k = GPC_STAGE_KEEP_MIN;
	return k > GPC_STAGE_KEEP_MAX ? GPC_STAGE_KEEP_MAX : k;
}

struct gpc_xblock *gpc_xst_room(uint64_t bytes, char **at)
{
	struct gpc_xblock *best = NULL, *b;

	for (int i = 0; i < gpc_xst.nblk; i++) {
		b = &gpc_xst.blk[i];
		if (b->cap - b->used >= bytes && (!best || b->cap < best->cap))
			best = b;
	}
	if (!best) {
		uint64_t cap = (bytes + GPC_BLOCK_GRAIN - 1) / GPC_BLOCK_GRAIN *
			       GPC_BLOCK_GRAIN;
		/* Blocks this call does not use make room first. */
		if (gpc_xst.nblk == GPC_MAX_BLOCKS ||
		    gpc_xst_block_bytes() + cap > gpc_xst.t.keep)
			gpc_xst_free_unused();
		if (gpc_xst.nblk == GPC_MAX_BLOCKS)
			return NULL;
		best = &gpc_xst.blk[gpc_xst.nblk];
		memset(best, 0, sizeof *best);
		if (gpc_cu.MemHostAlloc(&best->p, cap,
					GPC_MEMHOSTALLOC_PORTABLE) == 0) {
			best->pinned = 1;
		} else if (posix_memalign(&best->p, 4096, cap) != 0) {
			best->p = NULL;
			return NULL;
		}
		best->cap = cap;
		gpc_xst.nblk++;
	}
	*at = (char *)best->p + best->used;
	return best;
}

/* ---- Commit, discard, trim ------------------------------------------------ */

void gpc_commit(void)
{
	gpc_xfault_wait();
	pthread_mutex_lock(&gpc_xmu);
	for (int i = 0; i < gpc_xst.nst; i++) {
		struct gpc_xstaged *s = &gpc_xst.st[i];
		gpc_xpool_copy(s->dst, s->dpitch, s->src, s->width, s->width,
			      s->rows);
	}
	gpc_xst_discard();
	pthread_mutex_unlock(&gpc_xmu);
}

void gpc_discard(void)
{
	gpc_xfault_wait();      /* nothing of a failed call outlives it */
	pthread_mutex_lock(&gpc_xmu);
	gpc_xst_discard();
	pthread_mutex_unlock(&gpc_xmu);
}

void gpc_xst_discard(void)
{
	int any = gpc_xst.nst > 0 || gpc_xst.open_on;

	gpc_xst.nst = 0;
	gpc_xst.open_on = 0;
	for (int i = 0; i < gpc_xst.nblk; i++) {
		if (gpc_xst.blk[i].used)
			gpc_xst.blk[i].last_call = gpc_xst.calls;
		gpc_xst.blk[i].used = 0;
	}
	if (any)
		gpc_xst.calls++;
	/* The bound and the idle rule apply at the end of every call, so
	 * that they hold whether or not the backend calls gpc_xfer_trim. */
	gpc_xst_trim();
}

void gpc_xfer_trim(void)
{
	pthread_mutex_lock(&gpc_xmu);
	gpc_xst_trim();
	pthread_mutex_unlock(&gpc_xmu);
}

int gpc_xfer_idle(void)
{
	int freed = 0;

	if (pthread_mutex_trylock(&gpc_xmu) != 0)
		return 0;       /* a copy runs: not idle */
	if (!gpc_xst.nst && !gpc_xst.open_on) {
		freed = gpc_xst.nblk;
		gpc_xst_free_unused();
	}
	pthread_mutex_unlock(&gpc_xmu);
	return freed;
}

static int gpc__idle(const struct gpc_xblock *b)
{
	return gpc_xst.calls - b->last_call >= GPC_STAGE_IDLE_CALLS;
}

void gpc_xst_trim(void)
{
	if (gpc_xst.nst || gpc_xst.open_on)
		return;
	if (gpc_xst_block_bytes() > gpc_xst.t.keep)
		gpc_xst_free_unused();
	else
		gpc__free_blocks(gpc__idle);
}

