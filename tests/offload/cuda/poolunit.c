/*
 * poolunit.c - the CUDA backend's device-memory pool (src/offload/cuda/
 * pool.c) against a stand-in driver table: reuse of a released buffer,
 * no reuse that wastes more than a quarter, the 1 GiB bound on cached
 * buffers while the device's size is unknown (oldest freed first), a
 * failed allocation that frees the cache and succeeds on the retry,
 * everything freed at stop; then, the device's size known, the bound of
 * the largest recent call: a loop of dgemm-sized calls (3 x 512 MiB)
 * allocates its buffers once and frees none, the cache shrinks once the
 * program left that size (also while a buffer is held across calls,
 * as lapack.c's kept workspace), the cap of a quarter of the device, the
 * fixed bound, and gpc_pool_start's reading of the device's size and of
 * GPU_OFFLOAD_CUDA_POOL=fixed. Prints one
 * line per check and "poolunit: ok"; exit status 1 on the first failure
 * (tests/offload/test_offload_cuda.py runs it). The idle release (a
 * thread and 5 s) is checked on the GPU (tests/offload/cuda/device.sh).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpc.h"

struct gpc_cu gpc_cu;
struct gpc_state gpc_st;

/* The idle thread also releases the copy engine's staging (xfer.h); the
 * engine is not part of this test. */
int gpc_xfer_idle(void);
int gpc_xfer_idle(void)
{
	return 0;
}

static unsigned long long next = 0x1000000, dev_total = 2ull << 30, dev_used;
static int allocs, frees;
static struct { gpc_dptr p; size_t n; } live[64];

static gpc_res fake_alloc(gpc_dptr *p, size_t n)
{
	if (dev_used + n > dev_total)
		return 2;       /* CUDA_ERROR_OUT_OF_MEMORY */
	for (int i = 0; i < 64; i++)
		if (!live[i].p) {
			live[i].p = next;
			live[i].n = n;
			*p = next;
			next += n + 4096;
			dev_used += n;
			allocs++;
			return 0;
		}
	return 2;
}

static gpc_res fake_free(gpc_dptr p)
{
	for (int i = 0; i < 64; i++)
		if (live[i].p == p) {
			dev_used -= live[i].n;
			live[i].p = 0;
			frees++;
			return 0;
		}
	fprintf(stderr, "poolunit: cuMemFree of %#llx, not allocated\n", p);
	exit(1);
}

static gpc_res fake_info(size_t *f, size_t *t)
{
	*t = (size_t)dev_total;
	*f = (size_t)(dev_total - dev_used);
	return 0;
}

#define CHECK(c, what) do { if (!(c)) { \
	fprintf(stderr, "poolunit: FAIL: %s (%s)\n", what, #c); exit(1); } \
	printf("poolunit: %s\n", what); } while (0)

#define MB (1ull << 20)

/* One call as the frontend makes it for a dgemm with beta = 0: three
 * buffers a, b, c handed out, then all three released. */
static void dgemm_call(uint64_t bytes)
{
	gpc_dptr a, b, c;

	if (gpc_pool_alloc(&a, bytes) || gpc_pool_alloc(&b, bytes) ||
	    gpc_pool_alloc(&c, bytes)) {
		fprintf(stderr, "poolunit: FAIL: allocation of a call\n");
		exit(1);
	}
	gpc_pool_free(a);
	gpc_pool_free(b);
	gpc_pool_free(c);
}

int main(void)
{
	gpc_dptr a, b, c, d;

	gpc_cu.MemAlloc = fake_alloc;
	gpc_cu.MemFree = fake_free;

	CHECK(gpc_pool_alloc(&a, 10 * MB) == 0 && allocs == 1, "a first buffer is allocated");
	gpc_pool_free(a);
	CHECK(gpc_pool_cached() == 10 * MB && frees == 0, "a released buffer is kept");
	CHECK(gpc_pool_alloc(&b, 10 * MB - 100) == 0 && b == a && allocs == 1,
	      "and handed out again to a request it fits");
	gpc_pool_free(b);
	CHECK(gpc_pool_alloc(&c, 4 * MB) == 0 && c != a && allocs == 2,
	      "but not to one it would fit with more than a quarter to spare");
	gpc_pool_free(c);
	gpc_pool_trim(0);
	CHECK(gpc_pool_cached() == 0 && frees == 2, "trim(0) frees the cache");

	CHECK(gpc_pool_alloc(&a, 400 * MB) == 0 && gpc_pool_alloc(&b, 400 * MB) == 0 &&
	      gpc_pool_alloc(&c, 300 * MB) == 0, "three big buffers");
	gpc_pool_free(a);
	gpc_pool_free(b);
	CHECK(frees == 2 && gpc_pool_cached() == 800 * MB, "two cached: 800 MiB, under the bound");
	gpc_pool_free(c);
	CHECK(frees == 3 && gpc_pool_cached() == 700 * MB,
	      "a third beyond 1 GiB frees the oldest");

	/* 2 GiB of device memory: 700 MiB cached, 1.5 GiB asked for. */
	CHECK(gpc_pool_alloc(&d, 1536 * MB) == 0 && gpc_pool_cached() == 0 && frees == 5,
	      "an allocation that fails frees the cache and succeeds on the retry");
	CHECK(gpc_pool_alloc(&a, 1024 * MB) != 0, "one that still fails fails");
	gpc_pool_release_all();
	CHECK(dev_used == 0 && allocs == frees, "stop frees every buffer, handed out or not");

	/* The bound of the largest recent call (the device's size known). */
	dev_total = 64ull << 30;
	gpc_pool_configure(dev_total, 0);
	allocs = frees = 0;
	for (int i = 0; i < 10; i++)
		dgemm_call(512 * MB);
	CHECK(allocs == 3 && frees == 0 && gpc_pool_cached() == 1536 * MB,
	      "ten calls of 3 x 512 MiB allocate 3 buffers once and free none");
	CHECK(gpc_pool_keep() == 1536 * MB, "the bound is the call's 1.5 GiB");
	for (int i = 0; i < 8; i++) {
		CHECK(gpc_pool_alloc(&a, 1 * MB) == 0, "a small call");
		gpc_pool_free(a);
	}
	CHECK(gpc_pool_keep() == 1024 * MB && gpc_pool_cached() <= 1024 * MB &&
	      frees >= 1, "eight small calls later the bound is 1 GiB again");
	gpc_pool_release_all();

	/* The same with a buffer held across calls (lapack.c's kept
	 * workspace, gpc_pool_hold): the calls still end, so the cache
	 * still shrinks once the program left the size. */
	gpc_pool_configure(dev_total, 0);
	allocs = frees = 0;
	/* taken during a run, while the call's buffers are out */
	CHECK(gpc_pool_alloc(&a, 512 * MB) == 0 && gpc_pool_alloc(&b, 512 * MB) == 0 &&
	      gpc_pool_alloc(&c, 512 * MB) == 0 && gpc_pool_alloc(&d, 4 * MB) == 0,
	      "a call that keeps a workspace");
	gpc_pool_hold(d);
	gpc_pool_free(a);
	gpc_pool_free(b);
	gpc_pool_free(c);
	for (int i = 0; i < 9; i++)
		dgemm_call(512 * MB);
	CHECK(gpc_pool_keep() >= 1536 * MB && frees == 0,
	      "with it held, the bound is at least the calls' 1.5 GiB");
	for (int i = 0; i < 8; i++) {
		CHECK(gpc_pool_alloc(&a, 1 * MB) == 0, "a small call");
		gpc_pool_free(a);
	}
	CHECK(gpc_pool_keep() == 1024 * MB && gpc_pool_cached() <= 1024 * MB,
	      "eight small calls later the bound is 1 GiB again, a workspace held");
	gpc_pool_free(d);
	CHECK(gpc_pool_alloc(&a, 1 * MB) == 0, "a small call after the workspace went back");
	gpc_pool_free(a);
	CHECK(gpc_pool_keep() == 1024 * MB, "and the bound stays 1 GiB");
	gpc_pool_release_all();

	/* Capped at a quarter of the device: 4 GiB -> 1 GiB. */
	dev_total = 4ull << 30;
	gpc_pool_configure(dev_total, 0);
	allocs = frees = 0;
	for (int i = 0; i < 4; i++)
		dgemm_call(512 * MB);
	CHECK(gpc_pool_keep() == 1024 * MB && gpc_pool_cached() <= 1024 * MB &&
	      allocs == 3 + 3 && frees == 4,
	      "on a 4 GiB device at most 1 GiB is kept (a buffer freed per call)");
	gpc_pool_release_all();

	/* The fixed bound (GPU_OFFLOAD_CUDA_POOL=fixed): as before. */
	dev_total = 64ull << 30;
	gpc_pool_configure(dev_total, 1);
	allocs = frees = 0;
	for (int i = 0; i < 4; i++)
		dgemm_call(512 * MB);
	CHECK(allocs == 6 && frees == 4, "the fixed bound frees one buffer per call");
	gpc_pool_release_all();

	/* gpc_pool_start (the backend's start) asks the driver for the
	 * device's size and reads GPU_OFFLOAD_CUDA_POOL. */
	gpc_cu.MemGetInfo = fake_info;
	unsetenv("GPU_OFFLOAD_CUDA_POOL");
	CHECK(gpc_pool_start() == 0, "start");
	allocs = frees = 0;
	for (int i = 0; i < 4; i++)
		dgemm_call(512 * MB);
	CHECK(allocs == 3 && frees == 0, "started: the bound of the largest recent call");
	gpc_pool_release_all();
	setenv("GPU_OFFLOAD_CUDA_POOL", "fixed", 1);
	CHECK(gpc_pool_start() == 0, "start, fixed");
	allocs = frees = 0;
	for (int i = 0; i < 4; i++)
		dgemm_call(512 * MB);
	CHECK(allocs == 6 && frees == 4, "GPU_OFFLOAD_CUDA_POOL=fixed: the fixed bound");
	gpc_pool_release_all();
	CHECK(dev_used == 0, "nothing left");
	printf("poolunit: ok\n");
	return 0;
}
