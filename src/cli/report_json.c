/*
 * report_json.c - `gpumutex report --json`: the report's numbers as one
 * JSON document (docs/report.md defines each; lease ids are strings of
 * decimal digits, as in `gpumutex status --json`).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "lease.h"
#include "report.h"

void gm_report_json(const struct gm_report *r)
{
	const struct gm_log *L = r->log;
	char user[64], list[256];

	printf("{\"lock_dir\":");
	gm_json_str(stdout, r->lock_dir);
	printf(",\"from\":%.6f,\"to\":%.6f,\"gpus\":[", r->from / 1e9, r->to / 1e9);
	for (int i = 0; i < r->ngpus; i++) {
		const struct gm_rgpu *g = &r->gpus[i];
		printf("%s{\"index\":%d,\"leased_s\":%.6f,\"idle_waited_s\":%.6f,\"idle_free_s\":%.6f,\"jobs\":%d,\"handoffs\":%d,\"util_mean\":",
		       i ? "," : "", g->index, g->leased / 1e9, g->idle_waited / 1e9,
		       g->idle_free / 1e9, g->jobs, g->handoffs);
		if (g->util_sampled)
			printf("%.2f}", (double)g->util_busy_sum / g->util_sampled);
		else
			printf("null}");
	}
	printf("],\"waits\":{\"count\":%d,\"granted\":%d,\"timeouts\":%d,\"errors\":%d,\"died\":%d,\"waiting\":%d,\"p50_s\":%.6f,\"p95_s\":%.6f,\"max_s\":%.6f,\"longest\":[",
	       r->nwaits, r->granted, r->timeouts, r->errors, r->died, r->waiting,
	       r->p50 / 1e9, r->p95 / 1e9, r->max / 1e9);
	for (int i = 0; i < r->nlongest && i < r->top; i++) {
		const struct gm_wait *x = &L->waits[r->longest[i]];
		char held[400];
		gm_user_name(x->uid, user, sizeof user);
		gm_mask_list(x->cand, list, sizeof list);
		gm_report_holders(r, x, held, sizeof held);
		printf("%s{\"user\":", i ? "," : "");
		gm_json_str(stdout, user);
		printf(",\"uid\":%u,\"job\":", x->uid);
		gm_json_str(stdout, x->job);
		printf(",\"pid\":%d,\"wait_s\":%.6f,\"outcome\":\"%s\",\"want\":%d,\"candidates\":[%s],\"meanwhile\":",
		       x->pid, (x->end - x->start) / 1e9, x->outcome, x->want, strcmp(list, "-") ? list : "");
		gm_json_str(stdout, held);
		printf("}");
	}
	printf("]}");
	for (int pass = 0; pass < 2; pass++) {
		const struct gm_rwho *v = pass ? r->jobs : r->users;
		int n = pass ? (r->njobs < r->top ? r->njobs : r->top) : r->nusers;
		printf(",\"%s\":[", pass ? "jobs" : "users");
		for (int i = 0; i < n; i++) {
			gm_user_name(v[i].uid, user, sizeof user);
			printf("%s{\"user\":", i ? "," : "");
			gm_json_str(stdout, user);
			printf(",\"uid\":%u,", v[i].uid);
			if (pass) {
				printf("\"job\":");
				gm_json_str(stdout, v[i].job);
				printf(",\"cmd\":");
				gm_json_str(stdout, v[i].cmd ? v[i].cmd : "");
				printf(",");
			}
			printf("\"gpu_hours\":%.9f,\"leases\":%d,\"waits\":%d,\"waited_s\":%.6f,\"timeouts\":%d",
			       v[i].gpu_hours, v[i].leases, v[i].waits, v[i].waited / 1e9, v[i].timeouts);
			gm_report_gt_json_who(r, &v[i]);
			gm_report_susp_json_totals(r, 0, v[i].uid,
						   pass ? v[i].job : NULL);
			printf("}");
		}
		printf("]");
	}
	printf(",\"idle_leases\":[");
	for (int i = 0; i < r->nidle; i++) {
		const struct gm_ridle *x = &r->idle[i];
		printf("%s{\"lease\":\"%" PRIu64 "\",\"gpu\":%d,\"idle_s\":%.6f,\"sampled_s\":%.6f,\"util_mean\":%.2f}",
		       i ? "," : "", L->spans[x->span].lease, x->dev, x->idle / 1e9,
		       x->sampled / 1e9, x->mean_util);
	}
	printf("],\"leases\":[");
	for (int s = 0, k = 0; s < L->nspans; s++) {
		const struct gm_span *p = &L->spans[s];
		if (!gm_report_clip(p->start, p->end, r->from, r->to) &&
		    !(p->start >= r->from && p->start <= r->to))
			continue;
		gm_user_name(p->uid, user, sizeof user);
		gm_mask_list(p->dev, list, sizeof list);
		printf("%s{\"lease\":\"%" PRIu64 "\",\"user\":", k++ ? "," : "", p->lease);
		gm_json_str(stdout, user);
		printf(",\"uid\":%u,\"job\":", p->uid);
		gm_json_str(stdout, p->job);
		printf(",\"pid\":%d,\"devices\":[%s],\"start\":%.6f,\"end\":%.6f,\"start_mono\":%" PRId64 ",\"end_mono\":%" PRId64 ",\"end_how\":\"%s\",\"exact\":%s,\"last_seen\":%.6f,\"waited_s\":%.6f,\"handoff\":%s,\"cmd\":",
		       p->pid, list, p->start / 1e9, p->end / 1e9, p->start_mono,
		       p->end_mono, p->how, p->exact ? "true" : "false",
		       p->lower / 1e9, p->waited / 1e9, p->handoff ? "true" : "false");
		gm_json_str(stdout, p->cmd);
		gm_report_gt_json_lease(r, s);
		gm_report_susp_json_totals(r, p->lease, p->uid, p->job);
		printf("}");
	}
	printf("]");
	gm_report_susp_json(r);
	printf("}\n");
}

