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
 * Bounds: the cache holds at most gpc__keep() bytes of free buffers; the
 * oldest are freed beyond it. That bound is what the largest of the last
 * GPC_POOL_CALLS calls had handed out at once (a "call" ends when no
 * buffer is handed out: the frontend releases every buffer of a call at
 * its end; a buffer held across calls, gpc_pool_hold, as lapack.c's kept
 * workspace, counts in none), at least GPC_POOL_KEEP_MIN (1 GiB, the
 * seed's "scratch released beyond 1 GB") and at most 1/GPC_POOL_CAP_DIV of the device's
 * memory (unknown size: GPC_POOL_KEEP_MIN). Why: a fixed 1 GiB made a
 * dgemm n = 8192 (3 x 512 MiB) free one buffer at the end of every call
 * and allocate it again in the next (cuMemFree synchronises the device);
 * a program in a loop now allocates once. What is kept is never more than
 * recent calls held anyway, so it takes nothing from other programs that
 * those calls did not; memory() counts it as free, so the policy's
 * reserve of the level ("GPU memory always left free") is judged as if
 * it were free, and it is freed when the program leaves the size (after
 * GPC_POOL_CALLS smaller calls), after GPC_POOL_IDLE_S idle, when an
 * allocation fails, and at stop. GPU_OFFLOAD_CUDA_POOL=fixed (read at
 * start, for benchmarks) keeps the old fixed bound.
 *
 * A failed cuMemAlloc frees the whole cache and tries once
 * more. stop() frees everything; so does the policy's give-back, which
 * stops the backend. memory() counts cached bytes as free (they are ours
 * to reuse). Idle: the policy stops the backend only when another job
 * waits for the GPU, so a program that stops calling BLAS would keep its
 * cache for its whole life; a thread of the pool (started by start(),
 * joined by stop()) frees the cache once no buffer was handed out or
 * returned for GPC_POOL_IDLE_S seconds, and with it the copy engine's
 * staging blocks (gpc_xfer_idle, xfer.h).
 *
 * Called with the backend's context current, under the frontend's lock;
 * gpc__lock orders those calls against the idle thread.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpc.h"
#include "xfer.h"

#define GPC_POOL_KEEP_MIN (1ull << 30)
#define GPC_POOL_CALLS 8
#define GPC_POOL_CAP_DIV 4
#define GPC_POOL_SLOTS 64
#define GPC_POOL_IDLE_S 5

static pthread_mutex_t gpc__lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gpc__cv = PTHREAD_COND_INITIALIZER;
static pthread_t gpc__th;
static int gpc__th_on, gpc__th_stop;
static time_t gpc__last;        /* CLOCK_REALTIME seconds of the last use */

struct gpc__blk {
	gpc_dptr p;
	uint64_t size;
	uint64_t age;        /* when it was released (a counter) */
	int used;            /* 1 handed out, 0 cached free; size 0: empty */
	int held;            /* handed out across calls (gpc_pool_hold) */
};

static struct gpc__blk gpc__b[GPC_POOL_SLOTS];
static uint64_t gpc__cached, gpc__clock;

/* The bound's inputs: bytes handed out now, the most handed out at once
 * in the call running now and in each of the last GPC_POOL_CALLS calls,
 * the device's size (0: unknown) and the fixed-bound switch. */
static uint64_t gpc__inuse, gpc__peak, gpc__peaks[GPC_POOL_CALLS];
static unsigned gpc__npeak;
static uint64_t gpc__total;
static int gpc__fixed;

static uint64_t gpc__keep(void)
{
	uint64_t k = gpc__peak, cap;

	if (gpc__fixed || !gpc__total)
		return GPC_POOL_KEEP_MIN;
	for (int i = 0; i < GPC_POOL_CALLS; i++)
		if (gpc__peaks[i] > k)
			k = gpc__peaks[i];
	if (k < GPC_POOL_KEEP_MIN)
		k = GPC_POOL_KEEP_MIN;
	cap = gpc__total / GPC_POOL_CAP_DIV;
	return k > cap ? cap : k;
}

static void gpc__taken(uint64_t size)
{
	gpc__inuse += size;
	if (gpc__inuse > gpc__peak)
		gpc__peak = gpc__inuse;
}

/* A buffer came back; when it was the last one handed out, the call
 * ended: its peak joins the recent ones. */
static void gpc__returned(uint64_t size)
{
	gpc__inuse = gpc__inuse > size ? gpc__inuse - size : 0;
	if (!gpc__inuse) {
		gpc__peaks[gpc__npeak++ % GPC_POOL_CALLS] = gpc__peak;
		gpc__peak = 0;
	}
}

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
	else if (!b->held)
		gpc__returned(b->size);
	memset(b, 0, sizeof *b);
}

static void gpc__trim(uint64_t keep)
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

static int gpc__alloc(gpc_dptr *p, uint64_t bytes)
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
		gpc__taken(best->size);
		*p = best->p;
		return 0;
	}
	if (!empty) {
		/* Every slot holds a buffer: free the oldest cached one. */
		gpc__trim(gpc__cached ? gpc__cached - 1 : 0);
		for (int i = 0; i < GPC_POOL_SLOTS && !empty; i++)
			if (!gpc__b[i].size)
				empty = &gpc__b[i];
		if (!empty)
			return -1;
	}
	if (gpc_cu.MemAlloc(&empty->p, want) != 0) {
		gpc__trim(0);
		if (gpc_cu.MemAlloc(&empty->p, want) != 0) {
			empty->p = 0;
			return -1;
		}
	}
	empty->size = want;
	empty->used = 1;
	gpc__taken(want);
	*p = empty->p;
	return 0;
}

static void gpc__free(gpc_dptr p)
{
	for (int i = 0; i < GPC_POOL_SLOTS; i++) {
		struct gpc__blk *b = &gpc__b[i];
		if (b->size && b->used && b->p == p) {
			b->used = 0;
			b->age = ++gpc__clock;
			gpc__cached += b->size;
			if (b->held)
				b->held = 0;    /* not counted in a call */
			else
				gpc__returned(b->size);
			gpc__trim(gpc__keep());
			return;
		}
	}
}

static time_t gpc__now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec;
}

int gpc_pool_alloc(gpc_dptr *p, uint64_t bytes)
{
	int rc;

	pthread_mutex_lock(&gpc__lock);
	rc = gpc__alloc(p, bytes);
	gpc__last = gpc__now();
	pthread_mutex_unlock(&gpc__lock);
	return rc;
}

void gpc_pool_free(gpc_dptr p)
{
	pthread_mutex_lock(&gpc__lock);
	gpc__free(p);
	gpc__last = gpc__now();
	pthread_cond_signal(&gpc__cv);
	pthread_mutex_unlock(&gpc__lock);
}

void gpc_pool_hold(gpc_dptr p)
{
	pthread_mutex_lock(&gpc__lock);
	for (int i = 0; i < GPC_POOL_SLOTS; i++) {
		struct gpc__blk *b = &gpc__b[i];
		if (b->size && b->used && !b->held && b->p == p) {
			/* Out of the running call's bytes (its peak keeps it):
			 * else no call would end while it is out, and the
			 * bound of the recent calls would never move. */
			b->held = 1;
			gpc__returned(b->size);
			break;
		}
	}
	pthread_mutex_unlock(&gpc__lock);
}

void gpc_pool_trim(uint64_t keep)
{
	pthread_mutex_lock(&gpc__lock);
	gpc__trim(keep);
	pthread_mutex_unlock(&gpc__lock);
}

void gpc_pool_configure(uint64_t device_bytes, int fixed)
{
	pthread_mutex_lock(&gpc__lock);
	gpc__total = device_bytes;
	gpc__fixed = fixed;
	gpc__trim(gpc__keep());
	pthread_mutex_unlock(&gpc__lock);
}

uint64_t gpc_pool_keep(void)
{
	uint64_t k;

	pthread_mutex_lock(&gpc__lock);
	k = gpc__keep();
	pthread_mutex_unlock(&gpc__lock);
	return k;
}

uint64_t gpc_pool_cached(void)
{
	uint64_t c;

	pthread_mutex_lock(&gpc__lock);
	c = gpc__cached;
	pthread_mutex_unlock(&gpc__lock);
	return c;
}

/* The idle thread: wakes when a buffer is returned, at the idle deadline,
 * and at stop; frees the cache (its own push of the context) once
 * GPC_POOL_IDLE_S passed without a use. Signals are blocked in it (the
 * program's handlers must not run on a thread it does not know). */
static void *gpc__idle(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&gpc__lock);
	while (!gpc__th_stop) {
		struct timespec until = { 0, 0 };
		time_t now = gpc__now();
		if (gpc__cached && now >= gpc__last + GPC_POOL_IDLE_S) {
			gpc_ctx c;
			if (gpc_cu.CtxPushCurrent(gpc_st.ctx) == 0) {
				gpc__trim(0);
				/* the copy engine's pinned staging too */
				(void)gpc_xfer_idle();
				(void)gpc_cu.CtxPopCurrent(&c);
			} else {
				gpc__last = now;        /* try again later */
			}
			continue;
		}
		until.tv_sec = gpc__cached ? gpc__last + GPC_POOL_IDLE_S
					   : now + 3600;
		(void)pthread_cond_timedwait(&gpc__cv, &gpc__lock, &until);
	}
	pthread_mutex_unlock(&gpc__lock);
	return NULL;
}

int gpc_pool_start(void)
{
	const char *mode = secure_getenv("GPU_OFFLOAD_CUDA_POOL");
	size_t fr = 0, tot = 0;
	sigset_t all, old;
	pthread_attr_t at;
	int rc;

	if (gpc__th_on)
		return 0;
	if (gpc_cu.MemGetInfo(&fr, &tot) != 0)
		tot = 0;
	gpc_pool_configure(tot, mode && !strcmp(mode, "fixed"));
	gpc__th_stop = 0;
	gpc__last = gpc__now();
	sigfillset(&all);
	pthread_attr_init(&at);
	/* The driver's cuMemFree runs on it: more than a bare minimum. */
	pthread_attr_setstacksize(&at, 256 * 1024);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&gpc__th, &at, gpc__idle, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&at);
	if (rc != 0)
		return -1;
	gpc__th_on = 1;
	return 0;
}

/* Stop the idle thread, then free every buffer, handed out or not (stop:
 * the frontend released its buffers already; anything else is ours). */
void gpc_pool_release_all(void)
{
	if (gpc__th_on) {
		pthread_mutex_lock(&gpc__lock);
		gpc__th_stop = 1;
		pthread_cond_signal(&gpc__cv);
		pthread_mutex_unlock(&gpc__lock);
		pthread_join(gpc__th, NULL);
		gpc__th_on = 0;
	}
	for (int i = 0; i < GPC_POOL_SLOTS; i++)
		if (gpc__b[i].size)
			gpc__drop(&gpc__b[i]);
	gpc__cached = 0;
	gpc__inuse = gpc__peak = 0;
	memset(gpc__peaks, 0, sizeof gpc__peaks);
}
