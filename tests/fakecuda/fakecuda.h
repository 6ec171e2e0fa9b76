/* fakecuda.h - own minimal declarations for the fake CUDA driver (libcuda.so.1).
 *
 * Written from scratch for gpumutex's tests; deliberately does not include or
 * copy the toolkit's cuda.h.  Only the ABI facts matter: argument lists of the
 * functions below match the driver API so that real CUDA client code can call
 * them.
 */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct fc_ctx *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct { unsigned char bytes[16]; } CUuuid;

/* Result codes used by the fake (values as in the driver API). */
#define FC_SUCCESS                 0
#define FC_ERROR_INVALID_VALUE     1
#define FC_ERROR_NOT_INITIALIZED   3
#define FC_ERROR_NO_DEVICE         100
#define FC_ERROR_INVALID_DEVICE    101
#define FC_ERROR_INVALID_CONTEXT   201
#define FC_ERROR_NOT_FOUND         500
#define FC_ERROR_NOT_SUPPORTED     801

/* cuGetProcAddress flags / symbol status values. */
#define FC_GPA_DEFAULT             0
#define FC_GPA_LEGACY_STREAM       1
#define FC_GPA_PER_THREAD_STREAM   2
#define FC_GPA_FOUND               0
#define FC_GPA_SYMBOL_NOT_FOUND    1

#define FC_ATTR_CC_MAJOR           75
#define FC_ATTR_CC_MINOR           76

#define FC_DRIVER_VERSION          13000

/* Functions the fake implements for real.  gen-stubs.sh reads the FC_IMPL
 * lines below and in FC_IMPLEMENTED_IFUNC (one per line!) to leave these names out of the generated
 * 801-returning stubs; procaddr.c uses the list to build its lookup table. */
#define FC_IMPLEMENTED(FC_IMPL) \
    FC_IMPL(cuInit) \
    FC_IMPL(cuDriverGetVersion) \
    FC_IMPL(cuDeviceGetCount) \
    FC_IMPL(cuDeviceGet) \
    FC_IMPL(cuDeviceGetName) \
    FC_IMPL(cuDeviceGetUuid) \
    FC_IMPL(cuDeviceGetUuid_v2) \
    FC_IMPL(cuDeviceGetPCIBusId) \
    FC_IMPL(cuDeviceTotalMem_v2) \
    FC_IMPL(cuDeviceGetAttribute) \
    FC_IMPL(cuCtxCreate_v2) \
    FC_IMPL(cuCtxCreate_v3) \
    FC_IMPL(cuCtxCreate_v4) \
    FC_IMPL(cuCtxDestroy) \
    FC_IMPL(cuCtxDestroy_v2) \
    FC_IMPL(cuDevicePrimaryCtxRetain) \
    FC_IMPL(cuDevicePrimaryCtxRelease) \
    FC_IMPL(cuDevicePrimaryCtxRelease_v2) \
    FC_IMPL(cuDevicePrimaryCtxReset) \
    FC_IMPL(cuDevicePrimaryCtxReset_v2) \
    FC_IMPL(cuDevicePrimaryCtxGetState) \
    FC_IMPL(cuDevicePrimaryCtxSetFlags) \
    FC_IMPL(cuDevicePrimaryCtxSetFlags_v2) \
    FC_IMPL(cuCtxSetCurrent) \
    FC_IMPL(cuCtxGetCurrent) \
    FC_IMPL(cuCtxPushCurrent) \
    FC_IMPL(cuCtxPushCurrent_v2) \
    FC_IMPL(cuCtxPopCurrent) \
    FC_IMPL(cuCtxPopCurrent_v2) \
    FC_IMPL(cuCtxGetDevice) \
    FC_IMPL(cuCtxGetDevice_v2) \
    FC_IMPL(cuCtxSynchronize) \
    FC_IMPL(cuCtxSynchronize_v2) \
    FC_IMPL(cuMemAlloc_v2) \
    FC_IMPL(cuMemFree_v2) \
    FC_IMPL(cuMemGetInfo_v2) \
    FC_IMPL(cuLaunchKernel) \
    FC_IMPL(cuLaunchKernel_ptsz) \
    FC_IMPL(cuGetExportTable) \
    FC_IMPL(cuCheckpointProcessGetState) \
    FC_IMPL(cuCheckpointProcessLock) \
    FC_IMPL(cuCheckpointProcessCheckpoint) \
    FC_IMPL(cuCheckpointProcessRestore) \
    FC_IMPL(cuCheckpointProcessUnlock)

/* Exported as GNU indirect functions (so FAKECUDA_HIDE_GETPROCADDRESS can make
 * dlsym miss them); listed separately because the lookup table must not take
 * their exported addresses. */
#define FC_IMPLEMENTED_IFUNC(FC_IMPL) \
    FC_IMPL(cuGetProcAddress) \
    FC_IMPL(cuGetProcAddress_v2)

CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *version);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev);
CUresult cuDeviceGetPCIBusId(char *busid, int len, CUdevice dev);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, void *affinity_params, int nparams,
                        unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v4(CUcontext *pctx, void *create_params, unsigned int flags,
                        CUdevice dev);
CUresult cuCtxDestroy(CUcontext ctx);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxReset(CUdevice dev);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active);
CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags);
CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext *pctx);
CUresult cuCtxPushCurrent(CUcontext ctx);
CUresult cuCtxPushCurrent_v2(CUcontext ctx);
CUresult cuCtxPopCurrent(CUcontext *pctx);
CUresult cuCtxPopCurrent_v2(CUcontext *pctx);
CUresult cuCtxGetDevice(CUdevice *dev);
CUresult cuCtxGetDevice_v2(CUdevice *dev, CUcontext ctx);
CUresult cuCtxSynchronize(void);
CUresult cuCtxSynchronize_v2(CUcontext ctx);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes);
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz,
                        unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                        void *stream, void **params, void **extra);
CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz,
                             unsigned bx, unsigned by, unsigned bz,
                             unsigned shmem, void *stream, void **params,
                             void **extra);
CUresult cuCheckpointProcessGetState(int pid, int *state);
CUresult cuCheckpointProcessLock(int pid, void *args);
CUresult cuCheckpointProcessCheckpoint(int pid, void *args);
CUresult cuCheckpointProcessRestore(int pid, void *args);
CUresult cuCheckpointProcessUnlock(int pid, void *args);
/* Internal: a stub was called (generated stubs.c): with FAKECUDA_STUB_LOG
 * set, append its name and pid to that file. */
void fc_stub_called(const char *name);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version,
                          unsigned long long flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version,
                             unsigned long long flags, int *symbol_status);
CUresult cuGetExportTable(const void **table, const CUuuid *table_id);

/* Internal: symbol tables for cuGetProcAddress (not exported). */
typedef void (*fc_fn)(void);
struct fc_sym { const char *name; fc_fn fn; };
extern const struct fc_sym fc_stub_table[];   /* generated stubs.c, sorted */
extern const unsigned fc_stub_count;

#endif
