/*
 * opcheck_lapack.c - opcheck's LAPACK cases (see opcheck.c): each factors,
 * solves or decomposes fixed data, with the workspace queries programs
 * make, and writes its outputs and "<case> info=<n>".
 */
#include <stdio.h>
#include <stdlib.h>

#include "opcheck.h"


static int NR = 7;
static int LW = 20000;

static void info_line(const char *cs, int info)
{
	printf("%s info=%d\n", cs, info);
}

void t_getrf(void)
{
	char cs[64];
	snprintf(cs, sizeof cs, "%cgetrf", P);
	if (!want(cs)) return;
	int m = M_, n = N_, info = -99;
	struct buf a = mk(m, n, 'M'), ip = mk(n, 1, 'I');
	struct buf a0 = dup(&a);
	sym("%cgetrf_")(&m, &n, a.p, &a.ld, ip.p, &info);
	check(cs, &a, &a0, 0);
	out(cs, "a", &a, 5, 0);
	out(cs, "ipiv", &ip, 4, 0);
	info_line(cs, info);
}

void t_getrs(char tr)
{
	char cs[64];
	snprintf(cs, sizeof cs, "%cgetrs_%c", P, tr);
	if (!want(cs)) return;
	int n = N_, nrhs = NR, info = -99;
	struct buf a = mk(n, n, 'M'), ip = mk(n, 1, 'I'), b = mk(n, nrhs, 'M');
	/* factor on the CPU first: a small query-free getrf of the same n */
	int prev = N_;
	sym("%cgetrf_")(&n, &n, a.p, &a.ld, ip.p, &info);
	(void)prev;
	struct buf b0 = dup(&b);
	sym("%cgetrs_")(&tr, &n, &nrhs, a.p, &a.ld, ip.p, b.p, &b.ld, &info, (size_t)1);
	check(cs, &b, &b0, 0);
	out(cs, "b", &b, 1, 0);
	info_line(cs, info);
}

void t_gesv(int singular)
{
	char cs[64];
	snprintf(cs, sizeof cs, "%cgesv%s", P, singular ? "_singular" : "");
	if (!want(cs)) return;
	int n = N_, nrhs = NR, info = -99;
	struct buf a = mk(n, n, 'M'), ip = mk(n, 1, 'I'), b = mk(n, nrhs, 'M');
	if (singular)           /* a zero column: an exact zero pivot */
		for (int i = 0; i < n; i++)
			bset(&a, i, 3, 0);
	struct buf a0 = dup(&a);
	sym("%cgesv_")(&n, &nrhs, a.p, &a.ld, ip.p, b.p, &b.ld, &info);
	check(cs, &a, &a0, 0);
	out(cs, "a", &a, 5, 0);
	out(cs, "ipiv", &ip, 4, 0);
	out(cs, "b", &b, 1, 0);
	info_line(cs, info);
}

void t_potrf(char uplo, int notpd)
{
	char cs[64];
	snprintf(cs, sizeof cs, "%cpotrf_%c%s", P, uplo, notpd ? "_notpd" : "");
	if (!want(cs)) return;
	int n = N_, info = -99;
	struct buf a = mk(n, n, 'M');
	herm(&a, !notpd);
	struct buf a0 = dup(&a);
	sym("%cpotrf_")(&uplo, &n, a.p, &a.ld, &info, (size_t)1);
	check(cs, &a, &a0, uplo == 'U' ? 'L' : 'U');
	out(cs, "a", &a, notpd ? 0 : 1, 0);
	info_line(cs, info);
}

void t_posv(char uplo, int solve_only)
{
	char cs[64];
	snprintf(cs, sizeof cs, "%c%s_%c", P, solve_only ? "potrs" : "posv", uplo);
	if (!want(cs)) return;
	int n = N_, nrhs = NR, info = -99;
	struct buf a = mk(n, n, 'M'), b = mk(n, nrhs, 'M');
	herm(&a, 1);
	if (solve_only)
		sym("%cpotrf_")(&uplo, &n, a.p, &a.ld, &info, (size_t)1);
	struct buf a0 = dup(&a), b0 = dup(&b);
	if (solve_only)
		sym("%cpotrs_")(&uplo, &n, &nrhs, a.p, &a.ld, b.p, &b.ld, &info, (size_t)1);
	else
		sym("%cposv_")(&uplo, &n, &nrhs, a.p, &a.ld, b.p, &b.ld, &info, (size_t)1);
	check(cs, &a, &a0, uplo == 'U' ? 'L' : 'U');
	check(cs, &b, &b0, 0);
	if (!solve_only)
		out(cs, "a", &a, 1, 0);
	out(cs, "b", &b, 1, 0);
	info_line(cs, info);
}

void t_eig(int dc, char jobz, char uplo)
{
	char cs[64];
	int h = cplx();
	snprintf(cs, sizeof cs, "%c%s_%c%c", P, h ? (dc ? "heevd" : "heev") : (dc ? "syevd" : "syev"), jobz, uplo);
	if (!want(cs)) return;
	int n = N_, info = -99, lw = -1, lrw = -1, liw = -1;
	struct buf a = mk(n, n, 'M'), w = mk(n, 1, 'R');
	herm(&a, 0);
	void *work = calloc((size_t)LW, esz()), *rwork = calloc((size_t)LW, rsz());
	int *iwork = calloc((size_t)LW, sizeof(int));
	/* the workspace query first, as programs do */
	char nm[16];
	snprintf(nm, sizeof nm, "%%c%s_", h ? (dc ? "heevd" : "heev") : (dc ? "syevd" : "syev"));
	fn_t f = sym(nm);
	for (int q = 0; q < 2; q++) {
		if (q) { lw = LW; lrw = LW; liw = LW; }
		if (!h && !dc) f(&jobz, &uplo, &n, a.p, &a.ld, w.p, work, &lw, &info, (size_t)1, (size_t)1);
		else if (h && !dc) f(&jobz, &uplo, &n, a.p, &a.ld, w.p, work, &lw, rwork, &info, (size_t)1, (size_t)1);
		else if (!h) f(&jobz, &uplo, &n, a.p, &a.ld, w.p, work, &lw, iwork, &liw, &info, (size_t)1, (size_t)1);
		else f(&jobz, &uplo, &n, a.p, &a.ld, w.p, work, &lw, rwork, &lrw, iwork, &liw, &info, (size_t)1, (size_t)1);
		if (!q) {
			struct buf wk = { work, 1, 1, 1, 'M' };
			printf("%s query info=%d lwork=%d\n", cs, info, (int)creal(bget(&wk, 0, 0)));
		}
	}
	struct buf wk = { work, 1, 1, 1, 'M' };
	printf("%s work1=%d\n", cs, (int)creal(bget(&wk, 0, 0)));
	out(cs, "w", &w, 1, 0);
	if (jobz == 'V')
		out(cs, "a", &a, 2, n);
	info_line(cs, info);
}

void t_svd(int dd, char ju, char jv, int m, int n)
{
	char cs[64];
	snprintf(cs, sizeof cs, "%c%s_%c%c_%dx%d", P, dd ? "gesdd" : "gesvd", ju, dd ? ju : jv, m, n);
	if (!want(cs)) return;
	int info = -99, lw = LW, mn = m < n ? m : n;
	if (dd) jv = ju;
	struct buf a = mk(m, n, 'M'), s = mk(mn, 1, 'R');
	struct buf u = mk(m, ju == 'A' ? m : mn, 'M'), vt = mk(jv == 'A' ? n : mn, n, 'M');
	void *work = calloc((size_t)LW, esz()), *rwork = calloc((size_t)LW, rsz());
	int *iwork = calloc((size_t)LW, sizeof(int));
	struct buf u0 = dup(&u), vt0 = dup(&vt);
	if (!dd) {
		if (!cplx())
			sym("%cgesvd_")(&ju, &jv, &m, &n, a.p, &a.ld, s.p, u.p, &u.ld, vt.p, &vt.ld, work, &lw, &info, (size_t)1, (size_t)1);
		else
			sym("%cgesvd_")(&ju, &jv, &m, &n, a.p, &a.ld, s.p, u.p, &u.ld, vt.p, &vt.ld, work, &lw, rwork, &info, (size_t)1, (size_t)1);
	} else {
		if (!cplx())
			sym("%cgesdd_")(&ju, &m, &n, a.p, &a.ld, s.p, u.p, &u.ld, vt.p, &vt.ld, work, &lw, iwork, &info, (size_t)1);
		else
			sym("%cgesdd_")(&ju, &m, &n, a.p, &a.ld, s.p, u.p, &u.ld, vt.p, &vt.ld, work, &lw, rwork, iwork, &info, (size_t)1);
	}
	check(cs, &u, &u0, 0);
	check(cs, &vt, &vt0, 0);
	out(cs, "s", &s, 1, 0);
	if (ju != 'N')
		out(cs, "u", &u, 2, mn);
	if (jv != 'N')
		out(cs, "vt", &vt, 3, mn);
	info_line(cs, info);
}

void t_geqrf(void)
{
	char cs[64];
	snprintf(cs, sizeof cs, "%cgeqrf", P);
	if (!want(cs)) return;
	int m = M_, n = N_, info = -99, lw = -1;
	struct buf a = mk(m, n, 'M'), tau = mk(n, 1, 'M');
	void *work = calloc((size_t)LW, esz());
	sym("%cgeqrf_")(&m, &n, a.p, &a.ld, tau.p, work, &lw, &info);
	struct buf wk = { work, 1, 1, 1, 'M' };
	printf("%s query info=%d lwork=%d\n", cs, info, (int)creal(bget(&wk, 0, 0)));
	lw = LW;
	struct buf a0 = dup(&a);
	sym("%cgeqrf_")(&m, &n, a.p, &a.ld, tau.p, work, &lw, &info);
	printf("%s work1=%d\n", cs, (int)creal(bget(&wk, 0, 0)));
	check(cs, &a, &a0, 0);
	out(cs, "a", &a, 1, 0);
	out(cs, "tau", &tau, 1, 0);
	info_line(cs, info);
}

void t_gels(void)
{
	char cs[64];
	snprintf(cs, sizeof cs, "%cgels_N", P);
	if (!want(cs)) return;
	int m = M_, n = N_, nrhs = NR, info = -99, lw = LW;
	char tr = 'N';
	struct buf a = mk(m, n, 'M'), b = mk(m, nrhs, 'M');
	void *work = calloc((size_t)LW, esz());
	struct buf b0 = dup(&b);
	sym("%cgels_")(&tr, &m, &n, &nrhs, a.p, &a.ld, b.p, &b.ld, work, &lw, &info, (size_t)1);
	check(cs, &b, &b0, 0);
	out(cs, "a", &a, 1, 0);
	out(cs, "b", &b, 1, 0);
	info_line(cs, info);
}

