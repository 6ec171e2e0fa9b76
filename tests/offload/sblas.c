/*
 * sblas.c - libsblas.so: a tiny BLAS/LAPACK under the names of the
 * OpenBLAS bundled in PyPI's NumPy/SciPy wheels (scipy_dgemm_,
 * scipy_cblas_dgemm, and scipy_dgemm_64_, scipy_cblas_dgemm64_,
 * scipy_dgesv_64_ with 64-bit integers), naive but exact, counting its
 * calls (sblas_calls) so that a test sees which library ran a call.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

__attribute__((visibility("default"))) int sblas_calls;

static void gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, double al,
		 const double *a, int64_t lda, const double *b, int64_t ldb,
		 double be, double *c, int64_t ldc)
{
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = 0; i < m; i++) {
			double s = 0;
			for (int64_t l = 0; l < k; l++)
				s += (ta == 'N' ? a[i + l * lda] : a[l + i * lda]) *
				     (tb == 'N' ? b[l + j * ldb] : b[j + l * ldb]);
			c[i + j * ldc] = be == 0 ? al * s : al * s + be * c[i + j * ldc];
		}
	sblas_calls++;
}

void scipy_dgemm_(const char *ta, const char *tb, const int *m, const int *n,
		  const int *k, const double *al, const double *a, const int *lda,
		  const double *b, const int *ldb, const double *be, double *c,
		  const int *ldc, size_t l1, size_t l2);
void scipy_dgemm_(const char *ta, const char *tb, const int *m, const int *n,
		  const int *k, const double *al, const double *a, const int *lda,
		  const double *b, const int *ldb, const double *be, double *c,
		  const int *ldc, size_t l1, size_t l2)
{
	(void)l1; (void)l2;
	gemm(*ta, *tb, *m, *n, *k, *al, a, *lda, b, *ldb, *be, c, *ldc);
}

void scipy_dgemm_64_(const char *ta, const char *tb, const int64_t *m,
		     const int64_t *n, const int64_t *k, const double *al,
		     const double *a, const int64_t *lda, const double *b,
		     const int64_t *ldb, const double *be, double *c,
		     const int64_t *ldc, size_t l1, size_t l2);
void scipy_dgemm_64_(const char *ta, const char *tb, const int64_t *m,
		     const int64_t *n, const int64_t *k, const double *al,
		     const double *a, const int64_t *lda, const double *b,
		     const int64_t *ldb, const double *be, double *c,
		     const int64_t *ldc, size_t l1, size_t l2)
{
	(void)l1; (void)l2;
	gemm(*ta, *tb, *m, *n, *k, *al, a, *lda, b, *ldb, *be, c, *ldc);
}

/* Column-major only (the client asks for that). */
void scipy_cblas_dgemm(int layout, int ta, int tb, int m, int n, int k,
		       double al, const double *a, int lda, const double *b,
		       int ldb, double be, double *c, int ldc);
void scipy_cblas_dgemm(int layout, int ta, int tb, int m, int n, int k,
		       double al, const double *a, int lda, const double *b,
		       int ldb, double be, double *c, int ldc)
{
	if (layout == 102)
		gemm(ta == 111 ? 'N' : 'T', tb == 111 ? 'N' : 'T', m, n, k, al,
		     a, lda, b, ldb, be, c, ldc);
}

void scipy_cblas_dgemm64_(int layout, int ta, int tb, int64_t m, int64_t n,
			  int64_t k, double al, const double *a, int64_t lda,
			  const double *b, int64_t ldb, double be, double *c,
			  int64_t ldc);
void scipy_cblas_dgemm64_(int layout, int ta, int tb, int64_t m, int64_t n,
			  int64_t k, double al, const double *a, int64_t lda,
			  const double *b, int64_t ldb, double be, double *c,
			  int64_t ldc)
{
	if (layout == 102)
		gemm(ta == 111 ? 'N' : 'T', tb == 111 ? 'N' : 'T', m, n, k, al,
		     a, lda, b, ldb, be, c, ldc);
}

/* LU with partial pivoting (first largest |a|), then the solve. */
void scipy_dgesv_64_(const int64_t *np, const int64_t *nrhs, double *a,
		     const int64_t *lda, int64_t *ipiv, double *b,
		     const int64_t *ldb, int64_t *info);
void scipy_dgesv_64_(const int64_t *np, const int64_t *nrhs, double *a,
		     const int64_t *lda, int64_t *ipiv, double *b,
		     const int64_t *ldb, int64_t *info)
{
	int64_t n = *np, la = *lda, lb = *ldb;

	*info = 0;
	for (int64_t j = 0; j < n; j++) {
		int64_t p = j;
		for (int64_t i = j + 1; i < n; i++)
			if (__builtin_fabs(a[i + j * la]) > __builtin_fabs(a[p + j * la]))
				p = i;
		ipiv[j] = p + 1;
		for (int64_t l = 0; l < n; l++) {
			double t = a[j + l * la]; a[j + l * la] = a[p + l * la]; a[p + l * la] = t;
		}
		for (int64_t i = j + 1; i < n; i++) {
			a[i + j * la] /= a[j + j * la];
			for (int64_t l = j + 1; l < n; l++)
				a[i + l * la] -= a[i + j * la] * a[j + l * la];
		}
	}
	for (int64_t c = 0; c < *nrhs; c++) {
		double *x = b + c * lb;
		for (int64_t i = 0; i < n; i++) {
			double t = x[i]; x[i] = x[ipiv[i] - 1]; x[ipiv[i] - 1] = t;
		}
		for (int64_t i = 0; i < n; i++)
			for (int64_t l = 0; l < i; l++)
				x[i] -= a[i + l * la] * x[l];
		for (int64_t i = n - 1; i >= 0; i--) {
			for (int64_t l = i + 1; l < n; l++)
				x[i] -= a[i + l * la] * x[l];
			x[i] /= a[i + i * la];
		}
	}
	sblas_calls++;
}
