/*
 * xfer_bench.c - GB/s of host<->device copies on a real GPU, side by side
 * in one run (docs/benchmarks.md, "gpu-offload: copies"):
 *   pageable   one cuMemcpy{HtoD,DtoH}Async + synchronize from malloc'd,
 *              touched memory (what a plain backend does)
 *   pinned     the same from cuMemHostAlloc memory (the bus's ceiling)
 *   engine     gpc_h2d / gpc_d2h (src/offload/cuda/xfer.c) with its
 *              defaults: pinned chunks, memcpy threads
 *   register   cuMemHostRegister + one copy + cuMemHostUnregister of the
 *              caller's buffer (the alternative to staging)
 *   staged     gpc_d2h(GPO_BE_STAGE) + gpc_commit (results held until
 *              every step succeeded), staging warm
 * for 1 MiB .. 1 GiB; then the engine at 256 MiB over threads x chunk
 * sizes, and a pitched matrix (8000 of 8192 rows per column). Each figure
 * is the best of a few repetitions. Built and run by `make xfer-bench`.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "benchclock.h"
#include "xfer.h"

#define MiB (1ull << 20)

static gpc_stream st;
static char *host, *out, *pinned;
static gpc_dptr dev;

static int reps(uint64_t bytes)
{
	return bytes <= 16 * MiB ? 7 : bytes <= 256 * MiB ? 4 : 3;
}

#define BEST(var, bytes, stmt) do { var = 1e30; \
	for (int r_ = 0; r_ < reps(bytes); r_++) { double t_ = now(); stmt; \
		t_ = now() - t_; if (t_ < var) var = t_; } } while (0)

static int die(const char *what)
{
	printf("xfer_bench: %s failed\n", what);
	exit(1);
}

static void plain(int h2d, void *h, uint64_t n)
{
	if ((h2d ? gpc_cu.MemcpyHtoDAsync(dev, h, n, st) :
		   gpc_cu.MemcpyDtoHAsync(h, dev, n, st)) ||
	    gpc_cu.StreamSynchronize(st))
		die("cuMemcpy");
}

static double reg_t[3];

static void registered(int h2d, uint64_t n)
{
	double t0 = now(), t1, t2;

	if (gpc_cu.MemHostRegister(host, n, GPC_MEMHOSTREGISTER_PORTABLE))
		die("cuMemHostRegister");
	t1 = now();
	plain(h2d, host, n);
	t2 = now();
	if (gpc_cu.MemHostUnregister(host))
		die("cuMemHostUnregister");
	reg_t[0] = t1 - t0;
	reg_t[1] = t2 - t1;
	reg_t[2] = now() - t2;
}

static double gbs(uint64_t n, double t)
{
	return (double)n / t / 1e9;
}

int main(void)
{
	static const uint64_t sizes[] = { 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB,
					  256 * MiB, 1024 * MiB };
	const uint64_t max = 1024 * MiB;
	const char *why = NULL;
	char buf[128];
	gpc_ctx ctx;
	gpc_dev d;
	struct gpc_xfer_stats xs;

	if (gpc_cu_load(&why, buf, sizeof buf))
		return printf("xfer_bench: %s\n", why), 1;
	if (gpc_cu.Init(0) || gpc_cu.DeviceGet(&d, 0) ||
	    gpc_cu.PrimaryCtxRetain(&ctx, d) || gpc_cu.CtxPushCurrent(ctx))
		die("context");
	if (gpc_cu.StreamCreate(&st, GPC_STREAM_NON_BLOCKING) ||
	    gpc_cu.MemAlloc(&dev, max) ||
	    gpc_cu.MemHostAlloc((void **)&pinned, max, 0))
		die("setup");
	host = malloc(max);
	out = malloc(max);
	if (!host || !out)
		die("malloc");
	for (uint64_t i = 0; i < max; i++)
		host[i] = (char)(i * 7 + 3);
	memset(out, 0, max);
	memset(pinned, 1, max);
	if (gpc_xfer_start())
		die("gpc_xfer_start");
	gpc_xfer_stats(&xs);
	printf("# engine defaults: 16 MiB chunks, 3 in flight, %d memcpy threads\n",
	       xs.threads);
	printf("# GB/s; register: total (register ms + copy ms + unregister ms)\n");
	printf("%-8s %-4s %8s %8s %8s %8s %28s %8s\n", "MiB", "dir", "pageable",
	       "pinned", "engine", "staged", "register", "winner");
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		uint64_t n = sizes[s];
		for (int h2d = 1; h2d >= 0; h2d--) {
			double tp, tpin, te, tst = 0, tr, rt[3] = { 1e30, 0, 0 };
			BEST(tp, n, plain(h2d, h2d ? host : out, n));
			BEST(tpin, n, plain(h2d, pinned, n));
			if (h2d)
				BEST(te, n, if (gpc_h2d(dev, n, host, n, n, 1)) die("h2d"));
			else
				BEST(te, n, if (gpc_d2h(out, n, dev, n, n, 1, 0)) die("d2h"));
			if (!h2d)
				BEST(tst, n, if (gpc_d2h(out, n, dev, n, n, 1, GPO_BE_STAGE))
				     die("stage"); gpc_commit());
			tr = 1e30;
			for (int r = 0; r < reps(n); r++) {
				double t = now();
				registered(h2d, n);
				t = now() - t;
				if (t < tr) {
					tr = t;
					memcpy(rt, reg_t, sizeof rt);
				}
			}
			if (!h2d && memcmp(out, host, n))
				die("d2h bytes");
			char r[64];
			snprintf(r, sizeof r, "%.1f (%.2f+%.2f+%.2f)", gbs(n, tr),
				 rt[0] * 1e3, rt[1] * 1e3, rt[2] * 1e3);
			printf("%-8llu %-4s %8.1f %8.1f %8.1f %8s %28s %8s\n",
			       (unsigned long long)(n / MiB), h2d ? "HtoD" : "DtoH",
			       gbs(n, tp), gbs(n, tpin), gbs(n, te),
			       h2d ? "-" : (snprintf(buf, sizeof buf, "%.1f",
						     gbs(n, tst)), buf),
			       r, tr < te ? "register" : "engine");
		}
	}
	gpc_xfer_stop();

	printf("\n# engine, 256 MiB: GB/s HtoD / DtoH by memcpy threads x chunk\n");
	printf("%-8s", "threads");
	static const uint64_t chunks[] = { 4 * MiB, 16 * MiB, 64 * MiB };
	for (int c = 0; c < 3; c++)
		printf(" %14lluMiB", (unsigned long long)(chunks[c] / MiB));
	printf("\n");
	static const int threads[] = { 1, 2, 4, 8, 12, 16 };
	for (int t = 0; t < 6; t++) {
		printf("%-8d", threads[t]);
		for (int c = 0; c < 3; c++) {
			struct gpc_xfer_tune tu = { chunks[c], 3, threads[t], 0, 0 };
			uint64_t n = 256 * MiB;
			double th, td;
			if (gpc_xfer_start_tuned(&tu))
				die("start");
			BEST(th, n, if (gpc_h2d(dev, n, host, n, n, 1)) die("h2d"));
			BEST(td, n, if (gpc_d2h(out, n, dev, n, n, 1, 0)) die("d2h"));
			gpc_xfer_stop();
			printf(" %7.1f / %5.1f", gbs(n, th), gbs(n, td));
		}
		printf("\n");
	}

	printf("\n# pitched: 4096 columns of 8000 doubles, ld 8192 (250 MiB moved)\n");
	if (gpc_xfer_start())
		die("start");
	{
		uint64_t w = 8000 * 8, p = 8192 * 8, rows = 4096, n = w * rows;
		double th, td, tp;
		struct gpc_memcpy2d c;
		BEST(th, n, if (gpc_h2d(dev, p, host, p, w, rows)) die("h2d"));
		BEST(td, n, if (gpc_d2h(out, p, dev, p, w, rows, 0)) die("d2h"));
		memset(&c, 0, sizeof c);
		c.srcMemoryType = GPC_MEMORYTYPE_HOST;
		c.srcHost = host;
		c.srcPitch = p;
		c.dstMemoryType = GPC_MEMORYTYPE_DEVICE;
		c.dstDevice = dev;
		c.dstPitch = p;
		c.WidthInBytes = w;
		c.Height = rows;
		BEST(tp, n, if (gpc_cu.Memcpy2DAsync(&c, st) ||
				gpc_cu.StreamSynchronize(st)) die("2d"));
		printf("engine HtoD %.1f GB/s, DtoH %.1f GB/s; pageable cuMemcpy2D HtoD %.1f GB/s\n",
		       gbs(n, th), gbs(n, td), gbs(n, tp));
	}
	gpc_xfer_stop();
	{       /* start/stop cost of the engine (pinned chunks, threads) */
		double t0 = now(), t1;
		if (gpc_xfer_start())
			die("start");
		t1 = now();
		gpc_xfer_stop();
		printf("\n# gpc_xfer_start %.1f ms, gpc_xfer_stop %.1f ms\n",
		       (t1 - t0) * 1e3, (now() - t1) * 1e3);
	}
	return 0;
}
