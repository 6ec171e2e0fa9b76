/*
 * contend.c - for processes that give their lease back when someone else
 * waits (lease.h, "Leases that are given back").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* A waiter this young that free devices can serve is about to be granted
 * them: it is not counted. One that free devices could serve but that
 * still waits after this long is (what keeps it from them is not in the
 * snapshot: a stale reader's lock, say), so a model error costs a holder
 * at most this long, never a waiter its turn. */
#define GM_CONTEND_YOUNG_NS INT64_C(1000000000)

/* A live claim whose job holds a live lease was granted it (a job's other
 * processes join instead of claiming while it lives): its ticket goes in
 * a moment. (Only while young, as below: a record is believed here by
 * its fields, which an old version's flat layout lets others write.) */
static int granted(const struct gm_state *st, const struct gm_state_waiter *w)
{
	for (int i = 0; i < st->nleases; i++)
		if (st->leases[i].uid == w->uid &&
		    strcmp(st->leases[i].job, w->job) == 0)
			return 1;
	return 0;
}

int gm_lease_contended(const char *lock_dir, const struct gm_lease *lease,
		       const char *job, char *err, size_t errlen)
{
	struct gm_state st;
	uint64_t mine = 0, free_ = 0, behind = 0;
	uid_t me = geteuid();
	int rc, found = 0;

	for (int i = 0; i < lease->ndevices; i++)
		mine |= UINT64_C(1) << lease->devices[i];
	rc = gm_state_read(lock_dir, &st, err, errlen);
	if (rc)
		return rc;
	/* Free, or being granted this instant (locked, its record not yet
	 * written): to one of the claims below, which the play serves. */
	for (int i = 0; i < st.ndevices; i++)
		if (st.devices[i].state != GM_DEV_HELD)
			free_ |= UINT64_C(1) << st.devices[i].index;
	/* The queue as the claims will play it, in order: a waiter goes
	 * on when no older waiter still in line wants one of its
	 * candidates, and takes free ones if enough are free; the others
	 * stay in line. Only those count, and only for our devices. */
	for (int i = 0; i < st.nwaiters && !found; i++) {
		const struct gm_state_waiter *w = &st.waiters[i];
		int young = st.now_ns - w->since_ns < GM_CONTEND_YOUNG_NS;
		uint64_t cand = 0, take;
		int n = 0;

		if (young && granted(&st, w))
			continue;
		for (int j = 0; j < w->ndevices; j++)
			if (w->devices[j] >= 0 && w->devices[j] < GM_MAX_DEVICES)
				cand |= UINT64_C(1) << w->devices[j];
		take = cand & free_;
		if (young && !(cand & behind) &&
		    __builtin_popcountll(take) >= w->want) {
			/* served now, by the lowest free ones (as it tries
			 * its candidates in order: near enough) */
			for (int d = 0; d < GM_MAX_DEVICES && n < w->want; d++)
				if (take & (UINT64_C(1) << d)) {
					free_ &= ~(UINT64_C(1) << d);
					n++;
				}
			continue;
		}
		behind |= cand;
		if (w->uid == me && strcmp(w->job, job) == 0)
			continue;       /* our own job's: it joins us */
		found = (cand & mine) != 0;
	}
	gm_state_free(&st);
	return found;
}
