/*
 * gemmpipe.c - calls of ?gemm_ with integer-valued operands, checked
 * exactly, for the tests of the CUDA backend's gemm pipeline
 * (test_gemm_pipeline.py; src/offload/cuda/xgemm.c):
 *
 *   gemmpipe P TA TB M N K PAD BETA [COUNT]
 *
 * P: s d c z; TA, TB: N T C; PAD: the leading dimensions exceed the rows
 * by PAD, and the padding holds a sentinel that must survive; BETA: 0 or
 * an integer (C is then read). Small integers in every operand (and in
 * the imaginary parts), so that every product and sum is exact in every
 * precision and the result must equal the definition's bit for bit,
 * whatever the order of the sums. COUNT calls, each on fresh operands.
 * Prints "ok" and exits 0, or the first wrong element and exits 1.
 * Linked with the system's BLAS, which the offloader's CPU path calls.
 */
#include <complex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeval.h"

typedef void gemm_fn(const char *, const char *, const int *, const int *,
		     const int *, const void *, const void *, const int *,
		     const void *, const int *, const void *, void *,
		     const int *);
void sgemm_(const char *, const char *, const int *, const int *, const int *,
	    const void *, const void *, const int *, const void *, const int *,
	    const void *, void *, const int *);
void dgemm_(const char *, const char *, const int *, const int *, const int *,
	    const void *, const void *, const int *, const void *, const int *,
	    const void *, void *, const int *);
void cgemm_(const char *, const char *, const int *, const int *, const int *,
	    const void *, const void *, const int *, const void *, const int *,
	    const void *, void *, const int *);
void zgemm_(const char *, const char *, const int *, const int *, const int *,
	    const void *, const void *, const int *, const void *, const int *,
	    const void *, void *, const int *);

/* rows x cols with ld = rows + pad: small integers, the sentinel between. */
static char *mat(int rows, int cols, int ldm, int seed)
{
	char *m = malloc((size_t)ldm * (size_t)cols * ES + 1);

	memset(m, SENT, (size_t)ldm * (size_t)cols * ES);
	for (int j = 0; j < cols; j++)
		for (int i = 0; i < rows; i++) {
			double re = (double)((i * 7 + j * 3 + seed) % 9) - 4;
			double im = CPLX ? (double)((i * 5 + j * 11 + seed) % 7) - 3 : 0;
			st(m, (int64_t)j * ldm + i, re + im * I);
		}
	return m;
}

static double complex op(const char *m, int ldm, char t, int i, int l)
{
	/* element (i, l) of op(M) */
	double complex v = t == 'N' ? ld(m, (int64_t)l * ldm + i) :
			   ld(m, (int64_t)i * ldm + l);

	return t == 'C' ? conj(v) : v;
}

int main(int argc, char **argv)
{
	if (argc < 9) {
		fprintf(stderr, "usage: gemmpipe P TA TB M N K PAD BETA [COUNT]\n");
		return 2;
	}
	P = argv[1][0];
	char ta = argv[2][0], tb = argv[3][0];
	int m = atoi(argv[4]), n = atoi(argv[5]), k = atoi(argv[6]);
	int pad = atoi(argv[7]), beta_i = atoi(argv[8]);
	int count = argc > 9 ? atoi(argv[9]) : 1;
	gemm_fn *f = P == 's' ? sgemm_ : P == 'd' ? dgemm_ : P == 'c' ? cgemm_ : zgemm_;
	ES = P == 's' ? 4 : P == 'z' ? 16 : 8;
	CPLX = P == 'c' || P == 'z';
	int ar = ta == 'N' ? m : k, ac = ta == 'N' ? k : m;
	int br = tb == 'N' ? k : n, bc = tb == 'N' ? n : k;
	int lda = ar + pad, ldb = br + pad, ldc = m + pad;
	char alpha[16], beta[16];
	double complex al = CPLX ? 2 - 1 * I : 2, be = CPLX ? beta_i + 1 * I : beta_i;

	if (beta_i == 0)
		be = 0;
	memset(alpha, 0, sizeof alpha);
	memset(beta, 0, sizeof beta);
	{
		char *t = alpha;
		st(t, 0, al);
		t = beta;
		st(t, 0, be);
	}
	for (int call = 0; call < count; call++) {
		char *a = mat(ar, ac, lda, call), *b = mat(br, bc, ldb, call + 1);
		char *c = mat(m, n, ldc, call + 2);
		char *c0 = malloc((size_t)ldc * (size_t)n * ES);

		memcpy(c0, c, (size_t)ldc * (size_t)n * ES);
		if (beta_i == 0)        /* a pure output: garbage must not matter */
			for (int j = 0; j < n; j++)
				memset(c + (size_t)j * ldc * ES, 0x7f, (size_t)m * ES);
		f(&ta, &tb, &m, &n, &k, alpha, a, &lda, b, &ldb, beta, c, &ldc);
		for (int j = 0; j < n; j++) {
			for (int i = 0; i < m; i++) {
				double complex s = 0;
				for (int l = 0; l < k; l++)
					s += op(a, lda, ta, i, l) * op(b, ldb, tb, l, j);
				s *= al;
				if (beta_i)
					s += be * ld(c0, (int64_t)j * ldc + i);
				char want[16], *w = want;
				st(w, 0, s);
				if (memcmp(want, c + ((size_t)j * ldc + i) * ES, ES)) {
					double complex g = ld(c, (int64_t)j * ldc + i);
					printf("call %d: C(%d,%d) is %g%+gi, not %g%+gi\n",
					       call, i, j, creal(g), cimag(g), creal(s),
					       cimag(s));
					return 1;
				}
			}
			for (size_t x = (size_t)m * ES; x < (size_t)ldc * ES; x++)
				if ((unsigned char)c[(size_t)j * ldc * ES + x] != SENT) {
					printf("call %d: padding of column %d written\n",
					       call, j);
					return 1;
				}
		}
		free(a);
		free(b);
		free(c);
		free(c0);
	}
	printf("ok\n");
	return 0;
}
