/*
 * xpool.c - the copy engine's worker threads (xpool.h).
 *
 * One job at a time (the frontend serialises calls): the caller publishes
 * a 2-D copy, cut into parts of equal byte count (a part may start and end
 * inside a row, so a single 16 MiB row is shared as well as 4096 short
 * ones), wakes the workers, takes parts itself, and waits until every part
 * is done. All bookkeeping is under one mutex; only the memcpy runs
 * outside it. A part is claimed together with a copy of the job, so a
 * worker that wakes late never mixes two jobs.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>

#include "xpool.h"

#define GPC_XPOOL_MAX 32
/* Below this many bytes a copy runs on the caller alone: waking threads
 * costs more than it saves. */
#define GPC_XPOOL_MIN_BYTES (256u << 10)
/* Parts start on this boundary of the packed byte stream (cache lines). */
#define GPC_XPOOL_ALIGN 64u

struct gpc_job {
	char *dst;
	const char *src;
	uint64_t dpitch, spitch, width, rows;
	uint64_t total;         /* width * rows */
	int nparts;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t work, done;
	pthread_t tid[GPC_XPOOL_MAX];
	int nworkers;
	int quit;
	struct gpc_job job;
	int next, finished;     /* parts claimed, parts done */
} gpc__xpool = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
		PTHREAD_COND_INITIALIZER };

int gpc_xpool_default_threads(void)
{
	cpu_set_t set;
	int n;

	CPU_ZERO(&set);
	if (sched_getaffinity(0, sizeof set, &set) != 0)
		return 1;
	n = CPU_COUNT(&set);
	if (n > 8)
		n = 8;
	return n < 1 ? 1 : n;
}

/* Part p of j: bytes [p*total/n, (p+1)*total/n) of the packed stream,
 * boundaries rounded down to GPC_XPOOL_ALIGN. */
static void gpc__part(const struct gpc_job *j, int p)
{
	uint64_t a = j->total / (uint64_t)j->nparts * (uint64_t)p;
	uint64_t b = p + 1 == j->nparts ? j->total :
		     j->total / (uint64_t)j->nparts * (uint64_t)(p + 1);

	a -= a % GPC_XPOOL_ALIGN;
	if (p + 1 != j->nparts)
		b -= b % GPC_XPOOL_ALIGN;
	while (a < b) {
		uint64_t r = a / j->width, off = a % j->width;
		uint64_t len = j->width - off;
		if (len > b - a)
			len = b - a;
		memcpy(j->dst + r * j->dpitch + off, j->src + r * j->spitch + off,
		       len);
		a += len;
	}
}

/* Claim and copy parts until none is left; called and returns with mu. */
static void gpc__drain(void)
{
	while (gpc__xpool.next < gpc__xpool.job.nparts) {
		struct gpc_job j = gpc__xpool.job;
		int p = gpc__xpool.next++;
		pthread_mutex_unlock(&gpc__xpool.mu);
		gpc__part(&j, p);
		pthread_mutex_lock(&gpc__xpool.mu);
		if (++gpc__xpool.finished == gpc__xpool.job.nparts)
			pthread_cond_signal(&gpc__xpool.done);
	}
}

static void *gpc__worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&gpc__xpool.mu);
	while (!gpc__xpool.quit) {
		gpc__drain();
		if (!gpc__xpool.quit)
			pthread_cond_wait(&gpc__xpool.work, &gpc__xpool.mu);
	}
	pthread_mutex_unlock(&gpc__xpool.mu);
	return NULL;
}

int gpc_xpool_start(int nthreads)
{
	sigset_t all, old;

	if (nthreads <= 0)
		nthreads = gpc_xpool_default_threads();
	if (nthreads > GPC_XPOOL_MAX + 1)
		nthreads = GPC_XPOOL_MAX + 1;
	gpc__xpool.quit = 0;
	gpc__xpool.next = gpc__xpool.finished = 0;
	gpc__xpool.job.nparts = 0;
	/* The workers inherit a full mask: no signal of the program is
	 * ever delivered to them. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	while (gpc__xpool.nworkers < nthreads - 1 &&
	       pthread_create(&gpc__xpool.tid[gpc__xpool.nworkers], NULL,
			      gpc__worker, NULL) == 0)
		gpc__xpool.nworkers++;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return 0;
}

void gpc_xpool_stop(void)
{
	pthread_mutex_lock(&gpc__xpool.mu);
	gpc__xpool.quit = 1;
	pthread_cond_broadcast(&gpc__xpool.work);
	pthread_mutex_unlock(&gpc__xpool.mu);
	for (int i = 0; i < gpc__xpool.nworkers; i++)
		pthread_join(gpc__xpool.tid[i], NULL);
	gpc__xpool.nworkers = 0;
}

int gpc_xpool_threads(void)
{
	return gpc__xpool.nworkers + 1;
}

void gpc_xpool_copy(void *dst, uint64_t dpitch, const void *src,
		   uint64_t spitch, uint64_t width, uint64_t rows)
{
	struct gpc_job j;

	if (!width || !rows)
		return;
	j.dst = dst;
	j.src = src;
	j.dpitch = dpitch;
	j.spitch = spitch;
	j.width = width;
	j.rows = rows;
	j.total = width * rows;
	j.nparts = gpc__xpool.nworkers + 1;
	if (j.total < GPC_XPOOL_MIN_BYTES || j.nparts == 1 ||
	    j.total < (uint64_t)j.nparts * GPC_XPOOL_ALIGN) {
		j.nparts = 1;
		gpc__part(&j, 0);
		return;
	}
	pthread_mutex_lock(&gpc__xpool.mu);
	gpc__xpool.job = j;
	gpc__xpool.next = gpc__xpool.finished = 0;
	pthread_cond_broadcast(&gpc__xpool.work);
	gpc__drain();
	while (gpc__xpool.finished < gpc__xpool.job.nparts)
		pthread_cond_wait(&gpc__xpool.done, &gpc__xpool.mu);
	gpc__xpool.job.nparts = 0;
	pthread_mutex_unlock(&gpc__xpool.mu);
}
