#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "frontend.h"
#include "pcopy.h"
#define N 1024
int main(void)
{
	double *src = malloc(sizeof(double) * N * N);
	for (size_t i = 0; i < (size_t)N * N; i++) src[i] = (double)i;
	double *dst = malloc((size_t)40 << 20);     /* an mmapped chunk */
	gpo_pcopy_min_n = N;
	for (int64_t j = 0; j < N; j++)
		if (!gpo_pcopy(N, src + j, N, dst + j * N, 1, 8)) return 2;
	double *old = dst;
	dst = realloc(dst, (size_t)80 << 20);
	int bad = 0;
	for (int64_t j = 0; j < N; j++) for (int64_t i = 0; i < N; i++) bad += dst[j * N + i] != src[j + i * N];
	printf("realloc %s, bad %d\n", dst == old ? "in place (mremap)" : "moved", bad);
	return 0;
}
