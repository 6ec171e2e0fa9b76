/*
 * fakecupti.c - a fake CUPTI (libcupti.so.13) for the tests of the GPU-time
 * collector (tests/test_gputime.py). It implements the few entry points
 * gpumutex and a profiler-like test program call, and hands out activity
 * records the test names. README.md has the variables.
 *
 * Like CUPTI: one subscriber at a time (a second cuptiSubscribe returns
 * CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED), records go to whoever
 * registered the buffer callbacks last, and only for enabled kinds.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))
#define OK 0
#define E_LIMIT 12
#define E_NOT_INIT 15
#define E_INVALID 1
#define E_MULTI 39
#define SLOT 64 /* bytes per record in the fake's buffers */

typedef void (*req_fn)(uint8_t **, size_t *, size_t *);
typedef void (*done_fn)(void *, uint32_t, uint8_t *, size_t, size_t);

API int cuptiGetVersion(uint32_t *v);
API int cuptiSubscribe(void **s, void *cb, void *u);
API int cuptiUnsubscribe(void *s);
API int cuptiActivityRegisterCallbacks(req_fn r, done_fn d);
API int cuptiActivityEnable(int kind);
API int cuptiActivityDisable(int kind);
API int cuptiGetTimestamp(uint64_t *t);
API int cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, void **rec);
API int cuptiActivityFlushAll(uint32_t flag);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int subscribed = -1; /* -1: not read from the environment yet */
static req_fn req;
static done_fn done;
static int enabled[64];
static int batch;           /* next batch of FAKECUPTI_RECORDS */
static int clock_i;

static void journal(const char *fmt, ...)
{
	const char *path = getenv("FAKECUPTI_JOURNAL");
	char line[512];
	va_list ap;
	int n, fd;

	if (!path)
		return;
	n = snprintf(line, sizeof line, "pid=%d ", (int)getpid());
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof line - 1)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0) {
		if (write(fd, line, (size_t)n) < 0) {
			/* a test reads what is there */
		}
		close(fd);
	}
}

/* FAKECUPTI_FAIL names a function that returns CUPTI_ERROR_NOT_INITIALIZED. */
static int fails(const char *fn)
{
	const char *f = getenv("FAKECUPTI_FAIL");

	return f && strcmp(f, fn) == 0;
}

API int cuptiGetVersion(uint32_t *v)
{
	const char *e = getenv("FAKECUPTI_VERSION");

	journal("call=cuptiGetVersion");
	if (fails("cuptiGetVersion"))
		return E_NOT_INIT;
	*v = e ? (uint32_t)strtoul(e, NULL, 10) : 130001u;
	return OK;
}

/* FAKECUPTI_CALLS_DRIVER=1: as CUPTI does when it starts, call the driver
 * (cuInit and cuDeviceGetCount, found with dlopen + dlsym, so through
 * whatever the process's dlsym hands out). */
static void call_driver(void)
{
	const char *e = getenv("FAKECUPTI_CALLS_DRIVER");
	void *h;
	int (*init)(unsigned), (*count)(int *), n = -1, rc = -1;

	if (!e || e[0] != '1')
		return;
	h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return;
	init = (int (*)(unsigned))dlsym(h, "cuInit");
	count = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
	if (init && count && (rc = init(0)) == 0)
		rc = count(&n);
	journal("driver rc=%d count=%d", rc, n);
}

API int cuptiSubscribe(void **s, void *cb, void *u)
{
	int rc;

	(void)cb;
	(void)u;
	call_driver();
	pthread_mutex_lock(&mu);
	if (subscribed < 0) {
		const char *e = getenv("FAKECUPTI_SUBSCRIBED");

		subscribed = e && e[0] == '1';
	}
	if (fails("cuptiSubscribe"))
		rc = E_NOT_INIT;
	else if (subscribed)
		rc = E_MULTI;
	else {
		subscribed = 1;
		*s = (void *)&subscribed;
		rc = OK;
	}
	pthread_mutex_unlock(&mu);
	journal("call=cuptiSubscribe rc=%d", rc);
	return rc;
}

API int cuptiUnsubscribe(void *s)
{
	(void)s;
	pthread_mutex_lock(&mu);
	subscribed = 0;
	pthread_mutex_unlock(&mu);
	journal("call=cuptiUnsubscribe");
	return OK;
}

API int cuptiActivityRegisterCallbacks(req_fn r, done_fn d)
{
	if (!r || !d)
		return E_INVALID;
	if (fails("cuptiActivityRegisterCallbacks"))
		return E_NOT_INIT;
	pthread_mutex_lock(&mu);
	req = r;
	done = d;
	pthread_mutex_unlock(&mu);
	journal("call=cuptiActivityRegisterCallbacks");
	return OK;
}

API int cuptiActivityEnable(int kind)
{
	if (fails("cuptiActivityEnable"))
		return E_NOT_INIT;
	if (kind < 0 || kind >= 64)
		return E_INVALID;
	enabled[kind] = 1;
	journal("call=cuptiActivityEnable kind=%d", kind);
	return OK;
}

API int cuptiActivityDisable(int kind)
{
	if (kind < 0 || kind >= 64)
		return E_INVALID;
	enabled[kind] = 0;
	journal("call=cuptiActivityDisable kind=%d", kind);
	return OK;
}

/* FAKECUPTI_CLOCK: the values of successive calls, comma-separated; the
 * last repeats. Default: 1 s. */
API int cuptiGetTimestamp(uint64_t *t)
{
	const char *e = getenv("FAKECUPTI_CLOCK");
	uint64_t v = 1000000000u;
	int i = 0;

	pthread_mutex_lock(&mu);
	while (e && *e) {
		char *end;

		v = strtoull(e, &end, 10);
		if (i++ == clock_i || *end != ',')
			break;
		e = end + 1;
	}
	clock_i++;
	pthread_mutex_unlock(&mu);
	*t = v;
	return OK;
}

API int cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, void **rec)
{
	uint8_t *next = *rec ? (uint8_t *)*rec + SLOT : buf;

	if (next + SLOT > buf + valid) {
		*rec = NULL;
		return E_LIMIT;
	}
	*rec = next;
	return OK;
}

static void put(uint8_t *slot, uint32_t kind, uint32_t dev, uint64_t s,
		uint64_t e)
{
	memset(slot, 0, SLOT);
	memcpy(slot, &kind, 4);
	memcpy(slot + 16, &s, 8);
	memcpy(slot + 24, &e, 8);
	memcpy(slot + (kind == 1 ? 32 : 40), &dev, 4);
}

/*
 * A batch of series "g:KIND:DEV:START:LEN:STEP:COUNT,..." (each COUNT
 * records of LEN ns, one every STEP ns from START), handed over
 * round-robin, the i-th record of each series in turn: streams running at
 * once, in the order their work finished.
 */
static size_t series(const char *e, uint8_t **bufp, size_t *sizep, int *n,
		     req_fn r, done_fn d)
{
	uint8_t *buf = *bufp;
	size_t size = *sizep;
	struct { uint32_t kind, dev; uint64_t s, len, step, count; } g[16];
	int ng = 0;
	size_t used = 0;

	while (e && *e == 'g' && *e != ';' && ng < 16) {
		char *p;

		g[ng].kind = e[2] == 'c' ? 1 : 10;
		g[ng].dev = (uint32_t)strtoul(e + 4, &p, 10);
		g[ng].s = strtoull(p + 1, &p, 10);
		g[ng].len = strtoull(p + 1, &p, 10);
		g[ng].step = strtoull(p + 1, &p, 10);
		g[ng].count = strtoull(p + 1, &p, 10);
		ng++;
		e = *p == ',' ? p + 1 : NULL;
	}
	for (uint64_t i = 0;; i++) {
		int any = 0;

		for (int k = 0; k < ng; k++) {
			uint64_t s;

			if (i >= g[k].count)
				continue;
			any = 1;
			if (!enabled[g[k].kind])
				continue;
			if (used + SLOT > size) {
				/* Full: hand it over, as CUPTI does, and
				 * ask for the next. */
				size_t max = 0;

				d(NULL, 0, buf, size, used);
				used = 0;
				buf = NULL;
				r(&buf, &size, &max);
				*bufp = buf;
				*sizep = size;
				if (!buf || size < SLOT)
					return 0;
			}
			s = g[k].s + i * g[k].step;
			put(buf + used, g[k].kind, g[k].dev, s, s + g[k].len);
			used += SLOT;
			(*n)++;
		}
		if (!any)
			return used;
	}
}

/*
 * FAKECUPTI_RECORDS: batches separated by ';', each of records
 * "k|c:DEV:START:END" (kernel or copy, ns) separated by ','. A forced
 * flush hands the next batch (its records of enabled kinds) to the
 * callbacks registered now.
 */
API int cuptiActivityFlushAll(uint32_t flag)
{
	const char *e = getenv("FAKECUPTI_RECORDS");
	req_fn r;
	done_fn d;
	uint8_t *buf = NULL;
	size_t size = 0, max = 0, used = 0;
	int b = 0, n = 0;

	journal("call=cuptiActivityFlushAll flag=%u", flag);
	if (!(flag & 1) || !e)
		return OK;
	pthread_mutex_lock(&mu);
	r = req;
	d = done;
	b = batch++;
	pthread_mutex_unlock(&mu);
	for (int i = 0; i < b && e; i++) {
		e = strchr(e, ';');
		e = e ? e + 1 : NULL;
	}
	if (!e || !*e || !r || !d)
		return OK;
	r(&buf, &size, &max);
	if (!buf || !size)
		return OK;
	if (e[0] == 'g') {
		used = series(e, &buf, &size, &n, r, d);
		if (!buf)
			return OK;
		e = "";
	}
	while (*e && *e != ';') {
		char k = e[0];
		unsigned long dev;
		unsigned long long s, t;
		char *p;
		uint32_t kind = k == 'c' ? 1 : 10;

		dev = strtoul(e + 2, &p, 10);
		s = strtoull(p + 1, &p, 10);
		t = strtoull(p + 1, &p, 10);
		if (enabled[kind] && used + SLOT <= size) {
			put(buf + used, kind, (uint32_t)dev, s, t);
			used += SLOT;
			n++;
		}
		e = *p == ',' ? p + 1 : p;
	}
	journal("delivered=%d batch=%d", n, b);
	d(NULL, 0, buf, size, used);
	return OK;
}
