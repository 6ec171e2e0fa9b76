/*
 * status.c - `gpumutex status`: who holds which GPU, and who waits.
 *
 * Reads the lock directory through gm_state_read, which takes no lock, so
 * running it (even with --watch) never delays a job.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "evlog.h" /* gm_job_short */
#include "lease.h"
#include "nvml.h"

static void user_name(uid_t uid, char *out, size_t len)
{
	struct passwd pw, *res = NULL;
	char buf[1024];

	if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res)
		snprintf(out, len, "%s", res->pw_name);
	else
		snprintf(out, len, "%u", (unsigned)uid);
}

/* 2m13s, 1h05m, 3d02h: the widest two units, like ps and nvidia-smi,
 * rounded to the nearest of the smaller unit (1.9 s is 2s, not 1s). */
void gm_cli_duration(int64_t ns, char *out, size_t len)
{
	int64_t s = ns > 0 ? (ns + 500000000) / 1000000000 : 0;

	if (s >= 3600)
		s = (s + 30) / 60 * 60;     /* shown in hours and minutes */
	if (s >= 86400)
		s = (s + 1800) / 3600 * 3600; /* in days and hours */

	if (s < 60)
		snprintf(out, len, "%" PRId64 "s", s);
	else if (s < 3600)
		snprintf(out, len, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
	else if (s < 86400)
		snprintf(out, len, "%" PRId64 "h%02" PRId64 "m", s / 3600,
			 s % 3600 / 60);
	else
		snprintf(out, len, "%" PRId64 "d%02" PRId64 "h", s / 86400,
			 s % 86400 / 3600);
}


static void list_pids(const pid_t *v, int n, char *out, size_t len)
{
	int tmp[32] = { 0 };

	for (int i = 0; i < n && i < 32; i++)
		tmp[i] = (int)v[i];
	gm_format_list(out, len, tmp, n < 32 ? n : 32);
}

/* One line per lease NVML shows holding its GPUs with no context: the
 * table's columns stay as they were for those who parse them. */
static void print_no_context(FILE *f, const struct gm_state *st,
			     const struct gm_nvml *nv)
{
	char devs[GM_MAX_DEVICES * 4], pids[256], js[GM_JOB_SHORT + 1];

	for (int i = 0; i < st->nleases; i++) {
		const struct gm_state_lease *l = &st->leases[i];
		if (gm_nvml_lease_context(nv, l) != 0)
			continue;
		gm_format_list(devs, sizeof devs, l->devices, l->ndevices);
		list_pids(l->pids, l->npids, pids, sizeof pids);
		fprintf(f, "No context (NVML): GPU%s %s held by job %s (pids %s), none of whose processes or their children has a context there\n",
			l->ndevices == 1 ? "" : "s", devs,
			gm_job_short(l->job, js, sizeof js), pids);
	}
}

static void print_text(FILE *f, const char *dir, const struct gm_state *st,
		       const struct gm_nvml *nv)
{
	char user[64], held[32], pids[256], devs[GM_MAX_DEVICES * 4];
	char js[GM_JOB_SHORT + 1];

	fprintf(f, "gpumutex status: %s\n\n", dir);
	if (st->ndevices == 0) {
		fprintf(f, "No GPU is managed here now (no current job holds, waits for or names one, and `gpumutex init` declared none).\n");
	} else {
		fprintf(f, "%-4s %-9s %-18s %-14s %-10s %-8s %s\n", "GPU", "STATE",
			"JOB", "PIDS", "USER", "HELD", "COMMAND");
		for (int i = 0; i < st->ndevices; i++) {
			const struct gm_state_device *d = &st->devices[i];
			const struct gm_state_lease *l =
				d->lease >= 0 ? &st->leases[d->lease] : NULL;
			const char *state = d->state == GM_DEV_FREE ? "free" :
				d->state == GM_DEV_GRANTING ? "granting" : "held";

			if (!l) {
				fprintf(f, "%-4d %-9s %-18s %-14s %-10s %-8s %s\n",
					d->index, state, "-", "-", "-", "-",
					d->state == GM_DEV_HELD ? "(no record)" : "");
				continue;
			}
			user_name(l->uid, user, sizeof user);
			gm_cli_duration(st->now_ns - l->start_ns, held, sizeof held);
			list_pids(l->pids, l->npids, pids, sizeof pids);
			if (l->nhidden) /* members in another PID namespace */
				snprintf(pids + strlen(pids), sizeof pids - strlen(pids),
					 "%s(%d elsewhere)", l->npids ? "+" : "", l->nhidden);
			fprintf(f, "%-4d %-9s %-18s %-14.14s %-10.10s %-8s %s\n",
				d->index, state, gm_job_short(l->job, js, sizeof js),
				pids, user, held, l->cmd);
		}
	}
	if (st->nunmanaged) {
		gm_format_list(devs, sizeof devs, st->unmanaged, st->nunmanaged);
		fprintf(f, "Not listed: GPU%s %s (device files left by earlier jobs; no current job names %s, nor did `gpumutex init`).\n",
			st->nunmanaged == 1 ? "" : "s", devs,
			st->nunmanaged == 1 ? "it" : "them");
	}
	print_no_context(f, st, nv);
	gm_status_idle_text(f, dir, st); /* idle suspension (idle.c) */
	fprintf(f, "\n");
	if (st->nwaiters == 0) {
		fprintf(f, "Queue: empty\n");
		return;
	}
	fprintf(f, "Queue (%d waiting, first served first):\n", st->nwaiters);
	fprintf(f, "%-4s %-9s %-10s %-8s %-5s %-12s %-18s %s\n", "#", "PID", "USER",
		"WAITED", "WANTS", "OF GPUS", "JOB", "COMMAND");
	for (int i = 0; i < st->nwaiters; i++) {
		const struct gm_state_waiter *w = &st->waiters[i];
		char pid[16];

		user_name(w->uid, user, sizeof user);
		gm_cli_duration(st->now_ns - w->since_ns, held, sizeof held);
		gm_format_list(devs, sizeof devs, w->devices, w->ndevices);
		/* Another PID namespace's number would name another process
		 * here: not shown. */
		snprintf(pid, sizeof pid, w->pid_hidden ? "elsewhere" : "%d",
			 (int)w->pid);
		fprintf(f, "%-4d %-9s %-10.10s %-8s %-5d %-12s %-18s %s\n", i + 1,
			pid, user, held, w->want, devs,
			gm_job_short(w->job, js, sizeof js),
			w->pid_hidden ? "(not visible from here)" : w->cmd);
	}
}

static void json_ints(FILE *f, const int *v, int n)
{
	fputc('[', f);
	for (int i = 0; i < n; i++)
		fprintf(f, "%s%d", i ? ", " : "", v[i]);
	fputc(']', f);
}

static double secs(int64_t ns) { return (double)ns / 1e9; }

/* The schema is documented in docs/status-json.md; bump "schema" on any
 * incompatible change. One document is one line (no newline inside), so
 * that --watch writes JSON Lines: a reader takes one line per refresh. */
static void print_json(FILE *f, const char *dir, const struct gm_state *st,
		       int exists, const struct gm_nvml *nv)
{
	char user[64];

	fprintf(f, "{\"schema\": \"gpumutex.status/2\", \"lock_dir\": ");
	gm_json_str(f, dir);
	fprintf(f, ", \"exists\": %s, \"time\": %.3f, \"pool\": ",
		exists ? "true" : "false", secs(st->now_ns));
	json_ints(f, st->pool, st->npool);
	fprintf(f, ", \"unmanaged\": ");
	json_ints(f, st->unmanaged, st->nunmanaged);
	fprintf(f, ", \"devices\": [");
	for (int i = 0; i < st->ndevices; i++) {
		const struct gm_state_device *d = &st->devices[i];
		fprintf(f, "%s{\"index\": %d, \"state\": \"%s\", \"lease\": ",
			i ? ", " : "", d->index,
			d->state == GM_DEV_FREE ? "free" :
			d->state == GM_DEV_GRANTING ? "granting" : "held");
		/* Lease ids go up to 2^61 - 1: as JSON numbers they would lose
		 * digits in jq and JavaScript (doubles), so they are strings. */
		if (d->lease >= 0)
			fprintf(f, "\"%" PRIu64 "\"}", st->leases[d->lease].lease_id);
		else
			fprintf(f, "null}");
	}
	fprintf(f, "], \"leases\": [");
	for (int i = 0; i < st->nleases; i++) {
		const struct gm_state_lease *l = &st->leases[i];
		int pids[32] = { 0 }, ctx;

		for (int k = 0; k < l->npids; k++)
			pids[k] = (int)l->pids[k];
		user_name(l->uid, user, sizeof user);
		fprintf(f, "%s{\"lease\": \"%" PRIu64 "\", \"job\": ", i ? ", " : "",
			l->lease_id);
		gm_json_str(f, l->job);
		fprintf(f, ", \"uid\": %u, \"user\": ", (unsigned)l->uid);
		gm_json_str(f, user);
		fprintf(f, ", \"pids\": ");
		json_ints(f, pids, l->npids);
		fprintf(f, ", \"pids_hidden\": %d", l->nhidden);
		fprintf(f, ", \"command\": ");
		gm_json_str(f, l->cmd);
		fprintf(f, ", \"devices\": ");
		json_ints(f, l->devices, l->ndevices);
		fprintf(f, ", \"candidates\": ");
		json_ints(f, l->candidates, l->ncandidates);
		fprintf(f, ", \"start\": %.3f, \"held_s\": %.3f", secs(l->start_ns),
			secs(st->now_ns - l->start_ns));
		ctx = gm_nvml_lease_context(nv, l);
		gm_status_idle_lease_json(f, dir, st, l);
		fprintf(f, ", \"context\": %s}", ctx > 0 ? "true" : ctx == 0 ? "false" : "null");
	}
	fprintf(f, "], \"queue\": [");
	for (int i = 0; i < st->nwaiters; i++) {
		const struct gm_state_waiter *w = &st->waiters[i];

		user_name(w->uid, user, sizeof user);
		fprintf(f, "%s{\"position\": %d, \"ticket\": %" PRIu64 ", \"pid\": ",
			i ? ", " : "", i + 1, w->ticket);
		if (w->pid_hidden)
			fprintf(f, "null");
		else
			fprintf(f, "%d", (int)w->pid);
		fprintf(f, ", \"pid_visible\": %s, \"uid\": %u, \"user\": ",
			w->pid_hidden ? "false" : "true", (unsigned)w->uid);
		gm_json_str(f, user);
		fprintf(f, ", \"job\": ");
		gm_json_str(f, w->job);
		fprintf(f, ", \"command\": ");
		gm_json_str(f, w->cmd);
		fprintf(f, ", \"want\": %d, \"devices\": ", w->want);
		json_ints(f, w->devices, w->ndevices);
		fprintf(f, ", \"since\": %.3f, \"waited_s\": %.3f}", secs(w->since_ns),
			secs(st->now_ns - w->since_ns));
	}
	fprintf(f, "]");
	gm_status_idle_json(f, dir, st); /* idle suspension (idle.c) */
	gm_status_nvml_json(f, st, nv); /* NVML (nvml.c) */
	fprintf(f, "}\n");
}

/* Longest --interval, seconds: a day between refreshes is already more
 * than anyone watches for. */
#define GM_INTERVAL_MAX 86400

/* --interval: the timeout parser's syntax, with the range of the help. */
static int parse_interval(const char *text, double *out)
{
	char err[GM_ERR_MAX];
	double v;

	if (gm_parse_timeout("--interval", text, &v, err, sizeof err) == 0 &&
	    v > 0 && v <= GM_INTERVAL_MAX) {
		*out = v;
		return 0;
	}
	fprintf(stderr,
		"gpumutex status: --interval=\"%s\" is not valid; expected seconds above 0 and at most %d as a plain decimal number such as \"1\" or \"0.5\"\n",
		text, GM_INTERVAL_MAX);
	return 2;
}

static volatile sig_atomic_t stop;
static void on_sigint(int sig) { (void)sig; stop = 1; }

static void status_usage(FILE *f)
{
	fprintf(f,
		"usage: gpumutex status [--json] [--watch [--interval S]] [--lock-dir DIR]\n"
		"\n"
		"Show, per managed GPU, whether it is free or held and by whom (job,\n"
		"PIDs, user, how long, command), then the queue in order. Reads the\n"
		"lock directory without taking any lock. A GPU is managed now when it\n"
		"is held, or a live waiter or lease has it among its candidates, or\n"
		"`gpumutex init` declared it; other device files (left by jobs that\n"
		"managed other GPUs) are only named below the table.\n"
		"\n"
		"  --json          one JSON document on one line (schema\n"
		"                  gpumutex.status/2, see docs/status-json.md)\n"
		"  --watch         refresh until interrupted: in place on a terminal;\n"
		"                  otherwise each refresh after the last, after an\n"
		"                  empty line, with no terminal codes; with --json one\n"
		"                  document per line (JSON Lines), never any codes\n"
		"  --interval S    seconds between refreshes with --watch, above 0 and\n"
		"                  at most %d, such as 0.5 (default 1)\n"
		"  --lock-dir DIR  lock directory, an absolute path (default:\n"
		"                  $GPUMUTEX_LOCK_DIR, else %s)\n"
		"  -h, --help      this help\n"
		"Flags that take a value also take the form --flag=VALUE.\n",
		GM_INTERVAL_MAX, GM_DEFAULT_LOCK_DIR);
}

int gm_status_main(int argc, char **argv)
{
	const char *dir = getenv("GPUMUTEX_LOCK_DIR");
	const char *dir_name = "GPUMUTEX_LOCK_DIR";
	int json = 0, watch = 0, clear, frame = 0;
	double interval = 1.0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = NULL;

		if (!strcmp(a, "--json"))
			json = 1;
		else if (!strcmp(a, "--watch"))
			watch = 1;
		else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			status_usage(stdout);
			return 0;
		} else if ((v = gm_cli_opt(argc, argv, &i, "--lock-dir")) != NULL) {
			dir = v;
			dir_name = "--lock-dir";
		} else if ((v = gm_cli_opt(argc, argv, &i, "--interval")) != NULL) {
			if (parse_interval(v, &interval))
				return 2;
		} else {
			return gm_cli_usage_error("unknown argument '%s'", a);
		}
	}
	dir = gm_cli_lock_dir("gpumutex status", dir, dir_name);
	if (!dir)
		return 2;
	if (watch)
		signal(SIGINT, on_sigint);
	/* Redraw in place only for a person at a terminal: in a pipe or a
	 * file, the codes would be noise in every frame, and JSON readers
	 * want nothing but documents. */
	clear = watch && !json && isatty(STDOUT_FILENO);
	do {
		struct gm_state st;
		char err[GM_ERR_MAX];
		int rc = gm_state_read(dir, &st, err, sizeof err);
		struct gm_nvml *nv = calloc(1, sizeof *nv);

		if (!nv) {
			fprintf(stderr, "gpumutex status: out of memory\n");
			return 1;
		}
		gm_nvml_read(nv); /* NVML (nvml.c) */

		if (clear)
			fputs("\033[H\033[J", stdout);
		else if (watch && !json && frame)
			fputc('\n', stdout);
		frame++;
		if (rc == -ENOENT) {
			if (json)
				print_json(stdout, dir, &st, 0, nv);
			else
				printf("gpumutex status: %s\n", err);
		} else if (rc) {
			fprintf(stderr, "gpumutex status: %s\n", err);
			free(nv);
			return 1;
		} else {
			if (json)
				print_json(stdout, dir, &st, 1, nv);
			else {
				print_text(stdout, dir, &st, nv);
				gm_status_nvml_text(stdout, &st, nv);
			}
			gm_state_free(&st);
		}
		free(nv);
		fflush(stdout);
		if (watch && !stop) {
			struct timespec ts = { (time_t)interval,
					       (long)((interval - (double)(time_t)interval) * 1e9) };
			nanosleep(&ts, NULL);
		}
	} while (watch && !stop);
	return 0;
}
