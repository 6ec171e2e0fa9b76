/*
 * fakelin.c - the stand-in cuSOLVER's factorisations and solves (part of
 * fakesolver.c's libraries, which see): getrf, getrs, potrf, potrs.
 */
#define _GNU_SOURCE
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fakesolver.h"

/* ---- Factorisations and solves, in s, d, c, z --------------------------------
 *
 * getrf (partial pivoting, LAPACK's rule: the first largest |re| + |im|,
 * |x| for real), getrs ('N'), potrf and potrs (lower and upper), in the
 * generic 64-bit API (data types 0 s, 1 d, 4 c, 5 z) and getrf/getrs in
 * the legacy 32-bit one (cusolverDn<t>getrf...). Computed in double
 * complex on a copy of the matrix and stored back in the precision: exact
 * for the tests' operands (dyadic values, power-of-two pivots), so that
 * the results equal the CPU LAPACK's bit for bit. Each call is queued on
 * the handle's stream and runs at the program's wait (fakedev_defer), as
 * a kernel on the device: a copy of its results on another stream before
 * that wait reads what was there before. FAKESOLVER_FAIL_SOLVE=N: the
 * N-th of these calls fails at its call (queueing nothing);
 * FAKESOLVER_FAIL_RUN=N: the N-th queued one fails when it runs (the wait
 * reports it). FAKESOLVER_WS=bytes: the device workspace every query of
 * these answers (else a small one).
 */

enum { FS_GETRF, FS_GETRS, FS_POTRF, FS_POTRS };

struct fs_lin {
	int kind;
	char p;
	int up, piv64;
	int64_t m, n, nrhs, lda, ldb;
	char *a, *b;
	void *piv;
	int *info;
};

static long fs_fail_solve = -1, fs_fail_run = -1;

static long fs_envl(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? strtol(v, NULL, 10) : 0;
}

static size_t fs_ws(size_t dflt)
{
	long v = fs_envl("FAKESOLVER_WS");

	return v > 0 ? (size_t)v : dflt;
}

static char fs_prec(int dt)
{
	return dt == 0 ? 's' : dt == 1 ? 'd' : dt == 4 ? 'c' : dt == 5 ? 'z' : 0;
}

static double fs_abs1(char p, double complex v)
{
	return p == 'c' || p == 'z' ? fabs(creal(v)) + fabs(cimag(v)) : fabs(creal(v));
}

/* x / y, part by part when y is real (exact for a power of two). */
static double complex fs_div(double complex x, double complex y)
{
	if (cimag(y) == 0)
		return CMPLX(creal(x) / creal(y), cimag(x) / creal(y));
	return x / y;
}

static double complex *fs_load(char p, const char *a, int64_t lda,
			       int64_t rows, int64_t cols)
{
	double complex *w = malloc(sizeof *w * (size_t)(rows * cols + 1));

	for (int64_t j = 0; w && j < cols; j++)
		for (int64_t i = 0; i < rows; i++)
			w[j * rows + i] = fs_ld(p, a, j * lda + i);
	return w;
}

static void fs_store(char p, char *a, int64_t lda, const double complex *w,
		     int64_t rows, int64_t cols)
{
	for (int64_t j = 0; j < cols; j++)
		for (int64_t i = 0; i < rows; i++)
			fs_st(p, a, j * lda + i, w[j * rows + i]);
}

#define W_(i, j) w[(int64_t)(j) * m + (i)]

static int fs_getrf(const struct fs_lin *g, double complex *w, int64_t *piv)
{
	int64_t m = g->m, n = g->n;
	int info = 0;

	for (int64_t j = 0; j < (m < n ? m : n); j++) {
		int64_t p = j;
		for (int64_t i = j + 1; i < m; i++)
			if (fs_abs1(g->p, W_(i, j)) > fs_abs1(g->p, W_(p, j)))
				p = i;
		piv[j] = p + 1;
		if (W_(p, j) == 0) {
			if (!info)
				info = (int)j + 1;
			continue;
		}
		if (p != j)
			for (int64_t c = 0; c < n; c++) {
				double complex t = W_(j, c);
				W_(j, c) = W_(p, c);
				W_(p, c) = t;
			}
		for (int64_t i = j + 1; i < m; i++)
			W_(i, j) = fs_div(W_(i, j), W_(j, j));
		for (int64_t c = j + 1; c < n; c++)
			for (int64_t i = j + 1; i < m; i++)
				W_(i, c) -= W_(i, j) * W_(j, c);
	}
	return info;
}

static void fs_getrs(const struct fs_lin *g, const double complex *w,
		     const int64_t *piv, double complex *x0)
{
	int64_t n = g->n, m = n;       /* W_ has n rows */

	for (int64_t r = 0; r < g->nrhs; r++) {
		double complex *x = x0 + r * n;
		for (int64_t i = 0; i < n; i++) {
			double complex t = x[i];
			x[i] = x[piv[i] - 1];
			x[piv[i] - 1] = t;
		}
		for (int64_t i = 0; i < n; i++)
			for (int64_t k = 0; k < i; k++)
				x[i] -= W_(i, k) * x[k];
		for (int64_t i = n - 1; i >= 0; i--) {
			for (int64_t k = i + 1; k < n; k++)
				x[i] -= W_(i, k) * x[k];
			x[i] = fs_div(x[i], W_(i, i));
		}
	}
}

/* Cholesky, unblocked: A = U^H U (up) or L L^H; only that triangle. */
static int fs_potrf(const struct fs_lin *g, double complex *w)
{
	int64_t n = g->n, m = n;       /* W_ has n rows */

	for (int64_t j = 0; j < n; j++) {
		double d = creal(W_(j, j));
		for (int64_t k = 0; k < j; k++) {
			double complex u = g->up ? W_(k, j) : W_(j, k);
			d -= creal(u) * creal(u) + cimag(u) * cimag(u);
		}
		if (!(d > 0))
			return (int)j + 1;
		W_(j, j) = CMPLX(sqrt(d), 0);
		for (int64_t i = j + 1; i < n; i++) {
			double complex s = g->up ? W_(j, i) : W_(i, j);
			for (int64_t k = 0; k < j; k++)
				s -= g->up ? conj(W_(k, j)) * W_(k, i) :
				     W_(i, k) * conj(W_(j, k));
			if (g->up)
				W_(j, i) = fs_div(s, W_(j, j));
			else
				W_(i, j) = fs_div(s, W_(j, j));
		}
	}
	return 0;
}

static void fs_potrs(const struct fs_lin *g, const double complex *w,
		     double complex *x0)
{
	int64_t n = g->n, m = n;       /* W_ has n rows */

	for (int64_t r = 0; r < g->nrhs; r++) {
		double complex *x = x0 + r * n;
		/* U^H y = b or L y = b */
		for (int64_t i = 0; i < n; i++) {
			for (int64_t k = 0; k < i; k++)
				x[i] -= (g->up ? conj(W_(k, i)) : W_(i, k)) * x[k];
			x[i] = fs_div(x[i], W_(i, i));
		}
		/* U x = y or L^H x = y */
		for (int64_t i = n - 1; i >= 0; i--) {
			for (int64_t k = i + 1; k < n; k++)
				x[i] -= (g->up ? W_(i, k) : conj(W_(k, i))) * x[k];
			x[i] = fs_div(x[i], W_(i, i));
		}
	}
}

#undef W_

static int fs_lin_run(void *arg)
{
	const struct fs_lin *g = arg;
	int64_t rows = g->kind == FS_GETRF ? g->m : g->n;
	int64_t cols = g->n, npiv = g->m < g->n ? g->m : g->n;
	double complex *w, *x = NULL;
	int64_t *piv = NULL;
	int info = 0;

	if (fs_fail_run > 0 && --fs_fail_run == 0)
		return 1;
	w = fs_load(g->p, g->a, g->lda, rows, cols);
	piv = malloc(sizeof *piv * (size_t)(npiv + 1));
	if (g->kind == FS_GETRS || g->kind == FS_POTRS)
		x = fs_load(g->p, g->b, g->ldb, g->n, g->nrhs);
	if (!w || !piv || ((g->kind == FS_GETRS || g->kind == FS_POTRS) && !x))
		abort();
	if (g->kind == FS_GETRS)
		for (int64_t i = 0; i < g->n; i++) {
			piv[i] = g->piv64 ? ((const int64_t *)g->piv)[i] :
				 ((const int *)g->piv)[i];
			if (piv[i] < 1 || piv[i] > g->n) {
				free(w);        /* a fault on the device */
				free(x);
				free(piv);
				return 1;
			}
		}
	switch (g->kind) {
	case FS_GETRF:
		info = fs_getrf(g, w, piv);
		fs_store(g->p, g->a, g->lda, w, rows, cols);
		for (int64_t i = 0; i < npiv; i++) {
			if (g->piv64)
				((int64_t *)g->piv)[i] = piv[i];
			else
				((int *)g->piv)[i] = (int)piv[i];
		}
		break;
	case FS_GETRS:
		fs_getrs(g, w, piv, x);
		break;
	case FS_POTRF:
		info = fs_potrf(g, w);
		fs_store(g->p, g->a, g->lda, w, rows, cols);
		break;
	default:
		fs_potrs(g, w, x);
	}
	if (x)
		fs_store(g->p, g->b, g->ldb, x, g->n, g->nrhs);
	*g->info = info;
	free(w);
	free(x);
	free(piv);
	return 0;
}

/* Queue g (copied) on h's stream; a cuSOLVER status. */
static int fs_lin(void *h, const char *name, const struct fs_lin *g)
{
	struct fs_lin *q;

	if (fs_fail_solve < 0) {
		fs_fail_solve = fs_envl("FAKESOLVER_FAIL_SOLVE");
		fs_fail_run = fs_envl("FAKESOLVER_FAIL_RUN");
	}
	if (!g->p)
		return 7;
	if (fs_fail_solve > 0 && --fs_fail_solve == 0)
		return 6;
	if (!(q = malloc(sizeof *q)))
		return 3;
	*q = *g;
	if (fakedev_defer(((struct fh *)h)->stream, name, fs_lin_run, q) != 0) {
		free(q);
		return 3;
	}
	return 0;
}

API int cusolverDnXgetrf_bufferSize(void *h, void *p, int64_t m, int64_t n,
				    int dt, const void *a, int64_t lda,
				    int ct, size_t *dev, size_t *host);
API int cusolverDnXgetrf_bufferSize(void *h, void *p, int64_t m, int64_t n,
				    int dt, const void *a, int64_t lda,
				    int ct, size_t *dev, size_t *host)
{
	CNT();
	(void)h; (void)p; (void)a; (void)lda; (void)ct;
	*dev = fs_ws((size_t)(m + n) * 8 + 64);
	*host = 0;
	return fs_prec(dt) ? 0 : 7;
}

API int cusolverDnXgetrf(void *h, void *p, int64_t m, int64_t n, int dt,
			 void *a, int64_t lda, int64_t *piv, int ct,
			 void *ws, size_t wsb, void *hws, size_t hwsb,
			 int *info);
API int cusolverDnXgetrf(void *h, void *p, int64_t m, int64_t n, int dt,
			 void *a, int64_t lda, int64_t *piv, int ct,
			 void *ws, size_t wsb, void *hws, size_t hwsb,
			 int *info)
{
	struct fs_lin g = { FS_GETRF, fs_prec(dt), 0, 1, m, n, 0, lda, 0, a,
			    NULL, piv, info };

	CNT();
	(void)p; (void)ct; (void)ws; (void)wsb; (void)hws; (void)hwsb;
	return fs_lin(h, __func__, &g);
}

API int cusolverDnXgetrs(void *h, void *p, int op, int64_t n, int64_t nrhs,
			 int dt, const void *a, int64_t lda,
			 const int64_t *piv, int bt, void *b, int64_t ldb,
			 int *info);
API int cusolverDnXgetrs(void *h, void *p, int op, int64_t n, int64_t nrhs,
			 int dt, const void *a, int64_t lda,
			 const int64_t *piv, int bt, void *b, int64_t ldb,
			 int *info)
{
	struct fs_lin g = { FS_GETRS, fs_prec(dt), 0, 1, n, n, nrhs, lda, ldb,
			    (char *)(uintptr_t)a, b, (void *)(uintptr_t)piv, info };

	CNT();
	(void)p;
	if (op != 0 || bt != dt)
		return 7;
	return fs_lin(h, __func__, &g);
}

/* The legacy API, cusolverDn<P>getrf_bufferSize / getrf / getrs. */
#define FS_LEGACY(P, p, es)                                                     \
API int cusolverDn##P##getrf_bufferSize(void *h, int m, int n, void *a,        \
					int lda, int *lw);                     \
API int cusolverDn##P##getrf_bufferSize(void *h, int m, int n, void *a,        \
					int lda, int *lw)                      \
{                                                                               \
	CNT();                                                                  \
	(void)h; (void)a; (void)lda;                                            \
	*lw = (int)(fs_ws((size_t)(m + n) * es) / es);                          \
	return 0;                                                               \
}                                                                               \
API int cusolverDn##P##getrf(void *h, int m, int n, void *a, int lda,          \
			     void *ws, int *ipiv, int *info);                  \
API int cusolverDn##P##getrf(void *h, int m, int n, void *a, int lda,          \
			     void *ws, int *ipiv, int *info)                   \
{                                                                               \
	struct fs_lin g = { FS_GETRF, p, 0, 0, m, n, 0, lda, 0, a, NULL, ipiv,  \
			    info };                                             \
	CNT();                                                                  \
	(void)ws;                                                               \
	return fs_lin(h, __func__, &g);                                         \
}                                                                               \
API int cusolverDn##P##getrs(void *h, int op, int n, int nrhs, const void *a,  \
			     int lda, const int *ipiv, void *b, int ldb,       \
			     int *info);                                       \
API int cusolverDn##P##getrs(void *h, int op, int n, int nrhs, const void *a,  \
			     int lda, const int *ipiv, void *b, int ldb,       \
			     int *info)                                        \
{                                                                               \
	struct fs_lin g = { FS_GETRS, p, 0, 0, n, n, nrhs, lda, ldb,            \
			    (char *)(uintptr_t)a, b, (void *)(uintptr_t)ipiv,   \
			    info };                                             \
	CNT();                                                                  \
	if (op != 0)                                                            \
		return 7;                                                       \
	return fs_lin(h, __func__, &g);                                         \
}
FS_LEGACY(S, 's', 4)
FS_LEGACY(D, 'd', 8)
FS_LEGACY(C, 'c', 8)
FS_LEGACY(Z, 'z', 16)

API int cusolverDnXpotrf_bufferSize(void *h, void *p, int uplo, int64_t n,
				    int dt, const void *a, int64_t lda,
				    int ct, size_t *dev, size_t *host);
API int cusolverDnXpotrf_bufferSize(void *h, void *p, int uplo, int64_t n,
				    int dt, const void *a, int64_t lda,
				    int ct, size_t *dev, size_t *host)
{
	CNT();
	(void)h; (void)p; (void)uplo; (void)a; (void)lda; (void)ct;
	*dev = fs_ws((size_t)n * 8 + 64);
	*host = 0;
	return fs_prec(dt) ? 0 : 7;
}

API int cusolverDnXpotrf(void *h, void *p, int uplo, int64_t n, int dt,
			 void *a, int64_t lda, int ct, void *ws, size_t wsb,
			 void *hws, size_t hwsb, int *info);
API int cusolverDnXpotrf(void *h, void *p, int uplo, int64_t n, int dt,
			 void *a, int64_t lda, int ct, void *ws, size_t wsb,
			 void *hws, size_t hwsb, int *info)
{
	struct fs_lin g = { FS_POTRF, fs_prec(dt), uplo == 1, 0, n, n, 0, lda,
			    0, a, NULL, NULL, info };

	CNT();
	(void)p; (void)ct; (void)ws; (void)wsb; (void)hws; (void)hwsb;
	return fs_lin(h, __func__, &g);
}

API int cusolverDnXpotrs(void *h, void *p, int uplo, int64_t n, int64_t nrhs,
			 int dt, const void *a, int64_t lda, int bt, void *b,
			 int64_t ldb, int *info);
API int cusolverDnXpotrs(void *h, void *p, int uplo, int64_t n, int64_t nrhs,
			 int dt, const void *a, int64_t lda, int bt, void *b,
			 int64_t ldb, int *info)
{
	struct fs_lin g = { FS_POTRS, fs_prec(dt), uplo == 1, 0, n, n, nrhs,
			    lda, ldb, (char *)(uintptr_t)a, b, NULL, info };

	CNT();
	(void)p;
	if (bt != dt)
		return 7;
	return fs_lin(h, __func__, &g);
}
