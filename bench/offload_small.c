/*
 * offload_small - the cost libgpuoffload.so adds to calls that stay on the
 * CPU. Times calls through the linked names and prints nanoseconds per
 * call, one "case value" line each; `make bench-offload-small` runs it
 * without and with the library preloaded and prints the difference.
 *
 * The cases, by the wrapper path they take:
 *   ddot_8_ns       the light path, BLAS level 1 (8 elements)
 *   dgemv_4_ns      the light path, BLAS level 2 (4x4)
 *   dcopy_16_ns     the light path of a ?copy below the copy engine's size
 *   dgemm_4x4_ns    the full path: a level-3 call below the threshold
 *   dgeqrf_query_ns the full path: a LAPACK workspace query (lwork -1)
 *   dpotrs_4_ns     a small LAPACK call (the full path) and the two nested
 *                   dtrsm calls reference LAPACK makes from it
 *   dgesv_4_ns      a small LAPACK call and its nested BLAS calls (about
 *                   a dozen with reference LAPACK's recursive dgetrf2);
 *                   includes restoring the 4x4 system each time
 * The LAPACK cases are built only where liblapack.so.3 links (HAVE_LAPACK).
 * Arguments: [CALLS [CASE]]: CALLS per round (2000000), CASE one case
 * alone (its name, for a profile). BENCH_OFFLOAD_PAUSE=1 in the
 * environment: the offloader paused first (gpu_offload_pause, found by
 * dlsym; nothing when not loaded): what a paused call costs.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "offload/benchclock.h"

void dgemm_(const char *, const char *, const int *, const int *, const int *,
	    const double *, const double *, const int *, const double *,
	    const int *, const double *, double *, const int *, size_t, size_t);
void dgemv_(const char *, const int *, const int *, const double *,
	    const double *, const int *, const double *, const int *,
	    const double *, double *, const int *, size_t);
double ddot_(const int *, const double *, const int *, const double *,
	     const int *);
void dcopy_(const int *, const double *, const int *, double *, const int *);
#ifdef HAVE_LAPACK
void dgesv_(const int *, const int *, double *, const int *, int *, double *,
	    const int *, int *);
void dpotrs_(const char *, const int *, const int *, const double *,
	     const int *, double *, const int *, int *, size_t);
void dgeqrf_(const int *, const int *, double *, const int *, double *,
	     double *, const int *, int *);
#endif

static double a[16], b[16], c[16], x[16], y[16], one = 1, zero = 0, s;
static int four = 4, eight = 8, sixteen = 16, inc = 1, info;
#ifdef HAVE_LAPACK
static int ipiv[4];
#endif

enum { DDOT, DGEMV, DCOPY, DGEMM, DGEQRF_Q, DPOTRS, DGESV, NCASE };
static const char *const names[NCASE] = {
	"ddot_8_ns", "dgemv_4_ns", "dcopy_16_ns", "dgemm_4x4_ns",
	"dgeqrf_query_ns", "dpotrs_4_ns", "dgesv_4_ns",
};

/* One call of case k. */
static void call(int k)
{
#ifdef HAVE_LAPACK
	double w[4], q;
	int m1 = -1;
	static const double spd[16] = {    /* symmetric positive definite,
	                                    * factored by hand below */
		4, 1, 0, 0, 1, 4, 1, 0, 0, 1, 4, 1, 0, 0, 1, 4 };
#endif
	switch (k) {
	case DDOT:
		s += ddot_(&eight, a, &inc, b, &inc);
		break;
	case DGEMV:
		dgemv_("N", &four, &four, &one, a, &four, x, &inc, &zero, y,
		       &inc, 1);
		break;
	case DCOPY:
		dcopy_(&sixteen, a, &inc, y, &inc);
		break;
	case DGEMM:
		dgemm_("N", "N", &four, &four, &four, &one, a, &four, b, &four,
		       &zero, c, &four, 1, 1);
		break;
#ifdef HAVE_LAPACK
	case DGEQRF_Q:
		dgeqrf_(&four, &four, c, &four, w, &q, &m1, &info);
		break;
	case DPOTRS:
		/* c holds spd's Cholesky factor (main); y the right side */
		memcpy(y, x, 4 * sizeof *y);
		dpotrs_("L", &four, &inc, c, &four, y, &four, &info, 1);
		break;
	case DGESV:
		memcpy(b, spd, sizeof spd);
		memcpy(y, x, 4 * sizeof *y);
		dgesv_(&four, &inc, b, &four, ipiv, y, &four, &info);
		break;
#endif
	}
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000000;
	double best[NCASE];
	int ncase = NCASE;

	for (int i = 0; i < 16; i++) {
		a[i] = b[i] = i * 0.5;
		x[i] = 1 + i;
	}
	if (getenv("BENCH_OFFLOAD_PAUSE") && !strcmp(getenv("BENCH_OFFLOAD_PAUSE"), "1")) {
		int (*sw)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "gpu_offload_pause");
		if (sw)
			sw(1);
	}
#ifdef HAVE_LAPACK
	/* The Cholesky factor (lower) of the tridiagonal 4,1 matrix. */
	{
		double l[16] = { 0 }, d = 4;
		for (int i = 0; i < 4; i++) {
			double li = i ? 1 / l[(i - 1) * 5] : 0;
			if (i) {
				l[(i - 1) * 4 + i] = li;
				d = 4 - li * li;
			}
			l[i * 5] = __builtin_sqrt(d);
		}
		memcpy(c, l, sizeof l);
	}
#else
	ncase = DGEQRF_Q;
#endif
	for (int k = 0; k < ncase; k++)
		best[k] = 1e9;
	for (int rep = 0; rep < 5; rep++) {     /* best of 5: least disturbed */
		for (int k = 0; k < ncase; k++) {
			if (argc > 2 && strcmp(argv[2], names[k]) != 0)
				continue;
			/* The LAPACK cases are slower: fewer calls, the
			 * same order of time. */
			long cn = k >= DGEQRF_Q ? n / 10 : n;
			double t;
			if (k == DGEMM)
				cn = n / 4;
			t = now();
			for (long i = 0; i < cn; i++)
				call(k);
			t = (now() - t) / (double)cn * 1e9;
			best[k] = t < best[k] ? t : best[k];
		}
	}
	for (int k = 0; k < ncase; k++)
		if (argc <= 2 || strcmp(argv[2], names[k]) == 0)
			printf("%s %.1f\n", names[k], best[k]);
	return s == 12345.0 || info != 0;
}
