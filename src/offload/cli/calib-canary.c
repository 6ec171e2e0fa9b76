/*
 * calib-canary.c - the quiet-machine rule (calib-canary.h).
 */
#include "calib-canary.h"

static int gpo__quiet(const struct gpo_crule *r, double *quiet, double t)
{
	/* A faster canary than any before: the machine is quieter than it
	 * was when the workload started, and that is the reference now. */
	if (t < *quiet)
		*quiet = t;
	return t <= r->slow * *quiet;
}

int gpo_calib_point(const struct gpo_crule *r, double quiet,
		    double (*canary)(void *), void (*measure)(void *, int),
		    void *arg, struct gpo_cresult *res)
{
	res->attempts = 0;
	res->clean = 0;
	res->unsettled = 0;
	for (;;) {
		int settled = 0;

		for (int i = 0; i < r->max_settle && !settled; i++)
			settled = gpo__quiet(r, &quiet, canary(arg));
		if (!settled)
			res->unsettled++;
		measure(arg, res->attempts++);
		if (gpo__quiet(r, &quiet, canary(arg))) {
			res->clean = 1;
			break;
		}
		if (res->attempts >= r->max_attempts)
			break;
	}
	res->quiet = quiet;
	return res->attempts;
}
