/*
 * xfertest.c - the copy engine (src/offload/cuda/xfer.c, xpool.c) against
 * a driver: tests/offload/cuda/fakedev.c through LD_LIBRARY_PATH in CI
 * (with failure injection), or the real libcuda.so.1 on a GPU machine
 * (the same copies; the injected failures are skipped).
 *
 * Every copy is checked byte for byte, and so is every byte it must not
 * touch: the padding between rows in the destination, and a staged
 * destination before gpc_commit and after a failure or gpc_discard.
 * Prints one line per failed check and "xfertest: N checks, M failed";
 * exits 1 if any failed.
 *
 * This file: the shared checks (xfertest.h), the round trips of every
 * shape and main; the prefault worker's tests are in xfertest-prefault.c,
 * the staging and the injected failures in xfertest-stage.c.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "xfault.h"
#include "xfer.h"
#include "xfertest.h"
#include "../ntasks.h"

int checks, failed;
int base_tasks;
void (*ctl)(const char *, long);
long (*get)(const char *);

static unsigned long long rng = 88172645463325252ull;
static unsigned char rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (unsigned char)(rng >> 24);
}

unsigned char *hbuf(uint64_t bytes, int fill)
{
	unsigned char *p = malloc(bytes ? bytes : 1);

	if (!p) {
		printf("out of memory\n");
		exit(2);
	}
	for (uint64_t i = 0; i < bytes; i++)
		p[i] = fill < 0 ? rnd() : (unsigned char)fill;
	return p;
}

/* Rows of dst (pitch dp) equal rows of src (pitch sp); dst's padding is
 * `pad` (or unchecked if pad < 0). */
int same(const unsigned char *dst, uint64_t dp, const unsigned char *src,
	 uint64_t sp, uint64_t w, uint64_t rows, int pad)
{
	for (uint64_t r = 0; r < rows; r++) {
		if (memcmp(dst + r * dp, src + r * sp, w))
			return 0;
		if (pad >= 0 && r + 1 < rows)
			for (uint64_t i = w; i < dp; i++)
				if (dst[r * dp + i] != pad)
					return 0;
	}
	return 1;
}

int all(const unsigned char *p, uint64_t n, int v)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

gpc_dptr dalloc(uint64_t bytes)
{
	gpc_dptr d = 0;

	if (gpc_cu.MemAlloc(&d, bytes ? bytes : 1)) {
		printf("cuMemAlloc failed\n");
		exit(2);
	}
	return d;
}

/* One round trip: host (pitch hp) -> device (pitch dp) -> host (pitch op),
 * straight, staged + commit, staged + discard. */
static void roundtrip(const char *cfg, uint64_t w, uint64_t rows, uint64_t hp,
		      uint64_t dp, uint64_t op)
{
	uint64_t hn = (rows - 1) * hp + w, on = (rows - 1) * op + w;
	unsigned char *in = hbuf(hn, -1), *out = hbuf(on, 0xa5);
	gpc_dptr dev = dalloc((rows - 1) * dp + w);
	int rc;

	rc = gpc_h2d(dev, dp, in, hp, w, rows);
	CHECK(rc == 0, "%s h2d w=%llu rows=%llu: %d", cfg,
	      (unsigned long long)w, (unsigned long long)rows, rc);
	if (get)        /* the fake's device memory is host memory */
		CHECK(same((unsigned char *)(uintptr_t)dev, dp, in, hp, w, rows, 0xdd),
		      "%s device bytes w=%llu rows=%llu", cfg,
		      (unsigned long long)w, (unsigned long long)rows);
	rc = gpc_d2h(out, op, dev, dp, w, rows, 0);
	CHECK(rc == 0 && same(out, op, in, hp, w, rows, 0xa5),
	      "%s d2h w=%llu rows=%llu hp=%llu dp=%llu op=%llu", cfg,
	      (unsigned long long)w, (unsigned long long)rows,
	      (unsigned long long)hp, (unsigned long long)dp,
	      (unsigned long long)op);
	memset(out, 0xa5, on);
	rc = gpc_d2h(out, op, dev, dp, w, rows, GPO_BE_STAGE);
	CHECK(rc == 0 && all(out, on, 0xa5), "%s staged d2h wrote early "
	      "w=%llu rows=%llu", cfg, (unsigned long long)w,
	      (unsigned long long)rows);
	gpc_commit();
	CHECK(same(out, op, in, hp, w, rows, 0xa5), "%s commit w=%llu rows=%llu",
	      cfg, (unsigned long long)w, (unsigned long long)rows);
	memset(out, 0xa5, on);
	rc = gpc_d2h(out, op, dev, dp, w, rows, GPO_BE_STAGE);
	gpc_discard();
	gpc_commit();   /* nothing left to commit */
	CHECK(rc == 0 && all(out, on, 0xa5), "%s discard w=%llu", cfg,
	      (unsigned long long)w);
	(void)gpc_cu.MemFree(dev);
	free(in);
	free(out);
}

static void shapes(const char *cfg, uint64_t ch)
{
	roundtrip(cfg, 1, 1, 1, 1, 1);
	roundtrip(cfg, ch - 1, 1, ch - 1, ch - 1, ch - 1);
	roundtrip(cfg, ch, 1, ch, ch, ch);
	roundtrip(cfg, ch + 1, 1, ch + 1, ch + 1, ch + 1);
	roundtrip(cfg, 3 * ch + 17, 3, 3 * ch + 40, 3 * ch + 24, 4 * ch);
	roundtrip(cfg, 100, ch / 100, 100, 100, 100);
	roundtrip(cfg, 100, ch / 100 + 1, 108, 128, 104);
	roundtrip(cfg, 24, 5 * ch / 24 + 3, 40, 24, 32);      /* odd widths */
	roundtrip(cfg, 13, 3 * (ch / 13) + 5, 13, 16, 21);   /* more rows than a chunk holds */
	roundtrip(cfg, ch / 2 + 3, 7, ch / 2 + 3, ch, ch / 2 + 11);
	roundtrip(cfg, 8 * 37, 1000, 8 * 41, 8 * 40, 8 * 37);
}

/* A joined thread can stay listed in /proc for a moment after
 * pthread_join returned (the kernel wakes the joiner before it removes
 * the task), so a count above the one before the engine started is read
 * again a bounded number of times;
 * a thread that was never joined stays and fails the check. */
int ntasks_settled(void)
{
	int n = ntasks();

	for (int i = 0; i < 100000 && n > base_tasks; i++) {
		sched_yield();
		n = ntasks();
	}
	return n;
}

void start(const char *cfg, uint64_t chunk, int nbuf, int threads,
	   uint64_t reg_min, uint64_t keep)
{
	struct gpc_xfer_tune t = { chunk, nbuf, threads, reg_min, keep };
	struct gpc_xfer_stats st;
	struct gpc_xfault_stats fs;

	CHECK(gpc_xfer_start_tuned(&t) == 0, "%s start", cfg);
	gpc_xfer_stats(&st);
	gpc_xfault_stats(&fs);
	CHECK(threads <= 0 || st.threads == threads, "%s threads %d", cfg,
	      st.threads);
	CHECK(fs.workers == GPC_XFAULT_THREADS, "%s: %d prefault workers", cfg,
	      fs.workers);
	CHECK(ntasks() == base_tasks + st.threads - 1 + fs.workers,
	      "%s: %d tasks, %d threads, %d prefault, %d before", cfg,
	      ntasks(), st.threads, fs.workers, base_tasks);
}

void stop(const char *cfg)
{
	gpc_xfer_stop();
	CHECK(ntasks_settled() == base_tasks, "%s: %d threads after stop (%d before)",
	      cfg, ntasks_settled(), base_tasks);
	if (get)
		CHECK(get("pinned") == 0 && get("registered") == 0,
		      "%s: pinned %ld registered %ld after stop", cfg,
		      get("pinned"), get("registered"));
}

int main(void)
{
	const char *why = NULL;
	char buf[128];
	void *fake;
	gpc_ctx ctx;
	gpc_dev d;

	if (gpc_cu_load(&why, buf, sizeof buf) != 0) {
		printf("xfertest: %s\n", why);
		return 2;
	}
	if (gpc_cu.Init(0) || gpc_cu.DeviceGet(&d, 0) ||
	    gpc_cu.PrimaryCtxRetain(&ctx, d) || gpc_cu.CtxPushCurrent(ctx)) {
		printf("xfertest: no CUDA context\n");
		return 2;
	}
	base_tasks = ntasks();
	fake = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (fake) {
		ctl = (void (*)(const char *, long))dlsym(fake, "fakedev_ctl");
		get = (long (*)(const char *))dlsym(fake, "fakedev_get");
		if (!ctl || !get)
			ctl = NULL, get = NULL;
	}
	start("4k/2", 4096, 2, 1, 0, 0);
	shapes("4k/2", 4096);
	stop("4k/2");
	start("4k/3", 4096, 3, 3, 0, 0);
	shapes("4k/3", 4096);
	stop("4k/3");
	start("1M/3/t4", 1 << 20, 3, 4, 0, 0);
	shapes("1M/3/t4", 1 << 20);
	stop("1M/3/t4");
	start("reg", 4096, 3, 2, 1, 0);
	shapes("reg", 4096);
	stop("reg");
	prefaults();
	stage_parts();
	{       /* GPU_OFFLOAD_CUDA_PREFAULT=0 (the defaults' start reads it) */
		struct gpc_xfault_stats fs;
		setenv("GPU_OFFLOAD_CUDA_PREFAULT", "0", 1);
		CHECK(gpc_xfer_start() == 0, "start without prefault");
		gpc_xfault_stats(&fs);
		CHECK(fs.workers == 0, "GPU_OFFLOAD_CUDA_PREFAULT=0: %d workers",
		      fs.workers);
		gpc_xfer_stop();
		unsetenv("GPU_OFFLOAD_CUDA_PREFAULT");
		CHECK(ntasks_settled() == base_tasks, "no prefault: %d threads after stop",
		      ntasks_settled());
	}
	if (!get) {     /* a real GPU: the defaults too */
		start("default", 0, 0, 0, 0, 0);
		shapes("default", 16u << 20);
		stop("default");
	} else {
		failures();
		CHECK(get("bad") == 0, "%ld copies out of bounds", get("bad"));
	}
	printf("xfertest: %s driver, %d checks, %d failed\n",
	       get ? "fake" : "real", checks, failed);
	return failed ? 1 : 0;
}
