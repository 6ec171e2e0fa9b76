/*
 * waitline.c - the gate's words and its reading of an inherited
 * CUDA_VISIBLE_DEVICES: the one waiting line, the narrowing of the
 * candidates, the "cannot join" message (gate.c calls them, under its lock).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "gatepriv.h"

/* ---- The waiting message ------------------------------------------------ */


static void append(char *buf, size_t len, size_t *off, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t len, size_t *off, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*off >= len)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf + *off, len - *off, fmt, ap);
	va_end(ap);
	if (n > 0)
		*off = *off + (size_t)n < len ? *off + (size_t)n : len - 1;
}

static void duration_format(char *buf, size_t len, int64_t ns)
{
	long s = ns > 0 ? (long)(ns / 1000000000) : 0;

	if (s >= 3600)
		snprintf(buf, len, "%ldh%02ldm", s / 3600, s / 60 % 60);
	else if (s >= 60)
		snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
	else
		snprintf(buf, len, "%lds", s);
}

/* A command line for a one-line message: no control characters, cut. */
static void cmd_format(char *buf, size_t len, const char *cmd)
{
	size_t i = 0;

	for (; cmd[i] && i + 1 < len; i++)
		buf[i] = (unsigned char)cmd[i] < 0x20 || cmd[i] == 0x7f ?
			' ' : cmd[i];
	buf[i] = '\0';
	if (cmd[i] && len > 4)
		memcpy(buf + len - 4, "...", 4);
}

/*
 * gmp_on_wait's buffers: static, not on the stack (cuInit may run on a
 * thread with a 16 KiB stack). It runs only inside an acquire, under the
 * gate's lock, so one thread at a time uses them.
 */
static struct {
	char line[1400], list[GM_MAX_DEVICES * 4], devs[GM_MAX_DEVICES * 4];
	char err[GM_ERR_MAX], cmd[64], dur[32];
	struct gm_state st;
} wb;

/*
 * gm_acquire_hooks.on_wait: called once, when this process first has to
 * wait. Says in one line what it waits for, its place, and who holds the
 * GPUs, from a lock-free snapshot of the lock directory.
 */
void gmp_on_wait(void *arg, const struct gm_wait_info *w)
{
	const struct gm_config *cfg = ((struct wait_ctx *)arg)->cfg;
	char *line = wb.line;
	size_t off = 0, len = sizeof wb.line;
	struct gm_state *st = &wb.st;
	int holders = 0;

	if (cfg->quiet)
		return;
	gm_format_list(wb.list, sizeof wb.list, cfg->devices, cfg->ndevices);
	append(line, len, &off,
	       "pid %d waits for %d GPU%s of %s (job %s, ", (int)getpid(),
	       cfg->want, cfg->want == 1 ? "" : "s", wb.list, cfg->job);
	if (w->job_busy)
		append(line, len, &off,
		       "another process of this job is taking the lease)");
	else if (w->head)
		append(line, len, &off, "next in line)");
	else if (w->ahead <= 1)
		append(line, len, &off, "place 2 in line)");
	else
		/* A bound: counting exactly would cost a look at every ticket,
		 * and this line must cost the same however long the queue. */
		append(line, len, &off, "up to %d ahead)", w->ahead);
	if (gm_state_read_holders(cfg->lock_dir, cfg->devices, cfg->ndevices,
				  st, wb.err, sizeof wb.err) == 0) {
		for (int i = 0; i < st->nleases && off < len - 200; i++) {
			const struct gm_state_lease *l = &st->leases[i];
			int hit = 0;

			for (int a = 0; a < l->ndevices; a++)
				for (int b = 0; b < cfg->ndevices; b++)
					hit |= l->devices[a] == cfg->devices[b];
			if (!hit || strcmp(l->job, cfg->job) == 0)
				continue;
			gm_format_list(wb.devs, sizeof wb.devs, l->devices,
				    l->ndevices);
			cmd_format(wb.cmd, sizeof wb.cmd, l->cmd);
			duration_format(wb.dur, sizeof wb.dur,
					st->now_ns - l->start_ns);
			append(line, len, &off,
			       "; GPU%s %s held by job %s (pid %d%s, '%s', for %s)",
			       l->ndevices == 1 ? "" : "s",
			       wb.devs, l->job, l->npids ? (int)l->pids[0] : 0,
			       l->npids > 1 ? " and others" : "", wb.cmd, wb.dur);
			holders++;
		}
		gm_state_free(st);
	}
	if (!holders)
		append(line, len, &off, "; GPUs %s are busy", wb.list);
	if (((struct wait_ctx *)arg)->suspended_ms >= 0) {
		duration_format(wb.dur, sizeof wb.dur,
				((struct wait_ctx *)arg)->suspended_ms *
				(int64_t)1000000);
		append(line, len, &off,
		       "; it was suspended while idle (GPUMUTEX_IDLE_SUSPEND_MS) %s ago and waits at its next GPU call (%s) for its own GPUs, to restore its GPU memory there",
		       wb.dur, ((struct wait_ctx *)arg)->call ?
		       ((struct wait_ctx *)arg)->call : "cuInit");
	} else if (((struct wait_ctx *)arg)->call)
		append(line, len, &off, "; it waits at its first GPU call (%s)",
		       ((struct wait_ctx *)arg)->call);
	else
		append(line, len, &off,
		       "; it waits in cuInit, which the CUDA runtime also calls for device queries such as torch.cuda.is_available() (a pool: GPUMUTEX_NUM_DEVICES=%d of %d GPUs); with GPUMUTEX_NUM_DEVICES equal to the number of GPUs it may use, or PYTORCH_NVML_BASED_CUDA_CHECK=1 for torch's queries, queries do not wait",
		       cfg->want, cfg->ndevices);
	append(line, len, &off, "; GPUMUTEX_QUIET=1 hides this line");
	gmp_say("%s", line);
}

/* ---- CUDA_VISIBLE_DEVICES the process already had ------------------------- */

static int is_index(const char *s, size_t n)
{
	if (n == 0 || n > 4)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return 0;
	return 1;
}

const char *gmp_user_cvd(void)
{
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	/* A set-user-ID process reads no GPUMUTEX_* variable (the invoking
	 * user's environment; docs/design.md, "The machine-wide mode"): for
	 * it every CUDA_VISIBLE_DEVICES is a narrowing. */
	const char *ph = getauxval(AT_SECURE) ? NULL
					      : getenv(GMP_PLACEHOLDER_ENV);

	/* An empty placeholder matches nothing: CUDA_VISIBLE_DEVICES=""
	 * means "no GPU" and must keep meaning it. */
	if (cvd && ph && ph[0] && strcmp(cvd, ph) == 0)
		return NULL;
	return cvd;
}

/*
 * Narrow cfg's candidates to the GPUs an inherited CUDA_VISIBLE_DEVICES
 * allows. Forms:
 *   "" or "-1" (or a list whose first entry is -1)  no GPU wanted: 1;
 *   plain indices "2,0"  candidates = the managed GPUs listed, in managed
 *                        order; an entry "-1" ends the list, as it does
 *                        for the driver;
 *   GPU-/MIG- UUIDs, anything else  not supported: -EINVAL.
 * Returns 0 (cfg narrowed), 1, or -EINVAL with a message in err.
 */
int gmp_narrow(struct gm_config *cfg, const char *cvd, char *err,
		  size_t errlen)
{
	uint64_t listed = 0;
	int n = 0, any = 0;
	const char *p = cvd;
	char managed[GM_MAX_DEVICES * 4];

	for (;;) {
		const char *e = strchr(p, ',');
		size_t len;

		if (!e)
			e = p + strlen(p);
		while (p < e && (*p == ' ' || *p == '\t'))
			p++;
		len = (size_t)(e - p);
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (len == 0 && !any && !*e)
			return 1; /* "" */
		if (len == 2 && memcmp(p, "-1", 2) == 0)
			break;
		if (len > 4 && (memcmp(p, "GPU-", 4) == 0 ||
				memcmp(p, "MIG-", 4) == 0)) {
			snprintf(err, errlen,
				 "CUDA_VISIBLE_DEVICES=\"%s\" names a GPU by UUID, which gpumutex does not support; use GPU indices (as in GPUMUTEX_VISIBLE_DEVICES) or unset it",
				 cvd);
			return -EINVAL;
		}
		if (!is_index(p, len)) {
			snprintf(err, errlen,
				 "CUDA_VISIBLE_DEVICES=\"%s\" is not a list of GPU indices; use indices such as \"0,1\", \"\" or \"-1\" for no GPU, or unset it",
				 cvd);
			return -EINVAL;
		}
		{
			uint64_t v;
			if (gm_scan_uint(p, 10, GM_MAX_DEVICES - 1, &v, NULL) == 0)
				listed |= UINT64_C(1) << v;
		}
		any = 1;
		if (!*e)
			break;
		p = e + 1;
	}
	if (!any)
		return 1; /* "-1" first: no GPU wanted */
	gm_format_list(managed, sizeof managed, cfg->devices, cfg->ndevices);
	for (int i = 0; i < cfg->ndevices; i++)
		if (listed & (UINT64_C(1) << cfg->devices[i]))
			cfg->devices[n++] = cfg->devices[i];
	if (n == 0) {
		snprintf(err, errlen,
			 "CUDA_VISIBLE_DEVICES=\"%s\" names none of the GPUs gpumutex manages (GPUMUTEX_VISIBLE_DEVICES=\"%s\"); unset it or list managed GPUs",
			 cvd, managed);
		return -EINVAL;
	}
	if (n < cfg->want) {
		snprintf(err, errlen,
			 "CUDA_VISIBLE_DEVICES=\"%s\" leaves %d of the managed GPUs (GPUMUTEX_VISIBLE_DEVICES=\"%s\"), fewer than GPUMUTEX_NUM_DEVICES=%d",
			 cvd, n, managed, cfg->want);
		return -EINVAL;
	}
	cfg->ndevices = n;
	return 0;
}

/*
 * The job's lease is alive but does not fit this process's own settings
 * (gm_join_check): say which settings, and that no GPU is used.
 */
void gmp_join_refused(const char *cvd, const char *why)
{
	char managed[GM_MAX_DEVICES * 4], narrowed[GM_MAX_DEVICES * 4 + 64] = "";
	const char *v = getenv("GPUMUTEX_VISIBLE_DEVICES");
	const char *w = getenv("GPUMUTEX_NUM_DEVICES");

	snprintf(managed, sizeof managed, "%s", v ? v : "");
	if (cvd)
		snprintf(narrowed, sizeof narrowed,
			 ", narrowed by CUDA_VISIBLE_DEVICES=\"%s\",", cvd);
	gmp_say("this process cannot join its job's lease: %s; it has GPUMUTEX_VISIBLE_DEVICES=\"%s\"%s and GPUMUTEX_NUM_DEVICES=%s; cuInit fails (CUDA_ERROR_INVALID_VALUE) so that it uses no GPU outside its own; give it its job's settings, or start it as a job of its own (another GPUMUTEX_JOB), which waits for its turn",
		why, managed, narrowed, w ? w : "1 (unset)");
}

