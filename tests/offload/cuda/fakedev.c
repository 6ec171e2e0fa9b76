/*
 * fakedev.c - a fake libcuda.so.1 for the copy engine's tests
 * (tests/offload/cuda/xfertest.c): just what src/offload/cuda/cuapi.c
 * resolves, with "device memory" in host memory.
 *
 * Stricter than the driver where that finds bugs: asynchronous copies are
 * queued on their stream and performed only when the program waits
 * (cuStreamSynchronize, or cuEventSynchronize up to that event), so a
 * pinned chunk reused before its event completed carries the wrong bytes;
 * every device range a copy touches must lie inside one allocation, and
 * so must every range of memory from cuMemHostAlloc (else the copy fails
 * and "bad" counts it).
 *
 * Control (exported for the test, found with dlsym):
 *   fakedev_ctl("fail_copy", N)     the N-th copy call from now fails
 *   fakedev_ctl("fail_exec", N)     the N-th copy performed from now does
 *                                   nothing, and the wait that performed
 *                                   it returns an error
 *   fakedev_ctl("fail_hostalloc", 1) cuMemHostAlloc fails (0: works)
 *   fakedev_ctl("fail_register", 1)  cuMemHostRegister fails
 *   FAKEDEV_FREE=bytes              cuMemGetInfo's free memory (of 16 GiB)
 *   FAKEDEV_FAIL_EXEC=N             fail_exec N from the start
 *   FAKEDEV_FAIL_COPY=N             fail_copy N from the start
 *   FAKEDEV_FAIL_ALLOC=N            the N-th cuMemAlloc and every later
 *                                   one fail (the pool retries once)
 *   fakedev_defer(stream, name, fn, arg)  a stand-in kernel, run in
 *                                   stream order at the wait (fakesolver.c's
 *                                   gemm and solvers); fn's nonzero return
 *                                   fails the wait that ran it
 *   fakedev_get(name)               "copies" performed, "bad", "device"
 *                                   / "pinned" / "registered" allocations
 *                                   live now, "hostallocs" made so far
 *
 * Counting (tests/offload/cuda/test_small_calls.py): every entry point
 * counts its calls by name; fakedev_count(name) lets the stand-in cuBLAS
 * and cuSOLVER (fakesolver.c) count theirs in the same table, and at exit
 * the table is appended to the file FAKEDEV_COUNTS names, one "name N"
 * line each. fakedev_flush(stream) performs what is queued on a stream
 * without counting as a wait: the stand-in kernels run in stream order
 * that way, computing on "device" memory (host memory here).
 *
 * Journal (tests/offload/cuda/test_solve_pipeline.py): FAKEDEV_JOURNAL=
 * path appends one line per stream operation, in the order the program
 * made them: "copy h2d|d2h|d2d|h2h s<stream> <bytes> pending <k>" (k:
 * stand-in kernels queued on any stream and not run yet: nonzero means
 * the copy was issued while a kernel was still "on the device"; a copy
 * the fake refused ends in " refused"), "kernel <name> s<stream>",
 * "record e<event> s<stream>", "wait e<event>", "sync s<stream>". Streams
 * and events are numbered in the order they were created (the NULL
 * stream is s0).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define E_INVALID 1
#define E_OOM 2
#define E_UNKNOWN 999

struct m2d {
	size_t srcXInBytes, srcY;
	int srcMemoryType;
	const void *srcHost;
	CUdeviceptr srcDevice;
	void *srcArray;
	size_t srcPitch;
	size_t dstXInBytes, dstY;
	int dstMemoryType;
	void *dstHost;
	CUdeviceptr dstDevice;
	void *dstArray;
	size_t dstPitch;
	size_t WidthInBytes, Height;
};

struct op {
	char *dst;
	const char *src;
	size_t dpitch, spitch, width, height;
	int memset_v;           /* -1: a copy; -2: a deferred kernel */
	int (*fn)(void *);      /* the kernel (fakedev_defer), given arg */
	void *arg;
};

struct stream {
	struct op *q;
	size_t n, cap, head;    /* queued ops [head, n) */
	size_t base;            /* ops performed before q[0] */
	int err;
	int dropping;           /* a kernel failed: until the queue drains */
	int id;                 /* creation order, for the journal */
};

struct event {
	struct stream *s;
	size_t upto;            /* ops before this one (counted from the
	                         * stream's first) precede the event */
	int id;
};

#define MAXA 256
static struct alloc {
	char *p;
	size_t n;
	int kind;               /* 1 device, 2 pinned, 3 registered */
} fd_a[MAXA];

static long fd_fail_copy, fd_fail_exec, fd_fail_hostalloc, fd_fail_register;
static long fd_fail_alloc, fd_allocs;
static long fd_copies, fd_bad, fd_hostallocs;
static struct stream fd_null;
static int fd_streams, fd_events;       /* ids handed out */
static long fd_pending;                 /* deferred kernels not run yet */

/* fakelog.c: the call counts and the journal (the header's); API. */
#include "fakelog.h"

#define CNT() fakedev_count(__func__)

__attribute__((constructor)) static void fd_init(void)
{
	const char *v = getenv("FAKEDEV_FAIL_EXEC");

	if (v && *v)
		fd_fail_exec = strtol(v, NULL, 10);
	v = getenv("FAKEDEV_FAIL_COPY");
	if (v && *v)
		fd_fail_copy = strtol(v, NULL, 10);
	v = getenv("FAKEDEV_FAIL_ALLOC");
	if (v && *v)
		fd_fail_alloc = strtol(v, NULL, 10);
}

API void fakedev_ctl(const char *what, long v);
API void fakedev_ctl(const char *what, long v)
{
	if (!strcmp(what, "fail_copy"))
		fd_fail_copy = v;
	else if (!strcmp(what, "fail_exec"))
		fd_fail_exec = v;
	else if (!strcmp(what, "fail_hostalloc"))
		fd_fail_hostalloc = v;
	else if (!strcmp(what, "fail_register"))
		fd_fail_register = v;
}

static long fd_live(int kind)
{
	long n = 0;

	for (int i = 0; i < MAXA; i++)
		n += fd_a[i].p && fd_a[i].kind == kind;
	return n;
}

API long fakedev_get(const char *what);
API long fakedev_get(const char *what)
{
	if (!strcmp(what, "copies"))
		return fd_copies;
	if (!strcmp(what, "bad"))
		return fd_bad;
	if (!strcmp(what, "device"))
		return fd_live(1);
	if (!strcmp(what, "pinned"))
		return fd_live(2);
	if (!strcmp(what, "registered"))
		return fd_live(3);
	if (!strcmp(what, "hostallocs"))
		return fd_hostallocs;
	return -1;
}

static int fd_add(char *p, size_t n, int kind)
{
	for (int i = 0; i < MAXA; i++)
		if (!fd_a[i].p) {
			fd_a[i].p = p;
			fd_a[i].n = n;
			fd_a[i].kind = kind;
			return 0;
		}
	return -1;
}

static struct alloc *fd_find(const void *p, int kind)
{
	for (int i = 0; i < MAXA; i++)
		if (fd_a[i].p == p && fd_a[i].kind == kind)
			return &fd_a[i];
	return NULL;
}

/* 0 if [p, p + span) lies in one allocation, or (host memory) in none
 * made here; -1 otherwise. */
static int fd_check(const char *p, size_t span, int device)
{
	for (int i = 0; i < MAXA; i++) {
		const struct alloc *a = &fd_a[i];
		if (!a->p || (device && a->kind != 1) || (!device && a->kind == 1))
			continue;
		if (p >= a->p && p < a->p + a->n)
			return p + span <= a->p + a->n ? 0 : -1;
	}
	return device ? -1 : 0;
}

API CUresult cuInit(unsigned f) { CNT(); (void)f; return 0; }
API CUresult cuDriverGetVersion(int *v) { CNT(); *v = 13000; return 0; }
API CUresult cuDeviceGetCount(int *n) { CNT(); *n = 1; return 0; }
API CUresult cuDeviceGet(int *d, int o) { CNT(); if (o) return E_INVALID; *d = 0; return 0; }
static int fd_ctx_obj;
API CUresult cuDevicePrimaryCtxRetain(void **c, int d) { CNT(); (void)d; *c = &fd_ctx_obj; return 0; }
API CUresult cuDevicePrimaryCtxRelease_v2(int d) { CNT(); (void)d; return 0; }
API CUresult cuCtxPushCurrent_v2(void *c) { CNT(); (void)c; return 0; }
API CUresult cuCtxPopCurrent_v2(void **c) { CNT(); if (c) *c = &fd_ctx_obj; return 0; }

API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	CNT();
	char *m;

	if (fd_fail_alloc && ++fd_allocs >= fd_fail_alloc)
		return E_OOM;
	m = malloc(n ? n : 1);
	if (!m)
		return E_OOM;
	memset(m, 0xdd, n);
	if (fd_add(m, n, 1)) {
		free(m);
		return E_OOM;
	}
	*p = (CUdeviceptr)(uintptr_t)m;
	return 0;
}

API CUresult cuMemFree_v2(CUdeviceptr p)
{
	CNT();
	struct alloc *a = fd_find((void *)(uintptr_t)p, 1);

	if (!a)
		return E_INVALID;
	free(a->p);
	a->p = NULL;
	return 0;
}

/* 16 GiB, all free, or FAKEDEV_FREE bytes of it. */
API CUresult cuMemGetInfo_v2(size_t *f, size_t *t)
{
	const char *v = getenv("FAKEDEV_FREE");

	CNT();
	*t = 1ull << 34;
	*f = v && *v ? (size_t)strtoull(v, NULL, 10) : *t;
	return 0;
}

API CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags)
{
	CNT();
	char *m;

	(void)flags;
	if (fd_fail_hostalloc)
		return E_OOM;
	m = malloc(n ? n : 1);
	if (!m || fd_add(m, n, 2)) {
		free(m);
		return E_OOM;
	}
	fd_hostallocs++;
	*p = m;
	return 0;
}

API CUresult cuMemFreeHost(void *p)
{
	CNT();
	struct alloc *a = fd_find(p, 2);

	if (!a)
		return E_INVALID;
	free(a->p);
	a->p = NULL;
	return 0;
}

API CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags)
{
	CNT();
	(void)flags;
	if (fd_fail_register)
		return E_INVALID;
	return fd_add(p, n, 3) ? E_OOM : 0;
}

API CUresult cuMemHostUnregister(void *p)
{
	CNT();
	struct alloc *a = fd_find(p, 3);

	if (!a)
		return E_INVALID;
	a->p = NULL;
	return 0;
}

static struct stream *fd_s(void *s)
{
	return s ? (struct stream *)s : &fd_null;
}

static CUresult fd_push(struct stream *s, const struct op *o)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		struct op *q = realloc(s->q, cap * sizeof *q);
		if (!q)
			return E_OOM;
		s->q = q;
		s->cap = cap;
	}
	s->q[s->n++] = *o;
	return 0;
}

static CUresult fd_enqueue(struct stream *s, const struct op *o)
{
	if (fd_fail_copy && --fd_fail_copy == 0)
		return E_INVALID;
	return fd_push(s, o);
}

/* Perform the queued ops before index `upto`. */
static CUresult fd_run(struct stream *s, size_t upto)
{
	CUresult rc;

	while (s->head < upto) {
		struct op *o = &s->q[s->head++];
		if (o->memset_v == -2) {
			/* A kernel that failed drops the kernels queued behind
			 * it on its stream (they would read what it never
			 * wrote), as a device fault would. */
			fd_pending--;
			if (!s->dropping && o->fn(o->arg) != 0) {
				s->err = E_UNKNOWN;
				s->dropping = 1;
			}
			free(o->arg);
			continue;
		}
		if (o->memset_v >= 0) {
			for (size_t y = 0; y < o->height; y++)
				memset(o->dst + y * o->dpitch, o->memset_v, o->width);
			continue;
		}
		if (fd_fail_exec && --fd_fail_exec == 0) {
			s->err = E_UNKNOWN;
			continue;
		}
		for (size_t y = 0; y < o->height; y++)
			memcpy(o->dst + y * o->dpitch, o->src + y * o->spitch,
			       o->width);
		fd_copies++;
	}
	if (s->head == s->n) {
		s->base += s->n;
		s->head = s->n = 0;
		s->dropping = 0;
	}
	rc = s->err;
	s->err = 0;
	return rc;
}

/* The stand-in kernels' wait: what is queued on the stream is performed,
 * without counting as a wait of the backend's (an error stays for the
 * next real wait). */
API void fakedev_flush(void *stream);
API void fakedev_flush(void *stream)
{
	struct stream *s = fd_s(stream);
	int err = s->err;

	s->err = fd_run(s, s->n);
	if (err)
		s->err = err;
}

/* A stand-in kernel queued on the stream, run (fn(arg), then free(arg))
 * in stream order when the program waits for the stream or an event
 * recorded after it, as the device would: a copy of its results on
 * another stream before that wait reads what was there before; fn's
 * nonzero return is an execution failure, which that wait reports. 0, or
 * -1 (not queued; arg is the caller's). */
API int fakedev_defer(void *stream, const char *name, int (*fn)(void *),
		      void *arg);
API int fakedev_defer(void *stream, const char *name, int (*fn)(void *),
		      void *arg)
{
	struct op o = { 0 };

	o.memset_v = -2;
	o.fn = fn;
	o.arg = arg;
	fd_journal("kernel %s s%d", name, fd_s(stream)->id);
	if (fd_push(fd_s(stream), &o) != 0)
		return -1;
	fd_pending++;
	return 0;
}

static CUresult fd_copy(void *stream, char *dst, int ddev, size_t dpitch,
			const char *src, int sdev, size_t spitch, size_t w,
			size_t h)
{
	struct op o = { dst, src, dpitch, spitch, w, h, -1, NULL, NULL };
	static const char *const dir[2][2] = { { "h2h", "h2d" }, { "d2h", "d2d" } };
	CUresult rc;

	if (h > 1 && (dpitch < w || spitch < w)) {
		fd_bad++;
		return E_INVALID;
	}
	if (w && h && (fd_check(dst, (h - 1) * dpitch + w, ddev) ||
		       fd_check(src, (h - 1) * spitch + w, sdev))) {
		fd_bad++;
		return E_INVALID;
	}
	rc = fd_enqueue(fd_s(stream), &o);
	fd_journal("copy %s s%d %zu pending %ld%s", dir[sdev][ddev],
		   fd_s(stream)->id, w * h, fd_pending, rc ? " refused" : "");
	return rc;
}

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, void *s)
{
	CNT();
	return fd_copy(s, (char *)(uintptr_t)d, 1, n, h, 0, n, n, 1);
}

API CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, void *s)
{
	CNT();
	return fd_copy(s, h, 0, n, (const char *)(uintptr_t)d, 1, n, n, 1);
}

API CUresult cuMemcpy2DAsync_v2(const struct m2d *c, void *s)
{
	CNT();
	int sdev = c->srcMemoryType == 2, ddev = c->dstMemoryType == 2;
	const char *src = sdev ? (const char *)(uintptr_t)c->srcDevice :
				 (const char *)c->srcHost;
	char *dst = ddev ? (char *)(uintptr_t)c->dstDevice : (char *)c->dstHost;

	if ((c->srcMemoryType != 1 && !sdev) || (c->dstMemoryType != 1 && !ddev)) {
		fd_bad++;
		return E_INVALID;
	}
	src += c->srcY * c->srcPitch + c->srcXInBytes;
	dst += c->dstY * c->dstPitch + c->dstXInBytes;
	return fd_copy(s, dst, ddev, c->dstPitch, src, sdev, c->srcPitch,
		       c->WidthInBytes, c->Height);
}

API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void *s)
{
	CNT();
	struct op o = { (char *)(uintptr_t)d, NULL, 0, 0, n, 1, v, NULL, NULL };

	if (fd_check(o.dst, n, 1)) {
		fd_bad++;
		return E_INVALID;
	}
	return fd_enqueue(fd_s(s), &o);
}

API CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v,
			       size_t w, size_t h, void *s)
{
	struct op o = { (char *)(uintptr_t)d, NULL, pitch, 0, w, h, v, NULL, NULL };

	if (h && (fd_check(o.dst, (h - 1) * pitch + w, 1) || (h > 1 && pitch < w))) {
		fd_bad++;
		return E_INVALID;
	}
	return fd_enqueue(fd_s(s), &o);
}

API CUresult cuStreamCreate(void **s, unsigned f)
{
	CNT();
	(void)f;
	*s = calloc(1, sizeof(struct stream));
	if (!*s)
		return E_OOM;
	((struct stream *)*s)->id = ++fd_streams;
	return 0;
}

API CUresult cuStreamDestroy_v2(void *p)
{
	CNT();
	struct stream *s = p;

	(void)fd_run(s, s->n);
	free(s->q);
	free(s);
	return 0;
}

API CUresult cuStreamSynchronize(void *p)
{
	CNT();
	struct stream *s = fd_s(p);

	fd_journal("sync s%d", s->id);
	return fd_run(s, s->n);
}

API CUresult cuEventCreate(void **e, unsigned f)
{
	CNT();
	(void)f;
	*e = calloc(1, sizeof(struct event));
	if (!*e)
		return E_OOM;
	((struct event *)*e)->id = ++fd_events;
	return 0;
}

API CUresult cuEventDestroy_v2(void *e) { CNT(); free(e); return 0; }

API CUresult cuEventRecord(void *p, void *s)
{
	CNT();
	struct event *e = p;

	e->s = fd_s(s);
	e->upto = e->s->base + e->s->n;
	fd_journal("record e%d s%d", e->id, e->s->id);
	return 0;
}

API CUresult cuEventSynchronize(void *p)
{
	CNT();
	struct event *e = p;

	fd_journal("wait e%d", e->id);
	if (!e->s || e->upto <= e->s->base + e->s->head)
		return 0;
	return fd_run(e->s, e->upto - e->s->base);
}

API CUresult cuStreamWaitEvent(void *s, void *p, unsigned f)
{
	CNT();
	(void)s;
	(void)f;
	return cuEventSynchronize(p);
}

API CUresult cuGetErrorString(CUresult r, const char **str)
{
	CNT();
	*str = r == E_UNKNOWN ? "CUDA_ERROR_UNKNOWN" : r == E_OOM ?
	       "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_INVALID_VALUE";
	return 0;
}
