/*
 * wrapcost.c - the cost of one call through a driver wrapper of
 * libgpumutex.so (bench/gpu_bench.py and bench/bench.py run it with and
 * without the preload; the difference is the wrapper).
 *
 *   wrapcost [CALLS]
 * cuInit, the primary context of device 0 made current, then CALLS calls
 * of cuCtxGetApiVersion (a work-class entry point: wrapped, tail jump) and
 * of cuDeviceGetCount (a pure query: handed out unwrapped), through the
 * pointers dlsym returns. Prints "work_ns=<ns per call> query_ns=<...>".
 * On the fake driver cuCtxGetApiVersion is a stub returning 801, which is
 * fine: only the call is timed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*init_fn)(unsigned);
typedef int (*retain_fn)(void **, int);
typedef int (*set_fn)(void *);
typedef int (*api_fn)(void *, unsigned *);
typedef int (*count_fn)(int *);

static long long now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv)
{
	long calls = argc > 1 ? atol(argv[1]) : 10000000;
	void *h = dlopen("libcuda.so.1", RTLD_NOW), *ctx = NULL;
	init_fn init;
	retain_fn retain;
	set_fn set;
	api_fn api;
	count_fn count;
	unsigned v = 0;
	int n = 0;
	long long t0, t1, t2;

	if (!h)
		return 3;
	*(void **)&init = dlsym(h, "cuInit");
	*(void **)&retain = dlsym(h, "cuDevicePrimaryCtxRetain");
	*(void **)&set = dlsym(h, "cuCtxSetCurrent");
	*(void **)&api = dlsym(h, "cuCtxGetApiVersion");
	*(void **)&count = dlsym(h, "cuDeviceGetCount");
	if (!init || !retain || !set || !api || !count || init(0) ||
	    retain(&ctx, 0) || set(ctx))
		return 3;
	api(ctx, &v);
	t0 = now();
	for (long i = 0; i < calls; i++)
		api(ctx, &v);
	t1 = now();
	for (long i = 0; i < calls; i++)
		count(&n);
	t2 = now();
	printf("work_ns=%.2f query_ns=%.2f\n", (double)(t1 - t0) / calls,
	       (double)(t2 - t1) / calls);
	return 0;
}
