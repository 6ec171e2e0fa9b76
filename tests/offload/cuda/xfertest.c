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
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"
#include "xfault.h"
#include "xfer.h"
#include "../ntasks.h"

static int checks, failed;
static int base_tasks;          /* threads before the engine started (the
                                 * real driver has its own) */
static void (*ctl)(const char *, long);
static long (*get)(const char *);

#define CHECK(c, ...) do { checks++; if (!(c)) { failed++; \
	printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); \
	printf("\n"); } } while (0)

static unsigned long long rng = 88172645463325252ull;
static unsigned char rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (unsigned char)(rng >> 24);
}

static unsigned char *hbuf(uint64_t bytes, int fill)
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
static int same(const unsigned char *dst, uint64_t dp, const unsigned char *src,
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

static int all(const unsigned char *p, uint64_t n, int v)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

static gpc_dptr dalloc(uint64_t bytes)
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
static int ntasks_settled(void)
{
	int n = ntasks();

	for (int i = 0; i < 100000 && n > base_tasks; i++) {
		sched_yield();
		n = ntasks();
	}
	return n;
}

static void start(const char *cfg, uint64_t chunk, int nbuf, int threads,
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

static void stop(const char *cfg)
{
	gpc_xfer_stop();
	CHECK(ntasks_settled() == base_tasks, "%s: %d threads after stop (%d before)",
	      cfg, ntasks_settled(), base_tasks);
	if (get)
		CHECK(get("pinned") == 0 && get("registered") == 0,
		      "%s: pinned %ld registered %ld after stop", cfg,
		      get("pinned"), get("registered"));
}

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

/* ---- Prefault (xfault.h) ---------------------------------------------- */

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

static void prefaults(void)
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

/* Injected failures (the fake only). */
static void failures(void)
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
static void stage_parts(void)
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
