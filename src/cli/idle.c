/*
 * idle.c - `gpumutex status`'s view of idle suspension: how long each
 * lease has been idle (its least idle member), why an idle lease was not
 * suspended, and which processes are suspended now (their lease is gone:
 * they wait for their next GPU call). From the lines the preload library
 * publishes (gm_activity_read).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "evlog.h"          /* gm_user_name */
#include "lease.h"

static struct gm_activity *acts;
static int nacts;
static int64_t loaded_at = -1;

static int alive(pid_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

static void load(const char *dir, const struct gm_state *st)
{
	char err[GM_ERR_MAX];

	if (loaded_at == st->now_ns)
		return;
	free(acts);
	acts = NULL;
	nacts = 0;
	if (gm_activity_read(dir, &acts, &nacts, err, sizeof err))
		nacts = 0;
	loaded_at = st->now_ns;
}

/* 1 when `pid` is stopped (a signal or a debugger): its helper thread
 * cannot run, so it never checkpoints and its job keeps its GPUs. */
static int stopped(pid_t pid)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* after the command name, which may hold ')' */
	return p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

/* The lease's idle time in ns (-1: unknown) and a member's reason not
 * to suspend it ("" none). */
static int64_t lease_idle(const struct gm_state *st,
			  const struct gm_state_lease *l, const char **why)
{
	int64_t idle = -1;

	*why = "";
	for (int i = 0; i < nacts; i++) {
		const struct gm_activity *a = &acts[i];
		int64_t v;

		if (a->lease_id != l->lease_id || strcmp(a->job, l->job) ||
		    !alive(a->pid) || strcmp(a->state, "suspended") == 0)
			continue;
		v = a->idle_since_ns > 0 ? st->now_ns - a->idle_since_ns : 0;
		if (v < 0)
			v = 0;
		if (idle < 0 || v < idle)
			idle = v;
		if (strcmp(a->why, "-"))
			*why = a->why;
	}
	for (int k = 0; k < l->npids; k++)
		if (stopped(l->pids[k]))
			*why = "stopped";
	return idle;
}

int64_t gm_status_lease_idle_ns(const char *dir, const struct gm_state *st,
				const struct gm_state_lease *l)
{
	const char *why;

	load(dir, st);
	return lease_idle(st, l, &why);
}

int gm_status_suspended_count(const char *dir, const struct gm_state *st)
{
	int n = 0;

	load(dir, st);
	for (int i = 0; i < nacts; i++)
		n += !strcmp(acts[i].state, "suspended") && alive(acts[i].pid);
	return n;
}

void gm_status_idle_text(FILE *f, const char *dir, const struct gm_state *st)
{
	char dur[32], devs[GM_MAX_DEVICES * 4], user[64];
	int head = 0;

	load(dir, st);
	for (int i = 0; i < st->nleases; i++) {
		const char *why;
		int64_t idle = lease_idle(st, &st->leases[i], &why);

		if (idle < 0)
			continue;
		if (!head++)
			fprintf(f, "\nActivity (GPU calls):\n");
		gm_cli_duration(idle, dur, sizeof dur);
		fprintf(f, "  job %-18.18s %s%s%s%s\n", st->leases[i].job,
			idle ? "idle " : "active", idle ? dur : "",
			*why ? ", not suspended: " : "", why);
	}
	head = 0;
	for (int i = 0; i < nacts; i++) {
		const struct gm_activity *a = &acts[i];

		if (strcmp(a->state, "suspended") || !alive(a->pid))
			continue;
		if (!head++)
			fprintf(f, "\nSuspended (idle, GPU memory checkpointed; each resumes at its next GPU call):\n");
		gm_cli_duration(st->now_ns - a->since_ns, dur, sizeof dur);
		gm_format_list(devs, sizeof devs, a->devices, a->ndevices);
		gm_user_name(a->uid, user, sizeof user);
		fprintf(f, "  pid %-8d user %-10.10s job %-18.18s GPUs %-8s for %s, %.1f GiB moved to host memory\n",
			(int)a->pid, user, a->job, devs, dur,
			(double)a->mem / (1024.0 * 1024 * 1024));
	}
}

void gm_status_idle_lease_json(FILE *f, const char *dir,
			       const struct gm_state *st,
			       const struct gm_state_lease *l)
{
	const char *why;
	int64_t idle;

	load(dir, st);
	idle = lease_idle(st, l, &why);
	if (idle < 0)
		fprintf(f, ", \"idle_s\": null");
	else
		fprintf(f, ", \"idle_s\": %.3f", (double)idle / 1e9);
	fprintf(f, ", \"suspend_declined\": ");
	if (*why)
		gm_json_str(f, why);
	else
		fprintf(f, "null");
}

void gm_status_idle_json(FILE *f, const char *dir, const struct gm_state *st)
{
	char user[64];
	int n = 0;

	load(dir, st);
	fprintf(f, ", \"suspended\": [");
	for (int i = 0; i < nacts; i++) {
		const struct gm_activity *a = &acts[i];
		int devs[GM_MAX_DEVICES];

		if (strcmp(a->state, "suspended") || !alive(a->pid))
			continue;
		memcpy(devs, a->devices, sizeof devs);
		gm_user_name(a->uid, user, sizeof user);
		fprintf(f, "%s{\"pid\": %d, \"uid\": %u, \"user\": ",
			n++ ? ", " : "", (int)a->pid, (unsigned)a->uid);
		gm_json_str(f, user);
		fprintf(f, ", \"job\": ");
		gm_json_str(f, a->job);
		fprintf(f, ", \"devices\": [");
		for (int k = 0; k < a->ndevices; k++)
			fprintf(f, "%s%d", k ? ", " : "", devs[k]);
		fprintf(f, "], \"since\": %.3f, \"suspended_s\": %.3f, \"memory\": %" PRIu64 "}",
			(double)a->since_ns / 1e9,
			(double)(st->now_ns - a->since_ns) / 1e9, a->mem);
	}
	fprintf(f, "]");
}
