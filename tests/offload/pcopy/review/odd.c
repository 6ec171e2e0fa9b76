/* review: the run's mapping changed ahead of the copy between calls:
 * PROT_NONE guard, munmap'd, read-only, mremap'd: no crash, bytes right;
 * then a fresh run elsewhere: is populate still on (rss ahead)? */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "frontend.h"
#include "pcopy.h"
#define N 2048
static double *src;
static int bad;
static void cols(double *dst, int64_t a, int64_t b)
{
	for (int64_t j = a; j < b; j++)
		if (!gpo_pcopy(N, src + j, N, dst + j * N, 1, 8))
			for (int64_t i = 0; i < N; i++) dst[j * N + i] = src[j + i * N];
	for (int64_t j = a; j < b; j++)
		for (int64_t i = 0; i < N; i++)
			if (dst[j * N + i] != src[j + i * N]) { bad++; return; }
}
static double rss(void *p, size_t len)
{
	unsigned char v[1 << 15]; size_t np = len / 4096; long r = 0;
	if (np > sizeof v || mincore(p, len, v)) return -1;
	for (size_t i = 0; i < np; i++) r += v[i] & 1;
	return r * 4096.0 / (1 << 20);
}
int main(int argc, char **argv)
{
	const char *kind = argc > 1 ? argv[1] : "guard";
	size_t bytes = (size_t)96 << 20, mat = (size_t)N * N * 8;   /* 32 MiB matrix */
	src = malloc(mat);
	for (size_t i = 0; i < (size_t)N * N; i++) src[i] = (double)i;
	gpo_pcopy_min_n = N;
	char *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double *dst = (double *)(void *)m;
	cols(dst, 0, 2);                    /* the run; its mapping cached */
	char *ahead = m + ((size_t)40 << 20);  /* beyond what the first two jobs populated (to ~34 MiB) */
	if (!strcmp(kind, "guard")) mprotect(ahead, (size_t)4 << 20, PROT_NONE);
	else if (!strcmp(kind, "unmap")) munmap(ahead, (size_t)4 << 20);
	else if (!strcmp(kind, "ro")) mprotect(ahead, (size_t)4 << 20, PROT_READ);
	/* the program keeps writing below the changed part */
	cols(dst, 2, N);                    /* writes stay below 32 MiB */
	/* a fresh run somewhere else: populated ahead? */
	char *m2 = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cols((double *)(void *)m2, 0, N);
	printf("%s: bad %d; fresh run: rss %.0f MiB of the 32 MiB matrix + after it %.0f MiB\n", kind, bad,
	       rss(m2, mat), rss(m2 + mat, (size_t)32 << 20));
	return bad != 0;
}
