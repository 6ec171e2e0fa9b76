/*
 * cujob.c - a C program linked with -lcuda (the driver API through the PLT,
 * as numba and cuda-python call it) for tests/gpu/run.sh and
 * bench/gpu_bench.py. Declares the few driver functions it uses itself, so
 * it needs no CUDA headers: link with -L<dir of libcuda.so> -lcuda.
 *
 *   cujob job [ITERS]   memset/sync ITERS times on 256 MiB, check a copy back
 *   cujob hold          like job, but holds the GPU until stdin reaches EOF,
 *                       then journals end and `exit` (its last timestamp)
 *   cujob init          time cuInit only: prints "cuinit_ns=.. start_ns=..
 *                       ret_ns=.. real_ns=.. rc=.. job=.." (ret_ns monotonic,
 *                       real_ns CLOCK_REALTIME, both right after cuInit)
 *   cujob first         cuInit, then the first device call (retain the
 *                       primary context, where the lease is taken): prints
 *                       "cuinit_ns=.. first_ns=.. ret_ns=.. real_ns=.. rc=..
 *                       job=.." (ret_ns, real_ns right after the retain)
 *   cujob now           print CLOCK_MONOTONIC ns (no CUDA at all)
 */
#define _GNU_SOURCE
#include "gjournal.h"

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxSynchronize(void);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes);
CUresult cuMemsetD32_v2(CUdeviceptr p, unsigned int v, size_t n);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes);
CUresult cuDriverGetVersion(int *v);

#define CK(call) do { CUresult e_ = (call); if (e_) { \
	fprintf(stderr, "cujob: %s returned %d\n", #call, e_); \
	gj_write(0, "result", "ok=0 rc=%d", e_); return 1; } } while (0)

static int job(int iters, int hold)
{
	size_t n = (size_t)64 << 20;
	long long pre = gj_now(), init;
	unsigned int *h;
	CUdeviceptr p;
	CUcontext ctx;
	CUdevice dev;
	size_t bad = 0;
	int drv = 0;
	char c;

	CK(cuInit(0));
	init = gj_now();
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	CK(cuMemAlloc_v2(&p, n * 4));
	CK(cuMemsetD32_v2(p, 1, n));
	CK(cuCtxSynchronize());
	gj_begin(0, pre, init);
	if (hold) {
		printf("holding\n");
		fflush(stdout);
		while (read(0, &c, 1) > 0)
			;
	}
	for (int k = 0; k < iters; k++) {
		CK(cuMemsetD32_v2(p, (unsigned int)k, n));
		CK(cuCtxSynchronize());
		if (k % 20 == 19)
			gj_tick();
	}
	CK(cuMemsetD32_v2(p, 0xC0FFEE42u, n));
	if (hold) /* check 4 MiB only: keep the holder's own exit light */
		n = (size_t)1 << 20;
	h = malloc(n * 4);
	CK(cuMemcpyDtoH_v2(h, p, n * 4));
	CK(cuCtxSynchronize());
	gj_end();
	for (size_t i = 0; i < n; i++)
		bad += h[i] != 0xC0FFEE42u;
	cuDriverGetVersion(&drv);
	gj_write(0, "result", "ok=%d wrong=%zu driver=%d", !bad, bad, drv);
	gj_write(0, "exit", "hold=%d", hold);
	return bad != 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "job";

	if (strcmp(mode, "now") == 0) {
		printf("%lld\n", gj_now());
		return 0;
	}
	if (strcmp(mode, "init") == 0) {
		long long t0 = gj_now(), t1;
		int rc = cuInit(0);
		struct timespec rt;

		t1 = gj_now();
		clock_gettime(CLOCK_REALTIME, &rt);
		printf("cuinit_ns=%lld start_ns=%lld ret_ns=%lld real_ns=%lld "
		       "rc=%d job=%s\n", t1 - t0, t0, t1,
		       (long long)rt.tv_sec * 1000000000LL + rt.tv_nsec, rc,
		       gj_env("GPUMUTEX_JOB"));
		return rc != 0;
	}
	if (strcmp(mode, "first") == 0) {
		long long t0 = gj_now(), t1, t2;
		int rc = cuInit(0);
		CUcontext ctx = NULL;
		CUdevice dev = 0;
		struct timespec rt;

		t1 = gj_now();
		if (!rc)
			rc = cuDeviceGet(&dev, 0);
		if (!rc)
			rc = cuDevicePrimaryCtxRetain(&ctx, dev);
		t2 = gj_now();
		clock_gettime(CLOCK_REALTIME, &rt);
		printf("cuinit_ns=%lld first_ns=%lld ret_ns=%lld real_ns=%lld "
		       "rc=%d job=%s\n", t1 - t0, t2 - t1, t2,
		       (long long)rt.tv_sec * 1000000000LL + rt.tv_nsec, rc,
		       gj_env("GPUMUTEX_JOB"));
		return rc != 0;
	}
	if (strcmp(mode, "hold") == 0)
		return job(argc > 2 ? atoi(argv[2]) : 5, 1);
	return job(argc > 2 ? atoi(argv[2]) : 200, 0);
}
