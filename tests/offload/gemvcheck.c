/*
 * gemvcheck - gemv under residency (tests/offload/test_offload_gemv.py):
 * dgemv_, zgemv_ and cblas_dgemv/cblas_zgemv (through dlsym: the wrappers
 * under LD_PRELOAD) on one matrix again and again, with new vectors.
 *
 *   gemvcheck OUT cases    every trans, increment (1, >1, negative) and
 *                          alpha/beta (0 included) case, Fortran and
 *                          CBLAS (both layouts), d and z
 *   gemvcheck OUT fresh    a new matrix at each of 6 calls (never
 *                          resident), then the first one 3 times
 *   gemvcheck OUT CHANGE   the matrix resident, then changed (write,
 *                          read: read(2) into it, dontneed:
 *                          MADV_DONTNEED), then called again
 *
 * Every y computed is appended to OUT (raw doubles): the test compares
 * the file with the same program's without the library (the CPU
 * library's results).
 */
#define _GNU_SOURCE
#include <complex.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define M 300
#define N 200
#define LDA (M + 3)
#define AB ((size_t)LDA * N * sizeof(double complex))
#define VL (3 * (M > N ? M : N))        /* a vector at increment 3 */

typedef void dgemv_t(const char *, const int *, const int *, const double *,
		     const double *, const int *, const double *, const int *,
		     const double *, double *, const int *, size_t);
typedef void zgemv_t(const char *, const int *, const int *, const void *,
		     const void *, const int *, const void *, const int *,
		     const void *, void *, const int *, size_t);
typedef void cdgemv_t(int, int, int, int, double, const double *, int,
		      const double *, int, double, double *, int);
typedef void czgemv_t(int, int, int, int, const void *, const void *, int,
		      const void *, int, const void *, void *, int);
static dgemv_t *dgemv;
static zgemv_t *zgemv;
static cdgemv_t *cdgemv;
static czgemv_t *czgemv;
static FILE *out;

static void *anon(void)
{
	void *p = mmap(NULL, AB, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	return p;
}

static void fill(double *a, size_t n, double s)
{
	for (size_t i = 0; i < n; i++)
		a[i] = sin((double)i * 0.013 + s);
}

static void put(const void *y, size_t bytes)
{
	if (fwrite(y, 1, bytes, out) != bytes)
		exit(2);
}

static const int incs_x[] = { 1, 2, -1, -3 }, incs_y[] = { 1, 3, -2 };
static const double ab[][2] = { { 1, 0 }, { 0.5, 1.5 }, { 0, 2 }, { 2, 0 } };
static int seq;

/* One dgemv_ with fresh x and y (y's NaN-free garbage is read only when
 * beta != 0). */
static void d_one(const double *a, char t, int incx, int incy,
		  double alpha, double beta)
{
	static double x[VL], y[VL];
	int m = M, n = N, lda = LDA;

	fill(x, VL, ++seq);
	fill(y, VL, seq * 0.5);
	dgemv(&t, &m, &n, &alpha, a, &lda, x, &incx, &beta, y, &incy, 1);
	put(y, sizeof y);
}

static void z_one(const double *a, char t, int incx, int incy,
		  double alpha, double beta)
{
	static double x[2 * VL], y[2 * VL];
	double al[2] = { alpha, 0.25 }, be[2] = { beta, beta ? -0.5 : 0 };
	int m = M, n = N, lda = LDA;

	fill(x, 2 * VL, ++seq);
	fill(y, 2 * VL, seq * 0.5);
	zgemv(&t, &m, &n, al, a, &lda, x, &incx, be, y, &incy, 1);
	put(y, sizeof y);
}

static void cases(void)
{
	double *a = anon(), *za = anon();

	fill(a, (size_t)LDA * N, 0);
	fill(za, 2 * (size_t)LDA * N, 1);
	/* Resident first: seen (CPU), kept (GPU), then reused. */
	for (int i = 0; i < 3; i++) {
		d_one(a, 'N', 1, 1, 1, 0);
		z_one(za, 'N', 1, 1, 1, 0);
	}
	for (int t = 0; t < 3; t++)
		for (size_t ix = 0; ix < 4; ix++)
			for (size_t iy = 0; iy < 3; iy++)
				for (size_t s = 0; s < 4; s++) {
					d_one(a, "NTC"[t], incs_x[ix], incs_y[iy],
					      ab[s][0], ab[s][1]);
					z_one(za, "NTC"[t], incs_x[ix], incs_y[iy],
					      ab[s][0], ab[s][1]);
				}
	/* CBLAS, both layouts (row-major: M rows of N, lda LDA). */
	for (int rep = 0; rep < 3; rep++)
		for (int lay = 101; lay <= 102; lay++)
			for (int t = 111; t <= 113; t++) {
				static double x[2 * VL], y[2 * VL];
				double al[2] = { 1.5, -0.5 }, be[2] = { 0.5, 0.25 };
				fill(x, 2 * VL, ++seq);
				fill(y, 2 * VL, seq * 0.5);
				cdgemv(lay, t, lay == 101 ? N : M, lay == 101 ? M : N,
				       1.5, a, LDA, x, 2, 0.5, y, 1);
				put(y, VL * sizeof(double));
				czgemv(lay, t, lay == 101 ? N : M, lay == 101 ? M : N,
				       al, za, LDA, x, 1, be, y, 2);
				put(y, sizeof y);
			}
	munmap(a, AB);
	munmap(za, AB);
}

/* Six matrices, each used once (all mapped to the end: a new mapping at
 * a freed one's address would be the same operand to the table). */
static void fresh(void)
{
	double *a[6];

	for (int i = 0; i < 6; i++) {
		a[i] = anon();
		fill(a[i], (size_t)LDA * N, i);
		d_one(a[i], "NT"[i % 2], 1, 1, 1, 0.5);
	}
	/* Then the first one again: seen before, so these three calls run
	 * on the GPU (copied and kept, then reused). */
	for (int i = 0; i < 3; i++)
		d_one(a[0], 'N', 1, 1, 1, 0.5);
	for (int i = 0; i < 6; i++)
		munmap(a[i], AB);
}

static void change(const char *how)
{
	double *a = anon();
	int fd[2];

	fill(a, (size_t)LDA * N, 0);
	for (int i = 0; i < 3; i++)
		d_one(a, 'N', 1, 1, 1, 0);
	if (!strcmp(how, "write")) {
		a[LDA * 7 + 3] += 1;
	} else if (!strcmp(how, "read")) {
		double v[4] = { 5, 6, 7, 8 };
		if (pipe(fd) != 0 || write(fd[1], v, sizeof v) != sizeof v ||
		    read(fd[0], a + LDA * 3, sizeof v) != sizeof v)
			exit(2);
		close(fd[0]);
		close(fd[1]);
	} else if (!strcmp(how, "dontneed")) {
		if (madvise(a, AB, MADV_DONTNEED) != 0)
			exit(2);
	} else {
		fprintf(stderr, "gemvcheck: no case %s\n", how);
		exit(2);
	}
	for (int i = 0; i < 4; i++)
		d_one(a, "NT"[i % 2], 1, 2, 1, 0.5);
	munmap(a, AB);
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	dgemv = (dgemv_t *)dlsym(RTLD_DEFAULT, "dgemv_");
	zgemv = (zgemv_t *)dlsym(RTLD_DEFAULT, "zgemv_");
	cdgemv = (cdgemv_t *)dlsym(RTLD_DEFAULT, "cblas_dgemv");
	czgemv = (czgemv_t *)dlsym(RTLD_DEFAULT, "cblas_zgemv");
	out = fopen(argv[1], "w");
	if (!dgemv || !zgemv || !cdgemv || !czgemv || !out)
		return 2;
	if (!strcmp(argv[2], "cases"))
		cases();
	else if (!strcmp(argv[2], "fresh"))
		fresh();
	else
		change(argv[2]);
	if (fclose(out) != 0)
		return 2;
	printf("%s done\n", argv[2]);
	return 0;
}
