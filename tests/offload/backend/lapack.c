/*
 * lapack.c - reference implementations of the LAPACK operations for the
 * CPU test backend (see kernels.c): unblocked LU with the pivot rule of
 * i?amax, Cholesky, Householder QR with LAPACK's reflector convention,
 * cyclic Jacobi for the symmetric/Hermitian eigenproblem, one-sided Jacobi
 * for the SVD. gels only for trans = 'N' with m >= n (else
 * GPO_BE_UNSUPPORTED: the frontend then runs the CPU).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testbe.h"


static int64_t lu(const struct mat *a, const struct mat *ipiv, int64_t m, int64_t n)
{
	int64_t info = 0, mn = m < n ? m : n;

	for (int64_t j = 0; j < mn; j++) {
		int64_t p = j;
		double best = -1;
		for (int64_t i = j; i < m; i++)
			if (cabs1(get(a, i, j)) > best) {
				best = cabs1(get(a, i, j));
				p = i;
			}
		set(ipiv, j, 0, (double)(p + 1));
		if (get(a, p, j) != 0) {
			if (p != j)
				for (int64_t l = 0; l < n; l++) {
					Z t = get(a, j, l);
					set(a, j, l, get(a, p, l));
					set(a, p, l, t);
				}
			Z d = get(a, j, j);
			for (int64_t i = j + 1; i < m; i++)
				set(a, i, j, get(a, i, j) / d);
		} else if (!info) {
			info = j + 1;
		}
		for (int64_t l = j + 1; l < n; l++) {
			Z u = get(a, j, l);
			if (u == 0)
				continue;
			for (int64_t i = j + 1; i < m; i++)
				set(a, i, l, get(a, i, l) - get(a, i, j) * u);
		}
	}
	return info;
}

static void lu_solve(const struct mat *a, const struct mat *ipiv, char t,
		     int64_t n, int64_t nrhs, const struct mat *b)
{
	for (int64_t c = 0; c < nrhs; c++) {
		if (t == 'N') {
			for (int64_t i = 0; i < n; i++) {
				int64_t p = (int64_t)creal(get(ipiv, i, 0)) - 1;
				if (p != i) {
					Z v = get(b, i, c);
					set(b, i, c, get(b, p, c));
					set(b, p, c, v);
				}
			}
			for (int64_t i = 0; i < n; i++) {       /* L y = b */
				Z v = get(b, i, c);
				for (int64_t l = 0; l < i; l++)
					v -= get(a, i, l) * get(b, l, c);
				set(b, i, c, v);
			}
			for (int64_t i = n - 1; i >= 0; i--) {  /* U x = y */
				Z v = get(b, i, c);
				for (int64_t l = i + 1; l < n; l++)
					v -= get(a, i, l) * get(b, l, c);
				set(b, i, c, v / get(a, i, i));
			}
		} else {
			for (int64_t i = 0; i < n; i++) {       /* U^T y = b */
				Z v = get(b, i, c);
				for (int64_t l = 0; l < i; l++)
					v -= opget(a, t, i, l) * get(b, l, c);
				set(b, i, c, v / opget(a, t, i, i));
			}
			for (int64_t i = n - 1; i >= 0; i--) {  /* L^T z = y */
				Z v = get(b, i, c);
				for (int64_t l = i + 1; l < n; l++)
					v -= opget(a, t, i, l) * get(b, l, c);
				set(b, i, c, v);
			}
			for (int64_t i = n - 1; i >= 0; i--) {
				int64_t p = (int64_t)creal(get(ipiv, i, 0)) - 1;
				if (p != i) {
					Z v = get(b, i, c);
					set(b, i, c, get(b, p, c));
					set(b, p, c, v);
				}
			}
		}
	}
}

static int64_t chol(const struct mat *a, char uplo, int64_t n)
{
	for (int64_t j = 0; j < n; j++) {
		double d = creal(get(a, j, j));
		for (int64_t l = 0; l < j; l++) {
			Z v = uplo == 'U' ? get(a, l, j) : get(a, j, l);
			d -= creal(v * conj(v));
		}
		if (!(d > 0))
			return j + 1;
		d = sqrt(d);
		set(a, j, j, d);
		for (int64_t i = j + 1; i < n; i++) {
			if (uplo == 'U') {      /* U(j,i) */
				Z v = get(a, j, i);
				for (int64_t l = 0; l < j; l++)
					v -= conj(get(a, l, j)) * get(a, l, i);
				set(a, j, i, v / d);
			} else {                /* L(i,j) */
				Z v = get(a, i, j);
				for (int64_t l = 0; l < j; l++)
					v -= get(a, i, l) * conj(get(a, j, l));
				set(a, i, j, v / d);
			}
		}
	}
	return 0;
}

static void chol_solve(const struct mat *a, char uplo, int64_t n, int64_t nrhs,
		       const struct mat *b)
{
	/* A = U^H U or L L^H; with F the lower factor (U^H or L): F y = b,
	 * F^H x = y. */
	for (int64_t c = 0; c < nrhs; c++) {
		for (int64_t i = 0; i < n; i++) {
			Z v = get(b, i, c);
			for (int64_t l = 0; l < i; l++)
				v -= (uplo == 'U' ? conj(get(a, l, i)) : get(a, i, l)) * get(b, l, c);
			set(b, i, c, v / creal(get(a, i, i)));
		}
		for (int64_t i = n - 1; i >= 0; i--) {
			Z v = get(b, i, c);
			for (int64_t l = i + 1; l < n; l++)
				v -= (uplo == 'U' ? get(a, i, l) : conj(get(a, l, i))) * get(b, l, c);
			set(b, i, c, v / creal(get(a, i, i)));
		}
	}
}

/* Cyclic Jacobi on the Hermitian n-by-n h (overwritten): eigenvalues in
 * w (ascending), eigenvectors in v's columns. */
static void jacobi_eig(Z *h, int64_t n, double *w, Z *v)
{
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = 0; i < n; i++)
			W_(v, n, i, j) = i == j;
	for (int sweep = 0; sweep < 60; sweep++) {
		double off = 0, tot = 0;
		for (int64_t j = 0; j < n; j++)
			for (int64_t i = 0; i < n; i++) {
				double x = creal(W_(h, n, i, j) * conj(W_(h, n, i, j)));
				tot += x;
				if (i != j)
					off += x;
			}
		if (off <= 1e-30 * tot || off == 0)
			break;
		for (int64_t p = 0; p < n - 1; p++)
			for (int64_t q = p + 1; q < n; q++) {
				Z b = W_(h, n, p, q);
				double ab = tb_abs(b);
				if (ab == 0)
					continue;
				double a = creal(W_(h, n, p, p)), d = creal(W_(h, n, q, q));
				double tau = (d - a) / (2 * ab);
				double t = (tau >= 0 ? 1.0 : -1.0) / (fabs(tau) + sqrt(1 + tau * tau));
				double c = 1 / sqrt(1 + t * t), s = t * c;
				Z e = b / ab;
				/* G = [[c, s], [-s conj(e), c conj(e)]] on p, q */
				Z g11 = c, g12 = s, g21 = -s * conj(e), g22 = c * conj(e);
				for (int64_t i = 0; i < n; i++) {      /* H G */
					Z hp = W_(h, n, i, p), hq = W_(h, n, i, q);
					W_(h, n, i, p) = hp * g11 + hq * g21;
					W_(h, n, i, q) = hp * g12 + hq * g22;
					Z vp = W_(v, n, i, p), vq = W_(v, n, i, q);
					W_(v, n, i, p) = vp * g11 + vq * g21;
					W_(v, n, i, q) = vp * g12 + vq * g22;
				}
				for (int64_t j = 0; j < n; j++) {      /* G^H (H G) */
					Z hp = W_(h, n, p, j), hq = W_(h, n, q, j);
					W_(h, n, p, j) = conj(g11) * hp + conj(g21) * hq;
					W_(h, n, q, j) = conj(g12) * hp + conj(g22) * hq;
				}
				W_(h, n, p, q) = W_(h, n, q, p) = 0;
			}
	}
	for (int64_t i = 0; i < n; i++)
		w[i] = creal(W_(h, n, i, i));
	for (int64_t i = 1; i < n; i++)         /* sort ascending, with vectors */
		for (int64_t j = i; j > 0 && w[j - 1] > w[j]; j--) {
			double t = w[j]; w[j] = w[j - 1]; w[j - 1] = t;
			for (int64_t r = 0; r < n; r++) {
				Z x = W_(v, n, r, j);
				W_(v, n, r, j) = W_(v, n, r, j - 1);
				W_(v, n, r, j - 1) = x;
			}
		}
}

static int k_heev(struct gpo_kernel *k)
{
	struct mat a = M(k, 0, 'M'), wv = M(k, 1, 'R');
	int64_t n = k->n;
	int herm = k->prec == 'c' || k->prec == 'z';
	Z *h = zalloc(n, n), *v = zalloc(n, n);
	double *w = calloc((size_t)(n ? n : 1), sizeof(double));

	if (!h || !v || !w) {
		free(h); free(v); free(w);
		return -1;
	}
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = 0; i < n; i++)
			W_(h, n, i, j) = symget(&a, k->opt[1], herm, i, j);
	jacobi_eig(h, n, w, v);
	for (int64_t i = 0; i < n; i++)
		set(&wv, i, 0, w[i]);
	if (k->opt[0] == 'V')
		for (int64_t j = 0; j < n; j++)
			for (int64_t i = 0; i < n; i++)
				set(&a, i, j, W_(v, n, i, j));
	free(h); free(v); free(w);
	return 0;
}

/* Columns cols_have.. of q (rows-by-cols_want), and any zero column
 * before them, completed to an orthonormal set (Gram-Schmidt on unit
 * vectors). */
static void complete(Z *q, int64_t rows, int64_t cols)
{
	int64_t next = 0;

	for (int64_t j = 0; j < cols; j++) {
		double nrm = 0;
		for (int64_t i = 0; i < rows; i++)
			nrm += creal(W_(q, rows, i, j) * conj(W_(q, rows, i, j)));
		if (nrm > 0.25)
			continue;
		for (; next < rows; next++) {
			for (int64_t i = 0; i < rows; i++)
				W_(q, rows, i, j) = i == next;
			for (int pass = 0; pass < 2; pass++)
				for (int64_t l = 0; l < cols; l++) {
					Z d = 0;
					if (l == j)
						continue;
					for (int64_t i = 0; i < rows; i++)
						d += conj(W_(q, rows, i, l)) * W_(q, rows, i, j);
					for (int64_t i = 0; i < rows; i++)
						W_(q, rows, i, j) -= d * W_(q, rows, i, l);
				}
			nrm = 0;
			for (int64_t i = 0; i < rows; i++)
				nrm += creal(W_(q, rows, i, j) * conj(W_(q, rows, i, j)));
			if (nrm > 1e-6)
				break;
		}
		next++;
		nrm = sqrt(nrm);
		for (int64_t i = 0; i < rows; i++)
			W_(q, rows, i, j) /= nrm;
	}
}

/* One-sided Jacobi: g (p-by-q, p >= q) = Ug diag(s) V^H; g is overwritten
 * by Ug (p-by-p, completed), v is q-by-q. s descending. */
static void jacobi_svd(Z *g, int64_t p, int64_t q, double *s, Z *v)
{
	for (int64_t j = 0; j < q; j++)
		for (int64_t i = 0; i < q; i++)
			W_(v, q, i, j) = i == j;
	for (int sweep = 0; sweep < 60; sweep++) {
		int rotated = 0;
		for (int64_t i = 0; i < q - 1; i++)
			for (int64_t j = i + 1; j < q; j++) {
				double al = 0, be = 0;
				Z ga = 0;
				for (int64_t r = 0; r < p; r++) {
					al += creal(W_(g, p, r, i) * conj(W_(g, p, r, i)));
					be += creal(W_(g, p, r, j) * conj(W_(g, p, r, j)));
					ga += conj(W_(g, p, r, i)) * W_(g, p, r, j);
				}
				double ag = tb_abs(ga);
				if (ag == 0 || ag <= 1e-15 * sqrt(al * be))
					continue;
				rotated = 1;
				double tau = (be - al) / (2 * ag);
				double t = (tau >= 0 ? 1.0 : -1.0) / (fabs(tau) + sqrt(1 + tau * tau));
				double c = 1 / sqrt(1 + t * t), sn = t * c;
				Z e = ga / ag;
				Z g11 = c, g12 = sn, g21 = -sn * conj(e), g22 = c * conj(e);
				for (int64_t r = 0; r < p; r++) {
					Z x = W_(g, p, r, i), y = W_(g, p, r, j);
					W_(g, p, r, i) = x * g11 + y * g21;
					W_(g, p, r, j) = x * g12 + y * g22;
				}
				for (int64_t r = 0; r < q; r++) {
					Z x = W_(v, q, r, i), y = W_(v, q, r, j);
					W_(v, q, r, i) = x * g11 + y * g21;
					W_(v, q, r, j) = x * g12 + y * g22;
				}
			}
		if (!rotated)
			break;
	}
	for (int64_t j = 0; j < q; j++) {
		double nrm = 0;
		for (int64_t r = 0; r < p; r++)
			nrm += creal(W_(g, p, r, j) * conj(W_(g, p, r, j)));
		s[j] = sqrt(nrm);
	}
	for (int64_t i = 1; i < q; i++)          /* sort descending */
		for (int64_t j = i; j > 0 && s[j - 1] < s[j]; j--) {
			double t = s[j]; s[j] = s[j - 1]; s[j - 1] = t;
			for (int64_t r = 0; r < p; r++) {
				Z x = W_(g, p, r, j);
				W_(g, p, r, j) = W_(g, p, r, j - 1);
				W_(g, p, r, j - 1) = x;
			}
			for (int64_t r = 0; r < q; r++) {
				Z x = W_(v, q, r, j);
				W_(v, q, r, j) = W_(v, q, r, j - 1);
				W_(v, q, r, j - 1) = x;
			}
		}
	for (int64_t j = 0; j < q; j++)
		for (int64_t r = 0; r < p; r++)
			W_(g, p, r, j) = s[j] > 1e-300 ? W_(g, p, r, j) / s[j] : 0;
	complete(g, p, p);
}

/* gesvd (jobu = opt[0], jobvt = opt[1]) and gesdd (jobz = opt[0]). */
static int k_gesvd(struct gpo_kernel *k, int dd)
{
	struct mat a = M(k, 0, 'M'), sv = M(k, 1, 'R'), u = M(k, 2, 'M'), vt = M(k, 3, 'M');
	int64_t m = k->m, n = k->n, p = m >= n ? m : n, q = m >= n ? n : m;
	char ju = k->opt[0], jv = dd ? k->opt[0] : k->opt[1];
	Z *g = zalloc(p, p), *v = zalloc(q, q);
	double *s = calloc((size_t)(q ? q : 1), sizeof(double));

	if (!g || !v || !s) {
		free(g); free(v); free(s);
		return -1;
	}
	for (int64_t j = 0; j < q; j++)         /* g = A or A^H */
		for (int64_t i = 0; i < p; i++)
			W_(g, p, i, j) = m >= n ? get(&a, i, j) : conj(get(&a, j, i));
	jacobi_svd(g, p, q, s, v);
	for (int64_t i = 0; i < q; i++)
		set(&sv, i, 0, s[i]);
	/* m >= n: A = g S v^H, so U = g, VT = v^H.
	 * m < n: A^H = g S v^H, A = v S g^H, so U = v, VT = g^H. */
	int64_t ucols = ju == 'A' ? m : q, vrows = jv == 'A' ? n : q;
	if (ju == 'A' || ju == 'S')
		for (int64_t j = 0; j < ucols; j++)
			for (int64_t i = 0; i < m; i++)
				set(&u, i, j, m >= n ? W_(g, p, i, j) : W_(v, q, i, j));
	if (jv == 'A' || jv == 'S')
		for (int64_t j = 0; j < n; j++)
			for (int64_t i = 0; i < vrows; i++)
				set(&vt, i, j, m >= n ? conj(W_(v, q, j, i)) : conj(W_(g, p, j, i)));
	/* LAPACK destroys A: leave the work matrix's first columns in it,
	 * as a real library leaves its workspace (the frontend copies A
	 * back; tests/offload/test_offload_svd.py). */
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = 0; i < m; i++)
			set(&a, i, j, m >= n ? W_(g, p, i, j) : W_(g, p, j, i));
	free(g); free(v); free(s);
	return 0;
}

/* Householder QR in place (LAPACK's geqr2: H(j) = I - tau v v^H with
 * v(j) = 1, beta = -sign(Re alpha) * norm). */
static void qr(const struct mat *a, const struct mat *tau, int64_t m, int64_t n)
{
	int64_t mn = m < n ? m : n;

	for (int64_t j = 0; j < mn; j++) {
		Z alpha = get(a, j, j), t = 0;
		double xn = 0;
		for (int64_t i = j + 1; i < m; i++)
			xn += creal(get(a, i, j) * conj(get(a, i, j)));
		if (xn != 0 || cimag(alpha) != 0) {
			double ar = creal(alpha), ai = cimag(alpha);
			double beta = -copysign(sqrt(ar * ar + ai * ai + xn), ar);
			t = (beta - ar) / beta - I * (ai / beta);
			Z sc = 1 / (alpha - beta);
			for (int64_t i = j + 1; i < m; i++)
				set(a, i, j, get(a, i, j) * sc);
			set(a, j, j, beta);
		}
		set(tau, j, 0, t);
		for (int64_t l = j + 1; l < n && t != 0; l++) {        /* H^H A */
			Z w = get(a, j, l);
			for (int64_t i = j + 1; i < m; i++)
				w += conj(get(a, i, j)) * get(a, i, l);
			w *= conj(t);
			set(a, j, l, get(a, j, l) - w);
			for (int64_t i = j + 1; i < m; i++)
				set(a, i, l, get(a, i, l) - get(a, i, j) * w);
		}
	}
}

static int k_gels(struct gpo_kernel *k)
{
	struct mat a = M(k, 0, 'M'), b = M(k, 1, 'M');
	int64_t m = k->m, n = k->n;
	Z *tv = zalloc(n, 1);
	struct mat tau = { tv, n, 'z', 'M', 0 };

	if (k->opt[0] != 'N' || m < n) {
		free(tv);
		return GPO_BE_UNSUPPORTED;
	}
	if (!tv)
		return -1;
	/* tau in double complex whatever prec: the work copy of a. */
	qr(&a, &tau, m, n);
	for (int64_t c = 0; c < k->nrhs; c++) {
		for (int64_t j = 0; j < n; j++) {       /* Q^H b */
			Z t = tv[j], w = get(&b, j, c);
			for (int64_t i = j + 1; i < m; i++)
				w += conj(get(&a, i, j)) * get(&b, i, c);
			w *= conj(t);
			set(&b, j, c, get(&b, j, c) - w);
			for (int64_t i = j + 1; i < m; i++)
				set(&b, i, c, get(&b, i, c) - get(&a, i, j) * w);
		}
	}
	for (int64_t i = 0; i < n; i++)
		if (get(&a, i, i) == 0) {
			k->info = i + 1;
			free(tv);
			return 0;
		}
	for (int64_t c = 0; c < k->nrhs; c++)
		for (int64_t i = n - 1; i >= 0; i--) {
			Z v = get(&b, i, c);
			for (int64_t l = i + 1; l < n; l++)
				v -= get(&a, i, l) * get(&b, l, c);
			set(&b, i, c, v / get(&a, i, i));
		}
	free(tv);
	return 0;
}

int tb_lapack(struct gpo_kernel *k)
{
	struct mat a = M(k, 0, 'M');

	switch (k->op) {
	case GPO_OP_GETRF: {
		struct mat p = M(k, 1, 'I');
		k->info = lu(&a, &p, k->m, k->n);
		return 0;
	}
	case GPO_OP_GETRS: {
		struct mat p = M(k, 1, 'I'), b = M(k, 2, 'M');
		lu_solve(&a, &p, k->opt[0], k->n, k->nrhs, &b);
		return 0;
	}
	case GPO_OP_GESV: {
		struct mat p = M(k, 1, 'I'), b = M(k, 2, 'M');
		k->info = lu(&a, &p, k->n, k->n);
		if (!k->info)
			lu_solve(&a, &p, 'N', k->n, k->nrhs, &b);
		return 0;
	}
	case GPO_OP_POTRF:
		k->info = chol(&a, k->opt[0], k->n);
		return 0;
	case GPO_OP_POTRS: {
		struct mat b = M(k, 1, 'M');
		chol_solve(&a, k->opt[0], k->n, k->nrhs, &b);
		return 0;
	}
	case GPO_OP_POSV: {
		struct mat b = M(k, 1, 'M');
		k->info = chol(&a, k->opt[0], k->n);
		if (!k->info)
			chol_solve(&a, k->opt[0], k->n, k->nrhs, &b);
		return 0;
	}
	case GPO_OP_SYEV: case GPO_OP_HEEV: case GPO_OP_SYEVD: case GPO_OP_HEEVD:
		return k_heev(k);
	case GPO_OP_GESVD: return k_gesvd(k, 0);
	case GPO_OP_GESDD: return k_gesvd(k, 1);
	case GPO_OP_GEQRF: {
		struct mat t = M(k, 1, 'M');
		qr(&a, &t, k->m, k->n);
		return 0;
	}
	case GPO_OP_GELS: return k_gels(k);
	default: return GPO_BE_UNSUPPORTED;
	}
}
