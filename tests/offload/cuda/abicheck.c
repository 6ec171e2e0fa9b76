/*
 * abicheck.c - the CUDA backend's in-tree declarations (src/offload/cuda/
 * cuapi.h, blasapi.h) against the toolkit's own headers: every value and
 * size the backend relies on, the layout of CUDA_MEMCPY2D, and every name
 * it looks up at run time. A compile-time check: a difference fails the
 * build of this program (tests/offload/test_offload_cuda.py builds it
 * where cuda.h is found, and skips elsewhere; cuBLAS and cuSOLVER parts
 * need their headers too). Running it prints what it checked.
 */
#include <stddef.h>
#include <stdio.h>

#include <cuda.h>
#include "cuapi.h"
#include "blasapi.h"

#define SAME(a, b) _Static_assert((long long)(a) == (long long)(b), #a " != " #b)
#define SIZE(a, b) _Static_assert(sizeof(a) == sizeof(b), "sizeof " #a " != sizeof " #b)
#define FIELD(f) _Static_assert(offsetof(struct gpc_memcpy2d, f) == \
				offsetof(CUDA_MEMCPY2D, f), "offset of " #f)
/* The name exists, as a function, in the toolkit's header. */
#define NAME(f) (void)sizeof(&f)

/* ---- The driver (cuda.h) ---- */
SIZE(gpc_res, CUresult);
SIZE(gpc_dptr, CUdeviceptr);
SIZE(gpc_dev, CUdevice);
SIZE(gpc_ctx, CUcontext);
SIZE(gpc_stream, CUstream);
SIZE(gpc_event, CUevent);
SAME(0, CUDA_SUCCESS);
SAME(GPC_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING);
SAME(GPC_EVENT_DISABLE_TIMING, CU_EVENT_DISABLE_TIMING);
SAME(GPC_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_PORTABLE);
SAME(GPC_MEMHOSTREGISTER_PORTABLE, CU_MEMHOSTREGISTER_PORTABLE);
SAME(GPC_ERROR_NOT_READY, CUDA_ERROR_NOT_READY);
SAME(GPC_MEMORYTYPE_HOST, CU_MEMORYTYPE_HOST);
SAME(GPC_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE);
SIZE(struct gpc_memcpy2d, CUDA_MEMCPY2D);
FIELD(srcXInBytes); FIELD(srcY); FIELD(srcMemoryType); FIELD(srcHost);
FIELD(srcDevice); FIELD(srcArray); FIELD(srcPitch); FIELD(dstXInBytes);
FIELD(dstY); FIELD(dstMemoryType); FIELD(dstHost); FIELD(dstDevice);
FIELD(dstArray); FIELD(dstPitch); FIELD(WidthInBytes); FIELD(Height);

static void driver_names(void)
{
	NAME(cuInit); NAME(cuDriverGetVersion); NAME(cuDeviceGetCount);
	NAME(cuDeviceGet); NAME(cuDevicePrimaryCtxRetain);
	NAME(cuDevicePrimaryCtxRelease_v2); NAME(cuCtxPushCurrent_v2);
	NAME(cuCtxPopCurrent_v2); NAME(cuMemAlloc_v2); NAME(cuMemFree_v2);
	NAME(cuMemGetInfo_v2); NAME(cuMemHostAlloc); NAME(cuMemFreeHost);
	NAME(cuMemHostRegister_v2); NAME(cuMemHostUnregister);
	NAME(cuMemcpyHtoDAsync_v2); NAME(cuMemcpyDtoHAsync_v2);
	NAME(cuMemcpy2DAsync_v2); NAME(cuMemsetD8Async);
	NAME(cuMemsetD2D8Async); NAME(cuStreamCreate); NAME(cuStreamDestroy_v2);
	NAME(cuStreamSynchronize); NAME(cuStreamWaitEvent); NAME(cuEventCreate);
	NAME(cuEventDestroy_v2); NAME(cuEventRecord); NAME(cuEventSynchronize);
	NAME(cuGetErrorString);
}

/* ---- cuBLAS (cublas_api.h) ---- */
#if __has_include(<cublas_api.h>)
#include <cublas_api.h>
#define HAVE_CUBLAS 1
SIZE(int, cublasOperation_t);
SIZE(int, cublasFillMode_t);
SIZE(int, cublasDiagType_t);
SIZE(int, cublasSideMode_t);
SIZE(int, cublasStatus_t);
SIZE(gpc_cublas, cublasHandle_t);
SAME(GPC_BLAS_OK, CUBLAS_STATUS_SUCCESS);
SAME(GPC_OP_N, CUBLAS_OP_N);
SAME(GPC_OP_T, CUBLAS_OP_T);
SAME(GPC_OP_C, CUBLAS_OP_C);
SAME(GPC_FILL_LOWER, CUBLAS_FILL_MODE_LOWER);
SAME(GPC_FILL_UPPER, CUBLAS_FILL_MODE_UPPER);
SAME(GPC_DIAG_NON_UNIT, CUBLAS_DIAG_NON_UNIT);
SAME(GPC_DIAG_UNIT, CUBLAS_DIAG_UNIT);
SAME(GPC_SIDE_LEFT, CUBLAS_SIDE_LEFT);
SAME(GPC_SIDE_RIGHT, CUBLAS_SIDE_RIGHT);
SAME(GPC_POINTER_HOST, CUBLAS_POINTER_MODE_HOST);
SAME(GPC_R_32F, CUDA_R_32F);
SAME(GPC_R_64F, CUDA_R_64F);
SAME(GPC_C_32F, CUDA_C_32F);
SAME(GPC_C_64F, CUDA_C_64F);
SIZE(int, cudaDataType);

#define P4(op) NAME(cublasS##op); NAME(cublasD##op); NAME(cublasC##op); NAME(cublasZ##op)
#define P2(op) NAME(cublasC##op); NAME(cublasZ##op)
static void cublas_names(void)
{
	NAME(cublasCreate_v2); NAME(cublasDestroy_v2); NAME(cublasSetStream_v2);
	NAME(cublasSetPointerMode_v2);
	P4(gemm_v2); P4(symm_v2); P4(syrk_v2); P4(syr2k_v2); P4(trmm_v2);
	P4(trsm_v2); P4(geam); P2(hemm_v2); P2(herk_v2); P2(her2k_v2);
#if CUBLAS_VER_MAJOR >= 12
	P4(gemm_v2_64); P4(symm_v2_64); P4(syrk_v2_64); P4(syr2k_v2_64);
	P4(trmm_v2_64); P4(trsm_v2_64); P4(geam_64); P2(hemm_v2_64);
	P2(herk_v2_64); P2(her2k_v2_64);
#endif
}
#else
#define HAVE_CUBLAS 0
#endif

/* ---- cuSOLVER (cusolverDn.h) ---- */
#if __has_include(<cusolverDn.h>) && HAVE_CUBLAS
#include <cusolverDn.h>
#define HAVE_CUSOLVER 1
SIZE(int, cusolverStatus_t);
SIZE(int, cusolverEigMode_t);
SIZE(gpc_cusolver, cusolverDnHandle_t);
SIZE(gpc_csparams, cusolverDnParams_t);
SAME(GPC_BLAS_OK, CUSOLVER_STATUS_SUCCESS);
SAME(GPC_EIG_NOVECTOR, CUSOLVER_EIG_MODE_NOVECTOR);
SAME(GPC_EIG_VECTOR, CUSOLVER_EIG_MODE_VECTOR);

#define S4(op) NAME(cusolverDnS##op); NAME(cusolverDnD##op); \
	       NAME(cusolverDnC##op); NAME(cusolverDnZ##op)
static void cusolver_names(void)
{
	NAME(cusolverDnCreate); NAME(cusolverDnDestroy); NAME(cusolverDnSetStream);
	NAME(cusolverDnCreateParams); NAME(cusolverDnDestroyParams);
	S4(getrf); S4(getrf_bufferSize); S4(getrs);
	NAME(cusolverDnSormqr); NAME(cusolverDnDormqr); NAME(cusolverDnCunmqr);
	NAME(cusolverDnZunmqr); NAME(cusolverDnSormqr_bufferSize);
	NAME(cusolverDnDormqr_bufferSize); NAME(cusolverDnCunmqr_bufferSize);
	NAME(cusolverDnZunmqr_bufferSize);
	NAME(cusolverDnXgetrf); NAME(cusolverDnXgetrf_bufferSize);
	NAME(cusolverDnXgetrs); NAME(cusolverDnXpotrf);
	NAME(cusolverDnXpotrf_bufferSize); NAME(cusolverDnXpotrs);
	NAME(cusolverDnXgeqrf); NAME(cusolverDnXgeqrf_bufferSize);
	NAME(cusolverDnXsyevd); NAME(cusolverDnXsyevd_bufferSize);
	NAME(cusolverDnXgesvd); NAME(cusolverDnXgesvd_bufferSize);
}
#else
#define HAVE_CUSOLVER 0
#endif

int main(void)
{
	driver_names();
#if HAVE_CUBLAS
	cublas_names();
#endif
#if HAVE_CUSOLVER
	cusolver_names();
#endif
	printf("abicheck: cuda.h %d, cublas_api.h %s, cusolverDn.h %s: all checks "
	       "passed at compile time\n", CUDA_VERSION,
	       HAVE_CUBLAS ? "checked" : "absent", HAVE_CUSOLVER ? "checked" : "absent");
	return 0;
}
