/*
 * trace.c - the trace writer (tracew.h; layout in trace.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tracew.h"

static char gpo__dir[4096];
static int gpo__level;
static int gpo__on;
static int gpo__fd = -1;
static pid_t gpo__pid;
/* Writers of records; taken after the policy's lock, or alone. */
static pthread_mutex_t gpo__tlock = PTHREAD_MUTEX_INITIALIZER;
/* Per thread, between decide and observe: the operands' fingerprints
 * before the call (for the trace). A pthread key, not __thread, which
 * would make the library need the dynamic linker (__tls_get_addr). */
struct gpo__pre {
	const struct gpo_call *c;
	uint64_t fp[GPO_MAX_BUFS];
};
static pthread_key_t gpo__pre_key;
static int gpo__pre_ok;

static struct gpo__pre *gpo__pre_get(void)
{
	struct gpo__pre *p;

	if (!gpo__pre_ok)
		return NULL;
	p = pthread_getspecific(gpo__pre_key);
	if (!p) {
		p = calloc(1, sizeof *p);
		if (p && pthread_setspecific(gpo__pre_key, p) != 0) {
			free(p);
			p = NULL;
		}
	}
	return p;
}

static int64_t gpo__real(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int gpo_trace_setup(const char *dir, int level)
{
	if (strlen(dir) >= sizeof gpo__dir - 32)
		return -ENAMETOOLONG;
	if (mkdir(dir, 0777) != 0 && errno != EEXIST)
		return -errno;
	snprintf(gpo__dir, sizeof gpo__dir, "%s", dir);
	gpo__level = level;
	gpo__pre_ok = pthread_key_create(&gpo__pre_key, free) == 0;
	__atomic_store_n(&gpo__on, 1, __ATOMIC_RELEASE);
	return 0;
}

int gpo_trace_on(void)
{
	return __atomic_load_n(&gpo__on, __ATOMIC_ACQUIRE); /* read by every thread */
}

static int gpo__open(void)
{
	struct gpo_trace_header h;
	struct timespec ts;
	static char path[4096 + 32]; /* under the caller's lock */
	int fd;

	snprintf(path, sizeof path, "%s/gpo-%d.trace", gpo__dir, (int)getpid());
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
		  0644);
	if (fd < 0)
		return -errno;
	memset(&h, 0, sizeof h);
	memcpy(h.magic, GPO_TRACE_MAGIC, 8);
	h.version = GPO_TRACE_VERSION;
	h.rec_size = GPO_TRACE_REC_SIZE;
	h.endian = GPO_TRACE_ENDIAN;
	h.pid = (int32_t)getpid();
	clock_gettime(CLOCK_REALTIME, &ts);
	h.start_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	h.level = (uint32_t)gpo__level;
	if (write(fd, &h, sizeof h) != (ssize_t)sizeof h) {
		int e = errno ? errno : EIO;
		close(fd);
		return -e;
	}
	return fd;
}

static int gpo__write(const struct gpo_trace_rec *r)
{
	ssize_t n;
	pid_t me;

	if (!__atomic_load_n(&gpo__on, __ATOMIC_RELAXED))
		return 0;
	me = getpid();
	/* The caller holds gpo__tlock (one writer at a time). After a
	 * fork the child writes a file of its own: the parent's is not
	 * interleaved with records of another process. */
	if (gpo__fd < 0 || gpo__pid != me) {
		int fd;
		if (gpo__fd >= 0 && gpo__pid != me)
			close(gpo__fd);
		gpo__fd = -1;
		fd = gpo__open();
		if (fd < 0) {
			__atomic_store_n(&gpo__on, 0, __ATOMIC_RELAXED);
			return fd;
		}
		gpo__fd = fd;
		gpo__pid = me;
	}
	do
		n = write(gpo__fd, r, sizeof *r);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof *r) {
		int e = n < 0 ? errno : ENOSPC;
		__atomic_store_n(&gpo__on, 0, __ATOMIC_RELAXED);
		return -e;
	}
	return 0;
}

uint64_t gpo_fingerprint(const void *p, uint64_t bytes)
{
	const unsigned char *b = p;
	uint64_t h = 0x9e3779b97f4a7c15u ^ bytes, words;

	if (!p || bytes < 8)
		return h | 1;
	words = bytes / 8;
	for (uint64_t i = 0; i < 8; i++) {
		uint64_t w;
		uint64_t at = words > 8 ? (i * (words - 1)) / 7 : i % words;
		memcpy(&w, b + at * 8, 8);
		h ^= w + 0x9e3779b97f4a7c15u + (h << 6) + (h >> 2);
		h *= 0xff51afd7ed558ccdu;
		h ^= h >> 33;
	}
	return h ? h : 1;
}

/* Whether a call traced with this reason references its operands as
 * described (see gpo_trace_call). */
static int gpo__references(unsigned reason)
{
	return reason != GPO_R_SMALL && reason != GPO_R_NESTED &&
	       reason != GPO_R_WORKSPACE && reason != GPO_R_MEASURED &&
	       reason != GPO_R_UNSUPPORTED;
}

void gpo_trace_before(const struct gpo_call *c)
{
	struct gpo__pre *p = gpo__pre_get();

	if (!p)
		return;
	p->c = c;
	for (int i = 0; i < c->nbuf && i < GPO_MAX_BUFS; i++)
		p->fp[i] = c->buf[i].in ?
			gpo_fingerprint(c->buf[i].ptr, c->buf[i].bytes) : 0;
}

int gpo_trace_call(const struct gpo_call *c, const struct gpo_decision *d,
		   int device, double seconds, double cin, double cout,
		   int fail)
{
	struct gpo_trace_rec r;
	const char *name = gpo_op_name(c->op);
	struct gpo__pre *p = gpo__pre_get();
	int rc, pre = p && p->c == c, refs;

	memset(&r, 0, sizeof r);
	r.kind = GPO_TK_CALL;
	r.dur_ns = (int64_t)(seconds * 1e9);
	r.t_ns = gpo__real() - r.dur_ns;
	r.device = (uint8_t)device;
	r.decided = d->device;
	r.prec = c->prec;
	r.blas_level = c->level;
	r.iface = c->iface;
	r.int64 = c->int64;
	r.op = c->op;
	r.reason = d->reason;
	r.fail = (uint16_t)fail;
	r.tid = (uint32_t)syscall(SYS_gettid);
	snprintf(r.opname, sizeof r.opname, "%s", name ? name : "?");
	memcpy(r.dims, c->dims, sizeof r.dims);
	r.flops = c->flops;
	r.bytes_in = c->bytes_in;
	r.bytes_out = c->bytes_out;
	r.t_cpu = d->t_cpu;
	r.t_gpu = d->t_gpu;
	r.copy_in_s = cin;
	r.copy_out_s = cout;
	r.site = (uint64_t)(uintptr_t)c->site;
	r.nbuf = (uint8_t)(c->nbuf < 0 ? 0 : c->nbuf > 4 ? 4 : c->nbuf);
	/* Operands are read (fingerprinted) only for a call that passed the
	 * frontend's argument checks and references them: never for a
	 * workspace query, whose arrays may be 1-element dummies beside
	 * dimensions of 2^32 (numpy's and SciPy's own tests do that), nor for
	 * a call below the threshold, nested, measured or unsupported, whose
	 * arguments were not checked. Those carry no fingerprints (0). */
	refs = gpo__references(d->reason);
	for (int i = 0; i < r.nbuf; i++) {
		const struct gpo_buf *b = &c->buf[i];
		r.buf[i].ptr = (uint64_t)(uintptr_t)b->ptr;
		r.buf[i].bytes = b->bytes;
		r.buf[i].in = b->in;
		r.buf[i].out = b->out;
		r.buf[i].resident = b->resident;
		if (!refs)
			continue;
		r.buf[i].fp_before = pre ? p->fp[i] : 0;
		r.buf[i].fp_after = gpo_fingerprint(b->ptr, b->bytes);
		if (!b->out && !pre && b->in)
			r.buf[i].fp_before = r.buf[i].fp_after; /* unchanged */
	}
	if (p)
		p->c = NULL;
	pthread_mutex_lock(&gpo__tlock);
	rc = gpo__write(&r);
	pthread_mutex_unlock(&gpo__tlock);
	return rc;
}

int gpo_trace_event(int kind, double seconds)
{
	struct gpo_trace_rec r;
	int rc;

	if (!gpo_trace_on())
		return 0;
	memset(&r, 0, sizeof r);
	r.kind = (uint8_t)kind;
	r.dur_ns = (int64_t)(seconds * 1e9);
	r.t_ns = gpo__real() - r.dur_ns;
	r.tid = (uint32_t)syscall(SYS_gettid);
	snprintf(r.opname, sizeof r.opname, "%s", kind == GPO_TK_GPU_START ?
		 "gpu-start" : kind == GPO_TK_GPU_STOP ? "gpu-stop" :
		 kind == GPO_TK_GPU_KEPT ? "gpu-kept" : "lease-refused");
	pthread_mutex_lock(&gpo__tlock);
	rc = gpo__write(&r);
	pthread_mutex_unlock(&gpo__tlock);
	return rc;
}

void gpo_trace_fork(int stage)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	if (stage == 0)
		pthread_mutex_lock(&gpo__tlock);
	else if (stage == 1)
		pthread_mutex_unlock(&gpo__tlock);
	else
		memcpy(&gpo__tlock, &fresh, sizeof fresh);
}
