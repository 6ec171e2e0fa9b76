/*
 * report_susp.c - `gpumutex report`'s idle suspensions (docs/suspend.md):
 * per job, how often and how long it was suspended,
 * the memory moved, and the GPU time other jobs were granted meanwhile
 * (what the waiters recovered). From the event log's suspend and resume
 * records and the rebuilt leases.
 */
#define _GNU_SOURCE
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
