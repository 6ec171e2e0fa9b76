/*
 * activity.c - the GPU-call activity of this process (activity.h).
 *
 * The work wrappers tail-jump to the driver, so they can count a call's
 * start but never see its end: their assembly bumps gmp_act_calls, and a
 * sampler (the idle-suspension thread) turns "the count did not change"
 * into an idle time. Calls with a frame of ours around them (the context
 * calls) also count in flight, with the time the last one ended.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <time.h>

#include "activity.h"

long gmp_act_calls __attribute__((aligned(64)));
unsigned char gmp_ipc_used;
static int act_inflight __attribute__((aligned(64)));
static int64_t act_last_end;
/* The sampler's own state (one thread). */
static long smp_count = -1;
static int64_t smp_since;

int64_t gmp_mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void gmp_act_begin(void)
{
	__atomic_add_fetch(&act_inflight, 1, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&gmp_act_calls, 1, __ATOMIC_SEQ_CST);
}

void gmp_act_end(void)
{
	int saved = errno;

	__atomic_store_n(&act_last_end, gmp_mono_ms(), __ATOMIC_RELAXED);
	__atomic_sub_fetch(&act_inflight, 1, __ATOMIC_SEQ_CST);
	errno = saved;
}

int gmp_act_inflight(void)
{
	return __atomic_load_n(&act_inflight, __ATOMIC_SEQ_CST);
}

int64_t gmp_act_last_end_ms(void)
{
	return __atomic_load_n(&act_last_end, __ATOMIC_RELAXED);
}

int64_t gmp_act_idle_ms(long *seen)
{
	long c = __atomic_load_n(&gmp_act_calls, __ATOMIC_SEQ_CST);
	int64_t now = gmp_mono_ms();

	*seen = c;
	if (c != smp_count || gmp_act_inflight() > 0) {
		smp_count = c;
		smp_since = now;
		return 0;
	}
	return now - smp_since;
}

int gmp_act_quiet(long seen)
{
	return __atomic_load_n(&gmp_act_calls, __ATOMIC_SEQ_CST) == seen &&
	       gmp_act_inflight() == 0;
}
