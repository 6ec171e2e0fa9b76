/*
 * lapack.c - run() for the LAPACK operations on cuSOLVER (dense):
 * getrf getrs gesv potrf potrs posv, syev syevd heev heevd, gesvd gesdd,
 * geqrf, gels, in s, d, c, z, with LAPACK's conventions (backend.h,
 * tools/offload_ops.py's table: operands, shapes, options).
 *
 * Integers: the only integer operands are getrf/getrs/gesv's pivots, in
 * the caller's width: 64-bit callers (the scipy_*_64_ names) get the
 * 64-bit generic API (cusolverDnXgetrf/Xgetrs, int64_t pivots), 32-bit
 * callers the legacy one (cusolverDn<t>getrf/getrs, int pivots). The
 * operations without pivots use the generic API (64-bit dimensions) for
 * both: potrf, potrs, syevd (for syev too: the eigenvalues are the same,
 * the eigenvectors are defined up to a sign or phase either way), gesvd
 * (for gesdd too, its jobz as jobu = jobvt), geqrf. gels's Q^H B is
 * ormqr/unmqr, which exists only in the legacy API: dimensions beyond
 * 2^31-1 there are UNSUPPORTED.
 *
 * info: each cuSOLVER call of a run writes its own device slot
 * (gpc_small_info, xsmall.h), read back with the results after the run's
 * one wait (backend.c), the first nonzero one becoming k->info: LAPACK's
 * meaning for every operation used (a zero pivot, a minor not positive
 * definite, not converged); a negative one (an argument cuSOLVER refused)
 * fails the call, which then runs on the CPU. So a run does not stop
 * between its steps to look at an info: gesv's getrs (posv's potrs) runs
 * after a singular factorisation too, harmlessly (its result is not used:
 * a nonzero info reruns the call on the CPU).
 *
 * Workspaces: the size cuSOLVER asks for is remembered per function and
 * shape (the query is made once per shape); a workspace of at most
 * GPC_WS_KEEP bytes (lapack_ws.c) is kept between calls and grows when a call needs
 * more; a larger one comes from the pool for the call and goes back after
 * a wait (so that the pool's bound and idle release apply to it).
 *
 * UNSUPPORTED (the CPU library runs the call, exactly): any zero
 * dimension (LAPACK's quick returns); gels with m < n (an underdetermined
 * 'N' or an overdetermined 'T' system needs an LQ factorisation, which
 * cuSOLVER lacks), with 'C' in a real or 'T' in a complex precision
 * (LAPACK refuses those with info < 0, and so must the result); names a
 * library lacks.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpc.h"
#include "xfer.h"
#include "xsmall.h"
#include "lapack_ws.h"

#define GPC__NOTFOUND ((void *)1)
#define DP(i) ((gpc_dptr)(uintptr_t)k->buf[i])

static int gpc__pi(char prec)
{
	return prec == 's' ? 0 : prec == 'd' ? 1 : prec == 'c' ? 2 : 3;
}

/* cuSOLVER's function `name`, remembered in *cache; NULL if absent. */
static void *gpc__sym(void **cache, const char *name)
{
	if (!*cache) {
		void *f = gpc_solver_sym(name);
		*cache = f ? f : GPC__NOTFOUND;
	}
	return *cache == GPC__NOTFOUND ? NULL : *cache;
}

/* The legacy per-precision function: cusolverDn<P><base><suffix>. */
static void *gpc__psym(void *cache[4], char prec, const char *base,
		       const char *suffix)
{
	char name[64];
	void **c = &cache[gpc__pi(prec)];

	/* The name only when it is not looked up yet: formatting it cost
	 * more than the rest of a small call's host work. */
	if (*c)
		return *c == GPC__NOTFOUND ? NULL : *c;
	snprintf(name, sizeof name, "cusolverDn%c%s%s", gpc_P(prec), base,
		 suffix);
	return gpc__sym(c, name);
}

static int gpc__fits(int64_t v)
{
	return v >= 0 && v <= 0x7fffffff;
}

static int gpc__ok(int st)
{
	return st == GPC_BLAS_OK ? 0 : -1;
}

#define WS(w) (void *)(uintptr_t)(w).dev, (w).dbytes, (w).host, (w).hbytes

static int gpc__fill(char c) { return c == 'U' ? GPC_FILL_UPPER : GPC_FILL_LOWER; }

/* ---- LU ------------------------------------------------------------------ */

int gpc_getrf_q(struct gpo_kernel *k, int64_t m, int64_t n, gpc_dptr a,
		int64_t lda, gpc_dptr ipiv, struct gpc_ws *wp)
{
	static void *c_xbs, *c_x, *c_bs[4], *c_f[4];
	static struct gpc_wsq q_x, q_l;
	int dt = gpc_dtype(k->prec, 0), rc = -1;
	struct gpc_ws w = { 0 };
	const int64_t key[8] = { m, n, lda, dt };

	if (k->int64) {
		gpc_xgetrf_bs bs = (gpc_xgetrf_bs)gpc__sym(&c_xbs, "cusolverDnXgetrf_bufferSize");
		gpc_xgetrf f = (gpc_xgetrf)gpc__sym(&c_x, "cusolverDnXgetrf");
		if (!bs || !f)
			return GPO_BE_UNSUPPORTED;
		if (!gpc_wsq_hit(&q_x, key, &w)) {
			if (bs(gpc_st.solver, gpc_st.params, m, n, dt,
			       (const void *)(uintptr_t)a, lda, dt, &w.dbytes,
			       &w.hbytes) != 0)
				return -1;
			gpc_wsq_put(&q_x, key, &w);
		}
		if (gpc_ws_get(&w) == 0)
			rc = gpc__ok(f(gpc_st.solver, gpc_st.params, m, n, dt,
				       (void *)(uintptr_t)a, lda,
				       (int64_t *)(uintptr_t)ipiv, dt, WS(w),
				       gpc_small_info()));
	} else {
		gpc_getrf_bs bs = (gpc_getrf_bs)gpc__psym(c_bs, k->prec, "getrf", "_bufferSize");
		gpc_getrf32 f = (gpc_getrf32)gpc__psym(c_f, k->prec, "getrf", "");
		int lw = 0;
		if (!bs || !f || !gpc__fits(m) || !gpc__fits(n) || !gpc__fits(lda))
			return GPO_BE_UNSUPPORTED;
		if (!gpc_wsq_hit(&q_l, key, &w)) {
			if (bs(gpc_st.solver, (int)m, (int)n, (void *)(uintptr_t)a,
			       (int)lda, &lw) != 0 || lw < 0)
				return -1;
			w.dbytes = (size_t)lw * gpc_esize(k->prec, 0);
			gpc_wsq_put(&q_l, key, &w);
		}
		if (gpc_ws_get(&w) == 0)
			rc = gpc__ok(f(gpc_st.solver, (int)m, (int)n,
				       (void *)(uintptr_t)a, (int)lda,
				       (void *)(uintptr_t)w.dev,
				       (int *)(uintptr_t)ipiv, gpc_small_info()));
	}
	*wp = w;        /* the caller's to give back, after a wait */
	return rc;
}

static int gpc__getrf(struct gpo_kernel *k, int64_t m, int64_t n, gpc_dptr a,
		      int64_t lda, gpc_dptr ipiv)
{
	struct gpc_ws w = { 0 };
	int rc = gpc_getrf_q(k, m, n, a, lda, ipiv, &w);

	gpc_ws_put(&w);
	return rc;
}

int gpc_getrs(struct gpo_kernel *k, char trans, int64_t n, int64_t nrhs,
	      gpc_dptr a, int64_t lda, gpc_dptr ipiv, gpc_dptr b, int64_t ldb)
{
	static void *c_x, *c_f[4];
	int dt = gpc_dtype(k->prec, 0), op = gpc_op(trans, k->prec), rc;

	if (k->int64) {
		gpc_xgetrs f = (gpc_xgetrs)gpc__sym(&c_x, "cusolverDnXgetrs");
		if (!f)
			return GPO_BE_UNSUPPORTED;
		rc = gpc__ok(f(gpc_st.solver, gpc_st.params, op, n, nrhs, dt,
			       (const void *)(uintptr_t)a, lda,
			       (const int64_t *)(uintptr_t)ipiv, dt,
			       (void *)(uintptr_t)b, ldb,
			       gpc_small_info()));
	} else {
		gpc_getrs32 f = (gpc_getrs32)gpc__psym(c_f, k->prec, "getrs", "");
		if (!f || !gpc__fits(n) || !gpc__fits(nrhs) || !gpc__fits(lda) ||
		    !gpc__fits(ldb))
			return GPO_BE_UNSUPPORTED;
		rc = gpc__ok(f(gpc_st.solver, op, (int)n, (int)nrhs,
			       (const void *)(uintptr_t)a, (int)lda,
			       (const int *)(uintptr_t)ipiv,
			       (void *)(uintptr_t)b, (int)ldb,
			       gpc_small_info()));
	}
	return rc;
}

/* ---- Cholesky ------------------------------------------------------------ */

int gpc_potrf_q(struct gpo_kernel *k, char uplo, int64_t n, gpc_dptr a,
		int64_t lda, struct gpc_ws *wp)
{
	static void *c_bs, *c_f;
	gpc_xpotrf_bs bs = (gpc_xpotrf_bs)gpc__sym(&c_bs, "cusolverDnXpotrf_bufferSize");
	gpc_xpotrf f = (gpc_xpotrf)gpc__sym(&c_f, "cusolverDnXpotrf");
	int dt = gpc_dtype(k->prec, 0), rc = -1;
	struct gpc_ws w = { 0 };
	static struct gpc_wsq q;
	const int64_t key[8] = { n, lda, dt, gpc__fill(uplo) };

	if (!bs || !f)
		return GPO_BE_UNSUPPORTED;
	if (!gpc_wsq_hit(&q, key, &w)) {
		if (bs(gpc_st.solver, gpc_st.params, gpc__fill(uplo), n, dt,
		       (const void *)(uintptr_t)a, lda, dt, &w.dbytes,
		       &w.hbytes) != 0)
			return -1;
		gpc_wsq_put(&q, key, &w);
	}
	if (gpc_ws_get(&w) == 0)
		rc = gpc__ok(f(gpc_st.solver, gpc_st.params, gpc__fill(uplo), n,
			       dt, (void *)(uintptr_t)a, lda, dt, WS(w),
			       gpc_small_info()));
	*wp = w;        /* the caller's to give back, after a wait */
	return rc;
}

static int gpc__potrf(struct gpo_kernel *k, char uplo, int64_t n, gpc_dptr a,
		      int64_t lda)
{
	struct gpc_ws w = { 0 };
	int rc = gpc_potrf_q(k, uplo, n, a, lda, &w);

	gpc_ws_put(&w);
	return rc;
}

int gpc_potrs(struct gpo_kernel *k, char uplo, int64_t n, int64_t nrhs,
	      gpc_dptr a, int64_t lda, gpc_dptr b, int64_t ldb)
{
	static void *c_f;
	gpc_xpotrs f = (gpc_xpotrs)gpc__sym(&c_f, "cusolverDnXpotrs");
	int dt = gpc_dtype(k->prec, 0), rc;

	if (!f)
		return GPO_BE_UNSUPPORTED;
	rc = gpc__ok(f(gpc_st.solver, gpc_st.params, gpc__fill(uplo), n, nrhs,
		       dt, (const void *)(uintptr_t)a, lda, dt,
		       (void *)(uintptr_t)b, ldb, gpc_small_info()));
	return rc;
}

/* ---- Symmetric / Hermitian eigenproblem ----------------------------------- */

static int gpc__syevd(struct gpo_kernel *k)
{
	static void *c_bs, *c_f;
	gpc_xsyevd_bs bs = (gpc_xsyevd_bs)gpc__sym(&c_bs, "cusolverDnXsyevd_bufferSize");
	gpc_xsyevd f = (gpc_xsyevd)gpc__sym(&c_f, "cusolverDnXsyevd");
	int dt = gpc_dtype(k->prec, 0), dw = gpc_dtype(k->prec, 1), rc = -1;
	int jobz = k->opt[0] == 'V' ? GPC_EIG_VECTOR : GPC_EIG_NOVECTOR;
	struct gpc_ws w = { 0 };
	static struct gpc_wsq q;
	const int64_t key[8] = { k->n, k->ld[0], dt, dw, jobz, gpc__fill(k->opt[1]) };

	if (!bs || !f)
		return GPO_BE_UNSUPPORTED;
	if (!gpc_wsq_hit(&q, key, &w)) {
		if (bs(gpc_st.solver, gpc_st.params, jobz, gpc__fill(k->opt[1]),
		       k->n, dt, k->buf[0], k->ld[0], dw, k->buf[1], dt,
		       &w.dbytes, &w.hbytes) != 0)
			return -1;
		gpc_wsq_put(&q, key, &w);
	}
	if (gpc_ws_get(&w) == 0)
		rc = gpc__ok(f(gpc_st.solver, gpc_st.params, jobz,
			       gpc__fill(k->opt[1]), k->n, dt, k->buf[0],
			       k->ld[0], dw, k->buf[1], dt, WS(w),
			       gpc_small_info()));
	gpc_ws_put(&w);
	return rc;
}

/* ---- SVD ------------------------------------------------------------------ */

/* cusolverDnXgesvd on an m x n matrix with m >= n (cuSOLVER's limit). */
static int gpc__xgesvd(struct gpo_kernel *k, char ju, char jv, int64_t m,
		       int64_t n, gpc_dptr a, int64_t lda, gpc_dptr s,
		       gpc_dptr u, int64_t ldu, gpc_dptr vt, int64_t ldvt)
{
	static void *c_bs, *c_f;
	gpc_xgesvd_bs bs = (gpc_xgesvd_bs)gpc__sym(&c_bs, "cusolverDnXgesvd_bufferSize");
	gpc_xgesvd f = (gpc_xgesvd)gpc__sym(&c_f, "cusolverDnXgesvd");
	int dt = gpc_dtype(k->prec, 0), dr = gpc_dtype(k->prec, 1), rc = -1;
	struct gpc_ws w = { 0 };
	void *A = (void *)(uintptr_t)a, *S = (void *)(uintptr_t)s,
	     *U = (void *)(uintptr_t)u, *VT = (void *)(uintptr_t)vt;

	if (!bs || !f)
		return GPO_BE_UNSUPPORTED;
	static struct gpc_wsq q;
	const int64_t key[8] = { m, n, lda, ldu, ldvt, dt, ju, jv };

	if (!gpc_wsq_hit(&q, key, &w)) {
		if (bs(gpc_st.solver, gpc_st.params, (signed char)ju,
		       (signed char)jv, m, n, dt, A, lda, dr, S, dt, U, ldu, dt,
		       VT, ldvt, dt, &w.dbytes, &w.hbytes) != 0)
			return -1;
		gpc_wsq_put(&q, key, &w);
	}
	if (gpc_ws_get(&w) == 0)
		rc = gpc__ok(f(gpc_st.solver, gpc_st.params, (signed char)ju,
			       (signed char)jv, m, n, dt, A, lda, dr, S, dt, U,
			       ldu, dt, VT, ldvt, dt, WS(w),
			       gpc_small_info()));
	gpc_ws_put(&w);
	return rc;
}

/* gesvd (jobu = opt[0], jobvt = opt[1]) and gesdd (jobz = opt[0], both).
 * m < n: the SVD of A^H (n x m), A^H = U2 S VT2 gives A = VT2^H S U2^H,
 * so U = VT2^H and VT = U2^H, with the jobs swapped. */
static int gpc__gesvd(struct gpo_kernel *k, int dd)
{
	char ju = k->opt[0], jv = dd ? k->opt[0] : k->opt[1];
	int64_t m = k->m, n = k->n;
	size_t es = gpc_esize(k->prec, 0);
	gpc_dptr at = 0, u2 = 0, vt2 = 0;
	int64_t ldu = k->buf[2] ? k->ld[2] : m, ldvt = k->buf[3] ? k->ld[3] : n;
	int64_t u2cols = jv == 'A' ? n : m;
	int rc = -1;

	if ((ju != 'A' && ju != 'S' && ju != 'N') ||
	    (jv != 'A' && jv != 'S' && jv != 'N'))
		return GPO_BE_UNSUPPORTED;
	if (m >= n)
		return gpc__xgesvd(k, ju, jv, m, n, DP(0), k->ld[0], DP(1), DP(2),
				   ldu, DP(3), ldvt);
	at = gpc_scratch((uint64_t)n * (uint64_t)m * es);
	if (jv != 'N')
		u2 = gpc_scratch((uint64_t)n * (uint64_t)u2cols * es);
	if (ju != 'N')
		vt2 = gpc_scratch((uint64_t)m * (uint64_t)m * es);
	if (!at || (jv != 'N' && !u2) || (ju != 'N' && !vt2))
		goto out;
	if ((rc = gpc_transpose(k->prec, m, n, DP(0), k->ld[0], at, n)) != 0)
		goto out;
	rc = gpc__xgesvd(k, jv, ju, n, m, at, n, DP(1), u2, n, vt2, m);
	if (rc != 0 || k->info != 0)
		goto out;
	if (jv != 'N' &&
	    (rc = gpc_transpose(k->prec, n, u2cols, u2, n, DP(3), k->ld[3])) != 0)
		goto out;
	if (ju != 'N' &&
	    (rc = gpc_transpose(k->prec, m, m, vt2, m, DP(2), k->ld[2])) != 0)
		goto out;
	/* LAPACK destroys A (the frontend copies it back, and callers test
	 * that it changed): here A^H was factored in a copy, so what the
	 * factorisation left of the copy goes back into A. */
	rc = gpc_transpose(k->prec, n, m, at, n, DP(0), k->ld[0]);
out:
	/* The transposes may still read or write them. */
	(void)gpc_sync();
	if (at)
		gpc_pool_free(at);
	if (u2)
		gpc_pool_free(u2);
	if (vt2)
		gpc_pool_free(vt2);
	return rc;
}

/* ---- QR and least squares --------------------------------------------------- */

static int gpc__geqrf(struct gpo_kernel *k, int64_t m, int64_t n, gpc_dptr a,
		      int64_t lda, gpc_dptr tau)
{
	static void *c_bs, *c_f;
	gpc_xgeqrf_bs bs = (gpc_xgeqrf_bs)gpc__sym(&c_bs, "cusolverDnXgeqrf_bufferSize");
	gpc_xgeqrf f = (gpc_xgeqrf)gpc__sym(&c_f, "cusolverDnXgeqrf");
	int dt = gpc_dtype(k->prec, 0), rc = -1;
	struct gpc_ws w = { 0 };
	void *A = (void *)(uintptr_t)a, *T = (void *)(uintptr_t)tau;

	if (!bs || !f)
		return GPO_BE_UNSUPPORTED;
	static struct gpc_wsq q;
	const int64_t key[8] = { m, n, lda, dt };

	if (!gpc_wsq_hit(&q, key, &w)) {
		if (bs(gpc_st.solver, gpc_st.params, m, n, dt, A, lda, dt, T,
		       dt, &w.dbytes, &w.hbytes) != 0)
			return -1;
		gpc_wsq_put(&q, key, &w);
	}
	if (gpc_ws_get(&w) == 0)
		rc = gpc__ok(f(gpc_st.solver, gpc_st.params, m, n, dt, A, lda,
			       dt, T, dt, WS(w), gpc_small_info()));
	gpc_ws_put(&w);
	return rc;
}

/* C = op(Q) C with Q from geqrf (m x k reflectors), C m x n: ormqr for
 * real, unmqr for complex precisions. */
static int gpc__ormqr(struct gpo_kernel *k, int trans, int64_t m, int64_t n,
		      int64_t kk, gpc_dptr a, int64_t lda, gpc_dptr tau,
		      gpc_dptr c, int64_t ldc)
{
	static void *c_bs[4], *c_f[4];
	const char *base = (k->prec == 's' || k->prec == 'd') ? "ormqr" : "unmqr";
	gpc_ormqr_bs bs = (gpc_ormqr_bs)gpc__psym(c_bs, k->prec, base, "_bufferSize");
	gpc_ormqr f = (gpc_ormqr)gpc__psym(c_f, k->prec, base, "");
	const void *A = (const void *)(uintptr_t)a, *T = (const void *)(uintptr_t)tau;
	void *C = (void *)(uintptr_t)c;
	gpc_dptr ws;
	int lw = 0, rc;

	if (!bs || !f || !gpc__fits(m) || !gpc__fits(n) || !gpc__fits(kk) ||
	    !gpc__fits(lda) || !gpc__fits(ldc))
		return GPO_BE_UNSUPPORTED;
	if (bs(gpc_st.solver, GPC_SIDE_LEFT, trans, (int)m, (int)n, (int)kk, A,
	       (int)lda, T, C, (int)ldc, &lw) != 0 || lw < 0)
		return -1;
	if (!(ws = gpc_scratch((uint64_t)lw * gpc_esize(k->prec, 0))))
		return -1;
	rc = gpc__ok(f(gpc_st.solver, GPC_SIDE_LEFT, trans, (int)m, (int)n,
		       (int)kk, A, (int)lda, T, C, (int)ldc,
		       (void *)(uintptr_t)ws, lw, gpc_small_info()));
	(void)gpc_sync();       /* the work using ws, before it goes back */
	gpc_pool_free(ws);
	return rc;
}

/* LAPACK's gels (through trtrs) reports R(i,i) == 0 exactly as info = i:
 * the diagonal of the n x n R, read back. 0 (k->info set when singular)
 * or -1. */
static int gpc__rdiag(struct gpo_kernel *k, int64_t n)
{
	size_t es = gpc_esize(k->prec, 0), ec = gpc_esize(k->prec, 1);
	unsigned char *d = malloc((size_t)n * es);
	int rc = -1;

	if (!d)
		return -1;
	if (gpc_sync() == 0 &&
	    gpc_d2h(d, es, DP(0), (uint64_t)(k->ld[0] + 1) * es, es,
		    (uint64_t)n, 0) == 0) {
		rc = 0;
		for (int64_t i = 0; i < n && !k->info; i++) {
			int zero = 1;
			for (size_t c = 0; c < es / ec; c++) {
				const unsigned char *x = d + (size_t)i * es + c * ec;
				float f;
				double v;
				if (ec == 4) {
					memcpy(&f, x, sizeof f);
					v = f;
				} else {
					memcpy(&v, x, sizeof v);
				}
				if (v != 0)
					zero = 0;
			}
			if (zero)
				k->info = i + 1;
		}
	}
	free(d);
	return rc;
}

static int gpc__gels(struct gpo_kernel *k)
{
	int64_t m = k->m, n = k->n, nrhs = k->nrhs;
	int real = k->prec == 's' || k->prec == 'd';
	char t = k->opt[0];
	size_t es = gpc_esize(k->prec, 0);
	gpc_dptr tau;
	int rc;

	if (m < n || (real && t == 'C') || (!real && t == 'T'))
		return GPO_BE_UNSUPPORTED;
	if (!(tau = gpc_scratch((uint64_t)n * es)))
		return -1;
	rc = gpc__geqrf(k, m, n, DP(0), k->ld[0], tau);
	if (rc != 0 || k->info)
		goto out;
	if (t == 'N') {
		/* min |A x - b|: x = R^-1 (Q^H b)(1:n) */
		rc = gpc__ormqr(k, gpc_op('C', k->prec), m, nrhs, n, DP(0),
				k->ld[0], tau, DP(1), k->ld[1]);
		if (rc == 0 && !k->info)
			rc = gpc__rdiag(k, n);
		if (rc == 0 && !k->info)
			rc = gpc_trsm(k->prec, GPC_SIDE_LEFT, GPC_FILL_UPPER,
				      GPC_OP_N, GPC_DIAG_NON_UNIT, n, nrhs,
				      DP(0), k->ld[0], DP(1), k->ld[1]);
	} else {
		/* min |x| with A^H x = b: x = Q [R^-H b; 0] */
		rc = gpc__rdiag(k, n);
		if (rc == 0 && !k->info)
			rc = gpc_trsm(k->prec, GPC_SIDE_LEFT, GPC_FILL_UPPER,
				      gpc_op('C', k->prec), GPC_DIAG_NON_UNIT, n,
				      nrhs, DP(0), k->ld[0], DP(1), k->ld[1]);
		if (rc == 0 && !k->info && m > n &&
		    gpc_cu.MemsetD2D8Async(DP(1) + (gpc_dptr)n * es,
					   (size_t)k->ld[1] * es, 0,
					   (size_t)(m - n) * es, (size_t)nrhs,
					   gpc_st.stream) != 0)
			rc = -1;
		if (rc == 0 && !k->info)
			rc = gpc__ormqr(k, GPC_OP_N, m, nrhs, n, DP(0), k->ld[0],
					tau, DP(1), k->ld[1]);
	}
out:
	(void)gpc_sync();
	gpc_pool_free(tau);
	return rc;
}

/* ---- Dispatch ------------------------------------------------------------------ */

int gpc_run_lapack(struct gpo_kernel *k)
{
	int rc;

	/* LAPACK's quick returns for empty problems: the CPU's, exactly. */
	switch (k->op) {
	case GPO_OP_GETRF: case GPO_OP_GESVD: case GPO_OP_GESDD:
	case GPO_OP_GEQRF:
		if (k->m <= 0 || k->n <= 0)
			return GPO_BE_UNSUPPORTED;
		break;
	case GPO_OP_GELS:
		if (k->m <= 0 || k->n <= 0 || k->nrhs <= 0)
			return GPO_BE_UNSUPPORTED;
		break;
	case GPO_OP_GETRS: case GPO_OP_GESV: case GPO_OP_POTRS:
	case GPO_OP_POSV:
		if (k->n <= 0 || k->nrhs <= 0)
			return GPO_BE_UNSUPPORTED;
		break;
	default:
		if (k->n <= 0)
			return GPO_BE_UNSUPPORTED;
	}
	switch (k->op) {
	case GPO_OP_GETRF:
		return gpc__getrf(k, k->m, k->n, DP(0), k->ld[0], DP(1));
	case GPO_OP_GETRS:
		return gpc_getrs(k, k->opt[0], k->n, k->nrhs, DP(0), k->ld[0],
				  DP(1), DP(2), k->ld[2]);
	case GPO_OP_GESV:
		rc = gpc__getrf(k, k->n, k->n, DP(0), k->ld[0], DP(1));
		if (rc != 0 || k->info)
			return rc;
		return gpc_getrs(k, 'N', k->n, k->nrhs, DP(0), k->ld[0], DP(1),
				  DP(2), k->ld[2]);
	case GPO_OP_POTRF:
		return gpc__potrf(k, k->opt[0], k->n, DP(0), k->ld[0]);
	case GPO_OP_POTRS:
		return gpc_potrs(k, k->opt[0], k->n, k->nrhs, DP(0), k->ld[0],
				  DP(1), k->ld[1]);
	case GPO_OP_POSV:
		rc = gpc__potrf(k, k->opt[0], k->n, DP(0), k->ld[0]);
		if (rc != 0 || k->info)
			return rc;
		return gpc_potrs(k, k->opt[0], k->n, k->nrhs, DP(0), k->ld[0],
				  DP(1), k->ld[1]);
	case GPO_OP_SYEV: case GPO_OP_HEEV: case GPO_OP_SYEVD: case GPO_OP_HEEVD:
		return gpc__syevd(k);
	case GPO_OP_GESVD:
		return gpc__gesvd(k, 0);
	case GPO_OP_GESDD:
		return gpc__gesvd(k, 1);
	case GPO_OP_GEQRF:
		return gpc__geqrf(k, k->m, k->n, DP(0), k->ld[0], DP(1));
	case GPO_OP_GELS:
		return gpc__gels(k);
	default:
		return GPO_BE_UNSUPPORTED;
	}
}
