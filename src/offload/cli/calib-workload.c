/*
 * calib-workload.c - the calibration workload of `gpu-offload calibrate`:
 * an ordinary BLAS/LAPACK client (so what it measures includes all that a
 * real call pays), run under libgpuoffload.so once with every call forced
 * to the CPU and once to the GPU; the library's traces hold the timings.
 *
 * It finds the BLAS and LAPACK at run time: dlopen("libblas.so.3",
 * "liblapack.so.3", RTLD_GLOBAL; GPO_CALIB_BLAS / GPO_CALIB_LAPACK name
 * others), then each function by dlsym(RTLD_DEFAULT), which finds the
 * preloaded wrapper first.
 *
 * A noisy machine: before each measurement point a small fixed CPU job
 * (the canary) must run near its quiet speed, and a point during which it
 * slowed down is measured again (at most 3 times).
 *
 * Usage: gpu-offload-calib MAX_SIZE REPS  (sizes 64, 128, ... MAX_SIZE)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void gemm_fn(const char *, const char *, const int *, const int *,
		     const int *, const void *, const void *, const int *,
		     const void *, const int *, const void *, void *,
		     const int *, size_t, size_t);
typedef void getrf_fn(const int *, const int *, void *, const int *, int *,
		      int *);
typedef void potrf_fn(const char *, const int *, void *, const int *, int *,
		      size_t);

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static volatile double sink;

static double canary(void)
{
	double t = now(), x = 1;
	for (int i = 0; i < 2000000; i++)
		x = x * 1.0000001 + 1e-9;
	sink = x;
	return now() - t;
}

static double quiet;

/* Wait (a bounded number of tries) for the canary to run near quiet. */
static void settle(void)
{
	for (int i = 0; i < 20 && canary() > 1.5 * quiet; i++)
		;
}

static int clean(void)
{
	return canary() <= 1.5 * quiet;
}

/* `count` random numbers in [0,1) as floats or doubles; with `spd`, made
 * a symmetric n x n matrix with n added on the diagonal: positive
 * definite and well conditioned, for potrf and an LU without trouble. */
static void fill(void *p, size_t count, int dbl, int spd, int n)
{
	unsigned s = 12345;

	for (size_t i = 0; i < count; i++) {
		double v;
		s = s * 1103515245u + 12345u;
		v = (s >> 8) / 16777216.0;
		if (dbl)
			((double *)p)[i] = v;
		else
			((float *)p)[i] = (float)v;
	}
	if (!spd)
		return;
	for (int i = 0; i < n; i++) {
		for (int j = 0; j < i; j++) {
			size_t lo = (size_t)i * n + j, up = (size_t)j * n + i;
			if (dbl)
				((double *)p)[lo] = ((double *)p)[up];
			else
				((float *)p)[lo] = ((float *)p)[up];
		}
		if (dbl)
			((double *)p)[(size_t)i * n + i] += n;
		else
			((float *)p)[(size_t)i * n + i] += (float)n;
	}
}

/* A decimal argument (no atoi in src/: see src/lease/num.c). */
static int arg(const char *s, int def)
{
	int v = 0;

	if (!s || !*s)
		return def;
	for (; *s >= '0' && *s <= '9' && v < 1000000; s++)
		v = v * 10 + (*s - '0');
	return *s || v == 0 ? def : v;
}

int main(int argc, char **argv)
{
	const char *blas = getenv("GPO_CALIB_BLAS"), *lapack = getenv("GPO_CALIB_LAPACK");
	int max = arg(argc > 1 ? argv[1] : NULL, 512);
	int reps = arg(argc > 2 ? argv[2] : NULL, 3);
	static const char gprec[] = "sdcz", lprec[] = "sd";

	if (!dlopen(blas && *blas ? blas : "libblas.so.3", RTLD_NOW | RTLD_GLOBAL) ||
	    !dlopen(lapack && *lapack ? lapack : "liblapack.so.3", RTLD_NOW | RTLD_GLOBAL)) {
		fprintf(stderr, "gpu-offload-calib: %s\n", dlerror());
		return 1;
	}
	quiet = canary();
	for (int i = 0; i < 4; i++) {
		double t = canary();
		if (t < quiet)
			quiet = t;
	}
	for (int n = 64; n <= max; n *= 2) {
		size_t elems = (size_t)n * n;
		void *a = malloc(elems * 16), *b = malloc(elems * 16),
		     *c = malloc(elems * 16);
		int *piv = malloc(sizeof(int) * (size_t)n), info;
		if (!a || !b || !c || !piv)
			return 1;
		for (int p = 0; p < 4; p++) {
			char name[16];
			gemm_fn *gemm;
			static const double one[2] = { 1, 0 }, zero[2] = { 0, 0 };
			static const float onef[2] = { 1, 0 }, zerof[2] = { 0, 0 };
			const void *al = p == 0 || p == 2 ? (const void *)onef : (const void *)one;
			const void *be = p == 0 || p == 2 ? (const void *)zerof : (const void *)zero;
			snprintf(name, sizeof name, "%cgemm_", gprec[p]);
			gemm = (gemm_fn *)dlsym(RTLD_DEFAULT, name);
			if (!gemm)
				continue;
			fill(a, elems * (p >= 2 ? 2 : 1), p == 1 || p == 3, 0, n);
			fill(b, elems * (p >= 2 ? 2 : 1), p == 1 || p == 3, 0, n);
			for (int tries = 0; tries < 3; tries++) {
				settle();
				for (int r = 0; r < reps; r++)
					gemm("N", "N", &n, &n, &n, al, a, &n, b, &n, be, c, &n, 1, 1);
				if (clean())
					break;
			}
		}
		for (int p = 0; p < 2; p++) {
			char name[16];
			getrf_fn *getrf;
			potrf_fn *potrf;
			snprintf(name, sizeof name, "%cgetrf_", lprec[p]);
			getrf = (getrf_fn *)dlsym(RTLD_DEFAULT, name);
			snprintf(name, sizeof name, "%cpotrf_", lprec[p]);
			potrf = (potrf_fn *)dlsym(RTLD_DEFAULT, name);
			for (int tries = 0; getrf && tries < 3; tries++) {
				settle();
				for (int r = 0; r < reps; r++) {
					fill(a, elems, p == 1, 1, n);
					getrf(&n, &n, a, &n, piv, &info);
				}
				if (clean())
					break;
			}
			for (int tries = 0; potrf && tries < 3; tries++) {
				settle();
				for (int r = 0; r < reps; r++) {
					fill(a, elems, p == 1, 1, n);
					potrf("L", &n, a, &n, &info, 1);
				}
				if (clean())
					break;
			}
		}
		free(a);
		free(b);
		free(c);
		free(piv);
	}
	return 0;
}
