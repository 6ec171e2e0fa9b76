/*
 * smallcalls.c - a loop of one small LAPACK/BLAS call, for the tests that
 * count what a forced small GPU call costs (test_small_calls.py) and for
 * strace/perf by hand:
 *
 *   smallcalls OP N COUNT     OP: dgemm dgesv dpotrf dsyevd
 *
 * Each call gets fresh inputs (the same ones every time) and its results
 * are checked against the definition (dgemm: C = A B + C; dgesv: A X = B;
 * dpotrf: L L^T = A; dsyevd: not checked). Prints "ok OP COUNT" and exits
 * 0, or prints the first wrong result and exits 1. Linked with the
 * system's BLAS/LAPACK, which the offloader's CPU path calls.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dgemm_(const char *, const char *, const int *, const int *, const int *,
	    const double *, const double *, const int *, const double *,
	    const int *, const double *, double *, const int *);
void dgesv_(const int *, const int *, double *, const int *, int *, double *,
	    const int *, int *);
void dpotrf_(const char *, const int *, double *, const int *, int *);
void dsyevd_(const char *, const char *, const int *, double *, const int *,
	     double *, double *, const int *, int *, const int *, int *);

static double val(int i, int j)
{
	return (double)((i * 7 + j * 13) % 17) / 17.0 - 0.5;
}

static int bad(const char *op, int call, int i, int j, double got, double want)
{
	printf("%s call %d: (%d,%d) is %g, not %g\n", op, call, i, j, got, want);
	return 1;
}

int main(int argc, char **argv)
{
	const char *op = argc > 1 ? argv[1] : "";
	int n = argc > 2 ? atoi(argv[2]) : 16, count = argc > 3 ? atoi(argv[3]) : 1;
	size_t nn = (size_t)n * (size_t)n;
	double *a = malloc(nn * 8), *b = malloc(nn * 8), *c = malloc(nn * 8);
	double *a0 = malloc(nn * 8), *w = malloc((size_t)n * 8), one = 1;
	int *ipiv = malloc((size_t)n * sizeof(int)), info = 0;
	double *work = NULL;
	int *iwork = NULL, lwork = -1, liwork = -1;

	if (!strcmp(op, "dsyevd")) {
		double q;
		int iq;
		dsyevd_("V", "L", &n, a, &n, w, &q, &lwork, &iq, &liwork, &info);
		lwork = (int)q;
		liwork = iq;
		work = malloc((size_t)lwork * 8);
		iwork = malloc((size_t)liwork * sizeof(int));
	}
	for (int call = 0; call < count; call++) {
		for (int j = 0; j < n; j++)
			for (int i = 0; i < n; i++) {
				a[j * n + i] = val(i, j) + (i == j ? n : 0);
				b[j * n + i] = val(j, i + 1);
				c[j * n + i] = val(i + 2, j);
			}
		if (!strcmp(op, "dgemm")) {
			memcpy(a0, c, nn * 8);
			dgemm_("N", "N", &n, &n, &n, &one, a, &n, b, &n, &one, c, &n);
			for (int j = 0; j < n; j++)
				for (int i = 0; i < n; i++) {
					double s = a0[j * n + i];
					for (int k = 0; k < n; k++)
						s += a[k * n + i] * b[j * n + k];
					if (fabs(s - c[j * n + i]) > 1e-10)
						return bad(op, call, i, j, c[j * n + i], s);
				}
		} else if (!strcmp(op, "dgesv")) {
			memcpy(a0, a, nn * 8);
			memcpy(c, b, nn * 8);
			dgesv_(&n, &n, a, &n, ipiv, b, &n, &info);
			if (info)
				return bad(op, call, 0, 0, info, 0);
			for (int j = 0; j < n; j++)
				for (int i = 0; i < n; i++) {
					double s = 0;
					for (int k = 0; k < n; k++)
						s += a0[k * n + i] * b[j * n + k];
					if (fabs(s - c[j * n + i]) > 1e-9)
						return bad(op, call, i, j, s, c[j * n + i]);
				}
		} else if (!strcmp(op, "dpotrf")) {
			/* A A^T + n I: positive definite */
			for (int j = 0; j < n; j++)
				for (int i = 0; i < n; i++) {
					double s = i == j ? n : 0;
					for (int k = 0; k < n; k++)
						s += val(i, k) * val(j, k);
					a0[j * n + i] = a[j * n + i] = s;
				}
			dpotrf_("L", &n, a, &n, &info);
			if (info)
				return bad(op, call, 0, 0, info, 0);
			for (int j = 0; j < n; j++)
				for (int i = j; i < n; i++) {
					double s = 0;
					for (int k = 0; k <= j; k++)
						s += a[k * n + i] * a[k * n + j];
					if (fabs(s - a0[j * n + i]) > 1e-9)
						return bad(op, call, i, j, s, a0[j * n + i]);
				}
		} else if (!strcmp(op, "dsyevd")) {
			dsyevd_("V", "L", &n, a, &n, w, work, &lwork, iwork,
				&liwork, &info);
		} else {
			fprintf(stderr, "usage: smallcalls dgemm|dgesv|dpotrf|dsyevd N COUNT\n");
			return 2;
		}
	}
	printf("ok %s %d\n", op, count);
	return 0;
}
