/*
 * threadcheck - 4 threads, each 20 dgemm_ of 64x64 on its own data
 * (through dlsym(RTLD_DEFAULT): the wrapper under LD_PRELOAD), checked
 * against a naive product. Under the offloader the GPU calls are
 * serialised and each thread's results stay its own. Prints "ok" or the
 * first wrong thread.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>

#define N 64
#define T 4
#define R 20

typedef void gemm_t(const char *, const char *, const int *, const int *,
		    const int *, const double *, const double *, const int *,
		    const double *, const int *, const double *, double *,
		    const int *, size_t, size_t);
static gemm_t *gemm;
static int bad[T];

static void *work(void *arg)
{
	int t = (int)(long)arg, n = N;
	static double a[T][N * N], b[T][N * N], c[T][N * N];
	double one = 1, zero = 0;

	for (int r = 0; r < R; r++) {
		for (int i = 0; i < N * N; i++) {
			a[t][i] = sin(i * 0.1 + t + r);
			b[t][i] = cos(i * 0.2 - t + r);
		}
		gemm("N", "N", &n, &n, &n, &one, a[t], &n, b[t], &n, &zero, c[t], &n, 1, 1);
		for (int j = 0; j < N; j++)
			for (int i = 0; i < N; i++) {
				double s = 0;
				for (int l = 0; l < N; l++)
					s += a[t][i + l * N] * b[t][l + j * N];
				if (fabs(s - c[t][i + j * N]) > 1e-10)
					bad[t] = 1;
			}
	}
	return NULL;
}

int main(void)
{
	pthread_t th[T];

	gemm = (gemm_t *)dlsym(RTLD_DEFAULT, "dgemm_");
	if (!gemm)
		return 2;
	for (long t = 0; t < T; t++)
		if (pthread_create(&th[t], NULL, work, (void *)t))
			return 2;
	for (int t = 0; t < T; t++)
		pthread_join(th[t], NULL);
	for (int t = 0; t < T; t++)
		if (bad[t]) {
			printf("thread %d WRONG\n", t);
			return 1;
		}
	printf("ok\n");
	return 0;
}
