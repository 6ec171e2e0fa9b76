/*
 * log.c - `gpumutex log`: the event log, readably or as JSON Lines, with
 * the lease ends the reader rebuilds (evlog.c) shown where they fall.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "evlog.h"
#include "lease.h"

struct filt {
	int64_t since;
	const char *job;
	long uid;          /* -1: everyone */
	int json;
};

/* An item to print: a record, or a rebuilt end (span index). */
struct item { int64_t t; int ev, span; };

static int by_t(const void *a, const void *b)
{
	const struct item *x = a, *y = b;
	return x->t < y->t ? -1 : x->t > y->t;
}

static void secs(char *out, size_t len, int64_t ns)
{
	if (ns < 10 * 1000000LL)
		snprintf(out, len, "%.1fms", ns / 1e6);
	else if (ns < 60 * 1000000000LL)
		snprintf(out, len, "%.2fs", ns / 1e9);
	else
		gm_cli_duration(ns, out, len);
}

static void print_ev(const struct gm_ev *e, int json)
{
	char user[64], when[32], dev[256], cand[256], w[32], js[GM_JOB_SHORT + 1];
	const char *c = e->cmd ? e->cmd : "";

	gm_user_name(e->uid, user, sizeof user);
	gm_mask_list(e->dev, dev, sizeof dev);
	gm_mask_list(e->cand, cand, sizeof cand);
	if (json) {
		printf("{\"ev\":\"%s\",\"t\":%.6f,\"mono\":%" PRId64 ",\"uid\":%u,\"user\":",
		       e->name, e->t / 1e9, e->mono, e->uid);
		gm_json_str(stdout, user);
		printf(",\"pid\":%d,\"job\":", e->pid);
		gm_json_str(stdout, e->job);
		if (e->lease)
			printf(",\"lease\":\"%" PRIu64 "\"", e->lease);
		if (e->dev)
			printf(",\"devices\":[%s]", dev);
		if (e->kind == EV_WAIT || e->kind == EV_GRANT || e->kind == EV_GIVEUP)
			printf(",\"ticket\":%" PRIu64 ",\"want\":%d,\"candidates\":[%s]",
			       e->ticket, e->want, e->cand ? cand : "");
		if (e->kind == EV_WAIT)
			printf(",\"ahead\":%d,\"head\":%s", e->ahead,
			       e->head ? "true" : "false");
		if (e->kind == EV_GRANT || e->kind == EV_GIVEUP)
			printf(",\"waited\":%.6f", e->waited / 1e9);
		if (e->kind == EV_GRANT)
			printf(",\"place\":%d,\"queued\":%s", e->place,
			       e->queued ? "true" : "false");
		if (e->kind == EV_GIVEUP)
			printf(",\"why\":\"%s\",\"errno\":%d", e->why, e->err);
		if (e->kind == EV_UTIL)
			printf(",\"gpu\":%d,\"memutil\":%d,\"used\":%" PRIu64 ",\"total\":%" PRIu64,
			       e->gpu, e->memutil, e->used, e->total);
		if (e->kind == EV_SUSPEND)
			printf(",\"memory\":%" PRIu64 ",\"checkpoint_s\":%.3f,\"idle_s\":%.3f",
			       e->used, e->took / 1e9, e->dur / 1e9);
		if (e->kind == EV_RESUME)
			printf(",\"memory\":%" PRIu64 ",\"suspended_s\":%.3f,\"waited\":%.6f",
			       e->used, e->dur / 1e9, e->waited / 1e9);
		if (e->kind == EV_GPUTIME)
			printf(",\"held_s\":%.6f,\"busy_s\":%.6f,\"gpu_busy_s\":%.6f,\"kernel_s\":%.6f,\"copy_s\":%.6f,\"longest_idle_s\":%.6f,\"final\":%s,\"why\":\"%s\"",
			       e->held / 1e9, e->busy / 1e9, e->gpubusy / 1e9,
			       e->kernel / 1e9, e->copy / 1e9, e->idlemax / 1e9,
			       e->final ? "true" : "false", e->why);
		if (e->kind == EV_END)
			printf(",\"how\":\"%s\",\"exact\":%s,\"last_seen\":%.6f",
			       e->how, strcmp(e->how, "woken") && strcmp(e->how, "exit") ?
			       "false" : "true", e->lower / 1e9);
		printf(",\"cmd\":");
		gm_json_str(stdout, c);
		printf("}\n");
		return;
	}
	gm_clock(e->t, when, sizeof when, 1);
	printf("%s  %-6s %-10s %-16s pid %-7d ", when, e->name, user,
	       gm_job_short(e->job, js, sizeof js), e->pid);
	switch (e->kind) {
	case EV_WAIT:
		printf("waits for %d of GPUs %s, %s", e->want, cand,
		       e->head ? "first in line" : "");
		if (!e->head)
			printf("%d ahead", e->ahead);
		break;
	case EV_GRANT:
		secs(w, sizeof w, e->waited);
		printf("GPU %s after %s", dev, w);
		if (e->queued)
			printf(" in line (%d ahead at first)", e->place);
		break;
	case EV_JOIN:
		printf("joins the job's lease on GPU %s", dev);
		break;
	case EV_GIVEUP:
		secs(w, sizeof w, e->waited);
		printf("gives up (%s) after %s", e->why, w);
		break;
	case EV_EXIT:
		printf("exits, holding GPU %s", dev);
		break;
	case EV_END:
		printf("lease on GPU %s ends (%s)", dev, e->how);
		break;
	case EV_SUSPEND:
		secs(w, sizeof w, e->dur);
		printf("suspended after %s idle: %.1f GiB of GPU %s moved to host memory in %.1f s; GPU %s freed for the waiter",
		       w, e->used / 1073741824.0, dev, e->took / 1e9, dev);
		break;
	case EV_RESUME:
		secs(w, sizeof w, e->dur);
		printf("resumed on GPU %s after %s suspended", dev, w);
		secs(w, sizeof w, e->waited);
		printf(" (waited %s for it)", w);
		break;
	case EV_GPUTIME:
		secs(w, sizeof w, e->gpubusy);
		printf("GPU %s busy %s of ", dev, w);
		secs(w, sizeof w, e->held);
		printf("%s held (kernels %.3f s, copies %.3f s, longest idle %.3f s)%s",
		       w, e->kernel / 1e9, e->copy / 1e9, e->idlemax / 1e9,
		       e->final ? "" : ", so far");
		break;
	case EV_UTIL:
		printf("GPU %s: %d%% busy, %.1f of %.1f GiB", dev, e->gpu,
		       e->used / 1073741824.0, e->total / 1073741824.0);
		break;
	default:
		break;
	}
	if (*c && e->kind != EV_UTIL && e->kind != EV_EXIT &&
	    e->kind != EV_GPUTIME)
		printf("  %s", c);
	printf("\n");
}

static int wanted(const struct filt *f, int64_t t, unsigned uid, const char *job)
{
	return t >= f->since && (f->uid < 0 || (unsigned)f->uid == uid) &&
	       (!f->job || gm_job_prefix(f->job, job));
}

static void end_ev(const struct gm_span *s, struct gm_ev *e)
{
	memset(e, 0, sizeof *e);
	e->kind = EV_END;
	snprintf(e->name, sizeof e->name, "end");
	e->t = s->end;
	e->mono = s->end_mono;
	e->uid = s->uid;
	e->pid = s->pid;
	snprintf(e->job, sizeof e->job, "%s", s->job);
	e->lease = s->lease;
	e->dev = s->dev;
	e->how = s->how;
	e->lower = s->lower;
	e->cmd = (char *)s->cmd;
}

/* The live leases' ids (for "live" ends); *n 0 when unknown. */
uint64_t *gm_cli_live_leases(const char *dir, int *n)
{
	struct gm_state st;
	char err[GM_ERR_MAX];
	uint64_t *v;

	*n = 0;
	if (gm_state_read(dir, &st, err, sizeof err) != 0)
		return NULL;
	v = calloc((size_t)st.nleases + 1, sizeof *v);
	for (int i = 0; v && i < st.nleases; i++)
		v[(*n)++] = st.leases[i].lease_id;
	gm_state_free(&st);
	return v;
}

/* --job: the jobs of the log whose ids the value starts (any prefix, the
 * short form included). 0 when it names one, or when following (a job to
 * come may match); else 1 after a message. */
static int job_check(const char *dir, const char *want, int follow)
{
	struct gm_log log;
	const char *first = NULL;
	int n = 0, shown = 0;

	if (!want || follow || gm_log_read(dir, NULL, 0, NULL, &log) != 0)
		return 0;
	for (int i = 0; i < log.nev; i++) {
		int seen = 0;
		if (!gm_job_prefix(want, log.ev[i].job))
			continue;
		for (int k = 0; k < i && !seen; k++)
			seen = !strcmp(log.ev[k].job, log.ev[i].job);
		if (seen)
			continue;
		if (n++ == 0)
			first = log.ev[i].job;
		else if (n == 2)
			fprintf(stderr, "gpumutex log: --job %s names more than one job (%s, %s", want,
				first, log.ev[i].job), shown = 2;
		else if (shown++ < 5)
			fprintf(stderr, ", %s", log.ev[i].job);
	}
	if (n > 1)
		fprintf(stderr, "%s); give more of its id\n", shown > 5 ? ", ..." : "");
	else if (n == 0)
		fprintf(stderr, "gpumutex log: --job %s: no job in the log has an id starting so (`gpumutex log` lists them)\n",
			want);
	gm_log_free(&log);
	return n != 1;
}

/* Print what is new since (*last_t, printed ends); 0 or -errno. */
static int show(const char *dir, const struct filt *f, int64_t *last_t,
		uint64_t **ends, int *nends, int first)
{
	struct gm_log log;
	struct item *it;
	int n = 0, nlive, rc;
	uint64_t *live = gm_cli_live_leases(dir, &nlive);

	rc = gm_log_read(dir, live, nlive, first ? stderr : NULL, &log);
	free(live);
	if (rc)
		return rc;
	it = calloc((size_t)(log.nev + log.nspans) + 1, sizeof *it);
	if (!it) {
		gm_log_free(&log);
		return -ENOMEM;
	}
	for (int i = 0; i < log.nev; i++)
		if (log.ev[i].t > *last_t &&
		    wanted(f, log.ev[i].t, log.ev[i].uid, log.ev[i].job))
			it[n++] = (struct item){ log.ev[i].t, i, -1 };
	for (int s = 0; s < log.nspans; s++) {
		const struct gm_span *p = &log.spans[s];
		int done = 0;
		if (!strcmp(p->how, "live") ||
		    !wanted(f, p->end, p->uid, p->job))
			continue;
		for (int k = 0; k < *nends && !done; k++)
			done = (*ends)[k] == p->lease;
		if (done)
			continue;
		it[n++] = (struct item){ p->end, -1, s };
		uint64_t *v = realloc(*ends, (size_t)(*nends + 1) * sizeof *v);
		if (v) {
			*ends = v;
			v[(*nends)++] = p->lease;
		}
	}
	qsort(it, (size_t)n, sizeof *it, by_t);
	for (int i = 0; i < n; i++) {
		struct gm_ev e;
		if (it[i].ev >= 0) {
			print_ev(&log.ev[it[i].ev], f->json);
		} else {
			end_ev(&log.spans[it[i].span], &e);
			print_ev(&e, f->json);
		}
	}
	for (int i = 0; i < log.nev; i++)
		if (log.ev[i].t > *last_t)
			*last_t = log.ev[i].t;
	fflush(stdout);
	free(it);
	gm_log_free(&log);
	return 0;
}

int gm_log_main(int argc, char **argv)
{
	const char *dir = getenv("GPUMUTEX_LOCK_DIR"), *dname = "GPUMUTEX_LOCK_DIR";
	struct filt f = { .since = 0, .job = NULL, .uid = -1, .json = 0 };
	const char *since = NULL;
	int follow = 0, nends = 0, rc;
	int64_t last = 0, now;
	uint64_t *ends = NULL;
	struct timespec ts;

	for (int i = 1; i < argc; i++) {
		const char *v;
		if ((v = gm_cli_opt(argc, argv, &i, "--lock-dir")) != NULL)
			dir = v, dname = "--lock-dir";
		else if ((v = gm_cli_opt(argc, argv, &i, "--since")) != NULL)
			since = v;
		else if ((v = gm_cli_opt(argc, argv, &i, "--job")) != NULL)
			f.job = v;
		else if ((v = gm_cli_opt(argc, argv, &i, "--user")) != NULL) {
			uint64_t u;
			if (gm_parse_uint(v, 10, UINT32_MAX, &u) == 0) {
				f.uid = (long)u;
			} else {
				f.uid = gm_cli_uid_of(v);
				if (f.uid < 0) {
					fprintf(stderr, "gpumutex log: --user %s: no such user\n", v);
					return 2;
				}
			}
		} else if (!strcmp(argv[i], "--follow") || !strcmp(argv[i], "-f"))
			follow = 1;
		else if (!strcmp(argv[i], "--json"))
			f.json = 1;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: gpumutex log [--since WHEN] [--job JOB] [--user USER] [--follow] [--json]\n"
			       "\n"
			       "The event log of the lock directory: every wait, grant, join,\n"
			       "give-up and exit, and the end of each lease as rebuilt from them\n"
			       "(docs/report.md says how each end is known).\n"
			       "\n"
			       "  --since WHEN   24h, 90m, 30s, 2d (ago), @UNIXTIME or\n"
			       "                 \"YYYY-MM-DD[ HH:MM[:SS]]\" (default: all)\n"
			       "  --job JOB      only this job's records (any unique prefix of\n"
			       "                 its id, such as the short form shown)\n"
			       "  --user USER    only this user's (a name or a uid)\n"
			       "  --follow, -f   keep printing new records as they come\n"
			       "  --json         one JSON object a line (JSON Lines)\n"
			       "  --lock-dir DIR (default: $GPUMUTEX_LOCK_DIR, else %s)\n",
			       GM_DEFAULT_LOCK_DIR);
			return 0;
		} else {
			return gm_cli_usage_error("unknown argument '%s'", argv[i]);
		}
	}
	dir = gm_cli_lock_dir("gpumutex log", dir, dname);
	if (!dir)
		return 2;
	clock_gettime(CLOCK_REALTIME, &ts);
	now = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
	if (since && gm_parse_since(since, now, &f.since)) {
		fprintf(stderr, "gpumutex log: --since %s: expected 24h, 90m, 30s, 2d, @UNIXTIME or YYYY-MM-DD[ HH:MM[:SS]]\n",
			since);
		return 2;
	}
	if (job_check(dir, f.job, follow))
		return 1;
	rc = show(dir, &f, &last, &ends, &nends, 1);
	if (rc == -ENOENT && !follow) {
		fprintf(stderr, "gpumutex log: no lock directory at %s (nothing has run there)\n", dir);
		free(ends);
		return 0;
	}
	if (rc && rc != -ENOENT) {
		fprintf(stderr, "gpumutex log: cannot read %s: %s\n", dir, strerror(-rc));
		free(ends);
		return 1;
	}
	while (follow) {
		struct timespec d = { 0, 250 * 1000000L };
		nanosleep(&d, NULL);
		rc = show(dir, &f, &last, &ends, &nends, 0);
		if (rc && rc != -ENOENT)
			break;
	}
	free(ends);
	return 0;
}
