/*
 * report_gt.c - `gpumutex report`'s measured GPU time (docs/report.md,
 * "GPU time"): the gputime records that processes running with
 * GPUMUTEX_GPU_TIME=1 write per lease, summed per lease, job and user
 * against the GPU time the leases held.
 *
 * A process's records are cumulative for its lease, so its last one
 * counts. A lease's busy share is the busy GPU time its processes
 * recorded (summed; members of one job on the same GPUs could overlap,
 * so it is capped at 100 %) over the GPU time they measured (the longest
 * held= of its processes times its GPUs): both from CUPTI's clock, so
 * the share does not depend on how the lease's own ends were known. The
 * busy GPU-hours are that share of the lease's GPU time in the window.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lease.h"
#include "report.h"

struct key {
	uint64_t lease;
	int span;
};

static int by_lease(const void *a, const void *b)
{
	const struct key *x = a, *y = b;

	return x->lease < y->lease ? -1 : x->lease > y->lease;
}

/* Sum one process's last record into its lease (pids[]: the processes
 * seen for that lease, to replace an earlier record of the same one). */
struct acc {
	int pid[64];
	struct gm_ev last[64];
	int n;
};

void gm_report_gt_build(struct gm_report *r)
{
	const struct gm_log *L = r->log;
	struct key *k;
	struct acc *acc;

	r->gt = calloc((size_t)L->nspans + 1, sizeof *r->gt);
	k = calloc((size_t)L->nspans + 1, sizeof *k);
	acc = calloc((size_t)L->nspans + 1, sizeof *acc);
	if (!r->gt || !k || !acc) {
		free(k);
		free(acc);
		return;
	}
	for (int s = 0; s < L->nspans; s++)
		k[s] = (struct key){ L->spans[s].lease, s };
	qsort(k, (size_t)L->nspans, sizeof *k, by_lease);
	for (int i = 0; i < L->nev; i++) {
		const struct gm_ev *e = &L->ev[i];
		struct key want = { e->lease, 0 }, *hit;
		struct acc *a;
		int j;

		if (e->kind != EV_GPUTIME)
			continue;
		hit = bsearch(&want, k, (size_t)L->nspans, sizeof *k, by_lease);
		if (!hit || L->spans[hit->span].uid != e->uid)
			continue;
		a = &acc[hit->span];
		for (j = 0; j < a->n && a->pid[j] != e->pid; j++)
			;
		if (j == a->n) {
			if (a->n == 64)
				continue;
			a->pid[a->n++] = e->pid;
		}
		a->last[j] = *e;
	}
	for (int s = 0; s < L->nspans; s++) {
		const struct gm_span *p = &L->spans[s];
		struct gm_rgt *g = &r->gt[s];
		int ndev = __builtin_popcountll(p->dev);
		int64_t len = p->end - p->start, in, held = 0;
		struct gm_rwho *u, *j;

		for (int i = 0; i < acc[s].n; i++) {
			const struct gm_ev *e = &acc[s].last[i];

			g->busy += e->gpubusy ? e->gpubusy : e->busy;
			g->kernel += e->kernel;
			g->copy += e->copy;
			if (e->idlemax > g->idlemax)
				g->idlemax = e->idlemax;
			if (e->held > held)
				held = e->held;
			g->procs++;
		}
		if (!g->procs)
			continue;
		held *= ndev ? ndev : 1;
		g->frac = held > 0 ? (double)g->busy / (double)held : 0;
		if (g->frac > 1)
			g->frac = 1;
		in = len > 0 ? gm_report_clip(p->start, p->end, r->from, r->to) : 0;
		g->held_in = in * (ndev ? ndev : 1);
		g->busy_in = (int64_t)(g->held_in * g->frac);
		u = gm_report_who(r, p->uid, NULL);
		j = gm_report_who(r, p->uid, p->job);
		if (u) {
			u->measured_hours += g->held_in / 3600e9;
			u->busy_hours += g->busy_in / 3600e9;
		}
		if (j) {
			j->measured_hours += g->held_in / 3600e9;
			j->busy_hours += g->busy_in / 3600e9;
		}
		r->gt_leases++;
	}
	free(k);
	free(acc);
}

double gm_report_gt_frac(const struct gm_report *r, int s)
{
	if (!r->gt || !r->gt[s].procs)
		return -1;
	return r->gt[s].frac;
}

static void pct(char *out, size_t len, double busy, double held)
{
	if (held > 0)
		snprintf(out, len, "%.1f%%", 100.0 * busy / held);
	else
		snprintf(out, len, "-");
}

void gm_report_gt_text(FILE *f, const struct gm_report *r)
{
	const struct gm_log *L = r->log;
	char user[64], js[GM_JOB_SHORT + 1], b[32], p[16], a[32], c[32], d[32];
	int shown = 0;

	if (!r->gt_leases)
		return;
	fprintf(f, "\nGPU time measured in leases (GPUMUTEX_GPU_TIME=1; docs/report.md, \"GPU time\"):\n  %-10s %-18s %14s %14s %6s\n",
		"USER", "JOB", "GPU-HOURS HELD", "GPU-HOURS BUSY", "BUSY");
	for (int i = 0; i < r->nusers; i++) {
		const struct gm_rwho *u = &r->users[i];

		if (u->measured_hours <= 0)
			continue;
		gm_user_name(u->uid, user, sizeof user);
		pct(p, sizeof p, u->busy_hours, u->measured_hours);
		fprintf(f, "  %-10s %-18s %14.4f %14.4f %6s\n", user, "(all)",
			u->measured_hours, u->busy_hours, p);
	}
	for (int i = 0; i < r->njobs && i < r->top; i++) {
		const struct gm_rwho *j = &r->jobs[i];

		if (j->measured_hours <= 0)
			continue;
		gm_user_name(j->uid, user, sizeof user);
		pct(p, sizeof p, j->busy_hours, j->measured_hours);
		fprintf(f, "  %-10s %-18s %14.4f %14.4f %6s\n", user,
			gm_job_short(j->job, js, sizeof js), j->measured_hours,
			j->busy_hours, p);
	}
	fprintf(f, "  Leases:\n  %-18s %-6s %-10s %-10s %6s %-10s %-10s %s\n",
		"JOB", "GPUS", "HELD", "BUSY", "BUSY", "KERNELS", "COPIES",
		"LONGEST IDLE");
	for (int s = 0; s < L->nspans && shown < r->top; s++) {
		const struct gm_span *q = &L->spans[s];
		const struct gm_rgt *g = &r->gt[s];
		char list[256];

		if (!g->procs || !g->held_in)
			continue;
		shown++;
		gm_mask_list(q->dev, list, sizeof list);
		gm_report_dur(a, sizeof a, g->held_in);
		gm_report_dur(b, sizeof b, g->busy_in);
		gm_report_dur(c, sizeof c, g->kernel);
		gm_report_dur(d, sizeof d, g->copy);
		pct(p, sizeof p, g->frac, 1.0);
		fprintf(f, "  %-18s %-6s %-10s %-10s %6s %-10s %-10s ",
			gm_job_short(q->job, js, sizeof js), list, a, b, p, c, d);
		gm_report_dur(a, sizeof a, g->idlemax);
		fprintf(f, "%s\n", a);
	}
}

void gm_report_gt_json_who(const struct gm_report *r, const struct gm_rwho *w)
{
	(void)r;
	if (w->measured_hours <= 0) {
		printf(",\"gpu_hours_measured\":0,\"gpu_hours_busy\":null,\"busy_pct\":null");
		return;
	}
	printf(",\"gpu_hours_measured\":%.9f,\"gpu_hours_busy\":%.9f,\"busy_pct\":%.3f",
	       w->measured_hours, w->busy_hours,
	       100.0 * w->busy_hours / w->measured_hours);
}

void gm_report_gt_json_lease(const struct gm_report *r, int s)
{
	const struct gm_rgt *g = r->gt ? &r->gt[s] : NULL;

	if (!g || !g->procs) {
		printf(",\"gpu_time\":null");
		return;
	}
	printf(",\"gpu_time\":{\"processes\":%d,\"held_gpu_s\":%.6f,\"busy_gpu_s\":%.6f,\"busy_pct\":%.3f,\"measured_busy_s\":%.6f",
	       g->procs, g->held_in / 1e9, g->busy_in / 1e9, 100.0 * g->frac,
	       g->busy / 1e9);
	printf(",\"kernel_s\":%.6f,\"copy_s\":%.6f,\"longest_idle_s\":%.6f}",
	       g->kernel / 1e9, g->copy / 1e9, g->idlemax / 1e9);
}

void gm_report_gt_html(FILE *f, const struct gm_report *r)
{
	char user[64], js[GM_JOB_SHORT + 1], p[16];

	if (!r->gt_leases)
		return;
	/* User names and job ids are plain words ([A-Za-z0-9_-], the lease
	 * core checks job ids), so nothing here needs escaping. */
	fprintf(f, "<h2>GPU time measured in leases</h2><table id=\"gputime-table\"><tr><th class=\"l\">user</th><th class=\"l\">job</th><th>GPU-hours held</th><th>GPU-hours busy</th><th>busy</th></tr>\n");
	for (int pass = 0; pass < 2; pass++) {
		const struct gm_rwho *v = pass ? r->jobs : r->users;
		int n = pass ? r->njobs : r->nusers;

		for (int i = 0; i < n && i < (pass ? r->top : n); i++) {
			if (v[i].measured_hours <= 0)
				continue;
			gm_user_name(v[i].uid, user, sizeof user);
			pct(p, sizeof p, v[i].busy_hours, v[i].measured_hours);
			fprintf(f, "<tr><td class=\"l\">%s</td><td class=\"l\">%s</td><td>%.4f</td><td>%.4f</td><td>%s</td></tr>\n",
				user, pass ? gm_job_short(v[i].job, js, sizeof js) :
				"(all)", v[i].measured_hours, v[i].busy_hours, p);
		}
	}
	fprintf(f, "</table>\n");
}
