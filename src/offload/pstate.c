/*
 * pstate.c - the offload policy's state (pstate.h): its configuration,
 * read once at the first decision, the fork handlers that keep it right
 * in a child, the messages said once, and trace events. Apart from the
 * decisions (policy.c) and from what is done after a call (observe.c)
 * because both read and change this state and neither owns it; policy.h
 * says what the policy as a whole does, docs/offload.md describes it.
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
 *   GPU_OFFLOAD_RESIDENT=0     no residency (read by resid.c, at the
 *                              first GPU call; docs/offload-residency.md)
 *   GPU_OFFLOAD_RESIDENT_MIN   the smallest operand kept, in bytes
 *                              (default 4 MiB; resid.c)
 *   GPU_OFFLOAD_MEM_MS         the backend's free memory is read again
 *                              after this long (default 10; 0: every
 *                              call), or for a call that needs more than
 *                              half the room the last reading showed
 *
 * Locking: pstate.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "count.h"
#include "lease.h"
#include "olease.h"
#include "pstate.h"
#include "tracew.h"

pthread_mutex_t gpo_pol_lock = PTHREAD_MUTEX_INITIALIZER;
struct gpo_pol_state gpo_pol;

int64_t gpo_pol_mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One stderr line per kind of problem (bit `kind`) for the process. */
void gpo_pol_say(unsigned kind, const char *fmt, const char *a,
		 const char *b)
{
	if (gpo_pol.said & (1u << kind))
		return;
	gpo_pol.said |= 1u << kind;
	fprintf(stderr, "gpu-offload: ");
	fprintf(stderr, fmt, a, b);
	fputc('\n', stderr);
}

static int64_t gpo__env_ms(const char *name, uint64_t def)
{
	const char *v = getenv(name);
	uint64_t ms = def;

	if (v && *v && gm_parse_uint(v, 10, 3600000, &ms) != 0) {
		gpo_pol_say(1, "%s is not a number of milliseconds; using the default", name, "");
		ms = def;
	}
	return (int64_t)ms * 1000000;
}

static void gpo__prepare(void)
{
	pthread_mutex_lock(&gpo_pol_lock);
	gpo_trace_fork(0);
}

static void gpo__parent(void)
{
	gpo_trace_fork(1);
	pthread_mutex_unlock(&gpo_pol_lock);
}

/* A child of a process that started the GPU stays on the CPU (a CUDA
 * context does not survive fork) and drops its copies of the lease's
 * descriptors, which would keep the lease alive after the parent gives
 * it back. The watcher thread is not in the child. */
static void gpo__child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	memcpy(&gpo_pol_lock, &fresh, sizeof fresh);
	gpo_trace_fork(2);
	if (gpo_pol.started || gpo_olease_held()) {
		gpo_pol_set(&gpo_pol.dead, GPO_R_FORKED);
		gpo_pol_set(&gpo_pol.started, 0);
		gpo_olease_forget();
	}
	gpo_pol.watching = 0;
	gpo_pol.inflight = 0;
	gpo_pol_set(&gpo_pol.draining, 0);
	gpo_pol.on_gpu = 0;
	memset(gpo_count_total, 0, sizeof gpo_count_total);
	gpo_count_child();
	gpo_pol.gpu_s = gpo_pol.saved_s = gpo_pol.startup_s = 0;
}

void gpo_pol_init(void)
{
	const char *f = getenv("GPU_OFFLOAD_FORCE");
	const char *l = getenv("GPU_OFFLOAD_LEVEL");
	const char *t = getenv("GPU_OFFLOAD_TRACE");
	const char *s = getenv("GPU_OFFLOAD_SUMMARY");
	static char path[4096], err[512];

	gpo_pol.level = 5;
	if (f && strcmp(f, "cpu") == 0)
		gpo_pol.force = GPO_POL_FORCE_CPU;
	else if (f && strcmp(f, "gpu") == 0)
		gpo_pol.force = GPO_POL_FORCE_GPU;
	else if (f && *f)
		gpo_pol_say(2, "GPU_OFFLOAD_FORCE=%s is not cpu or gpu; ignored%s", f, "");
	/* Verify mode runs every GPU-capable call on both devices: the
	 * decision is the GPU's (the frontend runs the CPU as well). */
	s = getenv("GPU_OFFLOAD_VERIFY");
	if (gpo_pol.force == GPO_POL_FORCE_NONE && s && strcmp(s, "1") == 0)
		gpo_pol.force = GPO_POL_FORCE_GPU;
	if (l && *l) {
		uint64_t v;
		if (gm_parse_uint(l, 10, 10, &v) == 0 && v >= 1)
			gpo_pol.level = (int)v;
		else
			gpo_pol_say(3, "GPU_OFFLOAD_LEVEL=%s is not a level from 1 to 10; using 5%s", l, "");
	}
	gpo_pol.watch_ns = gpo__env_ms("GPU_OFFLOAD_WATCH_MS", 250);
	gpo_pol.yield_ns = gpo__env_ms("GPU_OFFLOAD_YIELD_MS", 1000);
	gpo_pol.idle_ns = gpo__env_ms("GPU_OFFLOAD_IDLE_MS", 1000);
	gpo_pol.mem_ns = gpo__env_ms("GPU_OFFLOAD_MEM_MS", 10);
	s = getenv("GPU_OFFLOAD_NVML");
	gpo_pol.nvml_off = s && strcmp(s, "0") == 0;
	if (gpo_pol.watch_ns <= 0)
		gpo_pol.watch_ns = 1000000;
	if ((s = getenv("GPU_OFFLOAD_PROFILE")) && strcmp(s, "none") == 0) {
		/* no profile on purpose (calibration's forced passes) */
	} else if (gpo_profile_path(path, sizeof path) == 0) {
		int rc = gpo_profile_load(path, &gpo_pol.prof, err, sizeof err);
		if (rc == 0) {
			gpo_pol.have_prof = 1;
			for (int i = 0; i < gpo_pol.prof.ncurves; i++)
				gpo_curve_prepare(&gpo_pol.prof.curves[i]);
		} else if (rc != -ENOENT || getenv("GPU_OFFLOAD_PROFILE"))
			gpo_pol_say(4, "machine profile %s; every call stays on the CPU%s", err, "");
	}
	gpo_model_init(&gpo_pol.model, gpo_pol.have_prof ? &gpo_pol.prof : NULL,
		       gpo_pol.level);
	if (t && *t) {
		int rc = gpo_trace_setup(t, gpo_pol.level);
		if (rc)
			gpo_pol_say(5, "cannot trace into %s: %s", t, strerror(-rc));
	}
	s = getenv("GPU_OFFLOAD_SUMMARY");
	if (s && strcmp(s, "1") == 0) {
		gpo_pol.summary = 1;
		atexit(gpo_pol_summary);
	}
	gpo_gpu_atfork();       /* first: see policy.h */
	pthread_atfork(gpo__prepare, gpo__parent, gpo__child);
	/* Last: observe's lock-free path reads the settings once it sees
	 * this; the frontend's light path opens once nothing is traced. */
	__atomic_store_n(&gpo_pol.inited, 1, __ATOMIC_RELEASE);
	if (!gpo_trace_on())
		gpo_fast_allow(GPO_FAST_POLICY);
}

/* Trace writing stopped for good: the light path may open. */
static void gpo__trace_stopped(void)
{
	if (!gpo_trace_on() && __atomic_load_n(&gpo_pol.inited, __ATOMIC_ACQUIRE))
		gpo_fast_allow(GPO_FAST_POLICY);
}

void gpo_pol_trace_failed(int rc, int locked)
{
	if (!locked)
		pthread_mutex_lock(&gpo_pol_lock);
	gpo_pol_say(6, "trace writing stopped: %s%s", strerror(-rc), "");
	if (!locked)
		pthread_mutex_unlock(&gpo_pol_lock);
	gpo__trace_stopped();
}

void gpo_pol_event(int kind, double seconds, int locked)
{
	int rc = gpo_trace_event(kind, seconds);

	if (rc)
		gpo_pol_trace_failed(rc, locked);
}
