/*
 * report_susp.c - `gpumutex report`'s idle suspensions (docs/suspend.md):
 * per job, how often and how long it was suspended,
 * the memory moved, and the GPU time other jobs were granted meanwhile
 * (what the waiters recovered). From the event log's suspend and resume
 * records and the rebuilt leases. The same numbers for `report --json`:
 * the list, and totals per lease, job and user.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lease.h"
#include "evlog.h"
#include "report.h"

/* The end of suspension `s` (index into L->ev): the same process's next
 * resume record, else the window's end (still suspended, or it died). */
int64_t gm_report_susp_end(const struct gm_log *L, int s, int64_t to)
{
	for (int i = s + 1; i < L->nev; i++)
		if (L->ev[i].kind == EV_RESUME && L->ev[i].pid == L->ev[s].pid &&
		    L->ev[i].uid == L->ev[s].uid)
			return L->ev[i].t;
	return to;
}

/* GPU time of other jobs' leases on `dev` within [a, b). */
static int64_t others(const struct gm_log *L, const char *job, uint64_t dev,
		      int64_t a, int64_t b)
{
	int64_t sum = 0;

	for (int i = 0; i < L->nspans; i++) {
		const struct gm_span *p = &L->spans[i];
		int64_t x = p->start > a ? p->start : a;
		int64_t y = p->end < b ? p->end : b;

		if (!strcmp(p->job, job) || !(p->dev & dev) || y <= x)
			continue;
		sum += (y - x) * __builtin_popcountll(p->dev & dev);
	}
	return sum;
}

void gm_report_suspensions(FILE *f, const struct gm_report *r)
{
	const struct gm_log *L = r->log;
	char a[32], b[32], c[32], g[64 * 4];
	int n = 0;

	for (int i = 0; i < L->nev; i++) {
		const struct gm_ev *e = &L->ev[i];
		int64_t end, rec;

		if (e->kind != EV_SUSPEND || e->t < r->from || e->t > r->to)
			continue;
		if (!n++)
			fprintf(f, "\nIdle suspensions (docs/preload.md):\n  %-16s %-8s %-6s %-10s %-9s %-12s %s\n",
				"JOB", "PID", "GPUS", "SUSPENDED", "MEMORY",
				"CHECKPOINT", "GPU TIME GIVEN TO WAITERS");
		end = gm_report_susp_end(L, i, r->to);
		rec = others(L, e->job, e->dev, e->t, end);
		{
			int d[64], k = 0;

			for (int j = 0; j < 64; j++)
				if (e->dev & (UINT64_C(1) << j))
					d[k++] = j;
			gm_format_list(g, sizeof g, d, k);
		}
		gm_report_dur(a, sizeof a, end - e->t);
		gm_report_dur(b, sizeof b, e->took);
		gm_report_dur(c, sizeof c, rec);
		fprintf(f, "  %-16.16s %-8d %-6s %-10s %6.1f GiB %-12s %s\n",
			e->job, e->pid, g, a, e->used / 1073741824.0, b, c);
	}
}

/* ---- JSON (report_json.c) ---------------------------------------------------- */

static int in_window(const struct gm_report *r, const struct gm_ev *e)
{
	return e->kind == EV_SUSPEND && e->t >= r->from && e->t <= r->to;
}

void gm_report_susp_json(const struct gm_report *r)
{
	const struct gm_log *L = r->log;
	char user[64], list[256];
	int n = 0;

	printf(",\"suspensions\":[");
	for (int i = 0; i < L->nev; i++) {
		const struct gm_ev *e = &L->ev[i];
		int64_t end;

		if (!in_window(r, e))
			continue;
		end = gm_report_susp_end(L, i, r->to);
		gm_user_name(e->uid, user, sizeof user);
		gm_mask_list(e->dev, list, sizeof list);
		printf("%s{\"user\":", n++ ? "," : "");
		gm_json_str(stdout, user);
		printf(",\"uid\":%u,\"job\":", e->uid);
		gm_json_str(stdout, e->job);
		printf(",\"pid\":%d,\"lease\":\"%" PRIu64 "\",\"devices\":[%s],\"start\":%.6f,\"suspended_s\":%.6f,\"resumed\":%s,\"checkpoint_s\":%.6f,\"idle_s\":%.6f,\"memory_bytes\":%" PRIu64 ",\"given_to_waiters_s\":%.6f}",
		       e->pid, e->lease, strcmp(list, "-") ? list : "",
		       e->t / 1e9, (end - e->t) / 1e9, end < r->to ? "true" : "false",
		       e->took / 1e9, e->dur / 1e9, e->used,
		       others(L, e->job, e->dev, e->t, end) / 1e9);
	}
	printf("]");
}

void gm_report_susp_json_totals(const struct gm_report *r, uint64_t lease,
				unsigned uid, const char *job)
{
	const struct gm_log *L = r->log;
	int64_t susp = 0, ckpt = 0;
	uint64_t mem = 0;
	int n = 0;

	for (int i = 0; i < L->nev; i++) {
		const struct gm_ev *e = &L->ev[i];

		if (!in_window(r, e) || e->uid != uid ||
		    (lease ? e->lease != lease : job && strcmp(e->job, job)))
			continue;
		n++;
		susp += gm_report_susp_end(L, i, r->to) - e->t;
		ckpt += e->took;
		mem += e->used;
	}
	printf(",\"suspensions\":{\"count\":%d,\"suspended_s\":%.6f,\"checkpoint_s\":%.6f,\"memory_moved_bytes\":%" PRIu64 "}",
	       n, susp / 1e9, ckpt / 1e9, mem);
}
