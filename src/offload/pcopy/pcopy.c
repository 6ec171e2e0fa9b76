/*
 * pcopy.c - the CPU copy engine (pcopy.h): strided ?copy calls split
 * over worker threads by element index, each worker always the same
 * slice.
 *
 * One job at a time: the job lock is taken with a compare-and-swap, and a
 * thread that finds it taken copies by itself (gpo_pcopy returns 0): no
 * caller ever waits behind another thread's copy. The caller publishes
 * the job (E.job, then E.gen + 1), copies slice 0 itself, and waits for
 * each worker's slice to be marked finished (its own cache line, so that
 * finishing is one store each and no counter every thread writes).
 * Workers spin for GPO_PCOPY_SPIN_NS after
 * a job, watching E.gen, then sleep on it (futex): an idle process burns
 * no CPU, and consecutive calls of one linearization (tens of
 * microseconds apart) find the workers awake.
 *
 * Workers are created at the first qualifying call, with every signal
 * blocked (the host's signals are not for them), on small stacks; they
 * live as long as the process. fork: the child has none of them; the
 * atfork child handler forgets them (and a job lock some other thread
 * held), so the child creates its own at its first qualifying call.
 *
 * A gather's fresh destination is prepared by ahead.c (huge pages, and
 * populate jobs run here: gpo_pcopy_populate) before its copy job.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "frontend.h"
#include "lease.h"
#include "ahead.h"
#include "pcopy.h"

/* (The pthread functions' old symbol versions: compat.h.) */
#if defined(__x86_64__)
#define gpo__pause() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define gpo__pause() __asm__ __volatile__("yield" ::: "memory")
#else
#define gpo__pause() __asm__ __volatile__("" ::: "memory")
#endif

/* Slices start at multiples of this many elements, so that two threads
 * share no cache line of a contiguous side aligned to 64 bytes. */
#define GPO__SLICE_ALIGN 16

/* A copy job, or (esz 0) a populate job: n huge-page regions from x,
 * chunk regions per slice (gpo__populate). */
struct gpo__job {
	const char *x;          /* element 0 of x (the far end for incx < 0) */
	char *y;
	ptrdiff_t sx, sy;       /* byte steps from element i to i + 1 */
	int64_t n;
	int64_t chunk;          /* elements per slice (slice k: k*chunk...) */
	unsigned esz;
};

static struct {
	/* configuration: 0 unread, 1 being read, 2 read */
	int cfg;
	int threads;            /* wanted, the caller included; 0: off */
	int threads_gpu;        /* wanted while the GPU computes */
	int huge;               /* advise huge pages for fresh destinations */
	int gpu;                /* gpo_pcopy_gpu: the pid whose GPU started */
	int atfork;             /* the child handler is registered */
	/* workers: under the job lock */
	int workers;            /* running (0 until the first job) */
	int tried;              /* the most threads attempted (this process) */
	uint32_t start[GPO_PCOPY_MAX_THREADS];  /* worker k's first job number
	                                         * seen: E.gen when it was
	                                         * created, written before its
	                                         * pthread_create */
	int busy;               /* the job lock */
	struct gpo__job job;
	/* the hand-off, each on its own cache line */
	_Alignas(64) uint32_t gen;      /* job number; the workers' futex */
	_Alignas(64) int sleepers;      /* workers in (or entering) futex wait */
	/* slice k's claim: the job number it was last taken for, by worker
	 * k or (when that worker is late: preempted, asleep) the caller; and
	 * the job number it was last finished for, by whoever took it */
	struct {
		_Alignas(64) uint32_t job;
		uint32_t fin;
	} claim[GPO_PCOPY_MAX_THREADS];
} E;

int64_t gpo_pcopy_min_n = GPO_PCOPY_MIN_N;
int gpo_pcopy_cpus;

void gpo_pcopy_gpu(int on)
{
	/* The process whose GPU started: a fork child (which stays on the
	 * CPU) must not take the GPU's count, also when no copy ran before
	 * the fork (the atfork handler is registered at the first one). */
	__atomic_store_n(&E.gpu, on ? (int)getpid() : 0, __ATOMIC_RELAXED);
}

static int64_t gpo__ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- The copy of one slice ------------------------------------------------ */

/* Element sizes as types: a copy through integers moves the bytes
 * exactly (NaN payloads included); memcpy of a constant size is one move
 * and tolerates elements that are not aligned to their size. */
#define GPO__COPY(name, sz)                                                  \
	static void name(const char *x, ptrdiff_t sx, char *y, ptrdiff_t sy, \
			 int64_t cnt)                                        \
	{                                                                    \
		for (int64_t i = 0; i < cnt; i++) {                          \
			memcpy(y, x, sz);                                    \
			x += sx;                                             \
			y += sy;                                             \
		}                                                            \
	}
GPO__COPY(gpo__copy4, 4)
GPO__COPY(gpo__copy8, 8)
GPO__COPY(gpo__copy16, 16)

/* Regions [a, b) of a populate job: faulted in, writable, as a first
 * write would fault them, without writing (MADV_POPULATE_WRITE). An
 * error (the mapping changed under the job: a protection, a hole) ends
 * this slice; the copy that follows faults what is left, as before. */
static void gpo__populate(const struct gpo__job *j, int64_t a, int64_t b)
{
	for (int64_t i = a; i < b; i++)
		if (madvise((void *)(j->x + i * (int64_t)GPO_AHEAD_REGION), GPO_AHEAD_REGION,
			    MADV_POPULATE_WRITE) != 0)
			return;
}

static void gpo__slice(const struct gpo__job *j, int k)
{
	int64_t a = (int64_t)k * j->chunk, b = a + j->chunk;
	const char *x;
	char *y;

	if (b > j->n)
		b = j->n;
	if (a >= b)
		return;
	if (j->esz == 0) {
		gpo__populate(j, a, b);
		return;
	}
	x = j->x + a * j->sx;
	y = j->y + a * j->sy;
	switch (j->esz) {
	case 4: gpo__copy4(x, j->sx, y, j->sy, b - a); break;
	case 8: gpo__copy8(x, j->sx, y, j->sy, b - a); break;
	default: gpo__copy16(x, j->sx, y, j->sy, b - a); break;
	}
}

/* ---- Workers ----------------------------------------------------------------- */

static long gpo__futex(uint32_t *w, int op, uint32_t val)
{
	return syscall(SYS_futex, w, op, val, NULL, NULL, 0);
}

/* Wait for a job after `seen`: spin, then sleep. Returns the new E.gen. */
static uint32_t gpo__wait_job(uint32_t seen)
{
	int64_t until = gpo__ns() + GPO_PCOPY_SPIN_NS;
	uint32_t g;

	for (unsigned i = 1;; i++) {
		g = __atomic_load_n(&E.gen, __ATOMIC_ACQUIRE);
		if (g != seen)
			return g;
		gpo__pause();
		if ((i & 255) == 0 && gpo__ns() >= until)
			break;
	}
	/* Sleep. The caller stores E.gen and then reads E.sleepers; this
	 * thread counts itself in E.sleepers and then reads E.gen (both
	 * sequentially consistent): one of the two sees the other, and the
	 * futex wait returns at once when E.gen moved meanwhile. */
	__atomic_fetch_add(&E.sleepers, 1, __ATOMIC_SEQ_CST);
	while ((g = __atomic_load_n(&E.gen, __ATOMIC_SEQ_CST)) == seen)
		gpo__futex(&E.gen, FUTEX_WAIT_PRIVATE, seen);
	__atomic_fetch_sub(&E.sleepers, 1, __ATOMIC_RELAXED);
	return g;
}

/* Take slice k of job g unless someone took it (for g or a later job:
 * job numbers compared modulo 2^32). Whoever takes it copies it and
 * marks it finished; E.job is job g's until every slice is. */
static int gpo__claim(int k, uint32_t g)
{
	uint32_t c = __atomic_load_n(&E.claim[k].job, __ATOMIC_RELAXED);

	return (int32_t)(c - g) < 0 &&
	       __atomic_compare_exchange_n(&E.claim[k].job, &c, g, 0,
					   __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

static void *gpo__worker(void *arg)
{
	int k = (int)(intptr_t)arg;
	uint32_t seen = E.start[k];

	/* A name in ps/top -H (and what the engine's unit test counts). */
	prctl(PR_SET_NAME, "gpo-copy", 0, 0, 0);

	for (;;) {
		seen = gpo__wait_job(seen);
		if (!gpo__claim(k, seen))
			continue;       /* the caller did it: this thread was late */
		gpo__slice(&E.job, k);
		__atomic_store_n(&E.claim[k].fin, seen, __ATOMIC_RELEASE);
	}
	return NULL;
}

/* The child of a fork has none of the parent's workers, and no other
 * thread holds the job lock there. */
static void gpo__atfork_child(void)
{
	E.workers = 0;
	E.tried = 0;
	E.gpu = 0;              /* a fork child stays on the CPU */
	E.busy = 0;
	E.sleepers = 0;
	gpo_ahead_forget();     /* the parent's run is not the child's */
	if (E.cfg == 1)
		E.cfg = 0;
}

/* Under the job lock: workers until there are want - 1 (the caller is
 * the want-th); each count is attempted once per process (a failed
 * pthread_create is not retried: the caller copies with what exists). */
static void gpo__grow(int want)
{
	pthread_attr_t at;
	pthread_t th;
	sigset_t all, old;
	uint32_t gen0;

	if (want <= E.tried)
		return;
	E.tried = want;
	if (!E.atfork) {
		/* Registered here, not at load time; once (the handler is
		 * inherited by children and their children). */
		pthread_atfork(NULL, NULL, gpo__atfork_child);
		E.atfork = 1;
	}
	/* No job runs (the job lock): a new worker starts at the current
	 * job number, its slice claimed for it (so that it waits for the
	 * next job). */
	gen0 = __atomic_load_n(&E.gen, __ATOMIC_RELAXED);
	for (int k = E.workers + 1; k < GPO_PCOPY_MAX_THREADS; k++)
		E.claim[k].job = gen0;
	if (pthread_attr_init(&at) != 0)
		return;
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 64 * 1024);
	/* The host's signals are not for these threads: they inherit a mask
	 * with every signal blocked. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	while (E.workers + 1 < want) {
		E.start[E.workers + 1] = gen0;
		if (pthread_create(&th, &at, gpo__worker,
				   (void *)(intptr_t)(E.workers + 1)) != 0)
			break;
		E.workers++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&at);
}

/* Under the job lock, E.job filled: job over t slices (the caller's
 * thread the first), returning when every slice is done. */
static void gpo__run(int t)
{
	uint32_t g = 0;

	if (t > 1) {
		/* Workers beyond t (more exist than this job wants: the GPU
		 * was given back) find their slice of the job taken. */
		g = __atomic_load_n(&E.gen, __ATOMIC_RELAXED) + 1;
		for (int k = t; k <= E.workers; k++)
			__atomic_store_n(&E.claim[k].job, g, __ATOMIC_RELAXED);
		g = __atomic_add_fetch(&E.gen, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&E.sleepers, __ATOMIC_SEQ_CST))
			gpo__futex(&E.gen, FUTEX_WAKE_PRIVATE, INT_MAX);
	}
	gpo__slice(&E.job, 0);
	/* A worker that has not taken its slice by now is late (a spinning
	 * one takes it within a fraction of a microsecond; this slice took
	 * longer): do it here rather than wait for it to run. */
	for (int k = 1; k < t; k++)
		if (gpo__claim(k, g)) {
			gpo__slice(&E.job, k);
			__atomic_store_n(&E.claim[k].fin, g, __ATOMIC_RELAXED);
		}
	for (int k = 1; k < t; k++)
		for (unsigned i = 1; __atomic_load_n(&E.claim[k].fin, __ATOMIC_ACQUIRE) != g; i++) {
			/* A worker preempted (more threads than free CPUs): give
			 * it the CPU now and then rather than spin through its
			 * slice. */
			if ((i & 1023) == 0)
				sched_yield();
			else
				gpo__pause();
		}
}

void gpo_pcopy_populate(uintptr_t from, int64_t n, int t)
{
	E.job.x = (const char *)from;
	E.job.n = n;
	E.job.chunk = (n + t - 1) / t;
	E.job.esz = 0;
	gpo__run(t);
}

/* ---- Configuration ------------------------------------------------------------- */

static int gpo__cpus(void)
{
	cpu_set_t set;
	int n;

	if (sched_getaffinity(0, sizeof set, &set) != 0)
		return 1;
	n = CPU_COUNT(&set);
	return n > 0 ? n : 1;
}

static void gpo__config(void)
{
	const char *s;
	uint64_t v;
	int expect = 0, t, tg, c;

	if (__atomic_load_n(&E.cfg, __ATOMIC_ACQUIRE) == 2)
		return;
	if (!__atomic_compare_exchange_n(&E.cfg, &expect, 1, 0,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return;         /* another thread reads it: off meanwhile */
	c = gpo_pcopy_cpus > 0 ? gpo_pcopy_cpus : gpo__cpus();
	t = c < GPO_PCOPY_DEFAULT_THREADS ? c : GPO_PCOPY_DEFAULT_THREADS;
	tg = c < GPO_PCOPY_GPU_THREADS ? c : GPO_PCOPY_GPU_THREADS;
	s = getenv("GPU_OFFLOAD_COPY_THREADS");
	if (s && *s) {
		if (gm_parse_uint(s, 10, GPO_PCOPY_MAX_THREADS, &v) == 0)
			t = tg = (int)v;
		else
			gpo_msg_once(GPO_MSG_COPY, "GPU_OFFLOAD_COPY_THREADS=%s is not a number from 0 to %d; using %d",
				     s, GPO_PCOPY_MAX_THREADS, t);
	}
	E.threads = t;
	E.threads_gpu = t ? tg : 0;
	s = getenv("GPU_OFFLOAD_COPY_HUGEPAGE");
	E.huge = !(s && s[0] == '0' && !s[1]);
	__atomic_store_n(&E.cfg, 2, __ATOMIC_RELEASE);
}

int gpo_pcopy_threads(void)
{
	int e = errno;

	gpo__config();
	errno = e;
	return __atomic_load_n(&E.cfg, __ATOMIC_ACQUIRE) == 2 ? E.threads : 0;
}

/* ---- The call ------------------------------------------------------------------- */

/* The first byte and one past the last of a vector of n elements with
 * increment inc at p (BLAS semantics); -1 when that does not fit the
 * address space. Sets *first to element 0's address. */
static int gpo__span(const void *p, int64_t n, int64_t inc, unsigned esz,
		     uintptr_t *lo, uintptr_t *hi, const char **first)
{
	uint64_t mag = inc < 0 ? (uint64_t)0 - (uint64_t)inc : (uint64_t)inc;
	uint64_t far, bytes;

	if (mag > (uint64_t)INT64_MAX / 16 ||
	    __builtin_mul_overflow((uint64_t)(n - 1), mag * esz, &far) ||
	    __builtin_add_overflow(far, (uint64_t)esz, &bytes) ||
	    bytes > (uint64_t)PTRDIFF_MAX ||
	    (uintptr_t)p > UINTPTR_MAX - bytes)
		return -1;
	*lo = (uintptr_t)p;
	*hi = (uintptr_t)p + bytes;
	*first = (const char *)p + (inc < 0 ? far : 0);
	return 0;
}

/* |inc| * esz, for an inc that passed gpo__span. */
static uint64_t gpo__stride(int64_t inc, unsigned esz)
{
	return (inc < 0 ? (uint64_t)0 - (uint64_t)inc : (uint64_t)inc) * esz;
}

int gpo_pcopy(int64_t n, const void *x, int64_t incx, void *y, int64_t incy,
	      unsigned esz)
{
	uintptr_t xlo, xhi, ylo, yhi;
	const char *x0, *y0;
	int e, t, want, gpu, expect = 0;
	int64_t chunk;

	if (n < gpo_pcopy_min_n || incx == 0 || incy == 0 || !x || !y ||
	    (esz != 4 && esz != 8 && esz != 16))
		return 0;
	if (gpo__span(x, n, incx, esz, &xlo, &xhi, &x0) ||
	    gpo__span(y, n, incy, esz, &ylo, &yhi, &y0))
		return 0;
	/* One side strided by a page or more: the TLB case (else the CPU
	 * library's loop is as good). Overlapping ranges stay with the CPU
	 * library, whose sequential order a caller may rely on. */
	if (gpo__stride(incx, esz) < GPO_PCOPY_MIN_STRIDE &&
	    gpo__stride(incy, esz) < GPO_PCOPY_MIN_STRIDE)
		return 0;
	if (xlo < yhi && ylo < xhi)
		return 0;
	e = errno;
	gpo__config();
	if (__atomic_load_n(&E.cfg, __ATOMIC_ACQUIRE) != 2 || E.threads == 0 ||
	    !__atomic_compare_exchange_n(&E.busy, &expect, 1, 0,
					 __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
		errno = e;
		return 0;
	}
	gpu = __atomic_load_n(&E.gpu, __ATOMIC_RELAXED);
	if (gpu && E.threads_gpu > E.tried && gpu != (int)getpid()) {
		/* A fork child of a process whose GPU started before its first
		 * copy (no atfork handler then, which resets the flag in every
		 * later child): it stays on the CPU. Asked only before workers
		 * would be created, so getpid stays off the per-call path. */
		__atomic_store_n(&E.gpu, 0, __ATOMIC_RELAXED);
		gpu = 0;
	}
	want = gpu ? E.threads_gpu : E.threads;
	if (want > 1)
		gpo__grow(want);
	t = E.workers + 1 < want ? E.workers + 1 : want;
	if (E.huge && (incy == 1 || incy == -1))
		gpo_ahead(ylo, yhi, t);
	chunk = (n + t - 1) / t;
	chunk = (chunk + GPO__SLICE_ALIGN - 1) / GPO__SLICE_ALIGN * GPO__SLICE_ALIGN;
	E.job.x = x0;
	E.job.y = (char *)y0;
	E.job.sx = (ptrdiff_t)incx * (ptrdiff_t)esz;
	E.job.sy = (ptrdiff_t)incy * (ptrdiff_t)esz;
	E.job.n = n;
	E.job.chunk = chunk;
	E.job.esz = esz;
	gpo__run(t);
	__atomic_store_n(&E.busy, 0, __ATOMIC_RELEASE);
	errno = e;
	return 1;
}
