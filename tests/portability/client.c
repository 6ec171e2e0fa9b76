/*
 * client.c - a small CUDA driver-API client for the portability check:
 * cuInit, a context on device 0, some work (each cuCtxSynchronize is a
 * "tick" in the fake driver's journal), then let go. Linked with -lcuda;
 * built inside the target root with its own compiler.
 */
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;

CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev);
CUresult cuCtxSynchronize(void);
CUresult cuCtxDestroy_v2(CUcontext ctx);

int main(int argc, char **argv)
{
	int ticks = argc > 1 ? atoi(argv[1]) : 20;
	CUdevice dev;
	CUcontext ctx;
	CUresult rc = cuInit(0);

	if (rc != 0) {
		fprintf(stderr, "client: cuInit returned %d\n", rc);
		return 1;
	}
	if (cuDeviceGet(&dev, 0) || cuCtxCreate_v2(&ctx, 0, dev)) {
		fprintf(stderr, "client: no context\n");
		return 1;
	}
	for (int i = 0; i < ticks; i++)
		cuCtxSynchronize();
	cuCtxDestroy_v2(ctx);
	return 0;
}
