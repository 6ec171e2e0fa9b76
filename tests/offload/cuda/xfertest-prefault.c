/*
 * xfertest-prefault.c - xfertest's part for the prefault workers
 * (src/offload/cuda/xfault.c): fresh memory made resident and left zero,
 * the pages between padded rows left alone, memory with contents not
 * changed, the copy out, commit and discard waiting for a prefault, and
 * nothing queued for small, unmapped or read-only ranges or once stopped.
 * Apart from the copies (xfertest.c) because it is about the memory
 * around them: residency, not bytes copied.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"
#include "xfault.h"
#include "xfer.h"
#include "xfertest.h"

static int saw_waiter, hook_calls;

/* A prefault worker, before each piece: hold on until somebody waits for
 * the job (bounded: a copy that does not wait fails the check instead of
 * hanging). */
static void hold_until_waited(void)
{
	__atomic_add_fetch(&hook_calls, 1, __ATOMIC_SEQ_CST);
	for (long i = 0; i < 20000000 && !gpc_xfault_waiting(); i++)
		sched_yield();
	if (gpc_xfault_waiting())
		__atomic_store_n(&saw_waiter, 1, __ATOMIC_SEQ_CST);
}

/* Pages of [p, p + n) resident now, or -1. */
static long resident(void *p, uint64_t n)
{
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE), np = (n + pg - 1) / pg;
	unsigned char *v = malloc(np);
	long r = 0;

	if (!v || mincore(p, n, v) != 0) {
		free(v);
		return -1;
	}
	for (uint64_t i = 0; i < np; i++)
		r += v[i] & 1;
	free(v);
	return r;
}

void prefaults(void)
{
	const uint64_t big = 24ull << 20, w = 3000, rows = big / 4096, p = 4096;
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	struct gpc_xfault_stats fs, fs0;
	unsigned char *in = hbuf(rows * p, -1), *copy, *fresh;
	gpc_dptr dev = dalloc(rows * p);
	int populates;

	start("prefault", 1 << 20, 3, 2, 0, 0);
	CHECK(gpc_h2d(dev, p, in, p, w, rows) == 0, "prefault: h2d");

	/* Fresh memory: resident afterwards (where the kernel has
	 * MADV_POPULATE_WRITE), still zero, and the copy out right. */
	fresh = mmap(NULL, big, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(fresh != MAP_FAILED, "prefault: mmap");
	if (fresh == MAP_FAILED)
		return;
	CHECK(resident(fresh, big) == 0, "prefault: fresh memory resident "
	      "before (%ld pages)", resident(fresh, big));
	gpc_xfault_stats(&fs0);
	gpc_prefault(fresh, p, w, rows);
	gpc_xfault_wait();
	gpc_xfault_stats(&fs);
	CHECK(fs.jobs == fs0.jobs + 1 && fs.pieces > fs0.pieces,
	      "prefault: one job, %llu pieces",
	      (unsigned long long)(fs.pieces - fs0.pieces));
	populates = fs.errors == fs0.errors;
	if (populates)
		CHECK(resident(fresh, big) >= (long)(((rows - 1) * p + w + pg - 1) / pg),
		      "prefault: %ld of %llu pages resident", resident(fresh, big),
		      (unsigned long long)(big / pg));
	else
		printf("xfertest: this kernel has no MADV_POPULATE_WRITE; "
		       "prefault did nothing (a hint)\n");
	CHECK(all(fresh, big, 0), "prefault changed fresh memory");
	CHECK(gpc_d2h(fresh, p, dev, p, w, rows, 0) == 0 &&
	      same(fresh, p, in, p, w, rows, 0), "prefault: d2h into it");

	/* Rows a page or more apart (a block of a larger matrix): the
	 * pages between them, which the copy out never writes, are not
	 * faulted in (the program's memory would grow by pitch/width times
	 * the result's). */
	{
		const uint64_t gp = 16 * pg, gr = (8ull << 20) / gp;
		unsigned char *gap = mmap(NULL, gr * gp, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(gap != MAP_FAILED, "prefault: mmap of a padded result");
		if (gap != MAP_FAILED) {
			gpc_prefault(gap, gp, pg, gr);
			gpc_xfault_wait();
			CHECK(resident(gap, gr * gp) <= (long)(2 * gr),
			      "prefault: %ld pages of a result of %llu rows of "
			      "one page each resident", resident(gap, gr * gp),
			      (unsigned long long)gr);
			munmap(gap, gr * gp);
		}
	}

	/* Memory with contents, rows with padding: not a byte changes. */
	copy = hbuf(rows * p, -1);
	{
		unsigned char *ref = malloc(rows * p);
		memcpy(ref, copy, rows * p);
		gpc_prefault(copy + 100, p, w, rows - 1);
		gpc_xfault_wait();
		CHECK(ref && !memcmp(ref, copy, rows * p),
		      "prefault changed memory with contents");
		free(ref);
	}

	/* The copy out, commit and discard wait for a prefault first. */
	gpc_xfault_set_hook(hold_until_waited);
	saw_waiter = 0;
	gpc_prefault(copy, p, w, rows);
	CHECK(gpc_d2h(copy, p, dev, p, w, rows, 0) == 0 &&
	      same(copy, p, in, p, w, rows, -1), "prefault: d2h");
	CHECK(saw_waiter, "d2h did not wait for the prefault of its memory");
	saw_waiter = 0;
	gpc_prefault(copy, p, w, rows);
	gpc_discard();
	CHECK(saw_waiter, "discard did not wait for a prefault");
	saw_waiter = 0;
	gpc_prefault(copy, p, w, rows);
	gpc_commit();
	CHECK(saw_waiter, "commit did not wait for a prefault");
	gpc_xfault_set_hook(NULL);

	/* Too small: not queued. Unmapped or read-only: no harm, nothing
	 * written. */
	gpc_xfault_stats(&fs0);
	gpc_prefault(copy, p, w, 10);
	gpc_xfault_stats(&fs);
	CHECK(fs.jobs == fs0.jobs, "prefault: a small range was queued");
	CHECK(munmap(fresh, big) == 0, "munmap");
	gpc_prefault(fresh, p, w, rows);
	gpc_xfault_wait();
	fresh = mmap(NULL, big, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (fresh != MAP_FAILED) {
		gpc_prefault(fresh, p, w, rows);
		gpc_xfault_wait();
		CHECK(all(fresh, big, 0), "prefault wrote read-only memory");
		munmap(fresh, big);
	}
	stop("prefault");
	/* Stopped: nothing is queued, nothing runs. */
	gpc_xfault_stats(&fs0);
	gpc_prefault(copy, p, w, rows);
	gpc_xfault_stats(&fs);
	CHECK(fs.jobs == fs0.jobs && fs.workers == 0, "prefault after stop");
	(void)gpc_cu.MemFree(dev);
	free(in);
	free(copy);
}

