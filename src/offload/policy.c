/*
 * policy.c - where each offloadable call runs (gpo_policy_decide, the
 * decision half of src/offload/policy.h): the model (model.c) with its
 * profile (profile.c), starting the GPU under a gpumutex lease taken
 * without waiting (olease.c), NVML's look at other programs' use of the
 * GPU (onvml.c), the device's free memory, and giving the GPU back when
 * another job waits (the watcher thread). The state these read and the
 * configuration are pstate.c's; what is done after a call (learning,
 * counts, traces, the summary) is observe.c's. docs/offload.md describes
 * it all.
 *
 * Locking: pstate.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "count.h"
#include "lease.h"
#include "olease.h"
#include "pstate.h"
#include "tracew.h"

/* ---- Giving the GPU back ------------------------------------------------ */

/* Under gpo_pol_lock: stop the GPU and give the lease back. */
static void gpo__give_back(int64_t now)
{
	gpo_gpu_stop();
	gpo_olease_release(now);
	gpo_pol_set(&gpo_pol.started, 0);
	gpo_pol.mem_at = 0;
	gpo_pol_set(&gpo_pol.draining, 0);
	gpo_model_reset_savings(&gpo_pol.model);
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

		ts.tv_sec = (time_t)(gpo_pol.watch_ns / 1000000000);
		ts.tv_nsec = (long)(gpo_pol.watch_ns % 1000000000);
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		/* The look at the lock directory is made without gpo_pol_lock,
		 * so that it never delays the program's calls: the lease it
		 * reads stays as it is meanwhile, since only this thread gives
		 * it back while the GPU is started. */
		c = gpo_olease_contended();
		pthread_mutex_lock(&gpo_pol_lock);
		if (!gpo_pol.started || !gpo_olease_held()) {
			gpo_pol.watching = 0;
			pthread_mutex_unlock(&gpo_pol_lock);
			return NULL;
		}
		now = gpo_pol_mono();
		if (c == 1 && !gpo_pol.draining)
			gpo_pol_set(&gpo_pol.draining, 1);
		else if (c == 0 && gpo_pol.draining)
			gpo_pol_set(&gpo_pol.draining, 0);
		if (gpo_pol.draining && gpo_pol.inflight == 0 &&
		    now - gpo_pol.last_gpu_ns >= gpo_pol.yield_ns) {
			gpo__give_back(now);
			gpo_pol.watching = 0;
			pthread_mutex_unlock(&gpo_pol_lock);
			gpo_pol_event(GPO_TK_GPU_STOP, 0, 0);
			return NULL;
		}
		pthread_mutex_unlock(&gpo_pol_lock);
	}
}

/* Under gpo_pol_lock, after a start with a lease that can be given back. */
static void gpo__watch_start(void)
{
	pthread_attr_t at;
	pthread_t th;
	sigset_t all, old;

	if (gpo_pol.watching || !gpo_olease_managed() || gpo_pol.pinned)
		return;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 64 * 1024);
	/* The host's signals are not for this thread: it inherits a mask
	 * with all of them blocked. */
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&th, &at, gpo__watch, NULL) == 0)
		gpo_pol.watching = 1;
	else
		gpo_pol_say(7, "cannot start the thread that gives the GPU back to waiting jobs; the GPU is not used%s%s", "", "");
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
 * Under gpo_pol_lock: NVML's reading of our GPU, at most one per tenth of
 * GPU_OFFLOAD_IDLE_MS (calls kept on the CPU by a busy GPU would read it
 * on every call otherwise). 0 with the reading, or -1 (unknown: NVML off,
 * absent or failing, or the GPU not established; said once).
 */
static int gpo__nvml(int64_t now, const struct gpo_nvml_reading **rd)
{
	char msg[512];

	if (gpo_pol.nvml_off)
		return -1;
	if (!gpo_pol.nvml_at || now - gpo_pol.nvml_at >= gpo_pol.idle_ns / 10 ||
	    now < gpo_pol.nvml_at) {
		gpo_pol.nvml_rc = gpo_nvml_read(&gpo_pol.nvml, msg, sizeof msg);
		gpo_pol.nvml_at = now;
		if (msg[0])
			fprintf(stderr, "gpu-offload: %s\n", msg);
	}
	*rd = &gpo_pol.nvml;
	return gpo_pol.nvml_rc;
}

/* Other programs load the GPU beyond the level's limit (a reading whose
 * utilisation is known). */
static int gpo__busy(const struct gpo_nvml_reading *rd)
{
	return rd->have_util &&
	       rd->util > gpo_level_get(gpo_pol.level)->busy * 100 + 1e-9;
}

/*
 * Under gpo_pol_lock, while the GPU is started, for a call the model sends
 * there: GPO_R_GPU_BUSY when this process has not used the GPU for
 * GPU_OFFLOAD_IDLE_MS (so the figure is other programs') and NVML says
 * it is loaded beyond the level's limit, else 0.
 */
static int gpo__busy_now(void)
{
	const struct gpo_nvml_reading *rd;
	int64_t now = gpo_pol_mono();

	if (gpo_pol.inflight > 0 || now - gpo_pol.last_gpu_ns < gpo_pol.idle_ns)
		return 0;
	return gpo__nvml(now, &rd) == 0 && gpo__busy(rd) ? GPO_R_GPU_BUSY : 0;
}

/*
 * Under gpo_pol_lock, before the backend starts (the lease, if any, held:
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

	if (forced || gpo__nvml(gpo_pol_mono(), &rd) != 0)
		return 0;
	if (gpo__busy(rd))
		return GPO_R_GPU_BUSY;
	if (rd->have_mem && (double)rd->free < gpo__need(c) +
	    gpo_level_get(gpo_pol.level)->reserve * (double)rd->total)
		return GPO_R_NO_MEMORY;
	return 0;
}

/* Under gpo_pol_lock: lease, then NVML's look at the GPU, then backend. 0 or
 * a GPO_R_* reason. */
static int gpo__start(const struct gpo_call *c, int forced)
{
	static char err[GM_ERR_MAX];
	int64_t t0 = gpo_pol_mono();
	int rc = gpo_olease_take(t0, err, sizeof err);

	if (rc == GPO_OL_BROKEN) {
		gpo_pol_say(8, "cannot take a gpumutex lease (%s); the GPU is not used%s", err, "");
		gpo_pol_set(&gpo_pol.dead, GPO_R_NO_LEASE);
		return GPO_R_NO_LEASE;
	}
	if (rc == GPO_OL_REFUSED)
		gpo_pol_event(GPO_TK_LEASE_REFUSED, 0, 1);
	if (rc != GPO_OL_HELD)
		return GPO_R_NO_LEASE;
	rc = gpo__share_before_start(c, forced);
	if (rc) {
		/* Not now: the lease goes back (the next try is another
		 * start's worth of savings away, and a lease's back-off). */
		gpo_olease_release(gpo_pol_mono());
		return rc;
	}
	rc = gpo_gpu_start();
	if (rc) {
		/* The backend's own line is on stderr already. */
		gpo_olease_release(gpo_pol_mono());
		gpo_pol_set(&gpo_pol.dead,
			    rc > 0 && rc < GPO_R_MAX ? rc : GPO_R_NO_BACKEND);
		return gpo_pol.dead;
	}
	gpo_pol_set(&gpo_pol.started, 1);
	gpo_pol.startup_s += (gpo_pol_mono() - t0) / 1e9;
	gpo_pol.pinned = gpo_olease_pinned();
	if (!gpo_pol.pinned && gpo_olease_managed()) {
		gpo__watch_start();
		if (!gpo_pol.watching) {
			gpo__give_back(gpo_pol_mono());
			gpo_pol_set(&gpo_pol.dead, GPO_R_NO_LEASE);
			return GPO_R_NO_LEASE;
		}
	}
	gpo_pol_event(GPO_TK_GPU_START, (gpo_pol_mono() - t0) / 1e9, 1);
	if (gpo_pol.pinned)
		gpo_pol_event(GPO_TK_GPU_KEPT, 0, 1);
	return 0;
}

/*
 * Under gpo_pol_lock: room on the device for `c` beyond the level's reserve?
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
	int64_t now = gpo_pol_mono();

	reserve = gpo_level_get(gpo_pol.level)->reserve;
	if (gpo_pol.mem_at && now >= gpo_pol.mem_at &&
	    now - gpo_pol.mem_at < gpo_pol.mem_ns) {
		room = (double)gpo_pol.mem_free - reserve * (double)gpo_pol.mem_total;
		if (need <= room / 2)
			return 1;
	}
	if (gpo_gpu_memory(&gpo_pol.mem_free, &gpo_pol.mem_total) != 0) {
		gpo_pol.mem_at = 0;
		return 1; /* unknown: the allocation's failure still falls back */
	}
	gpo_pol.mem_at = now;
	return (double)gpo_pol.mem_free >= need + reserve * (double)gpo_pol.mem_total;
}

/*
 * Under gpo_pol_lock: the GPU half of a decision the model made without
 * the lock (verdict v, GPO_V_GPU or GPO_V_START, seen with the GPU
 * `started` or not). The state may have moved meanwhile: another thread
 * started the GPU (then it is used), the watcher gave it back or a
 * waiter came (then this call stays on the CPU: the next decides
 * afresh), a start failed for good. Returns the verdict.
 */
static enum gpo_verdict gpo__gpu_half(const struct gpo_call *c,
				      enum gpo_verdict v,
				      struct gpo_decision *d)
{
	int r = 0;

	if (gpo_pol.dead)
		r = gpo_pol.dead;
	else if (gpo_pol.draining ||
		 (v == GPO_V_GPU && !gpo_pol.started))
		r = GPO_R_NO_LEASE;
	else if (v == GPO_V_START && gpo_pol.started)
		v = GPO_V_GPU;
	if (!r && v == GPO_V_GPU)
		r = gpo__busy_now();
	if (!r && v == GPO_V_START) {
		r = gpo__start(c, 0);
		/* Savings count again from zero: the next try is another
		 * start's worth away (and no sooner than the lease's
		 * back-off). */
		if (r)
			gpo_model_reset_savings(&gpo_pol.model);
	}
	if (!r && !gpo__memory_ok(c))
		r = GPO_R_NO_MEMORY;
	if (r) {
		d->reason = (uint16_t)r;
		return GPO_V_CPU;
	}
	return v;
}

/*
 * The shared path is lock-free: a call the model keeps on the CPU (and
 * a forced-CPU one, or one after the GPU was found unusable) reads the
 * policy's settings, fixed once `inited` is seen, and its state words
 * (started, dead, draining: atomic), and asks the model, which is safe
 * without a lock (model.h). Only a call on its way to the GPU takes
 * gpo_pol_lock: starting the GPU, the lease, NVML, free memory and the
 * in-flight count are the lock's.
 */
int gpo_policy_decide(const struct gpo_call *c, struct gpo_decision *d)
{
	int saved = errno;
	const char *name = gpo_op_name(c->op);
	int dead;

	if (!__atomic_load_n(&gpo_pol.inited, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&gpo_pol_lock);
		if (!gpo_pol.inited)
			gpo_pol_init();
		pthread_mutex_unlock(&gpo_pol_lock);
	}
	memset(d, 0, sizeof *d);
	d->device = GPO_CPU;
	dead = gpo_pol_get(&gpo_pol.dead);
	if (gpo_pol.force == GPO_POL_FORCE_CPU) {
		gpo_model_predict(&gpo_pol.model, c, name, 0, &d->t_cpu, &d->t_gpu);
		d->reason = GPO_R_FORCED_CPU;
	} else if (dead) {
		gpo_model_predict(&gpo_pol.model, c, name, 0, &d->t_cpu, &d->t_gpu);
		d->reason = (uint16_t)dead;
	} else if (gpo_pol.force == GPO_POL_FORCE_GPU) {
		int r = 0;
		gpo_model_predict(&gpo_pol.model, c, name, 0, &d->t_cpu, &d->t_gpu);
		gpo_count_flush();      /* a fold point (count.h) */
		pthread_mutex_lock(&gpo_pol_lock);
		if (gpo_pol.dead)
			r = gpo_pol.dead;
		else if (gpo_pol.draining)
			r = GPO_R_NO_LEASE;
		else if (!gpo_pol.started)
			r = gpo__start(c, 1);
		if (r == 0 && !gpo__memory_ok(c))
			r = GPO_R_NO_MEMORY;
		d->reason = (uint16_t)(r ? r : GPO_R_FORCED_GPU);
		d->device = r ? GPO_CPU : GPO_GPU;
		if (d->device == GPO_GPU)
			gpo_pol.inflight++;
		pthread_mutex_unlock(&gpo_pol_lock);
	} else if (!gpo_pol.have_prof) {
		/* Nothing to decide by: said as such (not model-cpu), so
		 * that the summary tells why nothing was offloaded. */
		d->reason = GPO_R_NO_PROFILE;
	} else {
		enum gpo_verdict v = gpo_model_decide(
			&gpo_pol.model, c, name,
			gpo_pol_get(&gpo_pol.started), d);
		if (v != GPO_V_CPU && gpo_pol_get(&gpo_pol.draining)) {
			v = GPO_V_CPU;
			d->reason = GPO_R_NO_LEASE;
		}
		if (v != GPO_V_CPU) {
			gpo_count_flush();      /* a fold point (count.h) */
			pthread_mutex_lock(&gpo_pol_lock);
			v = gpo__gpu_half(c, v, d);
			if (v != GPO_V_CPU)
				gpo_pol.inflight++;
			pthread_mutex_unlock(&gpo_pol_lock);
		}
		d->device = v == GPO_V_CPU ? GPO_CPU : GPO_GPU;
	}
	if (gpo_trace_on())
		gpo_trace_before(c);
	errno = saved;
	return d->device;
}
