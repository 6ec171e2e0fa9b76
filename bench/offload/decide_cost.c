/*
 * decide_cost - what the policy's decision costs a call that it keeps on
 * the CPU (reason model-cpu: above GPU_OFFLOAD_MIN_FLOPS, so on the full
 * path, where the model interpolates the profile's curves and learns
 * from the call): dgemm_ n x n x n on decide_stub.c's dgemm_, which
 * returns at once, so the time per call is the wrapper's alone. Rounds
 * alternate paused (gpu_offload_pause(1): straight to the CPU library)
 * and active, in one process; one line per round, "ROUND n=N: T ns a
 * call". Run it preloaded, with GPU_OFFLOAD_LIBRARY naming the stub and
 * with or without GPU_OFFLOAD_PROFILE (`make bench-offload-decide`).
 *
 * decide_cost [N [CALLS [ROUNDS]]]   (128, 200000, 6)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "benchclock.h"

void dgemm_(const char *ta, const char *tb, const int *m, const int *n,
	    const int *k, const double *alpha, const double *a, const int *lda,
	    const double *b, const int *ldb, const double *beta, double *c,
	    const int *ldc);

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 128;
	long calls = argc > 2 ? atol(argv[2]) : 200000;
	int rounds = argc > 3 ? atoi(argv[3]) : 6;
	double alpha = 1, beta = 0, *a, *b, *c;
	int (*pause)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "gpu_offload_pause");

	if (n < 1 || calls < 1 || rounds < 1) {
		fprintf(stderr, "usage: decide_cost [N [CALLS [ROUNDS]]]\n");
		return 2;
	}
	a = calloc((size_t)n * (size_t)n, sizeof *a);
	b = calloc((size_t)n * (size_t)n, sizeof *b);
	c = calloc((size_t)n * (size_t)n, sizeof *c);
	if (!a || !b || !c)
		return 2;
	for (int r = 0; r < rounds; r++) {
		int paused = r % 2;
		double t;

		if (pause)
			pause(paused);
		t = now();
		for (long i = 0; i < calls; i++)
			dgemm_("N", "N", &n, &n, &n, &alpha, a, &n, b, &n, &beta, c, &n);
		t = now() - t;
		printf("%s n=%d: %.1f ns a call\n",
		       !pause ? "plain" : paused ? "paused" : "active", n,
		       1e9 * t / (double)calls);
	}
	free(a);
	free(b);
	free(c);
	return 0;
}
