/*
 * pchuge - the copy engine's huge-page hint (src/offload/pcopy/pcopy.c,
 * gpo__huge) seen from outside: numpy's gather (n columns, each
 * gpo_pcopy(n, src + j, incx = n, dst + j*n, 1)) into a destination of
 * kind K, then the kernel's view of that destination in /proc/self/smaps
 * (the VmFlags "hg": MADV_HUGEPAGE) and every byte of it.
 *
 *   pchuge fresh     a fresh anonymous mapping (what malloc gives numpy)
 *   pchuge touched   the same, every page written before the gather
 *   pchuge reuse     fresh, gathered, unmapped, mapped again at the same
 *                    address and gathered again (numpy's next call)
 *   pchuge file      a shared mapping of a new file (never populated
 *                    beyond what the gather writes)
 *   pchuge vma       gpo_pcopy_anon_vma on kinds of memory: one line
 *                    "vma KIND RESULT" each (RESULT 0 with the exact
 *                    bounds, -1 not private anonymous, BAD wrong bounds)
 *
 * Prints "pchuge: K advised A of B MiB, rss R MiB, C checks, F failed",
 * where A is the MiB of the destination's VMAs flagged hg and R their
 * resident MiB (the gather writes 8; more: populated ahead); exits 1 if a
 * byte was wrong. The test (test_pcopy.py) decides what A and R must be.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "frontend.h"
#include "pcopy.h"

#define N 1024                          /* 8 MiB matrices */
#define DST_BYTES ((size_t)16 << 20)    /* room for the hint's regions ahead */

static int checks, failed;

/* MiB of [lo, lo + len) in VMAs whose VmFlags have "hg", and (*rss) the
 * resident MiB of the VMAs inside it. */
static double advised(uintptr_t lo, size_t len, double *rss)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	uintptr_t a = 0, b = 0;
	double mib = 0;
	unsigned long kb;

	*rss = 0;
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f)) {
		unsigned long x, y;
		int in = a >= lo && b <= lo + len;
		if (sscanf(line, "%lx-%lx ", &x, &y) == 2) {
			a = x;
			b = y;
		} else if (in && sscanf(line, "Rss: %lu kB", &kb) == 1) {
			*rss += (double)kb / 1024;
		} else if (!strncmp(line, "VmFlags:", 8) && strstr(line, " hg")) {
			uintptr_t s = a > lo ? a : lo;
			uintptr_t e = b < lo + len ? b : lo + len;
			if (e > s)
				mib += (double)(e - s) / (1 << 20);
		}
	}
	fclose(f);
	return mib;
}

static void gather(const double *src, double *dst)
{
	for (int64_t j = 0; j < N; j++)
		if (!gpo_pcopy(N, src + j, N, dst + j * N, 1, 8))
			for (int64_t i = 0; i < N; i++)
				dst[j * N + i] = src[j + i * N];
	for (int64_t j = 0; j < N; j++)
		for (int64_t i = 0; i < N; i++) {
			if (dst[j * N + i] != src[j + i * N]) {
				failed++;
				printf("FAIL: element %lld of column %lld\n",
				       (long long)i, (long long)j);
				return;
			}
		}
	checks++;
}

static int fd = -1;      /* pchuge file: the file mapped */

static double *map(void *at)
{
	void *p = mmap(at, DST_BYTES, PROT_READ | PROT_WRITE,
		       (fd >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS) |
		       (at ? MAP_FIXED : 0), fd, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* gpo_pcopy_anon_vma at p + off, p's mapping [p, p + len) (len 0:
 * bounds not checked). */
static void vma(const char *what, void *p, size_t off, size_t len)
{
	uintptr_t lo = 0, hi = 0;
	int heap = 0, rc = gpo_pcopy_anon_vma((uintptr_t)p + off, &lo, &hi, &heap);

	if (rc == 0 && len && (lo != (uintptr_t)p || hi != (uintptr_t)p + len))
		printf("vma %s BAD %#lx-%#lx\n", what, (unsigned long)lo,
		       (unsigned long)hi);
	else
		printf("vma %s %d%s\n", what, rc, heap ? "h" : "");
}

static int vmas(void)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = 64 * pg;
	char *anon = mmap(NULL, len + 2 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	FILE *t = tmpfile();
	char *file, *ro, *shared;

	if (anon == MAP_FAILED || !t || ftruncate(fileno(t), (off_t)len) != 0)
		return 2;
	/* guard pages either side, so the kernel merges nothing into it */
	mprotect(anon + pg, len, PROT_READ | PROT_WRITE);
	vma("anon", anon + pg, 5 * pg + 8, len);
	vma("guard", anon, 8, 0);
	file = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fileno(t), 0);
	vma("file-private", file, 8, 0);
	shared = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	vma("anon-shared", shared, 8, 0);
	ro = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	vma("anon-readonly", ro, 8, 0);
	/* the frame, not a local: ASan may keep locals on a fake stack
	 * (detect_stack_use_after_return), which is anonymous memory */
	vma("stack", __builtin_frame_address(0), 0, 0);
	{
		char *h = malloc(64);
		vma("heap", h, 0, 0);
		free(h);
	}
	munmap(anon, len + 2 * pg);
	vma("unmapped", anon + pg, 8, 0);
	return 0;
}

int main(int argc, char **argv)
{
	const char *kind = argc > 1 ? argv[1] : "fresh";
	double *src, *dst;
	double mib, rss;

	setvbuf(stdout, NULL, _IOLBF, 0);
	gpo_pcopy_min_n = N;
	if (!strcmp(kind, "vma"))
		return vmas();
	if (!strcmp(kind, "file")) {
		FILE *t = tmpfile();
		if (!t || (fd = dup(fileno(t))) < 0 || ftruncate(fd, DST_BYTES) != 0)
			return 2;
	}
	src = malloc(sizeof(double) * N * N);
	if (!src || !(dst = map(NULL)))
		return 2;
	for (size_t i = 0; i < (size_t)N * N; i++)
		src[i] = (double)i * 0.5 + 1;
	if (!strcmp(kind, "touched"))
		memset(dst, 0x5a, DST_BYTES);
	gather(src, dst);
	if (!strcmp(kind, "reuse")) {
		munmap(dst, DST_BYTES);
		if (map(dst) != dst)
			return 2;
		gather(src, dst);
	}
	mib = advised((uintptr_t)dst, DST_BYTES, &rss);
	printf("pchuge: %s advised %.0f of %zu MiB, rss %.1f MiB, %d checks, %d failed\n",
	       kind, mib, DST_BYTES >> 20, rss, checks, failed);
	return failed ? 1 : 0;
}
