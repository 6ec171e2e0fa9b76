/*
 * solvepipe.c - calls of ?gesv and ?posv whose results are exact, for the
 * tests of the CUDA backend's solve pipeline (test_solve_pipeline.py;
 * src/offload/cuda/xsolve.c):
 *
 *   solvepipe OP P IW N NRHS PADA PADB KIND OUT [COUNT]
 *
 * OP: gesv, posvU or posvL; P: s d c z; IW: 32 (?gesv_, the system's
 * LAPACK) or 64 (scipy_?gesv_64_, libsolve64.so's, which calls the
 * system's); PADA, PADB: lda and ldb exceed n by them, and the padding
 * holds a sentinel that must survive; KIND: ok or singular (gesv: a zero
 * pivot at n/2; posv: the leading minor of order n/2 + 1 not positive).
 *
 * The operands are built so that every step of any LU with partial
 * pivoting or any Cholesky is exact in every precision, blocked or not,
 * in any order of its sums: gesv's A = P L U with |l| <= 1/2 (so the
 * pivots are P's, unambiguous), dyadic multipliers and power-of-two
 * pivots; posv's A = U^H U with power-of-two diagonals; no factor entry
 * is zero (no signed zeros to differ); B = A X0 with small integers X0.
 * So X must be X0 exactly, and the factors and pivots of the GPU path
 * must equal the CPU LAPACK's byte for byte, which the test checks by
 * comparing OUT (A, the pivots, B with their padding, info, for each of
 * COUNT calls) of a run under the offloader with that of a plain run.
 * Prints "ok" and exits 0, or what is wrong and exits 1.
 */
#include <complex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeval.h"

#define DECL(P, T)                                                             \
	void P##gesv_(const int *, const int *, T *, const int *, int *, T *,  \
		      const int *, int *);                                     \
	void P##posv_(const char *, const int *, const int *, T *, const int *,\
		      T *, const int *, int *, size_t);                        \
	void scipy_##P##gesv_64_(const int64_t *, const int64_t *, T *,        \
				 const int64_t *, int64_t *, T *,              \
				 const int64_t *, int64_t *);                  \
	void scipy_##P##posv_64_(const char *, const int64_t *,                \
				 const int64_t *, T *, const int64_t *, T *,   \
				 const int64_t *, int64_t *, size_t);
DECL(s, float)
DECL(d, double)
DECL(c, float complex)
DECL(z, double complex)

/* A nonzero entry from a small set, by position and seed. */
static double pick(const double *set, int nset, int64_t i, int64_t j, int seed)
{
	return set[(i * 7 + j * 13 + seed * 5 + (i * j) % 3) % nset];
}

static double complex val(const double *re, int nre, const double *im,
			  int nim, int64_t i, int64_t j, int seed)
{
	double r = pick(re, nre, i, j, seed);

	return CPLX ? CMPLX(r, pick(im, nim, j, i, seed + 1)) : CMPLX(r, 0);
}

static void solve(int lu, char uplo, int iw, int64_t n, int64_t nrhs,
		  char *a, int64_t lda, void *ipiv, char *b, int64_t ldb,
		  int64_t *info)
{
	int n32 = (int)n, r32 = (int)nrhs, la = (int)lda, lb = (int)ldb, i32 = 0;

#define CALL(p, T)                                                             \
	if (lu && iw == 32)                                                    \
		p##gesv_(&n32, &r32, (T *)(void *)a, &la, ipiv,                \
			 (T *)(void *)b, &lb, &i32);                           \
	else if (lu)                                                           \
		scipy_##p##gesv_64_(&n, &nrhs, (T *)(void *)a, &lda, ipiv,     \
				    (T *)(void *)b, &ldb, info);               \
	else if (iw == 32)                                                     \
		p##posv_(&uplo, &n32, &r32, (T *)(void *)a, &la,               \
			 (T *)(void *)b, &lb, &i32, 1);                        \
	else                                                                   \
		scipy_##p##posv_64_(&uplo, &n, &nrhs, (T *)(void *)a, &lda,    \
				    (T *)(void *)b, &ldb, info, 1);
	switch (P) {
	case 's': CALL(s, float) break;
	case 'd': CALL(d, double) break;
	case 'c': CALL(c, float complex) break;
	default: CALL(z, double complex) break;
	}
#undef CALL
	if (iw == 32)
		*info = i32;
}

int main(int argc, char **argv)
{
	static const double lre[] = { 0.25, -0.5, -0.25, 0.5 }, lim[] = { 0.25, -0.25 };
	static const double ure[] = { 1, -2, -1, 2 }, uim[] = { 1, -1 };
	static const double diag[] = { 2, -1, 4, 1, -2 }, pdiag[] = { 2, 1, 4 };
	static const double xre[] = { 1, -3, 2, -1, 3, -2 }, xim[] = { -1, 2, 1, -2 };

	if (argc < 10) {
		fprintf(stderr, "usage: solvepipe gesv|posvU|posvL P 32|64 N NRHS "
			"PADA PADB ok|singular OUT [COUNT]\n");
		return 2;
	}
	int lu = !strcmp(argv[1], "gesv");
	char uplo = lu ? 'N' : argv[1][4];
	P = argv[2][0];
	int iw = atoi(argv[3]);
	int64_t n = atoi(argv[4]), nrhs = atoi(argv[5]);
	int64_t lda = n + atoi(argv[6]), ldb = n + atoi(argv[7]);
	int sing = !strcmp(argv[8], "singular");
	int count = argc > 10 ? atoi(argv[10]) : 1;
	FILE *out = fopen(argv[9], "wb");
	ES = P == 's' ? 4 : P == 'z' ? 16 : 8;
	CPLX = P == 'c' || P == 'z';
	size_t pes = iw == 64 ? 8 : 4;

	if (!out) {
		perror(argv[9]);
		return 2;
	}
	for (int call = 0; call < count; call++) {
		double complex *f = calloc((size_t)(n * n), sizeof *f);
		double complex *x0 = calloc((size_t)(n * nrhs), sizeof *x0);
		char *a = malloc((size_t)(lda * n) * ES), *b = malloc((size_t)(ldb * nrhs) * ES);
		unsigned char *ipiv = malloc((size_t)n * pes);
		int64_t info = -99;
		/* U (and L below it, unit diagonal, for gesv) in f */
		for (int64_t j = 0; j < n; j++)
			for (int64_t i = 0; i < n; i++) {
				if (i < j)
					f[j * n + i] = val(ure, 4, uim, 2, i, j, call);
				else if (i == j)
					f[j * n + i] = lu ? pick(diag, 5, i, j, call) :
						       pick(pdiag, 3, i, j, call);
				else if (lu)
					f[j * n + i] = val(lre, 4, lim, 2, i, j, call);
			}
		if (sing && lu)
			f[(n / 2) * n + n / 2] = 0;
		memset(a, SENT, (size_t)(lda * n) * ES);
		memset(b, SENT, (size_t)(ldb * nrhs) * ES);
		memset(ipiv, SENT, (size_t)n * pes);
		for (int64_t j = 0; j < n; j++)
			for (int64_t i = 0; i < n; i++) {
				double complex s = 0;
				int64_t row = lu ? (n - 1 - i + 3) % n : i;     /* P */
				for (int64_t k = 0; k < n; k++) {
					if (lu) {       /* (L U)(i, j) */
						double complex l = k < i ? f[k * n + i] :
								   k == i ? 1 : 0;
						if (k <= j)
							s += l * f[j * n + k];
					} else if (k <= i && k <= j) {  /* (U^H U)(i, j) */
						s += conj(f[i * n + k]) * f[j * n + k];
					}
				}
				if (!lu && sing && i == j && i == n / 2)
					s -= creal(f[i * n + i]) * creal(f[i * n + i]) + 1;
				st(a, j * lda + row, s);
			}
		for (int64_t r = 0; r < nrhs; r++)
			for (int64_t i = 0; i < n; i++)
				x0[r * n + i] = val(xre, 6, xim, 4, i, r, call);
		for (int64_t r = 0; r < nrhs; r++)
			for (int64_t i = 0; i < n; i++) {
				double complex s = 0;
				for (int64_t k = 0; k < n; k++)
					s += ld(a, k * lda + i) * x0[r * n + k];
				st(b, r * ldb + i, s);
			}
		solve(lu, uplo, iw, n, nrhs, a, lda, ipiv, b, ldb, &info);
		fwrite(a, ES, (size_t)(lda * n), out);
		if (lu)
			fwrite(ipiv, pes, (size_t)n, out);
		fwrite(b, ES, (size_t)(ldb * nrhs), out);
		fwrite(&info, sizeof info, 1, out);
		if (sing ? info <= 0 : info != 0) {
			printf("call %d: info %lld\n", call, (long long)info);
			return 1;
		}
		for (int64_t r = 0; r < nrhs && !sing; r++)
			for (int64_t i = 0; i < n; i++) {
				char want[16];
				st(want, 0, x0[r * n + i]);
				if (memcmp(want, b + (size_t)(r * ldb + i) * ES, ES)) {
					double complex g = ld(b, r * ldb + i);
					printf("call %d: X(%lld,%lld) is %g%+gi\n", call,
					       (long long)i, (long long)r, creal(g), cimag(g));
					return 1;
				}
			}
		for (int64_t j = 0; j < n; j++)
			for (size_t x = (size_t)n * ES; x < (size_t)lda * ES; x++)
				if ((unsigned char)a[(size_t)j * lda * ES + x] != SENT) {
					printf("call %d: padding of A's column %lld written\n",
					       call, (long long)j);
					return 1;
				}
		for (int64_t j = 0; j < nrhs; j++)
			for (size_t x = (size_t)n * ES; x < (size_t)ldb * ES; x++)
				if ((unsigned char)b[(size_t)j * ldb * ES + x] != SENT) {
					printf("call %d: padding of B's column %lld written\n",
					       call, (long long)j);
					return 1;
				}
		free(f);
		free(x0);
		free(a);
		free(b);
		free(ipiv);
	}
	fclose(out);
	printf("ok\n");
	return 0;
}
