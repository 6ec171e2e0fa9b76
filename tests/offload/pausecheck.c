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
 *   config 0   a call made while another thread reads the frontend's
 *              configuration: thread R makes the process's first call
 *              (a 128x128 dgemm_) with stderr a full pipe, so that it
 *              stays in the configuration's read, in write(2) of the
 *              message an invalid GPU_OFFLOAD_MIN_FLOPS gets; then the
 *              main thread makes the same call; a third thread drains
 *              the pipe once the main thread waits (a futex) or is done.
 *              Before that call, while R is still in the read, a fork:
 *              the child (stderr restored) makes the call too. Every
 *              call must see the configuration (the test sets
 *              GPU_OFFLOAD_VERIFY=1: each verified).
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
#include <fcntl.h>
#include <sys/syscall.h>
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

	/* One call first, alone: the GPU started before the flips. */
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

#define N128 128
static double A128[N128 * N128], B128[N128 * N128], C128[N128 * N128];
static int cfg_pipe[2];
static long cfg_tid_r, cfg_tid_main;
static int cfg_r_started, cfg_main_done;

static void gemm128(void)
{
	double c[N128 * N128], one = 1, zero = 0;
	int n = N128;

	dgemm_("N", "N", &n, &n, &n, &one, A128, &n, B128, &n, &zero, c, &n,
	       1, 1);
	if (memcmp(c, C128, sizeof c))
		fail("dgemm_ 128: wrong result");
}

/* The system call thread `tid` of this process is blocked in, -1 when
 * running, -2 when the kernel has no such file (open/read: no stdio, whose malloc could make the thread watched wait
 * on a lock of ours). */
static long cfg_syscall(long tid)
{
	char path[64], buf[64];
	long nr = -1;
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/self/task/%ld/syscall", tid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -2;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n > 0 && buf[0] >= '0' && buf[0] <= '9') {
		nr = 0;
		for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; i++)
			nr = nr * 10 + (buf[i] - '0');
	}
	return nr;
}

static void *cfg_reader(void *arg)
{
	(void)arg;
	__atomic_store_n(&cfg_tid_r, (long)syscall(SYS_gettid), __ATOMIC_RELEASE);
	__atomic_store_n(&cfg_r_started, 1, __ATOMIC_RELEASE);
	gemm128();
	return NULL;
}

static void *cfg_drainer(void *arg)
{
	char buf[4096];

	(void)arg;
	while (!__atomic_load_n(&cfg_main_done, __ATOMIC_ACQUIRE) &&
	       cfg_syscall(cfg_tid_main) != SYS_futex)
		sched_yield();
	while (read(cfg_pipe[0], buf, sizeof buf) > 0)
		;
	return NULL;
}

static void mode_config(void)
{
	pthread_t r, d;
	int err = dup(2), st;
	pid_t pid;
	char fill[4096];

	memset(fill, 'x', sizeof fill);
	for (int i = 0; i < N128 * N128; i++) {
		A128[i] = (double)(i % 5) - 2;
		B128[i] = (double)(i % 3);
	}
	for (int j = 0; j < N128; j++)
		for (int i = 0; i < N128; i++) {
			double s = 0;
			for (int l = 0; l < N128; l++)
				s += A128[i + l * N128] * B128[l + j * N128];
			C128[i + j * N128] = s;
		}
	/* stderr: a pipe, full (its writes block until drained). */
	if (err < 0 || pipe(cfg_pipe) != 0) {
		fail("pipe");
		return;
	}
	fcntl(cfg_pipe[1], F_SETFL, O_NONBLOCK);
	while (write(cfg_pipe[1], fill, sizeof fill) > 0)
		;
	while (write(cfg_pipe[1], fill, 1) > 0)
		;
	fcntl(cfg_pipe[1], F_SETFL, 0);
	fcntl(cfg_pipe[0], F_SETFL, O_NONBLOCK);
	dup2(cfg_pipe[1], 2);
	cfg_tid_main = (long)syscall(SYS_gettid);
	if (cfg_syscall(cfg_tid_main) == -2) {
		/* no /proc/PID/task/TID/syscall here: nothing to watch */
		dup2(err, 2);
		printf("no syscall file\n");
		exit(4);
	}
	if (pthread_create(&r, NULL, cfg_reader, NULL)) {
		dup2(err, 2);
		fail("pthread_create");
		return;
	}
	/* R inside the configuration's read: blocked in its write(2). */
	while (!__atomic_load_n(&cfg_r_started, __ATOMIC_ACQUIRE) ||
	       cfg_syscall(__atomic_load_n(&cfg_tid_r, __ATOMIC_ACQUIRE)) != SYS_write)
		sched_yield();
	/* A fork meanwhile: the child (its stderr the real one again) reads
	 * the configuration itself, the reader being the parent's. */
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		dup2(err, 2);
		gemm128();
		exit(bad ? 1 : 0);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
	    WEXITSTATUS(st))
		fail("fork child failed");
	if (pthread_create(&d, NULL, cfg_drainer, NULL)) {
		dup2(err, 2);
		fail("pthread_create");
		return;
	}
	gemm128();
	__atomic_store_n(&cfg_main_done, 1, __ATOMIC_RELEASE);
	pthread_join(d, NULL);
	pthread_join(r, NULL);
	dup2(err, 2);
	close(err);
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
	else if (!strcmp(argv[1], "config"))
		mode_config();
	else
		return 2;
	printf("%s\n", bad ? "bad" : "ok");
	return bad;
}
