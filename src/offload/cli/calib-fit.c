/*
 * calib-fit.c - the calibration's fit (calib.h): which traced calls
 * count, and the profile's curves, copy lines and start-up from them.
 *
 * A traced call counts when the middle of its record falls into the
 * window of a call the workload logged for a point's accepted
 * measurement, that call's info was 0, and it ran on the pass's device
 * without a failure. So the workload's earlier (repeated) measurements,
 * its workspace queries and its warm-up call, which it does not log, are
 * left out, and nested calls are never the record taken (their reason).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calib.h"
#include "model.h"          /* gpo_ln, gpo_exp: no libm */
#include "policy.h"
#include "trace.h"

/* ---- The workload's log ------------------------------------------------- */

/* A decimal integer, optionally negative; advances *s. 0 or -1. */
static int gpo__int(const char **s, int64_t *v)
{
	const char *p = *s;
	int neg = 0, d = 0;
	int64_t x = 0;

	while (*p == ' ')
		p++;
	if (*p == '-')
		neg = 1, p++;
	for (; *p >= '0' && *p <= '9' && d < 19; p++, d++)
		x = x * 10 + (*p - '0');
	if (!d)
		return -1;
	*v = neg ? -x : x;
	*s = p;
	return 0;
}

/* The word `w` then a blank at *s; advances past both. */
static int gpo__kw(const char **s, const char *w)
{
	size_t n = strlen(w);
	const char *p = *s;

	while (*p == ' ')
		p++;
	if (strncmp(p, w, n) != 0 || (p[n] != ' ' && p[n] != '\0'))
		return 0;
	*s = p + n;
	return 1;
}

static int gpo__grow(void **v, int n, size_t size)
{
	void *g;

	/* room for 16, then doubling: full when n is 16, 32, 64, ... */
	if ((n > 0 && n < 16) || (n >= 16 && (n & (n - 1))))
		return 0;
	g = realloc(*v, (size_t)(n < 16 ? 16 : 2 * n) * size);
	if (!g)
		return -1;
	*v = g;
	return 0;
}

int gpo_clog_read(const char *path, struct gpo_clog *l)
{
	FILE *f = fopen(path, "re");
	char line[2048];

	memset(l, 0, sizeof *l);
	if (!f)
		return -errno;
	while (fgets(line, sizeof line, f)) {
		const char *s = line;
		int64_t a, b, c, d;
		line[strcspn(line, "\n")] = '\0';
		if (gpo__kw(&s, "library")) {
			size_t u = strlen(l->library);
			snprintf(l->library + u, sizeof l->library - u, "%s%s",
				 u ? ":" : "", s + 1);
		} else if (gpo__kw(&s, "scheme")) {
			snprintf(l->scheme, sizeof l->scheme, "%s", s + 1);
		} else if (gpo__kw(&s, "quiet")) {
			while (*s == ' ')
				s++;
			gpo_scan_double(s, &l->quiet, NULL);
		} else if (gpo__kw(&s, "budget")) {
			size_t u = strlen(l->budget);
			snprintf(l->budget + u, sizeof l->budget - u, "%s%s",
				 u ? ", " : "", s + 1);
		} else if (gpo__kw(&s, "missing")) {
			size_t u = strlen(l->missing);
			snprintf(l->missing + u, sizeof l->missing - u, "%s%s",
				 u ? " " : "", s + 1);
		} else if (gpo__kw(&s, "point")) {
			struct gpo_cpoint_log *p;
			const char *w;
			size_t wl;
			while (*s == ' ')
				s++;
			w = s;
			wl = strcspn(s, " ");
			s += wl;
			if (wl >= sizeof p->name || gpo__int(&s, &a) ||
			    !gpo__kw(&s, "attempts") || gpo__int(&s, &b) ||
			    !gpo__kw(&s, "clean") || gpo__int(&s, &c) ||
			    !gpo__kw(&s, "unsettled") || gpo__int(&s, &d))
				continue;
			if (gpo__grow((void **)&l->pts, l->npts, sizeof *l->pts))
				goto nomem;
			p = &l->pts[l->npts++];
			memset(p, 0, sizeof *p);
			memcpy(p->name, w, wl);
			p->n = (int)a;
			p->attempts = (int)b;
			p->clean = (int)c;
			p->unsettled = (int)d;
		} else if (gpo__kw(&s, "smooth")) {
			size_t u = strlen(l->smooth);
			snprintf(l->smooth + u, sizeof l->smooth - u, "%s%s",
				 u ? ", " : "", s + 1);
		} else if (gpo__kw(&s, "spent")) {
			double v[3];
			const char *w;
			size_t wl;
			int64_t n;
			while (*s == ' ')
				s++;
			w = s;
			wl = strcspn(s, " ");
			s += wl;
			if (gpo__int(&s, &n))
				continue;
			for (int i = 0; i < 3; i++) {
				const char *e;
				while (*s == ' ')
					s++;
				if (gpo_scan_double(s, &v[i], &e) != 0)
					v[i] = 0;
				s = e ? e : s;
			}
			l->prep_s += v[0];
			l->calls_s += v[1];
			l->other_s += v[2];
			if (v[0] + v[1] + v[2] > l->worst_s) {
				l->worst_s = v[0] + v[1] + v[2];
				snprintf(l->worst, sizeof l->worst, "%.*s %lld",
					 (int)(wl < 16 ? wl : 16), w, (long long)n);
			}
		} else if (gpo__kw(&s, "call")) {
			struct gpo_cwin *w;
			if (!l->npts || gpo__int(&s, &a) || gpo__int(&s, &b) ||
			    gpo__int(&s, &c))
				continue;
			if (gpo__grow((void **)&l->win, l->nwin, sizeof *l->win))
				goto nomem;
			w = &l->win[l->nwin++];
			w->t0 = a;
			w->t1 = b;
			w->info = c;
			w->point = l->npts - 1;
			w->matched = 0;
		}
	}
	fclose(f);
	return 0;
nomem:
	fclose(f);
	gpo_clog_free(l);
	return -ENOMEM;
}

void gpo_clog_free(struct gpo_clog *l)
{
	free(l->pts);
	free(l->win);
	l->pts = NULL;
	l->win = NULL;
	l->npts = l->nwin = 0;
}

/* The window holding time `t` (windows are in increasing time), or NULL. */
static struct gpo_cwin *gpo__window(struct gpo_clog *l, int64_t t)
{
	int lo = 0, hi = l->nwin - 1;

	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		if (t < l->win[mid].t0)
			hi = mid - 1;
		else if (t > l->win[mid].t1)
			lo = mid + 1;
		else
			return &l->win[mid];
	}
	return NULL;
}

/* ---- The fit ------------------------------------------------------------ */

struct gpo__pt {
	char op[17], prec;
	double flops;
	double *t;
	int n, cap;
};

struct gpo_cfit {
	struct gpo__pt *pts;
	int n;
	double sx[2], sy[2], sxx[2], sxy[2], cnt[2]; /* copies in, out */
	double startup;
};

struct gpo_cfit *gpo_cfit_new(void)
{
	return calloc(1, sizeof(struct gpo_cfit));
}

void gpo_cfit_free(struct gpo_cfit *f)
{
	if (!f)
		return;
	for (int i = 0; i < f->n; i++)
		free(f->pts[i].t);
	free(f->pts);
	free(f);
}

static int gpo__add(struct gpo_cfit *f, const struct gpo_trace_rec *r,
		    double t)
{
	struct gpo__pt *p = NULL;

	for (int i = 0; i < f->n && !p; i++)
		if (f->pts[i].prec == r->prec && f->pts[i].flops == r->flops &&
		    strncmp(f->pts[i].op, r->opname, 16) == 0)
			p = &f->pts[i];
	if (!p) {
		struct gpo__pt *g = realloc(f->pts, (size_t)(f->n + 1) * sizeof *g);
		if (!g)
			return -1;
		f->pts = g;
		p = &f->pts[f->n++];
		memset(p, 0, sizeof *p);
		memcpy(p->op, r->opname, 16);
		p->prec = r->prec;
		p->flops = r->flops;
	}
	if (p->n == p->cap) {
		double *g = realloc(p->t, (size_t)(p->cap * 2 + 8) * sizeof *g);
		if (!g)
			return -1;
		p->t = g;
		p->cap = p->cap * 2 + 8;
	}
	p->t[p->n++] = t;
	return 0;
}

static void gpo__line(struct gpo_cfit *f, int dir, double x, double y)
{
	f->sx[dir] += x;
	f->sy[dir] += y;
	f->sxx[dir] += x * x;
	f->sxy[dir] += x * y;
	f->cnt[dir] += 1;
}

/* One record of a pass: used, or counted in *st as left out. */
static void gpo__rec(struct gpo_cfit *f, const struct gpo_trace_rec *r,
		     int device, struct gpo_clog *l, struct gpo_cstats *st,
		     int *found)
{
	double t = r->dur_ns / 1e9;
	struct gpo_cwin *w;

	if (r->kind == GPO_TK_GPU_START && (f->startup <= 0 || t < f->startup))
		f->startup = t;
	if (r->kind != GPO_TK_CALL || r->reason == GPO_R_NESTED ||
	    r->reason == GPO_R_WORKSPACE || !(r->flops > 0))
		return;
	w = gpo__window(l, r->t_ns + r->dur_ns / 2);
	if (!w || w->matched)
		return;
	w->matched = 1;
	if (w->info != 0) {
		st->info++;
		return;
	}
	if (r->device != device || r->fail) {
		st->gpu_failed++;
		return;
	}
	if (device == GPO_GPU) {
		t -= r->copy_in_s + r->copy_out_s;
		if (r->bytes_in > 0)
			gpo__line(f, 0, r->bytes_in, r->copy_in_s);
		if (r->bytes_out > 0)
			gpo__line(f, 1, r->bytes_out, r->copy_out_s);
	}
	if (t > 0 && gpo__add(f, r, t) == 0) {
		st->used++;
		(*found)++;
	}
}

int gpo_cfit_read(struct gpo_cfit *f, const char *dir, int device,
		  struct gpo_clog *l, struct gpo_cstats *st)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int found = 0;

	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		struct gpo_trace_header h;
		struct gpo_trace_rec r;
		FILE *fp;
		int fd;
		if (strncmp(e->d_name, "gpo-", 4) != 0)
			continue;
		fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || !(fp = fdopen(fd, "rb"))) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		if (fread(&h, sizeof h, 1, fp) == 1 &&
		    memcmp(h.magic, GPO_TRACE_MAGIC, 8) == 0 &&
		    h.rec_size == GPO_TRACE_REC_SIZE)
			while (fread(&r, sizeof r, 1, fp) == 1)
				gpo__rec(f, &r, device, l, st, &found);
		fclose(fp);
	}
	closedir(d);
	for (int i = 0; i < l->nwin; i++)
		if (!l->win[i].matched)
			st->unmatched++;
	return found;
}

static int gpo__cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int gpo__cmp_pt(const void *a, const void *b)
{
	const struct gpo__pt *x = a, *y = b;
	int c = strcmp(x->op, y->op);
	if (!c)
		c = x->prec - y->prec;
	if (!c)
		c = (x->flops > y->flops) - (x->flops < y->flops);
	return c;
}

static void gpo__copy(const struct gpo_cfit *f, int dir, double *fixed,
		      double *bw)
{
	double n = f->cnt[dir], den = n * f->sxx[dir] - f->sx[dir] * f->sx[dir];
	double slope = den > 0 ? (n * f->sxy[dir] - f->sx[dir] * f->sy[dir]) / den : 0;
	double icpt = n > 0 ? (f->sy[dir] - slope * f->sx[dir]) / n : 0;

	*fixed = icpt > 0 ? icpt : 0;
	/* A copy that costs nothing per byte (or too few points to tell):
	 * a bandwidth no bus has, so copies cost only their fixed part. */
	*bw = slope > 0 ? 1 / slope : 1e15;
}

int gpo_cfit_profile(struct gpo_cfit *f, char dev, struct gpo_profile *p)
{
	if (dev == 'g') {
		p->startup_s = f->startup > 0 ? f->startup : 0;
		gpo__copy(f, 0, &p->h2d_fixed, &p->h2d_bw);
		gpo__copy(f, 1, &p->d2h_fixed, &p->d2h_bw);
	}
	qsort(f->pts, (size_t)f->n, sizeof *f->pts, gpo__cmp_pt);
	for (int i = 0; i < f->n;) {
		struct gpo_curve c;
		int j = i;
		struct gpo_curve *g;
		memset(&c, 0, sizeof c);
		c.dev = dev;
		c.prec = f->pts[i].prec;
		memcpy(c.op, f->pts[i].op, sizeof c.op - 1);
		for (; j < f->n && f->pts[j].prec == c.prec &&
		       strcmp(f->pts[j].op, c.op) == 0; j++) {
			struct gpo__pt *pt = &f->pts[j];
			if (c.n == GPO_CURVE_MAX)
				continue;
			qsort(pt->t, (size_t)pt->n, sizeof *pt->t, gpo__cmp);
			c.work[c.n] = pt->flops;
			/* the lower quartile of the point's call times */
			c.speed[c.n++] = pt->flops / pt->t[pt->n / 4];
		}
		i = j;
		g = realloc(p->curves, (size_t)(p->ncurves + 1) * sizeof *g);
		if (!g)
			return -ENOMEM;
		p->curves = g;
		p->curves[p->ncurves++] = c;
	}
	return 0;
}

static double gpo__lnf(double x)
{
	return x > 0 ? gpo_ln(x) : -700;
}

int gpo_cfit_error(const struct gpo_cfit *f, double *median, double *p90,
		   double *max, char *worst, size_t len)
{
	double *err = malloc(((size_t)f->n + 1) * sizeof *err);
	int k = 0;

	*median = *p90 = *max = 0;
	if (worst && len)
		worst[0] = '\0';
	if (!err)
		return 0;
	for (int i = 0; i < f->n; i++) {
		const struct gpo__pt *p = &f->pts[i], *lo = NULL, *hi = NULL;
		double s, sp, pred;
		if (i > 0 && f->pts[i - 1].prec == p->prec &&
		    strcmp(f->pts[i - 1].op, p->op) == 0)
			lo = &f->pts[i - 1];
		if (i + 1 < f->n && f->pts[i + 1].prec == p->prec &&
		    strcmp(f->pts[i + 1].op, p->op) == 0)
			hi = &f->pts[i + 1];
		if ((!lo && !hi) || p->n < 1)
			continue;
		/* the points' times are sorted (gpo_cfit_profile) */
		s = p->flops / p->t[p->n / 4];
		if (lo && hi) {
			double slo = lo->flops / lo->t[lo->n / 4];
			double shi = hi->flops / hi->t[hi->n / 4];
			double t = (gpo__lnf(p->flops) - gpo__lnf(lo->flops)) /
				   (gpo__lnf(hi->flops) - gpo__lnf(lo->flops));
			sp = gpo_exp(gpo__lnf(slo) + t * (gpo__lnf(shi) - gpo__lnf(slo)));
		} else {
			const struct gpo__pt *q = lo ? lo : hi;
			sp = q->flops / q->t[q->n / 4];
		}
		pred = s / sp;          /* predicted time / measured time */
		err[k] = pred > 1 ? pred - 1 : 1 - pred;
		if (err[k] > *max) {
			*max = err[k];
			if (worst && len)
				snprintf(worst, len, "%c%s %.3g Gflop", p->prec,
					 p->op, p->flops / 1e9);
		}
		k++;
	}
	if (k) {
		qsort(err, (size_t)k, sizeof *err, gpo__cmp);
		*median = err[k / 2];
		*p90 = err[(k * 9) / 10 < k ? (k * 9) / 10 : k - 1];
	}
	free(err);
	return k;
}
