/*
 * gate.c - the once-per-process acquire in front of the real cuInit.
 *
 * State machine, one per process:
 *   NEW -> BUSY (one thread decides; others block on gate_lock)
 *       -> OPEN (go on to the real cuInit: lease held, not configured, or
 *                no GPU wanted)
 *       -> SHUT (fail closed; gate_code is returned from every cuInit).
 * OPEN and SHUT are final and read with one atomic load, so later cuInit
 * calls cost nothing. The lease's descriptors live in gate_lease and are
 * never closed: the lease is the process's until it exits (the driver owns
 * the GPU until then), so there is no exit handler either.
 *
 * fork: a child inherits the state. After OPEN it shares the lease's open
 * file descriptions, so it is a member of the lease for as long as it
 * lives, and its cuInit returns at once. A child forked while another
 * thread was in BUSY starts again from NEW (see atfork_child).
 */
#define _GNU_SOURCE
#include "compat.h" /* dladdr1 at its oldest version */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gate.h"
#include "internal.h" /* gm__fstat: see src/lease/lockdir.c */
#include "lease.h"
#include "pyenv.h"

enum { ST_NEW, ST_BUSY, ST_OPEN, ST_SHUT };

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static int gate_state;
static int gate_code;
static struct gm_lease gate_lease;
/* Which files the lease's descriptors were, to notice if the program
 * closes them (or reuses their numbers) behind our back. */
static struct {
	unsigned long long dev, ino;
} gate_ids[GM_MAX_DEVICES];
static __attribute__((tls_model("initial-exec"))) _Thread_local int gate_in;

/* Values handed to Python; written once, before they are published. */
static char env_cvd[GM_MAX_DEVICES * 4];
static char env_job[GM_JOB_MAX + 1];

/* Longest message line, and the one used when there is no memory for it. */
#define SAY_MAX 2048
#define SAY_SMALL 256

void gmp_say(const char *fmt, ...)
{
	/* The line is on the heap: cuInit may run on a thread with a 16 KiB
	 * stack (Go, some JVMs and thread pools make such threads), and
	 * gmp_say is called from several threads without a lock. Without
	 * memory, a shorter line on the stack. */
	char small[SAY_SMALL];
	char *heap = malloc(SAY_MAX), *line = heap ? heap : small;
	size_t cap = heap ? SAY_MAX : SAY_SMALL;
	int saved = errno, n;
	size_t len;
	va_list ap;

	memcpy(line, "gpumutex: ", 10);
	va_start(ap, fmt);
	n = vsnprintf(line + 10, cap - 11, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	len = 10 + ((size_t)n < cap - 12 ? (size_t)n : cap - 12);
	line[len++] = '\n';
	/* One write: lines from processes that share the terminal do not
	 * interleave mid-line. SIGPIPE is blocked around it: a process whose
	 * stderr is a pipe nobody reads any more (`prog 2>&1 | head -1`) must
	 * not be killed by our message. A SIGPIPE our write raises is taken
	 * back before the mask is restored, one that was already pending is
	 * left for the host. */
	{
		sigset_t pipe_set, old, pending;
		int was_pending, r;

		sigemptyset(&pipe_set);
		sigaddset(&pipe_set, SIGPIPE);
		/* sigprocmask, not pthread_sigmask (GLIBC_2.32, or
		 * libpthread before): on Linux it masks the calling thread. */
		sigprocmask(SIG_BLOCK, &pipe_set, &old);
		was_pending = sigpending(&pending) == 0 &&
			      sigismember(&pending, SIGPIPE) == 1;
		do
			r = (int)write(2, line, len);
		while (r < 0 && errno == EINTR);
		if (r < 0 && errno == EPIPE && !was_pending) {
			struct timespec zero = { 0, 0 };
			sigtimedwait(&pipe_set, NULL, &zero);
		}
		sigprocmask(SIG_SETMASK, &old, NULL);
	}
	free(heap);
	errno = saved;
}

int gmp_gate_busy(void)
{
	return gate_in;
}


/* ---- The waiting message ------------------------------------------------ */

struct wait_ctx {
	const struct gm_config *cfg;
};

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
 * on_wait's buffers: static, not on the stack (cuInit may run on a thread
 * with a 16 KiB stack). on_wait runs only inside gate_run, which holds
 * gate_lock, so one thread at a time uses them.
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
static void on_wait(void *arg, const struct gm_wait_info *w)
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
static int narrow(struct gm_config *cfg, const char *cvd, char *err,
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
static void join_refused(const char *cvd, const char *why)
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

/* ---- The gate ----------------------------------------------------------------- */

/*
 * A child forked while another thread of the parent is in BUSY inherits a
 * locked gate_lock whose owner does not exist in the child: start over,
 * so the child's own cuInit decides for itself (it joins the lease through
 * GPUMUTEX_JOB, which the parent set before it started waiting).
 */
static void atfork_child(void)
{
	/* The child has one thread: whatever state gate_lock was copied in
	 * (another thread may have held it at the fork), it is free now. */
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	int st = __atomic_load_n(&gate_state, __ATOMIC_ACQUIRE);

	memcpy(&gate_lock, &fresh, sizeof fresh);
	if (st != ST_OPEN && st != ST_SHUT) {
		/* Forked while another thread was taking the lease: drop the
		 * copies of that acquire's descriptors (they would keep its
		 * job lock and ticket open for writing, and delay everyone's
		 * wake-up, ours included) and start over from NEW. */
		gm_lease_forget_inflight();
		__atomic_store_n(&gate_state, ST_NEW, __ATOMIC_RELEASE);
	}
}

/* The child handler is registered when the library is loaded, while the
 * process is still single-threaded: registered later, from the first
 * cuInit, a fork in another thread during the registration could leave
 * the child a gate_lock held by nobody and no handler to reset it. The
 * handler costs a memcpy per fork. (pthread_once would do too, but its
 * default version is GLIBC_2.34, and before that it lives in libpthread.) */
__attribute__((constructor)) static void atfork_register(void)
{
	pthread_atfork(NULL, NULL, atfork_child);
}

/* GM_RESOLVE_INSTALLED when this library is the copy that `gpumutex
 * install --system` placed (as ld.so.preload names it): its file going
 * missing then fails closed instead of letting processes by. */
static int installed_copy(void)
{
	Dl_info self;
	struct link_map *lm = NULL;

	if (dladdr1((void *)installed_copy, &self, (void **)&lm,
		    RTLD_DL_LINKMAP) && self.dli_fname &&
	    strcmp(self.dli_fname, GM_INSTALL_LIB) == 0)
		return GM_RESOLVE_INSTALLED;
	return 0;
}

/*
 * Decide, and take the lease when configured. Returns 0 (OPEN) or the
 * CUDA error (SHUT). Sets *py when os.environ needs updating.
 */
static int gate_run(int *py)
{
	/* Static, not on the stack (4.6 KiB; cuInit may run on a thread with
	 * a 16 KiB stack): gate_run runs under gate_lock, one thread at a
	 * time. */
	static struct gm_config cfg;
	static struct gm_conf_info conf_info;
	static char err[GM_ERR_MAX];
	struct gm_acquire_hooks hooks;
	struct wait_ctx ctx;
	const char *cvd;
	int rc;

	/* The configuration: /etc/gpumutex.conf (machine-wide mode) and
	 * the environment, read here, once per process (src/lease/
	 * conffile.c). Settings an enforcing file refuses are dropped with
	 * one line; the process queues under the file's. */
	rc = gm_config_resolve(&cfg, &conf_info, installed_copy(), err,
			       sizeof err);
	if (rc == 1)
		return 0; /* not configured: pass through */
	if (rc < 0) {
		gmp_say("%s; cuInit fails (CUDA_ERROR_INVALID_VALUE) so that no GPU is used outside the queue",
			err);
		return GMP_CUDA_ERROR_INVALID_VALUE;
	}
	if (conf_info.notes[0])
		gmp_say("%s; this process queues under %s's settings",
			conf_info.notes, conf_info.file);
	cvd = getenv("CUDA_VISIBLE_DEVICES");
	if (cvd) {
		rc = narrow(&cfg, cvd, err, sizeof err);
		if (rc == 1)
			return 0; /* no GPU wanted: no lease, no wait */
		if (rc < 0) {
			gmp_say("%s; cuInit fails (CUDA_ERROR_INVALID_VALUE) so that no GPU is used outside the queue",
				err);
			return GMP_CUDA_ERROR_INVALID_VALUE;
		}
	}
	/* The job id goes into the environment before anything can wait or
	 * start a child: children then join this lease, not queue behind
	 * their own parent. */
	if (!cfg.job[0]) {
		gm_job_generate(cfg.job);
		setenv("GPUMUTEX_JOB", cfg.job, 1);
	}
	snprintf(env_job, sizeof env_job, "%s", cfg.job);
	*py = 1;

	ctx.cfg = &cfg;
	memset(&hooks, 0, sizeof hooks);
	hooks.on_wait = on_wait;
	hooks.arg = &ctx;
	rc = gm_lease_acquire(&cfg, &hooks, &gate_lease, err, sizeof err);
	if (rc == -ETIMEDOUT) {
		gmp_say("%s; cuInit returns CUDA_ERROR_NO_DEVICE", err);
		return GMP_CUDA_ERROR_NO_DEVICE;
	}
	if (rc == -GM_EJOIN) {
		join_refused(cvd, err);
		return GMP_CUDA_ERROR_INVALID_VALUE;
	}
	if (rc) {
		gmp_say("cannot queue for a GPU in GPUMUTEX_LOCK_DIR=\"%s\": %s; cuInit fails (CUDA_ERROR_NO_DEVICE) so that no GPU is used outside the queue",
			cfg.lock_dir, err);
		return GMP_CUDA_ERROR_NO_DEVICE;
	}
	/* PCI_BUS_ID: CUDA's default order (fastest first) can differ
	 * between machines' GPUs, and an index must mean the same GPU in
	 * every process. */
	for (int i = 0; i < gate_lease.ndevices; i++) {
		struct stat st;
		if (gm__fstat(gate_lease.fds[i], &st) == 0) {
			gate_ids[i].dev = (unsigned long long)st.st_dev;
			gate_ids[i].ino = (unsigned long long)st.st_ino;
		}
	}
	{
		/* What this process may use: all of a lease it was granted,
		 * the part among its own candidates of one it joined. */
		int use[GM_MAX_DEVICES], n = 0;
		for (int i = 0; i < gate_lease.ndevices; i++)
			if (gate_lease.usable &
			    (UINT64_C(1) << gate_lease.devices[i]))
				use[n++] = gate_lease.devices[i];
		gm_format_list(env_cvd, sizeof env_cvd, use, n);
	}
	setenv("CUDA_VISIBLE_DEVICES", env_cvd, 1);
	setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
	return 0;
}

/*
 * A later cuInit in a process that holds a lease: check that the lease's
 * descriptors are still ours. A program that closes every descriptor (a
 * daemon, `closefrom`) drops its lease while it may still use the GPU, and
 * another job can then be given the GPU: exclusion is gone, so say so,
 * once, and fail this and every later cuInit. 0 or a CUDA error.
 */
static int lease_intact(void)
{
	for (int i = 0; i < gate_lease.ndevices; i++) {
		struct stat st;

		if (gm__fstat(gate_lease.fds[i], &st) == 0 &&
		    (unsigned long long)st.st_dev == gate_ids[i].dev &&
		    (unsigned long long)st.st_ino == gate_ids[i].ino)
			continue;
		pthread_mutex_lock(&gate_lock);
		if (__atomic_load_n(&gate_state, __ATOMIC_ACQUIRE) == ST_OPEN) {
			gmp_say("this process closed the descriptor that held its lease on GPU %d (descriptor %d), so another job may be given that GPU while this process still uses it; exclusion is no longer guaranteed, and cuInit now fails with CUDA_ERROR_NO_DEVICE",
				gate_lease.devices[i], gate_lease.fds[i]);
			gate_code = GMP_CUDA_ERROR_NO_DEVICE;
			__atomic_store_n(&gate_state, ST_SHUT, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&gate_lock);
		return gate_code;
	}
	return 0;
}

int gmp_gate(void)
{
	static const char *const keys[] = { "GPUMUTEX_JOB",
					     "CUDA_VISIBLE_DEVICES",
					     "CUDA_DEVICE_ORDER" };
	const char *values[3] = { NULL, NULL, NULL };
	int saved = errno, st, code, py = 0;

	st = __atomic_load_n(&gate_state, __ATOMIC_ACQUIRE);
	if (st == ST_OPEN) {
		code = lease_intact();
		errno = saved;
		return code;
	}
	if (st == ST_SHUT)
		return gate_code;
	pthread_mutex_lock(&gate_lock);
	st = __atomic_load_n(&gate_state, __ATOMIC_ACQUIRE);
	if (st == ST_OPEN || st == ST_SHUT) {
		pthread_mutex_unlock(&gate_lock);
		return st == ST_OPEN ? 0 : gate_code;
	}
	__atomic_store_n(&gate_state, ST_BUSY, __ATOMIC_RELEASE);
	gate_in = 1;
	code = gate_run(&py);
	gate_in = 0;
	gate_code = code;
	__atomic_store_n(&gate_state, code ? ST_SHUT : ST_OPEN,
			 __ATOMIC_RELEASE);
	pthread_mutex_unlock(&gate_lock);

	/* After the unlock: updating os.environ may run Python code, which
	 * may switch to a thread that holds the GIL and is blocked on
	 * gate_lock in its own cuInit. */
	if (py) {
		values[0] = env_job;
		if (env_cvd[0]) {
			values[1] = env_cvd;
			values[2] = "PCI_BUS_ID";
		}
		gmp_pyenv_update(keys, values, 3);
	}
	errno = saved;
	return code;
}
