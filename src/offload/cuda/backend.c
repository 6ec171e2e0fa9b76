/*
 * backend.c - libgpuoffload-cuda.so: the GPU backend of the private ABI
 * (src/offload/backend.h, version 2) on NVIDIA's driver, cuBLAS and
 * cuSOLVER, all dlopen()ed (cuapi.c, libs.c): the library needs libc
 * only to load, and loads on machines without any of them, where start()
 * fails and the frontend declines with one line.
 *
 * Context: start() retains device 0's PRIMARY context (of the devices
 * visible: gpumutex narrows CUDA_VISIBLE_DEVICES to the leased GPU), the
 * one the CUDA runtime and so the program's own CUDA code (torch) use, so
 * that both share one context and its memory instead of two. Every entry
 * point pushes it and pops it on return: the calling thread's current
 * context is as the program left it. errno is preserved; nothing prints.
 * A failing start() says why through the table's name, which the
 * frontend's decline line includes ("the GPU backend CUDA (no cuBLAS ...)
 * did not start"), so that ABI 2 stays as it is.
 *
 * Small operands (xsmall.h) live in one device arena with a pinned image:
 * alloc, to_device, to_host and release of those make no driver call and
 * push no context, and run() moves them in one copy each way and waits
 * once, LAPACK's info included. Larger ones go through the pool (pool.c)
 * and the copy engine (xfer.h).
 */
#define _GNU_SOURCE
#include "compat.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpc.h"
#include "xfer.h"
#include "xsmall.h"

struct gpc_state gpc_st;
static int gpc__started;
static char gpc__name[320] = "CUDA";

static int gpc__push(void)
{
	return gpc_cu.CtxPushCurrent(gpc_st.ctx) == 0 ? 0 : -1;
}

static void gpc__pop(void)
{
	gpc_ctx c;

	(void)gpc_cu.CtxPopCurrent(&c);
}

/* The reason start() failed, in the name the decline line shows. */
static void gpc__why(const char *why)
{
	snprintf(gpc__name, sizeof gpc__name, "CUDA (%s)", why);
}

/* Undo a (partial) start; the context is current, or ctx is NULL. */
static void gpc__teardown(void)
{
	gpc_panels_stop();
	gpc_solve_stop();
	gpc_xfer_stop();
	gpc_small_stop();
	gpc_ws_forget();
	gpc_pool_release_all();
	if (gpc_st.params)
		(void)gpc_bl.DnDestroyParams(gpc_st.params);
	if (gpc_st.solver)
		(void)gpc_bl.DnDestroy(gpc_st.solver);
	if (gpc_st.blas)
		(void)gpc_bl.Destroy(gpc_st.blas);
	if (gpc_st.stream)
		(void)gpc_cu.StreamDestroy(gpc_st.stream);
	if (gpc_st.ctx) {
		gpc__pop();
		(void)gpc_cu.PrimaryCtxRelease(gpc_st.dev);
	}
	memset(&gpc_st, 0, sizeof gpc_st);
}

/* One step of start(): its function's name and the driver's error. */
static int gpc__step(int r, const char *what)
{
	char num[16];

	if (r == 0)
		return 0;
	snprintf(num, sizeof num, " (%d)", r);
	snprintf(gpc__name, sizeof gpc__name, "CUDA (%s failed: %s%s)", what,
		 gpc_cu_err(r), num);
	return -1;
}

static int gpc__start(void)
{
	static char buf[256];
	const char *why = NULL;
	gpc_stream stream = NULL;
	gpc_cublas blas = NULL;
	gpc_cusolver solver = NULL;
	gpc_csparams params = NULL;
	int n = 0;

	if (gpc__started)
		return 0;
	if (gpc_cu_load(&why, buf, sizeof buf) != 0) {
		gpc__why(why);
		return -1;
	}
	/* The libraries before cuInit: without them the driver is not
	 * started for nothing. */
	if (gpc_bl_load(&why, buf, sizeof buf) != 0) {
		gpc__why(why);
		return -1;
	}
	if (gpc__step(gpc_cu.Init(0), "cuInit") ||
	    gpc__step(gpc_cu.DeviceGetCount(&n), "cuDeviceGetCount"))
		return -1;
	if (n < 1) {
		gpc__why("no visible device");
		return -1;
	}
	memset(&gpc_st, 0, sizeof gpc_st);
	if (gpc__step(gpc_cu.DeviceGet(&gpc_st.dev, 0), "cuDeviceGet") ||
	    gpc__step(gpc_cu.PrimaryCtxRetain(&gpc_st.ctx, gpc_st.dev),
		      "cuDevicePrimaryCtxRetain")) {
		memset(&gpc_st, 0, sizeof gpc_st);
		return -1;
	}
	if (gpc__step(gpc_cu.CtxPushCurrent(gpc_st.ctx), "cuCtxPushCurrent")) {
		(void)gpc_cu.PrimaryCtxRelease(gpc_st.dev);
		memset(&gpc_st, 0, sizeof gpc_st);
		return -1;
	}
	/* Each handle is stored only once made, so that teardown never
	 * destroys what a failed create left in its output. */
	if (gpc__step(gpc_cu.StreamCreate(&stream, GPC_STREAM_NON_BLOCKING),
		      "cuStreamCreate"))
		goto fail;
	gpc_st.stream = stream;
	if (gpc_small_start() != 0) {
		gpc__why("cannot allocate the small-call arena (1 MiB of device and pinned memory)");
		goto fail;
	}
	if (gpc__step(gpc_bl.Create(&blas), "cublasCreate"))
		goto fail;
	gpc_st.blas = blas;
	if (gpc__step(gpc_bl.SetStream(gpc_st.blas, gpc_st.stream),
		      "cublasSetStream") ||
	    gpc__step(gpc_bl.SetPointerMode(gpc_st.blas, GPC_POINTER_HOST),
		      "cublasSetPointerMode") ||
	    gpc__step(gpc_bl.DnCreate(&solver), "cusolverDnCreate"))
		goto fail;
	gpc_st.solver = solver;
	if (gpc__step(gpc_bl.DnSetStream(gpc_st.solver, gpc_st.stream),
		      "cusolverDnSetStream") ||
	    gpc__step(gpc_bl.DnCreateParams(&params), "cusolverDnCreateParams"))
		goto fail;
	gpc_st.params = params;
	if (gpc_xfer_start() != 0) {
		gpc__why("the copy engine did not start");
		goto fail;
	}
	if (gpc_pool_start() != 0) {
		gpc__why("no thread for the memory pool");
		goto fail;
	}
	(void)gpc_panels_start();       /* without its events: no pipeline */
	(void)gpc_solve_start();        /* the same */
	gpc__pop();
	gpc__started = 1;
	snprintf(gpc__name, sizeof gpc__name, "CUDA");
	return 0;
fail:
	gpc__teardown();        /* pops */
	return -1;
}

static int gpc_start(void)
{
	int e = errno, rc = gpc__start();

	errno = e;
	return rc;
}

static void gpc_stop(void)
{
	int e = errno;

	if (gpc__started && gpc__push() == 0) {
		(void)gpc_cu.StreamSynchronize(gpc_st.stream);
		gpc__teardown();
	}
	gpc__started = 0;
	errno = e;
}

static int gpc_memory(uint64_t *free_bytes, uint64_t *total_bytes)
{
	int e = errno, rc = -1;
	size_t f = 0, t = 0;

	if (gpc__started && gpc__push() == 0) {
		if (gpc_cu.MemGetInfo(&f, &t) == 0) {
			*free_bytes = (uint64_t)f + gpc_pool_cached();
			*total_bytes = t;
			rc = 0;
		}
		gpc__pop();
	}
	errno = e;
	return rc;
}

static int gpc_alloc(void **dev, uint64_t bytes)
{
	int e = errno, rc = -1;
	gpc_dptr p = 0;

	if (gpc__started && gpc_small_alloc(&p, bytes)) {
		rc = 0;
	} else if (gpc__started && gpc__push() == 0) {
		rc = gpc_pool_alloc(&p, bytes);
		gpc__pop();
	}
	*dev = rc == 0 ? (void *)(uintptr_t)p : NULL;
	errno = e;
	return rc;
}

static void gpc_release(void *dev)
{
	int e = errno;

	if (gpc__started && gpc_small_owns((gpc_dptr)(uintptr_t)dev, 0) > 0) {
		gpc_small_release((gpc_dptr)(uintptr_t)dev);
	} else if (gpc__started && dev && gpc__push() == 0) {
		gpc_pool_free((gpc_dptr)(uintptr_t)dev);
		gpc__pop();
	}
	errno = e;
}

static int gpc_to_device(void *dev, uint64_t dpitch, const void *host,
			 uint64_t spitch, uint64_t width, uint64_t rows)
{
	int e = errno, rc = -1;
	uint64_t span = rows ? (rows - 1) * dpitch + width : 0;

	int own = gpc__started ? gpc_small_owns((gpc_dptr)(uintptr_t)dev, span) : 0;

	if (own < 0) {
		rc = -1;
	} else if (own) {
		gpc_small_h2d((gpc_dptr)(uintptr_t)dev, dpitch, host, spitch,
			      width, rows);
		rc = 0;
	} else if (gpc__started && gpc__push() == 0) {
		rc = gpc_h2d((gpc_dptr)(uintptr_t)dev, dpitch, host, spitch,
			     width, rows);
		gpc__pop();
	}
	errno = e;
	return rc;
}

static int gpc_to_host(void *host, uint64_t dpitch, const void *dev,
		       uint64_t spitch, uint64_t width, uint64_t rows,
		       unsigned flags)
{
	int e = errno, rc = -1;
	uint64_t span = rows ? (rows - 1) * spitch + width : 0;

	int own = gpc__started ? gpc_small_owns((gpc_dptr)(uintptr_t)dev, span) : 0;

	if (own < 0) {
		rc = -1;
	} else if (own) {
		rc = gpc_small_d2h(host, dpitch, (gpc_dptr)(uintptr_t)dev,
				   spitch, width, rows, flags);
	} else if (gpc__started && gpc__push() == 0) {
		rc = gpc_d2h(host, dpitch, (gpc_dptr)(uintptr_t)dev, spitch,
			     width, rows, flags);
		gpc__pop();
	}
	errno = e;
	return rc;
}

static void gpc_commit_all(void)
{
	int e = errno;

	/* commit cannot fail (backend.h): it writes host memory from host
	 * staging, so it runs even if the context cannot be pushed (which a
	 * copy engine with pinned staging would like current). */
	int pushed = gpc__started && gpc__push() == 0;

	gpc_small_commit();
	gpc_commit();
	if (pushed)
		gpc__pop();
	errno = e;
}

static void gpc_discard_all(void)
{
	int e = errno;

	int pushed = gpc__started && gpc__push() == 0;

	gpc_small_discard();
	gpc_discard();
	if (pushed)
		gpc__pop();
	errno = e;
}

/* No driver call: the copy engine's workers madvise the host range. */
static void gpc_prefault_out(void *host, uint64_t pitch, uint64_t width,
			     uint64_t rows)
{
	int e = errno;

	if (gpc__started)
		gpc_prefault(host, pitch, width, rows);
	errno = e;
}

/* The whole call from host operands, for what xgemm.c (gemm) and
 * xsolve.c (gesv, posv) pipeline. */
static int gpc_run_host(struct gpo_kernel *k, struct gpo_hostcall *h)
{
	int e = errno, rc = GPO_BE_UNSUPPORTED;
	int (*host)(struct gpo_kernel *, struct gpo_hostcall *);

	/* What the pipelines do not take costs nothing (no context push:
	 * the small-call path's counts). */
	if (k->size < sizeof *k || h->size < sizeof *h || !gpc__started)
		return GPO_BE_UNSUPPORTED;
	if (gpc_gemm_takes(k, h))
		host = gpc_gemm_host;
	else if (gpc_solve_takes(k, h))
		host = gpc_solve_host;
	else
		return GPO_BE_UNSUPPORTED;
	if (gpc__push() == 0) {
		k->info = 0;
		rc = host(k, h);
		gpc__pop();
	}
	errno = e;
	return rc;
}

static int gpc_run(struct gpo_kernel *k)
{
	int e = errno, rc = -1;

	if (k->size < sizeof *k)
		return -1;
	if (gpc__started && gpc__push() == 0) {
		int info = 0;
		k->info = 0;
		rc = gpc_small_begin(gpc_st.stream);
		if (rc == 0)
			rc = k->op >= GPO_OP_GETRF ? gpc_run_lapack(k) :
			     gpc_run_blas(k);
		/* One wait for everything the run queued: the arena's
		 * operands back into the image, and the info slots. */
		if (gpc_small_end(gpc_st.stream, rc != 0, &info) != 0 && rc == 0)
			rc = -1;
		/* An info the run found itself (gels's zero diagonal of R)
		 * stands; else cuSOLVER's first nonzero one. */
		if (rc == 0 && !k->info)
			k->info = info;
		gpc__pop();
	}
	errno = e;
	return rc;
}

/* ---- Helpers of both halves ---------------------------------------------- */

int gpc_sync(void)
{
	return gpc_cu.StreamSynchronize(gpc_st.stream) == 0 ? 0 : -1;
}

int gpc_events_create(gpc_event ev[2])
{
	for (int i = 0; i < 2; i++)
		if (gpc_cu.EventCreate(&ev[i], GPC_EVENT_DISABLE_TIMING) != 0) {
			ev[i] = NULL;
			gpc_events_destroy(ev);
			return -1;
		}
	return 0;
}

int gpc_host_settle(int rc, int *failed)
{
	if (rc == GPO_BE_UNSUPPORTED) {
		rc = -1;
		*failed = GPO_BE_STEP_KERNEL;
	}
	if (gpc_sync() != 0 && rc == 0) {
		rc = -1;
		*failed = GPO_BE_STEP_KERNEL;
	}
	return rc;
}

void gpc_events_destroy(gpc_event ev[2])
{
	for (int i = 0; i < 2; i++) {
		if (ev[i])
			(void)gpc_cu.EventDestroy(ev[i]);
		ev[i] = NULL;
	}
}

size_t gpc_esize(char prec, int real_only)
{
	size_t s = (prec == 's' || prec == 'c') ? 4 : 8;

	return (!real_only && (prec == 'c' || prec == 'z')) ? 2 * s : s;
}

int gpc_dtype(char prec, int real_only)
{
	switch (prec) {
	case 's': return GPC_R_32F;
	case 'd': return GPC_R_64F;
	case 'c': return real_only ? GPC_R_32F : GPC_C_32F;
	default: return real_only ? GPC_R_64F : GPC_C_64F;
	}
}

char gpc_P(char prec)
{
	return (char)(prec - 'a' + 'A');
}

int gpc_op(char c, char prec)
{
	if (c == 'N')
		return GPC_OP_N;
	if (c == 'T' || prec == 's' || prec == 'd')
		return GPC_OP_T;
	return GPC_OP_C;
}

gpc_dptr gpc_scratch(uint64_t bytes)
{
	gpc_dptr p = 0;

	return gpc_pool_alloc(&p, bytes ? bytes : 1) == 0 ? p : 0;
}

static struct gpo_backend gpc_api = {
	.abi = GPO_BACKEND_ABI,
	.size = sizeof(struct gpo_backend),
	.name = gpc__name,
	.start = gpc_start,
	.stop = gpc_stop,
	.memory = gpc_memory,
	.alloc = gpc_alloc,
	.release = gpc_release,
	.to_device = gpc_to_device,
	.to_host = gpc_to_host,
	.commit = gpc_commit_all,
	.discard = gpc_discard_all,
	.run = gpc_run,
	.prefault = gpc_prefault_out,
	.run_host = gpc_run_host,
};

__attribute__((visibility("default")))
const struct gpo_backend *gpo_backend_entry(uint32_t abi);
const struct gpo_backend *gpo_backend_entry(uint32_t abi)
{
	return abi == GPO_BACKEND_ABI ? &gpc_api : NULL;
}
