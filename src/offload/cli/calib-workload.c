/*
 * calib-workload.c - the calibration workload of `gpu-offload calibrate`
 * (docs/offload.md, "Calibration"): an ordinary BLAS/LAPACK client, so
 * that what it measures includes all that a real call pays, run under
 * libgpuoffload.so once with every call forced to the CPU and once to the
 * GPU. The library's traces hold the timings; this program's log says
 * which of the traced calls count: those of a point's accepted
 * measurement whose LAPACK info was 0. This file runs the points; the
 * calls themselves (the libraries' names, integer width and argument
 * lists) are calib-call.c's.
 *
 * Usage: gpu-offload-calib MAX_SIZE REPS CALL_CAP_S DEADLINE_S
 *   sizes 64, 128, ... MAX_SIZE, size by size over every operation (in
 *   the table's order, gemm first); an operation stops growing once one
 *   of its calls took more than CALL_CAP_S seconds, and once its next
 *   point, predicted as 8 times its last one (n^3 work; gemv's 4 times,
 *   n^2), would end after DEADLINE_S seconds from the start (the log
 *   says which). gemv is measured only at sizes whose calls can be
 *   offloaded (gemv_measured), with its matrix resident.
 * Where the time goes (the CPU pass of a 16-core H100 machine took 171 s
 * before): a curve's last point, whose calls are up to 8 times the cap,
 * measured REPS times; and remaking the matrices (one thread, a
 * transposed pass for the Hermitian ones) before every LAPACK call. So,
 * unless GPO_CALIB_THOROUGH=1 (every point, every rep: the old grid, to
 * compare the fits):
 *   - a point's matrices are made once and copied before each call;
 *   - a point's reps stop once two calls of at least 20 ms agree within
 *     3% (the fit takes a lower quartile: two agreeing calls give it);
 *   - a curve stops growing where it is smooth: when its next point
 *     would take more than the cap and its speed grew by less than 10%
 *     over its last doubling (the model holds the speed flat beyond the
 *     last point, within that 10%); the log says "smooth NAME N".
 * Environment (set by `gpu-offload calibrate`):
 *   GPO_CALIB_LIBS   the CPU libraries, ':'-separated, dlopen()ed
 *                    RTLD_GLOBAL (default libblas.so.3:liblapack.so.3);
 *                    the name scheme (dgemm_, scipy_dgemm_,
 *                    scipy_dgemm_64_) and integer width follow from their
 *                    symbols
 *   GPO_CALIB_LOG    where the log goes (default: stdout)
 *   GPO_CALIB_OPS    only these curves, e.g. "dgemm,sgetrf"
 *   GPO_CALIB_PLAN   "dgemm=8192,sgetrf=4096,...": the largest size per
 *                    curve (the GPU pass measures what the CPU pass did)
 * Test hooks (tests/offload/test_calibrate.py):
 *   GPO_CALIB_TEST_SLOW=NAME:N      the canary after the first
 *                                   measurement of that point is slow
 *   GPO_CALIB_TEST_SINGULAR=NAME:N  that point's matrices are singular
 *                                   (getrf/gesv info > 0)
 *   GPO_CALIB_TEST_QUIET=1          the canary always reports its quiet
 *                                   time (no point is repeated unless
 *                                   the hook above says so)
 *
 * The log, one item a line:
 *   library PATH                  a CPU library loaded
 *   scheme PREFIX SUFFIX INT64    the names used: PREFIX dgemm SUFFIX
 *   quiet SECONDS                 the canary's quiet time at the start
 *   point NAME N attempts A clean C unsettled U
 *   call T0_NS T1_NS INFO         one call of the point's accepted
 *                                 measurement (CLOCK_REALTIME window)
 *   missing NAME                  the library has no such function
 *   budget NAME N                 the deadline left NAME's size N and
 *                                 above unmeasured
 *   smooth NAME N                 NAME's curve flat enough to stop
 *                                 before size N (above)
 *   spent NAME N PREP CALLS OTHER seconds of the point: making matrices,
 *                                 the accepted calls, the rest (canary,
 *                                 repeats, workspace query)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calib-canary.h"
#include "calib-work.h"
#include "lease.h"          /* gm_parse_uint */
#include "resid.h"          /* GPO_RES_MIN_DEFAULT */

static const struct wop wops[] = {
	{ "gemm", "sdcz", K_GEMM },   { "getrf", "sdcz", K_GETRF },
	{ "gesv", "sdcz", K_GESV },   { "potrf", "sdcz", K_POTRF },
	{ "syevd", "sd", K_SYEVD },   { "heevd", "cz", K_HEEVD },
	{ "gesdd", "sdcz", K_GESDD }, { "gesvd", "sd", K_GESVD },
	{ "gemv", "sdcz", K_GEMV },
};
#define NCURVES 30 /* the precisions above, all told */

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int64_t real_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- Matrices ----------------------------------------------------------- */

static void put(void *a, char p, size_t k, double v)
{
	if (isdbl(p))
		((double *)a)[k] = v;
	else
		((float *)a)[k] = (float)v;
}
static double get(const void *a, char p, size_t k)
{
	return isdbl(p) ? ((const double *)a)[k] : ((const float *)a)[k];
}

/*
 * An n x n matrix of random numbers in [0,1). `herm`: made Hermitian
 * (symmetric for real) with n added on the diagonal, diagonally dominant
 * and so positive definite: potrf, syevd/heevd. `singular`: column 0 zero
 * (the test hook), so that an LU reports info > 0.
 */
static void fill(void *a, char p, int n, int herm, int singular)
{
	size_t re = iscpx(p) ? 2 : 1, all = (size_t)n * n * re;
	unsigned s = 12345;

	for (size_t k = 0; k < all; k++) {
		s = s * 1103515245u + 12345u;
		put(a, p, k, (s >> 8) / 16777216.0);
	}
	if (herm) {
		for (int j = 0; j < n; j++)
			for (int i = 0; i < j; i++) {
				size_t up = ((size_t)j * n + i) * re;
				size_t lo = ((size_t)i * n + j) * re;
				put(a, p, lo, get(a, p, up));
				if (re == 2)
					put(a, p, lo + 1, -get(a, p, up + 1));
			}
		for (int i = 0; i < n; i++) {
			size_t d = ((size_t)i * n + i) * re;
			put(a, p, d, get(a, p, d) + n);
			if (re == 2)
				put(a, p, d + 1, 0);
		}
	}
	if (singular)
		for (size_t k = 0; k < (size_t)n * re; k++)
			put(a, p, k, 0);
}

/* ---- The canary --------------------------------------------------------- */

static volatile double sink;
static int slow_next;      /* test hook: the next canary reports slow */
static int always_quiet;   /* test hook: a machine that is never busy */

static double canary(void *arg)
{
	double t = mono(), x = 1;

	(void)arg;
	for (int i = 0; i < 2000000; i++)
		x = x * 1.0000001 + 1e-9;
	sink = x;
	t = always_quiet ? 1e-3 : mono() - t;
	if (slow_next) {
		slow_next = 0;
		return t * 1000;
	}
	return t;
}

/* ---- One point ---------------------------------------------------------- */

/* The matrices of one point, made once: A into a0 (copied into a before
 * each call: LAPACK overwrites it), B for gemm and gesv. */
static void make(struct point *pt)
{
	enum kind k = pt->w->kind;
	int herm = k == K_POTRF || k == K_SYEVD || k == K_HEEVD;
	double t = mono();

	fill(pt->a0 ? pt->a0 : pt->a, pt->p, pt->n, herm, pt->singular);
	if (k == K_GEMM || k == K_GESV || k == K_GEMV)
		fill(pt->b, pt->p, pt->n, 0, 0);
	pt->prep_s += mono() - t;
}

/* The matrices of one call: A as made (LAPACK overwrote it); gesv's B
 * too. Thorough: made again, as before. */
static void prepare(struct point *pt)
{
	double t;

	if (!pt->a0) {          /* gemm, gemv: their operands stay as made */
		/* Never gemv's, even thorough: a rewritten matrix is no
		 * longer resident, and what its curve measures is a call
		 * whose matrix is (docs/offload-residency.md). */
		if (pt->thorough && pt->w->kind == K_GEMM)
			make(pt);
		return;
	}
	if (pt->thorough)
		make(pt);
	t = mono();
	memcpy(pt->a, pt->a0, (size_t)pt->n * pt->n * esize(pt->p));
	if (pt->w->kind == K_GESV && !pt->thorough)
		fill(pt->b, pt->p, pt->n, 0, 0);
	pt->prep_s += mono() - t;
}

static void measure(void *arg, int attempt)
{
	struct point *pt = arg;
	double start = mono(), prev = 0;

	pt->ncall = 0;
	pt->fastest = 0;
	for (int r = 0; r < pt->reps && r < 64; r++) {
		double t;
		if (pt->w->kind != K_GEMM || r == 0)
			prepare(pt);
		pt->t0[r] = real_ns();
		t = mono();
		pt->info[r] = calib_call(pt, 0, NULL, NULL, NULL);
		t = mono() - t;
		pt->t1[r] = real_ns();
		pt->ncall = r + 1;
		if (pt->fastest == 0 || t < pt->fastest)
			pt->fastest = t;
		/* a point of long calls: two are enough for its quartile */
		if (r >= 1 && mono() - start > 2 * pt->cap)
			break;
		/* two calls that agree: more would not move the quartile */
		if (!pt->thorough && r >= 1 && t >= 0.02 &&
		    t < prev * 1.03 && prev < t * 1.03)
			break;
		prev = t;
	}
	if (attempt == 0 && pt->slow_hook)
		slow_next = 1;
}

/* "NAME:N" of a test hook matches the point. */
static int hook(const char *var, const char *name, int n)
{
	const char *v = getenv(var);
	char want[48];

	if (!v || !*v)
		return 0;
	snprintf(want, sizeof want, "%s:%d", name, n);
	return strcmp(v, want) == 0;
}

/* A listed curve ("dgemm,sgetrf"); NULL or "" lists every curve. */
static int listed(const char *list, const char *name)
{
	size_t l = strlen(name);

	if (!list || !*list)
		return 1;
	for (const char *s = list; (s = strstr(s, name)); s += l)
		if ((s == list || s[-1] == ',') && (s[l] == ',' || s[l] == '\0' ||
						   s[l] == '='))
			return 1;
	return 0;
}

/* The plan's largest size of `name` (0: not in the plan); -1 no plan. */
static long planned(const char *plan, const char *name)
{
	size_t l = strlen(name);

	if (!plan || !*plan)
		return -1;
	for (const char *s = plan; (s = strstr(s, name)); s += l)
		if ((s == plan || s[-1] == ',') && s[l] == '=') {
			long v = 0;
			for (s += l + 1; *s >= '0' && *s <= '9' && v < 1000000; s++)
				v = v * 10 + (*s - '0');
			return v;
		}
	return 0;
}

/* A decimal argument (no atoi in src/: see src/lease/num.c). */
static long arg(const char *s, long def)
{
	long v = 0;

	if (!s || !*s)
		return def;
	for (; *s >= '0' && *s <= '9' && v < 100000000; s++)
		v = v * 10 + (*s - '0');
	return *s || v == 0 ? def : v;
}

/*
 * gemv: whether size n is measured, and where its matrix starts in the
 * size's buffer. Its calls are offloaded only with the matrix resident,
 * so not at all with residency off (GPU_OFFLOAD_RESIDENT=0) nor under the
 * residency minimum (GPU_OFFLOAD_RESIDENT_MIN, as the library reads it):
 * such sizes are not measured. Each precision's matrix starts at its own
 * offset, so that no two points name the same operand (address, pitch,
 * width, columns: d and c would), which the table would take for one
 * matrix rewritten between calls and back off from.
 */
static int gemv_measured(long n, char p)
{
	const char *off = getenv("GPU_OFFLOAD_RESIDENT");
	const char *m = getenv("GPU_OFFLOAD_RESIDENT_MIN");
	uint64_t min = GPO_RES_MIN_DEFAULT, v;

	if (off && strcmp(off, "0") == 0)
		return 0;
	/* read as resid.c reads it */
	if (m && *m && gm_parse_uint(m, 10, UINT64_MAX, &v) == 0)
		min = v;
	return (uint64_t)n * (uint64_t)n * esize(p) >= min;
}

static size_t gemv_offset(char p)
{
	/* z fills the buffer (16 bytes an element); the others fit their
	 * offset within it (n >= 64) */
	return 64 * (size_t)(3 - (strchr("sdcz", p) - "sdcz"));
}

/* Buffers for one size, the largest any curve needs. */
struct bufs { void *a, *a0, *b, *c, *piv, *w, *iwork, *rwork; };

static int alloc(struct bufs *b, int n)
{
	size_t nn = (size_t)n * n;

	b->a = malloc(nn * 16);
	b->a0 = malloc(nn * 16);
	b->b = malloc(nn * 16);
	b->c = malloc(nn * 16);
	b->piv = malloc((size_t)n * 8 + 8);
	b->w = malloc((size_t)n * 8 + 8);
	/* gesdd: 8 n integers; complex gesdd's rwork (jobz A):
	 * 5 n^2 + 7 n reals at most */
	b->iwork = malloc((size_t)n * 64 + 64);
	b->rwork = malloc((nn * 5 + (size_t)n * 7 + 8) * 8);
	return b->a && b->a0 && b->b && b->c && b->piv && b->w && b->iwork &&
	       b->rwork ? 0 : -1;
}

static void release(struct bufs *b)
{
	free(b->a);
	free(b->a0);
	free(b->b);
	free(b->c);
	free(b->piv);
	free(b->w);
	free(b->iwork);
	free(b->rwork);
	memset(b, 0, sizeof *b);
}

int main(int argc, char **argv)
{
	long max = arg(argc > 1 ? argv[1] : NULL, 512);
	int reps = (int)arg(argc > 2 ? argv[2] : NULL, 4);
	double cap = arg(argc > 3 ? argv[3] : NULL, 1000) / 1000.0;
	double deadline = (double)arg(argc > 4 ? argv[4] : NULL, 600);
	const char *lp = getenv("GPO_CALIB_LOG"), *ops = getenv("GPO_CALIB_OPS");
	const char *plan = getenv("GPO_CALIB_PLAN");
	struct gpo_crule rule = { 1.5, 20, 3 };
	FILE *log = lp && *lp ? fopen(lp, "w") : stdout;
	int done[NCURVES] = { 0 };
	double last[NCURVES] = { 0 }; /* the curve's last point, seconds */
	/* the curve's fastest call at its last two sizes (n/2, then n) */
	double fast[NCURVES][2] = { { 0 } };
	int thorough = getenv("GPO_CALIB_THOROUGH") &&
		       strcmp(getenv("GPO_CALIB_THOROUGH"), "1") == 0;
	double start = mono(), quiet;
	struct bufs bf;

	if (!log) {
		perror(lp);
		return 1;
	}
	memset(&bf, 0, sizeof bf);
	always_quiet = getenv("GPO_CALIB_TEST_QUIET") &&
		       strcmp(getenv("GPO_CALIB_TEST_QUIET"), "1") == 0;
	if (calib_load(log))
		return 1;
	quiet = canary(NULL);
	for (int i = 0; i < 4; i++) {
		double t = canary(NULL);
		if (t < quiet)
			quiet = t;
	}
	fprintf(log, "quiet %.9f\n", quiet);
	fflush(log);
	{
		/* A first call outside every point: the GPU pass starts the
		 * GPU here, so no point's call pays the start-up. */
		struct point w;
		memset(&w, 0, sizeof w);
		w.w = &wops[0];
		w.p = 'd';
		w.n = 64;
		snprintf(w.name, sizeof w.name, "%sdgemm%s", calib_prefix, calib_suffix);
		w.fn = calib_find(w.name);
		if (w.fn && alloc(&bf, 64) == 0) {
			w.a = bf.a, w.b = bf.b, w.c = bf.c;
			prepare(&w);
			calib_call(&w, 0, NULL, NULL, NULL);
		}
		release(&bf);
	}
	for (long n = 64; n <= max; n *= 2) {
		int curve = 0, any = 0;

		for (size_t o = 0; o < sizeof wops / sizeof wops[0]; o++)
			for (const char *p = wops[o].precs; *p; p++, curve++) {
				struct point pt;
				struct gpo_cresult res;
				char cname[16];
				long lim;
				/* work per point over the last: n^3, gemv n^2 */
				double grow = wops[o].kind == K_GEMV ? 4 : 8;
				double qw, qr;
				int64_t qi, info;

				snprintf(cname, sizeof cname, "%c%s", *p, wops[o].op);
				lim = planned(plan, cname);
				if (done[curve] || !listed(ops, cname) ||
				    (lim >= 0 && n > lim) ||
				    (wops[o].kind == K_GEMV && !gemv_measured(n, *p)))
					continue;
				/* The cheap curves may still fit when the slow
				 * ones do not: each is cut on its own. */
				if (mono() - start + grow * last[curve] > deadline) {
					fprintf(log, "budget %s %ld\n", cname, n);
					done[curve] = 1;
					continue;
				}
				/* Smooth: the next point's calls past the cap,
				 * and its speed (work / call) grew by less
				 * than 10% over the last doubling. Not in the
				 * GPU pass (a plan): it measures what the CPU
				 * pass did. */
				if (!thorough && lim < 0 && fast[curve][0] > 0 &&
				    grow * fast[curve][1] > cap &&
				    grow * fast[curve][0] / fast[curve][1] < 1.1) {
					fprintf(log, "smooth %s %ld\n", cname, n);
					done[curve] = 1;
					continue;
				}
				last[curve] = mono();
				any = 1;
				if (!bf.a && alloc(&bf, (int)n)) {
					fprintf(stderr, "gpu-offload-calib: out of memory at size %ld\n", n);
					goto out;
				}
				memset(&pt, 0, sizeof pt);
				pt.w = &wops[o];
				pt.p = *p;
				pt.n = (int)n;
				pt.reps = reps;
				pt.cap = cap;
				pt.a = bf.a, pt.b = bf.b, pt.c = bf.c;
				pt.a0 = pt.w->kind == K_GEMM ||
					pt.w->kind == K_GEMV ? NULL : bf.a0;
				if (pt.w->kind == K_GEMV)
					pt.a = (char *)bf.a + gemv_offset(*p);
				pt.thorough = thorough;
				pt.piv = bf.piv, pt.w_ = bf.w;
				pt.iwork = bf.iwork, pt.rwork = bf.rwork;
				snprintf(pt.name, sizeof pt.name, "%s%s%s", calib_prefix,
					 cname, calib_suffix);
				pt.fn = calib_find(pt.name);
				if (!pt.fn) {
					fprintf(log, "missing %s\n", pt.name);
					done[curve] = 1;
					continue;
				}
				pt.singular = hook("GPO_CALIB_TEST_SINGULAR", cname, (int)n);
				pt.slow_hook = hook("GPO_CALIB_TEST_SLOW", cname, (int)n);
				pt.lwork = 1;
				/* The workspace query, outside the measured calls. */
				make(&pt);
				if (pt.w->kind == K_GEMV) {
					/* Two calls outside the measured ones, as a
					 * program's first two products with its
					 * matrix: the first makes it seen, the second
					 * (in the GPU pass) copies it in and keeps it.
					 * The measured calls find it resident, as the
					 * program's later calls do. */
					calib_call(&pt, 0, NULL, NULL, NULL);
					calib_call(&pt, 0, NULL, NULL, NULL);
				}
				if (pt.w->kind >= K_SYEVD) { /* LAPACK with work arrays */
					prepare(&pt);
					info = calib_call(&pt, 1, &qw, &qi, &qr);
					pt.lwork = info == 0 && qw >= 1 ? (int64_t)qw : 1;
					pt.liwork = qi > 0 ? qi : 8 * n;
					pt.lrwork = qr >= 1 ? (int64_t)qr : 1;
					if (pt.w->kind == K_GESDD)
						pt.liwork = 8 * n;
					pt.work = malloc((size_t)pt.lwork * esize(pt.p) + 64);
					if (pt.liwork * (calib_w64 ? 8 : 4) > (int64_t)n * 64 ||
					    pt.lrwork > (int64_t)(n * n * 5 + n * 7 + 8) ||
					    !pt.work) {
						free(pt.work);
						fprintf(log, "missing %s\n", pt.name);
						done[curve] = 1;
						continue;
					}
				}
				gpo_calib_point(&rule, quiet, canary, measure, &pt, &res);
				quiet = res.quiet;
				last[curve] = mono() - last[curve];
				free(pt.work);
				fprintf(log, "point %s %ld attempts %d clean %d unsettled %d\n",
					cname, n, res.attempts, res.clean, res.unsettled);
				{
					double calls = 0;
					for (int i = 0; i < pt.ncall; i++) {
						fprintf(log, "call %lld %lld %lld\n",
							(long long)pt.t0[i], (long long)pt.t1[i],
							(long long)pt.info[i]);
						calls += (pt.t1[i] - pt.t0[i]) / 1e9;
					}
					fprintf(log, "spent %s %ld %.6f %.6f %.6f\n", cname, n,
						pt.prep_s, calls,
						last[curve] - pt.prep_s - calls);
				}
				fflush(log);
				fast[curve][0] = fast[curve][1];
				fast[curve][1] = pt.fastest;
				if (pt.fastest > cap)
					done[curve] = 1;
			}
		release(&bf);
		if (!any)
			break;
	}
out:
	release(&bf);
	if (log != stdout)
		fclose(log);
	return 0;
}
