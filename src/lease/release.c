/*
 * release.c - giving a process's part of a lease back before it exits
 * (the preload library does it when the process holds no context).
 */
#include "events.h"
#include "internal.h"

void gm_lease_release(struct gm_lease *l)
{
	for (int i = 0; i < l->ndevices; i++) {
		if (l->fds[i] >= 0)
			gm__close(l->fds[i]);
		l->fds[i] = -1;
	}
	gm__ev_gave_back(l);
}
