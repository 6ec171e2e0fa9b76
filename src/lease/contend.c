/*
 * contend.c - for processes that give their lease back when someone else
 * waits (lease.h, "Leases that are given back").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

int gm_lease_contended(const char *lock_dir, const struct gm_lease *lease,
		       const char *job, char *err, size_t errlen)
{
	struct gm_state st;
	uint64_t mine = 0;
	uid_t me = geteuid();
	int rc, found = 0;

	for (int i = 0; i < lease->ndevices; i++)
		mine |= UINT64_C(1) << lease->devices[i];
	rc = gm_state_read(lock_dir, &st, err, errlen);
	if (rc)
		return rc;
	for (int i = 0; i < st.nwaiters && !found; i++) {
		const struct gm_state_waiter *w = &st.waiters[i];
		if (w->uid == me && strcmp(w->job, job) == 0)
			continue;
		for (int j = 0; j < w->ndevices; j++)
			if (w->devices[j] >= 0 && w->devices[j] < GM_MAX_DEVICES &&
			    (mine & (UINT64_C(1) << w->devices[j])))
				found = 1;
	}
	gm_state_free(&st);
	return found;
}
