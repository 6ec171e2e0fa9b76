/*
 * testbe.c - build/libgpuoffload-test.so: a GPU backend of the private ABI
 * (src/offload/backend.h) that runs on the CPU, so that the frontend's
 * dispatch, copies, LAPACK semantics and every fallback are tested without
 * a GPU. Its "device memory" is malloc'd; its kernels are the reference
 * implementations of kernels.c.
 *
 * Controlled by the environment, read at start():
 *   GPU_OFFLOAD_TEST_JOURNAL=path  one line per event, appended:
 *                                  "start", "stop", "run <op> <prec> m n k
 *                                  nrhs int64 pid", "fail <step> <op>"
 *   GPU_OFFLOAD_TEST_FAIL=step[@I][:N][,...]  make step fail (start,
 *                                  alloc, to_device, kernel, to_host):
 *                                  every time, or only its N-th call
 *                                  (from 1); to_host@I: only copies of
 *                                  operand I of the last kernel (counted
 *                                  alone). A failing to_host first writes
 *                                  garbage into the first row it would
 *                                  have written (as a DMA cut short): the
 *                                  caller's memory without GPO_BE_STAGE,
 *                                  its own staging with it
 *   GPU_OFFLOAD_TEST_SLOW=us       every kernel takes this much longer
 *   GPU_OFFLOAD_TEST_CORRUPT=1     add 1 to the first element of each
 *                                  result (for verify mode's tests)
 *   GPU_OFFLOAD_TEST_MEM=bytes     device memory size (default 16 GiB);
 *                                  allocations beyond it fail
 *   GPU_OFFLOAD_TEST_BLAS=1        start(), stop() and memory() call the
 *                                  process's dgemm_ (as a backend whose
 *                                  libraries use host BLAS might)
 *   GPU_OFFLOAD_TEST_BASE=1        answer a table whose size is the ABI 2
 *                                  base (GPO_BACKEND_SIZE_BASE): the
 *                                  optional entries are then absent for
 *                                  the frontend, though set
 * Built with -DGPO_TEST_ABI=N it answers ABI version N instead (the
 * mismatch test).
 *
 * to_device journals "to_device <width> <rows>" (the copies a call made:
 * residency's tests count them).
 *
 * prefault (the optional entry) only journals "prefault <width> <rows>
 * <pitch>", so that tests see which ranges the frontend hands it.
 *
 * to_host with GPO_BE_STAGE copies into its own (malloc'd) staging and
 * remembers the destination; commit() writes the destinations, discard()
 * forgets them; the journal has a line "to_host <operand> <flags>" per
 * copy, so that tests see which operands the frontend staged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testbe.h"

#ifndef GPO_TEST_ABI
#define GPO_TEST_ABI GPO_BACKEND_ABI
#endif

enum { S_START, S_ALLOC, S_TO_DEVICE, S_KERNEL, S_TO_HOST, S_N };
static const char *const tb_step[S_N] = { "start", "alloc", "to_device",
					  "kernel", "to_host" };
static long tb_fail_at[S_N];    /* 0 never, -1 always, N: the N-th call */
static int tb_fail_opnd[S_N];   /* -1 any operand, else only this one */
static long tb_calls[S_N];
static void *tb_last_buf[4];    /* the last kernel's operands */
static long tb_slow_us;
static int tb_corrupt;
static uint64_t tb_mem_total = 16ull << 30, tb_mem_used;
static const char *tb_journal;
static int tb_op;

static long tb_num(const char *s)
{
	long v = 0;

	while (s && *s >= '0' && *s <= '9')
		v = v * 10 + (*s++ - '0');
	return v;
}

static void tb_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void tb_log(const char *fmt, ...)
{
	char line[256];
	va_list ap;
	int n, fd, e = errno;

	if (!tb_journal)
		return;
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof line - 2)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	fd = open(tb_journal, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0) {
		if (write(fd, line, (size_t)n) < 0) {
			/* the test will see the line missing */
		}
		close(fd);
	}
	errno = e;
}

static int tb_fails(int step)
{
	long at = tb_fail_at[step], n = ++tb_calls[step];

	if (at == -1 || (at > 0 && n == at)) {
		tb_log("fail %s %d", tb_step[step], tb_op);
		return 1;
	}
	return 0;
}

static void tb_config(void)
{
	const char *f = getenv("GPU_OFFLOAD_TEST_FAIL");
	const char *s;

	memset(tb_fail_at, 0, sizeof tb_fail_at);
	memset(tb_calls, 0, sizeof tb_calls);
	for (int i = 0; i < S_N; i++)
		tb_fail_opnd[i] = -1;
	while (f && *f) {
		for (int i = 0; i < S_N; i++) {
			size_t len = strlen(tb_step[i]);
			const char *o = f + len;
			int opnd = -1;
			if (strncmp(f, tb_step[i], len) != 0)
				continue;
			if (*o == '@') {
				opnd = (int)tb_num(o + 1);
				for (o++; *o >= '0' && *o <= '9'; o++) {
				}
			}
			if (*o == ':' || *o == ',' || !*o) {
				tb_fail_at[i] = *o == ':' ? tb_num(o + 1) : -1;
				tb_fail_opnd[i] = opnd;
			}
		}
		f = strchr(f, ',');
		f = f ? f + 1 : NULL;
	}
	tb_journal = getenv("GPU_OFFLOAD_TEST_JOURNAL");
	if (tb_journal && !*tb_journal)
		tb_journal = NULL;
	tb_slow_us = tb_num(getenv("GPU_OFFLOAD_TEST_SLOW"));
	s = getenv("GPU_OFFLOAD_TEST_CORRUPT");
	tb_corrupt = s && s[0] == '1';
	s = getenv("GPU_OFFLOAD_TEST_MEM");
	if (s && *s)
		tb_mem_total = (uint64_t)tb_num(s);
}

/* A 2x2 dgemm_ through the process's global scope: the wrapper, when the
 * offloader is preloaded. */
static void tb_blas(void)
{
	typedef void gemm_t(const char *, const char *, const int *,
			    const int *, const int *, const double *,
			    const double *, const int *, const double *,
			    const int *, const double *, double *,
			    const int *, size_t, size_t);
	const char *s = getenv("GPU_OFFLOAD_TEST_BLAS");
	gemm_t *gemm;
	double a[4] = { 1, 2, 3, 4 }, c[4], one = 1, zero = 0;
	int two = 2;

	if (!s || s[0] != '1')
		return;
	gemm = (gemm_t *)dlsym(RTLD_DEFAULT, "dgemm_");
	if (gemm) {
		gemm("N", "N", &two, &two, &two, &one, a, &two, a, &two, &zero,
		     c, &two, 1, 1);
		tb_log("blas %g", c[0]);
	}
}

static int tb_start(void)
{
	tb_config();
	if (tb_fails(S_START))
		return -1;
	tb_blas();
	tb_log("start");
	return 0;
}

static void tb_stop(void)
{
	tb_blas();
	tb_log("stop");
}

static int tb_memory(uint64_t *free_bytes, uint64_t *total_bytes)
{
	tb_blas();
	*total_bytes = tb_mem_total;
	*free_bytes = tb_mem_total > tb_mem_used ? tb_mem_total - tb_mem_used : 0;
	return 0;
}

/* Each allocation carries its size in front, for the accounting. */
static int tb_alloc(void **dev, uint64_t bytes)
{
	uint64_t *p;

	if (tb_fails(S_ALLOC) || bytes > tb_mem_total - tb_mem_used)
		return -1;
	p = malloc(bytes + 16);
	if (!p)
		return -1;
	p[0] = bytes;
	tb_mem_used += bytes;
	*dev = p + 2;   /* released by tb_release, from p + 2 */
	/* cppcheck-suppress memleak */
	return 0;
}

static void tb_release(void *dev)
{
	uint64_t *p = (uint64_t *)dev - 2;

	tb_mem_used -= p[0];
	free(p);
}

static void tb_copy(void *dst, uint64_t dpitch, const void *src,
		    uint64_t spitch, uint64_t width, uint64_t rows)
{
	for (uint64_t r = 0; r < rows; r++)
		memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch,
		       width);
}

static int tb_to_device(void *dev, uint64_t dpitch, const void *host,
			uint64_t spitch, uint64_t width, uint64_t rows)
{
	if (tb_fails(S_TO_DEVICE))
		return -1;
	tb_copy(dev, dpitch, host, spitch, width, rows);
	tb_log("to_device %llu %llu", (unsigned long long)width,
	       (unsigned long long)rows);
	return 0;
}

/* Results staged by to_host(GPO_BE_STAGE), until commit or discard. */
static struct tb_staged {
	void *dst, *buf;
	uint64_t dpitch, width, rows;
} tb_st[8];
static int tb_nst;

static int tb_operand(const void *dev)
{
	for (int i = 0; i < 4; i++)
		if (tb_last_buf[i] && tb_last_buf[i] == dev)
			return i;
	return -1;
}

static int tb_to_host(void *host, uint64_t dpitch, const void *dev,
		      uint64_t spitch, uint64_t width, uint64_t rows,
		      unsigned flags)
{
	int opnd = tb_operand(dev);
	struct tb_staged *s = NULL;
	void *dst = host;
	uint64_t pitch = dpitch;

	tb_log("to_host %d %u", opnd, flags);
	if (flags & GPO_BE_STAGE) {
		if (tb_nst == (int)(sizeof tb_st / sizeof tb_st[0]))
			return -1;
		s = &tb_st[tb_nst];
		s->buf = malloc(width && rows ? width * rows : 1);
		if (!s->buf)
			return -1;
		dst = s->buf;
		pitch = width;
	}
	if ((tb_fail_opnd[S_TO_HOST] < 0 || tb_fail_opnd[S_TO_HOST] == opnd) &&
	    tb_fails(S_TO_HOST)) {
		if (rows && width)      /* a copy cut short */
			memset(dst, 0x5a, width);
		if (s)
			free(s->buf);
		return -1;
	}
	tb_copy(dst, pitch, dev, spitch, width, rows);
	if (s) {
		s->dst = host;
		s->dpitch = dpitch;
		s->width = width;
		s->rows = rows;
		tb_nst++;
	}
	return 0;
}

/* The operand holding each operation's main result (for CORRUPT). */
static int tb_result(int op)
{
	switch (op) {
	case GPO_OP_GEMM: case GPO_OP_SYMM: case GPO_OP_HEMM:
	case GPO_OP_GEMV: case GPO_OP_SYR2K: case GPO_OP_HER2K: case GPO_OP_GESV:
	case GPO_OP_GETRS: return 2;
	case GPO_OP_SYRK: case GPO_OP_HERK: case GPO_OP_TRMM: case GPO_OP_TRSM:
	case GPO_OP_POTRS: case GPO_OP_POSV: case GPO_OP_SYEV:
	case GPO_OP_HEEV: case GPO_OP_SYEVD: case GPO_OP_HEEVD:
	case GPO_OP_GESVD: case GPO_OP_GESDD: case GPO_OP_GELS: return 1;
	default: return 0;
	}
}

static int tb_run(struct gpo_kernel *k)
{
	int rc;

	tb_op = k->op;
	if (k->size < sizeof *k)
		return -1;
	memcpy(tb_last_buf, k->buf, sizeof tb_last_buf);
	tb_log("run %d %c %lld %lld %lld %lld %d %d", k->op, k->prec,
	       (long long)k->m, (long long)k->n, (long long)k->k,
	       (long long)k->nrhs, k->int64, (int)getpid());
	if (tb_fails(S_KERNEL))
		return -1;
	if (tb_slow_us > 0) {
		struct timespec ts = { tb_slow_us / 1000000,
				       (tb_slow_us % 1000000) * 1000 };
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
		}
	}
	rc = tb_kernel(k);
	if (rc == 0 && tb_corrupt) {
		int i = tb_result(k->op);
		void *p = k->buf[i];
		int real_arr = (k->op >= GPO_OP_SYEV && k->op <= GPO_OP_GESDD && i == 1);
		if (p) {
			if (k->prec == 's' || (k->prec == 'c' && real_arr) || k->prec == 'c')
				((float *)p)[0] += 1.0f;
			else
				((double *)p)[0] += 1.0;
		}
	}
	return rc;
}

static void tb_discard(void)
{
	for (int i = 0; i < tb_nst; i++)
		free(tb_st[i].buf);
	tb_nst = 0;
}

static void tb_commit(void)
{
	for (int i = 0; i < tb_nst; i++)
		tb_copy(tb_st[i].dst, tb_st[i].dpitch, tb_st[i].buf,
			tb_st[i].width, tb_st[i].width, tb_st[i].rows);
	tb_discard();
}

static void tb_prefault(void *host, uint64_t pitch, uint64_t width,
			uint64_t rows)
{
	(void)host;
	tb_log("prefault %llu %llu %llu", (unsigned long long)width,
	       (unsigned long long)rows, (unsigned long long)pitch);
}

#define TB_API(sz) { \
	.abi = GPO_TEST_ABI, \
	.size = (sz), \
	.name = "test (CPU reference)", \
	.start = tb_start, \
	.stop = tb_stop, \
	.memory = tb_memory, \
	.alloc = tb_alloc, \
	.release = tb_release, \
	.to_device = tb_to_device, \
	.to_host = tb_to_host, \
	.run = tb_run, \
	.commit = tb_commit, \
	.discard = tb_discard, \
	.prefault = tb_prefault, \
}
static const struct gpo_backend tb_api = TB_API(sizeof(struct gpo_backend));
static const struct gpo_backend tb_api_base = TB_API(GPO_BACKEND_SIZE_BASE);


__attribute__((visibility("default")))
const struct gpo_backend *gpo_backend_entry(uint32_t abi);
const struct gpo_backend *gpo_backend_entry(uint32_t abi)
{
	const char *s = getenv("GPU_OFFLOAD_TEST_BASE");

	(void)abi;      /* answers its own version; the frontend checks */
	return s && s[0] == '1' ? &tb_api_base : &tb_api;
}
