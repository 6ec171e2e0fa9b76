/*
 * countlib.c - libcountlib.so: two LAPACK names for countcheck, each
 * making a known number of BLAS calls through the PLT (so that, under the
 * offloader, they are nested calls of the wrapper that called it):
 *   dgetrs_  3 ddot_ and 1 dgemm_ (1x1), then b(1) += 1 and errno 42
 *            (what the caller must see after the wrapper)
 *   dgeqrf_  nothing but answer a workspace query (work(1) = 1)
 */
#include <errno.h>
#include <stddef.h>

double ddot_(const int *, const double *, const int *, const double *,
	     const int *);
void dgemm_(const char *, const char *, const int *, const int *, const int *,
	    const double *, const double *, const int *, const double *,
	    const int *, const double *, double *, const int *, size_t, size_t);
void dgetrs_(const char *, const int *, const int *, const double *,
	     const int *, const int *, double *, const int *, int *, size_t);
void dgeqrf_(const int *, const int *, double *, const int *, double *,
	     double *, const int *, int *);

void dgetrs_(const char *trans, const int *n, const int *nrhs,
	     const double *a, const int *lda, const int *ipiv, double *b,
	     const int *ldb, int *info, size_t ltrans)
{
	int one = 1;
	double x = 1, y = 2, c = 0, s = 0;

	(void)trans; (void)n; (void)nrhs; (void)a; (void)lda; (void)ipiv;
	(void)ldb; (void)ltrans;
	for (int i = 0; i < 3; i++)
		s += ddot_(&one, &x, &one, &y, &one);
	dgemm_("N", "N", &one, &one, &one, &x, &x, &one, &y, &one, &s, &c,
	       &one, 1, 1);
	b[0] += c > 0 ? 1 : 0;
	*info = 0;
	errno = 42;
}

void dgeqrf_(const int *m, const int *n, double *a, const int *lda,
	     double *tau, double *work, const int *lwork, int *info)
{
	(void)m; (void)n; (void)a; (void)lda; (void)tau; (void)lwork;
	work[0] = 1;
	*info = 0;
}
