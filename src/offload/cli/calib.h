/*
 * calib.h - `gpu-offload calibrate`'s fitting (calib-fit.c), shared with
 * the command (cmd_calibrate.c): the workload's log joined with the
 * library's trace of the same pass, and the profile's curves and copy
 * lines fitted from what remains.
 */
#ifndef GPUOFFLOAD_CALIB_H
#define GPUOFFLOAD_CALIB_H

#include <stdint.h>

#include "profile.h"

/* One call of a point's accepted measurement (the workload's log). */
struct gpo_cwin {
	int64_t t0, t1;        /* CLOCK_REALTIME window around the call */
	int64_t info;          /* LAPACK info (0 for BLAS) */
	int point;             /* index into gpo_clog.pts */
	int matched;           /* a trace record fell into it */
};

struct gpo_cpoint_log {
	char name[16];         /* curve name, "dgemm" */
	int n, attempts, clean, unsettled;
};

/* What the workload said of one pass. */
struct gpo_clog {
	char library[1024];    /* the CPU libraries, ':'-separated */
	char scheme[64];       /* e.g. "scipy_ _64_ 1" */
	double quiet;
	char budget[512];      /* "NAME N ...": curves the deadline cut, from
	                        * size N on */
	int npts, nwin;
	struct gpo_cpoint_log *pts;
	struct gpo_cwin *win;
	char missing[512];     /* functions the library lacks, blank-separated */
	char smooth[512];      /* "NAME N, ...": curves stopped where smooth */
	/* where the pass's time went ("spent" lines): making matrices, the
	 * accepted calls, the rest; and its costliest point */
	double prep_s, calls_s, other_s, worst_s;
	char worst[32];
};

/* Why calls of a pass were not used. */
struct gpo_cstats {
	int used;              /* calls that went into the fit */
	int info;              /* LAPACK info != 0 */
	int gpu_failed;        /* GPU pass: the GPU failed or declined it */
	int unmatched;         /* the log's calls that no record matched */
};

struct gpo_cfit;

/* Read the workload's log. 0, or -errno. */
int gpo_clog_read(const char *path, struct gpo_clog *l);
void gpo_clog_free(struct gpo_clog *l);

/* A fit in progress (one per pass). */
struct gpo_cfit *gpo_cfit_new(void);
void gpo_cfit_free(struct gpo_cfit *f);
/*
 * Add the pass's traces in `dir` (every gpo-*.trace there) that ran on
 * `device` (GPO_CPU, GPO_GPU) and fall into a call window of `l` whose
 * info is 0: a call not on `device`, or one the GPU failed, is counted in
 * *st and left out. Returns the calls used, or -errno.
 */
int gpo_cfit_read(struct gpo_cfit *f, const char *dir, int device,
		  struct gpo_clog *l, struct gpo_cstats *st);
/*
 * The fit's accuracy, as the model uses it: each point of each curve
 * predicted from its neighbours alone (log-log interpolation, held flat
 * past the ends, as src/offload/model.c does), against its measured
 * time: the median, 90th percentile and worst |predicted/measured - 1|
 * over the points, the worst one named in `worst`. What a coarser grid
 * would cost, and how smooth the curves are. Call after
 * gpo_cfit_profile (the points sorted). Returns the points compared.
 */
int gpo_cfit_error(const struct gpo_cfit *f, double *median, double *p90,
		   double *max, char *worst, size_t len);
/* Append the fit's speed curves (device 'c' or 'g') to `p`; for the GPU,
 * also its copy lines and start-up. 0 or -ENOMEM. */
int gpo_cfit_profile(struct gpo_cfit *f, char dev, struct gpo_profile *p);

#endif
