/*
 * count.c - the summary's per-thread call counts and their folding into
 * the process's totals (count.h says when, and what a summary may miss),
 * and the light path's gate word.
 *
 * Why per thread: a small call's whole added cost is a few nanoseconds,
 * and one atomic add on a counter every thread shares was a large part of
 * it (numpy makes ~50 such calls per small solve); a thread's own counter
 * is a plain increment. Nothing runs at load time: the key for the exit
 * destructor is created at the first fold of any thread.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "count.h"

__thread struct gpo_tls gpo_tls __attribute__((tls_model("initial-exec")));
uint64_t gpo_count_total[GPO_R_MAX];
/* Shut until the configuration is read and the policy initialised. */
unsigned gpo_fast_word = GPO_FAST_CONFIG | GPO_FAST_POLICY;

static pthread_once_t gpo__once = PTHREAD_ONCE_INIT;
static pthread_key_t gpo__key;
static int gpo__key_ok;

static void gpo__fold_into(struct gpo_tls *t)
{
	for (unsigned r = 0; r < GPO_R_MAX; r++) {
		if (t->n[r]) {
			__atomic_fetch_add(&gpo_count_total[r], t->n[r],
					   __ATOMIC_RELAXED);
			t->n[r] = 0;
		}
	}
}

/* At the thread's exit: its counts go into the totals. Calls the thread
 * makes after this (from later destructors) are folded one by one: the
 * key is not set again, which could outlast the destructor rounds. */
static void gpo__exit(void *p)
{
	struct gpo_tls *t = p;

	gpo__fold_into(t);
	t->keyed = 2;
	t->left = 0;
}

static void gpo__key_make(void)
{
	gpo__key_ok = pthread_key_create(&gpo__key, gpo__exit) == 0;
}

void gpo_count_fold(struct gpo_tls *t)
{
	int e = errno;

	gpo__fold_into(t);
	if (t->keyed == 0) {
		pthread_once(&gpo__once, gpo__key_make);
		/* No key (none left): every count is folded at once. */
		t->keyed = gpo__key_ok &&
			   pthread_setspecific(gpo__key, t) == 0 ? 1 : 2;
	}
	t->left = t->keyed == 1 ? GPO_COUNT_FOLD_EVERY - 1 : 0;
	errno = e;
}

void gpo_count_flush(void)
{
	gpo__fold_into(&gpo_tls);
}

void gpo_count_child(void)
{
	memset(gpo_tls.n, 0, sizeof gpo_tls.n);
}
