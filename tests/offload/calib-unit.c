/*
 * calib-unit - the calibration workload's quiet-machine rule
 * (src/offload/cli/calib-canary.c) on synthetic canary timings: no clock,
 * so every case is deterministic. Run by test_calibrate.py; prints
 * "ok" or the first case that failed, exit status 0 or 1.
 */
#include <stdio.h>
#include <string.h>

#include "calib-canary.h"

struct script {
	const double *t;   /* canary times handed out in order */
	int n, next;
	int measured;      /* measure() calls */
	int canaries;      /* canary() calls */
};

static double canary(void *arg)
{
	struct script *s = arg;

	s->canaries++;
	/* past the end: the last time again */
	return s->t[s->next < s->n ? s->next++ : s->n - 1];
}

static void measure(void *arg, int attempt)
{
	struct script *s = arg;

	if (attempt != s->measured)
		printf("attempt %d after %d measurements\n", attempt, s->measured);
	s->measured++;
}

static int fails;

static void check(const char *what, const double *t, int n,
		  int attempts, int clean, int unsettled, int canaries,
		  double quiet_after)
{
	struct gpo_crule r = { 1.5, 4, 3 };
	struct script s = { t, n, 0, 0, 0 };
	struct gpo_cresult res;
	int got = gpo_calib_point(&r, 1.0, canary, measure, &s, &res);

	if (got != attempts || res.attempts != attempts ||
	    s.measured != attempts || res.clean != clean ||
	    res.unsettled != unsettled || s.canaries != canaries ||
	    res.quiet != quiet_after) {
		printf("%s: attempts %d (want %d), measured %d, clean %d (%d), unsettled %d (%d), canaries %d (%d), quiet %g (%g)\n",
		       what, res.attempts, attempts, s.measured, res.clean, clean,
		       res.unsettled, unsettled, s.canaries, canaries, res.quiet,
		       quiet_after);
		fails++;
	}
}

int main(void)
{
	/* quiet before and after: one measurement, two canaries */
	static const double quiet[] = { 1.0, 1.2 };
	/* busy at first: it waits (settles) until the canary is quiet */
	static const double settle[] = { 3.0, 2.0, 1.4, 1.1 };
	/* slowed during the point: measured again, then quiet */
	static const double again[] = { 1.0, 2.0, 1.0, 1.0 };
	/* slow after every try: three measurements, the last one kept */
	static const double noisy[] = { 1.0, 9, 1.0, 9, 1.0, 9 };
	/* never quiet: four settle runs, then measured anyway, each time */
	static const double busy[] = { 5.0 };
	/* a faster canary than the reference: it becomes the reference, so
	 * 1.4 (quiet by 1.0) is slow by 0.5 */
	static const double faster[] = { 0.5, 1.4, 0.6, 0.7 };
	/* exactly at the limit (1.5 x quiet) counts as quiet */
	static const double edge[] = { 1.5, 1.5 };

	check("quiet", quiet, 2, 1, 1, 0, 2, 1.0);
	check("settle", settle, 4, 1, 1, 0, 4, 1.0);
	check("again", again, 4, 2, 1, 0, 4, 1.0);
	check("noisy", noisy, 6, 3, 0, 0, 6, 1.0);
	check("busy", busy, 1, 3, 0, 3, 15, 1.0);
	check("faster", faster, 4, 2, 1, 0, 4, 0.5);
	check("edge", edge, 2, 1, 1, 0, 2, 1.0);
	if (!fails)
		printf("ok\n");
	return fails != 0;
}
