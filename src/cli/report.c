/*
 * report.c - `gpumutex report`: what the GPUs did over a window (default
 * the last 24 hours), from the event log: per GPU, waits, users, jobs,
 * idle leases; as text, JSON, SVG or a self-contained HTML page (svg.c).
 * Every number is defined in docs/report.md.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "lease.h"
#include "report.h"

#define NS 1000000000LL

int64_t gm_report_clip(int64_t a, int64_t b, int64_t lo, int64_t hi)
{
	if (a < lo)
		a = lo;
	if (b > hi)
		b = hi;
	return b > a ? b - a : 0;
}

static int popc(uint64_t m)
{
	return __builtin_popcountll(m);
}

void gm_report_dur(char *out, size_t len, int64_t ns)
{
	if (ns < 60 * NS - 5000000) /* else "60.00s": past the minute */
		snprintf(out, len, "%.2fs", ns / 1e9);
	else
		gm_cli_duration(ns, out, len);
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest value with at least p% of them at or below. */
static int64_t pct(const int64_t *v, int n, int p)
{
	int k;

	if (n == 0)
		return 0;
	k = (p * n + 99) / 100;
	return v[k < 1 ? 0 : k - 1];
}

static struct gm_rgpu *gpu(struct gm_report *r, int d)
{
	for (int i = 0; i < r->ngpus; i++)
		if (r->gpus[i].index == d)
			return &r->gpus[i];
	r->gpus[r->ngpus].index = d;
	return &r->gpus[r->ngpus++];
}

static int by_index(const void *a, const void *b)
{
	return ((const struct gm_rgpu *)a)->index - ((const struct gm_rgpu *)b)->index;
}

static struct gm_rwho *who(struct gm_rwho **v, int *n, unsigned uid,
			   const char *job)
{
	for (int i = 0; i < *n; i++)
		if ((*v)[i].uid == uid && (!job || !strcmp((*v)[i].job, job)))
			return &(*v)[i];
	struct gm_rwho *w = realloc(*v, (size_t)(*n + 1) * sizeof **v);
	if (!w)
		return NULL;
	*v = w;
	w = &w[(*n)++];
	memset(w, 0, sizeof *w);
	w->uid = uid;
	if (job)
		snprintf(w->job, sizeof w->job, "%s", job);
	return w;
}

struct gm_rwho *gm_report_who(struct gm_report *r, unsigned uid,
			      const char *job)
{
	return job ? who(&r->jobs, &r->njobs, uid, job) :
		     who(&r->users, &r->nusers, uid, NULL);
}

static int by_hours(const void *a, const void *b)
{
	const struct gm_rwho *x = a, *y = b;
	if (x->gpu_hours != y->gpu_hours)
		return x->gpu_hours > y->gpu_hours ? -1 : 1;
	return x->waited > y->waited ? -1 : x->waited < y->waited;
}

static const struct gm_report *g_r;
static int by_wait(const void *a, const void *b)
{
	const struct gm_wait *x = &g_r->log->waits[*(const int *)a];
	const struct gm_wait *y = &g_r->log->waits[*(const int *)b];
	int64_t dx = x->end - x->start, dy = y->end - y->start;
	return dx > dy ? -1 : dx < dy;
}

static int64_t wait_end(const struct gm_report *r, const struct gm_wait *w)
{
	return !strcmp(w->outcome, "waiting") ? r->to : w->end;
}

/* Per GPU: leased, idle while someone waited, idle with nobody waiting,
 * over the elementary intervals between every span and wait boundary. */
static void per_gpu(struct gm_report *r)
{
	const struct gm_log *L = r->log;
	int64_t *cut = malloc(sizeof *cut * (size_t)(2 * (L->nspans + L->nwaits) + 2));

	if (!cut)
		return;
	for (int i = 0; i < r->ngpus; i++) {
		struct gm_rgpu *g = &r->gpus[i];
		uint64_t bit = UINT64_C(1) << g->index;
		int n = 0;

		cut[n++] = r->from;
		cut[n++] = r->to;
		for (int s = 0; s < L->nspans; s++)
			if (L->spans[s].dev & bit) {
				cut[n++] = L->spans[s].start;
				cut[n++] = L->spans[s].end;
			}
		for (int w = 0; w < L->nwaits; w++)
			if (L->waits[w].cand & bit) {
				cut[n++] = L->waits[w].start;
				cut[n++] = wait_end(r, &L->waits[w]);
			}
		qsort(cut, (size_t)n, sizeof *cut, cmp64);
		for (int k = 0; k + 1 < n; k++) {
			int64_t a = cut[k], b = cut[k + 1], mid;
			int leased = 0, waited = 0;
			if (b <= a || b <= r->from || a >= r->to)
				continue;
			if (a < r->from)
				a = r->from;
			if (b > r->to)
				b = r->to;
			mid = a + (b - a) / 2;
			for (int s = 0; s < L->nspans && !leased; s++)
				leased = (L->spans[s].dev & bit) &&
					 L->spans[s].start <= mid && mid < L->spans[s].end;
			for (int w = 0; w < L->nwaits && !waited && !leased; w++)
				waited = (L->waits[w].cand & bit) &&
					 L->waits[w].start <= mid &&
					 mid < wait_end(r, &L->waits[w]);
			if (leased)
				g->leased += b - a;
			else if (waited)
				g->idle_waited += b - a;
			else
				g->idle_free += b - a;
		}
	}
	free(cut);
}

/* Utilisation samples inside leases: each sample stands for the time to
 * the next sample of its GPU (capped at the lease's end). */
static void idle_leases(struct gm_report *r)
{
	const struct gm_log *L = r->log;

	for (int s = 0; s < L->nspans; s++) {
		const struct gm_span *p = &L->spans[s];
		for (int d = 0; d < 64; d++) {
			int64_t idle = 0, sampled = 0, busy = 0;
			const struct gm_ev *prev = NULL;
			if (!(p->dev & (UINT64_C(1) << d)))
				continue;
			for (int i = 0; i <= L->nev; i++) {
				const struct gm_ev *e = i < L->nev ? &L->ev[i] : NULL;
				if (e && (e->kind != EV_UTIL ||
					  !(e->dev & (UINT64_C(1) << d)) || e->gpu < 0))
					continue;
				if (prev) {
					int64_t a = prev->t, b = e ? e->t : p->end;
					int64_t len = gm_report_clip(a, b, p->start, p->end);
					sampled += len;
					busy += len * prev->gpu;
					if (prev->gpu == 0)
						idle += len;
				}
				prev = e && e->t >= p->start && e->t < p->end ? e : NULL;
				if (e && e->t >= p->end)
					break;
			}
			if (sampled) {
				struct gm_rgpu *g = gpu(r, d);
				g->util_sampled += sampled;
				g->util_busy_sum += busy;
			}
			if (idle > 0) {
				struct gm_ridle *v = realloc(r->idle, (size_t)(r->nidle + 1) * sizeof *v);
				if (!v)
					continue;
				r->idle = v;
				v[r->nidle++] = (struct gm_ridle){ s, d, idle, sampled,
					busy / (double)sampled };
			}
		}
	}
}

static int by_idle(const void *a, const void *b)
{
	const struct gm_ridle *x = a, *y = b;
	return x->idle > y->idle ? -1 : x->idle < y->idle;
}

void gm_report_build(struct gm_report *r)
{
	struct gm_log *L = r->log;
	int64_t *w = calloc((size_t)L->nwaits + 1, sizeof *w);
	int nw = 0;

	for (int s = 0; s < L->nspans; s++) {
		const struct gm_span *p = &L->spans[s];
		int64_t held = gm_report_clip(p->start, p->end, r->from, r->to);
		struct gm_rwho *u, *j;
		if (!held && !(p->start >= r->from && p->start <= r->to))
			continue;
		for (int d = 0; d < 64; d++)
			if (p->dev & (UINT64_C(1) << d)) {
				struct gm_rgpu *g = gpu(r, d);
				if (p->start >= r->from) {
					g->jobs++;
					g->handoffs += p->handoff;
				}
			}
		u = who(&r->users, &r->nusers, p->uid, NULL);
		j = who(&r->jobs, &r->njobs, p->uid, p->job);
		if (u)
			u->gpu_hours += held * (double)popc(p->dev) / 3600e9, u->leases++;
		if (j) {
			j->gpu_hours += held * (double)popc(p->dev) / 3600e9, j->leases++;
			j->cmd = p->cmd;
		}
	}
	r->longest = calloc((size_t)L->nwaits + 1, sizeof *r->longest);
	for (int i = 0; i < L->nwaits; i++) {
		const struct gm_wait *x = &L->waits[i];
		struct gm_rwho *u, *j;
		if (x->start < r->from || x->start > r->to)
			continue;
		for (int d = 0; d < 64; d++)
			if (x->cand & (UINT64_C(1) << d))
				gpu(r, d);
		r->nwaits++;
		if (!strcmp(x->outcome, "granted"))
			r->granted++;
		else if (!strcmp(x->outcome, "timeout"))
			r->timeouts++;
		else if (!strcmp(x->outcome, "error"))
			r->errors++;
		else if (!strcmp(x->outcome, "died"))
			r->died++;
		else
			r->waiting++;
		u = who(&r->users, &r->nusers, x->uid, NULL);
		j = who(&r->jobs, &r->njobs, x->uid, x->job);
		if (strcmp(x->outcome, "died") && strcmp(x->outcome, "waiting")) {
			if (w)
				w[nw++] = x->end - x->start;
			if (r->longest)
				r->longest[r->nlongest++] = i;
		}
		if (u) {
			u->waits++;
			u->waited += wait_end(r, x) - x->start;
			u->timeouts += !strcmp(x->outcome, "timeout");
		}
		if (j) {
			j->waits++;
			j->waited += wait_end(r, x) - x->start;
			j->timeouts += !strcmp(x->outcome, "timeout");
			if (!j->cmd)
				j->cmd = x->cmd;
		}
	}
	if (w) {
		qsort(w, (size_t)nw, sizeof *w, cmp64);
		r->p50 = pct(w, nw, 50);
		r->p95 = pct(w, nw, 95);
		r->max = nw ? w[nw - 1] : 0;
		free(w);
	}
	g_r = r;
	if (r->longest)
		qsort(r->longest, (size_t)r->nlongest, sizeof *r->longest, by_wait);
	idle_leases(r);
	qsort(r->idle, (size_t)r->nidle, sizeof *r->idle, by_idle);
	qsort(r->gpus, (size_t)r->ngpus, sizeof *r->gpus, by_index);
	per_gpu(r);
	gm_report_gt_build(r);
	qsort(r->users, (size_t)r->nusers, sizeof *r->users, by_hours);
	qsort(r->jobs, (size_t)r->njobs, sizeof *r->jobs, by_hours);
}

/* Who held any of the wait's GPUs while it waited: "user/job (cmd)". */
void gm_report_holders(const struct gm_report *r, const struct gm_wait *x,
		       char *out, size_t len)
{
	const struct gm_log *L = r->log;
	size_t n = 0;
	int k = 0;

	out[0] = '\0';
	for (int s = 0; s < L->nspans && n + 1 < len; s++) {
		const struct gm_span *p = &L->spans[s];
		char user[64], lab[GM_CMD_MAX], js[GM_JOB_SHORT + 1];
		if (!(p->dev & x->cand) || p->end <= x->start ||
		    p->start >= wait_end(r, x) || (p->uid == x->uid && !strcmp(p->job, x->job)))
			continue;
		if (k++ == 4) {
			snprintf(out + n, len - n, ", ...");
			break;
		}
		gm_user_name(p->uid, user, sizeof user);
		gm_report_label(p->cmd, lab, sizeof lab);
		n += (size_t)snprintf(out + n, len - n, "%s%s/%s (%.40s)",
				      n ? ", " : "", user,
				      gm_job_short(p->job, js, sizeof js), lab);
		if (n >= len)
			n = len - 1;
	}
	if (!k)
		snprintf(out, len, "-");
}

static void text(const struct gm_report *r)
{
	char a[32], b[32], c[32], d[32], user[64], js[GM_JOB_SHORT + 1];
	const struct gm_log *L = r->log;
	int64_t span = r->to - r->from;

	gm_clock(r->from, a, sizeof a, 1);
	gm_clock(r->to, b, sizeof b, 1);
	gm_report_dur(c, sizeof c, span);
	printf("gpumutex report: %s, %s to %s (%s)\n\n", r->lock_dir, a, b, c);
	if (!r->ngpus) {
		printf("Nothing happened in this window (no lease, no wait).\n");
		return;
	}
	printf("%-4s %-16s %-22s %-22s %5s %9s %s\n", "GPU", "LEASED",
	       "IDLE, SOMEONE WAITED", "IDLE, NOBODY WAITED", "JOBS",
	       "HAND-OFFS", "UTIL IN LEASES");
	for (int i = 0; i < r->ngpus; i++) {
		const struct gm_rgpu *g = &r->gpus[i];
		char x[40], y[40], z[40], u[16];
		gm_report_dur(a, sizeof a, g->leased);
		gm_report_dur(b, sizeof b, g->idle_waited);
		gm_report_dur(c, sizeof c, g->idle_free);
		snprintf(x, sizeof x, "%s (%.0f%%)", a, span ? 100.0 * g->leased / span : 0);
		snprintf(y, sizeof y, "%s (%.0f%%)", b, span ? 100.0 * g->idle_waited / span : 0);
		snprintf(z, sizeof z, "%s (%.0f%%)", c, span ? 100.0 * g->idle_free / span : 0);
		if (g->util_sampled)
			snprintf(u, sizeof u, "%.0f%%", (double)g->util_busy_sum / g->util_sampled);
		else
			snprintf(u, sizeof u, "-");
		printf("%-4d %-16s %-22s %-22s %5d %9d %s\n", g->index, x, y, z,
		       g->jobs, g->handoffs, u);
	}
	gm_report_dur(a, sizeof a, r->p50);
	gm_report_dur(b, sizeof b, r->p95);
	gm_report_dur(c, sizeof c, r->max);
	printf("\nWaits: %d (%d granted, %d timed out, %d failed, %d died waiting, %d waiting now); p50 %s, p95 %s, max %s\n",
	       r->nwaits, r->granted, r->timeouts, r->errors, r->died, r->waiting, a, b, c);
	if (r->nlongest) {
		printf("Longest waits:\n");
		for (int i = 0; i < r->nlongest && i < 5; i++) {
			const struct gm_wait *x = &L->waits[r->longest[i]];
			char held[400], cand[256];
			gm_report_dur(a, sizeof a, x->end - x->start);
			gm_user_name(x->uid, user, sizeof user);
			gm_mask_list(x->cand, cand, sizeof cand);
			gm_report_holders(r, x, held, sizeof held);
			printf("  %-9s %-8s %-16s %d of GPU %s, %s; meanwhile: %s\n", a,
			       user, gm_job_short(x->job, js, sizeof js), x->want, cand, x->outcome, held);
		}
	}
	printf("\n%-10s %10s %7s %6s %10s %8s\n", "USER", "GPU-HOURS", "LEASES",
	       "WAITS", "WAITED", "TIMEOUTS");
	for (int i = 0; i < r->nusers; i++) {
		const struct gm_rwho *u = &r->users[i];
		gm_user_name(u->uid, user, sizeof user);
		gm_report_dur(a, sizeof a, u->waited);
		printf("%-10s %10.4f %7d %6d %10s %8d\n", user, u->gpu_hours,
		       u->leases, u->waits, a, u->timeouts);
	}
	printf("\nJobs (top %d by GPU-hours):\n%-18s %-10s %10s %6s %10s %8s %s\n",
	       r->top, "JOB", "USER", "GPU-HOURS", "WAITS", "WAITED", "TIMEOUTS", "COMMAND");
	for (int i = 0; i < r->njobs && i < r->top; i++) {
		const struct gm_rwho *j = &r->jobs[i];
		gm_user_name(j->uid, user, sizeof user);
		gm_report_dur(a, sizeof a, j->waited);
		printf("%-18s %-10s %10.4f %6d %10s %8d %.60s\n",
		       gm_job_short(j->job, js, sizeof js), user,
		       j->gpu_hours, j->waits, a, j->timeouts, j->cmd ? j->cmd : "");
	}
	printf("\nLeases that held a GPU while it was idle (utilisation samples, `gpumutex sample`):\n");
	if (!r->nidle)
		printf("  none seen%s\n", r->gpus[0].util_sampled || r->nidle ? "" :
		       " (no samples in this window)");
	for (int i = 0; i < r->nidle && i < r->top; i++) {
		const struct gm_ridle *x = &r->idle[i];
		const struct gm_span *p = &L->spans[x->span];
		gm_report_dur(a, sizeof a, x->idle);
		gm_report_dur(d, sizeof d, x->sampled);
		gm_user_name(p->uid, user, sizeof user);
		printf("  GPU %-2d idle %-9s of %-9s sampled (mean %3.0f%%)  %-8s %-16s %.50s\n",
		       x->dev, a, d, x->mean_util, user,
		       gm_job_short(p->job, js, sizeof js), p->cmd);
	}
	gm_report_suspensions(stdout, r);
	gm_report_gt_text(stdout, r);
	{
		int inexact = 0;
		for (int s = 0; s < L->nspans; s++)
			inexact += !L->spans[s].exact && strcmp(L->spans[s].how, "live");
		if (inexact)
			printf("\n%d lease end(s) are bounds, not exact (holders killed while nobody waited: docs/report.md, \"Ends\").\n",
			       inexact);
	}
}

/* --svg, --html: opened before anything is read or printed, so that a
 * path that cannot be written fails the command at once, alone. */
static FILE *open_out(const char *path)
{
	FILE *f = path ? fopen(path, "w") : NULL;

	if (path && !f)
		fprintf(stderr, "gpumutex report: cannot write %s: %s\n", path, strerror(errno));
	return f;
}

static int write_file(FILE *f, const char *path, const struct gm_report *r, int html)
{
	if (html)
		gm_report_html(f, r);
	else
		gm_report_svg(f, r, 1);
	if (fclose(f) != 0) {
		fprintf(stderr, "gpumutex report: cannot write %s: %s\n", path, strerror(errno));
		return 1;
	}
	return 0;
}

int gm_report_main(int argc, char **argv)
{
	const char *dir = getenv("GPUMUTEX_LOCK_DIR"), *dname = "GPUMUTEX_LOCK_DIR";
	const char *since = "24h", *until = NULL, *svg = NULL, *html = NULL;
	FILE *svg_f = NULL, *html_f = NULL;
	int as_json = 0, rc, nlive = 0, quiet = 0;
	struct gm_report r;
	struct gm_log log;
	struct timespec ts;
	uint64_t *live, top = 10;

	for (int i = 1; i < argc; i++) {
		const char *v;
		if ((v = gm_cli_opt(argc, argv, &i, "--lock-dir")) != NULL)
			dir = v, dname = "--lock-dir";
		else if ((v = gm_cli_opt(argc, argv, &i, "--since")) != NULL)
			since = v;
		else if ((v = gm_cli_opt(argc, argv, &i, "--until")) != NULL)
			until = v;
		else if ((v = gm_cli_opt(argc, argv, &i, "--svg")) != NULL)
			svg = v;
		else if ((v = gm_cli_opt(argc, argv, &i, "--html")) != NULL)
			html = v;
		else if ((v = gm_cli_opt(argc, argv, &i, "--top")) != NULL) {
			if (gm_parse_uint(v, 10, 10000, &top) || top < 1) {
				fprintf(stderr, "gpumutex report: --top %s: expected a number from 1 to 10000\n", v);
				return 2;
			}
		} else if (!strcmp(argv[i], "--json"))
			as_json = 1;
		else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q"))
			quiet = 1;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: gpumutex report [--since WHEN] [--until WHEN] [--json] [--svg FILE] [--html FILE] [--top N]\n"
			       "\n"
			       "What the GPUs did, from the event log: per GPU the time leased,\n"
			       "idle while someone waited and idle with nobody waiting; waits\n"
			       "(p50/p95/max, the longest and who held the GPUs meanwhile); GPU-hours,\n"
			       "waits and timeouts per user and per job; leases that held an idle GPU\n"
			       "(from `gpumutex sample`). docs/report.md defines every number.\n"
			       "\n"
			       "  --since WHEN   start of the window (default 24h: 24h, 90m, 30s, 2d\n"
			       "                 ago, @UNIXTIME or \"YYYY-MM-DD[ HH:MM[:SS]]\")\n"
			       "  --until WHEN   its end (default: now)\n"
			       "  --json         the numbers as one JSON document\n"
			       "  --svg FILE     write the timeline picture\n"
			       "  --html FILE    write a self-contained page: the picture and the tables\n"
			       "  --top N        jobs, waits and idle leases listed (default 10)\n"
			       "  -q, --quiet    with --svg/--html: no text report\n"
			       "  --lock-dir DIR (default: $GPUMUTEX_LOCK_DIR, else %s)\n",
			       GM_DEFAULT_LOCK_DIR);
			return 0;
		} else {
			return gm_cli_usage_error("unknown argument '%s'", argv[i]);
		}
	}
	dir = gm_cli_lock_dir("gpumutex report", dir, dname);
	if (!dir)
		return 2;
	memset(&r, 0, sizeof r);
	clock_gettime(CLOCK_REALTIME, &ts);
	r.to = (int64_t)ts.tv_sec * NS + ts.tv_nsec;
	if (gm_parse_since(since, r.to, &r.from)) {
		fprintf(stderr, "gpumutex report: --since %s: expected 24h, 90m, 30s, 2d, @UNIXTIME or YYYY-MM-DD[ HH:MM[:SS]]\n",
			since);
		return 2;
	}
	if (until && gm_parse_since(until, r.to, &r.to)) {
		fprintf(stderr, "gpumutex report: --until %s: expected 24h, 90m, 30s, 2d, @UNIXTIME or YYYY-MM-DD[ HH:MM[:SS]]\n",
			until);
		return 2;
	}
	if (r.to < r.from) {
		fprintf(stderr, "gpumutex report: --until %s is before --since %s, an empty window; give the earlier time to --since (24h, 90m... count back from now)\n",
			until, since);
		return 2;
	}
	if ((svg && !(svg_f = open_out(svg))) || (html && !(html_f = open_out(html)))) {
		if (svg_f)
			fclose(svg_f);
		return 1;
	}
	live = gm_cli_live_leases(dir, &nlive);
	rc = gm_log_read(dir, live, nlive, stderr, &log);
	free(live);
	if (rc == -ENOENT) {
		fprintf(stderr, "gpumutex report: no lock directory at %s (nothing has run there)\n", dir);
		memset(&log, 0, sizeof log);
	} else if (rc) {
		fprintf(stderr, "gpumutex report: cannot read %s: %s\n", dir, strerror(-rc));
		return 1;
	}
	/* The window starts no earlier than the log does: before its first
	 * record nothing is known (not even idleness). */
	if (log.nev) {
		int64_t first = log.ev[0].t;
		for (int i = 0; i < log.nev; i++)
			if (log.ev[i].arrived &&
			    log.ev[i].arrived + (log.ev[i].t - log.ev[i].mono) < first)
				first = log.ev[i].arrived + (log.ev[i].t - log.ev[i].mono);
		if (first > r.from)
			r.from = first;
	}
	if (r.from > r.to)
		r.from = r.to;
	r.lock_dir = dir;
	r.log = &log;
	r.top = (int)top;
	gm_report_build(&r);
	rc = 0;
	if (svg_f)
		rc |= write_file(svg_f, svg, &r, 0);
	if (html_f)
		rc |= write_file(html_f, html, &r, 1);
	if (as_json)
		gm_report_json(&r);
	else if (!quiet || (!svg && !html))
		text(&r);
	free(r.longest);
	free(r.users);
	free(r.jobs);
	free(r.idle);
	free(r.gt);
	gm_log_free(&log);
	return rc;
}
