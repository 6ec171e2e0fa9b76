/*
 * blasapi.h - the part of cuBLAS and cuSOLVER (dense) that
 * libgpuoffload-cuda.so uses, declared here rather than taken from the
 * toolkit's cublas_api.h and cusolverDn.h, for the reason cuapi.h gives:
 * the backend builds from this tree alone and links nothing; libs.c finds
 * the libraries at start() and resolves these by dlsym().
 *
 * What is declared: the enum values and status codes (C enums are ints in
 * the x86_64 and aarch64 C ABIs), the handle types (pointers), the
 * functions every start() needs (struct gpc_bl), and the signatures of the
 * per-operation functions, which run() looks up by name (cublasDgemm_v2,
 * cublasDgemm_v2_64, cusolverDnDgetrf, ...) through gpc_blas_sym() and
 * gpc_solver_sym() (libs.c): the
 * operation's precision and integer width pick the name, so one signature
 * with `void *` matrices serves s, d, c and z. tests/offload/cuda/abicheck.c
 * checks the values, the sizes and every name against the toolkit's
 * headers where they are installed.
 */
#ifndef GPUOFFLOAD_BLASAPI_H
#define GPUOFFLOAD_BLASAPI_H

#include <stddef.h>
#include <stdint.h>

#include "cuapi.h"

typedef struct gpc_cublas_s *gpc_cublas;      /* cublasHandle_t */
typedef struct gpc_cusolver_s *gpc_cusolver;  /* cusolverDnHandle_t */
typedef struct gpc_csparams_s *gpc_csparams;  /* cusolverDnParams_t */

/* cublasStatus_t / cusolverStatus_t: 0 is success. */
#define GPC_BLAS_OK 0

/* cublasOperation_t */
#define GPC_OP_N 0
#define GPC_OP_T 1
#define GPC_OP_C 2
/* cublasFillMode_t */
#define GPC_FILL_LOWER 0
#define GPC_FILL_UPPER 1
/* cublasDiagType_t */
#define GPC_DIAG_NON_UNIT 0
#define GPC_DIAG_UNIT 1
/* cublasSideMode_t */
#define GPC_SIDE_LEFT 0
#define GPC_SIDE_RIGHT 1
/* cublasPointerMode_t */
#define GPC_POINTER_HOST 0
/* cusolverEigMode_t */
#define GPC_EIG_NOVECTOR 0
#define GPC_EIG_VECTOR 1
/* cudaDataType */
#define GPC_R_32F 0
#define GPC_R_64F 1
#define GPC_C_32F 4
#define GPC_C_64F 5

/* The functions start() and stop() need; all must be present. */
struct gpc_bl {
	int (*Create)(gpc_cublas *h);                          /* cublasCreate_v2 */
	int (*Destroy)(gpc_cublas h);                          /* cublasDestroy_v2 */
	int (*SetStream)(gpc_cublas h, gpc_stream s);          /* cublasSetStream_v2 */
	int (*SetPointerMode)(gpc_cublas h, int mode);         /* cublasSetPointerMode_v2 */
	int (*DnCreate)(gpc_cusolver *h);                      /* cusolverDnCreate */
	int (*DnDestroy)(gpc_cusolver h);                      /* cusolverDnDestroy */
	int (*DnSetStream)(gpc_cusolver h, gpc_stream s);      /* cusolverDnSetStream */
	int (*DnCreateParams)(gpc_csparams *p);                /* cusolverDnCreateParams */
	int (*DnDestroyParams)(gpc_csparams p);                /* cusolverDnDestroyParams */
};

extern struct gpc_bl gpc_bl;

/* ---- Per-operation signatures (looked up by name at run time) ----------
 * BLAS: I is int (cublas<t><op>_v2) or int64_t (the _64 entry points of
 * cuBLAS 12 and later). Scalars are host pointers (pointer mode host). */
#define GPC_BLAS_SIGS(I, X)                                                   \
typedef int (*gpc_gemm##X)(gpc_cublas, int, int, I, I, I, const void *,       \
			   const void *, I, const void *, I, const void *,    \
			   void *, I);                                        \
typedef int (*gpc_symm##X)(gpc_cublas, int, int, I, I, const void *,          \
			   const void *, I, const void *, I, const void *,    \
			   void *, I);       /* symm, hemm */                 \
typedef int (*gpc_syrk##X)(gpc_cublas, int, int, I, I, const void *,          \
			   const void *, I, const void *, void *, I);         \
			   /* syrk, herk (real alpha, beta) */                \
typedef int (*gpc_syr2k##X)(gpc_cublas, int, int, I, I, const void *,         \
			    const void *, I, const void *, I, const void *,   \
			    void *, I);      /* syr2k, her2k */               \
typedef int (*gpc_trmm##X)(gpc_cublas, int, int, int, int, I, I,              \
			   const void *, const void *, I, const void *, I,    \
			   void *, I);                                        \
typedef int (*gpc_trsm##X)(gpc_cublas, int, int, int, int, I, I,              \
			   const void *, const void *, I, void *, I);         \
typedef int (*gpc_gemv##X)(gpc_cublas, int, I, I, const void *,              \
			   const void *, I, const void *, I, const void *,    \
			   void *, I);                                        \
typedef int (*gpc_geam##X)(gpc_cublas, int, int, I, I, const void *,          \
			   const void *, I, const void *, const void *, I,    \
			   void *, I);
GPC_BLAS_SIGS(int, 32)
GPC_BLAS_SIGS(int64_t, 64)
#undef GPC_BLAS_SIGS

/* cuSOLVER's legacy (32-bit) API: cusolverDn<t>getrf and friends, for
 * callers with 32-bit pivots, and ormqr/unmqr (which has no 64-bit form). */
typedef int (*gpc_getrf_bs)(gpc_cusolver, int, int, void *, int, int *);
typedef int (*gpc_getrf32)(gpc_cusolver, int, int, void *, int, void *,
			   int *, int *);
typedef int (*gpc_getrs32)(gpc_cusolver, int, int, int, const void *, int,
			   const int *, void *, int, int *);
typedef int (*gpc_ormqr_bs)(gpc_cusolver, int, int, int, int, int,
			    const void *, int, const void *, const void *,
			    int, int *);
typedef int (*gpc_ormqr)(gpc_cusolver, int, int, int, int, int, const void *,
			 int, const void *, void *, int, void *, int, int *);

/* cuSOLVER's 64-bit generic API (cusolverDnX*, CUDA 11.1 and later): the
 * data types are cudaDataType values; workspaces are bytes on the device
 * and on the host. */
typedef int (*gpc_xgetrf_bs)(gpc_cusolver, gpc_csparams, int64_t, int64_t,
			     int, const void *, int64_t, int, size_t *,
			     size_t *);
typedef int (*gpc_xgetrf)(gpc_cusolver, gpc_csparams, int64_t, int64_t, int,
			  void *, int64_t, int64_t *, int, void *, size_t,
			  void *, size_t, int *);
typedef int (*gpc_xgetrs)(gpc_cusolver, gpc_csparams, int, int64_t, int64_t,
			  int, const void *, int64_t, const int64_t *, int,
			  void *, int64_t, int *);
typedef int (*gpc_xpotrf_bs)(gpc_cusolver, gpc_csparams, int, int64_t, int,
			     const void *, int64_t, int, size_t *, size_t *);
typedef int (*gpc_xpotrf)(gpc_cusolver, gpc_csparams, int, int64_t, int,
			  void *, int64_t, int, void *, size_t, void *,
			  size_t, int *);
typedef int (*gpc_xpotrs)(gpc_cusolver, gpc_csparams, int, int64_t, int64_t,
			  int, const void *, int64_t, int, void *, int64_t,
			  int *);
typedef int (*gpc_xgeqrf_bs)(gpc_cusolver, gpc_csparams, int64_t, int64_t,
			     int, const void *, int64_t, int, const void *,
			     int, size_t *, size_t *);
typedef int (*gpc_xgeqrf)(gpc_cusolver, gpc_csparams, int64_t, int64_t, int,
			  void *, int64_t, int, void *, int, void *, size_t,
			  void *, size_t, int *);
typedef int (*gpc_xsyevd_bs)(gpc_cusolver, gpc_csparams, int, int, int64_t,
			     int, const void *, int64_t, int, const void *,
			     int, size_t *, size_t *);
typedef int (*gpc_xsyevd)(gpc_cusolver, gpc_csparams, int, int, int64_t, int,
			  void *, int64_t, int, void *, int, void *, size_t,
			  void *, size_t, int *);
typedef int (*gpc_xgesvd_bs)(gpc_cusolver, gpc_csparams, signed char,
			     signed char, int64_t, int64_t, int, const void *,
			     int64_t, int, const void *, int, const void *,
			     int64_t, int, const void *, int64_t, int,
			     size_t *, size_t *);
typedef int (*gpc_xgesvd)(gpc_cusolver, gpc_csparams, signed char,
			  signed char, int64_t, int64_t, int, void *, int64_t,
			  int, void *, int, void *, int64_t, int, void *,
			  int64_t, int, void *, size_t, void *, size_t,
			  int *);

#endif
