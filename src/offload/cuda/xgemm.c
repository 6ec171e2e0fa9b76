/*
 * xgemm.c - run_host (backend.h) for gemm: the whole call from host
 * operands, its copies overlapping its kernels in column panels.
 *
 * Why: the frontend's own flow copies A and B in, runs one kernel, copies
 * C out, one after the other: dgemm n = 8192 on the H200 took 26-31 ms in,
 * 17.4 ms computing, 14-17 ms out. C's column panel j (C_j = alpha op(A)
 * op(B)_j + beta C_j) needs all of op(A) but only op(B)'s panel j (and
 * C_j), so once op(A) is in, panel j+1's copy in and panel j-1's copy
 * out run while the device computes panel j, and the kernel leaves the
 * critical path: the call takes its copies' time plus one panel's.
 *
 * Ordering with one host thread: the copy engine's copies (xfer.h) are
 * synchronous on the copy stream, the kernels asynchronous on the compute
 * stream; panel j's kernel is queued only after its inputs' copy
 * returned, and C_j is copied out only after the host waited for the
 * event recorded behind that kernel. The device buffers are whole (as the
 * frontend's flow allocates them, from the pool: both flows reuse the
 * same cached buffers), each panel in its own columns or rows of them, so
 * no copy in ever overwrites what a queued kernel still reads. Events: two,
 * alternating (panel j's is waited before panel j+2 records it again).
 *
 * op(B) = B^T or B^H: op(B)'s columns j0.. are B's rows j0..: a 2-D copy
 * of those rows of every column of B (pitch ldb).
 *
 * The frontend's invariant holds: a pure output C (beta = 0) is written
 * straight into the caller's memory at ldc, one panel at a time (after
 * the prefault of all of it, started first, as the frontend's flow does);
 * an in-out C goes into one staged result filled panel by panel
 * (gpc_stage_open/part/close), which only the frontend's commit() after a
 * successful return writes. On any failure the compute stream is waited
 * for (no kernel outlives the call), the buffers go back to the pool, and
 * the step is reported: the frontend discards and reruns on the CPU.
 *
 * Not taken (GPO_BE_UNSUPPORTED, the frontend's own flow runs): other
 * operations, empty dimensions, calls below GPC_PANEL_MIN_BYTES of
 * operands, below GPC_PANEL_MIN_INTENSITY flops per byte of them, or
 * with fewer than two panels, GPU_OFFLOAD_CUDA_PANELS=0.
 *
 * Measured on the H200 (docs/offload.md, "Copies"): the kernel leaves
 * the critical path (0.5-2 ms of "rest" per call), but each panel's copy
 * runs at about half the speed of the same bytes in one whole copy (host
 * time in copies of dgemm 8192: 62 ms against 41), so the pipeline paid
 * where the kernel is long for its bytes (sgemm 8192: 44 -> 36 ms) and not
 * elsewhere (dgemm 8192 58-61 -> 58-69 ms; dgemm 4096 13.5 -> 20 ms):
 * hence the intensity floor. Not yet known why the panel copies are
 * slower: a first panel out waits for the prefault of all of C
 * (xfault.h waits for every job), and each copy fills and drains the copy
 * engine's chunks on its own; both are candidates, neither measured.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpc.h"
#include "xfault.h"
#include "xfer.h"

static struct {
	int panels;             /* 0: off */
	int64_t grain;          /* panel widths are multiples of it */
	uint64_t min_bytes;
	uint64_t min_intensity; /* flops per byte of operands */
	gpc_event ev[2];
	struct gpc_panel_stats st;
} gpc__pn;

/* A decimal number (digits only) into *v, UINT64_MAX when it is larger
 * (a floor of 10^30 bytes means "above any call", not "unset"); 0, or -1
 * when s is not one. The backend parses no more than this (no strtoul:
 * glibc 2.38's redirect would raise the library's symbol floor). */
static int gpc__num(const char *s, uint64_t *v)
{
	uint64_t n = 0;

	if (!s || !*s)
		return -1;
	for (; *s; s++) {
		uint64_t d = (uint64_t)(*s - '0');
		if (*s < '0' || *s > '9')
			return -1;
		n = n > (UINT64_MAX - d) / 10 ? UINT64_MAX : n * 10 + d;
	}
	*v = n;
	return 0;
}

uint64_t gpc_env(const char *name, uint64_t dflt, uint64_t max)
{
	uint64_t v;

	if (gpc__num(secure_getenv(name), &v) != 0)
		return dflt;
	return v > max ? max : v;
}

int gpc_panels_start(void)
{
	memset(&gpc__pn, 0, sizeof gpc__pn);
	gpc__pn.panels = (int)gpc_env("GPU_OFFLOAD_CUDA_PANELS",
				       GPC_PANELS_DEFAULT, GPC_PANELS_MAX);
	gpc__pn.grain = (int64_t)gpc_env("GPU_OFFLOAD_CUDA_PANEL_WIDTH",
					  GPC_PANEL_GRAIN, 1u << 20);
	if (gpc__pn.grain < 1)
		gpc__pn.grain = 1;
	gpc__pn.min_bytes = gpc_env("GPU_OFFLOAD_CUDA_PANEL_MIN",
				     GPC_PANEL_MIN_BYTES, UINT64_MAX);
	gpc__pn.min_intensity = gpc_env("GPU_OFFLOAD_CUDA_PANEL_INTENSITY",
					 GPC_PANEL_MIN_INTENSITY, UINT64_MAX);
	/* No pipeline without its events: the frontend's flow. */
	if (gpc__pn.panels && gpc_events_create(gpc__pn.ev) != 0)
		gpc_panels_stop();
	return 0;
}

void gpc_panels_stop(void)
{
	gpc_events_destroy(gpc__pn.ev);
	gpc__pn.panels = 0;
}

void gpc_panel_stats(struct gpc_panel_stats *st)
{
	*st = gpc__pn.st;
}

static double gpc__now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Bytes of device memory for an operand as the frontend's flow allocates
 * it (its ld kept), 0 for none. */
static uint64_t gpc__span(const struct gpo_hostop *o)
{
	if (!o->host || o->rows <= 0 || o->cols <= 0)
		return 0;
	return ((uint64_t)o->ld * (uint64_t)(o->cols - 1) + (uint64_t)o->rows) *
	       o->esize;
}

/* One call's state. */
struct gpc__pipe {
	struct gpo_kernel *k;
	const struct gpo_hostop *a, *b, *c;
	uint64_t es;
	int64_t w, np;
	int tb;                 /* op(B) is B^T or B^H */
	gpc_dptr da, db, dc;
	double tin, tout;
};

static int64_t gpc__j0(const struct gpc__pipe *p, int64_t j)
{
	return j * p->w;
}

static int64_t gpc__nj(const struct gpc__pipe *p, int64_t j)
{
	int64_t left = p->k->n - j * p->w;

	return left < p->w ? left : p->w;
}

/* Panel j's inputs: op(B)'s columns (B's columns, or B's rows when
 * transposed), and C's columns when beta != 0. 0 or -1. */
static int gpc__in(struct gpc__pipe *p, int64_t j)
{
	uint64_t es = p->es, j0 = (uint64_t)gpc__j0(p, j), nj = (uint64_t)gpc__nj(p, j);
	uint64_t ldb = (uint64_t)p->b->ld * es, ldc = (uint64_t)p->c->ld * es;
	const char *bh = p->b->host, *ch = p->c->host;
	double t = gpc__now();
	int rc;

	if (!p->tb)
		rc = gpc_h2d(p->db + j0 * ldb, ldb, bh + j0 * ldb, ldb,
			     (uint64_t)p->b->rows * es, nj);
	else
		rc = gpc_h2d(p->db + j0 * es, ldb, bh + j0 * es, ldb, nj * es,
			     (uint64_t)p->b->cols);
	if (rc == 0 && p->c->in)
		rc = gpc_h2d(p->dc + j0 * ldc, ldc, ch + j0 * ldc, ldc,
			     (uint64_t)p->c->rows * es, nj);
	p->tin += gpc__now() - t;
	return rc;
}

/* Queue panel j's kernel and its event. 0, -1 or GPO_BE_UNSUPPORTED. */
static int gpc__run(struct gpc__pipe *p, int64_t j)
{
	struct gpo_kernel kj = *p->k;
	uint64_t es = p->es, j0 = (uint64_t)gpc__j0(p, j);
	int rc;

	kj.n = gpc__nj(p, j);
	kj.buf[0] = (void *)(uintptr_t)p->da;
	kj.buf[1] = (void *)(uintptr_t)(p->db + (p->tb ? j0 * es :
						 j0 * (uint64_t)p->b->ld * es));
	kj.buf[2] = (void *)(uintptr_t)(p->dc + j0 * (uint64_t)p->c->ld * es);
	rc = gpc_run_blas(&kj);
	if (rc != 0)
		return rc;
	return gpc_cu.EventRecord(gpc__pn.ev[j % 2], gpc_st.stream) == 0 ? 0 : -1;
}

/* Wait for panel j's kernel. 0 or -1 (the kernel failed). */
static int gpc__wait(int64_t j)
{
	return gpc_cu.EventSynchronize(gpc__pn.ev[j % 2]) == 0 ? 0 : -1;
}

/* Panel j's result out: into the caller's memory (pure output) or its
 * part of the staged C. 0 or -1. */
static int gpc__out(struct gpc__pipe *p, int64_t j)
{
	uint64_t es = p->es, j0 = (uint64_t)gpc__j0(p, j), nj = (uint64_t)gpc__nj(p, j);
	uint64_t ldc = (uint64_t)p->c->ld * es;
	double t = gpc__now();
	int rc;

	if (p->c->in)
		rc = gpc_stage_part(p->dc + j0 * ldc, ldc, j0, nj);
	else
		rc = gpc_d2h((char *)p->c->host + j0 * ldc, ldc, p->dc + j0 * ldc,
			     ldc, (uint64_t)p->c->rows * es, nj, 0);
	p->tout += gpc__now() - t;
	return rc;
}

/* The pipeline on allocated buffers; the failed step in *step. */
static int gpc__pipeline(struct gpc__pipe *p, int *step)
{
	const struct gpo_hostop *a = p->a, *c = p->c;
	uint64_t es = p->es, lda = (uint64_t)a->ld * es;
	double t = gpc__now();
	int rc;

	*step = GPO_BE_STEP_COPY_IN;
	rc = gpc_h2d(p->da, lda, a->host, lda, (uint64_t)a->rows * es,
		     (uint64_t)a->cols);
	p->tin += gpc__now() - t;
	if (rc != 0 || gpc__in(p, 0) != 0)
		return -1;
	if (c->in && gpc_stage_open(c->host, (uint64_t)c->ld * es,
				    (uint64_t)c->rows * es,
				    (uint64_t)c->cols) != 0) {
		*step = GPO_BE_STEP_COPY_OUT;
		return -1;
	}
	for (int64_t j = 0; j < p->np; j++) {
		*step = GPO_BE_STEP_KERNEL;
		if ((rc = gpc__run(p, j)) != 0)
			return rc;
		/* The device computes panel j meanwhile. */
		*step = GPO_BE_STEP_COPY_IN;
		if (j + 1 < p->np && gpc__in(p, j + 1) != 0)
			return -1;
		if (j > 0) {
			*step = GPO_BE_STEP_KERNEL;
			if (gpc__wait(j - 1) != 0)
				return -1;
			*step = GPO_BE_STEP_COPY_OUT;
			if (gpc__out(p, j - 1) != 0)
				return -1;
		}
	}
	*step = GPO_BE_STEP_KERNEL;
	if (gpc__wait(p->np - 1) != 0)
		return -1;
	*step = GPO_BE_STEP_COPY_OUT;
	if (gpc__out(p, p->np - 1) != 0)
		return -1;
	if (c->in && gpc_stage_close() != 0)
		return -1;
	return 0;
}

/* The call's pipeline in *p (no buffers yet), or -1: not taken. No
 * driver call. */
static int gpc__plan(struct gpo_kernel *k, const struct gpo_hostcall *h,
		     struct gpc__pipe *p)
{
	uint64_t bytes;

	if (k->op != GPO_OP_GEMM || h->size < sizeof *h || !gpc__pn.panels ||
	    k->m <= 0 || k->n <= 0 || k->k <= 0)
		return -1;
	memset(p, 0, sizeof *p);
	p->k = k;
	p->a = &h->op[0];
	p->b = &h->op[1];
	p->c = &h->op[2];
	p->es = gpc_esize(k->prec, 0);
	p->tb = k->opt[1] != 'N';
	if (!p->a->host || !p->b->host || !p->c->host || !p->c->out ||
	    p->a->esize != p->es || p->b->esize != p->es || p->c->esize != p->es ||
	    p->c->rows != k->m || p->c->cols != k->n ||
	    (p->tb ? p->b->rows != k->n : p->b->cols != k->n))
		return -1;
	bytes = ((uint64_t)p->a->rows * (uint64_t)p->a->cols +
		 (uint64_t)p->b->rows * (uint64_t)p->b->cols +
		 (uint64_t)k->m * (uint64_t)k->n * (p->c->in ? 2u : 1u)) * p->es;
	if (bytes < gpc__pn.min_bytes)
		return -1;
	/* The kernel time the pipeline hides grows with the flops, what it
	 * costs (each panel's copy is slower than a part of one whole copy)
	 * with the bytes: measured on the H200, it paid at 1365 flops per
	 * byte (sgemm 8192) and not at 683 (dgemm 8192) or 341 (dgemm
	 * 4096): docs/offload.md, "Copies". Real flops: 4 per complex
	 * multiply-add pair's worth (8mnk for c and z). */
	if ((k->prec == 'c' || k->prec == 'z' ? 8.0 : 2.0) * (double)k->m *
	    (double)k->n * (double)k->k <
	    (double)gpc__pn.min_intensity * (double)bytes)
		return -1;
	/* The width: n over the panel count, rounded up to the grain. */
	p->w = (k->n + gpc__pn.panels - 1) / gpc__pn.panels;
	p->w = (p->w + gpc__pn.grain - 1) / gpc__pn.grain * gpc__pn.grain;
	p->np = (k->n + p->w - 1) / p->w;
	return p->np < 2 ? -1 : 0;
}

int gpc_gemm_takes(struct gpo_kernel *k, const struct gpo_hostcall *h)
{
	struct gpc__pipe p;

	return gpc__plan(k, h, &p) == 0;
}

int gpc_gemm_host(struct gpo_kernel *k, struct gpo_hostcall *h)
{
	struct gpc__pipe p;
	uint64_t sa, sb, sc;
	int rc, step = GPO_BE_STEP_ALLOC;

	if (gpc__plan(k, h, &p) != 0)
		return GPO_BE_UNSUPPORTED;
	sa = gpc__span(p.a);
	sb = gpc__span(p.b);
	sc = gpc__span(p.c);

	h->failed = GPO_BE_STEP_ALLOC;
	if (gpc_pool_alloc(&p.da, sa) != 0)
		p.da = 0;
	else if (gpc_pool_alloc(&p.db, sb) != 0)
		p.db = 0;
	else if (gpc_pool_alloc(&p.dc, sc) != 0)
		p.dc = 0;
	if (!p.da || !p.db || !p.dc) {
		rc = -1;
	} else {
		/* The frontend's flow hands pure outputs to prefault before
		 * the copies in; so does this one. */
		if (!p.c->in)
			gpc_prefault(p.c->host, (uint64_t)p.c->ld * p.es,
				     (uint64_t)p.c->rows * p.es,
				     (uint64_t)p.c->cols);
		rc = gpc__pipeline(&p, &step);
		h->failed = step;
	}
	/* cuBLAS lacking the entry point fails the call (panel 0 may be
	 * computed already); no kernel outlives it: its buffers go back to
	 * the pool. */
	rc = gpc_host_settle(rc, &h->failed);
	if (p.dc)
		gpc_pool_free(p.dc);
	if (p.db)
		gpc_pool_free(p.db);
	if (p.da)
		gpc_pool_free(p.da);
	h->copy_in_s = p.tin;
	h->copy_out_s = p.tout;
	gpc__pn.st.calls += rc == 0;
	gpc__pn.st.panels += rc == 0 ? (uint64_t)p.np : 0;
	return rc;
}
