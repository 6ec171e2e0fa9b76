/*
 * observe.c - what the policy does after a call (the observing half of
 * src/offload/policy.h): learning from what ran (model.c), the summary's
 * counts (count.h: per thread for the frontend's own verdicts, shared for
 * the rest), the call's trace record (trace.c), and the summary line at
 * exit. Apart from the decisions (policy.c) because it is the per-call
 * path of every small call the frontend keeps on the CPU: a count, and
 * nothing else unless traced.
 *
 * Locking: pstate.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "count.h"
#include "pstate.h"
#include "tracew.h"

static void gpo__trace_call(const struct gpo_call *c,
			    const struct gpo_decision *d, int device,
			    double seconds, double cin, double cout, int fail)
{
	int rc = gpo_trace_call(c, d, device, seconds, cin, cout, fail);

	if (rc)
		gpo_pol_trace_failed(rc, 0);
}

/* A decided call: one the policy was asked about (every reason but the
 * frontend's own verdicts). */
static int gpo__decided(unsigned r)
{
	return r != GPO_R_SMALL && r != GPO_R_NESTED && r != GPO_R_WORKSPACE &&
	       r != GPO_R_MEASURED && r != GPO_R_UNSUPPORTED &&
	       r != GPO_R_COPY_ENGINE && r != GPO_R_PAUSED;
}

int gpo_policy_tracing(void)
{
	/* Not initialised yet: the first observe will initialise, and may
	 * start a trace that wants this call's whole record. */
	return !__atomic_load_n(&gpo_pol.inited, __ATOMIC_ACQUIRE) ||
	       gpo_trace_on();
}

void gpo_policy_count(unsigned reason)
{
	if (reason < GPO_R_MAX)
		gpo_count(&gpo_tls, reason);
}

void gpo_policy_observe(const struct gpo_call *c,
			const struct gpo_decision *d, int device,
			double seconds, double copy_in_s, double copy_out_s,
			int fail)
{
	int saved = errno;
	unsigned r = d->reason;
	/* The frontend's own verdicts (below the size threshold, nested,
	 * workspace queries, measured-only or unsupported calls, calls made
	 * while paused): the policy was not asked, and learns nothing from
	 * them. */
	int own = !gpo__decided(r);

	if (device == GPO_CPU && d->device == GPO_CPU &&
	    __atomic_load_n(&gpo_pol.inited, __ATOMIC_ACQUIRE)) {
		/* The shared path: a call that stayed on the CPU (the
		 * frontend's own verdicts, or the policy's: kept by the
		 * model, a probe, forced) is counted in the thread's own
		 * block (count.h) and learnt from by the model's atomic step
		 * (model.h): no lock, no shared counter, so that threads
		 * calling BLAS at once do not queue behind each other. */
		if (r < GPO_R_MAX)
			gpo_count(&gpo_tls, r);
		if (!own && !fail && r != GPO_R_VERIFY)
			gpo_model_observe(&gpo_pol.model, c, gpo_op_name(c->op),
					  device, seconds);
		if (gpo_trace_on())
			gpo__trace_call(c, d, device, seconds, copy_in_s,
					copy_out_s, fail);
		errno = saved;
		return;
	}
	if (r < GPO_R_MAX)
		__atomic_fetch_add(&gpo_count_total[r], 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&gpo_pol_lock);
	if (!gpo_pol.inited)
		gpo_pol_init();
	if (d->device == GPO_GPU && gpo_pol.inflight > 0) {
		gpo_pol.inflight--;
		gpo_pol.last_gpu_ns = gpo_pol_mono();
	}
	/* Learning from what really ran: not from a GPU attempt that
	 * failed half-way, nor from verify mode's double runs. */
	if (!own && !fail && r != GPO_R_VERIFY)
		gpo_model_observe(&gpo_pol.model, c, gpo_op_name(c->op),
				  device, seconds);
	if (device == GPO_GPU) {
		gpo_pol.on_gpu++;
		gpo_pol.gpu_s += seconds;
		if (d->t_cpu > 0)
			gpo_pol.saved_s += d->t_cpu - seconds;
	}
	pthread_mutex_unlock(&gpo_pol_lock);
	if (gpo_trace_on())
		gpo__trace_call(c, d, device, seconds, copy_in_s, copy_out_s,
				fail);
	errno = saved;
}

void gpo_res_summary(void) __attribute__((weak, visibility("hidden")));

void gpo_pol_summary(void)
{
	char line[1024];
	uint64_t calls = 0, decided = 0, reasons[GPO_R_MAX];
	size_t n;

	/* Read without the lock: at exit another thread may hold it for
	 * good (stopped in a GPU start), and a summary must not hang the
	 * exit; a count off by one is harmless here. Every call counts in
	 * exactly one reason; this thread's own counts are folded first,
	 * other running threads' may be missing in part (count.h). */
	gpo_count_flush();
	for (unsigned r = 0; r < GPO_R_MAX; r++) {
		reasons[r] = __atomic_load_n(&gpo_count_total[r], __ATOMIC_RELAXED);
		calls += reasons[r];
		if (r && gpo__decided(r))
			decided += reasons[r];
	}

	n = (size_t)snprintf(line, sizeof line,
			     "gpu-offload: summary: %llu calls seen, %llu decided, %llu offloaded (GPU %.3f s, start-up %.3f s), predicted time saved %.3f s; reasons:",
			     (unsigned long long)calls,
			     (unsigned long long)decided,
			     (unsigned long long)gpo_pol.on_gpu, gpo_pol.gpu_s,
			     gpo_pol.startup_s, gpo_pol.saved_s - gpo_pol.startup_s);
	for (unsigned r = 1; r < GPO_R_MAX && n < sizeof line; r++)
		if (reasons[r])
			n += (size_t)snprintf(line + n, sizeof line - n,
					      " %s=%llu", gpo_reason_name(r),
					      (unsigned long long)reasons[r]);
	fprintf(stderr, "%s\n", line);
	/* Why nothing went to the GPU, when it is the setup's doing. */
	if (!gpo_pol.on_gpu && reasons[GPO_R_NO_PROFILE])
		fprintf(stderr, "gpu-offload: nothing was offloaded: no profile (no machine profile: run `gpu-offload calibrate`, or give --profile PATH)\n");
	else if (!gpo_pol.on_gpu && reasons[GPO_R_NO_DRIVER])
		fprintf(stderr, "gpu-offload: nothing was offloaded: no CUDA driver (libcuda.so.1 not found)\n");
	else if (!gpo_pol.on_gpu && reasons[GPO_R_NO_BACKEND])
		fprintf(stderr, "gpu-offload: nothing was offloaded: no GPU backend (it could not be loaded or started; see the line above)\n");
	/* Residency (resid.c, in the library only: weak here, so that the
	 * policy's own test driver links without the frontend). */
	if (gpo_pol.on_gpu && gpo_res_summary)
		gpo_res_summary();
}
