/*
 * sclient.c - libsclient.so, linked with libsblas.so (DT_NEEDED), as
 * NumPy's extension module is with its bundled OpenBLAS: sclient_run()
 * calls each scipy_* name on 100x100 data and prints the results'
 * checks, the 64-bit pivots, and how many calls libsblas.so ran.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern int sblas_calls;
void scipy_dgemm_(const char *, const char *, const int *, const int *,
		  const int *, const double *, const double *, const int *,
		  const double *, const int *, const double *, double *,
		  const int *, size_t, size_t);
void scipy_dgemm_64_(const char *, const char *, const int64_t *,
		     const int64_t *, const int64_t *, const double *,
		     const double *, const int64_t *, const double *,
		     const int64_t *, const double *, double *, const int64_t *,
		     size_t, size_t);
void scipy_cblas_dgemm(int, int, int, int, int, int, double, const double *,
		       int, const double *, int, double, double *, int);
void scipy_cblas_dgemm64_(int, int, int, int64_t, int64_t, int64_t, double,
			  const double *, int64_t, const double *, int64_t,
			  double, double *, int64_t);
void scipy_dgesv_64_(const int64_t *, const int64_t *, double *,
		     const int64_t *, int64_t *, double *, const int64_t *,
		     int64_t *);

#define N 100
static double a[N * N], b[N * N], c[N * N], want[N * N];

static double maxdiff(void)
{
	double d = 0;
	for (int i = 0; i < N * N; i++)
		d = fmax(d, fabs(c[i] - want[i]));
	return d;
}

__attribute__((visibility("default"))) int sclient_run(void);
int sclient_run(void)
{
	int n = N;
	int64_t n64 = N, one = 1, info = -1, ipiv[N];
	double al = 1, be = 0, x[N], a2[N * N];

	/* Large entries on a permutation (not the diagonal): well
	 * conditioned, and the pivots are not 1, 2, 3, ... */
	for (int i = 0; i < N * N; i++) {
		int r = i % N, col = i / N;
		a[i] = sin(i * 0.37) + (r == (col * 7 + 3) % N ? 4 : 0);
		b[i] = cos(i * 0.11);
	}
	for (int j = 0; j < N; j++)
		for (int i = 0; i < N; i++) {
			double s = 0;
			for (int l = 0; l < N; l++)
				s += a[i + l * N] * b[l + j * N];
			want[i + j * N] = s;
		}
	memset(c, 0, sizeof c);
	scipy_dgemm_("N", "N", &n, &n, &n, &al, a, &n, b, &n, &be, c, &n, 1, 1);
	printf("scipy_dgemm_ %s\n", maxdiff() < 1e-9 ? "ok" : "WRONG");
	memset(c, 0, sizeof c);
	scipy_dgemm_64_("N", "N", &n64, &n64, &n64, &al, a, &n64, b, &n64, &be, c, &n64, 1, 1);
	printf("scipy_dgemm_64_ %s\n", maxdiff() < 1e-9 ? "ok" : "WRONG");
	memset(c, 0, sizeof c);
	scipy_cblas_dgemm(102, 111, 111, N, N, N, 1.0, a, N, b, N, 0.0, c, N);
	printf("scipy_cblas_dgemm %s\n", maxdiff() < 1e-9 ? "ok" : "WRONG");
	memset(c, 0, sizeof c);
	scipy_cblas_dgemm64_(102, 111, 111, N, N, N, 1.0, a, N, b, N, 0.0, c, N);
	printf("scipy_cblas_dgemm64_ %s\n", maxdiff() < 1e-9 ? "ok" : "WRONG");
	memcpy(a2, a, sizeof a2);
	for (int i = 0; i < N; i++)
		x[i] = want[i];         /* A * b(:,1) */
	for (int i = 0; i < N; i++)
		ipiv[i] = (int64_t)0x7fff7fff7fff7fffLL;
	scipy_dgesv_64_(&n64, &one, a2, &n64, ipiv, x, &n64, &info);
	double d = 0;
	for (int i = 0; i < N; i++)
		d = fmax(d, fabs(x[i] - b[i]));
	printf("scipy_dgesv_64_ info=%lld %s\n", (long long)info, d < 1e-6 ? "ok" : "WRONG");
	printf("ipiv");
	for (int i = 0; i < N; i++)
		printf(" %lld", (long long)ipiv[i]);
	printf("\nsblas_calls %d\n", sblas_calls);
	return 0;
}
