/*
 * entry_cost - what a wrapper's entry costs a call where the machine has
 * no system BLAS to link (the GPU machine's pip-only Python: numpy's
 * bundled OpenBLAS), for the in-process sweep's bound (bench/offload/
 * inproc.py): ddot n = 8 and dcopy n = 16 through the global names, so
 * that a preloaded libgpuoffload.so intercepts them, nanoseconds per
 * call, best of 5 rounds, one "case value" line each (as offload_small).
 *
 * entry_cost LIB [CALLS]   LIB: the BLAS to dlopen (RTLD_GLOBAL), e.g.
 * numpy's libscipy_openblas64_*.so: its ILP64 scipy_*_64_ names when it
 * has them, else ddot_/dcopy_. BENCH_OFFLOAD_PAUSE=1: the offloader
 * paused first (gpu_offload_pause; nothing when it is not loaded).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchclock.h"

typedef double dot64_t(const int64_t *, const double *, const int64_t *,
		       const double *, const int64_t *);
typedef void copy64_t(const int64_t *, const double *, const int64_t *, double *,
		      const int64_t *);
typedef double dot32_t(const int *, const double *, const int *, const double *,
		       const int *);
typedef void copy32_t(const int *, const double *, const int *, double *, const int *);

int main(int argc, char **argv)
{
	long calls = argc > 2 ? atol(argv[2]) : 2000000;
	void *h = argc < 2 ? NULL : dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
	const char *p = getenv("BENCH_OFFLOAD_PAUSE");
	static double x[16], y[16];
	double best[2] = { 1e30, 1e30 }, s = 0;
	dot64_t *dot64 = NULL;
	copy64_t *copy64 = NULL;
	dot32_t *dot32 = NULL;
	copy32_t *copy32 = NULL;
	int64_t n8 = 8, n16 = 16, one = 1;
	int i8 = 8, i16 = 16, i1 = 1;

	if (!h || calls <= 0) {
		fprintf(stderr, "usage: entry_cost LIB [CALLS] (%s)\n",
			argc < 2 ? "no LIB" : h ? "bad CALLS" : dlerror());
		return 2;
	}
	if (dlsym(h, "scipy_ddot_64_") && dlsym(h, "scipy_dcopy_64_")) {
		dot64 = (dot64_t *)dlsym(RTLD_DEFAULT, "scipy_ddot_64_");
		copy64 = (copy64_t *)dlsym(RTLD_DEFAULT, "scipy_dcopy_64_");
	} else {
		dot32 = (dot32_t *)dlsym(RTLD_DEFAULT, "ddot_");
		copy32 = (copy32_t *)dlsym(RTLD_DEFAULT, "dcopy_");
		if (!dot32 || !copy32) {
			fprintf(stderr, "entry_cost: no ddot/dcopy in %s\n", argv[1]);
			return 2;
		}
	}
	if (p && !strcmp(p, "1")) {
		int (*sw)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "gpu_offload_pause");
		if (sw)
			sw(1);
	}
	for (int i = 0; i < 16; i++)
		x[i] = 1 + i;
	for (int r = 0; r < 5; r++) {
		double t = now();
		for (long i = 0; i < calls; i++)
			s += dot64 ? dot64(&n8, x, &one, x, &one) : dot32(&i8, x, &i1, x, &i1);
		t = (now() - t) / (double)calls;
		best[0] = t < best[0] ? t : best[0];
		t = now();
		for (long i = 0; i < calls; i++) {
			if (copy64)
				copy64(&n16, x, &one, y, &one);
			else
				copy32(&i16, x, &i1, y, &i1);
		}
		t = (now() - t) / (double)calls;
		best[1] = t < best[1] ? t : best[1];
	}
	printf("ddot_8_ns %.2f\ndcopy_16_ns %.2f\n", best[0] * 1e9, best[1] * 1e9);
	return s == 0 && y[15] != 16;   /* keeps the calls */
}
