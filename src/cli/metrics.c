/*
 * metrics.c - `gpumutex metrics`: the lock directory's state and the
 * event log's counters in Prometheus's text exposition format (version
 * 0.0.4), printed, written for node_exporter's textfile collector, or
 * served over HTTP (metrics_http.c). Every metric is listed in
 * docs/deploy.md ("Monitoring").
 *
 * Like `gpumutex status` it takes no lock (gm_state_read), so a scrape
 * never delays a job.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "evlog.h"
#include "lease.h"
#include "metrics.h"
#include "nvml.h"

/* A label value: backslash, double quote and newline escaped, as the
 * exposition format requires. */
static void label(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		if (*s == '\\' || *s == '"')
			fprintf(f, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static double secs(int64_t ns) { return ns > 0 ? (double)ns / 1e9 : 0.0; }

/* A counter without labels: its HELP, TYPE and one sample. */
static void count_total(FILE *f, const char *name, const char *help,
			uint64_t v)
{
	head(f, name, "counter", help);
	fprintf(f, "%s %" PRIu64 "\n", name, v);
}

/* The same, of seconds from nanoseconds (three decimals). */
static void secs_total(FILE *f, const char *name, const char *help,
		       int64_t ns)
{
	head(f, name, "counter", help);
	fprintf(f, "%s %.3f\n", name, secs(ns));
}

static const struct gm_nvml_dev *nvml_dev(const struct gm_nvml *nv, int index)
{
	for (int i = 0; nv && nv->available && i < nv->ndev; i++)
		if (nv->dev[i].index == index)
			return &nv->dev[i];
	return NULL;
}

static const struct gm_state_lease *holder(const struct gm_state *st, int i)
{
	const struct gm_state_device *d = &st->devices[i];
	return d->lease >= 0 ? &st->leases[d->lease] : NULL;
}

/* Per GPU: held, holder, seconds held, NVML figures. */
static void per_gpu(FILE *f, const char *dir, const struct gm_state *st,
		    const struct gm_nvml *nv)
{
	char user[64];

	head(f, "gpumutex_gpu_held", "gauge",
	     "1 while a job holds (or is being granted) the GPU, else 0.");
	for (int i = 0; i < st->ndevices; i++)
		fprintf(f, "gpumutex_gpu_held{gpu=\"%d\"} %d\n", st->devices[i].index,
			st->devices[i].state != GM_DEV_FREE);
	head(f, "gpumutex_gpu_holder_info", "gauge",
	     "The job id and user holding the GPU (1; absent while free).");
	for (int i = 0; i < st->ndevices; i++) {
		const struct gm_state_lease *l = holder(st, i);
		if (!l)
			continue;
		gm_user_name((unsigned)l->uid, user, sizeof user);
		/* job_id, not job: Prometheus's own `job` label names the
		 * scrape job, and would rename ours exported_job. */
		fprintf(f, "gpumutex_gpu_holder_info{gpu=\"%d\",job_id=", st->devices[i].index);
		label(f, l->job);
		fputs(",user=", f);
		label(f, user);
		fputs("} 1\n", f);
	}
	head(f, "gpumutex_gpu_held_seconds", "gauge",
	     "Seconds since the GPU's current lease was granted (0 while free).");
	for (int i = 0; i < st->ndevices; i++) {
		const struct gm_state_lease *l = holder(st, i);
		fprintf(f, "gpumutex_gpu_held_seconds{gpu=\"%d\"} %.3f\n",
			st->devices[i].index, l ? secs(st->now_ns - l->start_ns) : 0.0);
	}
	head(f, "gpumutex_gpu_idle_seconds", "gauge",
	     "Seconds since the holder's last GPU call ended (its least idle process; absent while free or unknown).");
	for (int i = 0; i < st->ndevices; i++) {
		const struct gm_state_lease *l = holder(st, i);
		int64_t idle = l ? gm_status_lease_idle_ns(dir, st, l) : -1;

		if (idle >= 0)
			fprintf(f, "gpumutex_gpu_idle_seconds{gpu=\"%d\"} %.3f\n",
				st->devices[i].index, secs(idle));
	}
	head(f, "gpumutex_suspended_processes", "gauge",
	     "Processes suspended while idle now (GPU memory checkpointed; docs/suspend.md).");
	fprintf(f, "gpumutex_suspended_processes %d\n",
		gm_status_suspended_count(dir, st));
	head(f, "gpumutex_gpu_utilization_ratio", "gauge",
	     "GPU utilisation by NVML, 0 to 1 (absent without NVML).");
	for (int i = 0; i < st->ndevices; i++) {
		const struct gm_nvml_dev *d = nvml_dev(nv, st->devices[i].index);
		if (d && d->have_util)
			fprintf(f, "gpumutex_gpu_utilization_ratio{gpu=\"%d\"} %.2f\n",
				d->index, d->util / 100.0);
	}
	head(f, "gpumutex_gpu_memory_used_bytes", "gauge",
	     "GPU memory in use by NVML (absent without NVML).");
	for (int i = 0; i < st->ndevices; i++) {
		const struct gm_nvml_dev *d = nvml_dev(nv, st->devices[i].index);
		if (d && d->have_mem)
			fprintf(f, "gpumutex_gpu_memory_used_bytes{gpu=\"%d\"} %" PRIu64 "\n",
				d->index, d->used);
	}
	head(f, "gpumutex_gpu_memory_total_bytes", "gauge",
	     "GPU memory in all by NVML (absent without NVML).");
	for (int i = 0; i < st->ndevices; i++) {
		const struct gm_nvml_dev *d = nvml_dev(nv, st->devices[i].index);
		if (d && d->have_mem)
			fprintf(f, "gpumutex_gpu_memory_total_bytes{gpu=\"%d\"} %" PRIu64 "\n",
				d->index, d->total);
	}
}

static void queue(FILE *f, const struct gm_state *st)
{
	int64_t oldest = 0;

	for (int i = 0; i < st->nwaiters; i++)
		if (st->now_ns - st->waiters[i].since_ns > oldest)
			oldest = st->now_ns - st->waiters[i].since_ns;
	head(f, "gpumutex_queue_waiting", "gauge", "Claims waiting in the queue now.");
	fprintf(f, "gpumutex_queue_waiting %d\n", st->nwaiters);
	head(f, "gpumutex_queue_oldest_wait_seconds", "gauge",
	     "Seconds the longest-waiting claim has waited (0 when none waits).");
	fprintf(f, "gpumutex_queue_oldest_wait_seconds %.3f\n", secs(oldest));
}

/* Counters from the event log (docs/report.md defines grants, waits and
 * hand-offs). They restart from the log's first record: after a rotation
 * drops old records a counter goes down, which Prometheus's rate() and
 * increase() take as a reset. */
/* gputime records grouped by process and lease, the latest last. */
static const struct gm_log *gt_log;
static int gt_order(const void *a, const void *b)
{
	const struct gm_ev *x = &gt_log->ev[*(const int *)a];
	const struct gm_ev *y = &gt_log->ev[*(const int *)b];

	if (x->uid != y->uid)
		return x->uid < y->uid ? -1 : 1;
	if (x->lease != y->lease)
		return x->lease < y->lease ? -1 : 1;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->t < y->t ? -1 : x->t > y->t;
}

/*
 * Measured GPU time (GPUMUTEX_GPU_TIME=1; docs/report.md, "GPU time"):
 * each process's records are cumulative for its lease, so the latest of
 * each (user, lease, process) counts.
 */
static void gpu_time(FILE *f, const struct gm_log *L)
{
	int *ix = malloc(sizeof(int) * (size_t)(L->nev + 1)), n = 0;
	int64_t held = 0, busy = 0, kernel = 0, copy = 0;
	uint64_t procs = 0;

	for (int i = 0; ix && i < L->nev; i++)
		if (L->ev[i].kind == EV_GPUTIME)
			ix[n++] = i;
	gt_log = L;
	if (ix)
		qsort(ix, (size_t)n, sizeof *ix, gt_order);
	for (int k = 0; k < n; k++) {
		const struct gm_ev *e = &L->ev[ix[k]], *x;

		if (k + 1 < n) {
			x = &L->ev[ix[k + 1]];
			if (x->uid == e->uid && x->lease == e->lease &&
			    x->pid == e->pid)
				continue;
		}
		procs++;
		held += e->held * (__builtin_popcountll(e->dev) ?
				   __builtin_popcountll(e->dev) : 1);
		busy += e->gpubusy ? e->gpubusy : e->busy;
		kernel += e->kernel;
		copy += e->copy;
	}
	free(ix);
	count_total(f, "gpumutex_gpu_time_processes_total",
		    "Processes whose GPU time was measured in a lease (GPUMUTEX_GPU_TIME=1; event log).", procs);
	secs_total(f, "gpumutex_gpu_time_held_seconds_total",
		   "GPU-seconds those processes held their leases' GPUs while measured (event log).", held);
	secs_total(f, "gpumutex_gpu_time_busy_seconds_total",
		   "GPU-seconds in which their GPUs ran a kernel or a memory copy of theirs (event log).", busy);
	secs_total(f, "gpumutex_gpu_time_kernel_seconds_total",
		   "Seconds of their kernels, summed (concurrent kernels each count; event log).", kernel);
	secs_total(f, "gpumutex_gpu_time_copy_seconds_total",
		   "Seconds of their memory copies, summed (event log).", copy);
}

static void counters(FILE *f, const struct gm_log *L)
{
	uint64_t grants[GM_MAX_DEVICES] = { 0 }, handoffs[GM_MAX_DEVICES] = { 0 };
	uint64_t waits = 0, timeouts = 0, susp = 0, resumes = 0;
	int64_t waited = 0, ckpt = 0;

	for (int s = 0; s < L->nspans; s++)
		for (int d = 0; d < GM_MAX_DEVICES; d++)
			if (L->spans[s].dev & (UINT64_C(1) << d)) {
				grants[d]++;
				handoffs[d] += (uint64_t)L->spans[s].handoff;
			}
	for (int i = 0; i < L->nwaits; i++) {
		const struct gm_wait *w = &L->waits[i];
		if (!strcmp(w->outcome, "waiting"))
			continue; /* counted once it ends */
		waits++;
		waited += w->end > w->start ? w->end - w->start : 0;
		timeouts += !strcmp(w->outcome, "timeout");
	}
	for (int i = 0; i < L->nev; i++) {
		susp += L->ev[i].kind == EV_SUSPEND;
		resumes += L->ev[i].kind == EV_RESUME;
		if (L->ev[i].kind == EV_SUSPEND && L->ev[i].took > 0)
			ckpt += L->ev[i].took;
	}
	head(f, "gpumutex_grants_total", "counter", "Leases granted on the GPU (event log).");
	for (int d = 0; d < GM_MAX_DEVICES; d++)
		if (grants[d])
			fprintf(f, "gpumutex_grants_total{gpu=\"%d\"} %" PRIu64 "\n", d, grants[d]);
	head(f, "gpumutex_handoffs_total", "counter",
	     "Grants of the GPU to a claim woken by its holder's end (event log).");
	for (int d = 0; d < GM_MAX_DEVICES; d++)
		if (grants[d])
			fprintf(f, "gpumutex_handoffs_total{gpu=\"%d\"} %" PRIu64 "\n", d, handoffs[d]);
	count_total(f, "gpumutex_waits_total",
		    "Claims that waited in line or gave up, once ended (event log).", waits);
	secs_total(f, "gpumutex_wait_seconds_total",
		   "Seconds those claims waited, in all (event log).", waited);
	count_total(f, "gpumutex_timeouts_total",
		    "Claims that gave up at GPUMUTEX_TIMEOUT (event log).", timeouts);
	count_total(f, "gpumutex_suspensions_total",
		    "Processes suspended while idle so that a waiter got their GPUs (event log).", susp);
	count_total(f, "gpumutex_resumes_total",
		    "Suspended processes resumed at their next GPU call (event log).", resumes);
	secs_total(f, "gpumutex_checkpoint_seconds_total",
		   "Seconds those suspensions spent checkpointing (event log).", ckpt);
	gpu_time(f, L);
}

static void up(FILE *f, int ok, int exists)
{
	head(f, "gpumutex_up", "gauge",
	     "1 when the lock directory could be read (or does not exist yet), 0 when not.");
	fprintf(f, "gpumutex_up %d\n", ok);
	head(f, "gpumutex_lock_dir_exists", "gauge", "1 when the lock directory exists.");
	fprintf(f, "gpumutex_lock_dir_exists %d\n", exists);
}

int gm_metrics_render(const char *dir, FILE *f, char *why, size_t whylen)
{
	struct gm_state st;
	struct gm_log log;
	char err[GM_ERR_MAX];
	struct gm_nvml *nv;
	uint64_t *live;
	int rc, nlive;

	*why = '\0';
	rc = gm_state_read(dir, &st, err, sizeof err);
	if (rc == -ENOENT) {
		up(f, 1, 0);
		return 0;
	}
	if (rc) {
		snprintf(why, whylen, "%s", err);
		up(f, 0, 1);
		return -1;
	}
	nv = calloc(1, sizeof *nv);
	if (nv)
		gm_nvml_read(nv);
	up(f, 1, 1);
	per_gpu(f, dir, &st, nv);
	queue(f, &st);
	free(nv);
	live = calloc((size_t)st.nleases + 1, sizeof *live);
	nlive = 0;
	for (int i = 0; live && i < st.nleases; i++)
		live[nlive++] = st.leases[i].lease_id;
	gm_state_free(&st);
	/* Refused log files are counted in gpumutex_up's sense: the state
	 * was read; a note about them goes nowhere (a scrape has no reader). */
	rc = gm_log_read(dir, live, nlive, NULL, &log);
	free(live);
	if (rc == 0) {
		counters(f, &log);
		gm_log_free(&log);
	}
	return 0;
}

/* Render into a malloc'ed buffer: 0 (and *out, *len) or -1 (and why). */
int gm_metrics_text(const char *dir, char **out, size_t *len, char *why,
		    size_t whylen)
{
	FILE *f = open_memstream(out, len);
	int rc;

	if (!f) {
		snprintf(why, whylen, "out of memory");
		return -2;
	}
	rc = gm_metrics_render(dir, f, why, whylen);
	if (fclose(f) != 0) {
		snprintf(why, whylen, "out of memory");
		return -2;
	}
	return rc;
}

/* --textfile DIR: DIR/gpumutex.prom replaced at once (a temporary file
 * in DIR, then rename), so the collector never reads half a file. */
static int write_textfile(const char *dir, const char *tdir)
{
	char why[GM_ERR_MAX], *text = NULL, *tmp = NULL, *dst = NULL;
	size_t len = 0;
	int rc = gm_metrics_text(dir, &text, &len, why, sizeof why), fd = -1;

	if (rc == -2) {
		fprintf(stderr, "gpumutex metrics: %s\n", why);
		free(text);
		return 1;
	}
	if (*why)
		fprintf(stderr, "gpumutex metrics: %s\n", why);
	if (asprintf(&tmp, "%s/.gpumutex.prom.%d", tdir, (int)getpid()) < 0 ||
	    asprintf(&dst, "%s/gpumutex.prom", tdir) < 0) {
		fprintf(stderr, "gpumutex metrics: out of memory\n");
		rc = 1;
		goto out;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, text, len) != (ssize_t)len || fsync(fd) != 0 ||
	    close(fd) != 0 || (fd = -1, rename(tmp, dst) != 0)) {
		fprintf(stderr, "gpumutex metrics: cannot write %s: %s\n", dst, strerror(errno));
		if (fd >= 0)
			close(fd);
		unlink(tmp);
		rc = 1;
		goto out;
	}
	rc = rc ? 1 : 0;
out:
	free(tmp);
	free(dst);
	free(text);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gpumutex metrics [--lock-dir DIR] [--listen [HOST:]PORT | --textfile DIR]\n"
		"\n"
		"The lock directory's state (per GPU: held, holder, seconds held, NVML\n"
		"utilisation and memory; the queue) and the event log's counters\n"
		"(grants, hand-offs, waits, seconds waited, time-outs) in Prometheus's\n"
		"text format. Metrics: docs/deploy.md (\"Monitoring\").\n"
		"\n"
		"  --listen [HOST:]PORT  serve them at http://HOST:PORT/metrics until\n"
		"                        interrupted (HOST default 127.0.0.1; PORT 0\n"
		"                        picks a free one, named on stderr)\n"
		"  --textfile DIR        write DIR/gpumutex.prom at once (node_exporter's\n"
		"                        textfile collector), then exit\n"
		"  --lock-dir DIR        (default: $GPUMUTEX_LOCK_DIR, else %s)\n"
		"  -h, --help            this help\n"
		"Without --listen or --textfile, print them. Exit status 1 when the lock\n"
		"directory cannot be read (gpumutex_up 0 is still written).\n",
		GM_DEFAULT_LOCK_DIR);
}

int gm_metrics_main(int argc, char **argv)
{
	const char *dir = getenv("GPUMUTEX_LOCK_DIR"), *dname = "GPUMUTEX_LOCK_DIR";
	const char *listen_at = NULL, *textfile = NULL;

	for (int i = 1; i < argc; i++) {
		const char *v;
		if ((v = gm_cli_opt(argc, argv, &i, "--lock-dir")) != NULL)
			dir = v, dname = "--lock-dir";
		else if ((v = gm_cli_opt(argc, argv, &i, "--listen")) != NULL)
			listen_at = v;
		else if ((v = gm_cli_opt(argc, argv, &i, "--textfile")) != NULL)
			textfile = v;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "gpumutex metrics: unknown argument '%s'\n"
				"Try 'gpumutex metrics --help'.\n", argv[i]);
			return 2;
		}
	}
	if (listen_at && textfile) {
		fprintf(stderr, "gpumutex metrics: --listen and --textfile exclude each other\n"
			"Try 'gpumutex metrics --help'.\n");
		return 2;
	}
	dir = gm_cli_lock_dir("gpumutex metrics", dir, dname);
	if (!dir)
		return 2;
	if (listen_at)
		return gm_metrics_serve(dir, listen_at);
	if (textfile)
		return write_textfile(dir, textfile);
	{
		char why[GM_ERR_MAX];
		int rc = gm_metrics_render(dir, stdout, why, sizeof why);
		fflush(stdout);
		if (rc)
			fprintf(stderr, "gpumutex metrics: %s\n", why);
		return rc ? 1 : 0;
	}
}
