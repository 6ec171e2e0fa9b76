/*
 * xfault.c - the copy engine's prefault workers (xfault.h).
 *
 * A job is a page-aligned host range, cut into pieces of GPC_XFAULT_PIECE
 * bytes (a multiple of 2 MiB, so that each transparent huge page is
 * faulted by one worker); the workers claim pieces in order from the
 * oldest job and madvise(MADV_POPULATE_WRITE) each. All bookkeeping is
 * under one mutex; only madvise runs outside it. Jobs are forgotten once
 * every piece is done, which gpc_xfault_wait waits for.
 *
 * The workers exist between gpc_xfault_start and gpc_xfault_stop (the
 * backend's start and stop: never at load time), sleep on a condition
 * variable while there is nothing to do, block every signal, and make no
 * CUDA call.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "xfault.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  /* Linux 5.14 */
#endif

#define GPC_XFAULT_MAX 16
#define GPC_XFAULT_PIECE (8ull << 20)

struct gpc__fjob {
	char *base;
	uint64_t len;
	uint64_t next;          /* offset of the next piece to claim */
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t work, done;
	pthread_t tid[GPC_XFAULT_MAX];
	int nworkers, quit;
	struct gpc__fjob job[GPC_XFAULT_JOBS];
	int njobs, first;       /* jobs queued; the oldest with pieces left */
	int running;            /* pieces claimed, not done */
	int waiting;
	void (*hook)(void);
	struct gpc_xfault_stats st;
} gpc__xf = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
	     PTHREAD_COND_INITIALIZER };

/* Work left: a piece to claim or one running. Called with mu. */
static int gpc__busy(void)
{
	return gpc__xf.first < gpc__xf.njobs || gpc__xf.running > 0;
}

static void *gpc__fworker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&gpc__xf.mu);
	while (!gpc__xf.quit) {
		struct gpc__fjob *j;
		void (*hook)(void);
		char *at;
		uint64_t len;
		int rc;

		if (gpc__xf.first >= gpc__xf.njobs) {
			pthread_cond_wait(&gpc__xf.work, &gpc__xf.mu);
			continue;
		}
		j = &gpc__xf.job[gpc__xf.first];
		at = j->base + j->next;
		len = j->len - j->next < GPC_XFAULT_PIECE ? j->len - j->next :
		      GPC_XFAULT_PIECE;
		j->next += len;
		if (j->next == j->len)
			gpc__xf.first++;
		gpc__xf.running++;
		hook = gpc__xf.hook;
		pthread_mutex_unlock(&gpc__xf.mu);
		if (hook)
			hook();
		rc = madvise(at, len, MADV_POPULATE_WRITE);
		pthread_mutex_lock(&gpc__xf.mu);
		if (rc != 0)
			gpc__xf.st.errors++;
		gpc__xf.st.pieces++;
		gpc__xf.running--;
		if (!gpc__busy()) {
			gpc__xf.njobs = gpc__xf.first = 0;
			pthread_cond_broadcast(&gpc__xf.done);
		}
	}
	pthread_mutex_unlock(&gpc__xf.mu);
	return NULL;
}

int gpc_xfault_start(int n)
{
	sigset_t all, old;

	if (n > GPC_XFAULT_MAX)
		n = GPC_XFAULT_MAX;
	pthread_mutex_lock(&gpc__xf.mu);
	gpc__xf.quit = 0;
	gpc__xf.njobs = gpc__xf.first = gpc__xf.running = 0;
	pthread_mutex_unlock(&gpc__xf.mu);
	/* The workers inherit a full mask: no signal of the program is ever
	 * delivered to them. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	while (gpc__xf.nworkers < n &&
	       pthread_create(&gpc__xf.tid[gpc__xf.nworkers], NULL,
			      gpc__fworker, NULL) == 0)
		gpc__xf.nworkers++;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return 0;
}

void gpc_xfault_stop(void)
{
	gpc_xfault_wait();
	pthread_mutex_lock(&gpc__xf.mu);
	gpc__xf.quit = 1;
	pthread_cond_broadcast(&gpc__xf.work);
	pthread_mutex_unlock(&gpc__xf.mu);
	for (int i = 0; i < gpc__xf.nworkers; i++)
		pthread_join(gpc__xf.tid[i], NULL);
	gpc__xf.nworkers = 0;
}

void gpc_xfault_add(void *host, uint64_t pitch, uint64_t width,
		    uint64_t rows)
{
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE), span;
	uintptr_t a = (uintptr_t)host, b;
	struct gpc__fjob *j;

	if (!width || !rows || !host)
		return;
	span = (rows - 1) * pitch + width;
	if (span < GPC_XFAULT_MIN)
		return;
	/* Rows a page or more apart (a block of a larger matrix): the span
	 * holds whole pages that the copy never writes, and faulting them in
	 * would grow the program's memory by up to pitch/width times the
	 * result's. A hint only: the copy faults in its own pages. */
	if (rows > 1 && pitch > width && pitch - width >= pg)
		return;
	/* Whole pages: populating a page the range shares with other data
	 * changes none of it either. */
	b = a + span;
	a -= a % pg;
	b += (pg - b % pg) % pg;
	pthread_mutex_lock(&gpc__xf.mu);
	if (gpc__xf.nworkers && !gpc__xf.quit &&
	    gpc__xf.njobs < GPC_XFAULT_JOBS) {
		j = &gpc__xf.job[gpc__xf.njobs++];
		j->base = (char *)a;
		j->len = b - a;
		j->next = 0;
		gpc__xf.st.jobs++;
		gpc__xf.st.bytes += b - a;
		pthread_cond_broadcast(&gpc__xf.work);
	}
	pthread_mutex_unlock(&gpc__xf.mu);
}

void gpc_xfault_wait(void)
{
	pthread_mutex_lock(&gpc__xf.mu);
	if (gpc__busy()) {
		gpc__xf.st.waits++;
		gpc__xf.waiting++;
		while (gpc__busy())
			pthread_cond_wait(&gpc__xf.done, &gpc__xf.mu);
		gpc__xf.waiting--;
	}
	pthread_mutex_unlock(&gpc__xf.mu);
}

void gpc_xfault_stats(struct gpc_xfault_stats *st)
{
	pthread_mutex_lock(&gpc__xf.mu);
	*st = gpc__xf.st;
	st->workers = gpc__xf.nworkers;
	pthread_mutex_unlock(&gpc__xf.mu);
}

void gpc_xfault_set_hook(void (*hook)(void))
{
	pthread_mutex_lock(&gpc__xf.mu);
	gpc__xf.hook = hook;
	pthread_mutex_unlock(&gpc__xf.mu);
}

int gpc_xfault_waiting(void)
{
	int n;

	pthread_mutex_lock(&gpc__xf.mu);
	n = gpc__xf.waiting;
	pthread_mutex_unlock(&gpc__xf.mu);
	return n;
}
