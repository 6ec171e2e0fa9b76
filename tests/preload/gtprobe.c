/*
 * gtprobe.c - a CUDA job that may also play a profiler, for
 * tests/test_gputime.py (the fake driver and tests/fakecupti).
 *
 *   gtprobe [STEP...]
 * Steps, in order:
 *   work       cuInit, a context on device 0 (the lease is taken), and a
 *              context synchronisation: "work=<rc>"
 *   profile    as a profiler: cuptiSubscribe, cuptiActivityRegisterCallbacks,
 *              cuptiActivityEnable(CONCURRENT_KERNEL), then a forced
 *              cuptiActivityFlushAll: "subscribe=<rc> enable=<rc>
 *              profiled=<records its callbacks got>"
 *   activity   as a profiler that uses only the activity API (no
 *              subscription): cuptiActivityRegisterCallbacks and
 *              cuptiActivityEnable(CONCURRENT_KERNEL): "activity=<rc>"
 *   flush      a forced cuptiActivityFlushAll: "profiled=<records its
 *              callbacks got so far>"
 *   local      as PyTorch's profiler is laid out: dlopen libgtprof.so
 *              (linked with CUPTI) with RTLD_LOCAL, and subscribe through
 *              its PLT: "local=<rc>"
 *   giveup     cuCtxDestroy of the context (the lease can be given back)
 * CUPTI is found with dlopen("libcupti.so.13") + dlsym, or, built with
 * GTPROBE_LINKED, through the PLT (linked with it). Exit status 0 unless
 * the probe itself could not run (3).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*init_fn)(unsigned int);
typedef int (*ctx_create_fn)(void **, unsigned, int);
typedef int (*void_fn)(void);
typedef int (*ctx_fn)(void *);
typedef void (*req_fn)(uint8_t **, size_t *, size_t *);
typedef void (*done_fn)(void *, uint32_t, uint8_t *, size_t, size_t);

#ifdef GTPROBE_LINKED
int cuptiSubscribe(void **, void *, void *);
int cuptiActivityRegisterCallbacks(req_fn, done_fn);
int cuptiActivityEnable(int);
int cuptiActivityFlushAll(uint32_t);
int cuptiActivityGetNextRecord(uint8_t *, size_t, void **);
#endif

static int records;
static int (*next_rec)(uint8_t *, size_t, void **);

static void req(uint8_t **b, size_t *s, size_t *m)
{
	*b = malloc(1 << 16);
	*s = *b ? 1 << 16 : 0;
	*m = 0;
}

static void done(void *c, uint32_t st, uint8_t *b, size_t s, size_t v)
{
	void *r = NULL;

	(void)c;
	(void)st;
	(void)s;
	while (b && next_rec(b, v, &r) == 0 && r)
		records++;
	free(b);
}

static void *sym(void *h, const char *name)
{
	void *p = dlsym(h, name);

	if (!p) {
		fprintf(stderr, "gtprobe: %s: %s\n", name, dlerror());
		exit(3);
	}
	return p;
}

static int (*sub)(void **, void *, void *);
static int (*reg)(req_fn, done_fn);
static int (*en)(int);
static int (*flush)(uint32_t);

static void resolve(void)
{
#ifdef GTPROBE_LINKED
	sub = cuptiSubscribe;
	reg = cuptiActivityRegisterCallbacks;
	en = cuptiActivityEnable;
	flush = cuptiActivityFlushAll;
	next_rec = cuptiActivityGetNextRecord;
#else
	void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		fprintf(stderr, "gtprobe: %s\n", dlerror());
		exit(3);
	}
	sub = (int (*)(void **, void *, void *))sym(h, "cuptiSubscribe");
	reg = (int (*)(req_fn, done_fn))sym(h, "cuptiActivityRegisterCallbacks");
	en = (int (*)(int))sym(h, "cuptiActivityEnable");
	flush = (int (*)(uint32_t))sym(h, "cuptiActivityFlushAll");
	next_rec = (int (*)(uint8_t *, size_t, void **))sym(
		h, "cuptiActivityGetNextRecord");
#endif
}

static void profile(void)
{
	void *s = NULL;
	int rs, re;

	resolve();
	rs = sub(&s, NULL, NULL);
	reg(req, done);
	re = en(10);
	flush(1);
	printf("subscribe=%d enable=%d profiled=%d\n", rs, re, records);
}

int main(int argc, char **argv)
{
	void *cu = NULL, *ctx = NULL;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "work")) {
			int rc;

			cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
			if (!cu) {
				fprintf(stderr, "gtprobe: %s\n", dlerror());
				return 3;
			}
			rc = ((init_fn)sym(cu, "cuInit"))(0);
			if (!rc)
				rc = ((ctx_create_fn)sym(cu, "cuCtxCreate_v2"))(
					&ctx, 0, 0);
			if (!rc)
				rc = ((void_fn)sym(cu, "cuCtxSynchronize"))();
			printf("work=%d\n", rc);
		} else if (!strcmp(argv[i], "profile")) {
			profile();
		} else if (!strcmp(argv[i], "local")) {
			void *h = dlopen("libgtprof.so", RTLD_NOW | RTLD_LOCAL);

			if (!h) {
				fprintf(stderr, "gtprobe: %s\n", dlerror());
				return 3;
			}
			printf("local=%d\n",
			       ((int (*)(void))sym(h, "gtprof_subscribe"))());
		} else if (!strcmp(argv[i], "activity")) {
			resolve();
			reg(req, done);
			printf("activity=%d\n", en(10));
		} else if (!strcmp(argv[i], "flush")) {
			resolve();
			flush(1);
			printf("profiled=%d\n", records);
		} else if (!strcmp(argv[i], "giveup") && cu && ctx) {
			((ctx_fn)sym(cu, "cuCtxDestroy_v2"))(ctx);
		} else {
			fprintf(stderr, "gtprobe: unknown step %s\n", argv[i]);
			return 3;
		}
		fflush(stdout);
	}
	return 0;
}
