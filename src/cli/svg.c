/*
 * svg.c - the report's picture (one row per GPU, a bar per lease coloured
 * by user and labelled with its command, idle stretches inside leases
 * hatched, the queue length beneath, a time axis) and the self-contained
 * HTML page around it. Bars narrower than a few pixels are merged into
 * one block per run, so a day of hundreds of jobs stays readable.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "lease.h"
#include "report.h"

#define W 1200
#define LEFT 96
#define RIGHT 24
#define TOP 44
#define ROW 34
#define GAP 8
#define QH 80
#define THIN 4.0    /* px: bars narrower than this are merged */

static const char *palette[] = {
	"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1",
	"#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#3b5b7a",
};
#define NPAL (int)(sizeof palette / sizeof palette[0])

/* s escaped for XML, at most `max` characters (-1: all); one cut short
 * ends in an ellipsis, so that "fakejob 25..." is never read as
 * "fakejob 25". */
static void esc(FILE *f, const char *s, int max)
{
	int cut = max >= 0 && s && strlen(s) > (size_t)max;

	if (cut)
		max = max > 0 ? max - 1 : 0;
	for (int i = 0; s && *s && (max < 0 || i < max); s++, i++) {
		switch (*s) {
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '&': fputs("&amp;", f); break;
		case '"': fputs("&quot;", f); break;
		default: fputc(*s, f);
		}
	}
	if (cut && max > 0)
		fputs("\xe2\x80\xa6", f); /* U+2026 */
}

/* The short job id (evlog.h); one at a time. */
static const char *jshort(const char *job)
{
	static char b[GM_JOB_SHORT + 1];
	return gm_job_short(job, b, sizeof b);
}

static const char *colour(const struct gm_report *r, unsigned uid)
{
	for (int i = 0; i < r->nusers; i++)
		if (r->users[i].uid == uid)
			return palette[i % NPAL];
	return "#999999";
}

/* The label of a lease: the program's name, or for an interpreter or
 * launcher (python, torchrun, bash...) the script's, and what follows. */
void gm_report_label(const char *cmd, char *out, size_t len)
{
	static const char *launchers[] = { "python", "python3", "torchrun",
		"bash", "sh", "node", "accelerate", "deepspeed", "uv", "env",
		"srun", "gpumutex-run", NULL };
	const char *p = cmd ? cmd : "";

	for (int hop = 0; hop < 4; hop++) {
		const char *sp = strchr(p, ' '), *base = p;
		size_t n = sp ? (size_t)(sp - p) : strlen(p);
		int launcher = 0;
		for (const char *q = p; q < p + n; q++)
			if (*q == '/')
				base = q + 1;
		n -= (size_t)(base - p);
		for (int i = 0; launchers[i]; i++)
			if (strlen(launchers[i]) <= n &&
			    !strncmp(base, launchers[i], strlen(launchers[i])) &&
			    strspn(base + strlen(launchers[i]), "0123456789.") ==
			    n - strlen(launchers[i]))
				launcher = 1;
		if (!launcher || !sp) {
			snprintf(out, len, "%.*s%s", (int)n, base, sp ? sp : "");
			return;
		}
		/* Past the launcher and its options (-m keeps the module). */
		p = sp + 1;
		while (*p == '-' && strncmp(p, "-m ", 3)) {
			const char *nx = strchr(p, ' ');
			if (!nx)
				break;
			p = nx + 1;
		}
		if (!strncmp(p, "-m ", 3))
			p += 3;
	}
	snprintf(out, len, "%s", p);
}

struct geo { int64_t from, to; double x0, w; };

static double X(const struct geo *g, int64_t t)
{
	if (t < g->from)
		t = g->from;
	if (t > g->to)
		t = g->to;
	return g->x0 + (double)(t - g->from) * g->w / (double)(g->to - g->from);
}

static void axis(FILE *f, const struct geo *g, double y0, double y1)
{
	/* Tick steps in milliseconds: round numbers a clock shows. */
	static const int64_t steps[] = { 100, 200, 500, 1000, 2000, 5000, 10000,
		15000, 30000, 60000, 120000, 300000, 600000, 900000, 1800000,
		3600000, 7200000, 10800000, 21600000, 43200000, 86400000,
		172800000 };
	int64_t span = (g->to - g->from) / 1000000, step = steps[0], t0;
	struct tm tm;
	time_t sec;

	for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
		step = steps[i];
		if (span / step <= 10)
			break;
	}
	/* Ticks on round local times (whole days from local midnight). */
	sec = (time_t)(g->from / 1000000000LL);
	localtime_r(&sec, &tm);
	t0 = (int64_t)sec * 1000 -
	     ((int64_t)(tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec) * 1000) %
	     (step > 86400000 ? 86400000 : step);
	fprintf(f, "<g id=\"axis\" font-size=\"11\" fill=\"#333\">\n");
	fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
		g->x0, y0, g->x0 + g->w, y0);
	for (int64_t t = t0; t * 1000000 <= g->to; t += step) {
		char lab[40];
		double x;
		if (t * 1000000 < g->from)
			continue;
		x = X(g, t * 1000000);
		sec = (time_t)(t / 1000);
		localtime_r(&sec, &tm);
		strftime(lab, sizeof lab, step < 60000 ? "%H:%M:%S" :
			 step >= 86400000 ? "%m-%d" : "%H:%M", &tm);
		if (step < 1000)
			snprintf(lab + strlen(lab), sizeof lab - strlen(lab), ".%d",
				 (int)(t % 1000 / 100));
		fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
			"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>"
			"<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
			x, TOP - 4, x, y1, x, y0, x, y0 + 5, x, y0 + 17, lab);
	}
	fprintf(f, "</g>\n");
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* A run of thin bars, drawn as one block. */
struct agg { double x0, x1; int n; unsigned uid; int mixed; int64_t t0, t1; };

static void agg_flush(FILE *f, const struct gm_report *r, struct agg *a, double y)
{
	char b0[16], b1[16];

	if (!a->n)
		return;
	if (a->x1 - a->x0 < 1.5)
		a->x1 = a->x0 + 1.5;
	gm_clock(a->t0, b0, sizeof b0, 0);
	gm_clock(a->t1, b1, sizeof b1, 0);
	fprintf(f, "<rect class=\"agg\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\" fill-opacity=\"0.85\"/>"
		"<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"url(#agg-stripes)\"><title>%d leases, %s to %s%s</title></rect>\n",
		a->x0, y, a->x1 - a->x0, ROW, a->mixed ? "#888888" : colour(r, a->uid),
		a->x0, y, a->x1 - a->x0, ROW, a->n, b0, b1,
		a->mixed ? " (several users)" : "");
	if (a->x1 - a->x0 > 40)
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#fff\">%d jobs</text>\n",
			a->x0 + 3, y + ROW / 2 + 4, a->n);
	a->n = 0;
}

static void flush_idle(FILE *f, const struct geo *g, int64_t a, int64_t b,
		       double y)
{
	if (b <= a)
		return;
	fprintf(f, "<rect class=\"idle-waited\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"#f3a5a5\"><title>GPU free while a claim for it waited</title></rect>\n",
		X(g, a), y, X(g, b) - X(g, a) < 1 ? 1 : X(g, b) - X(g, a), ROW);
}

/* The stretches where the GPU was free while a claim that could use it
 * waited (the report's "idle while someone waited"), under the bars. */
static void idle_waited(FILE *f, const struct gm_report *r,
			const struct geo *g, uint64_t bit, double y)
{
	const struct gm_log *L = r->log;
	int64_t *cut = malloc(sizeof *cut * (size_t)(2 * (L->nspans + L->nwaits) + 2));
	int64_t run0 = 0, run1 = 0;
	int n = 0;

	if (!cut)
		return;
	for (int s = 0; s < L->nspans; s++)
		if (L->spans[s].dev & bit) {
			cut[n++] = L->spans[s].start;
			cut[n++] = L->spans[s].end;
		}
	for (int w = 0; w < L->nwaits; w++)
		if (L->waits[w].cand & bit) {
			cut[n++] = L->waits[w].start;
			cut[n++] = strcmp(L->waits[w].outcome, "waiting") ? L->waits[w].end : g->to;
		}
	qsort(cut, (size_t)n, sizeof *cut, cmp64);
	for (int k = 0; k + 1 < n; k++) {
		int64_t a = cut[k], b = cut[k + 1], mid = a + (b - a) / 2;
		int leased = 0, waited = 0;
		if (b <= a || b <= g->from || a >= g->to)
			continue;
		for (int s = 0; s < L->nspans && !leased; s++)
			leased = (L->spans[s].dev & bit) && L->spans[s].start <= mid &&
				 mid < L->spans[s].end;
		for (int w = 0; w < L->nwaits && !waited && !leased; w++) {
			const struct gm_wait *x = &L->waits[w];
			int64_t e = strcmp(x->outcome, "waiting") ? x->end : g->to;
			waited = (x->cand & bit) && x->start <= mid && mid < e;
		}
		if (!leased && waited) {
			/* Adjacent pieces make one block (no seams). */
			if (run1 != a)
				flush_idle(f, g, run0, run1, y);
			if (run1 != a)
				run0 = a;
			run1 = b;
		}
	}
	flush_idle(f, g, run0, run1, y);
	free(cut);
}

static void row(FILE *f, const struct gm_report *r, const struct geo *g,
		int gi, double y)
{
	const struct gm_log *L = r->log;
	int d = r->gpus[gi].index;
	uint64_t bit = UINT64_C(1) << d;
	struct agg a = { 0 };

	fprintf(f, "<g id=\"gpu-row-%d\">\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"#f4f4f4\"/>\n"
		"<text x=\"%d\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\" text-anchor=\"end\">GPU %d</text>\n",
		d, g->x0, y, g->w, ROW, LEFT - 10, y + ROW / 2 + 5, d);
	idle_waited(f, r, g, bit, y);
	for (int s = 0; s < L->nspans; s++) {
		const struct gm_span *p = &L->spans[s];
		double x0, x1, busy;
		char lab[GM_CMD_MAX], user[64], b0[16], b1[16], dur[32];
		if (!(p->dev & bit) || p->end <= g->from || p->start >= g->to)
			continue;
		x0 = X(g, p->start);
		x1 = X(g, p->end);
		if (x1 - x0 < THIN) {
			if (a.n && x0 - a.x1 > THIN)
				agg_flush(f, r, &a, y);
			if (!a.n) {
				a.x0 = x0, a.uid = p->uid, a.mixed = 0, a.t0 = p->start;
			}
			a.mixed |= a.uid != p->uid;
			a.x1 = x1 > a.x1 ? x1 : a.x1;
			a.t1 = p->end;
			a.n++;
			continue;
		}
		agg_flush(f, r, &a, y);
		gm_user_name(p->uid, user, sizeof user);
		gm_clock(p->start, b0, sizeof b0, 0);
		gm_clock(p->end, b1, sizeof b1, 0);
		gm_report_dur(dur, sizeof dur, p->end - p->start);
		/* Measured GPU time (gputime records): the lease is shaded by
		 * its busy share, from faint (idle) to solid (busy). */
		busy = gm_report_gt_frac(r, s);
		fprintf(f, "<rect class=\"lease\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\" fill-opacity=\"%.2f\" stroke=\"#fff\" stroke-width=\"1\">"
			"<title>%s, job %s: ", x0, y, x1 - x0, ROW, colour(r, p->uid),
			busy >= 0 ? 0.25 + 0.75 * busy : 1.0, user, jshort(p->job));
		esc(f, p->cmd, 200);
		fprintf(f, "\n%s to %s (%s; end: %s)", b0, b1, dur, p->how);
		if (busy >= 0)
			fprintf(f, "\nGPU busy %.1f%% of the lease (measured)", 100 * busy);
		fprintf(f, "</title></rect>\n");
		if (!p->exact && strcmp(p->how, "live"))
			fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"2\" height=\"%d\" fill=\"#000\" fill-opacity=\"0.5\"/>\n",
				x1 - 2, y, ROW);
		gm_report_label(p->cmd, lab, sizeof lab);
		if (x1 - x0 > 24) {
			int chars = (int)((x1 - x0 - 6) / 6.4);
			fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#fff\">",
				x0 + 3, y + ROW / 2 + 4);
			esc(f, lab, chars);
			fprintf(f, "</text>\n");
		}
	}
	agg_flush(f, r, &a, y);
	/* Idle inside leases: a sample of 0% to the next sample of the GPU. */
	for (int i = 0; i < L->nev; i++) {
		const struct gm_ev *e = &L->ev[i], *n = NULL;
		if (e->kind != EV_UTIL || !(e->dev & bit) || e->gpu != 0)
			continue;
		for (int k = i + 1; k < L->nev && !n; k++)
			if (L->ev[k].kind == EV_UTIL && (L->ev[k].dev & bit) && L->ev[k].gpu >= 0)
				n = &L->ev[k];
		for (int s = 0; s < L->nspans; s++) {
			const struct gm_span *p = &L->spans[s];
			int64_t a0 = e->t, a1 = n ? n->t : p->end;
			if (!(p->dev & bit) || e->t < p->start || e->t >= p->end ||
			    gm_report_gt_frac(r, s) >= 0)
				continue;
			if (a1 > p->end)
				a1 = p->end;
			fprintf(f, "<rect class=\"idle\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"url(#idle-hatch)\"><title>GPU idle inside this lease</title></rect>\n",
				X(g, a0), y, X(g, a1) - X(g, a0) < 1 ? 1 : X(g, a1) - X(g, a0), ROW);
		}
	}
	/* Idle suspensions (report_susp.c): a dark band along the bottom of
	 * the row while a job that held the GPU was suspended and others
	 * could use it. */
	for (int i = 0; i < L->nev; i++) {
		const struct gm_ev *e = &L->ev[i];
		int64_t b;

		if (e->kind != EV_SUSPEND || !(e->dev & bit) || e->t >= g->to)
			continue;
		b = gm_report_susp_end(L, i, g->to);
		if (b <= g->from)
			continue;
		fprintf(f, "<rect class=\"suspended\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"4\" fill=\"#333\" fill-opacity=\"0.7\"><title>job %s (pid %d) suspended while idle: its GPU memory in host memory, the GPU given to waiters</title></rect>\n",
			X(g, e->t), y + ROW - 4,
			X(g, b) - X(g, e->t) < 1 ? 1 : X(g, b) - X(g, e->t),
			e->job, e->pid);
	}
	fprintf(f, "</g>\n");
}

static int cmp_step(const void *a, const void *b)
{
	const int64_t *x = a, *y = b;
	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return (int)(x[1] - y[1]); /* ends (-1) before starts at one time */
}

static void queue(FILE *f, const struct gm_report *r, const struct geo *g, double y)
{
	const struct gm_log *L = r->log;
	int64_t *st = malloc(sizeof *st * 2 * (size_t)(2 * L->nwaits + 1));
	int n = 0, cur = 0, max = 0;

	if (!st)
		return;
	for (int i = 0; i < L->nwaits; i++) {
		const struct gm_wait *w = &L->waits[i];
		int64_t end = !strcmp(w->outcome, "waiting") ? g->to : w->end;
		if (end <= w->start)
			continue;
		st[2 * n] = w->start, st[2 * n + 1] = 1, n++;
		st[2 * n] = end, st[2 * n + 1] = -1, n++;
	}
	qsort(st, (size_t)n, 2 * sizeof *st, cmp_step);
	for (int i = 0; i < n; i++) {
		cur += (int)st[2 * i + 1];
		if (st[2 * i] >= g->from && cur > max)
			max = cur;
		if (st[2 * i] < g->from && cur > max)
			max = cur;
	}
	if (max < 1)
		max = 1;
	fprintf(f, "<g id=\"queue\">\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"#fafafa\" stroke=\"#ddd\"/>\n"
		"<text x=\"%d\" y=\"%.1f\" font-size=\"12\" text-anchor=\"end\">waiting</text>"
		"<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%d</text>"
		"<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">0</text>\n",
		g->x0, y, g->w, QH, LEFT - 10, y + QH / 2 + 4, g->x0 - 3, y + 10, max,
		g->x0 - 3, y + QH);
	fprintf(f, "<path fill=\"#e15759\" fill-opacity=\"0.35\" stroke=\"#e15759\" stroke-width=\"1.2\" d=\"M%.1f %.1f", g->x0, y + QH);
	cur = 0;
	for (int i = 0; i < n; i++) {
		double x = X(g, st[2 * i]);
		fprintf(f, " L%.1f %.1f", x, y + QH - (double)cur * (QH - 12) / max);
		cur += (int)st[2 * i + 1];
		fprintf(f, " L%.1f %.1f", x, y + QH - (double)cur * (QH - 12) / max);
	}
	fprintf(f, " L%.1f %.1f L%.1f %.1f Z\"/>\n</g>\n", g->x0 + g->w,
		y + QH - (double)cur * (QH - 12) / max, g->x0 + g->w, y + QH);
	free(st);
}

void gm_report_svg(FILE *f, const struct gm_report *r, int standalone)
{
	struct geo g = { r->from, r->to > r->from ? r->to : r->from + 1000000000LL,
			 LEFT, W - LEFT - RIGHT };
	int ng = r->ngpus, legend_rows = (r->nusers + 3) / 6 + 1;
	double rows_end = TOP + ng * (ROW + GAP), qy = rows_end + 30;
	int h = (int)(qy + QH + 24 + legend_rows * 20 + 10);
	char a[32], b[32], c[32];

	if (standalone)
		fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
	fprintf(f, "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
		W, h, W, h);
	fprintf(f, "<defs><pattern id=\"idle-hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
		"<rect width=\"6\" height=\"6\" fill=\"#fff\" fill-opacity=\"0.35\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#222\" stroke-width=\"2.2\"/></pattern>"
		"<pattern id=\"agg-stripes\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\">"
		"<rect width=\"1\" height=\"4\" fill=\"#fff\" fill-opacity=\"0.45\"/></pattern></defs>\n");
	fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", W, h);
	gm_clock(r->from, a, sizeof a, 1);
	gm_clock(r->to, b, sizeof b, 1);
	gm_cli_duration(r->to - r->from, c, sizeof c);
	fprintf(f, "<text id=\"title\" x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\">GPU leases, %s to %s (%s)</text>\n",
		LEFT, a, b, c);
	/* The axis (and its grid) first, so the bars lie over the grid. */
	axis(f, &g, rows_end, rows_end);
	for (int i = 0; i < ng; i++)
		row(f, r, &g, i, TOP + i * (ROW + GAP));
	queue(f, r, &g, qy);
	fprintf(f, "<g id=\"legend\" font-size=\"12\">\n");
	{
		double x = LEFT, y = qy + QH + 24;
		int k = 0;
		for (int i = 0; i <= r->nusers + 2; i++, k++) {
			char user[64];
			if (k == 6) {
				k = 0, x = LEFT, y += 20;
			}
			if (i < r->nusers) {
				gm_user_name(r->users[i].uid, user, sizeof user);
				fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">",
					x, y - 11, colour(r, r->users[i].uid), x + 19, y);
				esc(f, user, 24);
				fprintf(f, "</text>\n");
			} else if (i == r->nusers) {
				fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"#888\"/><rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"url(#idle-hatch)\"/>"
					"<text x=\"%.1f\" y=\"%.1f\">GPU idle inside a lease</text>\n",
					x, y - 11, x, y - 11, x + 19, y);
			} else if (i == r->nusers + 2) {
				fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"#f3a5a5\"/>"
					"<text x=\"%.1f\" y=\"%.1f\">GPU free while someone waited</text>\n",
					x, y - 11, x + 19, y);
			} else {
				fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"#888\"/><rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"url(#agg-stripes)\"/>"
					"<text x=\"%.1f\" y=\"%.1f\">many short leases, merged</text>\n",
					x, y - 11, x, y - 11, x + 19, y);
			}
			x += i < r->nusers ? 150 : 210;
		}
	}
	fprintf(f, "</g>\n</svg>\n");
}

/* ---- The HTML page ------------------------------------------------------- */

static void td_dur(FILE *f, int64_t ns)
{
	char d[32];
	gm_report_dur(d, sizeof d, ns);
	fprintf(f, "<td>%s</td>", d);
}

void gm_report_html(FILE *f, const struct gm_report *r)
{
	const struct gm_log *L = r->log;
	char a[32], b[32], user[64], list[256];
	int64_t span = r->to - r->from;

	gm_clock(r->from, a, sizeof a, 1);
	gm_clock(r->to, b, sizeof b, 1);
	fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>gpumutex report</title>\n"
		"<style>body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:16px;color:#222}"
		"table{border-collapse:collapse;margin:6px 0 18px}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:right}"
		"th{background:#eee}td.l,th.l{text-align:left}h2{font-size:16px;margin-top:18px}</style></head><body>\n");
	fprintf(f, "<h1 id=\"report-title\">gpumutex report</h1><p>");
	esc(f, r->lock_dir, -1);
	fprintf(f, ", %s to %s</p>\n<div id=\"picture\">\n", a, b);
	gm_report_svg(f, r, 0);
	fprintf(f, "</div>\n<h2>GPUs</h2><table id=\"gpu-table\"><tr><th>GPU</th><th>leased</th><th>%%</th><th>idle, someone waited</th><th>idle, nobody waited</th><th>jobs</th><th>hand-offs</th><th>utilisation in leases</th></tr>\n");
	for (int i = 0; i < r->ngpus; i++) {
		const struct gm_rgpu *g = &r->gpus[i];
		fprintf(f, "<tr><td>%d</td>", g->index);
		td_dur(f, g->leased);
		fprintf(f, "<td>%.0f%%</td>", span ? 100.0 * g->leased / span : 0);
		td_dur(f, g->idle_waited);
		td_dur(f, g->idle_free);
		fprintf(f, "<td>%d</td><td>%d</td>", g->jobs, g->handoffs);
		if (g->util_sampled)
			fprintf(f, "<td>%.0f%%</td></tr>\n", (double)g->util_busy_sum / g->util_sampled);
		else
			fprintf(f, "<td>-</td></tr>\n");
	}
	fprintf(f, "</table>\n<h2>Waits</h2><p id=\"wait-summary\">%d waits: %d granted, %d timed out, %d failed, %d died waiting, %d waiting now. ",
		r->nwaits, r->granted, r->timeouts, r->errors, r->died, r->waiting);
	gm_report_dur(a, sizeof a, r->p50);
	gm_report_dur(b, sizeof b, r->p95);
	fprintf(f, "p50 %s, p95 %s, ", a, b);
	gm_report_dur(a, sizeof a, r->max);
	fprintf(f, "max %s.</p>\n<table id=\"wait-table\"><tr><th>waited</th><th class=\"l\">user</th><th class=\"l\">job</th><th>GPUs</th><th class=\"l\">outcome</th><th class=\"l\">held meanwhile by</th></tr>\n", a);
	for (int i = 0; i < r->nlongest && i < r->top; i++) {
		const struct gm_wait *x = &L->waits[r->longest[i]];
		char held[400];
		gm_user_name(x->uid, user, sizeof user);
		gm_mask_list(x->cand, list, sizeof list);
		gm_report_holders(r, x, held, sizeof held);
		fprintf(f, "<tr>");
		td_dur(f, x->end - x->start);
		fprintf(f, "<td class=\"l\">");
		esc(f, user, -1);
		fprintf(f, "</td><td class=\"l\">");
		esc(f, jshort(x->job), -1);
		fprintf(f, "</td><td>%d of %s</td><td class=\"l\">%s</td><td class=\"l\">", x->want, list, x->outcome);
		esc(f, held, -1);
		fprintf(f, "</td></tr>\n");
	}
	fprintf(f, "</table>\n<h2>Users</h2><table id=\"user-table\"><tr><th class=\"l\">user</th><th>GPU-hours</th><th>leases</th><th>waits</th><th>waited</th><th>timeouts</th></tr>\n");
	for (int i = 0; i < r->nusers; i++) {
		gm_user_name(r->users[i].uid, user, sizeof user);
		fprintf(f, "<tr><td class=\"l\">");
		esc(f, user, -1);
		fprintf(f, "</td><td>%.3f</td><td>%d</td><td>%d</td>", r->users[i].gpu_hours,
			r->users[i].leases, r->users[i].waits);
		td_dur(f, r->users[i].waited);
		fprintf(f, "<td>%d</td></tr>\n", r->users[i].timeouts);
	}
	fprintf(f, "</table>\n<h2>Jobs (top %d by GPU-hours)</h2><table id=\"job-table\"><tr><th class=\"l\">job</th><th class=\"l\">user</th><th>GPU-hours</th><th>waits</th><th>waited</th><th>timeouts</th><th class=\"l\">command</th></tr>\n", r->top);
	for (int i = 0; i < r->njobs && i < r->top; i++) {
		const struct gm_rwho *j = &r->jobs[i];
		gm_user_name(j->uid, user, sizeof user);
		fprintf(f, "<tr><td class=\"l\">");
		esc(f, jshort(j->job), -1);
		fprintf(f, "</td><td class=\"l\">");
		esc(f, user, -1);
		fprintf(f, "</td><td>%.3f</td><td>%d</td>", j->gpu_hours, j->waits);
		td_dur(f, j->waited);
		fprintf(f, "<td>%d</td><td class=\"l\">", j->timeouts);
		esc(f, j->cmd, 120);
		fprintf(f, "</td></tr>\n");
	}
	fprintf(f, "</table>\n<h2>Leases that held a GPU while it was idle</h2><table id=\"idle-table\"><tr><th>GPU</th><th>idle</th><th>sampled</th><th>mean utilisation</th><th class=\"l\">user</th><th class=\"l\">job</th><th class=\"l\">command</th></tr>\n");
	for (int i = 0; i < r->nidle && i < r->top; i++) {
		const struct gm_ridle *x = &r->idle[i];
		const struct gm_span *p = &L->spans[x->span];
		gm_user_name(p->uid, user, sizeof user);
		fprintf(f, "<tr><td>%d</td>", x->dev);
		td_dur(f, x->idle);
		td_dur(f, x->sampled);
		fprintf(f, "<td>%.0f%%</td><td class=\"l\">", x->mean_util);
		esc(f, user, -1);
		fprintf(f, "</td><td class=\"l\">");
		esc(f, jshort(p->job), -1);
		fprintf(f, "</td><td class=\"l\">");
		esc(f, p->cmd, 120);
		fprintf(f, "</td></tr>\n");
	}
	fprintf(f, "</table>\n");
	gm_report_gt_html(f, r);
	fprintf(f, "<p>How each number is found: docs/report.md in the gpumutex sources.</p>\n</body></html>\n");
}
