/*
 * cuapi.c - resolving the driver API of cuapi.h from libcuda.so.1.
 *
 * Why dlopen and not a link: the backend must load on machines without a
 * driver (CI, CPU-only hosts) and decline there; and it must use the same
 * libcuda.so.1 the program's own CUDA code uses (a process has one driver),
 * which the dynamic loader's search gives us. With libgpumutex.so preloaded,
 * its dlsym() wrapper hands us its own cuInit, so the backend's start waits
 * its turn like any CUDA client.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "cuapi.h"

struct gpc_cu gpc_cu;

static void *gpc__driver;
static int gpc__loaded;

int gpc_cu_load(const char **why, char *why_buf, size_t why_len)
{
	static const struct {
		const char *name;
		size_t off;
	} fns[] = {
#define F(field, sym) { sym, offsetof(struct gpc_cu, field) }
		F(Init, "cuInit"),
		F(DriverGetVersion, "cuDriverGetVersion"),
		F(DeviceGetCount, "cuDeviceGetCount"),
		F(DeviceGet, "cuDeviceGet"),
		F(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
		F(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
		F(CtxPushCurrent, "cuCtxPushCurrent_v2"),
		F(CtxPopCurrent, "cuCtxPopCurrent_v2"),
		F(MemAlloc, "cuMemAlloc_v2"),
		F(MemFree, "cuMemFree_v2"),
		F(MemGetInfo, "cuMemGetInfo_v2"),
		F(MemHostAlloc, "cuMemHostAlloc"),
		F(MemFreeHost, "cuMemFreeHost"),
		F(MemHostRegister, "cuMemHostRegister_v2"),
		F(MemHostUnregister, "cuMemHostUnregister"),
		F(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
		F(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
		F(Memcpy2DAsync, "cuMemcpy2DAsync_v2"),
		F(MemsetD8Async, "cuMemsetD8Async"),
		F(MemsetD2D8Async, "cuMemsetD2D8Async"),
		F(StreamCreate, "cuStreamCreate"),
		F(StreamDestroy, "cuStreamDestroy_v2"),
		F(StreamSynchronize, "cuStreamSynchronize"),
		F(StreamWaitEvent, "cuStreamWaitEvent"),
		F(EventCreate, "cuEventCreate"),
		F(EventDestroy, "cuEventDestroy_v2"),
		F(EventRecord, "cuEventRecord"),
		F(EventSynchronize, "cuEventSynchronize"),
		F(GetErrorString, "cuGetErrorString"),
#undef F
	};
	struct gpc_cu t;

	if (gpc__loaded)
		return 0;
	if (!gpc__driver)
		gpc__driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!gpc__driver) {
		*why = "no CUDA driver (libcuda.so.1 not found)";
		(void)dlerror();
		return -1;
	}
	memset(&t, 0, sizeof t);
	for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
		void *f = dlsym(gpc__driver, fns[i].name);
		if (!f) {
			(void)dlerror();
			snprintf(why_buf, why_len, "the CUDA driver lacks %s",
				 fns[i].name);
			*why = why_buf;
			return -1;
		}
		memcpy((char *)&t + fns[i].off, &f, sizeof f);
	}
	gpc_cu = t;
	gpc__loaded = 1;
	return 0;
}

const char *gpc_cu_err(gpc_res r)
{
	const char *s = NULL;

	if (gpc__loaded && gpc_cu.GetErrorString(r, &s) == 0 && s)
		return s;
	return "?";
}
