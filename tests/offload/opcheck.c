/*
 * opcheck OUTDIR [NAME-PREFIX] - run every offloadable operation in every
 * precision through the names a program links against (Fortran and CBLAS,
 * column- and row-major), on fixed pseudo-random data, and write each
 * case's outputs to OUTDIR/<case>.<operand> (header: int64 rows, cols,
 * complex, compare kind, count of comparable vectors; then rows*cols
 * values as float64, real and imaginary parts interleaved for complex).
 *
 * The functions are looked up with dlsym(RTLD_DEFAULT), the path ctypes
 * takes: under LD_PRELOAD=libgpuoffload.so that is the wrapper. Leading
 * dimensions are larger than the rows, and the gaps hold a sentinel: a
 * wrapper that writes them, or the untouched triangle of a symmetric
 * output, prints "CLOBBERED <case>" (the tests look for it). Workspace
 * queries are made first, as programs do (they must stay on the CPU).
 * Also prints one line per case: "<case> info=<n>".
 *
 * OPCHECK_GUARD=1: every operand is placed so that it ends at a page
 * boundary with an inaccessible page after it, and an inaccessible page
 * before its first page: a copy that reads or writes one byte beyond
 * what the call handed over faults (the tests see the crash).
 */
#define _GNU_SOURCE
#include <complex.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include "opcheck.h"

static const char *outdir, *prefix;
char P;                 /* precision of the case */
static uint64_t seed = 12345;
static const double SENT = -7777.0;

static double rnd(void)
{
	seed = seed * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(seed >> 11) / 9007199254740992.0 - 0.5;
}

int cplx(void) { return P == 'c' || P == 'z'; }
size_t esz(void) { return P == 's' ? 4 : P == 'd' || P == 'c' ? 8 : 16; }
size_t rsz(void) { return P == 's' || P == 'c' ? 4 : 8; }


Z bget(const struct buf *b, int i, int j)
{
	size_t x = (size_t)i + (size_t)j * (size_t)b->ld;
	if (b->kind == 'I')
		return ((int *)b->p)[x];
	if (b->kind == 'R')
		return rsz() == 4 ? ((float *)b->p)[x] : ((double *)b->p)[x];
	switch (P) {
	case 's': return ((float *)b->p)[x];
	case 'd': return ((double *)b->p)[x];
	case 'c': return ((float *)b->p)[2 * x] + I * ((float *)b->p)[2 * x + 1];
	default: return ((double *)b->p)[2 * x] + I * ((double *)b->p)[2 * x + 1];
	}
}

void bset(struct buf *b, int i, int j, Z v)
{
	size_t x = (size_t)i + (size_t)j * (size_t)b->ld;
	if (b->kind == 'I') { ((int *)b->p)[x] = (int)creal(v); return; }
	if (b->kind == 'R') {
		if (rsz() == 4) ((float *)b->p)[x] = (float)creal(v);
		else ((double *)b->p)[x] = creal(v);
		return;
	}
	switch (P) {
	case 's': ((float *)b->p)[x] = (float)creal(v); break;
	case 'd': ((double *)b->p)[x] = creal(v); break;
	case 'c': ((float *)b->p)[2 * x] = (float)creal(v); ((float *)b->p)[2 * x + 1] = (float)cimag(v); break;
	default: ((double *)b->p)[2 * x] = creal(v); ((double *)b->p)[2 * x + 1] = cimag(v);
	}
}

/* n zeroed bytes for an operand: calloc, or between guard pages. */
static void *opalloc(size_t n)
{
	static int guard = -1;
	size_t pg, len;
	char *m;

	if (guard < 0)
		guard = getenv("OPCHECK_GUARD") && strcmp(getenv("OPCHECK_GUARD"), "1") == 0;
	if (!guard)
		return calloc(n ? n : 1, 1);
	pg = (size_t)getauxval(AT_PAGESZ);
	len = (n + pg - 1) / pg * pg;
	m = mmap(NULL, len + 2 * pg, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		perror("opcheck: mmap");
		exit(2);
	}
	if (mprotect(m, pg, PROT_NONE) || mprotect(m + pg + len, pg, PROT_NONE)) {
		perror("opcheck: mprotect");
		exit(2);
	}
	/* the last byte of the operand is the last before the guard page
	 * (n is a multiple of the element size: aligned for it) */
	return m + pg + len - n;
}

/* A rows x cols operand with ld = rows + 3, the gaps holding SENT. */
struct buf mk(int rows, int cols, char kind)
{
	struct buf b = { NULL, rows, cols, rows + 3, kind };
	size_t n = (size_t)b.ld * (size_t)(cols ? cols : 1);
	size_t e = kind == 'I' ? sizeof(int) : kind == 'R' ? rsz() : esz();
	b.p = opalloc(n * e);
	for (int j = 0; j < (cols ? cols : 1); j++)
		for (int i = 0; i < b.ld; i++)
			bset(&b, i, j, i < rows ? rnd() + (cplx() ? I * rnd() : 0) : SENT);
	return b;
}

/* Hermitian (symmetric for real P), positive definite if spd. */
void herm(struct buf *b, int spd)
{
	int n = b->rows;
	for (int j = 0; j < n; j++)
		for (int i = 0; i <= j; i++) {
			Z v = bget(b, i, j);
			if (i == j)
				v = creal(v) + (spd ? n : 0);
			bset(b, i, j, v);
			bset(b, j, i, P == 's' || P == 'd' ? v : conj(v));
		}
}

void dominant(struct buf *b)
{
	for (int i = 0; i < b->rows && i < b->cols; i++)
		bset(b, i, i, bget(b, i, i) + b->rows);
}

static int clobbered;

/* Gaps (rows..ld) still hold SENT, and so does the triangle `tri`
 * ('U' upper without the diagonal, 'L' lower, 0 none) of `orig`. */
void check(const char *cs, const struct buf *b, const struct buf *orig, char tri)
{
	for (int j = 0; j < b->cols; j++)
		for (int i = 0; i < b->ld; i++) {
			int keep = i >= b->rows || (tri == 'U' && i < j) || (tri == 'L' && i > j);
			if (!keep)
				continue;
			Z want = i >= b->rows ? SENT : bget(orig, i, j);
			Z have = bget(b, i, j);
			if (memcmp(&want, &have, sizeof(Z)) != 0 && !(want == have)) {
				if (!clobbered++)
					printf("CLOBBERED %s (%d,%d)\n", cs, i, j);
				return;
			}
		}
}

struct buf dup(const struct buf *b)
{
	struct buf d = *b;
	size_t e = b->kind == 'I' ? sizeof(int) : b->kind == 'R' ? rsz() : esz();
	size_t n = (size_t)b->ld * (size_t)(b->cols ? b->cols : 1) * e;
	d.p = opalloc(n);
	memcpy(d.p, b->p, n);
	return d;
}

/* cmp: 1 values, 2 vectors in columns, 3 vectors in rows, 4 pivots,
 * 5 LU factors; nvec: how many of the vectors are comparable. */
void out(const char *cs, const char *name, const struct buf *b, int cmp, int nvec)
{
	char path[4096];
	FILE *f;
	int64_t h[5] = { b->rows, b->cols, b->kind == 'M' && cplx(), cmp, nvec };

	snprintf(path, sizeof path, "%s/%s.%s", outdir, cs, name);
	f = fopen(path, "wb");
	if (!f) { perror(path); exit(2); }
	fwrite(h, sizeof h, 1, f);
	for (int j = 0; j < b->cols; j++)
		for (int i = 0; i < b->rows; i++) {
			Z v = bget(b, i, j);
			double re = creal(v), im = cimag(v);
			fwrite(&re, 8, 1, f);
			if (h[2])
				fwrite(&im, 8, 1, f);
		}
	fclose(f);
}

fn_t sym(const char *fmt)
{
	char name[64];
	snprintf(name, sizeof name, fmt, P);
	fn_t f = (fn_t)dlsym(RTLD_DEFAULT, name);
	if (!f) { fprintf(stderr, "opcheck: no %s\n", name); exit(2); }
	return f;
}

/* Whether to run case cs; its data then depends on its name only, so
 * that a run of a few cases sees the same data as a run of all. */
int want(const char *cs)
{
	if (prefix && strncmp(cs, prefix, strlen(prefix)) != 0)
		return 0;
	seed = 1469598103934665603ull;
	for (const char *c = cs; *c; c++)
		seed = (seed ^ (unsigned char)*c) * 1099511628211ull;
	return 1;
}

/* Scalars of precision P (alpha = 0.7 - 0.2i, beta = 0.3 + 0.1i). */
static double sc_d[2][2] = { { 0.7, -0.2 }, { 0.3, 0.1 } };
static float sc_f[2][2] = { { 0.7f, -0.2f }, { 0.3f, 0.1f } };
static double rs_d[2] = { 0.7, 0.3 };
static float rs_f[2] = { 0.7f, 0.3f };
static const void *SC(int i) { return rsz() == 4 ? (const void *)sc_f[i] : (const void *)sc_d[i]; }
static const void *RS(int i) { return rsz() == 4 ? (const void *)&rs_f[i] : (const void *)&rs_d[i]; }

enum { ROW = 101, COL = 102 };
static int E(char c, int what)
{
	switch (what) {
	case 't': return c == 'N' ? 111 : c == 'T' ? 112 : 113;
	case 'u': return c == 'U' ? 121 : 122;
	case 'd': return c == 'N' ? 131 : 132;
	default: return c == 'L' ? 141 : 142;
	}
}

/* ---- BLAS level 3 ----------------------------------------------------------- */

int M_ = 50, N_ = 40, K_ = 30;

/* gemm: iface 0 Fortran, COL or ROW for CBLAS. */
static void t_gemm(int iface, char ta, char tb, int beta0)
{
	char cs[64];
	snprintf(cs, sizeof cs, "%s%cgemm_%c%c%s", iface == 0 ? "" : iface == COL ? "cblas_col_" : "cblas_row_",
		 P, ta, tb, beta0 ? "_beta0" : "");
	if (!want(cs)) return;
	int m = M_, n = N_, k = K_;
	int ar = ta == 'N' ? m : k, ac = ta == 'N' ? k : m;
	int br = tb == 'N' ? k : n, bc = tb == 'N' ? n : k;
	struct buf a, b, c;
	if (iface == ROW) {     /* stored transposed */
		a = mk(ac, ar, 'M'); b = mk(bc, br, 'M'); c = mk(n, m, 'M');
	} else {
		a = mk(ar, ac, 'M'); b = mk(br, bc, 'M'); c = mk(m, n, 'M');
	}
	if (beta0)
		for (int j = 0; j < c.cols; j++)
			for (int i = 0; i < c.rows; i++)
				bset(&c, i, j, NAN);
	struct buf c0 = dup(&c);
	static const double zero[2] = { 0, 0 };
	static const float zerof[2] = { 0, 0 };
	const void *beta = beta0 ? (rsz() == 4 ? (const void *)zerof : (const void *)zero) : SC(1);
	if (iface == 0) {
		sym("%cgemm_")(&ta, &tb, &m, &n, &k, SC(0), a.p, &a.ld, b.p, &b.ld, beta, c.p, &c.ld, (size_t)1, (size_t)1);
	} else if (cplx()) {
		sym("cblas_%cgemm")(iface, E(ta, 't'), E(tb, 't'), m, n, k, SC(0), a.p, a.ld, b.p, b.ld, beta, c.p, c.ld);
	} else if (P == 's') {
		((void (*)(int, int, int, int, int, int, float, void *, int, void *, int, float, void *, int))
		 sym("cblas_%cgemm"))(iface, E(ta, 't'), E(tb, 't'), m, n, k, 0.7f, a.p, a.ld, b.p, b.ld, beta0 ? 0.0f : 0.3f, c.p, c.ld);
	} else {
		((void (*)(int, int, int, int, int, int, double, void *, int, void *, int, double, void *, int))
		 sym("cblas_%cgemm"))(iface, E(ta, 't'), E(tb, 't'), m, n, k, 0.7, a.p, a.ld, b.p, b.ld, beta0 ? 0.0 : 0.3, c.p, c.ld);
	}
	check(cs, &c, &c0, 0);
	out(cs, "c", &c, 1, 0);
	printf("%s info=0\n", cs);
}

/* symm/hemm */
static void t_symm(int iface, int h, char side, char uplo)
{
	char cs[64];
	snprintf(cs, sizeof cs, "%s%c%s_%c%c", iface == 0 ? "" : iface == COL ? "cblas_col_" : "cblas_row_",
		 P, h ? "hemm" : "symm", side, uplo);
	if (!want(cs)) return;
	int m = M_, n = N_, p = side == 'L' ? m : n;
	struct buf a = mk(p, p, 'M'), b, c;
	if (iface == ROW) { b = mk(n, m, 'M'); c = mk(n, m, 'M'); }
	else { b = mk(m, n, 'M'); c = mk(m, n, 'M'); }
	struct buf c0 = dup(&c);
	char nm[16];
	if (iface == 0) {
		snprintf(nm, sizeof nm, "%%c%s_", h ? "hemm" : "symm");
		sym(nm)(&side, &uplo, &m, &n, SC(0), a.p, &a.ld, b.p, &b.ld, SC(1), c.p, &c.ld, (size_t)1, (size_t)1);
	} else {
		snprintf(nm, sizeof nm, "cblas_%%c%s", h ? "hemm" : "symm");
		if (cplx())
			sym(nm)(iface, E(side, 's'), E(uplo, 'u'), m, n, SC(0), a.p, a.ld, b.p, b.ld, SC(1), c.p, c.ld);
		else if (P == 's')
			((void (*)(int, int, int, int, int, float, void *, int, void *, int, float, void *, int))sym(nm))
				(iface, E(side, 's'), E(uplo, 'u'), m, n, 0.7f, a.p, a.ld, b.p, b.ld, 0.3f, c.p, c.ld);
		else
			((void (*)(int, int, int, int, int, double, void *, int, void *, int, double, void *, int))sym(nm))
				(iface, E(side, 's'), E(uplo, 'u'), m, n, 0.7, a.p, a.ld, b.p, b.ld, 0.3, c.p, c.ld);
	}
	check(cs, &c, &c0, 0);
	out(cs, "c", &c, 1, 0);
	printf("%s info=0\n", cs);
}

/* syrk/herk (two = 0), syr2k/her2k (two = 1) */
static void t_syrk(int iface, int h, int two, char uplo, char tr)
{
	char cs[64];
	const char *op = two ? (h ? "her2k" : "syr2k") : (h ? "herk" : "syrk");
	snprintf(cs, sizeof cs, "%s%c%s_%c%c", iface == 0 ? "" : iface == COL ? "cblas_col_" : "cblas_row_",
		 P, op, uplo, tr);
	if (!want(cs)) return;
	int n = N_, k = K_;
	int ar = tr == 'N' ? n : k, ac = tr == 'N' ? k : n;
	struct buf a = iface == ROW ? mk(ac, ar, 'M') : mk(ar, ac, 'M');
	struct buf b = iface == ROW ? mk(ac, ar, 'M') : mk(ar, ac, 'M');
	struct buf c = mk(n, n, 'M');
	struct buf c0 = dup(&c);
	char nm[16];
	/* herk: real alpha and beta; her2k: complex alpha, real beta. */
	const void *al = h && !two ? RS(0) : SC(0), *be = h ? RS(1) : SC(1);
	if (iface == 0) {
		snprintf(nm, sizeof nm, "%%c%s_", op);
		if (two)
			sym(nm)(&uplo, &tr, &n, &k, al, a.p, &a.ld, b.p, &b.ld, be, c.p, &c.ld, (size_t)1, (size_t)1);
		else
			sym(nm)(&uplo, &tr, &n, &k, al, a.p, &a.ld, be, c.p, &c.ld, (size_t)1, (size_t)1);
	} else {
		snprintf(nm, sizeof nm, "cblas_%%c%s", op);
		int U = E(uplo, 'u'), T = E(tr, 't');
		if (P == 's' || (P == 'c' && h && !two)) {     /* float scalars by value */
			if (two && h)
				((void (*)(int, int, int, int, int, const void *, void *, int, void *, int, float, void *, int))sym(nm))
					(iface, U, T, n, k, al, a.p, a.ld, b.p, b.ld, 0.3f, c.p, c.ld);
			else if (two)
				((void (*)(int, int, int, int, int, float, void *, int, void *, int, float, void *, int))sym(nm))
					(iface, U, T, n, k, 0.7f, a.p, a.ld, b.p, b.ld, 0.3f, c.p, c.ld);
			else
				((void (*)(int, int, int, int, int, float, void *, int, float, void *, int))sym(nm))
					(iface, U, T, n, k, 0.7f, a.p, a.ld, 0.3f, c.p, c.ld);
		} else if (P == 'd' || (P == 'z' && h && !two)) {
			if (two)
				((void (*)(int, int, int, int, int, double, void *, int, void *, int, double, void *, int))sym(nm))
					(iface, U, T, n, k, 0.7, a.p, a.ld, b.p, b.ld, 0.3, c.p, c.ld);
			else
				((void (*)(int, int, int, int, int, double, void *, int, double, void *, int))sym(nm))
					(iface, U, T, n, k, 0.7, a.p, a.ld, 0.3, c.p, c.ld);
		} else if (two && h) {          /* c/z her2k: complex alpha, real beta */
			if (P == 'c')
				((void (*)(int, int, int, int, int, const void *, void *, int, void *, int, float, void *, int))sym(nm))
					(iface, U, T, n, k, al, a.p, a.ld, b.p, b.ld, 0.3f, c.p, c.ld);
			else
				((void (*)(int, int, int, int, int, const void *, void *, int, void *, int, double, void *, int))sym(nm))
					(iface, U, T, n, k, al, a.p, a.ld, b.p, b.ld, 0.3, c.p, c.ld);
		} else if (two) {
			sym(nm)(iface, U, T, n, k, al, a.p, a.ld, b.p, b.ld, be, c.p, c.ld);
		} else {
			sym(nm)(iface, U, T, n, k, al, a.p, a.ld, be, c.p, c.ld);
		}
	}
	/* The triangle not named by uplo is not referenced: untouched. In
	 * row-major it is the other one of the stored matrix. */
	char keep = (uplo == 'U') == (iface != ROW) ? 'L' : 'U';
	check(cs, &c, &c0, keep);
	out(cs, "c", &c, 1, 0);
	printf("%s info=0\n", cs);
}

static void t_trmm(int iface, int solve, char side, char uplo, char ta, char diag)
{
	char cs[64];
	snprintf(cs, sizeof cs, "%s%c%s_%c%c%c%c", iface == 0 ? "" : iface == COL ? "cblas_col_" : "cblas_row_",
		 P, solve ? "trsm" : "trmm", side, uplo, ta, diag);
	if (!want(cs)) return;
	int m = M_, n = N_, p = side == 'L' ? m : n;
	struct buf a = mk(p, p, 'M');
	dominant(&a);
	struct buf b = iface == ROW ? mk(n, m, 'M') : mk(m, n, 'M');
	struct buf b0 = dup(&b);
	char nm[16];
	if (iface == 0) {
		snprintf(nm, sizeof nm, "%%c%s_", solve ? "trsm" : "trmm");
		sym(nm)(&side, &uplo, &ta, &diag, &m, &n, SC(0), a.p, &a.ld, b.p, &b.ld,
			(size_t)1, (size_t)1, (size_t)1, (size_t)1);
	} else {
		snprintf(nm, sizeof nm, "cblas_%%c%s", solve ? "trsm" : "trmm");
		int S = E(side, 's'), U = E(uplo, 'u'), T = E(ta, 't'), D = E(diag, 'd');
		if (cplx())
			sym(nm)(iface, S, U, T, D, m, n, SC(0), a.p, a.ld, b.p, b.ld);
		else if (P == 's')
			((void (*)(int, int, int, int, int, int, int, float, void *, int, void *, int))sym(nm))
				(iface, S, U, T, D, m, n, 0.7f, a.p, a.ld, b.p, b.ld);
		else
			((void (*)(int, int, int, int, int, int, int, double, void *, int, void *, int))sym(nm))
				(iface, S, U, T, D, m, n, 0.7, a.p, a.ld, b.p, b.ld);
	}
	check(cs, &b, &b0, 0);
	out(cs, "b", &b, 1, 0);
	printf("%s info=0\n", cs);
}

int main(int argc, char **argv)
{
	static const char precs[] = "sdcz";
	static const int ifaces[] = { 0, COL, ROW };

	if (argc < 2) {
		fprintf(stderr, "usage: opcheck OUTDIR [PREFIX]\n");
		return 2;
	}
	outdir = argv[1];
	prefix = argc > 2 ? argv[2] : NULL;
	for (int pi = 0; pi < 4; pi++) {
		P = precs[pi];
		int c = cplx();
		for (int ii = 0; ii < 3; ii++) {
			int f = ifaces[ii];
			t_gemm(f, 'N', 'N', 0);
			t_gemm(f, 'T', c ? 'C' : 'N', 0);
			t_gemm(f, 'N', 'T', 1);
			t_symm(f, 0, 'L', 'U');
			t_symm(f, 0, 'R', 'L');
			if (c) {
				t_symm(f, 1, 'L', 'U');
				t_symm(f, 1, 'R', 'L');
			}
			t_syrk(f, 0, 0, 'U', 'N');
			t_syrk(f, 0, 0, 'L', 'T');
			t_syrk(f, 0, 1, 'U', 'N');
			t_syrk(f, 0, 1, 'L', 'T');
			if (c) {
				t_syrk(f, 1, 0, 'U', 'N');
				t_syrk(f, 1, 0, 'L', 'C');
				t_syrk(f, 1, 1, 'U', 'N');
				t_syrk(f, 1, 1, 'L', 'C');
			}
			t_trmm(f, 0, 'L', 'U', 'N', 'N');
			t_trmm(f, 0, 'R', 'L', c ? 'C' : 'T', 'U');
			t_trmm(f, 1, 'L', 'L', 'N', 'N');
			t_trmm(f, 1, 'R', 'U', c ? 'C' : 'T', 'N');
			t_trmm(f, 1, 'L', 'U', 'T', 'U');
		}
		t_getrf();
		t_getrs('N');
		t_getrs(c ? 'C' : 'T');
		t_gesv(0);
		t_gesv(1);
		t_potrf('U', 0);
		t_potrf('L', 0);
		t_potrf('L', 1);
		t_posv('U', 1);
		t_posv('L', 0);
		t_eig(0, 'V', 'U');
		t_eig(0, 'N', 'L');
		t_eig(1, 'V', 'L');
		t_svd(0, 'S', 'S', M_, N_);
		t_svd(0, 'A', 'N', N_, M_);
		t_svd(1, 'S', 'S', N_, M_);
		t_svd(1, 'A', 'A', N_, N_);
		t_geqrf();
		t_gels();
	}
	return clobbered ? 1 : 0;
}
