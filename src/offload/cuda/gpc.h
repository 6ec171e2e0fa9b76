/*
 * gpc.h - what the files of libgpuoffload-cuda.so share: the state start()
 * made (context, stream, handles), the device-memory pool, the library
 * lookup, and the two halves of run() (BLAS on cuBLAS, LAPACK on
 * cuSOLVER). Everything here runs under the frontend's one-call-at-a-time
 * lock (backend.h) with the backend's context current.
 */
#ifndef GPUOFFLOAD_GPC_H
#define GPUOFFLOAD_GPC_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "blasapi.h"
#include "cuapi.h"

/* What start() made; valid between a successful start() and stop(). */
struct gpc_state {
	gpc_dev dev;
	gpc_ctx ctx;            /* the device's primary context, retained */
	gpc_stream stream;      /* compute: cuBLAS and cuSOLVER run on it */
	gpc_cublas blas;
	gpc_cusolver solver;
	gpc_csparams params;
};
extern struct gpc_state gpc_st;

/* libs.c: find and load cuBLAS and cuSOLVER, resolve gpc_bl. 0, or -1
 * with the reason in *why (static or in why_buf). Idempotent. */
int gpc_bl_load(const char **why, char *why_buf, size_t why_len);
/* A function of the loaded cuBLAS / cuSOLVER by name, or NULL. */
void *gpc_blas_sym(const char *name);
void *gpc_solver_sym(const char *name);

/* pool.c: device memory, cached across calls. */
int gpc_pool_alloc(gpc_dptr *p, uint64_t bytes);     /* 0 or -1 */
void gpc_pool_free(gpc_dptr p);
/* p (handed out) stays out across calls (lapack.c's kept workspace):
 * it no longer counts in the bytes a call holds, so calls still end
 * (the bound of the recent calls, pool.c). gpc_pool_free returns it. */
void gpc_pool_hold(gpc_dptr p);
uint64_t gpc_pool_cached(void);                      /* bytes held free */
void gpc_pool_trim(uint64_t keep);                   /* free down to keep */
/* The device's size in bytes (0: unknown) for the bound on cached
 * buffers, and fixed: the old fixed 1 GiB bound instead (pool.c);
 * gpc_pool_start calls it. gpc_pool_keep: that bound now. */
void gpc_pool_configure(uint64_t device_bytes, int fixed);
uint64_t gpc_pool_keep(void);
int gpc_pool_start(void);           /* configure, the idle thread; 0/-1 */
void gpc_pool_release_all(void);   /* stop: the thread, every buffer */

/* blas3.c / lapack.c: one kernel each; 0, GPO_BE_UNSUPPORTED or -1. */
int gpc_run_blas(struct gpo_kernel *k);
int gpc_run_lapack(struct gpo_kernel *k);

/* xgemm.c: run_host (backend.h) for gemm, its copies overlapping its
 * kernels in column panels. gpc_gemm_host: 0, GPO_BE_UNSUPPORTED (not
 * taken: nothing done) or -1 (h->failed says the step). Panels: n over
 * GPU_OFFLOAD_CUDA_PANELS (default GPC_PANELS_DEFAULT; 0: the pipeline
 * off) rounded up to a multiple of GPU_OFFLOAD_CUDA_PANEL_WIDTH columns
 * (GPC_PANEL_GRAIN); calls with operands of fewer than
 * GPU_OFFLOAD_CUDA_PANEL_MIN bytes (GPC_PANEL_MIN_BYTES), of fewer than
 * GPU_OFFLOAD_CUDA_PANEL_INTENSITY flops per byte of them
 * (GPC_PANEL_MIN_INTENSITY), or of fewer than 2 panels are not taken. start/stop: the variables, two events. */
#define GPC_PANELS_DEFAULT 8
#define GPC_PANELS_MAX 64
#define GPC_PANEL_GRAIN 256
#define GPC_PANEL_MIN_BYTES (64ull << 20)
#define GPC_PANEL_MIN_INTENSITY 1024    /* GPU_OFFLOAD_CUDA_PANEL_INTENSITY */
int gpc_gemm_host(struct gpo_kernel *k, struct gpo_hostcall *h);
/* Whether gpc_gemm_host would take the call (no driver call: the
 * backend asks before it pushes its context). */
int gpc_gemm_takes(struct gpo_kernel *k, const struct gpo_hostcall *h);
int gpc_panels_start(void);         /* 0 (a pipeline without events: off) */
void gpc_panels_stop(void);
struct gpc_panel_stats {
	uint64_t calls, panels;         /* pipelined calls done, their panels */
};
void gpc_panel_stats(struct gpc_panel_stats *st);

/* xsolve.c: run_host (backend.h) for gesv and posv, the copies of B in
 * and of the factor out overlapping the factorisation and the solve.
 * gpc_solve_host: 0, GPO_BE_UNSUPPORTED (not taken: nothing done) or -1
 * (h->failed says the step). Not taken: GPU_OFFLOAD_CUDA_SOLVE_PIPE=0,
 * A and B of fewer than GPU_OFFLOAD_CUDA_SOLVE_MIN bytes together
 * (GPC_SOLVE_MIN_BYTES), empty dimensions, operands not as the frontend
 * describes them, names or dimensions cuSOLVER lacks. start/stop: the
 * variables, two events. */
#define GPC_SOLVE_MIN_BYTES (8ull << 20)
int gpc_solve_host(struct gpo_kernel *k, struct gpo_hostcall *h);
/* Whether gpc_solve_host would take the call (no driver call). */
int gpc_solve_takes(struct gpo_kernel *k, const struct gpo_hostcall *h);
int gpc_solve_start(void);          /* 0 (without its events: off) */
void gpc_solve_stop(void);

/* lapack.c: the steps of gesv and posv for xsolve.c. Each queues its
 * cuSOLVER call on the compute stream (its info in the next slot of
 * gpc_small_info, xsmall.h) and returns without waiting: 0, -1 or
 * GPO_BE_UNSUPPORTED. The factorisations hand their workspace to *w
 * (zeroed by the caller), which the caller gives back with gpc_ws_put
 * (lapack_ws.h) once the work that uses it ended: gpc_ws_put of a
 * workspace that is the call's own waits for the stream, which here
 * would wait for the factorisation before the next copy. */
struct gpc_ws;
int gpc_getrf_q(struct gpo_kernel *k, int64_t m, int64_t n, gpc_dptr a,
		int64_t lda, gpc_dptr ipiv, struct gpc_ws *w);
int gpc_getrs(struct gpo_kernel *k, char trans, int64_t n, int64_t nrhs,
	      gpc_dptr a, int64_t lda, gpc_dptr ipiv, gpc_dptr b, int64_t ldb);
int gpc_potrf_q(struct gpo_kernel *k, char uplo, int64_t n, gpc_dptr a,
		int64_t lda, struct gpc_ws *w);
int gpc_potrs(struct gpo_kernel *k, char uplo, int64_t n, int64_t nrhs,
	      gpc_dptr a, int64_t lda, gpc_dptr b, int64_t ldb);

/* xgemm.c: the decimal number in the environment variable `name` (a
 * secure_getenv), at most max (a larger one, of any length: max); dflt
 * when unset, empty or not a number (digits only). */
uint64_t gpc_env(const char *name, uint64_t dflt, uint64_t max);

/* Shared by both halves. */
int gpc_sync(void);                         /* the compute stream; 0/-1 */
/* The two alternating events of a pipeline (xgemm.c, xsolve.c), without
 * timing: 0, or -1 with none left (ev[] all NULL). */
int gpc_events_create(gpc_event ev[2]);
/* Destroy what gpc_events_create made (NULL entries skipped); ev[] NULL. */
void gpc_events_destroy(gpc_event ev[2]);
/* The end of a run_host pipeline (xgemm.c, xsolve.c) that returned rc,
 * before its buffers go back: GPO_BE_UNSUPPORTED from inside the pipeline
 * (an entry point found missing once a kernel may be queued) is a failure
 * of the kernel step; then the compute stream is waited for, so that no
 * kernel outlives the call (a failing wait fails it too). Returns the
 * call's rc (0 or -1), *failed set to the step when it fails there. */
int gpc_host_settle(int rc, int *failed);
/* Element size of the precision; real_only: of its real type. */
size_t gpc_esize(char prec, int real_only);
/* cudaDataType of the precision (real_only: of its real type). */
int gpc_dtype(char prec, int real_only);
/* Upper-case precision letter, for the legacy names (cusolverDnDgetrf). */
char gpc_P(char prec);
/* The cuBLAS operation for an option letter (N, T, C) in this precision:
 * C is T for real ones. */
int gpc_op(char c, char prec);
/* lapack.c: drop the workspace kept between calls (stop, before the
 * pool's buffers are freed). */
void gpc_ws_forget(void);
/* A device scratch of `bytes` (>= 1) from the pool, or 0. */
gpc_dptr gpc_scratch(uint64_t bytes);
/* Conjugate-transpose (transpose, for real) src (rows x cols, lds) into
 * dst (cols x rows, ldd) on the compute stream. 0, -1 or UNSUPPORTED. */
int gpc_transpose(char prec, int64_t rows, int64_t cols, gpc_dptr src,
		  int64_t lds, gpc_dptr dst, int64_t ldd);
/* trsm on device memory (for gels): 0, -1 or UNSUPPORTED. */
int gpc_trsm(char prec, int side, int uplo, int trans, int diag, int64_t m,
	     int64_t n, gpc_dptr a, int64_t lda, gpc_dptr b, int64_t ldb);

#endif
