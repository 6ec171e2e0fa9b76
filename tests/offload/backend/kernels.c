/*
 * kernels.c - reference implementations of the BLAS level-3 operations and
 * gemv for the CPU test backend (the LAPACK ones are in lapack.c, the
 * operand accessors in testbe.h): plain loops in double complex, written from the
 * BLAS definitions, so that one implementation serves s, d, c and z. They
 * are slow and exact enough: results agree with the CPU library to
 * rounding, which is what the tests compare with tolerances.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testbe.h"

static int k_gemm(struct gpo_kernel *k)
{
	struct mat a = M(k, 0, 'M'), b = M(k, 1, 'M'), c = M(k, 2, 'M');
	Z al = k->alpha[0] + I * k->alpha[1], be = k->beta[0] + I * k->beta[1];

	for (int64_t j = 0; j < k->n; j++)
		for (int64_t i = 0; i < k->m; i++) {
			Z s = 0;
			for (int64_t l = 0; l < k->k; l++)
				s += opget(&a, k->opt[0], i, l) * opget(&b, k->opt[1], l, j);
			set(&c, i, j, axpby(al, s, be, get(&c, i, j)));
		}
	return 0;
}

/* y = alpha op(A) x + beta y. x and y are operands of one row whose ld is
 * the increment (tools/offload_ops.py), positive: the frontend runs
 * other increments on the CPU. alpha = 0 reads neither A nor x and
 * beta = 0 does not read y, as BLAS defines them. */
static int k_gemv(struct gpo_kernel *k)
{
	struct mat a = M(k, 0, 'M'), x = M(k, 1, 'M'), y = M(k, 2, 'M');
	Z al = k->alpha[0] + I * k->alpha[1], be = k->beta[0] + I * k->beta[1];
	char t = k->opt[0];
	int64_t leny = t == 'N' ? k->m : k->n, lenx = t == 'N' ? k->n : k->m;

	for (int64_t i = 0; i < leny; i++) {
		Z s = 0;
		if (al != 0)
			for (int64_t l = 0; l < lenx; l++)
				s += opget(&a, t, i, l) * get(&x, 0, l);
		set(&y, 0, i, axpby(al, s, be, be == 0 ? 0 : get(&y, 0, i)));
	}
	return 0;
}

static int k_symm(struct gpo_kernel *k, int herm)
{
	struct mat a = M(k, 0, 'M'), b = M(k, 1, 'M'), c = M(k, 2, 'M');
	Z al = k->alpha[0] + I * k->alpha[1], be = k->beta[0] + I * k->beta[1];
	int left = k->opt[0] == 'L';
	int64_t p = left ? k->m : k->n;

	for (int64_t j = 0; j < k->n; j++)
		for (int64_t i = 0; i < k->m; i++) {
			Z s = 0;
			for (int64_t l = 0; l < p; l++)
				s += left ? symget(&a, k->opt[1], herm, i, l) * get(&b, l, j) :
					    get(&b, i, l) * symget(&a, k->opt[1], herm, l, j);
			set(&c, i, j, axpby(al, s, be, get(&c, i, j)));
		}
	return 0;
}

/* X(i,l): A(i,l) for trans 'N', A(l,i) otherwise. */
static Z xget(const struct mat *a, char t, int64_t i, int64_t l)
{
	return t == 'N' ? get(a, i, l) : get(a, l, i);
}

static int k_syrk(struct gpo_kernel *k, int herm, int two)
{
	struct mat a = M(k, 0, 'M'), b = M(k, 1, 'M'), c = M(k, two ? 2 : 1, 'M');
	Z al = k->alpha[0] + I * k->alpha[1], be = k->beta[0] + I * k->beta[1];
	char t = k->opt[1];

	if (herm && !two)
		al = creal(al);
	if (herm)
		be = creal(be);
	for (int64_t j = 0; j < k->n; j++)
		for (int64_t i = 0; i < k->n; i++) {
			Z s = 0, v;
			if (k->opt[0] == 'U' ? i > j : i < j)
				continue;
			for (int64_t l = 0; l < k->k; l++) {
				Z ai = xget(&a, t, i, l), aj = xget(&a, t, j, l);
				if (!two) {
					s += !herm ? ai * aj : t == 'N' ? ai * conj(aj) : conj(ai) * aj;
				} else {
					Z bi = xget(&b, t, i, l), bj = xget(&b, t, j, l);
					if (!herm)
						s += al * ai * bj + al * bi * aj;
					else if (t == 'N')
						s += al * ai * conj(bj) + conj(al) * bi * conj(aj);
					else
						s += al * conj(ai) * bj + conj(al) * conj(bi) * aj;
				}
			}
			v = axpby(two ? 1 : al, s, be, get(&c, i, j));
			if (herm && i == j)
				v = creal(v);
			set(&c, i, j, v);
		}
	return 0;
}

/* op(T) of the triangular a, as a dense p-by-p matrix. */
static Z *tri_dense(const struct mat *a, int64_t p, char uplo, char t, char diag)
{
	Z *w = zalloc(p, p);

	if (!w)
		return NULL;
	for (int64_t j = 0; j < p; j++)
		for (int64_t i = 0; i < p; i++) {
			Z v;
			if (i == j)
				v = diag == 'U' ? 1 : get(a, i, i);
			else if (uplo == 'U' ? i < j : i > j)
				v = get(a, i, j);
			else
				v = 0;
			if (t == 'N')
				W_(w, p, i, j) = v;
			else
				W_(w, p, j, i) = t == 'C' ? conj(v) : v;
		}
	return w;
}

static int k_trmm(struct gpo_kernel *k, int solve)
{
	struct mat a = M(k, 0, 'M'), b = M(k, 1, 'M');
	Z al = k->alpha[0] + I * k->alpha[1];
	int left = k->opt[0] == 'L';
	int64_t p = left ? k->m : k->n, m = k->m, n = k->n;
	Z *t = tri_dense(&a, p, k->opt[1], k->opt[2], k->opt[3]);
	Z *r = zalloc(m, n);
	/* op(T) is lower triangular when exactly one of uplo = 'L' and a
	 * transpose holds. */
	int lower = (k->opt[1] == 'L') != (k->opt[2] != 'N');

	if (!t || !r) {
		free(t);
		free(r);
		return -1;
	}
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = 0; i < m; i++)
			W_(r, m, i, j) = al * get(&b, i, j);
	if (!solve) {
		Z *o = zalloc(m, n);
		if (!o) {
			free(t);
			free(r);
			return -1;
		}
		for (int64_t j = 0; j < n; j++)
			for (int64_t i = 0; i < m; i++) {
				Z s = 0;
				for (int64_t l = 0; l < p; l++)
					s += left ? W_(t, p, i, l) * W_(r, m, l, j) :
						    W_(r, m, i, l) * W_(t, p, l, j);
				W_(o, m, i, j) = s;
			}
		free(r);
		r = o;
	} else if (left) {      /* op(T) X = R, column by column */
		for (int64_t j = 0; j < n; j++)
			for (int64_t s = 0; s < p; s++) {
				int64_t i = lower ? s : p - 1 - s;
				Z v = W_(r, m, i, j);
				for (int64_t l = 0; l < p; l++)
					if (lower ? l < i : l > i)
						v -= W_(t, p, i, l) * W_(r, m, l, j);
				W_(r, m, i, j) = v / W_(t, p, i, i);
			}
	} else {                /* X op(T) = R, row by row */
		for (int64_t i = 0; i < m; i++)
			for (int64_t s = 0; s < p; s++) {
				int64_t j = lower ? p - 1 - s : s;
				Z v = W_(r, m, i, j);
				for (int64_t l = 0; l < p; l++)
					if (lower ? l > j : l < j)
						v -= W_(r, m, i, l) * W_(t, p, l, j);
				W_(r, m, i, j) = v / W_(t, p, j, j);
			}
	}
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = 0; i < m; i++)
			set(&b, i, j, W_(r, m, i, j));
	free(t);
	free(r);
	return 0;
}


int tb_kernel(struct gpo_kernel *k)
{
	k->info = 0;
	switch (k->op) {
	case GPO_OP_GEMM: return k_gemm(k);
	case GPO_OP_GEMV: return k_gemv(k);
	case GPO_OP_SYMM: return k_symm(k, 0);
	case GPO_OP_HEMM: return k_symm(k, 1);
	case GPO_OP_SYRK: return k_syrk(k, 0, 0);
	case GPO_OP_HERK: return k_syrk(k, 1, 0);
	case GPO_OP_SYR2K: return k_syrk(k, 0, 1);
	case GPO_OP_HER2K: return k_syrk(k, 1, 1);
	case GPO_OP_TRMM: return k_trmm(k, 0);
	case GPO_OP_TRSM: return k_trmm(k, 1);
	default: return tb_lapack(k);
	}
}
