/*
 * policy.c - where each offloadable call runs (the policy half of
 * src/offload/policy.h).
 *
 * This first version only reads the configuration, so that the frontend
 * can be built and its GPU path tested: GPU_OFFLOAD_FORCE=cpu|gpu pins
 * every decided call to one device, GPU_OFFLOAD_LEVEL (1..10, default 5)
 * is parsed and kept; without GPU_OFFLOAD_FORCE every call stays on the
 * CPU. gpo_policy_observe records nothing yet. The cost model, the
 * ski-rental start, learning, leases and traces follow.
 *
 * Nothing runs at load time: the configuration is read once, at the
 * first decision, under pthread_once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lease.h"
#include "policy.h"

enum gpo__force { GPO__FORCE_NONE = 0, GPO__FORCE_CPU, GPO__FORCE_GPU };

static pthread_once_t gpo__once = PTHREAD_ONCE_INIT;
static int gpo__force;
static int gpo__level = 5;
static pthread_mutex_t gpo__lock = PTHREAD_MUTEX_INITIALIZER;
static int gpo__gpu_state;      /* 0 not tried, 1 started, -reason failed */

static void gpo__init(void)
{
	const char *f = getenv("GPU_OFFLOAD_FORCE");
	const char *l = getenv("GPU_OFFLOAD_LEVEL");

	if (f && strcmp(f, "cpu") == 0)
		gpo__force = GPO__FORCE_CPU;
	else if (f && strcmp(f, "gpu") == 0)
		gpo__force = GPO__FORCE_GPU;
	else if (f && *f)
		fprintf(stderr, "gpu-offload: GPU_OFFLOAD_FORCE=%s is not "
			"cpu or gpu; ignored\n", f);
	if (l && *l) {
		uint64_t v;
		if (gm_parse_uint(l, 10, 10, &v) == 0 && v >= 1)
			gpo__level = (int)v;
		else
			fprintf(stderr, "gpu-offload: GPU_OFFLOAD_LEVEL=%s is "
				"not a level from 1 to 10; using 5\n", l);
	}
}

int gpo_policy_decide(const struct gpo_call *c, struct gpo_decision *d)
{
	int saved = errno;

	(void)c;
	pthread_once(&gpo__once, gpo__init);
	memset(d, 0, sizeof(*d));
	d->device = GPO_CPU;
	d->reason = GPO_R_MODEL_CPU;
	if (gpo__force == GPO__FORCE_CPU) {
		d->reason = GPO_R_FORCED_CPU;
	} else if (gpo__force == GPO__FORCE_GPU) {
		pthread_mutex_lock(&gpo__lock);
		if (gpo__gpu_state == 0) {
			int r = gpo_gpu_start();
			gpo__gpu_state = r == 0 ? 1 : -r;
		}
		if (gpo__gpu_state == 1) {
			d->device = GPO_GPU;
			d->reason = GPO_R_FORCED_GPU;
		} else {
			d->reason = (uint16_t)-gpo__gpu_state;
		}
		pthread_mutex_unlock(&gpo__lock);
	}
	errno = saved;
	return d->device;
}

void gpo_policy_observe(const struct gpo_call *c,
			const struct gpo_decision *d, int device,
			double seconds, double copy_in_s, double copy_out_s,
			int fail)
{
	(void)c; (void)d; (void)device; (void)seconds;
	(void)copy_in_s; (void)copy_out_s; (void)fail;
}
