/*
 * xfertest-stage.c - xfertest's parts for the staging of results and for
 * failures: injected driver failures (the fake's fakedev_ctl) at every
 * copy and stage, staging without pinned memory, registration refused,
 * the staging bound, trim and the idle release (from another thread, as
 * the backend's idle thread calls it), and a staged result filled in
 * parts. Apart from the plain round trips (xfertest.c) because these
 * check what a result's destination holds when a copy did not complete.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "xfault.h"
#include "xfer.h"
#include "xfertest.h"

/* gpc_xfer_idle from another thread, as the backend's idle thread calls it. */
static void *idle_thread(void *arg)
{
	*(int *)arg = gpc_xfer_idle();
	return NULL;
}

static int idle_elsewhere(void)
{
	pthread_t t;
	int freed = -1;

	if (pthread_create(&t, NULL, idle_thread, &freed) == 0)
		pthread_join(t, NULL);
	return freed;
}

/* Injected failures (the fake only). */
void failures(void)
{
	const uint64_t ch = 4096, w = 1000, rows = 20, p = 1024;
	unsigned char *in = hbuf(rows * p, -1), *out = hbuf(rows * p, 0xa5);
	unsigned char *out2 = hbuf(rows * p, 0xa5);
	gpc_dptr dev = dalloc(rows * p), dev2 = dalloc(rows * p);
	struct gpc_xfer_stats st;
	int rc;

	start("fail", ch, 2, 2, 0, 0);
	CHECK(gpc_h2d(dev, p, in, p, w, rows) == 0, "fail: h2d");
	CHECK(gpc_h2d(dev2, p, in, p, w, rows) == 0, "fail: h2d 2");
	for (long n = 1; n <= 6; n++) {
		const char *kind = n % 2 ? "fail_copy" : "fail_exec";
		ctl(kind, (n + 1) / 2);
		rc = gpc_h2d(dev, p, in, p, w, rows);
		CHECK(rc == -1, "fail: h2d with %s %ld: %d", kind, (n + 1) / 2, rc);
		ctl(kind, 0);
		CHECK(gpc_h2d(dev, p, in, p, w, rows) == 0, "fail: h2d after %s", kind);
		/* A failed staged copy leaves the destination alone, and so do
		 * commit and discard afterwards. */
		ctl(kind, 1);   /* a staged copy is one DMA */
		rc = gpc_d2h(out, p, dev, p, w, rows, GPO_BE_STAGE);
		ctl(kind, 0);
		CHECK(rc == -1 && all(out, rows * p, 0xa5), "fail: staged %s: %d",
		      kind, rc);
		gpc_commit();
		CHECK(all(out, rows * p, 0xa5), "fail: commit after a failed stage");
		/* Two staged results, the second fails: the frontend discards
		 * both. */
		CHECK(gpc_d2h(out, p, dev, p, w, rows, GPO_BE_STAGE) == 0, "stage 1");
		ctl(kind, 1);
		rc = gpc_d2h(out2, p, dev2, p, w, rows, GPO_BE_STAGE);
		ctl(kind, 0);
		CHECK(rc == -1, "fail: second stage %s", kind);
		gpc_discard();
		CHECK(all(out, rows * p, 0xa5) && all(out2, rows * p, 0xa5),
		      "fail: discard after a failed second stage (%s)", kind);
		/* Straight d2h fails too (the destination may be partly
		 * written: pure outputs only). */
		ctl(kind, (n + 1) / 2);
		rc = gpc_d2h(out2, p, dev, p, w, rows, 0);
		ctl(kind, 0);
		CHECK(rc == -1, "fail: d2h with %s: %d", kind, rc);
		memset(out2, 0xa5, rows * p);
	}
	/* After all that the engine still copies right. */
	CHECK(gpc_d2h(out, p, dev, p, w, rows, 0) == 0 &&
	      same(out, p, in, p, w, rows, 0xa5), "fail: d2h afterwards");
	stop("fail");

	/* No pinned memory for staging: plain blocks, same results. */
	start("nopin", ch, 3, 2, 0, 0);
	ctl("fail_hostalloc", 1);
	memset(out, 0xa5, rows * p);
	CHECK(gpc_d2h(out, p, dev, p, w, rows, GPO_BE_STAGE) == 0 &&
	      all(out, rows * p, 0xa5), "nopin: stage");
	gpc_xfer_stats(&st);
	CHECK(st.stage_blocks == 1 && st.stage_pinned == 0, "nopin: %d blocks, "
	      "%d pinned", st.stage_blocks, st.stage_pinned);
	gpc_commit();
	CHECK(same(out, p, in, p, w, rows, 0xa5), "nopin: commit");
	ctl("fail_hostalloc", 0);
	stop("nopin");
	ctl("fail_hostalloc", 1);
	CHECK(gpc_xfer_start() == -1, "start without pinned memory must fail");
	ctl("fail_hostalloc", 0);
	CHECK(ntasks_settled() == base_tasks && get("pinned") == 0, "failed start left %d "
	      "threads, %ld pinned", ntasks_settled(), get("pinned"));

	/* Registration: used from reg_min on; refused -> staged instead. */
	start("reg", ch, 3, 2, 4096, 0);
	memset(out, 0xa5, rows * p);
	CHECK(gpc_h2d(dev2, p, in, p, w, rows) == 0 &&
	      gpc_d2h(out, p, dev2, p, w, rows, 0) == 0 &&
	      same(out, p, in, p, w, rows, 0xa5), "reg: round trip");
	gpc_xfer_stats(&st);
	CHECK(st.registered == 2 && get("registered") == 0, "reg: %llu "
	      "registered, %ld left", (unsigned long long)st.registered,
	      get("registered"));
	ctl("fail_register", 1);
	memset(out, 0xa5, rows * p);
	CHECK(gpc_h2d(dev2, p, in, p, w, rows) == 0 &&
	      gpc_d2h(out, p, dev2, p, w, rows, 0) == 0 &&
	      same(out, p, in, p, w, rows, 0xa5), "reg refused: round trip");
	ctl("fail_register", 0);
	stop("reg");

	/* The staging bound and trim. */
	start("keep", ch, 2, 1, 0, 4ull << 20);
	CHECK(gpc_d2h(out, p, dev, p, w, rows, GPO_BE_STAGE) == 0, "keep: stage");
	gpc_commit();
	gpc_xfer_stats(&st);
	CHECK(st.stage_blocks == 1, "keep: block kept (%d)", st.stage_blocks);
	long allocs = get("hostallocs");
	for (int i = 0; i < 3; i++) {
		CHECK(gpc_d2h(out, p, dev, p, w, rows, GPO_BE_STAGE) == 0, "keep: again");
		gpc_commit();
		gpc_xfer_trim();
	}
	CHECK(get("hostallocs") == allocs, "keep: staging reused (%ld allocs)",
	      get("hostallocs") - allocs);
	{       /* beyond the bound: released at the end of the call */
		uint64_t big = 5ull << 20;
		unsigned char *bi = hbuf(big, -1), *bo = hbuf(big, 0);
		gpc_dptr bd = dalloc(big);
		CHECK(gpc_h2d(bd, big, bi, big, big, 1) == 0 &&
		      gpc_d2h(bo, big, bd, big, big, 1, GPO_BE_STAGE) == 0,
		      "keep: big stage");
		gpc_commit();
		CHECK(!memcmp(bi, bo, big), "keep: big commit");
		gpc_xfer_stats(&st);
		CHECK(st.stage_bytes <= (4ull << 20), "keep: %llu bytes kept",
		      (unsigned long long)st.stage_bytes);
		(void)gpc_cu.MemFree(bd);
		free(bi);
		free(bo);
	}
	CHECK(gpc_d2h(out, p, dev, p, w, rows, GPO_BE_STAGE) == 0, "keep: small");
	gpc_commit();
	for (int i = 0; i < GPC_STAGE_IDLE_CALLS; i++) {   /* calls that stage nothing else */
		CHECK(gpc_d2h(out2, p, dev, p, w, 1, GPO_BE_STAGE) == 0, "idle");
		gpc_discard();
	}
	gpc_xfer_trim();
	gpc_xfer_stats(&st);
	CHECK(st.stage_blocks == 1, "trim: %d blocks (the used one stays)",
	      st.stage_blocks);
	/* Idle release: not while results are staged, else every block. */
	memset(out, 0xa5, rows * p);
	CHECK(gpc_d2h(out, p, dev, p, w, rows, GPO_BE_STAGE) == 0, "idle: stage");
	CHECK(idle_elsewhere() == 0, "idle freed blocks under staged results");
	gpc_commit();
	CHECK(same(out, p, in, p, w, rows, 0xa5), "idle: commit after idle");
	CHECK(idle_elsewhere() >= 1, "idle freed nothing");
	gpc_xfer_stats(&st);
	CHECK(st.stage_blocks == 0 && get("pinned") == 2, "idle: %d blocks, "
	      "%ld pinned (the two chunks)", st.stage_blocks, get("pinned"));
	stop("keep");
	(void)gpc_cu.MemFree(dev);
	(void)gpc_cu.MemFree(dev2);
	free(in);
	free(out);
	free(out2);
}

/* A staged result filled in parts (gpc_stage_open/part/close, the gemm
 * pipeline's in-out C): nothing reaches the destination before close and
 * commit, nothing of an unclosed one ever, and the parts land exactly;
 * an injected failure of a part (the fake) leaves the destination. */
void stage_parts(void)
{
	const uint64_t w = 1000, rows = 20, p = 1024;
	unsigned char *in = hbuf(rows * p, -1), *out = hbuf(rows * p, 0xa5);
	gpc_dptr dev = dalloc(rows * p);

	start("parts", 4096, 3, 2, 0, 0);
	CHECK(gpc_h2d(dev, p, in, p, w, rows) == 0, "parts: h2d");
	CHECK(gpc_stage_open(out, p, w, rows) == 0, "parts: open");
	CHECK(gpc_stage_open(out, p, w, rows) == -1, "parts: a second open");
	CHECK(gpc_stage_part(dev, p, 0, 7) == 0 &&
	      gpc_stage_part(dev + 7 * p, p, 7, 8) == 0 &&
	      gpc_stage_part(dev + 15 * p, p, 15, 5) == 0, "parts: parts");
	CHECK(gpc_stage_part(dev, p, 15, 6) == -1, "parts: beyond the rows");
	CHECK(all(out, rows * p, 0xa5), "parts: written before commit");
	gpc_commit();
	CHECK(all(out, rows * p, 0xa5), "parts: an open result committed");
	CHECK(gpc_stage_close() == -1, "parts: closed after commit");
	CHECK(gpc_stage_open(out, p, w, rows) == 0 &&
	      gpc_stage_part(dev, p, 0, rows) == 0 && gpc_stage_close() == 0,
	      "parts: whole");
	CHECK(all(out, rows * p, 0xa5), "parts: written before commit");
	gpc_commit();
	CHECK(same(out, p, in, p, w, rows, 0xa5), "parts: commit");
	memset(out, 0xa5, rows * p);
	CHECK(gpc_stage_open(out, p, w, rows) == 0 &&
	      gpc_stage_part(dev, p, 0, 10) == 0 && gpc_stage_close() == 0,
	      "parts: half");
	gpc_discard();
	gpc_commit();
	CHECK(all(out, rows * p, 0xa5), "parts: written after discard");
	if (ctl) {
		CHECK(gpc_stage_open(out, p, w, rows) == 0, "parts: open 3");
		ctl("fail_exec", 1);
		CHECK(gpc_stage_part(dev, p, 0, rows) == -1, "parts: failed part");
		ctl("fail_exec", 0);
		gpc_discard();
		gpc_commit();
		CHECK(all(out, rows * p, 0xa5), "parts: written after a failure");
	}
	stop("parts");
	(void)gpc_cu.MemFree(dev);
	free(in);
	free(out);
}

