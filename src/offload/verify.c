/*
 * verify.c - verify mode (GPU_OFFLOAD_VERIFY=1, `gpu-offload run
 * --verify`): a call the policy sends to the GPU runs there into private
 * staging buffers and then on the CPU into the caller's; the program keeps
 * the CPU's results, and the two are compared here.
 *
 * Each output is compared as the operation's table says: values (the
 * largest difference relative to the largest CPU value, within 2e-3 for
 * single and 1e-8 for double precision), vectors (eigen- and singular
 * vectors are defined up to a sign or phase: not compared, their values
 * are), pivots (exactly), LU factors (only when the pivots agree). A
 * different LAPACK info is a mismatch too. Mismatches are reported one line
 * each, naming the call; after 20, one line says that more are not shown.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "frontend.h"

#define GPO__MAX_REPORTS 20
static int gpo__reports;

static double gpo__get(const void *p, char kind, char prec, size_t i, int part)
{
	int cplx = (prec == 'c' || prec == 'z') && kind == 'M';
	int single = prec == 's' || prec == 'c';

	if (!cplx && part)
		return 0;
	if (cplx)
		i = 2 * i + (size_t)part;
	return single ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

/* Largest |gpu - cpu| over the largest |cpu| of operand i. */
static double gpo__reldiff(struct gpo_ctx *x, int i)
{
	int64_t rows = x->s.b[i].rows, cols = x->s.b[i].cols;
	char kind = x->s.b[i].kind, prec = x->a.prec;
	size_t es = gpo_elem_size(x, i);
	double dmax = 0, vmax = 0;

	for (int64_t j = 0; j < cols; j++) {
		const char *cpu = (const char *)x->a.buf[i] +
				  (size_t)j * (size_t)x->a.ld[i] * es;
		const char *gpu = (const char *)x->stage[i] +
				  (size_t)j * (size_t)rows * es;
		for (int64_t r = 0; r < rows; r++)
			for (int part = 0; part < 2; part++) {
				double c = gpo__get(cpu, kind, prec, (size_t)r, part);
				double g = gpo__get(gpu, kind, prec, (size_t)r, part);
				double d = fabs(g - c);
				if (!(d <= dmax))      /* NaN counts as different */
					dmax = isnan(d) ? INFINITY : d;
				if (fabs(c) > vmax)
					vmax = fabs(c);
			}
	}
	return vmax > 0 ? dmax / vmax : dmax;
}

static int gpo__same_ints(struct gpo_ctx *x, int i)
{
	size_t bytes = (size_t)x->s.b[i].rows * gpo_elem_size(x, i);

	return memcmp(x->a.buf[i], x->stage[i], bytes) == 0;
}

static void gpo__report(struct gpo_fn *fn, struct gpo_ctx *x,
			const char *what, double diff, double tol)
{
	if (__atomic_fetch_add(&gpo__reports, 1, __ATOMIC_RELAXED) >=
	    GPO__MAX_REPORTS) {
		gpo_msg_once(GPO_MSG_MORE, "verify: further mismatches are "
			     "not shown");
		return;
	}
	if (tol > 0)
		gpo_msg("verify: %s (m=%lld n=%lld k=%lld nrhs=%lld): %s "
			"differs by %.3g relative to its largest value "
			"(tolerance %.g)", fn->name, (long long)x->a.m,
			(long long)x->a.n, (long long)x->a.k,
			(long long)x->a.nrhs, what, diff, tol);
	else
		gpo_msg("verify: %s (m=%lld n=%lld k=%lld nrhs=%lld): %s "
			"differs", fn->name, (long long)x->a.m,
			(long long)x->a.n, (long long)x->a.k,
			(long long)x->a.nrhs, what);
}

void gpo_verify_compare(struct gpo_fn *fn, struct gpo_ctx *x)
{
	double tol = x->a.prec == 's' || x->a.prec == 'c' ? 2e-3 : 1e-8;
	int pivots_agree = 1;

	if (x->a.info) {
		int64_t cpu = fn->int64 ? *(int64_t *)x->a.info :
					  *(int *)x->a.info;
		if (cpu != x->gpu_info) {
			char what[64];
			snprintf(what, sizeof what, "info (CPU %lld, GPU %lld)",
				 (long long)cpu, (long long)x->gpu_info);
			gpo__report(fn, x, what, 0, 0);
			return;
		}
		/* Both failed alike: what a failed call leaves behind (a
		 * partial factor) is not defined, so not compared. */
		if (cpu != 0)
			return;
	}
	for (int i = 0; i < x->s.nbuf; i++)
		if (x->stage[i] && x->s.b[i].cmp == GPO_CMP_PIV &&
		    !gpo__same_ints(x, i)) {
			pivots_agree = 0;
			/* Different pivots are a legitimate choice (ties); the
			 * factors then differ too and are not compared. */
		}
	for (int i = 0; i < x->s.nbuf; i++) {
		double d;
		if (!x->stage[i] || x->s.b[i].cmp == GPO_CMP_VEC ||
		    x->s.b[i].cmp == GPO_CMP_PIV ||
		    (x->s.b[i].cmp == GPO_CMP_LU && !pivots_agree))
			continue;
		d = gpo__reldiff(x, i);
		if (!(d <= tol))
			gpo__report(fn, x, x->s.b[i].name, d, tol);
	}
}
