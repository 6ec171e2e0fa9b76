/*
 * pauselib.c - libpauselib.so: pausecheck's CPU "BLAS/LAPACK": dgemm_
 * (no transposes: the naive loop), ddot_, and a dgetrs_ stand-in that
 * calls dgemm_ twice through the PLT (as a CPU LAPACK calls its BLAS:
 * nested calls), each counting the calls that reached it (pl_calls), so
 * that a test sees which calls the CPU library ran.
 */
#include <stddef.h>

enum { PL_DGEMM, PL_DDOT, PL_DGETRS, PL_N };
__attribute__((visibility("default"))) long pl_calls[PL_N];

static void count(int k)
{
	__atomic_fetch_add(&pl_calls[k], 1, __ATOMIC_RELAXED);
}

void dgemm_(const char *ta, const char *tb, const int *m, const int *n,
	    const int *k, const double *alpha, const double *a, const int *lda,
	    const double *b, const int *ldb, const double *beta, double *c,
	    const int *ldc, size_t lta, size_t ltb);
void dgemm_(const char *ta, const char *tb, const int *m, const int *n,
	    const int *k, const double *alpha, const double *a, const int *lda,
	    const double *b, const int *ldb, const double *beta, double *c,
	    const int *ldc, size_t lta, size_t ltb)
{
	(void)ta; (void)tb; (void)lta; (void)ltb;
	count(PL_DGEMM);
	for (int j = 0; j < *n; j++)
		for (int i = 0; i < *m; i++) {
			double s = 0;
			for (int l = 0; l < *k; l++)
				s += a[i + l * *lda] * b[l + j * *ldb];
			c[i + j * *ldc] = *alpha * s +
				(*beta != 0 ? *beta * c[i + j * *ldc] : 0);
		}
}

double ddot_(const int *n, const double *x, const int *incx, const double *y,
	     const int *incy);
double ddot_(const int *n, const double *x, const int *incx, const double *y,
	     const int *incy)
{
	double s = 0;

	count(PL_DDOT);
	for (int i = 0; i < *n; i++)
		s += x[i * *incx] * y[i * *incy];
	return s;
}

/* Not LAPACK's: B := A A B (two dgemm_ calls, through the PLT), info 0;
 * ipiv unused. */
void dgetrs_(const char *trans, const int *n, const int *nrhs, const double *a,
	     const int *lda, const int *ipiv, double *b, const int *ldb,
	     int *info, size_t ltrans);
void dgetrs_(const char *trans, const int *n, const int *nrhs, const double *a,
	     const int *lda, const int *ipiv, double *b, const int *ldb,
	     int *info, size_t ltrans)
{
	double t[64 * 64], one = 1, zero = 0;
	int ldt = *n;

	(void)trans; (void)ipiv; (void)ltrans;
	count(PL_DGETRS);
	*info = 0;
	if (*n > 64 || *nrhs > 64)
		return;
	dgemm_("N", "N", n, nrhs, n, &one, a, lda, b, ldb, &zero, t, &ldt, 1, 1);
	dgemm_("N", "N", n, nrhs, n, &one, a, lda, t, &ldt, &zero, b, ldb, 1, 1);
}
