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
};

/* Compute every number of *r from r->log over [r->from, r->to]. */
void gm_report_build(struct gm_report *r);
/* Who held the wait's GPUs while it waited: "user/job (cmd), ...". */
void gm_report_holders(const struct gm_report *r, const struct gm_wait *x,
		       char *out, size_t len);

/* The "Idle suspensions" section of the text report (report_susp.c). */
void gm_report_suspensions(FILE *f, const struct gm_report *r);
/* The end of the suspension whose record is L->ev[s]: its process's
 * next resume record, else `to`. */
int64_t gm_report_susp_end(const struct gm_log *L, int s, int64_t to);

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
