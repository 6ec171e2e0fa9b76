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
 *   pchuge merged    malloc's own mapping of a large buffer (numpy's
 *                    linearization buffer), with an anonymous mapping
 *                    placed right below and right above it, which the
 *                    kernel merges with it into one mapping
 *   pchuge merged-header  the same layout made by hand: neighbours on
 *                    both sides, the header as malloc writes it
 *   pchuge merged-own  the program's own mapping, a neighbour merged
 *                    below it (nothing tells where its mapping begins)
 *   pchuge vma       gpo_pcopy_anon_vma on kinds of memory: one line
 *                    "vma KIND RESULT" each (RESULT 0 with the exact
 *                    bounds, -1 not private anonymous, BAD wrong bounds)
 *
 * Prints "pchuge: K advised A of B MiB, rss R MiB, C checks, F failed",
 * where A is the MiB of the destination's VMAs flagged hg and R their
 * resident MiB (the gather writes 8; more: populated ahead); exits 1 if a
 * byte was wrong. The merged kinds print before it "neighbours: merged
 * M, advised A MiB, rss R MiB" (M: 1 when the kernel merged them with
 * the destination before the gather). The test (test_pcopy.py) decides
 * what A and R must be.
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

/* map(NULL) between two inaccessible regions, 2 MiB-aligned as the kernel
 * places a large mapping: no neighbour of the same kind can merge with
 * the destination, then or when it is mapped again at the same address
 * ("reuse"), wherever the program's other mappings lie (a merged
 * mapping is the "merged" kinds' case). */
static double *map_alone(void)
{
	size_t hp = (size_t)2 << 20;
	char *r = mmap(NULL, DST_BYTES + 2 * hp, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (r == MAP_FAILED)
		return NULL;
	return map((void *)(((uintptr_t)r + hp) & ~(uintptr_t)(hp - 1)));
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

#define NEIGHBOUR ((size_t)8 << 20)

/* The start of the mapping that holds p (0: not found). */
static uintptr_t mapping_start(uintptr_t p)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	unsigned long a, b;
	uintptr_t at = 0;

	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && p >= a && p < b)
			at = a;
	if (f)
		fclose(f);
	return at;
}

/* Resident MiB of [p, p + len) (page-aligned), by mincore: whatever
 * mappings the kernel merged it into. */
static double resident(const char *p, size_t len)
{
	static unsigned char vec[(64 << 20) / 4096];
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = len / pg, k = 0;

	if (n > sizeof vec || mincore((void *)p, len, vec) != 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		k += vec[i] & 1;
	return (double)(k * pg) / (1 << 20);
}

/* Anonymous private memory of NEIGHBOUR bytes at exactly `at`, or NULL. */
static char *neighbour(uintptr_t at)
{
	void *p = mmap((void *)at, NEIGHBOUR, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p != MAP_FAILED && p != (void *)at) {
		munmap(p, NEIGHBOUR);
		return NULL;
	}
	return p == MAP_FAILED ? NULL : p;
}

/* The source matrix, every element known (gather checks them). */
static double *source(void)
{
	double *src = malloc(sizeof(double) * N * N);

	for (size_t i = 0; src && i < (size_t)N * N; i++)
		src[i] = (double)i * 0.5 + 1;
	return src;
}

/*
 * pchuge merged / merged-header / merged-own: the destination with
 * neighbours merged into its mapping, the gather, then the destination's
 * and the neighbours' flags and residence. merged: malloc's own mapping
 * (the chunk: its first page to the page after its end) and a neighbour
 * mapped right below it, before the source is allocated (so that the
 * address is free: mappings are placed downwards). merged-header: one
 * mapping of a neighbour, the chunk and another neighbour, the chunk's
 * header written as malloc writes it (prev_size 0, size | IS_MMAPPED),
 * so that both sides are certain. merged-own: the program's own mapping
 * and a neighbour below, no header.
 */
static int merged(const char *kind)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), len;
	uintptr_t lo;
	double *dst, *src, mib, rss, nmib, nrss, x;
	char *below = NULL, *above = NULL;
	int joined;

	len = DST_BYTES + pg;
	if (!strcmp(kind, "merged-header")) {
		char *m = mmap(NULL, len + 2 * NEIGHBOUR, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return 2;
		below = m;
		lo = (uintptr_t)m + NEIGHBOUR;
		above = (char *)lo + len;
		((size_t *)lo)[0] = 0;
		((size_t *)lo)[1] = len | 2;
		dst = (double *)(lo + 2 * sizeof(size_t));
	} else if (!strcmp(kind, "merged-own")) {
		dst = map(NULL);
		lo = (uintptr_t)dst;
		len = DST_BYTES;
		below = dst ? neighbour(lo - NEIGHBOUR) : NULL;
	} else {
		dst = malloc(DST_BYTES);
		lo = (uintptr_t)dst & ~(uintptr_t)(pg - 1);
		len = ((uintptr_t)dst + DST_BYTES + pg - 1 - lo) & ~(pg - 1);
		below = dst ? neighbour(lo - NEIGHBOUR) : NULL;
	}
	if (!dst || !below || !(src = source()))
		return 2;
	joined = mapping_start(lo) < lo;
	gather(src, dst);
	nmib = advised((uintptr_t)below, NEIGHBOUR, &x);
	nrss = resident(below, NEIGHBOUR);
	if (above) {
		nmib += advised((uintptr_t)above, NEIGHBOUR, &x);
		nrss += resident(above, NEIGHBOUR);
	}
	mib = advised(lo, len, &x);
	rss = resident((const char *)lo, len);
	printf("neighbours: merged %d, advised %.0f MiB, rss %.1f MiB\n",
	       joined, nmib, nrss);
	printf("pchuge: %s advised %.0f of %zu MiB, rss %.1f MiB, %d checks, %d failed\n",
	       kind, mib, len >> 20, rss, checks, failed);
	if (!strcmp(kind, "merged"))
		free(dst);
	free(src);
	return failed ? 1 : 0;
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
	if (!strncmp(kind, "merged", 6))
		return merged(kind);
	if (!(src = source()) || !(dst = map_alone()))
		return 2;
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
