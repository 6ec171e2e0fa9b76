/*
 * solve_phases - where the time of numpy's np.linalg.solve(A, B) (n x n,
 * n right-hand sides, float64) goes, phase by phase: the same calls in
 * the same order as numpy's umath_linalg makes them, through the global
 * BLAS/LAPACK names, so that libgpuoffload.so (preloaded, or `gpu-offload
 * run`) intercepts them as it intercepts numpy's:
 *
 *   malloc    one buffer for A, B and the pivots (numpy's init_gesv)
 *   gatherA   n calls ?copy(n, A + j, incx = n, buf + j*n, 1): A into
 *             Fortran order (numpy's linearize_matrix)
 *   gatherB   the same for B
 *   gesv      ?gesv on the buffer
 *   scatter   n calls ?copy(n, X + j*n, 1, R + j, incy = n) into a fresh
 *             result R allocated as numpy allocates large arrays (malloc,
 *             then MADV_HUGEPAGE on it)
 *   free      the buffer, then R
 *
 * solve_phases LIB [N [REPS]]   (LIB: the CPU BLAS/LAPACK to dlopen, e.g.
 * numpy's bundled libscipy_openblas64_*.so: its ILP64 scipy_*_64_ names
 * are used when it has them, else the Fortran names with 32-bit
 * integers). Prints one line per repetition, milliseconds per phase; the
 * first repetition includes whatever starts on the first call (a GPU).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "benchclock.h"

typedef void gesv64_t(const int64_t *, const int64_t *, double *, const int64_t *,
		      int64_t *, double *, const int64_t *, int64_t *);
typedef void copy64_t(const int64_t *, const double *, const int64_t *, double *,
		      const int64_t *);
typedef void gesv32_t(const int *, const int *, double *, const int *, int *,
		      double *, const int *, int *);
typedef void copy32_t(const int *, const double *, const int *, double *, const int *);

static gesv64_t *gesv64;
static copy64_t *copy64;
static gesv32_t *gesv32;
static copy32_t *copy32;

/* numpy's allocation of a large array: malloc, MADV_HUGEPAGE from 4 MiB */
static double *np_alloc(size_t bytes)
{
	char *p = malloc(bytes);
	uintptr_t a;

	if (!p) {
		perror("malloc");
		exit(2);
	}
	a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
	if (bytes >= (4u << 20))
		madvise((void *)a, (uintptr_t)p + bytes - a, MADV_HUGEPAGE);
	return (double *)(void *)p;
}

static void copy(int64_t n, const double *x, int64_t incx, double *y, int64_t incy)
{
	if (copy64) {
		copy64(&n, x, &incx, y, &incy);
	} else {
		int n32 = (int)n, ix = (int)incx, iy = (int)incy;
		copy32(&n32, x, &ix, y, &iy);
	}
}

static int64_t gesv(int64_t n, double *a, void *ipiv, double *b)
{
	if (gesv64) {
		int64_t info;
		gesv64(&n, &n, a, &n, ipiv, b, &n, &info);
		return info;
	} else {
		int n32 = (int)n, info;
		gesv32(&n32, &n32, a, &n32, ipiv, b, &n32, &info);
		return info;
	}
}

int main(int argc, char **argv)
{
	int64_t n = argc > 2 ? atol(argv[2]) : 4096;
	int reps = argc > 3 ? atoi(argv[3]) : 4;
	double *A, *B;
	void *h = argc < 2 ? NULL : dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);

	if (!h) {
		fprintf(stderr, "usage: solve_phases LIB [N [REPS]] (%s)\n",
			argc < 2 ? "no LIB" : dlerror());
		return 2;
	}
	/* The names LIB defines, called through RTLD_DEFAULT: a preloaded
	 * interposer's definitions come first, as for numpy's calls. */
	if (dlsym(h, "scipy_dgesv_64_") && dlsym(h, "scipy_dcopy_64_")) {
		gesv64 = (gesv64_t *)dlsym(RTLD_DEFAULT, "scipy_dgesv_64_");
		copy64 = (copy64_t *)dlsym(RTLD_DEFAULT, "scipy_dcopy_64_");
	} else {
		gesv32 = (gesv32_t *)dlsym(RTLD_DEFAULT, "dgesv_");
		copy32 = (copy32_t *)dlsym(RTLD_DEFAULT, "dcopy_");
		if (!gesv32 || !copy32) {
			fprintf(stderr, "solve_phases: no dgesv/dcopy in %s\n", argv[1]);
			return 2;
		}
	}
	A = np_alloc(sizeof(double) * (size_t)(n * n));
	B = np_alloc(sizeof(double) * (size_t)(n * n));
	srand(16);
	for (int64_t i = 0; i < n * n; i++) {
		A[i] = (double)rand() / RAND_MAX;
		B[i] = (double)rand() / RAND_MAX;
	}
	for (int64_t i = 0; i < n; i++)
		A[i * n + i] += (double)n;      /* well conditioned */
	for (int r = 0; r < reps; r++) {
		double t[9], *fa, *fb, *R;
		char *buf;
		int64_t info;

		t[0] = now();
		buf = malloc(sizeof(double) * (size_t)(2 * n * n) + sizeof(int64_t) * (size_t)n);
		if (!buf)
			return 2;
		fa = (double *)(void *)buf;
		fb = fa + n * n;
		t[1] = now();
		for (int64_t j = 0; j < n; j++)
			copy(n, A + j, n, fa + j * n, 1);
		t[2] = now();
		for (int64_t j = 0; j < n; j++)
			copy(n, B + j, n, fb + j * n, 1);
		t[3] = now();
		info = gesv(n, fa, fb + n * n, fb);
		t[4] = now();
		R = np_alloc(sizeof(double) * (size_t)(n * n));
		t[5] = now();
		for (int64_t j = 0; j < n; j++)
			copy(n, fb + j * n, 1, R + j, n);
		t[6] = now();
		free(buf);
		t[7] = now();
		free(R);
		t[8] = now();
		printf("rep %d total %.1f ms: malloc %.2f gatherA %.1f gatherB %.1f "
		       "gesv %.1f alloc-result %.2f scatter %.1f free %.1f free-result %.1f"
		       " (info %lld)\n", r, (t[8] - t[0]) * 1e3, (t[1] - t[0]) * 1e3,
		       (t[2] - t[1]) * 1e3, (t[3] - t[2]) * 1e3, (t[4] - t[3]) * 1e3,
		       (t[5] - t[4]) * 1e3, (t[6] - t[5]) * 1e3, (t[7] - t[6]) * 1e3,
		       (t[8] - t[7]) * 1e3, (long long)info);
	}
	return 0;
}
