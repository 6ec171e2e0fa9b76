/*
 * model.h - the cost model and the decision rule (docs/offload.md, "The
 * model"): predicted times from the machine profile, the ten levels, the
 * ski-rental start, learning correction factors and CPU probes.
 *
 * Pure computation on a struct gpo_model: no clock, no environment, no
 * lock, so that tests can drive it with synthetic profiles and
 * observations. Safe to call from several threads at once on one model
 * without a lock (the policy decides and learns so: a call the model
 * keeps on the CPU takes no lock shared between threads): what a call
 * changes is changed by atomic operations (the correction factors by a
 * compare-and-swap on their logarithm, the probe and ski-rental counts by
 * atomic adds), and the interpolation's memo is the thread's own. A
 * thread whose learning step raced another thread's leaves out its next
 * few observations (model.c, gpo__learn): alone, a thread learns from
 * every call.
 * gpo_model_init and the profile are set up before any other thread
 * sees the model.
 */
#ifndef GPUOFFLOAD_MODEL_H
#define GPUOFFLOAD_MODEL_H

#include <stdint.h>

#include "policy.h"
#include "profile.h"

#define GPO_OPS_MAX 256        /* op ids the model keeps state for */
#define GPO_PROBE_EVERY 16     /* offloadable calls between CPU probes */

struct gpo_level {
	double speedup;        /* offload if T_cpu >= speedup * T_gpu */
	double busy;           /* back off above this GPU utilisation, 0..1 */
	double reserve;        /* fraction of GPU memory always left free */
	double start;          /* start once savings reach start * startup */
};

/* The level's row of the table (1..10; others are clamped). */
const struct gpo_level *gpo_level_get(int level);

/* Every field is read and written with atomic operations (model.h's
 * first comment). */
struct gpo_opstate {
	double corr[2];        /* observed / predicted, per device: exp of
	                        * lncorr, stored after each step (a step that
	                        * loses the race to store is one step behind
	                        * until the next observation) */
	double lncorr[2];      /* ln corr[]: the learning step's own, moved
	                        * by compare-and-swap, so no step is lost */
	uint32_t since_cpu;    /* offloadable calls since a CPU observation */
	uint8_t cpu_seen;      /* the CPU time was observed at least once */
	uint8_t looked;        /* curve[] looked up (set after them) */
	const struct gpo_curve *curve[2];
};

struct gpo_model {
	const struct gpo_profile *prof;  /* NULL: nothing can be predicted */
	int level;
	double saved;          /* ski-rental: predicted savings missed so far
	                        * (atomic: added by compare-and-swap) */
	struct gpo_opstate ops[GPO_OPS_MAX][4];
};

/* What gpo_model_decide asks of its caller. */
enum gpo_verdict {
	GPO_V_CPU = 0,         /* run on the CPU (d->reason says why) */
	GPO_V_GPU = 1,         /* run on the started GPU */
	GPO_V_START = 2        /* start the GPU (lease, backend), then run
	                        * there; on failure call gpo_model_start_failed */
};

/* Set up `m` (zeroed, corrections 1) for `prof` (may be NULL) at `level`. */
void gpo_model_init(struct gpo_model *m, const struct gpo_profile *prof,
		    int level);

/*
 * Predicted seconds of `c` (operation named `opname`) on the CPU and on
 * the GPU including copies, with the correction factors applied; 0 when
 * the profile has no curve for it. `raw` (0/1): without corrections.
 */
void gpo_model_predict(struct gpo_model *m, const struct gpo_call *c,
		       const char *opname, int raw, double *t_cpu,
		       double *t_gpu);

/*
 * The decision for an offloadable call, given whether the GPU is started
 * now. Fills d (device, reason, both predictions) and returns a verdict.
 * Counts the call towards the CPU probe and, while the GPU is not
 * started, its saving towards the ski-rental start.
 */
enum gpo_verdict gpo_model_decide(struct gpo_model *m,
				  const struct gpo_call *c,
				  const char *opname, int gpu_started,
				  struct gpo_decision *d);

/* The GPU could not be started after GPO_V_START (or was stopped): the
 * ski-rental total starts again from zero, so the next attempt again
 * waits for savings worth a start. */
void gpo_model_reset_savings(struct gpo_model *m);

/*
 * An observation: `c` ran on `device` in `seconds`. Moves that device's
 * correction factor for the operation halfway (geometrically) towards
 * observed / predicted (unless the calling thread is backing off after a
 * race with another: model.h's first comment), and a CPU run resets the
 * probe count.
 */
void gpo_model_observe(struct gpo_model *m, const struct gpo_call *c,
		       const char *opname, int device, double seconds);

/* Natural logarithm and exponential without libm (the library needs only
 * libc at load time); relative error below 1e-13 (against libm: ln
 * within 4e-16, exp 2e-15 up to 709.78, an ulp in its subnormals). */
double gpo_ln(double x);
double gpo_exp(double x);

/* The curve's speed at `work` flops: log-log interpolation between the
 * points, held flat outside them. */
double gpo_curve_speed(const struct gpo_curve *cv, double work);

/* The curve's ln of its points, for gpo_curve_speed: once its points are
 * set (the policy, on the profile it loaded). */
void gpo_curve_prepare(struct gpo_curve *cv);

#endif
