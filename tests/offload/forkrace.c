/*
 * forkrace - one thread makes 100x100 dgemm_ calls (through
 * dlsym(RTLD_DEFAULT): the wrapper under LD_PRELOAD; forced to the GPU,
 * each decided under the policy's lock, which then takes the GPU
 * boundary's lock to read the free memory) while the main thread forks
 * FORKS times (each child exits at once). The fork handlers must take
 * the two locks in the same order as the calls do (the policy's first),
 * or a fork and a call deadlock: the program then never ends (the test
 * runs it under a time limit). Prints "forkrace ok N" at the end.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 100
#define FORKS 2000

typedef void gemm_t(const char *, const char *, const int *, const int *,
		    const int *, const double *, const double *, const int *,
		    const double *, const int *, const double *, double *,
		    const int *, size_t, size_t);

static gemm_t *gemm;
static double a[N * N], b[N * N], c[N * N];
static volatile int stop;
static long calls;

static void *caller(void *arg)
{
	int n = N;
	double one = 1, zero = 0;

	(void)arg;
	while (!stop) {
		gemm("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n, 1, 1);
		calls++;
	}
	return NULL;
}

int main(void)
{
	pthread_t th;
	int st;

	gemm = (gemm_t *)dlsym(RTLD_DEFAULT, "dgemm_");
	if (!gemm)
		return 2;
	for (int i = 0; i < N * N; i++) {
		a[i] = i % 7;
		b[i] = i % 5;
	}
	if (pthread_create(&th, NULL, caller, NULL) != 0)
		return 2;
	for (int i = 0; i < FORKS; i++) {
		pid_t pid = fork();
		if (pid == 0)
			_exit(0);
		if (pid < 0 || waitpid(pid, &st, 0) != pid)
			return 3;
	}
	stop = 1;
	pthread_join(th, NULL);
	printf("forkrace ok %d\n", FORKS);
	return calls > 0 ? 0 : 4;
}
