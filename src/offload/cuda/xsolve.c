/*
 * xsolve.c - run_host (backend.h) for gesv and posv: the whole call from
 * host operands, the copy of B in overlapping the factorisation and the
 * copy of the factor out overlapping the solve.
 *
 * Why: the frontend's own flow copies A and B in, runs getrf and getrs
 * (potrf and potrs) with one wait, then copies A, the pivots and X out,
 * one after the other: numpy's solve n = 4096 (4096 right-hand sides) on
 * the H200 spent 9-12 ms copying in, 12-16 ms copying out (waiting for
 * the kernels included) and 19-20 ms in the rest of its dgesv call
 * (docs/benchmarks.md, "numpy's solve phase by phase"). The
 * factorisation needs A only, and the solve leaves the factor as it is,
 * so:
 *
 *   A in (whole); getrf queued on the compute stream, event 0;
 *   B in (whole) while getrf runs; getrs queued (stream order puts it
 *   after getrf), event 1;
 *   wait for event 0; the factor out (staged: A is in-out) and the
 *   pivots (a pure output, straight into the caller's memory) while
 *   getrs runs;
 *   wait for event 1; the info slots (xsmall.h, one wait); X out (staged).
 *
 * Every copy is whole: xgemm.c measured a copy cut into panels at about
 * half the speed of the same bytes in one copy, and here nothing needs
 * panels (each kernel reads whole operands). The copies are the same ones
 * the frontend's flow makes, in another order, so the pipeline adds only
 * two event records and two event waits; it gains at most the copy of B
 * in (hidden behind getrf) and the copy of the factor out (behind
 * getrs). Ordering with one host thread as in xgemm.c: the copy engine's
 * copies (xfer.h) are synchronous on the copy stream, the kernels
 * asynchronous on the compute stream; B's copy ends before getrs is
 * queued, and the factor is copied out only after the host waited for
 * the factorisation's event. getrs reads the factor while it is copied
 * out: two readers.
 *
 * Workspace: the factorisation's cuSOLVER workspace comes from
 * lapack.c's gpc_getrf_q/gpc_potrf_q and goes back at the end, after the
 * last wait: a workspace larger than lapack_ws.h's kept one is given back
 * after a wait of the stream, which would end the overlap if it came
 * right after the factorisation was queued.
 *
 * info: as in run() (lapack.c's header): each cuSOLVER call writes its
 * own slot, read after the solve's event (gpc_small_end); a nonzero one
 * becomes k->info, and the frontend then discards what was staged and
 * reruns the call on the CPU, which returns LAPACK's info; X is then not
 * copied out. A negative one fails the call.
 *
 * The frontend's invariant holds: the factor and X are staged
 * (GPO_BE_STAGE) and reach the caller's memory only by the frontend's
 * commit() after a successful return; the pivots, a pure output, are
 * written straight (after their prefault, as in the frontend's flow),
 * before the call is known to succeed: a failed or singular call leaves
 * the device's pivots there, and the CPU's rerun writes all n of them
 * (LAPACK's getrf sets every pivot, a singular matrix's too; arguments
 * LAPACK refuses never reach the GPU, front.c's gpo__valid). On any
 * failure the compute stream is waited for (no kernel outlives the
 * call), the buffers and the workspace go back, and the step is reported
 * in h->failed: the frontend discards and reruns the call on the CPU.
 *
 * Not taken (GPO_BE_UNSUPPORTED, the frontend's flow runs, nothing done):
 * other operations; GPU_OFFLOAD_CUDA_SOLVE_PIPE=0; A and B of fewer than
 * GPU_OFFLOAD_CUDA_SOLVE_MIN bytes together (default GPC_SOLVE_MIN_BYTES,
 * 8 MiB: below 1 MiB the operands are the small-call arena's, one copy
 * each way and one wait, which the pipeline must not replace with its
 * separate copies; at 8 MiB the copies it can hide, B in and the factor
 * out, take 150 us or more at the copy engine's 33-43 GB/s, several times
 * its two event records and waits; not measured on the H200 yet); zero
 * dimensions (LAPACK's quick returns, as run()); operands other than the
 * frontend's description of the call (sizes, element sizes, in/out);
 * dimensions beyond 2^31-1 with 32-bit pivots, or cuSOLVER names the
 * library lacks (the frontend's flow then answers as it does); verify
 * mode (the frontend never offers run_host then).
 */
#define _GNU_SOURCE
#include "compat.h"
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gpc.h"
#include "lapack_ws.h"
#include "xfer.h"
#include "xsmall.h"

static struct {
	int on;
	uint64_t min_bytes;
	gpc_event ev[2];
} gpc__sv;

int gpc_solve_start(void)
{
	memset(&gpc__sv, 0, sizeof gpc__sv);
	gpc__sv.on = (int)gpc_env("GPU_OFFLOAD_CUDA_SOLVE_PIPE", 1, 1);
	gpc__sv.min_bytes = gpc_env("GPU_OFFLOAD_CUDA_SOLVE_MIN",
				    GPC_SOLVE_MIN_BYTES, UINT64_MAX);
	/* No pipeline without its events: the frontend's flow. */
	if (gpc__sv.on && gpc_events_create(gpc__sv.ev) != 0)
		gpc_solve_stop();
	return 0;
}

void gpc_solve_stop(void)
{
	gpc_events_destroy(gpc__sv.ev);
	gpc__sv.on = 0;
}

static double gpc__now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int gpc__fits(int64_t v)
{
	return v >= 0 && v <= 0x7fffffff;
}

/* Whether cuSOLVER has the three functions of the call: the LU ones in
 * the API of the pivots' width (lapack.c's choice), or the Cholesky ones;
 * remembered (the library stays loaded). No driver call. */
static int gpc__have(int lu, int int64, char prec)
{
	static signed char have[6];   /* 0 unknown, 1 yes, -1 no */
	static const char *const base[3] = { "getrf_bufferSize", "getrf", "getrs" };
	static const char *const chol[3] = { "cusolverDnXpotrf_bufferSize",
					     "cusolverDnXpotrf", "cusolverDnXpotrs" };
	int i = !lu ? 5 : int64 ? 0 : 1 + (prec == 's' ? 0 : prec == 'd' ? 1 :
					   prec == 'c' ? 2 : 3);
	char name[48];

	if (!have[i]) {
		have[i] = 1;
		for (int f = 0; f < 3; f++) {
			if (!lu)
				snprintf(name, sizeof name, "%s", chol[f]);
			else
				snprintf(name, sizeof name, "cusolverDn%c%s",
					 int64 ? 'X' : gpc_P(prec), base[f]);
			if (!gpc_solver_sym(name))
				have[i] = -1;
		}
	}
	return have[i] > 0;
}

/* Device bytes of an operand as the frontend's flow allocates it. */
static uint64_t gpc__span(const struct gpo_hostop *o)
{
	return ((uint64_t)o->ld * (uint64_t)(o->cols - 1) + (uint64_t)o->rows) *
	       o->esize;
}

/* One call's state. */
struct gpc__solve {
	struct gpo_kernel *k;
	const struct gpo_hostop *a, *p, *b;     /* p: the pivots (gesv) */
	int lu;                 /* gesv (getrf, getrs); else posv */
	uint64_t es;
	gpc_dptr da, dp, db;
	struct gpc_ws ws;       /* the factorisation's, back at the end */
	double tin, tout;
};

/* An in-out matrix of rows x cols of the call's element size. */
static int gpc__inout(const struct gpo_hostop *o, int64_t rows, int64_t cols,
		      uint64_t es)
{
	return o->host && o->esize == es && o->rows == rows && o->cols == cols &&
	       o->ld >= rows && o->in && o->out;
}

/* The call's plan in *s (no buffers yet), or -1: not taken. No driver
 * call. */
static int gpc__plan(struct gpo_kernel *k, const struct gpo_hostcall *h,
		     struct gpc__solve *s)
{
	int64_t n = k->n, nrhs = k->nrhs;

	if ((k->op != GPO_OP_GESV && k->op != GPO_OP_POSV) || !gpc__sv.on ||
	    h->size < sizeof *h || n <= 0 || nrhs <= 0)
		return -1;
	memset(s, 0, sizeof *s);
	s->k = k;
	s->lu = k->op == GPO_OP_GESV;
	s->es = gpc_esize(k->prec, 0);
	s->a = &h->op[0];
	s->b = &h->op[s->lu ? 2 : 1];
	s->p = s->lu ? &h->op[1] : NULL;
	if (!gpc__inout(s->a, n, n, s->es) || !gpc__inout(s->b, n, nrhs, s->es) ||
	    s->a->ld != k->ld[0] || s->b->ld != k->ld[s->lu ? 2 : 1])
		return -1;
	if (s->lu && (!s->p->host || s->p->in || !s->p->out || s->p->rows != n ||
		      s->p->cols != 1 || s->p->esize != (k->int64 ? 8u : 4u)))
		return -1;
	if (!s->lu && k->opt[0] != 'U' && k->opt[0] != 'L')
		return -1;
	/* Unsigned before the sum: n + nrhs may pass INT64_MAX (both are
	 * positive here), and a signed overflow is undefined. */
	if ((uint64_t)n * ((uint64_t)n + (uint64_t)nrhs) * s->es < gpc__sv.min_bytes)
		return -1;
	/* The 32-bit API's limits (lapack.c's gpc__fits), the names. */
	if (s->lu && !k->int64 && (!gpc__fits(n) || !gpc__fits(nrhs) ||
				   !gpc__fits(s->a->ld) || !gpc__fits(s->b->ld)))
		return -1;
	return gpc__have(s->lu, k->int64, k->prec) ? 0 : -1;
}

int gpc_solve_takes(struct gpo_kernel *k, const struct gpo_hostcall *h)
{
	struct gpc__solve s;

	return gpc__plan(k, h, &s) == 0;
}

/* A whole matrix operand in (o's rows of every column, at its ld). */
static int gpc__in(struct gpc__solve *s, const struct gpo_hostop *o,
		   gpc_dptr d)
{
	uint64_t ld = (uint64_t)o->ld * s->es;
	double t = gpc__now();
	int rc = gpc_h2d(d, ld, o->host, ld, (uint64_t)o->rows * s->es,
			 (uint64_t)o->cols);

	s->tin += gpc__now() - t;
	return rc;
}

/* A whole matrix operand out, staged (both are in-out). */
static int gpc__out(struct gpc__solve *s, const struct gpo_hostop *o,
		    gpc_dptr d)
{
	uint64_t ld = (uint64_t)o->ld * s->es;
	double t = gpc__now();
	int rc = gpc_d2h(o->host, ld, d, ld, (uint64_t)o->rows * s->es,
			 (uint64_t)o->cols, GPO_BE_STAGE);

	s->tout += gpc__now() - t;
	return rc;
}

/* The pipeline on allocated buffers (the header's order); the failed
 * step in *step. 0 (k->info set), -1 or GPO_BE_UNSUPPORTED. */
static int gpc__pipeline(struct gpc__solve *s, int *step)
{
	struct gpo_kernel *k = s->k;
	int64_t n = k->n, nrhs = k->nrhs, lda = s->a->ld, ldb = s->b->ld;
	char uplo = k->opt[0];
	int rc, info = 0;

	*step = GPO_BE_STEP_COPY_IN;
	if (gpc__in(s, s->a, s->da) != 0)
		return -1;
	*step = GPO_BE_STEP_KERNEL;
	if (gpc_small_begin(gpc_st.stream) != 0)        /* the info slots */
		return -1;
	rc = s->lu ? gpc_getrf_q(k, n, n, s->da, lda, s->dp, &s->ws) :
		     gpc_potrf_q(k, uplo, n, s->da, lda, &s->ws);
	if (rc != 0)
		return rc;
	if (gpc_cu.EventRecord(gpc__sv.ev[0], gpc_st.stream) != 0)
		return -1;
	/* The device factors A meanwhile. */
	*step = GPO_BE_STEP_COPY_IN;
	if (gpc__in(s, s->b, s->db) != 0)
		return -1;
	*step = GPO_BE_STEP_KERNEL;
	rc = s->lu ? gpc_getrs(k, 'N', n, nrhs, s->da, lda, s->dp, s->db, ldb) :
		     gpc_potrs(k, uplo, n, nrhs, s->da, lda, s->db, ldb);
	if (rc != 0)
		return rc;
	if (gpc_cu.EventRecord(gpc__sv.ev[1], gpc_st.stream) != 0 ||
	    gpc_cu.EventSynchronize(gpc__sv.ev[0]) != 0)
		return -1;
	/* The factor is final; the device solves meanwhile. */
	*step = GPO_BE_STEP_COPY_OUT;
	if (gpc__out(s, s->a, s->da) != 0)
		return -1;
	if (s->lu) {
		uint64_t w = (uint64_t)n * s->p->esize;
		double t = gpc__now();
		rc = gpc_d2h(s->p->host, w, s->dp, w, w, 1, 0);
		s->tout += gpc__now() - t;
		if (rc != 0)
			return -1;
	}
	*step = GPO_BE_STEP_KERNEL;
	if (gpc_cu.EventSynchronize(gpc__sv.ev[1]) != 0 ||
	    gpc_small_end(gpc_st.stream, 0, &info) != 0)
		return -1;
	k->info = info;
	if (info)
		return 0;       /* the frontend reruns the call on the CPU */
	*step = GPO_BE_STEP_COPY_OUT;
	return gpc__out(s, s->b, s->db) != 0 ? -1 : 0;
}

int gpc_solve_host(struct gpo_kernel *k, struct gpo_hostcall *h)
{
	struct gpc__solve s;
	int rc, step = GPO_BE_STEP_ALLOC;

	if (gpc__plan(k, h, &s) != 0)
		return GPO_BE_UNSUPPORTED;
	h->failed = GPO_BE_STEP_ALLOC;
	if (gpc_pool_alloc(&s.da, gpc__span(s.a)) != 0)
		s.da = 0;
	else if (gpc_pool_alloc(&s.db, gpc__span(s.b)) != 0)
		s.db = 0;
	else if (s.lu && gpc_pool_alloc(&s.dp, gpc__span(s.p)) != 0)
		s.dp = 0;
	if (!s.da || !s.db || (s.lu && !s.dp)) {
		rc = -1;
	} else {
		/* The frontend's flow hands pure outputs to prefault before
		 * the copies in; so does this one. */
		if (s.lu)
			gpc_prefault(s.p->host, gpc__span(s.p), gpc__span(s.p), 1);
		rc = gpc__pipeline(&s, &step);
		h->failed = step;
	}
	/* A name that went missing after the plan looked fails the call (a
	 * kernel may be queued already); no kernel outlives it: then its
	 * workspace and buffers go back to the pool. */
	rc = gpc_host_settle(rc, &h->failed);
	gpc_ws_put(&s.ws);
	if (s.dp)
		gpc_pool_free(s.dp);
	if (s.db)
		gpc_pool_free(s.db);
	if (s.da)
		gpc_pool_free(s.da);
	h->copy_in_s = s.tin;
	h->copy_out_s = s.tout;
	return rc;
}
