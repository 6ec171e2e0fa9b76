/*
 * pausecheck MODE N - the offloader's pause switch (gpu_offload_pause,
 * src/offload/pause.c), found by dlsym (RTLD_DEFAULT) as a program would
 * find it; its CPU library is libpauselib.so, which counts the calls that
 * reached it (pl_calls). test_offload_pause.py runs it under the library
 * with the test backend, every call forced to the "GPU" (its journal
 * says which calls ran there) and checks the summary's counts.
 *
 *   seq N      paused from the start (before any BLAS call: the full
 *              path), N dgemm_, N ddot_ and N dgetrs_ (2 nested dgemm_
 *              each); resumed, N dgemm_; paused again (the light path),
 *              the same 3N calls; resumed, N dgemm_. One line per phase:
 *              the calls that reached the CPU library in it.
 *   threads N  one dgemm_, then 4 threads calling dgemm_ while a fifth
 *              flips the switch N times; every result checked; "calls K"
 *              in all.
 *   fork N     paused, then a fork: the child (paused too) makes N
 *              dgemm_ calls and exits; the parent resumes and makes N.
 *
 * Every dgemm_ is 8x8 of small integers (exact on any device) and
 * checked. Prints "ok" last when every check held, "bad" otherwise.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { PL_DGEMM, PL_DDOT, PL_DGETRS, PL_N };
extern long pl_calls[PL_N];

void dgemm_(const char *, const char *, const int *, const int *, const int *,
	    const double *, const double *, const int *, const double *,
	    const int *, const double *, double *, const int *, size_t, size_t);
double ddot_(const int *, const double *, const int *, const double *,
	     const int *);
void dgetrs_(const char *, const int *, const int *, const double *,
	     const int *, const int *, double *, const int *, int *, size_t);

#define N8 8
static int bad;
static int (*sw)(int);
static double A[N8 * N8], B[N8 * N8], C_want[N8 * N8];

static void fail(const char *what)
{
	__atomic_store_n(&bad, 1, __ATOMIC_RELAXED);
	fprintf(stderr, "pausecheck: %s\n", what);
}

static void gemm_once(void)
{
	double c[N8 * N8], one = 1, zero = 0;
	int n = N8;

	memset(c, 0, sizeof c);
	dgemm_("N", "N", &n, &n, &n, &one, A, &n, B, &n, &zero, c, &n, 1, 1);
	if (memcmp(c, C_want, sizeof c))
		fail("dgemm_: wrong result");
}

static void paused_calls(long k)
{
	double x[N8], b[N8 * N8], want[N8 * N8], t[N8 * N8];
	int n = N8, one = 1, info = 7, ipiv[N8];

	for (int i = 0; i < N8; i++)
		x[i] = i + 1;
	/* want = A A B, by hand */
	for (int r = 0; r < 2; r++)
		for (int j = 0; j < N8; j++)
			for (int i = 0; i < N8; i++) {
				double s = 0;
				for (int l = 0; l < N8; l++)
					s += A[i + l * N8] *
					     (r ? t[l + j * N8] : B[l + j * N8]);
				(r ? want : t)[i + j * N8] = s;
			}
	for (long i = 0; i < k; i++) {
		gemm_once();
		if (ddot_(&n, x, &one, x, &one) != 204)
			fail("ddot_: wrong result");
		memcpy(b, B, sizeof b);
		dgetrs_("N", &n, &n, A, &n, ipiv, b, &n, &info, 1);
		if (info != 0 || memcmp(b, want, sizeof b))
			fail("dgetrs_: wrong result");
	}
}

static void phase(const char *name, long before[PL_N])
{
	printf("%s dgemm %ld ddot %ld dgetrs %ld\n", name,
	       pl_calls[PL_DGEMM] - before[PL_DGEMM],
	       pl_calls[PL_DDOT] - before[PL_DDOT],
	       pl_calls[PL_DGETRS] - before[PL_DGETRS]);
	memcpy(before, pl_calls, sizeof pl_calls);
}

static void expect_was(int got, int want, const char *what)
{
	if (got != want)
		fail(what);
}

static void mode_seq(long k)
{
	long before[PL_N] = { 0 };

	expect_was(sw(-1), 0, "not paused at the start");
	expect_was(sw(1), 0, "pause: was not paused");
	expect_was(sw(-1), 1, "query: paused");
	expect_was(sw(1), 1, "pause again: was paused");
	paused_calls(k);
	phase("paused-first", before);
	expect_was(sw(0), 1, "resume: was paused");
	for (long i = 0; i < k; i++)
		gemm_once();
	phase("resumed", before);
	expect_was(sw(1), 0, "pause: was resumed");
	paused_calls(k);
	phase("paused-again", before);
	expect_was(sw(0), 1, "resume: was paused");
	expect_was(sw(0), 0, "resume again: was resumed");
	for (long i = 0; i < k; i++)
		gemm_once();
	phase("resumed-again", before);
}

static long flips_left, calls;

static void *caller(void *arg)
{
	(void)arg;
	/* At least a few calls each, then until the flips are done. */
	for (long i = 0; i < 50 || __atomic_load_n(&flips_left, __ATOMIC_ACQUIRE) > 0; i++) {
		gemm_once();
		__atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void *flipper(void *arg)
{
	(void)arg;
	while (__atomic_load_n(&flips_left, __ATOMIC_ACQUIRE) > 0) {
		sw(__atomic_load_n(&flips_left, __ATOMIC_RELAXED) & 1);
		__atomic_fetch_sub(&flips_left, 1, __ATOMIC_RELEASE);
		sched_yield();
	}
	return NULL;
}

static void mode_threads(long k)
{
	pthread_t th[5];

	/* One call first, alone: the configuration is read then (calls made
	 * while another thread reads it see the default threshold). */
	gemm_once();
	calls = 1;
	flips_left = k;
	for (int i = 0; i < 5; i++)
		if (pthread_create(&th[i], NULL, i < 4 ? caller : flipper, NULL))
			fail("pthread_create");
	for (int i = 0; i < 5; i++)
		pthread_join(th[i], NULL);
	sw(0);
	printf("calls %ld\n", calls);
}

static void mode_fork(long k)
{
	pid_t pid;
	int st;

	gemm_once();                    /* the GPU started in the parent */
	sw(1);
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		fail("fork");
		return;
	}
	if (pid == 0) {
		long before = pl_calls[PL_DGEMM];
		if (sw(-1) != 1)
			fail("child: not paused");
		for (long i = 0; i < k; i++)
			gemm_once();
		printf("child dgemm %ld\n", pl_calls[PL_DGEMM] - before);
		exit(bad ? 1 : 0);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		fail("child failed");
	sw(0);
	for (long i = 0; i < k; i++)
		gemm_once();
	printf("parent dgemm %ld\n", pl_calls[PL_DGEMM]);
}

int main(int argc, char **argv)
{
	long k = argc > 2 ? atol(argv[2]) : 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 3)
		return 2;
	sw = (int (*)(int))dlsym(RTLD_DEFAULT, "gpu_offload_pause");
	if (!sw) {
		printf("no switch\n");
		return 3;
	}
	for (int i = 0; i < N8 * N8; i++) {
		A[i] = (double)(i % 5) - 2;
		B[i] = (double)(i % 3);
	}
	for (int j = 0; j < N8; j++)
		for (int i = 0; i < N8; i++) {
			double s = 0;
			for (int l = 0; l < N8; l++)
				s += A[i + l * N8] * B[l + j * N8];
			C_want[i + j * N8] = s;
		}
	if (!strcmp(argv[1], "seq"))
		mode_seq(k);
	else if (!strcmp(argv[1], "threads"))
		mode_threads(k);
	else if (!strcmp(argv[1], "fork"))
		mode_fork(k);
	else
		return 2;
	printf("%s\n", bad ? "bad" : "ok");
	return bad;
}
