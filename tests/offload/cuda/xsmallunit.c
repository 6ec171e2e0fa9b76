/*
 * xsmallunit.c - the small-operand arena (src/offload/cuda/xsmall.c)
 * against a stand-in driver table: operands released in any order (the
 * backend ABI does not fix one) leave the others owned, and the arena is
 * empty again once all are released. Prints one line per check and
 * "xsmallunit: ok"; exit status 1 on the first failure
 * (tests/offload/test_offload_cuda.py runs it).
 */
#include <stdio.h>
#include <stdlib.h>

#include "gpc.h"
#include "xsmall.h"

struct gpc_cu gpc_cu;

static char *dev_mem;

static gpc_res fake_alloc(gpc_dptr *p, size_t n)
{
	dev_mem = malloc(n);
	*p = (gpc_dptr)(uintptr_t)dev_mem;
	return dev_mem ? 0 : 2;
}

static gpc_res fake_free(gpc_dptr p)
{
	free((void *)(uintptr_t)p);
	return 0;
}

static gpc_res fake_hostalloc(void **p, size_t n, unsigned flags)
{
	(void)flags;
	*p = malloc(n);
	return *p ? 0 : 2;
}

static gpc_res fake_freehost(void *p)
{
	free(p);
	return 0;
}

#define CHECK(c, what) do { if (!(c)) { \
	fprintf(stderr, "xsmallunit: FAIL: %s (%s)\n", what, #c); exit(1); } \
	printf("xsmallunit: %s\n", what); } while (0)

int main(void)
{
	gpc_dptr a, b, c, d;

	gpc_cu.MemAlloc = fake_alloc;
	gpc_cu.MemFree = fake_free;
	gpc_cu.MemHostAlloc = fake_hostalloc;
	gpc_cu.MemFreeHost = fake_freehost;

	CHECK(gpc_small_start() == 0, "the arena starts");
	CHECK(gpc_small_alloc(&a, 1000) && gpc_small_alloc(&b, 1000) &&
	      gpc_small_alloc(&c, 1000) && a < b && b < c, "three operands");
	CHECK(gpc_small_owns(b, 1000) == 1 && gpc_small_owns(b, 1025) == -1,
	      "each owned within its size (1000 rounded to 1024)");
	gpc_small_release(c);
	CHECK(gpc_small_owns(b, 1000) == 1 && gpc_small_owns(a, 1000) == 1,
	      "the last released: the others stay owned");
	gpc_small_release(b);
	CHECK(gpc_small_owns(a, 1000) == 1, "the middle one released: the first stays owned");
	gpc_small_release(a);
	CHECK(gpc_small_alloc(&d, 1000) && d == a,
	      "all released (last first): the arena is empty again");
	gpc_small_release(d);
	CHECK(gpc_small_alloc(&a, 1000) && a == d, "and stays so");
	gpc_small_release(a);
	gpc_small_stop();
	printf("xsmallunit: ok\n");
	return 0;
}
