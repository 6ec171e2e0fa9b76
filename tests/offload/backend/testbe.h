/*
 * testbe.h - the CPU test backend's kernels (kernels.c), called by its ABI
 * table (testbe.c). Device buffers are plain host memory; operands are read
 * and written through the accessors below in any precision, computing in
 * double complex (so one reference implementation serves s, d, c and z).
 */
#ifndef GPO_TESTBE_H
#define GPO_TESTBE_H

#include <complex.h>
#include <stdint.h>

#include "backend.h"

#include <math.h>
#include <stdlib.h>

typedef double complex Z;

/* |z| without libm (the backend needs libc only, as the library does;
 * sqrt is an instruction under -fno-math-errno), scaled against overflow. */
static inline double tb_abs(Z z)
{
	double re = fabs(creal(z)), im = fabs(cimag(z));
	double m = re > im ? re : im;

	if (m == 0.0)
		return 0.0;
	re /= m;
	im /= m;
	return m * sqrt(re * re + im * im);
}

/* Reference implementation of k; 0, GPO_BE_UNSUPPORTED, or -1 (no memory). */
int tb_kernel(struct gpo_kernel *k);
/* The same for the LAPACK operations (lapack.c). */
int tb_lapack(struct gpo_kernel *k);

/* ---- Operand accessors, shared by kernels.c and lapack.c ------------------- */

struct mat {
	void *p;
	int64_t ld;
	char prec;
	char kind;      /* 'M' matrix of prec, 'R' real of prec, 'I' ints */
	int int64;
};

static inline Z get(const struct mat *a, int64_t i, int64_t j)
{
	size_t x = (size_t)i + (size_t)j * (size_t)a->ld;

	if (a->kind == 'I')
		return a->int64 ? (double)((int64_t *)a->p)[x] :
				  (double)((int32_t *)a->p)[x];
	switch (a->kind == 'R' ? (a->prec == 's' || a->prec == 'c' ? 's' : 'd') : a->prec) {
	case 's': return ((float *)a->p)[x];
	case 'd': return ((double *)a->p)[x];
	case 'c': return ((float *)a->p)[2 * x] + I * ((float *)a->p)[2 * x + 1];
	default: return ((double *)a->p)[2 * x] + I * ((double *)a->p)[2 * x + 1];
	}
}

static inline void set(const struct mat *a, int64_t i, int64_t j, Z v)
{
	size_t x = (size_t)i + (size_t)j * (size_t)a->ld;

	if (a->kind == 'I') {
		if (a->int64)
			((int64_t *)a->p)[x] = (int64_t)creal(v);
		else
			((int32_t *)a->p)[x] = (int32_t)creal(v);
		return;
	}
	switch (a->kind == 'R' ? (a->prec == 's' || a->prec == 'c' ? 's' : 'd') : a->prec) {
	case 's': ((float *)a->p)[x] = (float)creal(v); break;
	case 'd': ((double *)a->p)[x] = creal(v); break;
	case 'c': ((float *)a->p)[2 * x] = (float)creal(v);
		  ((float *)a->p)[2 * x + 1] = (float)cimag(v); break;
	default: ((double *)a->p)[2 * x] = creal(v);
		 ((double *)a->p)[2 * x + 1] = cimag(v); break;
	}
}

static inline struct mat M(const struct gpo_kernel *k, int i, char kind)
{
	struct mat a = { k->buf[i], k->ld[i], k->prec, kind, k->int64 };
	return a;
}

/* A dense n-by-n (or m-by-n) work matrix, column-major. */
#define W_(w, ld, i, j) (w)[(size_t)(i) + (size_t)(j) * (size_t)(ld)]

static inline Z *zalloc(int64_t rows, int64_t cols)
{
	size_t n = (size_t)(rows > 0 ? rows : 1) * (size_t)(cols > 0 ? cols : 1);
	return calloc(n, sizeof(Z));
}

static inline double cabs1(Z v)
{
	return fabs(creal(v)) + fabs(cimag(v));
}

/* op(A)(i,j) for t = 'N', 'T', 'C'. */
static inline Z opget(const struct mat *a, char t, int64_t i, int64_t j)
{
	if (t == 'N')
		return get(a, i, j);
	return t == 'T' ? get(a, j, i) : conj(get(a, j, i));
}

/* C = alpha*X + beta*C with BLAS's rule that beta = 0 does not read C. */
static inline Z axpby(Z alpha, Z x, Z beta, Z c)
{
	return beta == 0 ? alpha * x : alpha * x + beta * c;
}

/* The full symmetric/Hermitian matrix of which a holds the uplo triangle. */
static inline Z symget(const struct mat *a, char uplo, int herm, int64_t i, int64_t j)
{
	int stored = uplo == 'U' ? i <= j : i >= j;

	if (i == j)
		return herm ? creal(get(a, i, i)) : get(a, i, i);
	if (stored)
		return get(a, i, j);
	return herm ? conj(get(a, j, i)) : get(a, j, i);
}

#endif
