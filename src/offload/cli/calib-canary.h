/*
 * calib-canary.h - the quiet-machine rule of the calibration workload
 * (docs/offload.md, "Calibration"): a small fixed CPU job, the canary,
 * runs before and after every measurement point. A point starts only
 * once the canary runs near its quiet time, and is measured again when
 * the canary after it was slow (the machine got busy meanwhile), a
 * bounded number of times.
 *
 * The rule is a function of the canary's timings only: no clock, no
 * environment, so that tests drive it with synthetic timings
 * (tests/offload/calib-unit.c).
 */
#ifndef GPUOFFLOAD_CALIB_CANARY_H
#define GPUOFFLOAD_CALIB_CANARY_H

struct gpo_crule {
	double slow;        /* a canary above slow * quiet is "slow" (1.5) */
	int max_settle;     /* canary runs waiting for a quiet one (20) */
	int max_attempts;   /* measurements of one point at most (3) */
};

/* What happened to one point. */
struct gpo_cresult {
	int attempts;       /* measurements made (1 = not repeated) */
	int clean;          /* 1: the canary after the last one was quiet */
	int unsettled;      /* measurements started without a quiet canary
	                     * (the settle runs were used up) */
	double quiet;       /* the quiet time afterwards (the fastest
	                     * canary seen so far, this point's included) */
};

/*
 * Run one point under the rule `r`: `canary(arg)` runs the canary and
 * returns its seconds; `measure(arg, attempt)` measures the point once
 * (attempt 0, 1, ...). `quiet` is the fastest canary seen before. Before
 * each measurement, up to r->max_settle canaries until one is quiet;
 * after it, one canary: quiet ends the point, slow repeats it unless
 * r->max_attempts measurements were made (the last one is then kept,
 * res->clean = 0). Fills *res; returns res->attempts.
 */
int gpo_calib_point(const struct gpo_crule *r, double quiet,
		    double (*canary)(void *), void (*measure)(void *, int),
		    void *arg, struct gpo_cresult *res);

#endif
