/*
 * nsdep.c - libnsdep.so: a library linked with -lcuda (the fake driver),
 * which reaches cuInit through its own PLT, as a CUDA library loaded with
 * dlmopen into a new link-map namespace would. nsprobe.c loads it.
 */
int cuInit(unsigned int flags);
int cuDevicePrimaryCtxRetain(void **ctx, int dev);
int cuCtxSetCurrent(void *ctx);
int cuCtxSynchronize(void);
int cuDevicePrimaryCtxRelease(int dev);
int nsdep_use(void);

/* cuInit, then use device 0 once (the fake driver journals it). */
int nsdep_use(void)
{
	void *ctx = 0;
	int rc = cuInit(0);

	if (rc == 0 && cuDevicePrimaryCtxRetain(&ctx, 0) == 0) {
		if (cuCtxSetCurrent(ctx) == 0)
			cuCtxSynchronize();
		cuDevicePrimaryCtxRelease(0);
	}
	return rc;
}
