/*
 * blas3.c - run() for BLAS level 3 on cuBLAS: gemm, symm, hemm, syrk,
 * herk, syr2k, her2k, trmm, trsm in s, d, c, z (and geam, for the
 * transposes of lapack.c), and the one level-2 operation, gemv (its x
 * and y are operands of one row whose ld is the increment: positive, as
 * the frontend sends only those; the device copies keep it).
 *
 * Entry points: cuBLAS 12 and later have 64-bit ones (cublasDgemm_v2_64);
 * they are used when present, else the 32-bit ones when every dimension
 * and leading dimension fits an int, else GPO_BE_UNSUPPORTED (the CPU
 * runs the call). Each name is looked up once (dlsym) and remembered.
 * Scalars are passed from the host (pointer mode host), converted from the
 * kernel's doubles to the precision's type. Option letters map as BLAS
 * defines them: 'C' is 'T' for real precisions.
 *
 * trmm: cuBLAS's is out of place (C = alpha op(A) B); passing B as C is
 * its documented in-place form, which is BLAS's. alpha = 0 in trmm and
 * trsm: BLAS sets B to zero without reading it (NaNs in B do not
 * propagate), so the backend does that itself rather than trust cuBLAS
 * to skip the product.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <stdio.h>
#include <string.h>

#include "gpc.h"

#define GPC__NOTFOUND ((void *)1)

/* The function cublas<P><base>[_v2][_64] in *fn, and whether it is the
 * 64-bit one. 0, or GPO_BE_UNSUPPORTED when neither form can take the
 * call. cache: [prec 0..3][0: 32-bit, 1: 64-bit]. */
static int gpc__fn(void *cache[4][2], const char *base, int v2, char prec,
		   int fits32, void **fn, int *is64)
{
	int pi = prec == 's' ? 0 : prec == 'd' ? 1 : prec == 'c' ? 2 : 3;

	for (int w = 1; w >= 0; w--) {
		if (!cache[pi][w]) {
			char name[64];
			void *f;
			snprintf(name, sizeof name, "cublas%c%s%s%s", gpc_P(prec),
				 base, v2 ? "_v2" : "", w ? "_64" : "");
			f = gpc_blas_sym(name);
			cache[pi][w] = f ? f : GPC__NOTFOUND;
		}
		if (cache[pi][w] != GPC__NOTFOUND && (w || fits32)) {
			*fn = cache[pi][w];
			*is64 = w;
			return 0;
		}
	}
	return GPO_BE_UNSUPPORTED;
}

static int gpc__fits(const int64_t *v, int n)
{
	for (int i = 0; i < n; i++)
		if (v[i] > 0x7fffffff)
			return 0;
	return 1;
}

/* alpha/beta in the precision's type (complex: two components). */
union gpc__scal {
	float f[2];
	double d[2];
};

static void gpc__scal(union gpc__scal *u, const double *v, char prec)
{
	if (prec == 's' || prec == 'c') {
		u->f[0] = (float)v[0];
		u->f[1] = (float)v[1];
	} else {
		u->d[0] = v[0];
		u->d[1] = v[1];
	}
}

static int gpc__side(char c) { return c == 'L' ? GPC_SIDE_LEFT : GPC_SIDE_RIGHT; }
static int gpc__fill(char c) { return c == 'U' ? GPC_FILL_UPPER : GPC_FILL_LOWER; }
static int gpc__diag(char c) { return c == 'U' ? GPC_DIAG_UNIT : GPC_DIAG_NON_UNIT; }

static int gpc__res(int st)
{
	return st == GPC_BLAS_OK ? 0 : -1;
}

/* Set an m x n matrix (ld elements of es bytes) to zero. */
static int gpc__zero(gpc_dptr p, int64_t ld, int64_t m, int64_t n, size_t es)
{
	if (m <= 0 || n <= 0)
		return 0;
	return gpc_cu.MemsetD2D8Async(p, (size_t)ld * es, 0, (size_t)m * es,
				      (size_t)n, gpc_st.stream) == 0 ? 0 : -1;
}

static int gpc__alpha_zero(const struct gpo_kernel *k)
{
	return k->alpha[0] == 0 && k->alpha[1] == 0;
}

#define D(i) ((const void *)k->buf[i])
#define W(i) ((void *)k->buf[i])

int gpc_run_blas(struct gpo_kernel *k)
{
	static void *c_gemm[4][2], *c_symm[4][2], *c_hemm[4][2], *c_syrk[4][2],
		*c_herk[4][2], *c_syr2k[4][2], *c_her2k[4][2], *c_trmm[4][2],
		*c_trsm[4][2], *c_gemv[4][2];
	const int64_t dims[] = { k->m, k->n, k->k, k->ld[0], k->ld[1], k->ld[2] };
	int fits = gpc__fits(dims, 6), is64 = 0, rc;
	union gpc__scal al, be;
	gpc_cublas h = gpc_st.blas;
	const char *o = k->opt;
	char p = k->prec;
	void *f = NULL;

	/* Leading dimensions of operands not referenced are still checked
	 * by cuBLAS: at least 1. */
	int64_t l0 = k->ld[0] > 0 ? k->ld[0] : 1, l1 = k->ld[1] > 0 ? k->ld[1] : 1,
		l2 = k->ld[2] > 0 ? k->ld[2] : 1;

	gpc__scal(&al, k->alpha, p);
	gpc__scal(&be, k->beta, p);
#define CALL(T32, T64, ...) (is64 ? ((T64)f)(__VA_ARGS__) : ((T32)f)(__VA_ARGS__))
	switch (k->op) {
	case GPO_OP_GEMM:
		if ((rc = gpc__fn(c_gemm, "gemm", 1, p, fits, &f, &is64)) != 0)
			return rc;
		return gpc__res(CALL(gpc_gemm32, gpc_gemm64, h, gpc_op(o[0], p),
				     gpc_op(o[1], p), k->m, k->n, k->k, &al, D(0), l0,
				     D(1), l1, &be, W(2), l2));
	case GPO_OP_GEMV:       /* m, n: A's rows and columns, as BLAS's */
		if (k->ld[1] < 1 || k->ld[2] < 1)
			return GPO_BE_UNSUPPORTED;
		if ((rc = gpc__fn(c_gemv, "gemv", 1, p, fits, &f, &is64)) != 0)
			return rc;
		return gpc__res(CALL(gpc_gemv32, gpc_gemv64, h, gpc_op(o[0], p),
				     k->m, k->n, &al, D(0), l0, D(1), k->ld[1],
				     &be, W(2), k->ld[2]));
	case GPO_OP_SYMM:
	case GPO_OP_HEMM:
		if ((rc = gpc__fn(k->op == GPO_OP_SYMM ? c_symm : c_hemm,
				  k->op == GPO_OP_SYMM ? "symm" : "hemm", 1, p,
				  fits, &f, &is64)) != 0)
			return rc;
		return gpc__res(CALL(gpc_symm32, gpc_symm64, h, gpc__side(o[0]),
				     gpc__fill(o[1]), k->m, k->n, &al, D(0), l0,
				     D(1), l1, &be, W(2), l2));
	case GPO_OP_SYRK:
	case GPO_OP_HERK:
		if ((rc = gpc__fn(k->op == GPO_OP_SYRK ? c_syrk : c_herk,
				  k->op == GPO_OP_SYRK ? "syrk" : "herk", 1, p,
				  fits, &f, &is64)) != 0)
			return rc;
		if (k->op == GPO_OP_HERK) {     /* real alpha and beta */
			gpc__scal(&al, (const double[2]){ k->alpha[0], 0 }, p);
			gpc__scal(&be, (const double[2]){ k->beta[0], 0 }, p);
		}
		return gpc__res(CALL(gpc_syrk32, gpc_syrk64, h, gpc__fill(o[0]),
				     gpc_op(o[1], p), k->n, k->k, &al, D(0), l0,
				     &be, W(1), l1));
	case GPO_OP_SYR2K:
	case GPO_OP_HER2K:
		if ((rc = gpc__fn(k->op == GPO_OP_SYR2K ? c_syr2k : c_her2k,
				  k->op == GPO_OP_SYR2K ? "syr2k" : "her2k", 1, p,
				  fits, &f, &is64)) != 0)
			return rc;
		if (k->op == GPO_OP_HER2K)      /* real beta */
			gpc__scal(&be, (const double[2]){ k->beta[0], 0 }, p);
		return gpc__res(CALL(gpc_syr2k32, gpc_syr2k64, h, gpc__fill(o[0]),
				     gpc_op(o[1], p), k->n, k->k, &al, D(0), l0,
				     D(1), l1, &be, W(2), l2));
	case GPO_OP_TRMM:
		if (gpc__alpha_zero(k))
			return gpc__zero((gpc_dptr)(uintptr_t)k->buf[1], l1, k->m,
					 k->n, gpc_esize(p, 0));
		if ((rc = gpc__fn(c_trmm, "trmm", 1, p, fits, &f, &is64)) != 0)
			return rc;
		return gpc__res(CALL(gpc_trmm32, gpc_trmm64, h, gpc__side(o[0]),
				     gpc__fill(o[1]), gpc_op(o[2], p),
				     gpc__diag(o[3]), k->m, k->n, &al, D(0), l0,
				     D(1), l1, W(1), l1));
	case GPO_OP_TRSM:
		if (gpc__alpha_zero(k))
			return gpc__zero((gpc_dptr)(uintptr_t)k->buf[1], l1, k->m,
					 k->n, gpc_esize(p, 0));
		if ((rc = gpc__fn(c_trsm, "trsm", 1, p, fits, &f, &is64)) != 0)
			return rc;
		return gpc__res(CALL(gpc_trsm32, gpc_trsm64, h, gpc__side(o[0]),
				     gpc__fill(o[1]), gpc_op(o[2], p),
				     gpc__diag(o[3]), k->m, k->n, &al, D(0), l0,
				     W(1), l1));
	default:
		return GPO_BE_UNSUPPORTED;
	}
}

int gpc_trsm(char prec, int side, int uplo, int trans, int diag, int64_t m,
	     int64_t n, gpc_dptr a, int64_t lda, gpc_dptr b, int64_t ldb)
{
	static void *c_trsm[4][2];
	const int64_t dims[] = { m, n, lda, ldb };
	const double one[2] = { 1, 0 };
	union gpc__scal al;
	void *f = NULL;
	int is64 = 0, rc;

	if ((rc = gpc__fn(c_trsm, "trsm", 1, prec, gpc__fits(dims, 4), &f,
			  &is64)) != 0)
		return rc;
	gpc__scal(&al, one, prec);
	return gpc__res(CALL(gpc_trsm32, gpc_trsm64, gpc_st.blas, side, uplo,
			     trans, diag, m, n, &al, (const void *)(uintptr_t)a,
			     lda, (void *)(uintptr_t)b, ldb));
}

int gpc_transpose(char prec, int64_t rows, int64_t cols, gpc_dptr src,
		  int64_t lds, gpc_dptr dst, int64_t ldd)
{
	static void *c_geam[4][2];
	const int64_t dims[] = { rows, cols, lds, ldd };
	const double one[2] = { 1, 0 }, zero[2] = { 0, 0 };
	union gpc__scal al, be;
	void *f = NULL;
	int is64 = 0, rc;

	if ((rc = gpc__fn(c_geam, "geam", 0, prec, gpc__fits(dims, 4), &f,
			  &is64)) != 0)
		return rc;
	gpc__scal(&al, one, prec);
	gpc__scal(&be, zero, prec);
	/* dst = op(src) + 0 * dst: cuBLAS does not read B when beta is 0;
	 * B = C (ldb = ldc, no transpose) is its documented in-place form. */
	return gpc__res(CALL(gpc_geam32, gpc_geam64, gpc_st.blas,
			     gpc_op('C', prec), GPC_OP_N, cols, rows, &al,
			     (const void *)(uintptr_t)src, lds, &be,
			     (const void *)(uintptr_t)dst, ldd,
			     (void *)(uintptr_t)dst, ldd));
}
