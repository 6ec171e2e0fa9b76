/* review: the 16 bytes before a run's first byte (where glibc's
 * mmapped-chunk header would be, ahead.c gpo__chunk) are not the
 * program's destination: the engine may not fault reading them. The
 * program's own mapping, the run's first byte 16 bytes into it, the
 * first column gathered, then that first page made a guard region
 * (MADV_GUARD_INSTALL, Linux 6.13: the mapping stays one in
 * /proc/self/maps, but the page faults on any access) and the run goes
 * on above it. Prints "guard: bad B" (B wrong columns above the page),
 * or "guard: skip" where the kernel has no guard regions. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "frontend.h"
#include "pcopy.h"
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
#define N 1024
static double *src;
static int bad;
static void cols(double *dst, int64_t a, int64_t b, int check)
{
	for (int64_t j = a; j < b; j++)
		if (!gpo_pcopy(N, src + j, N, dst + j * N, 1, 8))
			for (int64_t i = 0; i < N; i++) dst[j * N + i] = src[j + i * N];
	for (int64_t j = a; check && j < b; j++)
		for (int64_t i = 0; i < N; i++)
			if (dst[j * N + i] != src[j + i * N]) { bad++; break; }
}
int main(void)
{
	size_t bytes = (size_t)32 << 20, mat = (size_t)N * N * 8;   /* 8 MiB matrix */
	char *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double *dst = (double *)(void *)(m + 16);

	setvbuf(stdout, NULL, _IOLBF, 0);
	src = malloc(mat);
	if (!src || m == MAP_FAILED)
		return 2;
	for (size_t i = 0; i < (size_t)N * N; i++) src[i] = (double)i;
	gpo_pcopy_min_n = N;
	cols(dst, 0, 1, 1);                 /* the run's first job */
	if (madvise(m, 4096, MADV_GUARD_INSTALL) != 0) {
		printf("guard: skip (%s)\n", strerror(errno));
		return 0;
	}
	cols(dst, 1, N, 1);                 /* columns 1..: above the page */
	printf("guard: bad %d\n", bad);
	return bad != 0;
}
