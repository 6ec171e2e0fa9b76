/*
 * report.h - the numbers of `gpumutex report` (report.c) and its picture
 * (svg.c). Every number is defined in docs/report.md.
 */
#ifndef GPUMUTEX_CLI_REPORT_H
#define GPUMUTEX_CLI_REPORT_H

#include <stdio.h>

#include "evlog.h"

struct gm_rgpu {
	int index;
	int64_t leased, idle_waited, idle_free;   /* ns within the window */
	int jobs, handoffs;
	int64_t util_sampled, util_busy_sum;      /* for the mean utilisation */
};

struct gm_rwho {                  /* a user or a job */
	unsigned uid;
	char job[72];
	const char *cmd;
	double gpu_hours;
	int leases, waits, timeouts;
	int64_t waited;
	/* GPU time measured (report_gt.c): the held GPU-hours of leases with
	 * gputime records, and the busy GPU-hours they recorded. */
	double measured_hours, busy_hours;
};

/* A lease's measured GPU time (report_gt.c), ns; procs 0: no record. */
struct gm_rgt {
	int procs;
	int64_t busy, kernel, copy, idlemax; /* the whole lease */
	double frac;                         /* busy share of measured time */
	int64_t held_in, busy_in;            /* GPU time within the window */
};

struct gm_ridle {                 /* a lease that held an idle GPU */
	int span;
	int dev;
	int64_t idle, sampled;
	double mean_util;
};

struct gm_report {
	const char *lock_dir;
	int64_t from, to;             /* the window, real ns */
	struct gm_log *log;
	struct gm_rgpu gpus[64];
	int ngpus;
	int nwaits, granted, timeouts, errors, died, waiting;
	int64_t p50, p95, max;
	int *longest;                 /* indices into log->waits, longest first */
	int nlongest;
	struct gm_rwho *users, *jobs;
	int nusers, njobs;
	struct gm_ridle *idle;
	int nidle;
	int top;                      /* N of "top N" */
	struct gm_rgt *gt;            /* per log->spans index (report_gt.c) */
	int gt_leases;                /* leases with gputime records */
};

/* Compute every number of *r from r->log over [r->from, r->to]. */
void gm_report_build(struct gm_report *r);

/* How much of [a, b) lies in [lo, hi), ns (0 when none). */
int64_t gm_report_clip(int64_t a, int64_t b, int64_t lo, int64_t hi);
/* Who held the wait's GPUs while it waited: "user/job (cmd), ...". */
void gm_report_holders(const struct gm_report *r, const struct gm_wait *x,
		       char *out, size_t len);

/* The "Idle suspensions" section of the text report (report_susp.c). */
void gm_report_suspensions(FILE *f, const struct gm_report *r);
/* The end of the suspension whose record is L->ev[s]: its process's
 * next resume record, else `to`. */
int64_t gm_report_susp_end(const struct gm_log *L, int s, int64_t to);

/* A user's (job NULL) or job's entry, made if new; NULL: no memory. */
struct gm_rwho *gm_report_who(struct gm_report *r, unsigned uid,
			      const char *job);

/* Measured GPU time (report_gt.c): r->gt and the users' and jobs'
 * measured_hours/busy_hours from the gputime records; the text section
 * and the page's table (nothing when there are no records); the JSON members of a user or job
 * and of a lease (each starting with a comma); a lease's busy fraction
 * of its GPU time (-1: no record), for the picture. */
void gm_report_gt_build(struct gm_report *r);
void gm_report_gt_text(FILE *f, const struct gm_report *r);
void gm_report_gt_html(FILE *f, const struct gm_report *r);
void gm_report_gt_json_who(const struct gm_report *r, const struct gm_rwho *w);
void gm_report_gt_json_lease(const struct gm_report *r, int s);
double gm_report_gt_frac(const struct gm_report *r, int s);

/* Idle suspensions in the JSON document (report_susp.c): the list of
 * suspensions, and the totals of a lease (lease != 0) or of a job (uid,
 * job) as a "suspensions" member (each starting with a comma). */
void gm_report_susp_json(const struct gm_report *r);
void gm_report_susp_json_totals(const struct gm_report *r, uint64_t lease,
				unsigned uid, const char *job);

/* The numbers as one JSON document on stdout (report_json.c). */
void gm_report_json(const struct gm_report *r);

/* The picture, as SVG (svg.c); `standalone` adds the XML prolog. */
void gm_report_svg(FILE *f, const struct gm_report *r, int standalone);
/* The self-contained HTML page: the picture and every table. */
void gm_report_html(FILE *f, const struct gm_report *r);
/* A lease's label: its program, or an interpreter's script, and the
 * arguments after it. */
void gm_report_label(const char *cmd, char *out, size_t len);
/* Seconds as the text report writes them ("3.20s", "2m13s"). */
void gm_report_dur(char *out, size_t len, int64_t ns);

#endif
