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
 *
 * Prints "pchuge: K advised A of B MiB, C checks, F failed", where A is
 * the MiB of the destination's VMAs flagged hg; exits 1 if a byte was
 * wrong. The test (test_pcopy.py) decides what A must be.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "frontend.h"
#include "pcopy.h"

void gpo_msg_once(int kind, const char *fmt, ...)
{
	va_list ap;

	(void)kind;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

#define N 1024                          /* 8 MiB matrices */
#define DST_BYTES ((size_t)16 << 20)    /* room for the hint's regions ahead */

static int checks, failed;

/* MiB of [lo, lo + len) in VMAs whose VmFlags have "hg". */
static double advised(uintptr_t lo, size_t len)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	uintptr_t a = 0, b = 0;
	double mib = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof line, f)) {
		unsigned long x, y;
		if (sscanf(line, "%lx-%lx ", &x, &y) == 2) {
			a = x;
			b = y;
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

static double *map(void *at)
{
	void *p = mmap(at, DST_BYTES, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

int main(int argc, char **argv)
{
	const char *kind = argc > 1 ? argv[1] : "fresh";
	double *src = malloc(sizeof(double) * N * N), *dst;
	double mib;

	setvbuf(stdout, NULL, _IOLBF, 0);
	gpo_pcopy_min_n = N;
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
	mib = advised((uintptr_t)dst, DST_BYTES);
	printf("pchuge: %s advised %.0f of %zu MiB, %d checks, %d failed\n", kind,
	       mib, DST_BYTES >> 20, checks, failed);
	return failed ? 1 : 0;
}
