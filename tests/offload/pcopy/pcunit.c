/*
 * pcunit - the CPU copy engine (src/offload/pcopy/pcopy.c) linked into a
 * test program, built plain, with ASan/UBSan and with TSan
 * (src/offload/pcopy/module.mk): gpo_pcopy against a reference loop
 * (every element size, both signs on either side, sizes around the
 * slices' boundaries), several threads calling at once (one job at a
 * time: the others get 0 and copy by themselves), and fork children
 * (one of a process whose GPU started before its first copy).
 * Prints "pcunit: N checks, M failed"; exits 1 if any failed.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frontend.h"
#include "pcopy.h"
#include "copyref.h"

static int checks, failed;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
#define CHECK(c, ...) do { pthread_mutex_lock(&lock); checks++; \
	if (!(c)) { failed++; printf("FAIL %s:%d: ", __FILE__, __LINE__); \
	printf(__VA_ARGS__); printf("\n"); } pthread_mutex_unlock(&lock); } while (0)

/* One copy; returns what gpo_pcopy returned (the copy is then checked)
 * or, when it declined, does the reference copy itself. */
static int one(unsigned char *x, unsigned char *y, unsigned char *w,
	       int64_t n, int64_t incx, int64_t incy, unsigned esz)
{
	int64_t ys = copy_span(n, incy, esz);
	int rc;

	for (int64_t i = 0; i < copy_span(n, incx, esz); i += 13)
		x[i] = (unsigned char)(i * 31 + n);
	memset(y, 0x5a, (size_t)ys);
	memset(w, 0x5a, (size_t)ys);
	copy_ref(n, (const char *)x, incx, (char *)w, incy, esz);
	rc = gpo_pcopy(n, x, incx, y, incy, esz);
	if (!rc)
		copy_ref(n, (const char *)x, incx, (char *)y, incy, esz);
	CHECK(memcmp(y, w, (size_t)ys) == 0, "n=%lld incx=%lld incy=%lld esz=%u rc=%d",
	      (long long)n, (long long)incx, (long long)incy, esz, rc);
	return rc;
}

#define CAP ((size_t)2100 * 4200 + 64)

/* strict: no other thread copies meanwhile, so every qualifying call
 * must be taken. */
static void sweep(int strict, int *took, int *declined)
{
	static const int64_t ns[] = { 1023, 1024, 1025, 1039, 2047, 2085 };
	static const unsigned es[] = { 4, 8, 16 };
	unsigned char *x = malloc(CAP), *y = malloc(CAP), *w = malloc(CAP);

	if (!x || !y || !w)
		exit(2);
	for (unsigned e = 0; e < 3; e++)
		for (unsigned a = 0; a < sizeof ns / sizeof ns[0]; a++)
			for (int g = 0; g < 4; g++) {
				int64_t s = 4096 / es[e], sx = g & 1 ? -1 : 1, sy = g & 2 ? -1 : 1;
				int r1 = one(x, y, w, ns[a], sx * s, sy, es[e]);
				int r2 = one(x, y, w, ns[a], sx, sy * s, es[e]);
				int want = ns[a] >= gpo_pcopy_min_n && gpo_pcopy_threads() > 0;
				CHECK(!strict || (r1 == want && r2 == want), "n=%lld esz=%u: took %d %d",
				      (long long)ns[a], es[e], r1, r2);
				*took += r1 + r2;
			}
	/* overlapping ranges, small strides: declined */
	CHECK(gpo_pcopy(1500, x, 512, x + 8, 1, 8) == 0, "overlap taken");
	CHECK(gpo_pcopy(1500, x, 3, y, 1, 8) == 0, "small stride taken");
	CHECK(gpo_pcopy(1500, x, 0, y, 1, 8) == 0, "increment 0 taken");
	*declined += 3;
	free(x);
	free(y);
	free(w);
}

/* The TSan build: fewer rounds, and no fork (TSan does not support
 * threads started in the child of a multi-threaded process). */
#ifndef PCUNIT_REPS
#define PCUNIT_REPS 3
#endif

static void *thr(void *arg)
{
	int took = 0, declined = 0;

	(void)arg;
	for (int r = 0; r < PCUNIT_REPS; r++)
		sweep(0, &took, &declined);
	return NULL;
}

/* The engine's workers in this process (named gpo-copy). */
static int tasks(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		char path[300], comm[32] = "";
		FILE *f;
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		if ((f = fopen(path, "r"))) {
			if (!fgets(comm, sizeof comm, f))
				comm[0] = 0;
			fclose(f);
		}
		n += strncmp(comm, "gpo-copy", 8) == 0;
	}
	closedir(d);
	return n;
}

int main(void)
{
	pthread_t th[4];
	int took = 0, declined = 0, st;
	pid_t pid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	/* the sizes here are around 1024: the engine's paths are the same */
	gpo_pcopy_min_n = 1024;
	/* As if on a machine of 32 CPUs: the defaults are then 8 threads,
	 * and 16 while the GPU has started (GPO_PCOPY_GPU_THREADS). */
	gpo_pcopy_cpus = 32;
	printf("pcunit: engine threads %d\n", gpo_pcopy_threads());
#ifndef PCUNIT_NO_FORK
	/* The GPU started before the first qualifying copy, then a fork:
	 * the child stays on the CPU (its CPU library computes between the
	 * copies), so its engine takes the CPU count. */
	if (!getenv("GPU_OFFLOAD_COPY_THREADS")) {
		gpo_pcopy_gpu(1);
		pid = fork();
		if (pid == 0) {
			int t = 0, d = 0;
			sweep(1, &t, &d);
			CHECK(tasks() == GPO_PCOPY_DEFAULT_THREADS - 1, "child of a "
			      "process whose GPU started: %d workers, want %d",
			      tasks(), GPO_PCOPY_DEFAULT_THREADS - 1);
			_exit(failed ? 1 : 0);
		}
		CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
		      WEXITSTATUS(st) == 0, "fork child (GPU started) failed");
		gpo_pcopy_gpu(0);
	}
#endif
	sweep(1, &took, &declined);
	CHECK(took > 0 || gpo_pcopy_threads() == 0, "nothing taken");
	if (!getenv("GPU_OFFLOAD_COPY_THREADS")) {
		CHECK(tasks() == GPO_PCOPY_DEFAULT_THREADS - 1, "%d workers, "
		      "want %d", tasks(), GPO_PCOPY_DEFAULT_THREADS - 1);
		gpo_pcopy_gpu(1);
		sweep(1, &took, &declined);
		CHECK(tasks() == GPO_PCOPY_GPU_THREADS - 1, "GPU started: %d "
		      "workers, want %d", tasks(), GPO_PCOPY_GPU_THREADS - 1);
		/* given back: the workers beyond 8 stay, idle; every byte
		 * still right (their slices are not theirs any more) */
		gpo_pcopy_gpu(0);
		sweep(1, &took, &declined);
		CHECK(tasks() == GPO_PCOPY_GPU_THREADS - 1, "GPU stopped: %d "
		      "workers", tasks());
	}
	for (int i = 0; i < 4; i++)
		if (pthread_create(&th[i], NULL, thr, NULL))
			return 2;
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
#ifndef PCUNIT_NO_FORK
	pid = fork();
	if (pid == 0) {
		int t = 0, d = 0;
		sweep(1, &t, &d);
		_exit(failed ? 1 : 0);
	}
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
	      WEXITSTATUS(st) == 0, "fork child failed");
#else
	(void)pid;
	(void)st;
#endif
	printf("pcunit: %d checks, %d failed\n", checks, failed);
	return failed ? 1 : 0;
}
