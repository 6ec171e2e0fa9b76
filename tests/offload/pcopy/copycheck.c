/*
 * copycheck MODE - ?copy calls through whatever dlsym(RTLD_DEFAULT) finds
 * (the offloader's wrappers under LD_PRELOAD, else libfcopy.so), each
 * checked byte for byte against a reference loop, including the bytes
 * around the destination that must stay. libfcopy.so counts the calls
 * that reached the CPU library (fcopy_calls), so the output says which
 * calls the copy engine took. Modes:
 *
 *   exact    every precision, integer width, name scheme and interface;
 *            sizes around the engine's threshold; positive and negative
 *            increments on either side; calls that must not qualify
 *            (small n, small strides, increment 0, n <= 0, overlap)
 *   threads  8 threads copying at once
 *   fork     copies in a child and in a child of the child, after the
 *            parent's engine started (thread counts in each)
 *   errno    errno across the engine's first and later calls
 *   tasks    threads in the process before and after calls that do not
 *            qualify, and after one that does
 *   idle     the workers: every signal blocked, asleep once idle
 *   paused   exact with the offloader paused (gpu_offload_pause, by
 *            dlsym: "switch 0" when no loaded object has it), then the
 *            threads in the process, then resumed: one big copy more and
 *            whether the CPU library did it
 *
 * Prints "key value" lines; exits 0 unless it could not run (2).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../ntasks.h"
#include "copyref.h"

extern long fcopy_calls;

static int checks, failed;
#define CHECK(c, ...) do { checks++; if (!(c)) { failed++; \
	if (failed < 20) { printf("FAIL %s:%d: ", __FILE__, __LINE__); \
	printf(__VA_ARGS__); printf("\n"); } } } while (0)

/* ---- The functions -------------------------------------------------------- */

enum { F32, F64, C32, C64 };
struct fn {
	char name[32];
	int kind;
	size_t esz;
	void *p;
};
static struct fn fns[24];
static int nfns;

typedef void f32_t(const int *, const void *, const int *, void *, const int *);
typedef void f64_t(const int64_t *, const void *, const int64_t *, void *,
		   const int64_t *);
typedef void c32_t(int, const void *, int, void *, int);
typedef void c64_t(int64_t, const void *, int64_t, void *, int64_t);

static void setup(void)
{
	static const char *const pre[] = { "s", "d", "c", "z" };
	static const size_t esz[] = { 4, 8, 8, 16 };
	static const struct { const char *fmt; int kind; } sch[] = {
		{ "%scopy_", F32 }, { "scipy_%scopy_", F32 },
		{ "scipy_%scopy_64_", F64 }, { "cblas_%scopy", C32 },
		{ "scipy_cblas_%scopy", C32 }, { "scipy_cblas_%scopy64_", C64 },
	};

	for (int p = 0; p < 4; p++)
		for (int s = 0; s < 6; s++) {
			struct fn *f = &fns[nfns++];
			snprintf(f->name, sizeof f->name, sch[s].fmt, pre[p]);
			f->kind = sch[s].kind;
			f->esz = esz[p];
			f->p = dlsym(RTLD_DEFAULT, f->name);
			if (!f->p) {
				printf("no %s\n", f->name);
				exit(2);
			}
		}
}

static void call(const struct fn *f, int64_t n, const void *x, int64_t incx,
		 void *y, int64_t incy)
{
	int n32 = (int)n, ix32 = (int)incx, iy32 = (int)incy;

	switch (f->kind) {
	case F32: ((f32_t *)f->p)(&n32, x, &ix32, y, &iy32); break;
	case F64: ((f64_t *)f->p)(&n, x, &incx, y, &incy); break;
	case C32: ((c32_t *)f->p)(n32, x, ix32, y, iy32); break;
	default: ((c64_t *)f->p)(n, x, incx, y, incy); break;
	}
}

static unsigned long long rng = 88172645463325252ull;
static unsigned char rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (unsigned char)(rng >> 24);
}

static unsigned char *xalloc(size_t bytes)
{
	unsigned char *p = malloc(bytes);

	if (!p) {
		printf("out of memory\n");
		exit(2);
	}
	return p;
}

/* ---- exact ------------------------------------------------------------------ */

#define MARGIN 256
static unsigned char *src, *dst, *want;
static size_t cap;
/* calls shaped for the engine / others, and how many reached libfcopy */
static long big_calls, big_cpu, other_calls, other_cpu;

/* One call of f on fresh random source bytes, destination filled with a
 * pattern; every byte of the destination's span and margins compared. */
static void one(const struct fn *f, int64_t n, int64_t incx, int64_t incy,
		int big)
{
	int64_t xs = copy_span(n, incx, f->esz), ys = copy_span(n, incy, f->esz);
	unsigned char *x = src + MARGIN, *y = dst + MARGIN, *w = want + MARGIN;
	long before;

	if ((size_t)xs + 2 * MARGIN > cap || (size_t)ys + 2 * MARGIN > cap) {
		printf("case too big\n");
		exit(2);
	}
	for (int64_t i = 0; i < xs; i += 61)
		x[i] = rnd();
	memset(dst, 0xa5, (size_t)ys + 2 * MARGIN);
	memset(want, 0xa5, (size_t)ys + 2 * MARGIN);
	if (n > 0)
		copy_ref(n, (const char *)x, incx, (char *)w, incy, f->esz);
	before = fcopy_calls;
	call(f, n, x, incx, y, incy);
	CHECK(memcmp(dst, want, (size_t)ys + 2 * MARGIN) == 0,
	      "%s n=%lld incx=%lld incy=%lld: wrong bytes", f->name,
	      (long long)n, (long long)incx, (long long)incy);
	if (big) {
		big_calls++;
		big_cpu += fcopy_calls - before;
	} else {
		other_calls++;
		other_cpu += fcopy_calls - before;
	}
}

/* Overlapping ranges: the source's elements a page apart, the
 * destination contiguous inside the source's span: only the CPU
 * library's index order defines the result. */
static void overlap(const struct fn *f, int64_t n, int64_t s)
{
	size_t bytes = (size_t)copy_span(n, s, f->esz) + 2 * MARGIN;
	unsigned char *a = xalloc(bytes), *b = xalloc(bytes);
	long before = fcopy_calls;

	for (size_t i = 0; i < bytes; i++)
		a[i] = b[i] = rnd();
	copy_ref(n, (const char *)b + MARGIN, s, (char *)b + MARGIN + f->esz * 3, 1, f->esz);
	call(f, n, a + MARGIN, s, a + MARGIN + f->esz * 3, 1);
	CHECK(memcmp(a, b, bytes) == 0, "%s overlap: wrong bytes", f->name);
	other_calls++;
	other_cpu += fcopy_calls - before;
	free(a);
	free(b);
}

static int mode_exact(void)
{
	static const int64_t ns[] = { 4096, 4099 };
	static const int sign[][2] = { { 1, 1 }, { -1, 1 }, { 1, -1 }, { -1, -1 } };

	/* the largest span: 4099 elements a page and 3 elements apart */
	cap = (size_t)4100 * (4096 + 48) + 4 * MARGIN;
	src = xalloc(cap);
	dst = xalloc(cap);
	want = xalloc(cap);
	memset(src, 0, cap);
	for (int i = 0; i < nfns; i++) {
		const struct fn *f = &fns[i];
		int64_t page = 4096 / (int64_t)f->esz;
		for (unsigned a = 0; a < sizeof ns / sizeof ns[0]; a++)
			for (unsigned g = 0; g < 4; g++) {
				int64_t n = ns[a], sx = sign[g][0], sy = sign[g][1];
				int64_t s = a == 1 ? page + 3 : page;
				one(f, n, sx * s, sy, 1);            /* gather */
				one(f, n, sx, sy * s, 1);            /* scatter */
				if (a == 0)                          /* both */
					one(f, n, sx * s, sy * (page + 1), 1);
			}
		/* not for the engine */
		one(f, 16, page, 1, 0);                      /* small n */
		one(f, 4095, -page, 1, 0);
		one(f, 4099, 1, 1, 0);                       /* contiguous */
		one(f, 4099, 7, -3, 0);                      /* small strides */
		one(f, 4099, page - 1, 1, 0);                /* under a page */
		one(f, 4099, 0, 1, 0);                       /* broadcast */
		one(f, 4099, page, 0, 0);
		one(f, 0, page, 1, 0);
		one(f, -5, page, 1, 0);
		overlap(f, 4096, page);
	}
	printf("exact checks %d failed %d\n", checks, failed);
	printf("engine-shaped calls %ld reached-cpu-library %ld\n", big_calls, big_cpu);
	printf("other calls %ld reached-cpu-library %ld\n", other_calls, other_cpu);
	return 0;
}

/* ---- A big copy on its own buffers (threads, fork, errno, tasks) ---------- */

#define BN 4096
#define BS 512          /* doubles: 4 KiB */

struct big {
	double *x, *y;
};

static void big_init(struct big *b)
{
	b->x = (double *)(void *)xalloc((size_t)BN * BS * sizeof(double));
	b->y = (double *)(void *)xalloc((size_t)BN * sizeof(double));
	for (size_t i = 0; i < (size_t)BN * BS; i++)
		b->x[i] = (double)(i * 7 + 1);
}

/* dcopy_ column `col` of the BN x BS row-major matrix; 1 if right. */
static int big_copy(const struct big *b, int col)
{
	const struct fn *f = &fns[6];   /* dcopy_ */

	memset(b->y, 0, (size_t)BN * sizeof(double));
	call(f, BN, b->x + col, BS, b->y, 1);
	for (int i = 0; i < BN; i++)
		if (b->y[i] != b->x[(size_t)i * BS + (size_t)col])
			return 0;
	return 1;
}

static void *thread_main(void *arg)
{
	struct big b;
	int bad = 0;

	(void)arg;
	big_init(&b);
	for (int r = 0; r < 100; r++)
		bad += !big_copy(&b, r % BS);
	free(b.x);
	free(b.y);
	return (void *)(intptr_t)bad;
}

static int mode_threads(void)
{
	pthread_t th[8];
	long bad = 0;

	for (int i = 0; i < 8; i++)
		if (pthread_create(&th[i], NULL, thread_main, NULL))
			return 2;
	for (int i = 0; i < 8; i++) {
		void *r;
		pthread_join(th[i], &r);
		bad += (intptr_t)r;
	}
	printf("threads copies 800 wrong %ld reached-cpu-library %ld\n", bad, fcopy_calls);
	return 0;
}

/* In a child (depth 1) and its child (depth 2): copies right, the
 * parent's threads absent, the child's own made. */
static int fork_level(struct big *b, int depth)
{
	int t0 = ntasks(), ok = 1, st;
	long before = fcopy_calls;
	pid_t pid;

	for (int r = 0; r < 20; r++)
		ok &= big_copy(b, r);
	printf("depth %d tasks-before %d tasks-after %d copies-right %d reached-cpu-library %ld\n",
	       depth, t0, ntasks(), ok, fcopy_calls - before);
	fflush(stdout);
	if (depth == 2)
		return 0;
	pid = fork();
	if (pid < 0)
		return 2;
	if (pid == 0)
		_exit(fork_level(b, depth + 1));
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		printf("child failed\n");
	return 0;
}

static int mode_fork(void)
{
	struct big b;

	big_init(&b);
	return fork_level(&b, 0);
}

static int mode_errno(void)
{
	struct big b;
	int kept = 1, ok = 1;

	big_init(&b);
	for (int r = 0; r < 10; r++) {
		errno = EILSEQ + r;
		ok &= big_copy(&b, r);
		kept &= errno == EILSEQ + r;
	}
	printf("errno kept %d copies-right %d reached-cpu-library %ld\n", kept, ok, fcopy_calls);
	return 0;
}

static int mode_tasks(void)
{
	struct big b;
	int t0 = ntasks(), t1, ok;
	double x[64], y[64 * 8];

	big_init(&b);
	for (int i = 0; i < 64; i++)
		x[i] = i;
	/* small n, contiguous, small stride: none qualifies */
	call(&fns[6], 64, x, 1, y, 8);
	call(&fns[6], 8, b.x, BS, y, 1);
	call(&fns[6], BN, b.x, 1, b.y, 1);
	t1 = ntasks();
	ok = big_copy(&b, 1);
	printf("tasks start %d after-others %d after-qualifying %d copies-right %d\n",
	       t0, t1, ntasks(), ok);
	return 0;
}

/* exact, paused: no call for the engine (every one reaches the CPU
 * library) and no worker started; resumed, the engine copies again. */
static int mode_paused(void)
{
	int (*sw)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "gpu_offload_pause");
	struct big b;
	long before;
	int t0 = ntasks(), ok;

	printf("switch %d was %d\n", sw != NULL, sw ? sw(1) : 0);
	mode_exact();
	printf("paused tasks start %d end %d\n", t0, ntasks());
	big_init(&b);
	before = fcopy_calls;
	ok = big_copy(&b, 1);
	if (sw)
		sw(0);
	printf("paused big copies-right %d reached-cpu-library %ld\n", ok,
	       fcopy_calls - before);
	before = fcopy_calls;
	ok = big_copy(&b, 1);
	printf("resumed big copies-right %d reached-cpu-library %ld tasks %d\n",
	       ok, fcopy_calls - before, ntasks());
	return 0;
}

/* /proc/self/task/TID/status: the thread's state letter and blocked set. */
static int task_status(const char *tid, char *state, unsigned long long *blk)
{
	char path[320], line[256];
	FILE *f;

	snprintf(path, sizeof path, "/proc/self/task/%s/status", tid);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof line, f)) {
		if (!strncmp(line, "State:", 6))
			sscanf(line + 6, " %c", state);
		else if (!strncmp(line, "SigBlk:", 7))
			sscanf(line + 7, "%llx", blk);
	}
	fclose(f);
	return 0;
}

static int mode_idle(void)
{
	struct big b;
	char self[16];
	int workers = 0, masked = 0, asleep = 0, ok;
	unsigned long long want_mask = 0;
	static const int sigs[] = { SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2,
				    SIGPIPE, SIGALRM, SIGTERM, SIGCHLD, SIGWINCH };
	struct timespec t0, now;

	for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		want_mask |= 1ull << (sigs[i] - 1);
	big_init(&b);
	ok = big_copy(&b, 0) & big_copy(&b, 1);
	snprintf(self, sizeof self, "%d", getpid());
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* Wait (bounded) until every worker sleeps: a worker spinning
	 * forever never gets there. */
	for (;;) {
		DIR *d = opendir("/proc/self/task");
		struct dirent *e;
		workers = masked = asleep = 0;
		while (d && (e = readdir(d))) {
			char st = '?';
			unsigned long long blk = 0;
			if (e->d_name[0] == '.' || !strcmp(e->d_name, self))
				continue;
			if (task_status(e->d_name, &st, &blk))
				continue;
			workers++;
			masked += (blk & want_mask) == want_mask;
			asleep += st == 'S';
		}
		if (d)
			closedir(d);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (!workers || asleep == workers || now.tv_sec - t0.tv_sec > 30)
			break;
		sched_yield();
	}
	printf("idle workers %d all-signals-blocked %d asleep %d copies-right %d\n",
	       workers, masked, asleep, ok);
	return 0;
}

int main(int argc, char **argv)
{
	const char *m = argc > 1 ? argv[1] : "";

	setvbuf(stdout, NULL, _IOLBF, 0);
	setup();
	if (!strcmp(m, "exact"))
		return mode_exact();
	if (!strcmp(m, "threads"))
		return mode_threads();
	if (!strcmp(m, "fork"))
		return mode_fork();
	if (!strcmp(m, "errno"))
		return mode_errno();
	if (!strcmp(m, "tasks"))
		return mode_tasks();
	if (!strcmp(m, "idle"))
		return mode_idle();
	if (!strcmp(m, "paused"))
		return mode_paused();
	fprintf(stderr, "usage: copycheck exact|threads|fork|errno|tasks|idle|paused\n");
	return 2;
}
