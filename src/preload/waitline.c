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
#include "internal.h" /* gm__fail: long values cut in the middle */

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
	long s = ns > 0 ? (long)((ns + 500000000) / 1000000000) : 0;

	if (s >= 3600)
		snprintf(buf, len, "%ldh%02ldm", s / 3600, s / 60 % 60);
	else if (s >= 60)
		snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
	else
		snprintf(buf, len, "%lds", s);
}

/* The waiting line's length it keeps to (the holder's part shrinks to
 * fit): the detail is `gpumutex status`'s. */
#define GMP_LINE_TARGET 200

/* A command line for a one-line message: the program's name without its
 * directory, then its arguments; no control characters; at most len - 1
 * bytes, ending in "..." when cut. */
static void cmd_format(char *buf, size_t len, const char *cmd)
{
	const char *sp = strchr(cmd, ' '), *slash;
	size_t i = 0;

	for (slash = cmd; *slash && (!sp || slash < sp); slash++)
		if (*slash == '/')
			cmd = slash + 1;
	for (; cmd[i] && i + 1 < len; i++)
		buf[i] = (unsigned char)cmd[i] < 0x20 || cmd[i] == 0x7f ?
			' ' : cmd[i];
	buf[i] = '\0';
	if (cmd[i] && len > 4)
		memcpy(buf + len - 4, "...", 4);
}

/* A device list for the line: "..." past 24 characters. */
static void list_format(char *buf, size_t len, const int *v, int n)
{
	gm_format_list(buf, len, v, n);
	if (len > 25 && strlen(buf) > 24)
		memcpy(buf + 21, "...", 4);
}

/*
 * gmp_on_wait's buffers: static, not on the stack (cuInit may run on a
 * thread with a 16 KiB stack). It runs only inside an acquire, under the
 * gate's lock, so one thread at a time uses them.
 */
static struct {
	char line[512], list[GM_MAX_DEVICES * 4], devs[GM_MAX_DEVICES * 4];
	char err[GM_ERR_MAX], cmd[128], dur[32], job[GM_JOB_SHORT + 1];
	char hold[256], tail[128];
	struct gm_state st;
	struct gm_config cfg;  /* cfg narrowed (gm_wait_info.narrowed) */
} wb;

/* "; GPU 0 held by job J (pid P, 'cmd', 2m13s) and 2 more" in wb.hold,
 * with as much of it as `budget` bytes allow (the job at least). */
static void holder_part(const struct gm_state *st, const struct gm_state_lease *l,
			int more, long budget)
{
	char tail[32] = "";
	int pid = l->npids ? (int)l->pids[0] : 0, n;

	list_format(wb.devs, sizeof wb.devs, l->devices, l->ndevices);
	gm_job_short(l->job, wb.job, sizeof wb.job);
	duration_format(wb.dur, sizeof wb.dur, st->now_ns - l->start_ns);
	if (more)
		snprintf(tail, sizeof tail, " and %d more", more);
	/* With the command, cut to what is left (at least 8 characters). */
	n = snprintf(wb.hold, sizeof wb.hold, "; GPU%s %s held by job %s (pid %d, '', %s)%s",
		     l->ndevices == 1 ? "" : "s", wb.devs, wb.job, pid, wb.dur, tail);
	if (budget - n >= 8 && *l->cmd) {
		size_t c = (size_t)(budget - n) + 1;
		cmd_format(wb.cmd, c < sizeof wb.cmd ? c : sizeof wb.cmd, l->cmd);
		snprintf(wb.hold, sizeof wb.hold, "; GPU%s %s held by job %s (pid %d, '%s', %s)%s",
			 l->ndevices == 1 ? "" : "s", wb.devs, wb.job, pid, wb.cmd, wb.dur, tail);
		return;
	}
	n = snprintf(wb.hold, sizeof wb.hold, "; GPU%s %s held by job %s (pid %d, %s)%s",
		     l->ndevices == 1 ? "" : "s", wb.devs, wb.job, pid, wb.dur, tail);
	if (n <= budget)
		return;
	snprintf(wb.hold, sizeof wb.hold, "; GPU%s %s held by job %s%s",
		 l->ndevices == 1 ? "" : "s", wb.devs, wb.job, tail);
}

/*
 * gm_acquire_hooks.on_wait: called once, when this process first has to
 * wait. Says in one line of about GMP_LINE_TARGET characters what it
 * waits for, its place, who holds the GPUs (the first holder; how many
 * more) and where it waits, from a lock-free snapshot of the lock
 * directory. `gpumutex status` has the rest.
 */
void gmp_on_wait(void *arg, const struct gm_wait_info *w)
{
	const struct wait_ctx *ctx = arg;
	const struct gm_config *cfg = ctx->cfg;
	char *line = wb.line;
	size_t off = 0, len = sizeof wb.line;
	struct gm_state *st = &wb.st;
	const struct gm_state_lease *first = NULL;
	int more = 0;

	if (cfg->quiet)
		return;
	if (w->narrowed) {
		/* It waits for those only: say those. */
		int n = 0;
		wb.cfg = *cfg;
		for (int i = 0; i < cfg->ndevices; i++)
			if (w->narrowed & (UINT64_C(1) << cfg->devices[i]))
				wb.cfg.devices[n++] = cfg->devices[i];
		wb.cfg.ndevices = n;
		cfg = &wb.cfg;
	}
	list_format(wb.list, sizeof wb.list, cfg->devices, cfg->ndevices);
	append(line, len, &off, "pid %d waits for %d GPU%s of %s (", (int)getpid(),
	       cfg->want, cfg->want == 1 ? "" : "s", wb.list);
	if (w->job_busy)
		append(line, len, &off, "its job is taking the lease)");
	else if (w->head)
		append(line, len, &off, "next in line)");
	else if (w->ahead <= 1)
		append(line, len, &off, "place 2 in line)");
	else
		/* A bound: counting exactly would cost a look at every ticket,
		 * and this line must cost the same however long the queue. */
		append(line, len, &off, "up to %d ahead)", w->ahead);
	if (w->narrowed)
		append(line, len, &off, "; its job's suspended processes resume on %s",
		       cfg->ndevices == 1 ? "it" : "them");
	if (ctx->suspended_ms >= 0) {
		/* A resume: the detail (memory, why) is in `gpumutex status`. */
		duration_format(wb.dur, sizeof wb.dur,
				ctx->suspended_ms * (int64_t)1000000);
		snprintf(wb.tail, sizeof wb.tail,
			 "; suspended while idle %s ago, it waits at %s for its own GPUs",
			 wb.dur, ctx->call ? ctx->call : "cuInit");
	} else if (ctx->call)
		snprintf(wb.tail, sizeof wb.tail, "; it waits at its first GPU call (%s)",
			 ctx->call);
	else /* a pool: docs/preload.md, "Device queries in PyTorch" */
		snprintf(wb.tail, sizeof wb.tail,
			 "; it waits in cuInit (torch's queries too, unless PYTORCH_NVML_BASED_CUDA_CHECK=1)");
	if (gm_state_read_holders(cfg->lock_dir, cfg->devices, cfg->ndevices,
				  st, wb.err, sizeof wb.err) == 0) {
		for (int i = 0; i < st->nleases; i++) {
			const struct gm_state_lease *l = &st->leases[i];
			int hit = 0;

			for (int a = 0; a < l->ndevices; a++)
				for (int b = 0; b < cfg->ndevices; b++)
					hit |= l->devices[a] == cfg->devices[b];
			if (!hit || strcmp(l->job, cfg->job) == 0)
				continue;
			if (first)
				more++;
			else
				first = l;
		}
		if (first)
			holder_part(st, first, more, GMP_LINE_TARGET - 10 -
				    (long)off - (long)strlen(wb.tail));
		gm_state_free(st);
	}
	if (!first)
		snprintf(wb.hold, sizeof wb.hold, "; GPU%s %s %s busy",
			 cfg->ndevices == 1 ? "" : "s", wb.list,
			 cfg->ndevices == 1 ? "is" : "are");
	append(line, len, &off, "%s%s", wb.hold, wb.tail);
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
	 * user's environment; docs/permissions.md, "The machine-wide mode"): for
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
 *   GPU- UUIDs (or prefixes naming one GPU)  mapped to indices by NVML;
 *   MIG- UUIDs, anything else  not supported: -EINVAL.
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
		if (gm_is_uuid(p, len)) {
			int v;
			/* By NVML (uuid.c); a MIG instance is refused there. */
			if (gm_uuid_index("CUDA_VISIBLE_DEVICES", cvd, p, len,
					  &v, err, errlen))
				return -EINVAL;
			listed |= UINT64_C(1) << v;
			any = 1;
			if (!*e)
				break;
			p = e + 1;
			continue;
		}
		if (!is_index(p, len)) {
			gm__fail(0, err, errlen,
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
		gm__fail(0, err, errlen,
			 "CUDA_VISIBLE_DEVICES=\"%s\" names none of the GPUs gpumutex manages (GPUMUTEX_VISIBLE_DEVICES=\"%s\"); unset it or list managed GPUs",
			 cvd, managed);
		return -EINVAL;
	}
	if (n < cfg->want) {
		gm__fail(0, err, errlen,
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

