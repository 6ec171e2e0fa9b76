/*
 * gpu.c - the backend boundary: loading the GPU backend (dlopen at the
 * first offload, the ABI check, decline on anything missing or
 * mismatched), starting and stopping it for the policy, fork, and one call
 * on the GPU with copy-out only after the device work succeeded.
 *
 * The backend is GPU_OFFLOAD_BACKEND (a path) if set, else
 * libgpuoffload-cuda.so next to this library. A backend that cannot be
 * loaded, lacks the entry point, implements another ABI version, or fails
 * to start is declined once for the life of the process: one line on
 * stderr, and every call stays on the CPU.
 *
 * Serialisation: one GPU call at a time per process (gpo__lock), held over
 * the whole call; start/stop/memory take it too, so that the policy never
 * stops the backend under a running call.
 *
 * fork: a CUDA context does not survive fork(). Once the backend started,
 * a fork handler marks the child, which never touches the backend again
 * (not even to stop it) and stays on the CPU. The handlers are registered
 * by the policy (gpo_gpu_atfork, policy.h), just before its own, so that
 * a fork takes the policy's lock before this one, as every call does.
 *
 * The copy flow of one call, and its invariant: the caller's memory is
 * unchanged unless every device step succeeded, except pure outputs
 * (operands the operation writes without reading), which the CPU rerun
 * then overwrites whole. Inputs go in with to_device; after the kernel,
 * every operand that is both input and output is read back with
 * GPO_BE_STAGE (into the backend's staging, the caller's memory
 * untouched), then every pure output straight into the caller's memory
 * (the rows of each column, at the caller's leading dimension: the
 * padding between rows and ld is never written); only when all of that
 * succeeded does commit() write the staged operands. On any failure,
 * discard() drops what was staged and the call reruns on the CPU. No
 * host memory is allocated per call. Verify mode (stage_only) instead
 * reads every output into private packed buffers (x->stage, malloc'd:
 * verify compares them with the CPU's results after the CPU ran on the
 * untouched caller's memory). Before the copies in, each pure output is
 * handed to the backend's optional prefault() (backend.h), which may
 * fault its pages in while the device works, without writing them.
 *
 * A backend with run_host (backend.h) is first offered the whole call
 * (not in verify mode): it may pipeline the copies with the kernels
 * (the CUDA backend's large gemm, in column panels; its large gesv and
 * posv, B in beside the factorisation, the factor out beside the
 * solve) under the same
 * invariant, pure outputs straight into the caller's memory, the other
 * outputs staged until commit(); it answers GPO_BE_UNSUPPORTED for what
 * it does not pipeline, and the flow above runs.
 *
 * Residency (resid.h, docs/offload-residency.md): in the flow above, an
 * input whose kept device copy is still equal to the host's is not
 * allocated nor copied (gpo_res_take); one seen before is armed just
 * before its copy in; after a call that succeeded, gpo_res_end keeps the
 * buffers worth keeping instead of releasing them. A call with an
 * operand kept or seen before runs this flow rather than run_host. The
 * kept copies are released before the backend stops.
 */
#define _GNU_SOURCE
#include "compat.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "pcopy/pcopy.h"
#include "resid.h"

static pthread_mutex_t gpo__lock = PTHREAD_MUTEX_INITIALIZER;
static const struct gpo_backend *gpo__be;
static int gpo__started;
static int gpo__declined;       /* a GPO_R_* reason, latched */
static int gpo__forked;
static int gpo__atfork;

static void gpo__prepare(void)
{
	pthread_mutex_lock(&gpo__lock);
}

static void gpo__parent(void)
{
	pthread_mutex_unlock(&gpo__lock);
}

static void gpo__child(void)
{
	pthread_mutex_init(&gpo__lock, NULL);
	if (gpo__started)
		gpo__forked = 1;
	gpo__started = 0;
}

void gpo_gpu_atfork(void)
{
	if (!gpo__atfork) {
		gpo__atfork = 1;
		pthread_atfork(gpo__prepare, gpo__parent, gpo__child);
	}
}

static int gpo__decline(int reason)
{
	gpo__declined = reason;
	return reason;
}

/* Load and check the backend; caller holds gpo__lock. */
static int gpo__load(void)
{
	const char *path = secure_getenv("GPU_OFFLOAD_BACKEND");
	static char buf[4096];
	gpo_backend_entry_fn entry;
	const struct gpo_backend *be;
	void *h;

	if (!path || !*path) {
		Dl_info info;
		const char *slash;
		if (!dladdr((void *)gpo_gpu_start, &info) || !info.dli_fname ||
		    !(slash = strrchr(info.dli_fname, '/')) ||
		    (size_t)(slash - info.dli_fname) + 32 > sizeof buf) {
			snprintf(buf, sizeof buf, "libgpuoffload-cuda.so");
		} else {
			snprintf(buf, sizeof buf, "%.*s/libgpuoffload-cuda.so",
				 (int)(slash - info.dli_fname), info.dli_fname);
		}
		path = buf;
	}
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *why = dlerror();
		gpo_msg_once(GPO_MSG_BACKEND, "no GPU backend (%s); every "
			     "call runs on the CPU", why ? why : path);
		return gpo__decline(GPO_R_NO_BACKEND);
	}
	entry = (gpo_backend_entry_fn)dlsym(h, GPO_BACKEND_ENTRY);
	if (!entry) {
		(void)dlerror();
		gpo_msg_once(GPO_MSG_BACKEND, "%s is not a GPU backend (no %s); "
			     "every call runs on the CPU", path,
			     GPO_BACKEND_ENTRY);
		dlclose(h);
		return gpo__decline(GPO_R_NO_BACKEND);
	}
	be = entry(GPO_BACKEND_ABI);
	if (!be || be->abi != GPO_BACKEND_ABI ||
	    be->size < GPO_BACKEND_SIZE_BASE || !be->start ||
	    !be->stop || !be->memory || !be->alloc || !be->release ||
	    !be->to_device || !be->to_host || !be->run ||
	    !be->commit || !be->discard) {
		gpo_msg_once(GPO_MSG_BACKEND, "the GPU backend %s does not "
			     "implement ABI version %u (it has %u); every call "
			     "runs on the CPU", path, GPO_BACKEND_ABI,
			     be ? be->abi : 0);
		dlclose(h);
		return gpo__decline(GPO_R_NO_BACKEND);
	}
	gpo__be = be;   /* kept loaded for the life of the process */
	return 0;
}

/* The backend's own code (its constructors, start, stop, memory) runs
 * while the policy holds its lock: quiet, see gpo_quiet. */
static int gpo__load_quiet(void)
{
	int rc;

	gpo_quiet(1);
	rc = gpo__load();
	gpo_quiet(0);
	return rc;
}

static int gpo__be_start(void)
{
	int rc;

	gpo_quiet(1);
	rc = gpo__be->start();
	gpo_quiet(0);
	return rc;
}

int gpo_gpu_start(void)
{
	int e = errno, rc = 0;

	pthread_mutex_lock(&gpo__lock);
	if (gpo__forked) {
		gpo_msg_once(GPO_MSG_FORK, "this process is a child of one "
			     "that started the GPU; it stays on the CPU");
		rc = GPO_R_FORKED;
	} else if (gpo__started) {
		rc = 0;
	} else if (gpo__declined) {
		rc = gpo__declined;
	} else if (!gpo__be && (rc = gpo__load_quiet()) != 0) {
		/* declined, said */
	} else if (gpo__be_start() != 0) {
		const char *name = gpo__be->name ? gpo__be->name : "?";
		gpo_msg_once(GPO_MSG_BACKEND, "the GPU backend %s did not "
			     "start; every call runs on the CPU", name);
		/* The CUDA backend names a missing libcuda.so.1 so
		 * (src/offload/cuda/cuapi.c): the summary's reason says it,
		 * the commonest cause on a machine without a GPU. */
		rc = gpo__decline(strstr(name, "no CUDA driver") ?
				  GPO_R_NO_DRIVER : GPO_R_NO_BACKEND);
	} else {
		gpo__started = 1;
		gpo_pcopy_gpu(1);       /* the copy engine may use more threads */
	}
	pthread_mutex_unlock(&gpo__lock);
	errno = e;
	return rc;
}

void gpo_gpu_stop(void)
{
	int e = errno;

	pthread_mutex_lock(&gpo__lock);
	if (gpo__started && !gpo__forked) {
		gpo_quiet(1);
		/* The kept copies go with the lease (resid.h). */
		gpo_res_drop_all(gpo__be);
		gpo__be->stop();
		gpo_quiet(0);
	}
	gpo__started = 0;
	gpo_pcopy_gpu(0);
	pthread_mutex_unlock(&gpo__lock);
	errno = e;
}

int gpo_gpu_memory(uint64_t *free_bytes, uint64_t *total_bytes)
{
	int e = errno, rc = -1;

	pthread_mutex_lock(&gpo__lock);
	gpo_quiet(1);
	if (gpo__started && gpo__be->memory(free_bytes, total_bytes) == 0)
		rc = 0;
	gpo_quiet(0);
	pthread_mutex_unlock(&gpo__lock);
	errno = e;
	return rc;
}

int gpo_gpu_resident(struct gpo_ctx *x, int level2, double *bytes)
{
	struct gpo_res_call rxs;
	int e = errno, known = 0;

	*bytes = 0;
	/* Never waits for another thread's GPU call (the lock is held over
	 * a whole call): busy, the call is decided as if nothing were
	 * resident (a level-2 call then stays on the CPU). */
	if (pthread_mutex_trylock(&gpo__lock) != 0)
		return 0;
	if (!gpo__forked)
		known = gpo_res_decide(gpo__be, x, level2, &rxs, bytes);
	pthread_mutex_unlock(&gpo__lock);
	errno = e;
	return known;
}

/* ---- One call ---------------------------------------------------------------- */

void gpo_stage_free(struct gpo_ctx *x)
{
	for (int i = 0; i < GPO_MAX_BUFS; i++) {
		free(x->stage[i]);
		x->stage[i] = NULL;
	}
}

static void gpo__failed(struct gpo_fn *fn, int what)
{
	static const char *const step[] = {
		"allocating device memory", "copying to the device",
		"computing", "copying from the device" };

	gpo_msg_once(GPO_MSG_FAILKIND + what, "the GPU backend failed %s "
		     "(first in %s); such calls ran on the CPU", step[what],
		     fn->name);
}

/* Caller holds gpo__lock. Verify mode (stage_only): the results into
 * x->stage, packed; else staged operands into the backend's staging and
 * pure outputs into the caller's memory (see the header). */
static int gpo__copy_out(struct gpo_fn *fn, struct gpo_ctx *x, void **dev,
			 int stage_only)
{
	const struct gpo_backend *be = gpo__be;

	/* Pass 0: operands that are also inputs (staged, or verify's
	 * buffers); pass 1: pure outputs. Staged ones first, so that a
	 * failure there leaves even the pure outputs alone. */
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < x->s.nbuf; i++) {
			uint64_t es = gpo_elem_size(x, i);
			uint64_t w = (uint64_t)x->s.b[i].rows * es;
			uint64_t ld = (uint64_t)x->a.ld[i] * es;
			uint64_t cols = (uint64_t)x->s.b[i].cols;
			if (!dev[i] || !x->s.b[i].out || (x->s.b[i].in ? 1 : 0) == pass)
				continue;
			if (stage_only) {
				x->stage[i] = malloc(w * cols);
				if (!x->stage[i]) {
					gpo__failed(fn, 0);
					return GPO_R_FAIL_ALLOC;
				}
				if (be->to_host(x->stage[i], w, dev[i], ld, w, cols,
						0) != 0)
					goto fail;
				continue;
			}
			if (be->to_host(x->a.buf[i], ld, dev[i], ld, w, cols,
					pass ? 0 : GPO_BE_STAGE) != 0)
				goto fail;
		}
	return 0;
fail:
	gpo__failed(fn, 3);
	return GPO_R_FAIL_COPY;
}

/* The kernel of the call, without device buffers. */
static void gpo__kernel(const struct gpo_fn *fn, const struct gpo_ctx *x,
			struct gpo_kernel *k)
{
	memset(k, 0, sizeof *k);
	k->size = sizeof *k;
	k->op = fn->op;
	k->prec = fn->prec;
	k->int64 = fn->int64;
	memcpy(k->opt, x->a.opt, sizeof k->opt);
	k->m = x->a.m;
	k->n = x->a.n;
	k->k = x->a.k;
	k->nrhs = x->a.nrhs;
	memcpy(k->alpha, x->a.alpha, sizeof k->alpha);
	memcpy(k->beta, x->a.beta, sizeof k->beta);
	for (int i = 0; i < x->s.nbuf; i++)
		k->ld[i] = x->a.ld[i];
}

/* The whole call by the backend's run_host (backend.h), which pipelines
 * what it can; GPO_R_UNSUPPORTED when it does not take the call (nothing
 * was done: the caller runs its own flow). Caller holds gpo__lock; not in
 * verify mode. On success the staged operands are committed here. */
static int gpo__host_work(struct gpo_fn *fn, struct gpo_ctx *x)
{
	static const int reason[] = { GPO_R_FAIL_ALLOC, GPO_R_FAIL_COPY,
				      GPO_R_FAIL_KERNEL, GPO_R_FAIL_COPY };
	const struct gpo_backend *be = gpo__be;
	struct gpo_hostcall h;
	struct gpo_kernel k;
	double t;
	int r;

	gpo__kernel(fn, x, &k);
	memset(&h, 0, sizeof h);
	h.size = sizeof h;
	for (int i = 0; i < x->s.nbuf && i < 4; i++) {
		if (!x->s.b[i].rows || !x->s.b[i].cols)
			continue;
		h.op[i].host = x->a.buf[i];
		h.op[i].ld = x->a.ld[i];
		h.op[i].rows = x->s.b[i].rows;
		h.op[i].cols = x->s.b[i].cols;
		h.op[i].esize = (uint32_t)gpo_elem_size(x, i);
		h.op[i].in = x->s.b[i].in ? 1 : 0;
		h.op[i].out = x->s.b[i].out ? 1 : 0;
	}
	r = be->run_host(&k, &h);
	if (r == GPO_BE_UNSUPPORTED)
		return GPO_R_UNSUPPORTED;
	x->copy_in = h.copy_in_s;
	x->copy_out = h.copy_out_s;
	if (r != 0) {
		int step = h.failed >= 0 && h.failed <= 3 ? h.failed :
			   GPO_BE_STEP_KERNEL;
		gpo__failed(fn, step);
		return reason[step];
	}
	x->gpu_info = k.info;
	if (k.info != 0)
		return -1;
	/* Every device step succeeded: the operands that are also inputs
	 * reach the caller's memory now, as in the frontend's own flow
	 * (whose copy-out time includes the commit too). */
	t = gpo_now();
	be->commit();
	x->copy_out += gpo_now() - t;
	return 0;
}

/* LAPACK's ?gesdd (3.10 on) answers a NaN in A with info = -4, which
 * callers turn into an error (SciPy: "... NaN"); cuSOLVER computes NaN
 * singular values instead. So a NaN among the singular values (in the
 * caller's memory: a pure output, already copied) sends the call to the
 * CPU, which answers as its LAPACK does; ?gesvd the same way. */
static int gpo__nan_sv(const struct gpo_fn *fn, const struct gpo_ctx *x)
{
	int64_t q;

	if ((fn->op != GPO_OP_GESVD && fn->op != GPO_OP_GESDD) ||
	    x->s.nbuf < 2 || x->s.b[1].kind != 'R' || !x->a.buf[1])
		return 0;
	q = x->s.b[1].rows;
	for (int64_t i = 0; i < q; i++) {
		double v = (fn->prec == 's' || fn->prec == 'c') ?
			   (double)((const float *)x->a.buf[1])[i] :
			   ((const double *)x->a.buf[1])[i];
		if (v != v)
			return 1;
	}
	return 0;
}

/* The device bytes of operand i: ld * (cols - 1) + rows elements. */
static uint64_t gpo__bytes(const struct gpo_ctx *x, int i)
{
	return ((uint64_t)x->a.ld[i] * (uint64_t)(x->s.b[i].cols - 1) +
		(uint64_t)x->s.b[i].rows) * gpo_elem_size(x, i);
}


/* Caller holds gpo__lock. Device buffers in dev[]; rx: residency in
 * force (NULL: none). */
static int gpo__device_work(struct gpo_fn *fn, struct gpo_ctx *x, void **dev,
			    int stage_only, struct gpo_res_call *rx)
{
	const struct gpo_backend *be = gpo__be;
	struct gpo_kernel k;
	double t;
	int r;

	for (int i = 0; i < x->s.nbuf; i++) {
		int64_t rows = x->s.b[i].rows, cols = x->s.b[i].cols;
		if (!rows || !cols)
			continue;
		/* A kept copy of an input, still equal to the host's. */
		if (rx && x->s.b[i].in &&
		    (dev[i] = gpo_res_take(be, &rx->key[i])) != NULL) {
			rx->hit[i] = 1;
			x->c.buf[i].resident = 1;
			continue;
		}
		if (rx)
			rx->want[i] = gpo_res_wanted(be, &rx->key[i],
						     x->s.b[i].in);
		if (be->alloc(&dev[i], rx ? rx->bytes[i] : gpo__bytes(x, i)) != 0 &&
		    !(rx && gpo_res_evict(be, rx->bytes[i]) &&
		      be->alloc(&dev[i], rx->bytes[i]) == 0)) {
			dev[i] = NULL;
			gpo__failed(fn, 0);
			return GPO_R_FAIL_ALLOC;
		}
	}
	t = gpo_now();
	/* Pure outputs the copy out writes straight into the caller's
	 * memory: the backend may fault them in while the copies in and the
	 * kernel run (fresh memory's first touch then leaves the copy out).
	 * Every later exit of this call passes through to_host or discard,
	 * which finish with it (backend.h). */
	if (!stage_only && GPO_BE_HAS(be, prefault))
		for (int i = 0; i < x->s.nbuf; i++) {
			uint64_t es = gpo_elem_size(x, i);
			if (dev[i] && x->s.b[i].out && !x->s.b[i].in)
				be->prefault(x->a.buf[i], (uint64_t)x->a.ld[i] * es,
					     (uint64_t)x->s.b[i].rows * es,
					     (uint64_t)x->s.b[i].cols);
		}
	for (int i = 0; i < x->s.nbuf; i++) {
		uint64_t es = gpo_elem_size(x, i), pitch = (uint64_t)x->a.ld[i] * es;
		if (!dev[i] || !x->s.b[i].in || (rx && rx->hit[i]))
			continue;
		/* Armed before the copy: a write racing it is seen next time. */
		if (rx && rx->want[i])
			rx->armed[i] = gpo_res_arm(be, &rx->key[i]) == 0;
		if (be->to_device(dev[i], pitch, x->a.buf[i], pitch,
				  (uint64_t)x->s.b[i].rows * es,
				  (uint64_t)x->s.b[i].cols) != 0) {
			gpo__failed(fn, 1);
			return GPO_R_FAIL_COPY;
		}
	}
	x->copy_in = gpo_now() - t;
	gpo__kernel(fn, x, &k);
	for (int i = 0; i < x->s.nbuf; i++)
		k.buf[i] = dev[i];
	r = be->run(&k);
	if (r == GPO_BE_UNSUPPORTED)
		return GPO_R_UNSUPPORTED;
	if (r != 0) {
		gpo__failed(fn, 2);
		return GPO_R_FAIL_KERNEL;
	}
	x->gpu_info = k.info;
	if (k.info != 0 && !stage_only)
		return -1;
	t = gpo_now();
	r = gpo__copy_out(fn, x, dev, stage_only);
	if (r != 0)
		return r;
	if (!stage_only && gpo__nan_sv(fn, x))
		return -1;      /* as a nonzero info: the CPU answers */
	/* Every device step succeeded: now, and only now, the operands
	 * that are also inputs reach the caller's memory. */
	if (!stage_only)
		be->commit();
	x->copy_out = gpo_now() - t;
	return 0;
}

int gpo_gpu_call(struct gpo_fn *fn, struct gpo_ctx *x, int stage_only)
{
	struct gpo_res_call rxs, *rx;
	void *dev[GPO_MAX_BUFS] = { 0 };
	double t0 = gpo_now();
	int rc;

	memset(x->stage, 0, sizeof x->stage);
	pthread_mutex_lock(&gpo__lock);
	if (!gpo__started || gpo__forked) {
		pthread_mutex_unlock(&gpo__lock);
		return GPO_R_NO_BACKEND;
	}
	rc = GPO_R_UNSUPPORTED;
	rx = gpo_res_begin(x, &rxs);
	if (!stage_only && x->s.nbuf <= 4 && GPO_BE_HAS(gpo__be, run_host) &&
	    !gpo_res_call_known(x, rx)) {
		rc = gpo__host_work(fn, x);
		if (rc != GPO_R_UNSUPPORTED && rx)
			gpo_res_call_seen(gpo__be, x, rx);
	}
	if (rc == GPO_R_UNSUPPORTED)
		rc = gpo__device_work(fn, x, dev, stage_only, rx);
	if (rc != 0)
		gpo__be->discard();     /* the caller's in-out operands stay */
	if (rx && !stage_only)
		gpo_res_call_wrote(gpo__be, x, rx);
	if (rc == 0 && rx)
		gpo_res_end(gpo__be, x, rx, dev, stage_only);
	for (int i = 0; i < GPO_MAX_BUFS; i++)
		if (dev[i])
			gpo__be->release(dev[i]);
	pthread_mutex_unlock(&gpo__lock);
	if (rc != 0) {
		gpo_stage_free(x);
		return rc;
	}
	if (!stage_only && x->a.info) {
		if (fn->int64)
			*(int64_t *)x->a.info = 0;
		else
			*(int *)x->a.info = 0;
	}
	x->t0 = gpo_now() - t0;
	return 0;
}
