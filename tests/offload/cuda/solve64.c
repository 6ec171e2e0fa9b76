/*
 * solve64.c - libsolve64.so: scipy_?gesv_64_ and scipy_?posv_64_ (the
 * ILP64 names of the OpenBLAS in numpy's wheels) on the system's LP64
 * LAPACK, so that the tests of the solve pipeline (solvepipe.c) reach
 * the offloader's 64-bit-pivot path on a machine without an ILP64 LAPACK.
 * Dimensions must fit 32 bits (they are small in the tests).
 */
#include <complex.h>
#include <stdint.h>
#include <stdlib.h>

#define SHIM(P, T)                                                             \
void P##gesv_(const int *, const int *, T *, const int *, int *, T *,          \
	      const int *, int *);                                             \
void P##posv_(const char *, const int *, const int *, T *, const int *, T *,   \
	      const int *, int *, size_t);                                     \
void scipy_##P##gesv_64_(const int64_t *n, const int64_t *nrhs, T *a,          \
			 const int64_t *lda, int64_t *ipiv, T *b,              \
			 const int64_t *ldb, int64_t *info);                   \
void scipy_##P##gesv_64_(const int64_t *n, const int64_t *nrhs, T *a,          \
			 const int64_t *lda, int64_t *ipiv, T *b,              \
			 const int64_t *ldb, int64_t *info)                    \
{                                                                              \
	int n32 = (int)*n, r32 = (int)*nrhs, la = (int)*lda, lb = (int)*ldb;   \
	int i32 = 0, *p = malloc(sizeof *p * (size_t)(n32 > 0 ? n32 : 1));     \
                                                                               \
	if (!p)                                                                \
		abort();                                                       \
	P##gesv_(&n32, &r32, a, &la, p, b, &lb, &i32);                         \
	for (int i = 0; i < n32; i++)                                          \
		ipiv[i] = p[i];                                                \
	*info = i32;                                                           \
	free(p);                                                               \
}                                                                              \
void scipy_##P##posv_64_(const char *uplo, const int64_t *n,                   \
			 const int64_t *nrhs, T *a, const int64_t *lda, T *b,  \
			 const int64_t *ldb, int64_t *info, size_t len);       \
void scipy_##P##posv_64_(const char *uplo, const int64_t *n,                   \
			 const int64_t *nrhs, T *a, const int64_t *lda, T *b,  \
			 const int64_t *ldb, int64_t *info, size_t len)        \
{                                                                              \
	int n32 = (int)*n, r32 = (int)*nrhs, la = (int)*lda, lb = (int)*ldb;   \
	int i32 = 0;                                                           \
                                                                               \
	P##posv_(uplo, &n32, &r32, a, &la, b, &lb, &i32, len);                 \
	*info = i32;                                                           \
}
SHIM(s, float)
SHIM(d, double)
SHIM(c, float complex)
SHIM(z, double complex)
