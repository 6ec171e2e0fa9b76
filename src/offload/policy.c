/*
 * policy.c - where each offloadable call runs (the policy half of
 * src/offload/policy.h): configuration, the model (model.c) with its
 * profile (profile.c), starting the GPU under a gpumutex lease taken
 * without waiting (olease.c), giving it back when another job waits,
 * traces (trace.c) and the exit summary. docs/offload.md describes it.
 *
 * Configuration, read once at the first decision (nothing at load time):
 *   GPU_OFFLOAD_FORCE=cpu|gpu  every decided call on one device
 *   GPU_OFFLOAD_VERIFY=1       (the frontend's) decides as FORCE=gpu
 *   GPU_OFFLOAD_LEVEL=1..10    the level (default 5)
 *   GPU_OFFLOAD_PROFILE=PATH   the machine profile (profile.h has the
 *                              default places; "none": no profile)
 *   GPU_OFFLOAD_TRACE=DIR      one trace file per process in DIR
 *   GPU_OFFLOAD_SUMMARY=1      one summary line on stderr at exit
 *   GPU_OFFLOAD_WATCH_MS       how often a held lease looks for waiters
 *                              (default 250)
 *   GPU_OFFLOAD_YIELD_MS       no GPU call for this long while a waiter
 *                              is present gives the GPU back (default 1000)
 *   GPU_OFFLOAD_RETRY_MS       first back-off after a refused lease
 *   GPU_OFFLOAD_NVML=0         never load NVML (onvml.c)
 *   GPU_OFFLOAD_IDLE_MS        the GPU's utilisation is consulted once
 *                              this process has not used it for this
 *                              long (default 1000): the figure includes
 *                              our own work
 *   GPU_OFFLOAD_MEM_MS         the backend's free memory is read again
 *                              after this long (default 10; 0: every
 *                              call), or for a call that needs more than
 *                              half the room the last reading showed
 *
 * Locking: one mutex (gpo__lock) over the model, the GPU state and the
 * lease; the trace writer has its own (trace.c), taken after the first
 * or alone. A fork handler takes both, so a child starts with them free.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "count.h"
#include "lease.h"
#include "model.h"
#include "olease.h"
#include "onvml.h"
#include "policy.h"
#include "profile.h"
#include "tracew.h"

enum gpo__force { GPO__FORCE_NONE = 0, GPO__FORCE_CPU, GPO__FORCE_GPU };

static pthread_mutex_t gpo__lock = PTHREAD_MUTEX_INITIALIZER;

static struct {
	int inited;
	int force, level, summary;
	int64_t watch_ns, yield_ns, idle_ns, mem_ns;
	int64_t mem_at;        /* when mem_free/mem_total were read (0: not) */
	uint64_t mem_free, mem_total;
	int nvml_off;          /* GPU_OFFLOAD_NVML=0, or NVML unusable */
	int64_t nvml_at;       /* when `nvml` was read (0: never) */
	int nvml_rc;           /* its gpo_nvml_read result */
	struct gpo_nvml_reading nvml;
	struct gpo_profile prof;
	int have_prof;
	struct gpo_model model;
	/* the GPU */
	int started;           /* backend started, lease held (if managed) */
	int dead;              /* a GPO_R_* reason that keeps the GPU off */
	int pinned;            /* libgpumutex joined: the lease stays */
	int draining;          /* a waiter: no new GPU calls, then give back */
	int inflight;          /* decided GPU, not yet observed */
	int64_t last_gpu_ns;
	int watching;
	unsigned said;         /* bit per kind of message said once */
	/* the summary (the per-reason counts: count.c's gpo_count_total) */
	uint64_t decided, on_gpu;
	double gpu_s, saved_s, startup_s;
} gpo__p;

static int64_t gpo__mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One stderr line per kind of problem (bit `kind`) for the process. */
static void gpo__say(unsigned kind, const char *fmt, const char *a,
		     const char *b)
{
	if (gpo__p.said & (1u << kind))
		return;
	gpo__p.said |= 1u << kind;
	fprintf(stderr, "gpu-offload: ");
	fprintf(stderr, fmt, a, b);
	fputc('\n', stderr);
}

static int64_t gpo__env_ms(const char *name, uint64_t def)
{
	const char *v = getenv(name);
	uint64_t ms = def;

	if (v && *v && gm_parse_uint(v, 10, 3600000, &ms) != 0) {
		gpo__say(1, "%s is not a number of milliseconds; using the default", name, "");
		ms = def;
	}
	return (int64_t)ms * 1000000;
}

static void gpo__summary(void);

static void gpo__prepare(void)
{
	pthread_mutex_lock(&gpo__lock);
	gpo_trace_fork(0);
}

static void gpo__parent(void)
{
	gpo_trace_fork(1);
	pthread_mutex_unlock(&gpo__lock);
}

/* A child of a process that started the GPU stays on the CPU (a CUDA
 * context does not survive fork) and drops its copies of the lease's
 * descriptors, which would keep the lease alive after the parent gives
 * it back. The watcher thread is not in the child. */
static void gpo__child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	memcpy(&gpo__lock, &fresh, sizeof fresh);
	gpo_trace_fork(2);
	if (gpo__p.started || gpo_olease_held()) {
		gpo__p.dead = GPO_R_FORKED;
		gpo__p.started = 0;
		gpo_olease_forget();
	}
	gpo__p.watching = 0;
	gpo__p.inflight = 0;
	gpo__p.draining = 0;
	gpo__p.decided = gpo__p.on_gpu = 0;
	memset(gpo_count_total, 0, sizeof gpo_count_total);
	gpo_count_child();
	gpo__p.gpu_s = gpo__p.saved_s = gpo__p.startup_s = 0;
}

static void gpo__init(void)
{
	const char *f = getenv("GPU_OFFLOAD_FORCE");
	const char *l = getenv("GPU_OFFLOAD_LEVEL");
	const char *t = getenv("GPU_OFFLOAD_TRACE");
	const char *s = getenv("GPU_OFFLOAD_SUMMARY");
	static char path[4096], err[512];

	gpo__p.level = 5;
	if (f && strcmp(f, "cpu") == 0)
		gpo__p.force = GPO__FORCE_CPU;
	else if (f && strcmp(f, "gpu") == 0)
		gpo__p.force = GPO__FORCE_GPU;
	else if (f && *f)
		gpo__say(2, "GPU_OFFLOAD_FORCE=%s is not cpu or gpu; ignored%s", f, "");
	/* Verify mode runs every GPU-capable call on both devices: the
	 * decision is the GPU's (the frontend runs the CPU as well). */
	s = getenv("GPU_OFFLOAD_VERIFY");
	if (gpo__p.force == GPO__FORCE_NONE && s && strcmp(s, "1") == 0)
		gpo__p.force = GPO__FORCE_GPU;
	if (l && *l) {
		uint64_t v;
		if (gm_parse_uint(l, 10, 10, &v) == 0 && v >= 1)
			gpo__p.level = (int)v;
		else
			gpo__say(3, "GPU_OFFLOAD_LEVEL=%s is not a level from 1 to 10; using 5%s", l, "");
	}
	gpo__p.watch_ns = gpo__env_ms("GPU_OFFLOAD_WATCH_MS", 250);
	gpo__p.yield_ns = gpo__env_ms("GPU_OFFLOAD_YIELD_MS", 1000);
	gpo__p.idle_ns = gpo__env_ms("GPU_OFFLOAD_IDLE_MS", 1000);
	gpo__p.mem_ns = gpo__env_ms("GPU_OFFLOAD_MEM_MS", 10);
	s = getenv("GPU_OFFLOAD_NVML");
	gpo__p.nvml_off = s && strcmp(s, "0") == 0;
	if (gpo__p.watch_ns <= 0)
		gpo__p.watch_ns = 1000000;
	if ((s = getenv("GPU_OFFLOAD_PROFILE")) && strcmp(s, "none") == 0) {
		/* no profile on purpose (calibration's forced passes) */
	} else if (gpo_profile_path(path, sizeof path) == 0) {
		int rc = gpo_profile_load(path, &gpo__p.prof, err, sizeof err);
		if (rc == 0)
			gpo__p.have_prof = 1;
		else if (rc != -ENOENT || getenv("GPU_OFFLOAD_PROFILE"))
			gpo__say(4, "machine profile %s; every call stays on the CPU%s", err, "");
	}
	gpo_model_init(&gpo__p.model, gpo__p.have_prof ? &gpo__p.prof : NULL,
		       gpo__p.level);
	if (t && *t) {
		int rc = gpo_trace_setup(t, gpo__p.level);
		if (rc)
			gpo__say(5, "cannot trace into %s: %s", t, strerror(-rc));
	}
	s = getenv("GPU_OFFLOAD_SUMMARY");
	if (s && strcmp(s, "1") == 0) {
		gpo__p.summary = 1;
		atexit(gpo__summary);
	}
	gpo_gpu_atfork();       /* first: see policy.h */
	pthread_atfork(gpo__prepare, gpo__parent, gpo__child);
	/* Last: observe's lock-free path reads the settings once it sees
	 * this; the frontend's light path opens once nothing is traced. */
	__atomic_store_n(&gpo__p.inited, 1, __ATOMIC_RELEASE);
	if (!gpo_trace_on())
		gpo_fast_allow(GPO_FAST_POLICY);
}

/* Trace writing stopped for good (rc != 0): the light path may open. */
static void gpo__trace_stopped(void)
{
	if (!gpo_trace_on() && __atomic_load_n(&gpo__p.inited, __ATOMIC_ACQUIRE))
		gpo_fast_allow(GPO_FAST_POLICY);
}

/* A trace event (trace.c); a failed write is said once. Takes gpo__lock
 * for the message unless `locked`. */
static void gpo__event(int kind, double seconds, int locked)
{
	int rc = gpo_trace_event(kind, seconds);

	if (!rc)
		return;
	if (!locked)
		pthread_mutex_lock(&gpo__lock);
	gpo__say(6, "trace writing stopped: %s%s", strerror(-rc), "");
	if (!locked)
		pthread_mutex_unlock(&gpo__lock);
	gpo__trace_stopped();
}

/* ---- Giving the GPU back ------------------------------------------------ */

/* Under gpo__lock: stop the GPU and give the lease back. */
static void gpo__give_back(int64_t now)
{
	gpo_gpu_stop();
	gpo_olease_release(now);
	gpo__p.started = 0;
	gpo__p.mem_at = 0;
	gpo__p.draining = 0;
	gpo_model_reset_savings(&gpo__p.model);
}

/*
 * The watcher: while a lease that can be given back is held, look every
 * GPU_OFFLOAD_WATCH_MS for a waiter of another job. Seen, no new call goes
 * to the GPU (reason no-lease), and once no GPU call has run for
 * GPU_OFFLOAD_YIELD_MS (and none is in flight) the GPU is stopped and the
 * lease given back. A waiter that goes away before that lets the GPU be
 * used again. A thread, not a check in the wrappers, because a program
 * may stop calling BLAS at all while the waiter waits.
 */
static void *gpo__watch(void *arg)
{
	(void)arg;
	for (;;) {
		struct timespec ts;
		int64_t now;
		int c;

		ts.tv_sec = (time_t)(gpo__p.watch_ns / 1000000000);
		ts.tv_nsec = (long)(gpo__p.watch_ns % 1000000000);
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		/* The look at the lock directory is made without gpo__lock,
		 * so that it never delays the program's calls: the lease it
		 * reads stays as it is meanwhile, since only this thread gives
		 * it back while the GPU is started. */
		c = gpo_olease_contended();
		pthread_mutex_lock(&gpo__lock);
		if (!gpo__p.started || !gpo_olease_held()) {
			gpo__p.watching = 0;
			pthread_mutex_unlock(&gpo__lock);
			return NULL;
		}
		now = gpo__mono();
		if (c == 1 && !gpo__p.draining)
			gpo__p.draining = 1;
		else if (c == 0 && gpo__p.draining)
			gpo__p.draining = 0;
		if (gpo__p.draining && gpo__p.inflight == 0 &&
		    now - gpo__p.last_gpu_ns >= gpo__p.yield_ns) {
			gpo__give_back(now);
			gpo__p.watching = 0;
			pthread_mutex_unlock(&gpo__lock);
			gpo__event(GPO_TK_GPU_STOP, 0, 0);
			return NULL;
		}
		pthread_mutex_unlock(&gpo__lock);
	}
}

/* Under gpo__lock, after a start with a lease that can be given back. */
static void gpo__watch_start(void)
{
	pthread_attr_t at;
	pthread_t th;
	sigset_t all, old;

	if (gpo__p.watching || !gpo_olease_managed() || gpo__p.pinned)
		return;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 64 * 1024);
	/* The host's signals are not for this thread: it inherits a mask
	 * with all of them blocked. */
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&th, &at, gpo__watch, NULL) == 0)
		gpo__p.watching = 1;
	else
		gpo__say(7, "cannot start the thread that gives the GPU back to waiting jobs; the GPU is not used%s%s", "", "");
	sigprocmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&at);
}

/* ---- Sharing the GPU with other programs (NVML) ------------------------ */

/* The device memory `c` needs: its operands. */
static double gpo__need(const struct gpo_call *c)
{
	double need = 0;

	for (int i = 0; i < c->nbuf && i < GPO_MAX_BUFS; i++)
		need += (double)c->buf[i].bytes;
	return need;
}

/*
 * Under gpo__lock: NVML's reading of our GPU, at most one per tenth of
 * GPU_OFFLOAD_IDLE_MS (calls kept on the CPU by a busy GPU would read it
 * on every call otherwise). 0 with the reading, or -1 (unknown: NVML off,
 * absent or failing, or the GPU not established; said once).
 */
static int gpo__nvml(int64_t now, const struct gpo_nvml_reading **rd)
{
	char msg[512];

	if (gpo__p.nvml_off)
		return -1;
	if (!gpo__p.nvml_at || now - gpo__p.nvml_at >= gpo__p.idle_ns / 10 ||
	    now < gpo__p.nvml_at) {
		gpo__p.nvml_rc = gpo_nvml_read(&gpo__p.nvml, msg, sizeof msg);
		gpo__p.nvml_at = now;
		if (msg[0])
			fprintf(stderr, "gpu-offload: %s\n", msg);
	}
	*rd = &gpo__p.nvml;
	return gpo__p.nvml_rc;
}

/* Other programs load the GPU beyond the level's limit (a reading whose
 * utilisation is known). */
static int gpo__busy(const struct gpo_nvml_reading *rd)
{
	return rd->have_util &&
	       rd->util > gpo_level_get(gpo__p.level)->busy * 100 + 1e-9;
}

/*
 * Under gpo__lock, while the GPU is started, for a call the model sends
 * there: GPO_R_GPU_BUSY when this process has not used the GPU for
 * GPU_OFFLOAD_IDLE_MS (so the figure is other programs') and NVML says
 * it is loaded beyond the level's limit, else 0.
 */
static int gpo__busy_now(void)
{
	const struct gpo_nvml_reading *rd;
	int64_t now = gpo__mono();

	if (gpo__p.inflight > 0 || now - gpo__p.last_gpu_ns < gpo__p.idle_ns)
		return 0;
	return gpo__nvml(now, &rd) == 0 && gpo__busy(rd) ? GPO_R_GPU_BUSY : 0;
}

/*
 * Under gpo__lock, before the backend starts (the lease, if any, held:
 * CUDA_VISIBLE_DEVICES names its GPU now): GPO_R_GPU_BUSY when other
 * programs load the GPU beyond the level's limit, GPO_R_NO_MEMORY when
 * NVML's free memory is below the call's operands plus the level's
 * reserve; else 0. Forced (GPU_OFFLOAD_FORCE=gpu, verify mode: testing and
 * calibration) skips NVML as it skips the model; the backend's memory
 * check still applies.
 */
static int gpo__share_before_start(const struct gpo_call *c, int forced)
{
	const struct gpo_nvml_reading *rd;

	if (forced || gpo__nvml(gpo__mono(), &rd) != 0)
		return 0;
	if (gpo__busy(rd))
		return GPO_R_GPU_BUSY;
	if (rd->have_mem && (double)rd->free < gpo__need(c) +
	    gpo_level_get(gpo__p.level)->reserve * (double)rd->total)
		return GPO_R_NO_MEMORY;
	return 0;
}

/* Under gpo__lock: lease, then NVML's look at the GPU, then backend. 0 or
 * a GPO_R_* reason. */
static int gpo__start(const struct gpo_call *c, int forced)
{
	static char err[GM_ERR_MAX];
	int64_t t0 = gpo__mono();
	int rc = gpo_olease_take(t0, err, sizeof err);

	if (rc == GPO_OL_BROKEN) {
		gpo__say(8, "cannot take a gpumutex lease (%s); the GPU is not used%s", err, "");
		gpo__p.dead = GPO_R_NO_LEASE;
		return GPO_R_NO_LEASE;
	}
	if (rc == GPO_OL_REFUSED)
		gpo__event(GPO_TK_LEASE_REFUSED, 0, 1);
	if (rc != GPO_OL_HELD)
		return GPO_R_NO_LEASE;
	rc = gpo__share_before_start(c, forced);
	if (rc) {
		/* Not now: the lease goes back (the next try is another
		 * start's worth of savings away, and a lease's back-off). */
		gpo_olease_release(gpo__mono());
		return rc;
	}
	rc = gpo_gpu_start();
	if (rc) {
		/* The backend's own line is on stderr already. */
		gpo_olease_release(gpo__mono());
		gpo__p.dead = rc > 0 && rc < GPO_R_MAX ? rc : GPO_R_NO_BACKEND;
		return gpo__p.dead;
	}
	gpo__p.started = 1;
	gpo__p.startup_s += (gpo__mono() - t0) / 1e9;
	gpo__p.pinned = gpo_olease_pinned();
	if (!gpo__p.pinned && gpo_olease_managed()) {
		gpo__watch_start();
		if (!gpo__p.watching) {
			gpo__give_back(gpo__mono());
			gpo__p.dead = GPO_R_NO_LEASE;
			return GPO_R_NO_LEASE;
		}
	}
	gpo__event(GPO_TK_GPU_START, (gpo__mono() - t0) / 1e9, 1);
	if (gpo__p.pinned)
		gpo__event(GPO_TK_GPU_KEPT, 0, 1);
	return 0;
}

/*
 * Under gpo__lock: room on the device for `c` beyond the level's reserve?
 * The backend's reading (cuMemGetInfo: a driver call, microseconds, more
 * than a small call's own work) is reused for GPU_OFFLOAD_MEM_MS by calls
 * that need at most half the room it showed beyond the reserve: another
 * program's allocations are seen within that time, and a call that could
 * come near the reserve always reads. A call the stale reading lets
 * through whose allocation then fails still falls back to the CPU.
 */
static int gpo__memory_ok(const struct gpo_call *c)
{
	double need = gpo__need(c), reserve, room;
	int64_t now = gpo__mono();

	reserve = gpo_level_get(gpo__p.level)->reserve;
	if (gpo__p.mem_at && now >= gpo__p.mem_at &&
	    now - gpo__p.mem_at < gpo__p.mem_ns) {
		room = (double)gpo__p.mem_free - reserve * (double)gpo__p.mem_total;
		if (need <= room / 2)
			return 1;
	}
	if (gpo_gpu_memory(&gpo__p.mem_free, &gpo__p.mem_total) != 0) {
		gpo__p.mem_at = 0;
		return 1; /* unknown: the allocation's failure still falls back */
	}
	gpo__p.mem_at = now;
	return (double)gpo__p.mem_free >= need + reserve * (double)gpo__p.mem_total;
}

int gpo_policy_decide(const struct gpo_call *c, struct gpo_decision *d)
{
	int saved = errno;
	const char *name = gpo_op_name(c->op);

	gpo_count_flush();      /* a fold point (count.h) */
	pthread_mutex_lock(&gpo__lock);
	if (!gpo__p.inited)
		gpo__init();
	memset(d, 0, sizeof *d);
	d->device = GPO_CPU;
	if (gpo__p.force == GPO__FORCE_CPU) {
		gpo_model_predict(&gpo__p.model, c, name, 0, &d->t_cpu, &d->t_gpu);
		d->reason = GPO_R_FORCED_CPU;
	} else if (gpo__p.dead) {
		gpo_model_predict(&gpo__p.model, c, name, 0, &d->t_cpu, &d->t_gpu);
		d->reason = (uint16_t)gpo__p.dead;
	} else if (gpo__p.force == GPO__FORCE_GPU) {
		int r = 0;
		gpo_model_predict(&gpo__p.model, c, name, 0, &d->t_cpu, &d->t_gpu);
		if (gpo__p.draining)
			r = GPO_R_NO_LEASE;
		else if (!gpo__p.started)
			r = gpo__start(c, 1);
		if (r == 0 && !gpo__memory_ok(c))
			r = GPO_R_NO_MEMORY;
		d->reason = (uint16_t)(r ? r : GPO_R_FORCED_GPU);
		d->device = r ? GPO_CPU : GPO_GPU;
	} else {
		enum gpo_verdict v = gpo_model_decide(&gpo__p.model, c, name,
						      gpo__p.started, d);
		if (v != GPO_V_CPU && gpo__p.draining) {
			v = GPO_V_CPU;
			d->reason = GPO_R_NO_LEASE;
		}
		if (v == GPO_V_GPU) {
			int r = gpo__busy_now();
			if (r) {
				d->reason = (uint16_t)r;
				v = GPO_V_CPU;
			}
		}
		if (v == GPO_V_START) {
			int r = gpo__start(c, 0);
			if (r) {
				/* Savings count again from zero: the next
				 * try is another start's worth away (and no
				 * sooner than the lease's back-off). */
				gpo_model_reset_savings(&gpo__p.model);
				d->reason = (uint16_t)r;
				v = GPO_V_CPU;
			}
		}
		if (v != GPO_V_CPU && !gpo__memory_ok(c)) {
			d->reason = GPO_R_NO_MEMORY;
			v = GPO_V_CPU;
		}
		d->device = v == GPO_V_CPU ? GPO_CPU : GPO_GPU;
	}
	if (d->device == GPO_GPU)
		gpo__p.inflight++;
	pthread_mutex_unlock(&gpo__lock);
	if (gpo_trace_on())
		gpo_trace_before(c);
	errno = saved;
	return d->device;
}

static void gpo__trace_call(const struct gpo_call *c,
			    const struct gpo_decision *d, int device,
			    double seconds, double cin, double cout, int fail)
{
	int rc = gpo_trace_call(c, d, device, seconds, cin, cout, fail);

	if (rc) {
		pthread_mutex_lock(&gpo__lock);
		gpo__say(6, "trace writing stopped: %s%s", strerror(-rc), "");
		pthread_mutex_unlock(&gpo__lock);
		gpo__trace_stopped();
	}
}

int gpo_policy_tracing(void)
{
	/* Not initialised yet: the first observe will initialise, and may
	 * start a trace that wants this call's whole record. */
	return !__atomic_load_n(&gpo__p.inited, __ATOMIC_ACQUIRE) ||
	       gpo_trace_on();
}

void gpo_policy_count(unsigned reason)
{
	if (reason < GPO_R_MAX)
		gpo_count(&gpo_tls, reason);
}

void gpo_policy_observe(const struct gpo_call *c,
			const struct gpo_decision *d, int device,
			double seconds, double copy_in_s, double copy_out_s,
			int fail)
{
	int saved = errno;
	unsigned r = d->reason;
	/* The frontend's own verdicts (below the size threshold, nested,
	 * workspace queries, measured-only or unsupported calls, calls made
	 * while paused): the policy
	 * was not asked, and learns nothing from them. */
	int own = r == GPO_R_SMALL || r == GPO_R_NESTED ||
		  r == GPO_R_WORKSPACE || r == GPO_R_MEASURED ||
		  r == GPO_R_UNSUPPORTED || r == GPO_R_COPY_ENGINE ||
		  r == GPO_R_PAUSED;

	if (own && device == GPO_CPU &&
	    __atomic_load_n(&gpo__p.inited, __ATOMIC_ACQUIRE)) {
		/* The small-call path: counted in the thread's own block
		 * (count.h), without the lock or an atomic operation, so that
		 * it costs a few nanoseconds and no contention. */
		if (r < GPO_R_MAX)
			gpo_count(&gpo_tls, r);
		if (gpo_trace_on())
			gpo__trace_call(c, d, device, seconds, copy_in_s,
					copy_out_s, fail);
		errno = saved;
		return;
	}
	if (r < GPO_R_MAX)
		__atomic_fetch_add(&gpo_count_total[r], 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&gpo__lock);
	if (!gpo__p.inited)
		gpo__init();
	if (d->device == GPO_GPU && gpo__p.inflight > 0) {
		gpo__p.inflight--;
		gpo__p.last_gpu_ns = gpo__mono();
	}
	if (!own) {
		gpo__p.decided++;
		/* Learning from what really ran: not from a GPU attempt that
		 * failed half-way, nor from verify mode's double runs. */
		if (!fail && r != GPO_R_VERIFY)
			gpo_model_observe(&gpo__p.model, c, gpo_op_name(c->op),
					  device, seconds);
	}
	if (device == GPO_GPU) {
		gpo__p.on_gpu++;
		gpo__p.gpu_s += seconds;
		if (d->t_cpu > 0)
			gpo__p.saved_s += d->t_cpu - seconds;
	}
	pthread_mutex_unlock(&gpo__lock);
	if (gpo_trace_on())
		gpo__trace_call(c, d, device, seconds, copy_in_s, copy_out_s,
				fail);
	errno = saved;
}

static void gpo__summary(void)
{
	char line[1024];
	uint64_t calls = 0, reasons[GPO_R_MAX];
	size_t n;

	/* Read without the lock: at exit another thread may hold it for
	 * good (stopped in a GPU start), and a summary must not hang the
	 * exit; a count off by one is harmless here. Every call counts in
	 * exactly one reason; this thread's own counts are folded first,
	 * other running threads' may be missing in part (count.h). */
	gpo_count_flush();
	for (unsigned r = 0; r < GPO_R_MAX; r++) {
		reasons[r] = __atomic_load_n(&gpo_count_total[r], __ATOMIC_RELAXED);
		calls += reasons[r];
	}

	n = (size_t)snprintf(line, sizeof line,
			     "gpu-offload: summary: %llu calls seen, %llu decided, %llu offloaded (GPU %.3f s, start-up %.3f s), predicted time saved %.3f s; reasons:",
			     (unsigned long long)calls,
			     (unsigned long long)gpo__p.decided,
			     (unsigned long long)gpo__p.on_gpu, gpo__p.gpu_s,
			     gpo__p.startup_s, gpo__p.saved_s - gpo__p.startup_s);
	for (unsigned r = 1; r < GPO_R_MAX && n < sizeof line; r++)
		if (reasons[r])
			n += (size_t)snprintf(line + n, sizeof line - n,
					      " %s=%llu", gpo_reason_name(r),
					      (unsigned long long)reasons[r]);
	fprintf(stderr, "%s\n", line);
}
