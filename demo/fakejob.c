/*
 * fakejob - a stand-in CUDA job for `make demo` on a machine without a
 * GPU: cuInit, a context on its (leased) device, WORK_MS of "kernels"
 * (cuCtxSynchronize every few ms, each a tick in the fake driver's
 * journal), then exit. It knows nothing about gpumutex: the preload
 * library makes it wait its turn.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;

CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuDeviceGetCount(int *count);
CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev);
CUresult cuCtxSynchronize(void);
CUresult cuCtxDestroy_v2(CUcontext ctx);

int main(int argc, char **argv)
{
	long work_ms = argc > 1 ? atol(argv[1]) : 300;
	struct timespec step = { 0, 5 * 1000000L };
	CUcontext ctx[8];
	int n = 0;
	CUresult rc = cuInit(0);

	if (rc != 0) {
		fprintf(stderr, "fakejob: cuInit failed (%d)\n", rc);
		return 1;
	}
	/* One context on every GPU it can see: a 2-GPU job uses both. */
	if (cuDeviceGetCount(&n) || n < 1 || n > 8) {
		fprintf(stderr, "fakejob: no device\n");
		return 1;
	}
	for (int i = 0; i < n; i++) {
		CUdevice dev;
		if (cuDeviceGet(&dev, i) || cuCtxCreate_v2(&ctx[i], 0, dev)) {
			fprintf(stderr, "fakejob: cannot create a context\n");
			return 1;
		}
	}
	for (long t = 0; t < work_ms; t += 5) {
		cuCtxSynchronize();
		nanosleep(&step, NULL);
	}
	for (int i = n - 1; i >= 0; i--)
		cuCtxDestroy_v2(ctx[i]);
	return 0;
}
