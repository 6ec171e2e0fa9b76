/*
 * cuapi.h - the part of the CUDA driver API that libgpuoffload-cuda.so
 * uses, declared here rather than taken from the toolkit's cuda.h, so that
 * the backend builds from this tree alone (CI has no toolkit) and links
 * nothing: every function is resolved with dlsym() from libcuda.so.1 at
 * gpc_cu_load(). The types and values below are the driver's stable C ABI
 * (CUresult is an int, CUdeviceptr an unsigned 64-bit integer, handles are
 * pointers); tests/offload/cuda checks them against cuda.h where the
 * toolkit is installed.
 *
 * Versioned entry points: the driver exports several versions of some
 * functions (cuMemAlloc and cuMemAlloc_v2); the table holds the one named
 * in the comment, the version cuda.h's macros select today.
 */
#ifndef GPUOFFLOAD_CUAPI_H
#define GPUOFFLOAD_CUAPI_H

#include <stddef.h>
#include <stdint.h>

typedef int gpc_res;                      /* CUresult: 0 is CUDA_SUCCESS */
typedef unsigned long long gpc_dptr;      /* CUdeviceptr */
typedef int gpc_dev;                      /* CUdevice */
typedef struct gpc_ctx_s *gpc_ctx;        /* CUcontext */
typedef struct gpc_stream_s *gpc_stream;  /* CUstream */
typedef struct gpc_event_s *gpc_event;    /* CUevent */

#define GPC_STREAM_NON_BLOCKING 0x1u      /* CU_STREAM_NON_BLOCKING */
#define GPC_EVENT_DISABLE_TIMING 0x2u     /* CU_EVENT_DISABLE_TIMING */
#define GPC_MEMHOSTALLOC_PORTABLE 0x1u    /* CU_MEMHOSTALLOC_PORTABLE */
#define GPC_MEMHOSTREGISTER_PORTABLE 0x1u /* CU_MEMHOSTREGISTER_PORTABLE */
#define GPC_ERROR_NOT_READY 600           /* CUDA_ERROR_NOT_READY */

/* CUmemorytype */
#define GPC_MEMORYTYPE_HOST 1
#define GPC_MEMORYTYPE_DEVICE 2

/* CUDA_MEMCPY2D (the _v2 layout) */
struct gpc_memcpy2d {
	size_t srcXInBytes, srcY;
	int srcMemoryType;
	const void *srcHost;
	gpc_dptr srcDevice;
	void *srcArray;
	size_t srcPitch;
	size_t dstXInBytes, dstY;
	int dstMemoryType;
	void *dstHost;
	gpc_dptr dstDevice;
	void *dstArray;
	size_t dstPitch;
	size_t WidthInBytes, Height;
};

struct gpc_cu {
	gpc_res (*Init)(unsigned flags);                       /* cuInit */
	gpc_res (*DriverGetVersion)(int *v);                   /* cuDriverGetVersion */
	gpc_res (*DeviceGetCount)(int *n);                     /* cuDeviceGetCount */
	gpc_res (*DeviceGet)(gpc_dev *d, int ordinal);         /* cuDeviceGet */
	gpc_res (*PrimaryCtxRetain)(gpc_ctx *c, gpc_dev d);    /* cuDevicePrimaryCtxRetain */
	gpc_res (*PrimaryCtxRelease)(gpc_dev d);               /* cuDevicePrimaryCtxRelease_v2 */
	gpc_res (*CtxPushCurrent)(gpc_ctx c);                  /* cuCtxPushCurrent_v2 */
	gpc_res (*CtxPopCurrent)(gpc_ctx *c);                  /* cuCtxPopCurrent_v2 */
	gpc_res (*MemAlloc)(gpc_dptr *p, size_t bytes);        /* cuMemAlloc_v2 */
	gpc_res (*MemFree)(gpc_dptr p);                        /* cuMemFree_v2 */
	gpc_res (*MemGetInfo)(size_t *free_b, size_t *total);  /* cuMemGetInfo_v2 */
	gpc_res (*MemHostAlloc)(void **p, size_t bytes, unsigned flags); /* cuMemHostAlloc */
	gpc_res (*MemFreeHost)(void *p);                       /* cuMemFreeHost */
	gpc_res (*MemHostRegister)(void *p, size_t bytes, unsigned flags); /* cuMemHostRegister_v2 */
	gpc_res (*MemHostUnregister)(void *p);                 /* cuMemHostUnregister */
	gpc_res (*MemcpyHtoDAsync)(gpc_dptr dst, const void *src, size_t bytes,
				   gpc_stream s);              /* cuMemcpyHtoDAsync_v2 */
	gpc_res (*MemcpyDtoHAsync)(void *dst, gpc_dptr src, size_t bytes,
				   gpc_stream s);              /* cuMemcpyDtoHAsync_v2 */
	gpc_res (*Memcpy2DAsync)(const struct gpc_memcpy2d *c,
				 gpc_stream s);                /* cuMemcpy2DAsync_v2 */
	gpc_res (*MemsetD8Async)(gpc_dptr p, unsigned char v, size_t n,
				 gpc_stream s);                /* cuMemsetD8Async */
	gpc_res (*MemsetD2D8Async)(gpc_dptr p, size_t pitch, unsigned char v,
				   size_t width, size_t height,
				   gpc_stream s);              /* cuMemsetD2D8Async */
	gpc_res (*StreamCreate)(gpc_stream *s, unsigned flags); /* cuStreamCreate */
	gpc_res (*StreamDestroy)(gpc_stream s);                /* cuStreamDestroy_v2 */
	gpc_res (*StreamSynchronize)(gpc_stream s);            /* cuStreamSynchronize */
	gpc_res (*StreamWaitEvent)(gpc_stream s, gpc_event e, unsigned flags); /* cuStreamWaitEvent */
	gpc_res (*EventCreate)(gpc_event *e, unsigned flags);  /* cuEventCreate */
	gpc_res (*EventDestroy)(gpc_event e);                  /* cuEventDestroy_v2 */
	gpc_res (*EventRecord)(gpc_event e, gpc_stream s);     /* cuEventRecord */
	gpc_res (*EventSynchronize)(gpc_event e);              /* cuEventSynchronize */
	gpc_res (*GetErrorString)(gpc_res r, const char **s);  /* cuGetErrorString */
};

/* The table, valid after gpc_cu_load() returned 0. */
extern struct gpc_cu gpc_cu;

/*
 * Load libcuda.so.1 (dlopen, RTLD_LOCAL; the handle is kept for the life
 * of the process: the driver must not be unloaded under its own threads)
 * and resolve every entry of gpc_cu. Returns 0, or -1 with a reason in
 * `why` (a static string or one written into why_buf) when the driver or
 * any function is missing. Idempotent; the caller serialises calls.
 */
int gpc_cu_load(const char **why, char *why_buf, size_t why_len);

/* The driver's name for `r` ("CUDA_ERROR_OUT_OF_MEMORY"...), or "?". */
const char *gpc_cu_err(gpc_res r);

#endif
