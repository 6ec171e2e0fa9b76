/*
 * fakesolver.c - stand-ins for libcublas.so.13 and libcusolver.so.12 that
 * run on the fake driver (fakedev.c, whose "device memory" is host
 * memory), for the tests that count what one small GPU call costs
 * (test_small_calls.py) and of the pipelines (test_gemm_pipeline.py,
 * test_solve_pipeline.py). Built twice, once under each soname; it needs
 * fakedev's libcuda.so.1 (DT_NEEDED), whose call table counts these
 * functions too (fakedev_count), on whose streams the kernels are queued
 * (fakedev_defer) and whose queued copies syevd performs first
 * (fakedev_flush), so that kernels run in stream order.
 *
 * Computed for real, queued on the stream and run at the wait, as a
 * kernel: gemm in s, d, c, z with N/T/C (FAKESOLVER_FAIL_GEMM=N makes
 * the N-th fail); getrf (partial pivoting, LAPACK's pivot rule) and getrs
 * ('N') in s, d, c, z in both the 32-bit and the 64-bit API, potrf/potrs
 * (lower and upper) in s, d, c, z (fakelin.c, linked in). syevd only
 * counts: it writes the diagonal as the eigenvalues and info 0 (its
 * results are not checked). Anything else a backend might look up is absent, as in an
 * old library: the backend then says UNSUPPORTED and the CPU runs it.
 */
#define _GNU_SOURCE
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fakesolver.h"

static int fs_new(void **h)
{
	*h = calloc(1, sizeof(struct fh));
	return *h ? 0 : 3;
}

static void fs_run(void *h)
{
	fakedev_flush(((struct fh *)h)->stream);
}

#define A_(i, j) a[(int64_t)(j) * lda + (i)]

/* ---- cuBLAS --------------------------------------------------------------- */

API int cublasCreate_v2(void **h);
API int cublasCreate_v2(void **h) { CNT(); return fs_new(h); }
API int cublasDestroy_v2(void *h);
API int cublasDestroy_v2(void *h) { CNT(); free(h); return 0; }
API int cublasSetStream_v2(void *h, void *s);
API int cublasSetStream_v2(void *h, void *s) { CNT(); ((struct fh *)h)->stream = s; return 0; }
API int cublasSetPointerMode_v2(void *h, int m);
API int cublasSetPointerMode_v2(void *h, int m) { CNT(); (void)h; return m == 0 ? 0 : 7; }

/* gemm in any precision ('s' 'd' 'c' 'z'), computed in double complex
 * and stored in the precision's type (exact for integer-valued operands
 * of modest size); op 0 N, 1 T, 2 C (cuBLAS's values). Queued on the
 * handle's stream and run at the program's wait (fakedev_defer), as a
 * kernel on the device: a copy of C on another stream that does not wait
 * for it reads C as it was. */
struct fs_gemm {
	char p;
	int ta, tb;
	int64_t m, n, k, lda, ldb, ldc;
	double complex al, be;
	const char *a, *b;
	char *c;
};

double complex fs_ld(char p, const char *base, int64_t idx)
{
	switch (p) {
	case 's': return ((const float *)(const void *)base)[idx];
	case 'd': return ((const double *)(const void *)base)[idx];
	case 'c': return ((const float complex *)(const void *)base)[idx];
	default: return ((const double complex *)(const void *)base)[idx];
	}
}

void fs_st(char p, char *base, int64_t idx, double complex v)
{
	switch (p) {
	case 's': ((float *)(void *)base)[idx] = (float)creal(v); break;
	case 'd': ((double *)(void *)base)[idx] = creal(v); break;
	case 'c': ((float complex *)(void *)base)[idx] = (float complex)v; break;
	default: ((double complex *)(void *)base)[idx] = v; break;
	}
}

static int fs_gemm_run(void *arg)
{
	const struct fs_gemm *g = arg;

	for (int64_t j = 0; j < g->n; j++)
		for (int64_t i = 0; i < g->m; i++) {
			double complex s = 0;
			for (int64_t l = 0; l < g->k; l++) {
				double complex x = g->ta ? fs_ld(g->p, g->a, i * g->lda + l) :
						   fs_ld(g->p, g->a, l * g->lda + i);
				double complex y = g->tb ? fs_ld(g->p, g->b, l * g->ldb + j) :
						   fs_ld(g->p, g->b, j * g->ldb + l);
				if (g->ta == 2)
					x = conj(x);
				if (g->tb == 2)
					y = conj(y);
				s += x * y;
			}
			s *= g->al;
			if (g->be != 0)
				s += g->be * fs_ld(g->p, g->c, j * g->ldc + i);
			fs_st(g->p, g->c, j * g->ldc + i, s);
		}
	return 0;
}

/* FAKESOLVER_FAIL_GEMM=N: the N-th gemm call fails (cuBLAS's execution
 * failure), queueing nothing. */
static long fs_fail_gemm = -1;

static int fs_gemm(void *h, char p, int ta, int tb, int64_t m, int64_t n,
		   int64_t k, const void *al, const void *a, int64_t lda,
		   const void *b, int64_t ldb, const void *be, void *c,
		   int64_t ldc)
{
	struct fs_gemm *g;

	if (fs_fail_gemm < 0) {
		const char *v = getenv("FAKESOLVER_FAIL_GEMM");
		fs_fail_gemm = v && *v ? strtol(v, NULL, 10) : 0;
	}
	if (fs_fail_gemm > 0 && --fs_fail_gemm == 0)
		return 13;
	g = calloc(1, sizeof *g);
	if (!g)
		return 3;
	g->p = p;
	g->ta = ta;
	g->tb = tb;
	g->m = m;
	g->n = n;
	g->k = k;
	g->lda = lda;
	g->ldb = ldb;
	g->ldc = ldc;
	g->al = fs_ld(p, al, 0);
	g->be = fs_ld(p, be, 0);
	g->a = a;
	g->b = b;
	g->c = c;
	if (fakedev_defer(((struct fh *)h)->stream, "gemm", fs_gemm_run, g) != 0) {
		free(g);
		return 3;
	}
	return 0;
}

#define FS_GEMM(P, p)                                                          \
API int cublas##P##gemm_v2_64(void *h, int ta, int tb, int64_t m, int64_t n,  \
			      int64_t k, const void *al, const void *a,        \
			      int64_t lda, const void *b, int64_t ldb,         \
			      const void *be, void *c, int64_t ldc);           \
API int cublas##P##gemm_v2_64(void *h, int ta, int tb, int64_t m, int64_t n,  \
			      int64_t k, const void *al, const void *a,        \
			      int64_t lda, const void *b, int64_t ldb,         \
			      const void *be, void *c, int64_t ldc)            \
{                                                                              \
	CNT();                                                                 \
	return fs_gemm(h, p, ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc); \
}
FS_GEMM(S, 's')
FS_GEMM(D, 'd')
FS_GEMM(C, 'c')
FS_GEMM(Z, 'z')

/* ---- cuSOLVER ------------------------------------------------------------- */

API int cusolverDnCreate(void **h);
API int cusolverDnCreate(void **h) { CNT(); return fs_new(h); }
API int cusolverDnDestroy(void *h);
API int cusolverDnDestroy(void *h) { CNT(); free(h); return 0; }
API int cusolverDnSetStream(void *h, void *s);
API int cusolverDnSetStream(void *h, void *s) { CNT(); ((struct fh *)h)->stream = s; return 0; }
static int fs_params;
API int cusolverDnCreateParams(void **p);
API int cusolverDnCreateParams(void **p) { CNT(); *p = &fs_params; return 0; }
API int cusolverDnDestroyParams(void *p);
API int cusolverDnDestroyParams(void *p) { CNT(); (void)p; return 0; }

API int cusolverDnXsyevd_bufferSize(void *h, void *p, int jobz, int uplo,
				    int64_t n, int dt, const void *a,
				    int64_t lda, int wt, const void *w,
				    int ct, size_t *dev, size_t *host);
API int cusolverDnXsyevd_bufferSize(void *h, void *p, int jobz, int uplo,
				    int64_t n, int dt, const void *a,
				    int64_t lda, int wt, const void *w,
				    int ct, size_t *dev, size_t *host)
{
	CNT();
	(void)h; (void)p; (void)jobz; (void)uplo; (void)a; (void)lda;
	(void)wt; (void)w; (void)ct;
	*dev = (size_t)n * (size_t)n * 8 + 64;
	*host = 0;
	return dt == 1 ? 0 : 7;
}

API int cusolverDnXsyevd(void *h, void *p, int jobz, int uplo, int64_t n,
			 int dt, double *a, int64_t lda, int wt, double *w,
			 int ct, void *ws, size_t wsb, void *hws, size_t hwsb,
			 int *info);
API int cusolverDnXsyevd(void *h, void *p, int jobz, int uplo, int64_t n,
			 int dt, double *a, int64_t lda, int wt, double *w,
			 int ct, void *ws, size_t wsb, void *hws, size_t hwsb,
			 int *info)
{
	CNT();
	(void)p; (void)jobz; (void)uplo; (void)wt; (void)ct; (void)ws;
	(void)wsb; (void)hws; (void)hwsb;
	if (dt != 1)
		return 7;
	fs_run(h);
	for (int64_t i = 0; i < n; i++)
		w[i] = A_(i, i);
	*info = 0;
	return 0;
}
