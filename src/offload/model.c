/*
 * model.c - the cost model and the decision rule (model.h).
 */
#include <string.h>

#include "model.h"

/* Seed table of the ten levels: required speedup, utilisation back-off,
 * memory reserve, ski-rental start factor. */
static const struct gpo_level gpo__levels[10] = {
	{ 3.0,  0.30, 0.50, 3.0  },
	{ 2.5,  0.37, 0.45, 2.75 },
	{ 2.0,  0.44, 0.40, 2.5  },
	{ 1.6,  0.52, 0.35, 2.25 },
	{ 1.3,  0.59, 0.30, 2.0  },
	{ 1.2,  0.66, 0.25, 1.75 },
	{ 1.1,  0.73, 0.20, 1.5  },
	{ 1.05, 0.81, 0.15, 1.25 },
	{ 1.0,  0.88, 0.10, 1.0  },
	{ 0.9,  0.95, 0.05, 0.75 },
};

const struct gpo_level *gpo_level_get(int level)
{
	if (level < 1)
		level = 1;
	if (level > 10)
		level = 10;
	return &gpo__levels[level - 1];
}

/* ---- ln and exp without libm ------------------------------------------ */

#define GPO__LN2 0.69314718055994530942

static double gpo__pow2(int k)
{
	uint64_t bits;
	double r;

	if (k > 1023)
		return 1e308 * 10; /* inf */
	if (k < -1022)
		return 0;
	bits = (uint64_t)(k + 1023) << 52;
	memcpy(&r, &bits, sizeof r);
	return r;
}

/*
 * Both are on the per-call path of every call the policy decides (the
 * curves' interpolation, the learning step): polynomials in Horner form
 * with constant coefficients, no division and no loop-carried count (the
 * first versions, a loop of 20 and of 23 divisions, made the decision
 * of a dgemm 128 cost about 1.1 us; measured with the H200 profile).
 */
double gpo_ln(double x)
{
	/* 1/(2k+1) for k = 0 .. 12 */
	static const double c[13] = {
		1.0, 1.0 / 3, 1.0 / 5, 1.0 / 7, 1.0 / 9, 1.0 / 11, 1.0 / 13,
		1.0 / 15, 1.0 / 17, 1.0 / 19, 1.0 / 21, 1.0 / 23, 1.0 / 25,
	};
	uint64_t bits;
	int e;
	double m, s, s2, p;

	if (!(x > 0))
		return -1e308; /* callers pass positive numbers only */
	memcpy(&bits, &x, sizeof x);
	e = (int)((bits >> 52) & 0x7ff);
	if (e == 0) { /* subnormal: scale up first */
		x *= 4503599627370496.0; /* 2^52 */
		memcpy(&bits, &x, sizeof x);
		e = (int)((bits >> 52) & 0x7ff) - 52;
	}
	if (e == 0x7ff)
		return x;
	bits = (bits & ~(UINT64_C(0x7ff) << 52)) | (UINT64_C(1023) << 52);
	memcpy(&m, &bits, sizeof m); /* m in [1, 2) */
	e -= 1023;
	if (m > 1.41421356237309504880) {
		m /= 2;
		e++;
	}
	/* ln m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m-1)/(m+1),
	 * |s| < 0.172, s^2 < 0.0295: the terms up to s^25/25 leave less
	 * than 1e-19 of s */
	s = (m - 1) / (m + 1);
	s2 = s * s;
	p = c[12];
	for (int i = 11; i >= 0; i--)
		p = p * s2 + c[i];
	return 2 * s * p + e * GPO__LN2;
}

double gpo_exp(double x)
{
	/* 1/k! for k = 0 .. 15: |r| <= ln2/2 leaves r^16/16! < 1e-19 */
	static const double c[16] = {
		1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720,
		1.0 / 5040, 1.0 / 40320, 1.0 / 362880, 1.0 / 3628800,
		1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800.0,
		1.0 / 87178291200.0, 1.0 / 1307674368000.0,
	};
	double r, p;
	int k;

	/* inf above ln of the largest double, not from 709 on: exp(709.5)
	 * is 1.35e308; 2^k below, k at most 1024, is taken in two halves */
	if (x > 709.782712893383973096)
		return 1e308 * 10;
	if (x < -745.0)
		return 0;
	k = (int)(x / GPO__LN2 + (x < 0 ? -0.5 : 0.5));
	/* |r| <= ln2 / 2; ln 2 in two parts (the high one's low bits zero,
	 * so that k times it is exact), else r carries k times ln 2's
	 * rounding: 1e-13 of the result at |x| near 700 */
	r = (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10;
	p = c[15];
	for (int i = 14; i >= 0; i--)
		p = p * r + c[i];
	/* 2^k in two steps, so that k near the ends stays representable */
	return p * gpo__pow2(k / 2) * gpo__pow2(k - k / 2);
}

void gpo_curve_prepare(struct gpo_curve *cv)
{
	for (int i = 0; i < cv->n && i < GPO_CURVE_MAX; i++) {
		cv->lnwork[i] = gpo_ln(cv->work[i]);
		cv->lnspeed[i] = gpo_ln(cv->speed[i]);
	}
	cv->ln_ready = 1;
}

double gpo_curve_speed(const struct gpo_curve *cv, double work)
{
	int i;
	double t, w0, w1, s0, s1;

	if (work <= cv->work[0] || cv->n == 1)
		return cv->speed[0];
	if (work >= cv->work[cv->n - 1])
		return cv->speed[cv->n - 1];
	for (i = 1; i < cv->n - 1 && work > cv->work[i]; i++)
		;
	if (cv->ln_ready) {
		w0 = cv->lnwork[i - 1];
		w1 = cv->lnwork[i];
		s0 = cv->lnspeed[i - 1];
		s1 = cv->lnspeed[i];
	} else {
		w0 = gpo_ln(cv->work[i - 1]);
		w1 = gpo_ln(cv->work[i]);
		s0 = gpo_ln(cv->speed[i - 1]);
		s1 = gpo_ln(cv->speed[i]);
	}
	/* straight line between the neighbours in log-log space */
	t = (gpo_ln(work) - w0) / (w1 - w0);
	return gpo_exp(s0 + t * (s1 - s0));
}

/* ---- The model --------------------------------------------------------- */

static int gpo__prec(char p)
{
	switch (p) {
	case 's': return 0;
	case 'd': return 1;
	case 'c': return 2;
	default: return 3;
	}
}

/* Relaxed atomic loads and stores of the model's doubles (model.h). */
static double gpo__ld(const double *p)
{
	double v;

	__atomic_load(p, &v, __ATOMIC_RELAXED);
	return v;
}

static void gpo__st(double *p, double v)
{
	__atomic_store(p, &v, __ATOMIC_RELAXED);
}

/* Add v to *p (compare-and-swap: concurrent adds are all kept). */
static void gpo__add(double *p, double v)
{
	double old = gpo__ld(p), nv;

	do
		nv = old + v;
	while (!__atomic_compare_exchange(p, &old, &nv, 1, __ATOMIC_RELAXED,
					  __ATOMIC_RELAXED));
}

static struct gpo_opstate *gpo__state(struct gpo_model *m,
				      const struct gpo_call *c,
				      const char *opname)
{
	struct gpo_opstate *s;

	if (c->op >= GPO_OPS_MAX)
		return NULL;
	s = &m->ops[c->op][gpo__prec(c->prec)];
	if (!__atomic_load_n(&s->looked, __ATOMIC_ACQUIRE) && m->prof &&
	    opname) {
		/* Two threads may both look: they find the same curves. */
		__atomic_store_n(&s->curve[GPO_CPU],
				 gpo_profile_curve(m->prof, 'c', c->prec, opname),
				 __ATOMIC_RELAXED);
		__atomic_store_n(&s->curve[GPO_GPU],
				 gpo_profile_curve(m->prof, 'g', c->prec, opname),
				 __ATOMIC_RELAXED);
		__atomic_store_n(&s->looked, 1, __ATOMIC_RELEASE);
	}
	return s;
}

void gpo_model_init(struct gpo_model *m, const struct gpo_profile *prof,
		    int level)
{
	memset(m, 0, sizeof *m);
	m->prof = prof;
	m->level = level < 1 ? 1 : level > 10 ? 10 : level;
	for (int i = 0; i < GPO_OPS_MAX; i++)
		for (int j = 0; j < 4; j++)
			m->ops[i][j].corr[0] = m->ops[i][j].corr[1] = 1;
}

/*
 * The last interpolation per device (curve, work, speed), the calling
 * thread's own: a program's loop asks the same size again, and the
 * decision and the learning step of one call ask it twice; ln and exp are
 * then not taken again. Per thread, not in the shared model, so that
 * threads deciding at once neither write one cache line nor read a
 * half-written entry. Initial-exec: the library is preloaded (count.h's
 * block is so too), and a lookup through __tls_get_addr would cost more
 * than the memo saves.
 */
struct gpo__memo {
	const struct gpo_curve *cv;
	double w, speed;
};
static __thread struct gpo__memo gpo__memo[2]
	__attribute__((tls_model("initial-exec")));

/*
 * The calling thread's learning back-off: after its step raced another
 * thread's on one factor (the first compare-and-swap failed), it leaves
 * out its next 2^k - 1 observations (k grows by one at each such race,
 * up to 6: 63), and k falls by one at each step that goes through at
 * once. A thread alone never races: it learns from every call. Threads
 * learning at once then write the factor's cache line a few times per
 * millisecond instead of at every call (a bounce of that line at every
 * call of 16 threads costs more than the decision), and the factor
 * still follows what they all see: the observations left out are
 * samples of the same times as those kept.
 */
static __thread struct {
	uint8_t k, skip;
} gpo__learn __attribute__((tls_model("initial-exec")));

/* The device's curve at work w, through the thread's one-entry memo. */
static double gpo__speed(struct gpo_opstate *s, int dev, double w)
{
	const struct gpo_curve *cv = __atomic_load_n(&s->curve[dev],
						     __ATOMIC_RELAXED);
	struct gpo__memo *mm = &gpo__memo[dev];

	if (mm->cv != cv || mm->w != w) {
		mm->speed = gpo_curve_speed(cv, w);
		mm->w = w;
		mm->cv = cv;
	}
	return mm->speed;
}

void gpo_model_predict(struct gpo_model *m, const struct gpo_call *c,
		       const char *opname, int raw, double *t_cpu,
		       double *t_gpu)
{
	struct gpo_opstate *s = gpo__state(m, c, opname);
	const struct gpo_profile *p = m->prof;
	double w = c->flops;

	*t_cpu = *t_gpu = 0;
	if (!s || !p || !(w > 0))
		return;
	if (__atomic_load_n(&s->curve[GPO_CPU], __ATOMIC_RELAXED))
		*t_cpu = w / gpo__speed(s, GPO_CPU, w) *
			 (raw ? 1 : gpo__ld(&s->corr[GPO_CPU]));
	if (__atomic_load_n(&s->curve[GPO_GPU], __ATOMIC_RELAXED) &&
	    p->h2d_bw > 0 && p->d2h_bw > 0) {
		double t = w / gpo__speed(s, GPO_GPU, w);
		/* A fixed cost per direction that moves anything. */
		if (c->bytes_in > 0)
			t += p->h2d_fixed + c->bytes_in / p->h2d_bw;
		if (c->bytes_out > 0)
			t += p->d2h_fixed + c->bytes_out / p->d2h_bw;
		*t_gpu = t * (raw ? 1 : gpo__ld(&s->corr[GPO_GPU]));
	}
}

enum gpo_verdict gpo_model_decide(struct gpo_model *m,
				  const struct gpo_call *c,
				  const char *opname, int gpu_started,
				  struct gpo_decision *d)
{
	const struct gpo_level *lv = gpo_level_get(m->level);
	struct gpo_opstate *s = gpo__state(m, c, opname);
	double tc, tg;

	gpo_model_predict(m, c, opname, 0, &tc, &tg);
	d->device = GPO_CPU;
	d->t_cpu = tc;
	d->t_gpu = tg;
	d->reason = GPO_R_MODEL_CPU;
	if (!s || tc <= 0 || tg <= 0 || tc < lv->speedup * tg)
		return GPO_V_CPU;
	if (!gpu_started) {
		/* Ski rental: each call that would have paid adds what it
		 * would have saved; the start pays once that reaches the
		 * level's multiple of the start-up cost. (Below 1x, at level
		 * 10, a call may pay nothing and adds nothing.) */
		double startup = m->prof->startup_s > 0 ? m->prof->startup_s : 0;
		if (tc > tg)
			gpo__add(&m->saved, tc - tg);
		if (gpo__ld(&m->saved) < lv->start * startup) {
			d->reason = GPO_R_SKI_RENTAL;
			return GPO_V_CPU;
		}
		d->device = GPO_GPU;
		d->reason = GPO_R_MODEL_GPU;
		return GPO_V_START;
	}
	/* A CPU probe: the CPU's speed unobserved since the GPU started, or
	 * for GPO_PROBE_EVERY offloadable calls. */
	/* Threads counting at once may each see the count past the limit
	 * and probe together: a probe or two more, never none. */
	if (!__atomic_load_n(&s->cpu_seen, __ATOMIC_RELAXED) ||
	    __atomic_fetch_add(&s->since_cpu, 1, __ATOMIC_RELAXED) >=
	    GPO_PROBE_EVERY) {
		__atomic_store_n(&s->since_cpu, 0, __ATOMIC_RELAXED);
		d->reason = GPO_R_PROBE;
		return GPO_V_CPU;
	}
	d->device = GPO_GPU;
	d->reason = GPO_R_MODEL_GPU;
	return GPO_V_GPU;
}

void gpo_model_reset_savings(struct gpo_model *m)
{
	gpo__st(&m->saved, 0);
}

void gpo_model_observe(struct gpo_model *m, const struct gpo_call *c,
		       const char *opname, int device, double seconds)
{
	struct gpo_opstate *s = gpo__state(m, c, opname);
	double tc, tg, pred, ratio, l, old, nv;

	if (!s || device < 0 || device > 1)
		return;
	/* Stored only when they change: every thread's CPU call comes
	 * here, and a store to a shared line at each would bounce it. */
	if (device == GPO_CPU) {
		if (!__atomic_load_n(&s->cpu_seen, __ATOMIC_RELAXED))
			__atomic_store_n(&s->cpu_seen, 1, __ATOMIC_RELAXED);
		if (__atomic_load_n(&s->since_cpu, __ATOMIC_RELAXED))
			__atomic_store_n(&s->since_cpu, 0, __ATOMIC_RELAXED);
	}
	if (gpo__learn.skip) {
		gpo__learn.skip--;
		return;
	}
	gpo_model_predict(m, c, opname, 1, &tc, &tg);
	pred = device == GPO_CPU ? tc : tg;
	if (!(pred > 0) || !(seconds > 0))
		return;
	ratio = seconds / pred;
	/* One wild observation (a page fault storm, a descheduled thread)
	 * moves the factor by at most a factor 30. */
	if (ratio > 1e3)
		ratio = 1e3;
	if (ratio < 1e-3)
		ratio = 1e-3;
	/* halfway in ratio terms: the geometric mean of old and new; by
	 * compare-and-swap, so that steps of threads learning at once are
	 * each applied (in some order), none lost */
	l = gpo_ln(ratio);
	old = gpo__ld(&s->lncorr[device]);
	nv = (old + l) / 2;
	if (__atomic_compare_exchange(&s->lncorr[device], &old, &nv, 0,
				      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
		if (gpo__learn.k)
			gpo__learn.k--;
	} else {
		/* Lost a race: this step still counts, and the thread backs
		 * off (below). */
		do
			nv = (old + l) / 2;
		while (!__atomic_compare_exchange(&s->lncorr[device], &old, &nv,
						  1, __ATOMIC_RELAXED,
						  __ATOMIC_RELAXED));
		if (gpo__learn.k < 6)
			gpo__learn.k++;
		gpo__learn.skip = (uint8_t)((1u << gpo__learn.k) - 1);
	}
	gpo__st(&s->corr[device], gpo_exp(nv));
}
