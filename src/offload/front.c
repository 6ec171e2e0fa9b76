/*
 * front.c - the frontend's path through one intercepted call: the nesting
 * depth, the fast path for small calls, workspace queries, arguments the
 * GPU path does not take, the policy's decision, the GPU call, and the
 * observation afterwards (src/offload/frontend.h shows the order).
 *
 * Nothing happens at load time: the configuration is read at the first
 * call that reaches gpo_run (or a paused call's gpo_begin); calls of
 * other threads meanwhile wait for it (gpo__config). errno: every wrapper leaves errno as the real
 * function left it (CPU path) or as the caller had it (GPU path); nothing
 * of ours shows through.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <time.h>
#include <unistd.h>

#include "frontend.h"
#include "lease.h"
#include "resid.h"
#include "pcopy/pcopy.h"
#include "profile.h"

/* This thread's depth (calls inside a wrapper: nested calls, a CPU
 * LAPACK routine calling BLAS or a backend calling host BLAS, pass
 * straight through and are never decided again) and quiet count (inside
 * the backend's start, stop or memory call, which the policy makes under
 * its own lock: a BLAS call from there passes straight through without
 * the policy, whose lock this thread holds) are gpo_tls's (count.h): one
 * block with the thread's counts. */

void gpo_quiet(int on)
{
	gpo_tls.quiet += on ? 1 : -1;
}

int gpo_verify_mode;
static double gpo__min_flops = 1e6;
/* 1 once the configuration is read: the calls' check before pthread_once
 * (which keeps the reading itself to one thread). */
static int gpo__config_done;
static pthread_once_t gpo__config_once = PTHREAD_ONCE_INIT;
double gpo_fast_min, gpo_fast_copy_min;

static int gpo__secure(void);

static void gpo__config_read(void)
{
	const char *s;

	gpo_tls.cfg = 1;
	s = getenv("GPU_OFFLOAD_MIN_FLOPS");
	if (s && *s) {
		/* flops: a decimal number, an exponent allowed (1e8), as the
		 * profile's numbers; not negative, not infinite */
		double d;
		const char *end;
		if (gpo_scan_double(s, &d, &end) == 0 && !*end && d >= 0)
			gpo__min_flops = d;
		else
			gpo_msg("GPU_OFFLOAD_MIN_FLOPS=%s is not a number; "
				"using 1000000", s);
	}
	s = getenv("GPU_OFFLOAD_VERIFY");
	gpo_verify_mode = s && s[0] == '1' && !s[1];
	/* The light path's thresholds, then its gate (count.h): never for
	 * a secure-execution process (its calls pass through unseen) nor
	 * with the threshold 0 (every call measured: the full path). */
	gpo_fast_min = gpo__min_flops;
	gpo_fast_copy_min = (double)gpo_pcopy_min_n < gpo__min_flops ?
			    (double)gpo_pcopy_min_n : gpo__min_flops;
	__atomic_store_n(&gpo__config_done, 1, __ATOMIC_RELEASE);
	if (gpo__min_flops > 0 && !gpo__secure())
		gpo_fast_allow(GPO_FAST_CONFIG);
	gpo_tls.cfg = 0;
}

/*
 * The frontend's configuration, read once. A call made while another
 * thread reads it waits for it (pthread_once): deciding with the
 * defaults meanwhile sent such a call the wrong way (the default
 * threshold where GPU_OFFLOAD_MIN_FLOPS says otherwise, verify mode
 * off) and read the settings while they were being written. The one
 * exception is a call of the reading thread itself (a signal handler's
 * BLAS call interrupting the read), which would wait for itself: it sees
 * the defaults.
 */
static void gpo__config(void)
{
	if (__atomic_load_n(&gpo__config_done, __ATOMIC_ACQUIRE) ||
	    gpo_tls.cfg)
		return;
	pthread_once(&gpo__config_once, gpo__config_read);
}

double gpo_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- Messages: one line each, at most once per kind ---------------------- */

static unsigned gpo__said;

static void gpo__vmsg(const char *fmt, va_list ap)
{
	char line[512];
	int n = snprintf(line, sizeof line, "gpu-offload: ");

	n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	if (n > (int)sizeof line - 2)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	if (write(2, line, (size_t)n) < 0) {
		/* nowhere to say it */
	}
}

void gpo_msg(const char *fmt, ...)
{
	int e = errno;
	va_list ap;

	va_start(ap, fmt);
	gpo__vmsg(fmt, ap);
	va_end(ap);
	errno = e;
}

void gpo_msg_once(int kind, const char *fmt, ...)
{
	int e = errno;
	unsigned bit = 1u << kind;
	va_list ap;

	if (__atomic_fetch_or(&gpo__said, bit, __ATOMIC_RELAXED) & bit)
		return;
	va_start(ap, fmt);
	gpo__vmsg(fmt, ap);
	va_end(ap);
	errno = e;
}

/* ---- The call ---------------------------------------------------------------- */

/*
 * A set-user-ID (or otherwise secure-execution) process, which can have
 * this library through /etc/ld.so.preload: its environment is the
 * unprivileged caller's, so nothing here may act on it (load a backend it
 * names, write traces where it says). Every call passes straight through,
 * unseen by the policy.
 */
static int gpo__secure(void)
{
	static int state;       /* 0 unknown, 1 no, 2 yes */
	int s = __atomic_load_n(&state, __ATOMIC_RELAXED);

	if (!s) {
		s = getauxval(AT_SECURE) ? 2 : 1;
		__atomic_store_n(&state, s, __ATOMIC_RELAXED);
	}
	return s == 2;
}

void *gpo_begin(struct gpo_fn *fn, struct gpo_ctx *x, const void *site)
{
	int e = errno;
	void *real = gpo_resolve(fn, site);

	x->err = e;
	x->site = site;
	x->t0 = 0;
	x->copy_in = x->copy_out = 0;
	x->fail = 0;
	if (gpo_tls.quiet || gpo__secure()) {
		gpo_tls.depth++;
		x->state = GPO_ST_PASS;
	} else if (gpo_tls.depth++ > 0) {
		x->state = GPO_ST_NESTED;
	} else if (gpo_paused()) {
		/* The CPU library's call, nothing else (pause.c). The
		 * configuration is read here too, so that the light path
		 * can take the next paused calls. */
		x->state = GPO_ST_PAUSED;
		gpo__config();
	} else {
		/* Field by field, not memset: this is every call's path, and a
		 * memset of the whole context costs more than all the rest
		 * (bench-offload). What the wrapper does not fill is zeroed
		 * here; operands and leading dimensions it always fills. */
		x->state = GPO_ST_FILL;
		memset(x->a.opt, 0, sizeof x->a.opt);
		x->a.layout = 0;
		x->a.query = 0;
		x->a.prec = fn->prec;
		x->a.m = x->a.n = x->a.k = x->a.nrhs = 0;
		x->a.alpha[1] = x->a.beta[1] = 0;
		x->a.info = NULL;
	}
	errno = e;
	return real;
}

static char gpo__flip(char c, char a, char b)
{
	return c == a ? b : c == b ? a : c;
}

/* A row-major CBLAS call as the column-major call on the same memory (the
 * row-major matrix is its transpose in column-major order). */
__attribute__((noinline))
static void gpo__rowmajor(struct gpo_fn *fn, struct gpo_args *a)
{
	char t;
	int64_t v;
	void *p;

	switch (fn->op) {
	case GPO_OP_GEMM:       /* C^T = op(B)^T op(A)^T */
		v = a->m; a->m = a->n; a->n = v;
		t = a->opt[0]; a->opt[0] = a->opt[1]; a->opt[1] = t;
		p = a->buf[0]; a->buf[0] = a->buf[1]; a->buf[1] = p;
		v = a->ld[0]; a->ld[0] = a->ld[1]; a->ld[1] = v;
		break;
	case GPO_OP_SYMM:
	case GPO_OP_HEMM:       /* C^T = B^T A^T: the other side */
	case GPO_OP_TRMM:
	case GPO_OP_TRSM:
		v = a->m; a->m = a->n; a->n = v;
		a->opt[0] = gpo__flip(a->opt[0], 'L', 'R');
		a->opt[1] = gpo__flip(a->opt[1], 'U', 'L');
		break;
	case GPO_OP_SYRK:
	case GPO_OP_SYR2K:      /* C^T = A_cm^T A_cm: the other transpose */
		a->opt[0] = gpo__flip(a->opt[0], 'U', 'L');
		a->opt[1] = gpo__flip(a->opt[1], 'N', 'T');
		break;
	case GPO_OP_HERK:       /* C^T = A_cm^H A_cm */
		a->opt[0] = gpo__flip(a->opt[0], 'U', 'L');
		a->opt[1] = gpo__flip(a->opt[1], 'N', 'C');
		break;
	case GPO_OP_GEMV:       /* y = A_cm^T x for N, A_cm x for T */
		v = a->m; a->m = a->n; a->n = v;
		/* conj(A_cm) x has no column-major form: a complex 'C'
		 * becomes no option (gpo__valid declines it to the CPU);
		 * a real 'C' is 'T'. */
		a->opt[0] = a->opt[0] == 'N' ? 'T' :
			    a->opt[0] == 'T' || (a->opt[0] == 'C' &&
			    (a->prec == 's' || a->prec == 'd')) ? 'N' : 0;
		break;
	case GPO_OP_HER2K:      /* the same, and conj(alpha) */
		a->opt[0] = gpo__flip(a->opt[0], 'U', 'L');
		a->opt[1] = gpo__flip(a->opt[1], 'N', 'C');
		a->alpha[1] = -a->alpha[1];
		break;
	}
}

/* Arguments the GPU path takes: the options it knows, sizes that are not
 * negative, leading dimensions that hold the rows. Anything else is the
 * CPU library's to diagnose (its xerbla, its info < 0). */
static int gpo__valid(const struct gpo_opdesc *od, struct gpo_ctx *x)
{
	const char *o = od->opts;
	struct gpo_args *a = &x->a;

	for (int i = 0; o && *o && i < 4; i++) {
		const char *end = strchr(o, '|');
		size_t len = end ? (size_t)(end - o) : strlen(o);
		if (!memchr(o, a->opt[i], len) || !a->opt[i])
			return 0;
		o += len + (end ? 1 : 0);
	}
	if (a->m < 0 || a->n < 0 || a->k < 0 || a->nrhs < 0 || !x->s.gpu_ok)
		return 0;
	if (od->level == 4 && !a->info)
		return 0;
	for (int i = 0; i < x->s.nbuf; i++) {
		int64_t rows = x->s.b[i].rows, cols = x->s.b[i].cols;
		if (!x->s.b[i].has_ld)
			a->ld[i] = rows > 0 ? rows : 1;
		if (rows < 0 || cols < 0 || a->ld[i] < (rows > 1 ? rows : 1))
			return 0;
		if (rows && cols && !a->buf[i])
			return 0;
	}
	return 1;
}

size_t gpo_elem_size(const struct gpo_ctx *x, int i)
{
	int cplx = x->a.prec == 'c' || x->a.prec == 'z';
	size_t real = x->a.prec == 's' || x->a.prec == 'c' ? 4 : 8;

	switch (x->s.b[i].kind) {
	case 'I': return x->c.int64 ? 8 : 4;
	case 'R': return real;
	default: return cplx ? 2 * real : real;
	}
}

static void gpo__describe(struct gpo_fn *fn, struct gpo_ctx *x)
{
	const struct gpo_opdesc *od = &gpo_opdesc[fn->op];
	struct gpo_call *c = &x->c;

	/* Every field the policy reads, set (no memset: see gpo_begin). */
	c->op = fn->op;
	c->prec = fn->prec;
	c->level = od->level;
	c->int64 = fn->int64;
	c->iface = fn->cblas;
	c->site = x->site;
	c->dims[0] = x->a.m;
	c->dims[1] = x->a.n;
	c->dims[2] = x->a.k;
	c->dims[3] = x->a.nrhs;
	c->bytes_in = c->bytes_out = 0;
	/* x->s: already described (gpo_run) */
	c->flops = x->s.flops;
	c->nbuf = x->s.nbuf;
	for (int i = 0; i < x->s.nbuf; i++) {
		uint64_t bytes = (uint64_t)x->s.b[i].rows *
				 (uint64_t)x->s.b[i].cols * gpo_elem_size(x, i);
		if (x->s.b[i].rows < 0 || x->s.b[i].cols < 0)
			bytes = 0;
		c->buf[i].ptr = x->a.buf[i];
		c->buf[i].bytes = bytes;
		c->buf[i].in = x->s.b[i].in;
		c->buf[i].out = x->s.b[i].out;
		c->buf[i].resident = 0;         /* gpu.c sets it */
		if (x->s.b[i].in)
			c->bytes_in += (double)bytes;
		if (x->s.b[i].out)
			c->bytes_out += (double)bytes;
	}
}

static void gpo__cpu(struct gpo_ctx *x, int reason)
{
	x->state = GPO_ST_CPU;
	x->d.device = GPO_CPU;
	x->d.reason = (uint16_t)reason;
}

void gpo_run(struct gpo_fn *fn, struct gpo_ctx *x)
{
	const struct gpo_opdesc *od = &gpo_opdesc[fn->op];
	int rc, small;

	gpo__config();
	x->d.device = GPO_CPU;
	x->d.reason = 0;
	x->d.t_cpu = x->d.t_gpu = 0;
	if (fn->cblas && od->gpu && x->a.layout == 101)
		gpo__rowmajor(fn, &x->a);
	/* The shape first: a call below the threshold (most calls) needs
	 * no policy record unless it is traced, and filling the record
	 * costs as much as the rest of the small-call path (bench-offload). */
	od->describe(&x->a, &x->s);
	small = !x->a.query && x->s.flops < gpo__min_flops;
	if (!small || gpo_policy_tracing())
		gpo__describe(fn, x);
	if (x->a.query)
		return gpo__cpu(x, GPO_R_WORKSPACE);
	if (small)
		return gpo__cpu(x, GPO_R_SMALL);
	if (od->measure || !od->gpu) {
		x->t0 = 1;      /* measured: timed, never offloaded */
		return gpo__cpu(x, GPO_R_MEASURED);
	}
	if ((fn->cblas && x->a.layout != 101 && x->a.layout != 102) ||
	    !gpo__valid(od, x))
		return gpo__cpu(x, GPO_R_UNSUPPORTED);
	x->t0 = 1;      /* timed from here on */
	/* Residency in the model (docs/offload-residency.md, "The model,
	 * and level 2"): inputs the GPU holds are not copied, so the call
	 * is priced without them. A level-2 call's work is the size of its
	 * matrix: with the matrix copied in, it cannot win; one whose
	 * matrix the table does not know stays on the CPU, whatever the
	 * policy would say. */
	{
		double kept = 0;
		/* A level-3 call asks the table (under the GPU's lock, by
		 * trylock) only once a copy was ever kept: before that its
		 * answer is "nothing" and the CPU path takes no shared lock
		 * (tests/offload/test_offload_locks.py). A level-2 call asks
		 * always: it records the matrix as seen. */
		int matrix = od->level == 2 || gpo_res_ever_kept() ?
			     gpo_gpu_resident(x, od->level == 2, &kept) : 0;
		if (od->level == 2 && !matrix)
			return gpo__cpu(x, GPO_R_MODEL_CPU);
		x->c.bytes_in = x->c.bytes_in > kept ? x->c.bytes_in - kept : 0;
	}
	if (gpo_policy_decide(&x->c, &x->d) != GPO_GPU)
		return gpo__cpu(x, x->d.reason);
	rc = gpo_gpu_call(fn, x, gpo_verify_mode);
	if (rc == 0) {
		x->state = gpo_verify_mode ? GPO_ST_VERIFY : GPO_ST_DONE;
		return;
	}
	/* Fell back: the CPU runs the call as if the GPU never had. A
	 * nonzero LAPACK info (-1) is no failure: the CPU library then gives
	 * the call its own error conventions. */
	x->fail = rc > 0 ? rc : GPO_R_FAIL_KERNEL;
	x->state = GPO_ST_CPU;
}

void gpo_cpu_before(struct gpo_ctx *x)
{
	if (x->t0 != 0)
		x->t0 = gpo_now();
	errno = x->err;
}

void gpo_cpu_after(struct gpo_ctx *x)
{
	x->err = errno;
	if (x->t0 != 0)
		x->t0 = gpo_now() - x->t0;
}

void gpo_end(struct gpo_fn *fn, struct gpo_ctx *x)
{
	int e = x->err;

	if (x->state == GPO_ST_PASS) {
		/* secure-execution process, or inside the backend's start,
		 * stop or memory call: not observed */
	} else if (x->state == GPO_ST_NESTED && !gpo_policy_tracing()) {
		/* Only counted (a CPU LAPACK's own BLAS calls: many). */
		gpo_policy_count(GPO_R_NESTED);
	} else if (x->state == GPO_ST_PAUSED && !gpo_policy_tracing()) {
		gpo_policy_count(GPO_R_PAUSED);
	} else if (x->state == GPO_ST_NESTED || x->state == GPO_ST_PAUSED) {
		/* The policy's first sight of the process (it initialises:
		 * the summary, the light path's gate) or a traced call: the
		 * record has what the wrapper knows without its arguments. */
		struct gpo_decision d = {
			GPO_CPU, x->state == GPO_ST_NESTED ? GPO_R_NESTED :
			GPO_R_PAUSED, 0, 0 };
		memset(&x->c, 0, sizeof x->c);
		x->c.op = fn->op;
		x->c.prec = fn->prec;
		x->c.level = gpo_opdesc[fn->op].level;
		x->c.int64 = fn->int64;
		x->c.iface = fn->cblas;
		x->c.site = x->site;
		gpo_policy_observe(&x->c, &d, GPO_CPU, 0, 0, 0, 0);
	} else {
		if (x->state == GPO_ST_VERIFY) {
			gpo_verify_compare(fn, x);
			gpo_stage_free(x);
			x->d.reason = GPO_R_VERIFY;
		}
		gpo_policy_observe(&x->c, &x->d,
				   x->state == GPO_ST_DONE ? GPO_GPU : GPO_CPU,
				   x->t0 > 0 ? x->t0 : 0, x->copy_in,
				   x->copy_out, x->fail);
	}
	gpo_tls.depth--;
	errno = e;
}
