/*
 * gputime.c - the GPU-time collector (gputime.h; docs/preload.md, "GPU
 * time"; the record: docs/report.md).
 *
 * CUPTI's activity API hands over kernel and memory-copy records in
 * buffers (bufferCompleted, on CUPTI's thread or the one that flushes).
 * Each interval goes into two tallies: one per device (GPU-busy time,
 * comparable with the lease's GPU time) and one for the process (busy
 * while any of its GPUs is, and the longest stretch with none busy). A
 * tally keeps a sorted window of disjoint intervals, so that records of
 * different streams arriving out of order still merge exactly; when the
 * window is full its older half is folded into the totals.
 *
 * The subscription is held for the whole process: CUPTI allows one
 * subscriber, and holding it is how a second one (a profiler that starts
 * first) shows. A profiler that comes later calls one of the CUPTI entry
 * points hooks.c interposes, and this collector steps aside before the
 * profiler's call goes on: its kinds disabled, its records flushed and
 * written, its subscription dropped. It never comes back in that
 * process.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "activity.h"
#include "cuptiapi.h"
#include "gate.h"
#include "gputime.h"
#include "gtload.h"
#include "lease.h"

/* Intervals kept per tally before the older half is folded: records
 * arrive per buffer in about the order the work finished, so a window of
 * thousands of intervals absorbs the disorder between streams. 64 KiB a
 * tally, allocated only with the option on. */
#define GT_IV 4096
#define GT_DEVS 16       /* device tallies (CUDA ordinals, modulo) */
#define GT_PERIOD_NS (60 * (uint64_t)1000000000) /* interim records */
#define GT_BUF (1u << 20)

struct iv {
	uint64_t s, e;
};

struct tally {
	struct iv iv[GT_IV];
	int n;
	uint64_t done;      /* busy ns folded out of iv */
	uint64_t fold_to;   /* end of the folded part (0: none) */
	uint64_t idle_max;  /* longest gap within the folded part */
	int used;
};

enum { GT_OFF, GT_IDLE, GT_ON, GT_GONE };

static int gt_want;               /* configured */
static int gt_state;              /* GT_*; GT_GONE is final */
static int gt_loaded;
static struct gmp_cupti gt_api;
static void *gt_sub;
/* gt_mu: the lease's numbers and tallies, also taken by buf_completed
 * (CUPTI's thread, or the one that flushes). gt_ctl: one control
 * sequence at a time (start, flush, end, step aside). CUPTI is never
 * called with gt_mu held, so that a CUPTI that delivers buffers while
 * it is called cannot deadlock against us. */
static pthread_mutex_t gt_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t gt_ctl = PTHREAD_MUTEX_INITIALIZER;
static int gt_said;
/* The lease being measured (under gt_mu). */
static struct {
	int pending, active;
	uint64_t lease;
	char devs[GM_MAX_DEVICES * 4];
	char dir[4096], job[GM_JOB_MAX + 1];
	uint64_t t0, last_emit, last_seen;
	uint64_t kernel, copy;
	int64_t last_flush_ms;
} L;
/* The lease granted last, until its collection starts (under gt_mu). */
static struct {
	uint64_t lease;
	char devs[GM_MAX_DEVICES * 4];
	char dir[4096], job[GM_JOB_MAX + 1];
} P;
static struct tally *gt_any, *gt_dev; /* [1], [GT_DEVS] */
static int gt_exit_armed;
/* The program called one of the hooked CUPTI entry points (a profiler
 * uses CUPTI): set at any time, also before the option is read. */
static int gt_foreign;
/* Set on a thread while this collector calls CUPTI: a CUPTI that calls
 * its own exported functions through our hooks is not a profiler. */
static __attribute__((tls_model("initial-exec"))) _Thread_local int gt_self;

/* The collector's one line per process. */
#define say_once(...)                                                     \
	do {                                                              \
		if (!__atomic_exchange_n(&gt_said, 1, __ATOMIC_ACQ_REL))  \
			gmp_say(__VA_ARGS__);                             \
	} while (0)

int gmp_gt_configure(int file_val, int enforce)
{
	const char *v = getenv("GPUMUTEX_GPU_TIME");

	gt_want = file_val > 0;
	if (v && !(enforce && file_val >= 0)) {
		if (strcmp(v, "1") && strcmp(v, "0")) {
			gmp_say("GPUMUTEX_GPU_TIME=\"%s\" is not 1 (measure GPU time) or 0; cuInit fails (CUDA_ERROR_INVALID_VALUE) so that no GPU is used outside the queue",
				v);
			return -1;
		}
		gt_want = v[0] == '1';
	}
	if (gt_want && gt_state == GT_OFF)
		gt_state = GT_IDLE;
	return 0;
}

/* ---- Tallies ------------------------------------------------------------------ */

static void fold(struct tally *t, int k)
{
	uint64_t prev = t->fold_to;

	for (int i = 0; i < k; i++) {
		if (t->iv[i].s > prev &&
		    t->iv[i].s - prev > t->idle_max)
			t->idle_max = t->iv[i].s - prev;
		t->done += t->iv[i].e - t->iv[i].s;
		prev = t->iv[i].e;
	}
	t->fold_to = prev;
	memmove(t->iv, t->iv + k, sizeof(struct iv) * (size_t)(t->n - k));
	t->n -= k;
}

/* Add [s, e) to t (union). A part before the folded end counts as
 * covered already (records that late are not expected). */
static void add(struct tally *t, uint64_t s, uint64_t e)
{
	int lo = 0, hi, i, j;

	if (s < t->fold_to)
		s = t->fold_to;
	if (e <= s)
		return;
	t->used = 1;
	/* The first interval whose end is >= s. */
	hi = t->n;
	while (lo < hi) {
		int m = (lo + hi) / 2;

		if (t->iv[m].e < s)
			lo = m + 1;
		else
			hi = m;
	}
	i = lo;
	j = i;
	while (j < t->n && t->iv[j].s <= e) {
		if (t->iv[j].s < s)
			s = t->iv[j].s;
		if (t->iv[j].e > e)
			e = t->iv[j].e;
		j++;
	}
	if (j > i) { /* merged [i, j) into one */
		t->iv[i].s = s;
		t->iv[i].e = e;
		memmove(t->iv + i + 1, t->iv + j,
			sizeof(struct iv) * (size_t)(t->n - j));
		t->n -= j - i - 1;
		return;
	}
	if (t->n == GT_IV) {
		fold(t, GT_IV / 2);
		add(t, s, e);
		return;
	}
	memmove(t->iv + i + 1, t->iv + i, sizeof(struct iv) * (size_t)(t->n - i));
	t->iv[i].s = s;
	t->iv[i].e = e;
	t->n++;
}

/* Busy ns and longest idle stretch of t within [t0, end). */
static void sum(const struct tally *t, uint64_t t0, uint64_t end,
		uint64_t *busy, uint64_t *idle_max)
{
	uint64_t b = t->done, m = t->idle_max;
	uint64_t prev = t->fold_to > t0 ? t->fold_to : t0;

	for (int i = 0; i < t->n; i++) {
		if (t->iv[i].s > prev && t->iv[i].s - prev > m)
			m = t->iv[i].s - prev;
		b += t->iv[i].e - t->iv[i].s;
		prev = t->iv[i].e;
	}
	if (end > prev && end - prev > m)
		m = end - prev;
	*busy = b;
	*idle_max = m;
}

static void tallies_reset(uint64_t t0)
{
	memset(gt_any, 0, sizeof *gt_any);
	memset(gt_dev, 0, sizeof *gt_dev * GT_DEVS);
	/* The first gap runs from the grant: start the folded part there. */
	gt_any->fold_to = t0;
	for (int d = 0; d < GT_DEVS; d++)
		gt_dev[d].fold_to = t0;
}

/* ---- Records -------------------------------------------------------------- */

/* Write the record for the lease so far, under gt_mu. */
static void emit(uint64_t end, int final, const char *why)
{
	static char f[640], err[GM_ERR_MAX];
	uint64_t busy, idle, gbusy = 0, b, m;

	if (end < L.t0)
		end = L.t0;
	sum(gt_any, L.t0, end, &busy, &idle);
	for (int d = 0; d < GT_DEVS; d++)
		if (gt_dev[d].used) {
			sum(&gt_dev[d], L.t0, end, &b, &m);
			gbusy += b;
		}
	snprintf(f, sizeof f,
		 "lease=%016llx dev=%s held=%llu busy=%llu gpubusy=%llu kernel=%llu copy=%llu idlemax=%llu final=%d why=%s",
		 (unsigned long long)L.lease, L.devs,
		 (unsigned long long)(end - L.t0), (unsigned long long)busy,
		 (unsigned long long)gbusy, (unsigned long long)L.kernel,
		 (unsigned long long)L.copy, (unsigned long long)idle, final,
		 why);
	(void)gm_event_append_job(L.dir, "gputime", L.job, f, err, sizeof err);
	L.last_emit = end;
}

static uint64_t rd64(const uint8_t *p, int off)
{
	uint64_t v;

	memcpy(&v, p + off, sizeof v);
	return v;
}

static uint32_t rd32(const uint8_t *p, int off)
{
	uint32_t v;

	memcpy(&v, p + off, sizeof v);
	return v;
}

static void buf_requested(uint8_t **buffer, size_t *size, size_t *max)
{
	/* CUPTI wants 8-byte alignment. */
	void *p = NULL;

	if (posix_memalign(&p, 8, GT_BUF))
		p = NULL;
	*buffer = p;
	*size = p ? GT_BUF : 0;
	*max = 0;
}

static void buf_completed(void *ctx, uint32_t stream, uint8_t *buffer,
			  size_t size, size_t valid)
{
	int saved = errno;
	void *rec = NULL;

	(void)ctx;
	(void)stream;
	(void)size;
	pthread_mutex_lock(&gt_mu);
	while (L.active && buffer &&
	       gt_api.next_record(buffer, valid, &rec) == GMP_CUPTI_SUCCESS &&
	       rec) {
		const uint8_t *r = rec;
		uint32_t kind = rd32(r, 0), dev;
		uint64_t s = rd64(r, GMP_CUPTI_OFF_START),
			 e = rd64(r, GMP_CUPTI_OFF_END);

		if (kind == GMP_CUPTI_KIND_KERNEL ||
		    kind == GMP_CUPTI_KIND_CONCURRENT_KERNEL)
			dev = rd32(r, GMP_CUPTI_OFF_KERNEL_DEV);
		else if (kind == GMP_CUPTI_KIND_MEMCPY)
			dev = rd32(r, GMP_CUPTI_OFF_COPY_DEV);
		else
			continue;
		if (e <= s || e <= L.t0)
			continue;
		if (s < L.t0)
			s = L.t0;
		if (kind == GMP_CUPTI_KIND_MEMCPY)
			L.copy += e - s;
		else
			L.kernel += e - s;
		add(gt_any, s, e);
		add(&gt_dev[dev % GT_DEVS], s, e);
		if (e > L.last_seen)
			L.last_seen = e;
		/* Long leases: a record for every minute of GPU time seen. */
		if (L.last_seen >= L.last_emit + GT_PERIOD_NS)
			emit(L.last_seen, 0, "minute");
	}
	pthread_mutex_unlock(&gt_mu);
	free(buffer);
	errno = saved;
}

/* ---- Starting and stopping -------------------------------------------------- */

static void no_callback(void *u, int domain, unsigned cbid, const void *d)
{
	(void)u;
	(void)domain;
	(void)cbid;
	(void)d;
}

static void at_exit(void)
{
	gmp_gt_end("exit", 1);
}

/* Drop the subscription and everything enabled (under gt_ctl). */
static void stop_cupti(void)
{
	if (!gt_sub)
		return;
	gt_api.disable(GMP_CUPTI_KIND_CONCURRENT_KERNEL);
	gt_api.disable(GMP_CUPTI_KIND_MEMCPY);
	gt_api.unsubscribe(gt_sub);
	gt_sub = NULL;
}

/* Begin (under gt_ctl): load, check for a profiler, subscribe, enable.
 * 0, or -1 after the one line (GT_GONE). */
static int begin(void)
{
	static char why[1024];
	const char *inj = getenv("CUDA_INJECTION64_PATH");
	int rc;

	if (!gt_loaded) {
		if (__atomic_load_n(&gt_foreign, __ATOMIC_ACQUIRE)) {
			/* A profiler that uses only the activity API holds no
			 * subscription, but registering our callbacks would
			 * take its records. */
			say_once("a profiler uses CUPTI in this process; GPU time (GPUMUTEX_GPU_TIME=1) is not measured, so that the profiler works as without gpumutex");
			return -1;
		}
		if (inj && inj[0]) {
			say_once("a profiler is injected into this process (CUDA_INJECTION64_PATH=%s); GPU time (GPUMUTEX_GPU_TIME=1) is not measured, so that the profiler works as without gpumutex",
				 inj);
			return -1;
		}
		if (gmp_gt_load(&gt_api, why, sizeof why)) {
			say_once("GPU time (GPUMUTEX_GPU_TIME=1) is not measured in this process: %s; everything else works as without the option",
				 why);
			return -1;
		}
		gt_any = calloc(1, sizeof *gt_any);
		gt_dev = calloc(GT_DEVS, sizeof *gt_dev);
		if (!gt_any || !gt_dev) {
			say_once("GPU time (GPUMUTEX_GPU_TIME=1) is not measured in this process: out of memory");
			return -1;
		}
		gt_loaded = 1;
		rc = gt_api.subscribe(&gt_sub, no_callback, NULL);
		if (rc == GMP_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS) {
			gt_sub = NULL;
			say_once("another CUPTI client (a profiler) is subscribed in this process; GPU time (GPUMUTEX_GPU_TIME=1) is not measured, so that the profiler works as without gpumutex");
			return -1;
		}
		if (rc != GMP_CUPTI_SUCCESS ||
		    (rc = gt_api.register_cbs(buf_requested, buf_completed)) !=
			    GMP_CUPTI_SUCCESS) {
			stop_cupti();
			snprintf(why, sizeof why, "CUPTI failed to initialise (CUPTI error %d)",
				 rc);
			say_once("GPU time (GPUMUTEX_GPU_TIME=1) is not measured in this process: %s; everything else works as without the option",
				 why);
			return -1;
		}
	}
	if ((rc = gt_api.enable(GMP_CUPTI_KIND_CONCURRENT_KERNEL)) ||
	    (rc = gt_api.enable(GMP_CUPTI_KIND_MEMCPY))) {
		stop_cupti();
		snprintf(why, sizeof why, "CUPTI would not record kernels and copies (CUPTI error %d)",
			 rc);
		say_once("GPU time (GPUMUTEX_GPU_TIME=1) is not measured in this process: %s; everything else works as without the option",
			 why);
		return -1;
	}
	return 0;
}

void gmp_gt_granted(const struct gm_config *cfg, const struct gm_lease *l)
{
	if (__atomic_load_n(&gt_state, __ATOMIC_ACQUIRE) == GT_OFF ||
	    __atomic_load_n(&gt_state, __ATOMIC_ACQUIRE) == GT_GONE)
		return;
	/* Into P, not L: the previous lease's final record may not be
	 * written yet (its end runs outside the gate's lock). */
	pthread_mutex_lock(&gt_mu);
	L.pending = 1;
	P.lease = l->lease_id;
	gm_format_list(P.devs, sizeof P.devs, l->devices, l->ndevices);
	snprintf(P.dir, sizeof P.dir, "%s", cfg->lock_dir);
	snprintf(P.job, sizeof P.job, "%s", cfg->job);
	pthread_mutex_unlock(&gt_mu);
}

void gmp_gt_run_pending(void)
{
	int saved = errno, rc, go;
	uint64_t t0 = 0;

	/* gt_self: CUPTI, while it starts, may call the driver (cuInit)
	 * through our hooks on this thread, which holds gt_ctl. */
	if (gt_self || __atomic_load_n(&gt_state, __ATOMIC_ACQUIRE) != GT_IDLE)
		return;
	pthread_mutex_lock(&gt_ctl);
	pthread_mutex_lock(&gt_mu);
	go = L.pending && gt_state == GT_IDLE;
	L.pending = 0;
	pthread_mutex_unlock(&gt_mu);
	if (!go) {
		pthread_mutex_unlock(&gt_ctl);
		errno = saved;
		return;
	}
	gt_self = 1;
	rc = begin();
	gt_self = 0;
	if (rc)
		stop_cupti();
	else
		gt_api.timestamp(&t0);
	pthread_mutex_lock(&gt_mu);
	if (rc) {
		__atomic_store_n(&gt_state, GT_GONE, __ATOMIC_RELEASE);
	} else {
		L.lease = P.lease;
		memcpy(L.devs, P.devs, sizeof L.devs);
		memcpy(L.dir, P.dir, sizeof L.dir);
		memcpy(L.job, P.job, sizeof L.job);
		L.t0 = L.last_emit = L.last_seen = t0;
		L.kernel = L.copy = 0;
		L.last_flush_ms = gmp_mono_ms();
		tallies_reset(t0);
		L.active = 1;
		__atomic_store_n(&gt_state, GT_ON, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&gt_mu);
	if (!rc && !gt_exit_armed) {
		gt_exit_armed = 1;
		atexit(at_exit);
	}
	pthread_mutex_unlock(&gt_ctl);
	errno = saved;
}

void gmp_gt_flush(void)
{
	int saved = errno;

	if (__atomic_load_n(&gt_state, __ATOMIC_ACQUIRE) != GT_ON)
		return;
	pthread_mutex_lock(&gt_ctl);
	if (__atomic_load_n(&gt_state, __ATOMIC_ACQUIRE) == GT_ON)
		gt_api.flush_all(GMP_CUPTI_FLUSH_FORCED);
	pthread_mutex_unlock(&gt_ctl);
	errno = saved;
}

void gmp_gt_tick(void)
{
	int64_t now;

	if (__atomic_load_n(&gt_state, __ATOMIC_ACQUIRE) != GT_ON)
		return;
	now = gmp_mono_ms();
	if (now - __atomic_load_n(&L.last_flush_ms, __ATOMIC_RELAXED) < 60000)
		return;
	__atomic_store_n(&L.last_flush_ms, now, __ATOMIC_RELAXED);
	pthread_mutex_lock(&gt_ctl);
	if (__atomic_load_n(&gt_state, __ATOMIC_ACQUIRE) == GT_ON)
		gt_api.flush_all(0);
	pthread_mutex_unlock(&gt_ctl);
}

/* The final record and the end of counting (under gt_mu). */
static void finish(const char *why, uint64_t end)
{
	if (!L.active)
		return;
	emit(end, 1, why);
	L.active = 0;
}

void gmp_gt_end(const char *why, int cupti)
{
	int saved = errno;
	uint64_t end = 0;

	if (__atomic_load_n(&gt_state, __ATOMIC_ACQUIRE) != GT_ON)
		return;
	pthread_mutex_lock(&gt_ctl);
	if (__atomic_load_n(&gt_state, __ATOMIC_ACQUIRE) == GT_ON) {
		if (cupti) {
			/* Delivered to buf_completed, which takes gt_mu. */
			gt_api.flush_all(GMP_CUPTI_FLUSH_FORCED);
			gt_api.timestamp(&end);
		}
		pthread_mutex_lock(&gt_mu);
		finish(why, cupti ? end : L.last_seen);
		/* The subscription stays: the next grant enables again. */
		__atomic_store_n(&gt_state, GT_IDLE, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&gt_mu);
		if (cupti) {
			gt_api.disable(GMP_CUPTI_KIND_CONCURRENT_KERNEL);
			gt_api.disable(GMP_CUPTI_KIND_MEMCPY);
		}
	}
	pthread_mutex_unlock(&gt_ctl);
	/* A next lease granted before this end was written (the end runs
	 * after the release) found the collector busy: start it now. */
	if (cupti && __atomic_load_n(&L.pending, __ATOMIC_ACQUIRE))
		gmp_gt_run_pending();
	errno = saved;
}

void gmp_gt_step_aside(const char *call)
{
	int saved = errno, st;
	uint64_t end = 0;

	if (gt_self)
		return;
	__atomic_store_n(&gt_foreign, 1, __ATOMIC_RELEASE);
	st = __atomic_load_n(&gt_state, __ATOMIC_ACQUIRE);
	if (st == GT_OFF || st == GT_GONE)
		return;
	pthread_mutex_lock(&gt_ctl);
	st = __atomic_load_n(&gt_state, __ATOMIC_ACQUIRE);
	if (st == GT_ON) {
		gt_api.flush_all(GMP_CUPTI_FLUSH_FORCED);
		gt_api.timestamp(&end);
		pthread_mutex_lock(&gt_mu);
		finish("profiler", end);
		pthread_mutex_unlock(&gt_mu);
	}
	if (st != GT_GONE) {
		if (gt_loaded)
			stop_cupti();
		__atomic_store_n(&gt_state, GT_GONE, __ATOMIC_RELEASE);
		say_once("a profiler started using CUPTI in this process (%s); GPU time (GPUMUTEX_GPU_TIME=1) is no longer measured here, so that the profiler works as without gpumutex",
			 call);
	}
	pthread_mutex_unlock(&gt_ctl);
	errno = saved;
}

void *gmp_gt_real(const char *name, const void *caller, int *global)
{
	return gmp_gt_find_real(name, caller, global);
}

void gmp_gt_atfork_child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	memcpy(&gt_mu, &fresh, sizeof fresh);
	memcpy(&gt_ctl, &fresh, sizeof fresh);
	/* CUPTI's subscription and buffers are the parent's. */
	if (gt_state != GT_OFF)
		gt_state = GT_GONE;
	L.active = 0;
	L.pending = 0;
}
